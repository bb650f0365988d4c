"""The query path of spec/retrieval.md, step by step, on the fixture folder (SQLite and PostgreSQL).

The folder goes through the real pipeline (hashing embedder, embedded index).
The project is granted to the group team:miete, whose member is anna; bob has
no grant; role:admin is an administrator.
"""

from __future__ import annotations

import pytest
from sqlalchemy import event, select, text, update

from ki_core.grants import GrantTarget, bump_access_generation, grant, replace_group_members, revoke
from ki_core.models import GrantEffect
from ki_core.llm import ChatGateway, GatewayError
from ki_core.models import ObservationState, SourceObservation
from ki_core.search.index import IndexOp
from ki_core.search.types import IndexChunk, SearchFilters
from ki_query.text_match import EXCERPT_CHARS
from ki_query.types import InvalidFilters, SearchRequest, WindowTooDeep, parse_filters
from tests.fake_chat_gateway import FakeChatGateway, fake_gateway  # noqa: F401 - fixture
from tests.ki_query.retrieval_fixtures import (  # noqa: F401 - fixtures
    ADMIN,
    GROUP,
    MEMBER,
    PROJECT,
    FolderWorld,
    ctx,
    database_url,
    folder,
    folder_world,
    fresh_world,
)

CASE_NUMBER = "VIII ZR 182/06"


def keys(response) -> list[str]:
    return [hit.citation.document.key for hit in response.hits]


# ------------------------------------------------------------------ 1. scope


def test_a_caller_without_grants_gets_nothing_and_every_leg_runs_under_match_none(folder_world: FolderWorld) -> None:
    service, index, _ = folder_world.service()
    response = service.search(SearchRequest(query="Mietvertrag Haftung"), ["bob"])
    assert response.hits == () and not response.has_more
    [request] = index.requests
    assert request.scope.match_none
    assert request.legs_to_send() == ["semantic"]  # text legs are not even sent


def test_the_scope_is_compiled_before_ranking_and_narrowed_by_the_project_filter(folder_world: FolderWorld) -> None:
    service, index, _ = folder_world.service()
    response = service.search(
        SearchRequest(query="Mietvertrag", filters=SearchFilters(project_id=folder_world.project_id)), [MEMBER]
    )
    assert response.hits
    assert index.requests[0].scope.project_ids == {folder_world.project_id}
    elsewhere = service.search(SearchRequest(query="Mietvertrag", filters=SearchFilters(project_id="other")), [MEMBER])
    assert elsewhere.hits == () and index.requests[1].scope.match_none


# ------------------------------------------------------------------ 2, 3. one embedding, one multi-search


def test_one_embedding_call_and_one_multi_search_at_one_depth_whatever_the_page(folder_world: FolderWorld) -> None:
    """amendments.md 2: the depth of the deepest window for every page, so pages slice one ranking."""
    service, index, embedder = folder_world.service()
    for offset, limit in [(0, 8), (0, 20), (400, 10), (400, 100)]:
        service.search(SearchRequest(query="Heizung", offset=offset, limit=limit), [MEMBER])
    assert embedder.queries == 4
    assert [r.size for r in index.requests] == [2500, 2500, 2500, 2500]


def test_a_window_deeper_than_500_raises_before_any_work(folder_world: FolderWorld) -> None:
    service, index, embedder = folder_world.service()
    with pytest.raises(WindowTooDeep, match="501"):
        service.search(SearchRequest(query="Heizung", offset=400, limit=101), [MEMBER])
    assert embedder.queries == 0 and index.requests == []
    assert service.search(SearchRequest(query="Heizung", offset=400, limit=100), [MEMBER]).hits == ()


def test_filters_no_row_can_carry_are_refused(folder_world: FolderWorld) -> None:
    service, _, embedder = folder_world.service()
    with pytest.raises(InvalidFilters, match="version_status"):
        service.search(SearchRequest(query="x", filters=SearchFilters(version_status="signed")), [MEMBER])
    with pytest.raises(InvalidFilters, match="date_from"):
        parse_filters({"date_from": "2024-05-01", "date_to": "2024-01-01"})
    with pytest.raises(InvalidFilters, match="colour"):
        parse_filters({"colour": "red"})
    assert embedder.queries == 0


# ------------------------------------------------------------------ 4, 5. RRF and boost


def test_each_score_is_rrf_of_the_leg_ranks_times_the_version_status_boost(folder_world: FolderWorld) -> None:
    service, _, _ = folder_world.service(rerank_enabled=False)
    settings = service.settings.retrieval
    weights = {"lexical": settings.weight_lexical, "semantic": settings.weight_semantic,
               "identifier": settings.weight_identifier}
    response = service.search(SearchRequest(query="Mietvertrag Haftung Heizung", limit=10, explain=True), [MEMBER])
    assert response.hits
    for hit in response.hits:
        explained = hit.explain
        expected = sum(weights[leg] / (settings.fusion_rrf_k + r.rank) for leg, r in explained.legs.items())
        assert explained.fused_score == pytest.approx(expected)
        assert explained.boost == settings.version_status_boost[hit.version_status]
        assert hit.score == pytest.approx(explained.fused_score * explained.boost)
    assert [h.score for h in response.hits] == sorted((h.score for h in response.hits), reverse=True)


def test_a_pasted_case_number_ranks_its_document_first_through_the_identifier_leg(folder_world: FolderWorld) -> None:
    service, _, _ = folder_world.service()
    response = service.search(SearchRequest(query=f"Urteil {CASE_NUMBER} Minderung", explain=True), [MEMBER])
    first = response.hits[0]
    assert first.citation.document.key == "schreiben-heizung"
    assert first.matched_identifiers == (CASE_NUMBER,)
    assert "identifier" in first.explain.legs
    assert all(CASE_NUMBER not in hit.matched_identifiers for hit in response.hits[1:])


# ------------------------------------------------------------------ 6. re-verification and citations


def test_the_executed_version_wins_the_collapse_over_final_and_draft(folder_world: FolderWorld) -> None:
    service, _, _ = folder_world.service()
    response = service.search(SearchRequest(query="Mietvertrag über Gewerberäume Vertragsnummer", limit=10), [MEMBER])
    assert keys(response).count("mietvertrag") == 1
    contract = next(h for h in response.hits if h.citation.document.key == "mietvertrag")
    assert contract.version_id == folder_world.version("mietvertrag/v3").id
    assert contract.version_status == "executed"
    assert len(set(keys(response))) == len(response.hits)


def test_without_collapse_a_document_shows_up_to_max_chunks_per_document(folder_world: FolderWorld) -> None:
    service, _, _ = folder_world.service(collapse_per_document=False, max_chunks_per_document=2)
    response = service.search(SearchRequest(query="Mietvertrag Gewerberäume Haftung Schriftform", limit=50), [MEMBER])
    counts = {key: keys(response).count(key) for key in keys(response)}
    assert counts["mietvertrag"] == 2
    assert max(counts.values()) <= 2


def test_citations_name_project_document_version_sources_and_a_bounded_excerpt(folder_world: FolderWorld) -> None:
    service, _, _ = folder_world.service()
    hit = service.search(SearchRequest(query="Haftung der Vermieterin leichte Fahrlässigkeit"), [MEMBER]).hits[0]
    citation = hit.citation
    assert (citation.project.name, citation.document.key, citation.version.label) == (PROJECT, "mietvertrag", "v3")
    assert citation.version.status == "executed" and str(citation.version.doc_date) == "2024-03-28"
    assert [s.external_id for s in citation.source_objects] == ["vertrag/v3-unterzeichnet.txt"]
    assert citation.source_objects[0].source_kind == "local_fs"
    assert "Haftung" in citation.excerpt and len(citation.excerpt) <= EXCERPT_CHARS + 2
    if hit.chunk_kind == "clause":
        assert citation.locus == "§ 3"


def test_explain_names_the_grant_path_that_made_the_version_visible(folder_world: FolderWorld) -> None:
    service, _, _ = folder_world.service()
    hit = service.search(SearchRequest(query="Heizung", explain=True), [MEMBER]).hits[0]
    [path] = hit.explain.grant_paths
    assert (path.scope, path.target_id, path.principal, path.via) == (
        "project", folder_world.project_id, GROUP, (MEMBER, GROUP)
    )
    assert "delegates to local grants" in hit.explain.access and GROUP in hit.explain.access
    admin_hit = service.search(SearchRequest(query="Heizung", explain=True), [ADMIN]).hits[0]
    assert admin_hit.explain.grant_paths == () and admin_hit.explain.access.startswith("admin")
    assert service.search(SearchRequest(query="Heizung"), [MEMBER]).hits[0].explain is None


def test_reverification_drops_a_version_sql_no_longer_shows_although_the_index_still_has_it(
    fresh_world: FolderWorld,
) -> None:
    executed = fresh_world.version("mietvertrag/v3")
    service, _, _ = fresh_world.service()
    query = SearchRequest(query="Mietvertrag über Gewerberäume Vertragsnummer", limit=10)
    assert executed.id in {h.version_id for h in service.search(query, [MEMBER]).hits}
    with fresh_world.ctx.sessions() as session, session.begin():  # behind the pipeline's back: no reindex
        session.execute(
            update(SourceObservation).where(SourceObservation.version_id == executed.id)
            .values(state=ObservationState.DELETED)
        )
        bump_access_generation(session)
    for caller in ([MEMBER], [ADMIN]):
        hits = service.search(query, caller).hits
        assert executed.id not in {h.version_id for h in hits}
        contract = [h for h in hits if h.citation.document.key == "mietvertrag"]
        assert [h.version_id for h in contract] == [fresh_world.version("mietvertrag/v2").id]


class ScopeCompiledBefore:
    """An access service that hands out one scope compiled earlier: the moment between a search's
    compile and its verification, held open, in which an access change lands."""

    def __init__(self, inner, scope) -> None:
        self.inner, self.scope = inner, scope

    def compile_scope(self, *_args, **_kwargs):
        return self.scope

    def __getattr__(self, name: str):
        return getattr(self.inner, name)


def test_a_membership_removed_after_the_scope_was_compiled_hides_the_hits(fresh_world: FolderWorld) -> None:
    """Verification reads the access generation with the chunks; a scope expanded before the change is
    not trusted: anna's principals are expanded anew and she no longer is in team:miete."""
    service, _, _ = fresh_world.service()
    query = SearchRequest(query="Mietvertrag über Gewerberäume Vertragsnummer", limit=10)
    service.access = ScopeCompiledBefore(service.access, service.access.compile_scope([MEMBER]))
    assert service.search(query, [MEMBER]).hits  # the same scope, no change yet: anna sees the project
    with fresh_world.ctx.sessions() as session, session.begin():
        replace_group_members(session, fresh_world.source_id, GROUP, [], settings=fresh_world.ctx.settings)
    assert service.search(query, [MEMBER]).hits == ()


def test_a_caller_added_to_the_group_after_their_empty_scope_was_cached_finds_the_project_next_time(
    fresh_world: FolderWorld,
) -> None:
    """The ranked search takes the cached scope unchecked; with no candidate to verify it still reads the
    generation, sees the change, and runs again on a scope compiled for it."""
    service, index, _ = fresh_world.service()
    query = SearchRequest(query="Mietvertrag über Gewerberäume Vertragsnummer", limit=10)
    assert service.search(query, ["bob"]).hits == ()
    with fresh_world.ctx.sessions() as session, session.begin():
        replace_group_members(session, fresh_world.source_id, GROUP, [MEMBER, "bob"], settings=fresh_world.ctx.settings)
    index.requests.clear()
    hits = service.search(query, ["bob"]).hits
    assert {h.citation.document.key for h in hits} >= {"mietvertrag"}
    assert [r.scope.match_none for r in index.requests] == [True, False]  # the cached scope, then the new one


def test_a_document_allowed_after_the_scope_was_cached_is_found_by_the_very_next_search(fresh_world: FolderWorld) -> None:
    """The cached filter excludes the denied document; verification's generation differs, so the search runs
    again on a fresh scope instead of answering from legs that could not have found it."""
    contract = fresh_world.documents["mietvertrag"]
    with fresh_world.ctx.sessions() as session, session.begin():
        grant(session, GrantTarget.document(contract.id), MEMBER, effect=GrantEffect.DENY, settings=fresh_world.ctx.settings)
    service, index, _ = fresh_world.service()
    query = SearchRequest(query="Mietvertrag über Gewerberäume Vertragsnummer", limit=10)
    assert "mietvertrag" not in keys(service.search(query, [MEMBER]))
    with fresh_world.ctx.sessions() as session, session.begin():
        revoke(session, GrantTarget.document(contract.id), MEMBER, effect=GrantEffect.DENY, settings=fresh_world.ctx.settings)
    index.requests.clear()
    assert "mietvertrag" in keys(service.search(query, [MEMBER]))
    stale, fresh = (r.scope for r in index.requests)
    assert not stale.admits(fresh_world.project_id, contract.id) and fresh.admits(fresh_world.project_id, contract.id)


def test_searches_end_their_reads_with_commit_so_postgresql_keeps_the_prepared_verification(
    folder_world: FolderWorld,
) -> None:
    """psycopg prepares a statement after five runs on a connection and forgets all of them on ROLLBACK:
    with reads that rolled back, PostgreSQL planned the verification statement on every search."""
    service, _, _ = folder_world.service()
    engine = folder_world.ctx.engine
    ended: list[str] = []
    listeners = {name: (lambda _conn, name=name: ended.append(name)) for name in ("commit", "rollback")}
    for name, listener in listeners.items():
        event.listen(engine, name, listener)
    try:
        for query in ["Mietvertrag", "Heizung", "Haftung", "Kaution", "Schreiben", "Vertrag", "Miete", "Anlage"]:
            assert service.search(SearchRequest(query=query), [MEMBER]).hits
    finally:
        for name, listener in listeners.items():
            event.remove(engine, name, listener)
    assert "rollback" not in ended and ended.count("commit") >= 8
    if engine.dialect.name == "postgresql":
        with folder_world.ctx.sessions() as session:
            prepared = session.scalars(text("SELECT statement FROM pg_prepared_statements")).all()
        assert any("cited_observation" in statement for statement in prepared)


def test_reverification_drops_index_rows_that_disagree_with_sql(fresh_world: FolderWorld) -> None:
    annex = fresh_world.documents["anlage-1"]
    letter = fresh_world.version("schreiben-heizung/v1")
    with fresh_world.ctx.sessions() as session:
        from ki_core.models import Chunk

        letter_chunk = session.scalar(select(Chunk.id).where(Chunk.version_id == letter.id, Chunk.ordinal == 0))
    forged = [
        # The letter's real chunk id, but claimed for the annex document.
        _chunk(letter_chunk, annex.id, letter.id, fresh_world.project_id),
        # A chunk id SQL has never seen.
        _chunk(123_456_789, annex.id, fresh_world.version("anlage-1/v1").id, fresh_world.project_id),
    ]
    fresh_world.ctx.index().bulk([IndexOp(c) for c in forged])
    service, _, _ = fresh_world.service()
    hits = service.search(SearchRequest(query="Geheimtext Tresorraum", limit=20), [ADMIN]).hits
    assert not {h.chunk_id for h in hits} & {letter_chunk, 123_456_789}


def _chunk(chunk_id: int, document_id: str, version_id: str, project_id: str) -> IndexChunk:
    from ki_core.embedding import HashingEmbedder

    text = "Geheimtext Tresorraum"
    vector = HashingEmbedder(dimensions=64).embed_passages([text])[0]
    return IndexChunk(
        chunk_id=chunk_id, text=text, embedding=tuple(vector.astype(float).tolist()), project_id=project_id,
        document_id=document_id, document_version_id=version_id, version_status="final",
    )


# ------------------------------------------------------------------ 7. rerank


def _rerank_service(world: FolderWorld, gateway: FakeChatGateway):
    chat = ChatGateway(base_url=gateway.base_url, model="chat", max_retries=0, backoff_seconds=0)
    return world.service(rerank_enabled=True, rerank_provider="gateway", rerank_model="rerank-model", gateway=chat)


def test_the_reranker_orders_the_prefix_and_never_drops_a_hit(
    folder_world: FolderWorld, fake_gateway: FakeChatGateway
) -> None:
    plain, _, _ = folder_world.service(rerank_enabled=False)
    request = SearchRequest(query="Mietvertrag Heizung Grundriss", limit=10)
    fused = plain.search(request, [MEMBER]).hits
    assert len(fused) == 3
    fake_gateway.answer_json({"scores": [{"id": "d3", "score": 9}, {"id": "d1", "score": 2}]})
    service, _, embedder = _rerank_service(folder_world, fake_gateway)
    reranked = service.search(request, [MEMBER]).hits
    assert [h.version_id for h in reranked] == [fused[2].version_id, fused[0].version_id, fused[1].version_id]
    assert [h.score for h in reranked[:2]] == [9.0, 2.0]
    assert reranked[2].score == fused[1].score  # unscored: keeps its fused score and place after the scored
    [call] = fake_gateway.requests
    assert call["body"]["model"] == "rerank-model"
    assert embedder.queries == 1


def test_a_gateway_error_fails_the_query_instead_of_returning_the_fused_order(
    folder_world: FolderWorld, fake_gateway: FakeChatGateway
) -> None:
    fake_gateway.answer(500, b'{"error": "down"}')
    service, _, _ = _rerank_service(folder_world, fake_gateway)
    with pytest.raises(GatewayError):
        service.search(SearchRequest(query="Mietvertrag"), [MEMBER])


@pytest.mark.parametrize("retrieval", [{}, {"rerank_enabled": False}], ids=["offline reranker", "reranking off"])
def test_with_the_offline_reranker_or_none_no_llm_call_happens(
    folder_world: FolderWorld, fake_gateway: FakeChatGateway, retrieval: dict
) -> None:
    chat = ChatGateway(base_url=fake_gateway.base_url, model="chat", max_retries=0)
    service, _, _ = folder_world.service(gateway=chat, **retrieval)
    assert service.search(SearchRequest(query="Mietvertrag"), [MEMBER]).hits
    assert fake_gateway.requests == []


# ------------------------------------------------------------------ 8. the window


def test_pages_are_slices_of_one_ranking(folder_world: FolderWorld) -> None:
    service, _, _ = folder_world.service(collapse_per_document=False, max_chunks_per_document=50)
    query = "Mietvertrag Haftung Heizung Grundriss Schriftform"
    whole = service.search(SearchRequest(query=query, limit=30), [MEMBER])
    pages = [service.search(SearchRequest(query=query, offset=o, limit=4), [MEMBER]) for o in range(0, 30, 4)]
    assert [h.chunk_id for p in pages for h in p.hits] == [h.chunk_id for h in whole.hits]
    assert pages[0].has_more and len(whole.hits) > 4


def test_each_step_is_timed_on_the_response(folder_world: FolderWorld) -> None:
    service, _, _ = folder_world.service()
    timings = service.search(SearchRequest(query="Heizung"), [MEMBER]).timings
    steps = [timings.scope, timings.embed, timings.legs, timings.fusion, timings.verify, timings.collapse, timings.rerank]
    assert all(t > 0 for t in steps)
    assert timings.total >= sum(steps)
    off, _, _ = folder_world.service(rerank_enabled=False)
    assert off.search(SearchRequest(query="Heizung"), [MEMBER]).timings.rerank == 0


# ------------------------------------------------------------------ metadata-only search


def test_search_filter_embeds_nothing_and_lists_visible_versions_newest_first(folder_world: FolderWorld) -> None:
    service, index, embedder = folder_world.service()
    response = service.search_filter(SearchFilters(project_id=folder_world.project_id), [MEMBER], 0, 20)
    assert embedder.queries == 0 and index.requests == []
    labels = [f"{h.citation.document.key}/{h.citation.version.label or 'v1'}" for h in response.hits]
    # The letter is dated by its own date line (3 June 2024); the annex has no date and comes last.
    assert labels == ["schreiben-heizung/v1", "mietvertrag/v3", "mietvertrag/v2", "mietvertrag/v1", "anlage-1/v1"]
    assert all(h.score == 0 for h in response.hits)
    assert len({h.version_id for h in response.hits}) == len(response.hits)
    page = service.search_filter(SearchFilters(), [MEMBER], offset=1, limit=2)
    assert [h.version_id for h in page.hits] == [h.version_id for h in response.hits[1:3]] and page.has_more
    assert service.search_filter(SearchFilters(), ["bob"], 0, 20).hits == ()
    executed = service.search_filter(SearchFilters(version_status="executed"), [MEMBER], 0, 20)
    assert [h.version_status for h in executed.hits] == ["executed"]


def test_search_filter_skips_versions_sql_hides_without_shortening_the_page(fresh_world: FolderWorld) -> None:
    draft = fresh_world.version("mietvertrag/v1")
    with fresh_world.ctx.sessions() as session, session.begin():
        session.execute(
            update(SourceObservation).where(SourceObservation.version_id == draft.id).values(state=ObservationState.DELETED)
        )
        bump_access_generation(session)
    service, _, _ = fresh_world.service()
    response = service.search_filter(SearchFilters(), [MEMBER], offset=2, limit=2)
    labels = [f"{h.citation.document.key}/{h.citation.version.label or 'v1'}" for h in response.hits]
    assert labels == ["mietvertrag/v2", "anlage-1/v1"], "the hidden draft between them does not shorten the page"
