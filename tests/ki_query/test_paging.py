"""Ranked pages slice one ranking (amendments.md 2): for one query, caller and unchanged index,
the page at any offset and limit inside the 500 window is the same slice of the same list.

The corpus is 3,200 real BGB Absätze (tests/fixtures/bgb-absaetze.jsonl.gz), one document per
section in two projects, so every leg has far more candidates than its smallest depth (50):
a depth that followed the page would rank page 2 from another candidate set than page 1.
"""

from __future__ import annotations

import gzip
import json
import random
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy.orm import Session

from ki_core import grants
from ki_core.config import Settings
from ki_core.embedding import HashingEmbedder
from ki_core.models import Chunk, ChunkKind, Document, DocumentVersion, SourceObservation, VersionStatus
from ki_core.search.index import IndexOp, SearchIndex
from ki_core.search.types import MAX_RANKED_WINDOW, IndexChunk
from ki_query.retrieval import RetrievalService
from ki_query.scope import AccessService
from ki_query.types import SearchRequest
from tests.ki_core.search.backends import CONTRACT_BACKENDS, store_beside_index
from tests.ki_query.sql_world import SqlWorld

CORPUS = Path(__file__).parents[1] / "fixtures" / "bgb-absaetze.jsonl.gz"
DIMENSIONS = 32
CALLER = ["alice"]
STATUSES = [VersionStatus.FINAL, VersionStatus.EXECUTED, VersionStatus.DRAFT]


def absaetze() -> list[dict]:
    with gzip.open(CORPUS, "rt", encoding="utf-8") as lines:
        return [json.loads(line) for line in lines]


def vocabulary(rows: list[dict], size: int = 300) -> list[str]:
    """Frequent long words of the corpus itself: queries that match many sections."""
    counts = Counter(w for r in rows for w in set(re.findall(r"[a-zäöüß]{7,}", r["text"].lower())))
    return [word for word, n in counts.most_common(size) if n >= 10]


@dataclass
class PagingWorld:
    service: RetrievalService
    words: list[str]
    chunks: int
    # The same index and database with reranking off: the fused order the reranker starts from.
    fused: RetrievalService


def build(session: Session, index: SearchIndex, rows: list[dict]) -> int:
    """Documents (one per section, its Absätze as chunks), written in a few flushes, and indexed."""
    world = SqlWorld(session, Settings())
    rng = random.Random(7)
    projects = [world.project("bgb-a"), world.project("bgb-b")]
    sections: dict[str, list[dict]] = {}
    for row in rows:
        sections.setdefault(row["section"], []).append(row)
    documents = {
        section: Document(project_id=projects[n % 2].id, key=f"bgb-{n}", title=f"{section} BGB {parts[0]['heading'] or ''}")
        for n, (section, parts) in enumerate(sections.items())
    }
    session.add_all(documents.values())
    session.flush()
    versions = {
        section: DocumentVersion(document_id=documents[section].id, seq=1, version_label="v1",
                                 status=rng.choice(STATUSES), content_hash=section, language="de")
        for section in sections
    }  # fmt: skip
    session.add_all(versions.values())
    session.flush()
    for section, version in versions.items():
        if version.status != VersionStatus.DRAFT:
            documents[section].latest_final_version_id = version.id
    objects = {section: world.object(f"obj-{n}", "fs") for n, section in enumerate(sections)}
    session.add_all(SourceObservation(version_id=versions[s].id, source_object_id=objects[s].id) for s in sections)
    chunk_id, ops = 10_000, []
    embedder = HashingEmbedder(dimensions=DIMENSIONS)
    for section, parts in sections.items():
        version, document = versions[section], documents[section]
        vectors = embedder.embed_passages([p["text"] for p in parts])
        for ordinal, (part, vector) in enumerate(zip(parts, vectors, strict=True)):
            chunk_id += 1
            session.add(Chunk(id=chunk_id, version_id=version.id, document_id=document.id, kind=ChunkKind.CHUNK,
                              ordinal=ordinal, text=part["text"], text_hash=str(chunk_id)))  # fmt: skip
            ops.append(IndexOp(IndexChunk(
                chunk_id=chunk_id, text=part["text"], embedding=tuple(float(x) for x in vector),
                project_id=document.project_id, document_id=document.id, document_version_id=version.id,
                version_status=str(version.status), chunk_kind="chunk", language="de",
            )))  # fmt: skip
    session.flush()
    for project in projects:
        world.allow(CALLER[0], project=project.name)
    grants.bump_access_generation(session)
    session.commit()
    index.bulk(ops)
    index.refresh()
    return len(ops)


@pytest.fixture(scope="module", params=CONTRACT_BACKENDS)
def paging_world(
    request: pytest.FixtureRequest, sqlite_template: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PagingWorld]:
    with store_beside_index(request.param, sqlite_template, tmp_path_factory.mktemp("paging"), DIMENSIONS) as (session, index):
        rows = absaetze()
        chunks = build(session, index, rows)
        # Module-scoped: built before the autouse fixture leaves the developer's config.json behind,
        # so the reranker is named explicitly (its default is pinned in tests/ki_query/rerank).
        settings_ = Settings(retrieval={"rerank_enabled": True, "rerank_provider": "offline"})
        service = RetrievalService(settings_, session, index, HashingEmbedder(dimensions=DIMENSIONS),
                                   AccessService(session, settings_))  # fmt: skip
        off = Settings(retrieval={"rerank_enabled": False})
        fused = RetrievalService(off, session, index, HashingEmbedder(dimensions=DIMENSIONS), AccessService(session, off))
        yield PagingWorld(service, vocabulary(rows), chunks, fused)


def ranking(world: PagingWorld, query: str, window: int) -> list[tuple[int, float]]:
    response = world.service.search(SearchRequest(query=query, limit=window), CALLER)
    return [(hit.chunk_id, hit.score) for hit in response.hits]


def page(world: PagingWorld, query: str, offset: int, limit: int) -> list[tuple[int, float]]:
    response = world.service.search(SearchRequest(query=query, offset=offset, limit=limit), CALLER)
    return [(hit.chunk_id, hit.score) for hit in response.hits]


def test_the_corpus_is_far_deeper_than_the_shallowest_leg(paging_world: PagingWorld) -> None:
    assert paging_world.chunks >= 3_000
    assert len(ranking(paging_world, "Vertrag Schuldner", MAX_RANKED_WINDOW)) == MAX_RANKED_WINDOW


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_consecutive_pages_concatenate_to_the_ranking(paging_world: PagingWorld, data: st.DataObject) -> None:
    words = data.draw(st.lists(st.sampled_from(paging_world.words), min_size=1, max_size=3, unique=True))
    query = " ".join(words)
    limit = data.draw(st.integers(min_value=1, max_value=60), label="limit")
    pages = data.draw(st.integers(min_value=2, max_value=MAX_RANKED_WINDOW // limit), label="pages")
    pages = min(pages, 8)
    start = data.draw(st.integers(min_value=0, max_value=MAX_RANKED_WINDOW - limit * pages), label="start")
    whole = ranking(paging_world, query, MAX_RANKED_WINDOW)
    joined = [hit for n in range(pages) for hit in page(paging_world, query, start + n * limit, limit)]
    assert joined == whole[start : start + limit * pages]


def test_the_first_pages_of_statute_questions_slice_one_ranking(paging_world: PagingWorld) -> None:
    questions = [
        "Kündigungsfrist Mietvertrag", "Haftung des Schuldners für Verzug", "Rücktritt vom Kaufvertrag",
        "Anfechtung wegen Irrtums", "Verjährung der Ansprüche", "Schadensersatz statt der Leistung",
        "Minderung des Kaufpreises", "Bürgschaft Einrede der Vorausklage", "Werkvertrag Abnahme",
        "Darlehensvertrag Kündigung", "Geschäftsführung ohne Auftrag", "ungerechtfertigte Bereicherung",
        "Eigentumsvorbehalt", "Vollmacht Vertreter ohne Vertretungsmacht", "Sittenwidrigkeit Wucher",
        "Gewährleistung Sachmangel", "Reisevertrag Mangel", "Schenkung Widerruf grober Undank",
        "Mietminderung", "Pfandrecht des Vermieters",
    ]  # fmt: skip
    for question in questions:
        whole = ranking(paging_world, question, 40)
        pages = [hit for offset in range(0, 40, 8) for hit in page(paging_world, question, offset, 8)]
        assert pages == whole, question


def test_the_offline_reranker_only_reorders_the_first_10(paging_world: PagingWorld) -> None:
    """amendments.md 3: the pages above are the default's, reranked; here the order it starts from. The
    same hits, nothing past the prefix moved, the model's score beside the fused one in explain, and
    `score` still descending on the fused scale."""
    moved = 0
    for question in ["Kündigungsfrist Mietvertrag", "Haftung des Schuldners für Verzug", "Verjährung der Ansprüche"]:
        request = SearchRequest(query=question, limit=40, explain=True)
        fused = paging_world.fused.search(request, CALLER).hits
        reranked = paging_world.service.search(request, CALLER).hits
        assert len(fused) == 40
        assert sorted(h.chunk_id for h in reranked) == sorted(h.chunk_id for h in fused)
        assert [h.chunk_id for h in reranked[10:]] == [h.chunk_id for h in fused[10:]]
        assert all(h.explain.rerank_score is not None for h in reranked[:10])
        assert all(h.explain.rerank_score is None for h in reranked[10:])
        assert [h.score for h in reranked] == [h.score for h in fused]
        moved += [h.chunk_id for h in reranked[:10]] != [h.chunk_id for h in fused[:10]]
    assert moved >= 2
