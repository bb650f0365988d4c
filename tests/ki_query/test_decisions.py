"""Decision records: term search in the database's text index, returned only when ALL evidence is visible (SQLite and PostgreSQL)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError
from sqlalchemy import event, func, select
from sqlalchemy.orm import Session

from ki_core.models import DecisionEvidence, DecisionRecord
from ki_query.decisions import VERIFY_BATCH_FACTOR
from ki_query.retrieval import RetrievalService
from ki_query.types import DecisionEvidenceRef, InvalidDecision, NewDecision
from tests.ki_query.sql_world import SqlWorld

HAFTUNG = dict(locus="§ 3 Haftung", change_summary="Haftungsbegrenzung gestrichen",
               rationale="Die Mandantin trägt das Risiko der Haftung nicht")


@pytest.fixture
def world(db_session: Session) -> SqlWorld:
    w = SqlWorld(db_session)
    w.version("contract/v1")
    w.version("letter/v1")
    w.version("secret/v1")
    w.version("dmsdoc/v1", source="dms1", acl=[("anna", "allow")])
    w.version("dmsclosed/v1", source="dms1", acl=[("bob", "allow")])
    w.object("never-observed", "dms1", acl=[("anna", "allow")])
    w.allow("anna", project="p")
    w.deny("anna", document="secret")
    return w


def evidence(world: SqlWorld, *entries: tuple[str | None, str | None]) -> tuple[DecisionEvidenceRef, ...]:
    return tuple(
        DecisionEvidenceRef(
            source_object_id=world.objects[obj].id if obj else None,
            version_id=world.versions[version].id if version else None,
        )
        for obj, version in entries
    )


def record(service: RetrievalService, world: SqlWorld, name: str, *entries, **text) -> str:
    fields = HAFTUNG | text
    decision = NewDecision(project_id=world.projects["p"].id, external_id=name, evidence=evidence(world, *entries), **fields)
    return service.add_decision(decision).id


@pytest.fixture
def decisions(world: SqlWorld) -> dict[str, str]:
    service = world.service()
    return {
        "seen": record(service, world, "seen", (None, "contract/v1"), ("letter/v1", None)),
        "one_secret": record(service, world, "one_secret", (None, "contract/v1"), (None, "secret/v1")),
        "dms_object": record(service, world, "dms_object", ("dmsdoc/v1", None)),
        "dms_closed": record(service, world, "dms_closed", ("dmsclosed/v1", None)),
        "unobserved": record(service, world, "unobserved", ("never-observed", None)),
        "mismatched": record(service, world, "mismatched", ("letter/v1", "contract/v1")),
        "through_object": record(service, world, "through_object", ("contract/v1", "contract/v1"),
                                 locus="§ 5 Kündigung", change_summary="KÜNDIGUNGSFRIST verlängert", rationale=""),
    }


def found(world: SqlWorld, decisions: dict[str, str], query: str, principals: list[str], limit: int = 20) -> list[str]:
    names = {v: k for k, v in decisions.items()}
    return [names[hit.id] for hit in world.service().search_decisions(query, principals, limit)]


def test_a_decision_is_returned_only_when_all_its_evidence_is_visible(world: SqlWorld, decisions) -> None:
    assert set(found(world, decisions, "Haftung", ["anna"])) == {"seen", "dms_object"}
    assert set(found(world, decisions, "Haftung", ["bob"])) == {"dms_closed"}
    assert found(world, decisions, "Haftung", ["mallory"]) == []
    assert found(world, decisions, "Haftung", []) == []


def test_evidence_that_no_visible_version_backs_stays_closed_even_for_admins(world: SqlWorld, decisions) -> None:
    admin = set(found(world, decisions, "Haftung", ["role:admin"]))
    assert admin == {"seen", "one_secret", "dms_object", "dms_closed"}  # not unobserved, not mismatched


def test_a_version_named_through_its_object_is_visible_evidence(world: SqlWorld, decisions) -> None:
    assert found(world, decisions, "Kündigungsfrist", ["anna"]) == ["through_object"]


def test_scores_are_the_share_of_query_terms_casefolded_without_stopwords(world: SqlWorld, decisions) -> None:
    hits = world.service().search_decisions("die HAFTUNG der Mandantin und Vertragsstrafe", ["anna"], 10)
    assert {h.id for h in hits} == {decisions["seen"], decisions["dms_object"]}
    assert all(h.score == pytest.approx(2 / 3) for h in hits)  # haftung and mandantin; vertragsstrafe is missing
    assert all(h.matched_terms == ("haftung", "mandantin") for h in hits)
    assert world.service().search_decisions("die der und", ["anna"], 10) == []
    assert [h.id for h in world.service().search_decisions("kündigungsfrist", ["anna"], 10)] == [decisions["through_object"]]


def test_better_overlap_ranks_first_and_the_limit_holds(world: SqlWorld, decisions) -> None:
    service = world.service()
    best = record(service, world, "best", (None, "contract/v1"), rationale="Haftung Vertragsstrafe Mandantin")
    hits = service.search_decisions("Haftung Vertragsstrafe Mandantin", ["anna"], 2)
    assert hits[0].id == best and len(hits) == 2
    assert hits[0].score == 1.0 > hits[1].score


def test_replaying_an_external_id_returns_the_stored_decision(world: SqlWorld, decisions) -> None:
    service = world.service()
    again = record(service, world, "seen", (None, "letter/v1"))
    assert again == decisions["seen"]
    count = world.session.scalar(select(func.count()).select_from(DecisionRecord))
    assert count == len(decisions)


def test_a_writer_must_see_every_evidence_entry_and_is_not_told_which_exists(world: SqlWorld) -> None:
    service = world.service()
    new = NewDecision(project_id=world.projects["p"].id, evidence=evidence(world, (None, "secret/v1")), **HAFTUNG)
    with pytest.raises(InvalidDecision) as hidden:
        service.add_decision(new, ["anna"])
    missing = new.model_copy(update={"evidence": (DecisionEvidenceRef(version_id="no-such-version"),)})
    with pytest.raises(InvalidDecision) as absent:
        service.add_decision(missing, ["anna"])
    assert str(hidden.value) == str(absent.value)
    with pytest.raises(InvalidDecision, match="no-such-version"):
        service.add_decision(missing)  # trusted writers get the precise reason
    assert service.add_decision(new, ["role:admin"]).evidence == new.evidence


def test_a_decision_needs_evidence_and_each_entry_names_something() -> None:
    with pytest.raises(ValidationError):
        NewDecision(project_id="p", evidence=(), **HAFTUNG)
    with pytest.raises(ValidationError):
        DecisionEvidenceRef()


# ------------------------------------------------------------------ in the database's text index


def bulk_records(world: SqlWorld, count: int, evidence_version: str | None, evidence_object: str | None = None,
                 **text) -> list[str]:
    """`count` records over one evidence entry, added straight to the session (as the DMS writer does)."""
    rows = []
    for n in range(count):
        row = DecisionRecord(project_id=world.projects["p"].id,
                             external_id=f"bulk-{evidence_version}-{evidence_object}-{n}", **(HAFTUNG | text))
        row.evidence = [DecisionEvidence(
            version_id=world.versions[evidence_version].id if evidence_version else None,
            source_object_id=world.objects[evidence_object].id if evidence_object else None,
        )]
        rows.append(row)
    world.session.add_all(rows)
    world.session.flush()
    return [row.id for row in rows]


def test_a_search_reads_a_batch_of_records_not_every_record(world: SqlWorld, decisions) -> None:
    bulk_records(world, 300, "contract/v1")
    world.session.expunge_all()
    loaded: list[str] = []

    def count(target: DecisionRecord, _context) -> None:
        loaded.append(target.id)

    event.listen(DecisionRecord, "load", count)
    try:
        hits = world.service().search_decisions("Haftung Mandantin", ["anna"], 2)
    finally:
        event.remove(DecisionRecord, "load", count)
    assert len(hits) == 2
    assert 0 < len(loaded) <= max(VERIFY_BATCH_FACTOR * 2, 20)  # the old scan read all 307


def test_records_the_caller_cannot_see_never_push_a_visible_one_off_the_page(world: SqlWorld, decisions) -> None:
    """More hidden records rank above it than one batch holds: the search reads on until the page is full.

    Half name a version outside the caller's compiled scope (dropped before the evidence check),
    half only a DMS object the caller cannot see (only the evidence check knows)."""
    best = dict(rationale="Haftung Vertragsstrafe Mandantin Risiko")
    bulk_records(world, 3 * 20 + 7, "secret/v1", **best)
    bulk_records(world, 3 * 20 + 7, None, "dmsclosed/v1", **best)
    hits = world.service().search_decisions("Haftung Vertragsstrafe Mandantin Risiko", ["anna"], 2)
    assert {hit.id for hit in hits} == {decisions["seen"], decisions["dms_object"]}
    assert all(hit.score < 1.0 for hit in hits)
    admin = world.service().search_decisions("Haftung Vertragsstrafe Mandantin Risiko", ["role:admin"], 2)
    assert [hit.score for hit in admin] == [1.0, 1.0]


def test_equal_shares_rank_the_newest_decision_first_then_by_id(world: SqlWorld, decisions) -> None:
    service = world.service()
    old = record(service, world, "old", (None, "contract/v1"), rationale="Vertragsstrafe",
                 decided_at=datetime(2020, 1, 1, tzinfo=UTC))
    new = record(service, world, "new", (None, "contract/v1"), rationale="Vertragsstrafe",
                 decided_at=datetime(2024, 1, 1, tzinfo=UTC))
    undated = record(service, world, "undated", (None, "contract/v1"), rationale="Vertragsstrafe")
    assert [hit.id for hit in service.search_decisions("Vertragsstrafe", ["anna"], 5)] == [new, old, undated]


def test_a_changed_or_deleted_record_is_searched_as_it_now_is(world: SqlWorld, decisions) -> None:
    session = world.session
    row = session.get(DecisionRecord, decisions["seen"])
    row.rationale = "Die Gewährleistung wurde neu geregelt"
    session.flush()
    assert [h.id for h in world.service().search_decisions("Gewährleistung", ["anna"], 5)] == [decisions["seen"]]
    assert decisions["seen"] not in {h.id for h in world.service().search_decisions("Mandantin", ["anna"], 5)}
    session.delete(row)
    session.flush()
    assert world.service().search_decisions("Gewährleistung", ["anna"], 5) == []


def test_both_databases_fold_case_and_umlauts_and_only_postgresql_stems(world: SqlWorld, decisions) -> None:
    """The documented difference: PostgreSQL's german configuration stems, SQLite's FTS5 does not."""
    service = world.service()
    assert [h.id for h in service.search_decisions("KUNDIGUNGSFRIST", ["anna"], 5)] == [decisions["through_object"]]
    stemmed = [h.id for h in service.search_decisions("Kündigungsfristen", ["anna"], 5)]
    postgresql = world.session.get_bind().dialect.name == "postgresql"
    assert stemmed == ([decisions["through_object"]] if postgresql else [])


def test_query_words_that_look_like_fts_operators_are_plain_words(world: SqlWorld, decisions) -> None:
    service = world.service()
    record(service, world, "operators", (None, "contract/v1"), rationale="near and not or NEAR")
    assert [h.score for h in service.search_decisions('near "NOT" OR*', ["anna"], 5)] == [1.0]
