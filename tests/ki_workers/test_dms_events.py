"""DMS events through the inbox and the pipeline, in-process, on SQLite and PostgreSQL.

Each event goes the webhook's path without HTTP (validate, event row, commit,
dispatch); `broker.eager` runs the tasks in-process. Visibility is checked
with the query side's own AccessService and ki_core.acl.visible_versions.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, date, datetime
from pathlib import Path

import pytest
from sqlalchemy import func, select, update

from ki_core.config import get_settings
from ki_core.grants import GrantTarget, grant, list_grants
from ki_core.models import (
    DecisionRecord,
    Document,
    DocumentVersion,
    EventStatus,
    IngestEvent,
    ObservationState,
    ProcessingState,
    Project,
    Relation,
    RelationKind,
    SourceObject,
    SourceObservation,
    SourceWatermark,
    VersionStatus,
)
from ki_core.search.types import ScopeFilter
from ki_query.scope import AccessService
from ki_workers import tasks
from ki_workers.event_inbox import AcceptOutcome, reopen_event, submit_event
from ki_workers.sources.dms_events import EVENT_TYPES, EventSchemaError, event_json_schema, parse_event
from tests.ki_workers.dms_support import (
    SECRET,
    SOURCE,
    TEXT,
    acl_changed,
    content_server,
    envelope,
    sha256,
    upserted,
)

DOCS = Path(__file__).parents[2] / "docs" / "dms-events.md"


@pytest.fixture
def server():
    with content_server() as running:
        yield running


@pytest.fixture
def dms(ctx, server, monkeypatch: pytest.MonkeyPatch):
    """The worker context with the DMS source `acme` configured (content served by `server`)."""
    monkeypatch.setenv("KI_DMS__SOURCES__ACME__SECRET", SECRET)
    monkeypatch.setenv("KI_DMS__SOURCES__ACME__CONTENT_BASE_URL", server.base_url)
    monkeypatch.setenv("KI_DMS__MAX_CONTENT_BYTES", "100000")
    get_settings.cache_clear()
    ctx.settings = get_settings()
    return ctx


def submit(ctx, data: dict) -> IngestEvent:
    accepted = submit_event(ctx.settings, ctx.sessions, SOURCE, data)
    return event_row(ctx, accepted.row_id)


def event_row(ctx, row_id: str) -> IngestEvent:
    with ctx.sessions() as session:
        return session.get(IngestEvent, row_id)


def version_of(ctx, object_id: str) -> DocumentVersion:
    """The version the object shows now."""
    with ctx.sessions() as session:
        return session.scalar(
            select(DocumentVersion)
            .join(SourceObservation, SourceObservation.version_id == DocumentVersion.id)
            .join(SourceObject, SourceObject.id == SourceObservation.source_object_id)
            .where(SourceObject.external_id == object_id, SourceObservation.state == ObservationState.ACTIVE)
        )


def index_count(ctx, document_id: str) -> int:
    index = ctx.index()
    index.refresh()
    return index.count(ScopeFilter(document_ids=frozenset([document_id])))


def sees(access: AccessService, principal: str, version: DocumentVersion) -> bool:
    """Scope compilation and re-verification must agree; the test asserts both."""
    with access._sessions() as session:
        project_id = session.get(Document, version.document_id).project_id
    in_scope = access.compile_scope([principal]).admits(project_id, version.document_id)
    verified = version.id in access.visible_versions([principal], [version.id])
    assert in_scope == verified, f"scope says {in_scope}, re-verification says {verified}"
    return verified


# ------------------------------------------------------------------ schema


def test_every_example_in_the_published_page_is_a_valid_event() -> None:
    blocks = re.findall(r"```json\n(.*?)```", DOCS.read_text(encoding="utf-8"), flags=re.DOTALL)
    events = [json.loads(block) for block in blocks if '"event_id"' in block]
    assert {e["type"] for e in events} == set(EVENT_TYPES)
    for data in events:
        parse_event(data)


def test_schema_errors_name_the_field_path() -> None:
    bad = upserted("A-1", content={"url": "x.txt", "sha256": "nothex"}, acl=[{"principal": " "}])
    bad["surprise"] = 1
    with pytest.raises(EventSchemaError) as caught:
        parse_event(bad)
    assert {path for path, _ in caught.value.problems} == {"content.sha256", "acl.0.principal", "surprise"}
    with pytest.raises(EventSchemaError) as caught:
        parse_event(envelope("document.renamed"))
    assert caught.value.problems[0][0] == "type"


def test_the_json_schema_is_a_union_discriminated_on_type() -> None:
    union, definitions = event_json_schema()
    assert set(union["discriminator"]["mapping"]) == set(EVENT_TYPES)
    assert definitions["DocumentUpserted"]["properties"]["acl"]["anyOf"]


# ------------------------------------------------------------ upsert, ACL


def test_an_upserted_document_is_indexed_and_visible_to_its_acl_only(dms) -> None:
    row = submit(dms, upserted("A-1", acl=[{"principal": "Alice"}, {"principal": "team-a"}]))
    assert (row.status, row.attempts, row.error) == (EventStatus.DONE, 1, None)
    version = version_of(dms, "A-1")
    assert version.processing_state == ProcessingState.INDEXED
    assert index_count(dms, version.document_id) > 0
    access = AccessService(dms.sessions, dms.settings)
    assert sees(access, "alice", version)
    assert not sees(access, "bob", version)
    fields = dms.index().stored_fields(_first_chunk(dms, version.id))
    assert fields["allowed_principals"] == ("alice", "team-a")


def test_an_unknown_acl_fails_closed_and_an_empty_acl_is_known(dms) -> None:
    submit(dms, upserted("A-1", acl="unknown"))
    submit(dms, upserted("A-2", text=TEXT + " Anlage.", acl=[]))
    with dms.sessions() as session, session.begin():
        project = session.scalar(select(Project).where(Project.name == "kontorwerk"))
        grant(session, GrantTarget.project(project.id), "alice", settings=dms.settings)
        known = dict(session.execute(select(SourceObject.external_id, SourceObject.acl_known)).all())
    assert known == {"A-1": False, "A-2": True}
    access = AccessService(dms.sessions, dms.settings)
    assert not sees(access, "alice", version_of(dms, "A-1")), "a local grant never opens an external object"
    assert not sees(access, "alice", version_of(dms, "A-2"))
    assert sees(access, "role:admin", version_of(dms, "A-1"))


def test_an_acl_change_is_in_force_at_the_next_scope_and_the_index_follows_without_embedding(dms) -> None:
    submit(dms, upserted("A-1", acl=[{"principal": "alice"}, {"principal": "bob"}]))
    version = version_of(dms, "A-1")
    access = AccessService(dms.sessions, dms.settings)
    assert sees(access, "bob", version)
    embedded = dms.embedder().passages
    row = submit(dms, acl_changed("A-1", [{"principal": "alice"}], minutes=5))
    assert row.status == EventStatus.DONE
    assert not sees(access, "bob", version), "the cached scope of the old generation is not served"
    assert sees(access, "alice", version)
    assert dms.embedder().passages == embedded, "an ACL change never embeds"
    refreshed = version_of(dms, "A-1")
    assert refreshed.indexed_access_version == refreshed.access_version
    assert dms.index().stored_fields(_first_chunk(dms, version.id))["allowed_principals"] == ("alice",)


def test_the_same_bytes_with_a_new_acl_update_the_projection_without_embedding(dms) -> None:
    submit(dms, upserted("A-1", acl=[{"principal": "alice"}]))
    embedded = dms.embedder().passages
    submit(dms, upserted("A-1", acl=[{"principal": "carol"}], minutes=2))
    version = version_of(dms, "A-1")
    assert version.indexed_access_version == version.access_version
    assert dms.index().stored_fields(_first_chunk(dms, version.id))["allowed_principals"] == ("carol",)
    assert dms.embedder().passages == embedded


def test_a_late_older_acl_event_cannot_undo_a_newer_revocation(dms) -> None:
    submit(dms, upserted("A-1", acl=[{"principal": "alice"}, {"principal": "bob"}], minutes=0))
    submit(dms, acl_changed("A-1", [{"principal": "alice"}], minutes=10))
    late = submit(dms, acl_changed("A-1", [{"principal": "alice"}, {"principal": "bob"}], minutes=5))
    assert late.status == EventStatus.DONE and late.error.startswith("superseded")
    assert not sees(AccessService(dms.sessions, dms.settings), "bob", version_of(dms, "A-1"))


def test_a_group_change_takes_effect_in_sql_with_no_index_write(dms) -> None:
    submit(dms, upserted("A-1", acl=[{"principal": "team-a"}]))
    version = version_of(dms, "A-1")
    access = AccessService(dms.sessions, dms.settings)
    submit(dms, envelope("group.changed", 1, group="Team-A", members=["alice", "bob"]))
    assert sees(access, "alice", version) and sees(access, "bob", version)
    embedded, before = dms.embedder().passages, version_of(dms, "A-1").indexed_access_version
    submit(dms, envelope("group.changed", 2, group="team-a", members=["alice"]))
    assert not sees(access, "bob", version)
    assert sees(access, "alice", version)
    assert dms.embedder().passages == embedded
    assert version_of(dms, "A-1").indexed_access_version == before


def test_project_grants_of_the_source_are_replaced_and_local_grants_stay(dms) -> None:
    submit(dms, upserted("A-1", acl=[{"principal": "alice"}, {"principal": "bob"}]))
    version = version_of(dms, "A-1")
    with dms.sessions() as session, session.begin():
        project = session.scalar(select(Project).where(Project.name == "kontorwerk"))
        grant(session, GrantTarget.project(project.id), "carol", settings=dms.settings)
    embedded = dms.embedder().passages
    submit(dms, envelope("project.changed", 1, project="kontorwerk", grants=[{"principal": "bob", "effect": "deny"}]))
    access = AccessService(dms.sessions, dms.settings)
    assert not sees(access, "bob", version), "a deny on the project wins over the object's allow"
    assert dms.index().stored_fields(_first_chunk(dms, version.id))["denied_principals"] == ("bob",)
    submit(dms, envelope("project.changed", 2, project="kontorwerk", grants=[{"principal": "dave"}]))
    assert sees(access, "bob", version)
    with dms.sessions() as session:
        grants = {(g.principal, g.effect.value, g.origin) for g in list_grants(session, project_id=project.id)}
    assert grants == {("carol", "allow", "local"), ("dave", "allow", SOURCE)}
    assert dms.embedder().passages == embedded


# ------------------------------------------------------- versions, delete


def test_new_content_is_a_new_version_and_the_old_one_leaves_search(dms) -> None:
    submit(dms, upserted("A-1", version_label="1", status="draft"))
    first = version_of(dms, "A-1")
    submit(dms, upserted("A-1", text=TEXT + " Nachtrag: Staffelmiete ab 2027.", version_label="2", status="final", minutes=3))
    second = version_of(dms, "A-1")
    assert second.id != first.id and second.seq == 2 and second.status == VersionStatus.FINAL
    index = dms.index()
    index.refresh()
    assert index.stored_fields(_first_chunk(dms, first.id)) is None
    assert index.stored_fields(_first_chunk(dms, second.id))["document_version_id"] == second.id


def test_same_bytes_with_new_status_update_the_version_without_a_new_one(dms) -> None:
    submit(dms, upserted("A-1", status="draft"))
    submit(dms, upserted("A-1", status="executed", minutes=2))
    with dms.sessions() as session:
        versions = list(session.scalars(select(DocumentVersion)))
    assert len(versions) == 1 and versions[0].status == VersionStatus.EXECUTED
    assert dms.index().stored_fields(_first_chunk(dms, versions[0].id))["version_status"] == "executed"


def test_a_status_change_without_a_date_keeps_the_date_read_from_the_text(dms) -> None:
    letter = "Berlin, den 14. März 2025\n\nSehr geehrte Damen und Herren,\n" + TEXT
    submit(dms, upserted("A-1", text=letter, status="draft"))
    assert version_of(dms, "A-1").doc_date == date(2025, 3, 14)
    submit(dms, upserted("A-1", text=letter, status="final", minutes=2))
    version = version_of(dms, "A-1")
    assert (version.status, version.doc_date) == (VersionStatus.FINAL, date(2025, 3, 14))
    submit(dms, upserted("A-1", text=letter, status="final", doc_date="2025-03-20", minutes=3))
    assert version_of(dms, "A-1").doc_date == date(2025, 3, 20)  # a date the DMS sends still wins


def test_a_deleted_document_leaves_search_and_sql_keeps_its_history(dms) -> None:
    submit(dms, upserted("A-1"))
    version = version_of(dms, "A-1")
    assert index_count(dms, version.document_id) > 0
    submit(dms, envelope("document.deleted", 5, object_id="A-1"))
    assert index_count(dms, version.document_id) == 0
    with dms.sessions() as session:
        assert session.get(DocumentVersion, version.id) is not None
        states = list(session.scalars(select(SourceObservation.state)))
    assert states == [ObservationState.DELETED]
    assert not sees(AccessService(dms.sessions, dms.settings), "alice", version)
    late = submit(dms, upserted("A-1", minutes=1, event_id="late-upsert"))
    assert late.error.startswith("superseded"), "an older upsert arriving late does not bring it back"
    assert index_count(dms, version.document_id) == 0


def test_a_listing_prunes_objects_it_no_longer_contains(dms) -> None:
    for n, object_id in enumerate(("A-1", "A-2", "A-3")):
        submit(dms, upserted(object_id, text=f"{TEXT} Akte {object_id}.", minutes=n))
    listing = submit(dms, envelope("source.listing", 10, object_ids=["A-1", "A-3"]))
    assert listing.error == "pruned 1 object(s)"
    assert version_of(dms, "A-2") is None and version_of(dms, "A-1") is not None
    with dms.sessions() as session:
        deleted = set(session.scalars(select(SourceObject.external_id).where(SourceObject.deleted_at.is_not(None))))
    assert deleted == {"A-2"}


# ------------------------------------------------------------ idempotency


def test_a_repeated_event_id_is_a_duplicate_and_a_rerun_changes_nothing(dms) -> None:
    data = upserted("A-1")
    submit(dms, data)
    embedded = dms.embedder().passages
    again = submit_event(dms.settings, dms.sessions, SOURCE, data)
    assert again.outcome is AcceptOutcome.DUPLICATE
    assert tasks.process_event.delay(again.row_id).get() == "skipped"
    with dms.sessions() as session, session.begin():
        reopen_event(session, data["event_id"])
    assert tasks.process_event.delay(again.row_id).get() == "done"
    with dms.sessions() as session:
        assert session.scalar(select(func.count()).select_from(IngestEvent)) == 1
        assert session.scalar(select(func.count()).select_from(DocumentVersion)) == 1
    assert dms.embedder().passages == embedded


# ---------------------------------------------------------------- content


def test_content_by_url_is_fetched_with_retries_and_checked(dms, server) -> None:
    data = (TEXT + " Per URL.").encode()
    server.files["a-1.txt"] = data
    server.failures["a-1.txt"] = 2
    row = submit(dms, upserted("A-1", content={"url": "a-1.txt", "sha256": sha256(data)}))
    assert row.status == EventStatus.DONE
    assert server.requests.count("a-1.txt") == 3
    assert version_of(dms, "A-1").processing_state == ProcessingState.INDEXED


@pytest.mark.parametrize(
    ("path", "announced", "reason"),
    [
        ("missing.txt", "0" * 64, "answered 404"),
        ("wrong.txt", "0" * 64, "does not match"),
        ("big.txt", None, "larger than dms.max_content_bytes"),
        ("../../etc/passwd", "0" * 64, "outside"),
        ("http://127.0.0.2/x.txt", "0" * 64, "outside"),
    ],
)
def test_content_that_cannot_be_right_parks_the_event_with_the_reason(dms, server, path, announced, reason) -> None:
    server.files["wrong.txt"] = b"other bytes"
    server.files["big.txt"] = b"x" * 100_001
    row = submit(dms, upserted("A-1", content={"url": path, "sha256": announced or sha256(server.files["big.txt"])}))
    assert row.status == EventStatus.PARKED
    assert reason in row.error
    assert version_of(dms, "A-1") is None


def test_a_watermark_left_far_in_the_future_blocks_no_later_change(dms) -> None:
    """An event dated 9999-12-31, accepted before the ingress refused such dates, left its
    watermark: a real revocation afterwards must still apply."""
    submit(dms, upserted("A-1", acl=[{"principal": "alice"}, {"principal": "bob"}], minutes=0))
    with dms.sessions() as session, session.begin():
        session.execute(update(SourceWatermark).values(occurred_at=datetime(9999, 12, 31, tzinfo=UTC)))
    revoked = submit(dms, acl_changed("A-1", [{"principal": "alice"}], minutes=10))
    assert revoked.status == EventStatus.DONE and not (revoked.error or "").startswith("superseded")
    access = AccessService(dms.sessions, dms.settings)
    assert not sees(access, "bob", version_of(dms, "A-1")) and sees(access, "alice", version_of(dms, "A-1"))


SECRET_FILE = b"Vertraulich: Gehaltsliste des Vorstands."


@pytest.mark.parametrize(
    "path",
    ["%2e%2e/secret.txt", "..%2fsecret.txt", "%2E%2E%2Fsecret.txt", ".%2e/secret.txt", "%252e%252e/secret.txt",
     "..%5csecret.txt", "a/%2e%2e/%2e%2e/secret.txt"],
)  # fmt: skip
def test_an_encoded_traversal_never_reaches_past_the_content_base(dms, server, path) -> None:
    server.outside["/secret.txt"] = SECRET_FILE
    row = submit(dms, upserted("A-1", content={"url": path, "sha256": sha256(SECRET_FILE)}))
    assert row.status == EventStatus.PARKED and "outside" in row.error
    assert version_of(dms, "A-1") is None
    assert server.requests == [], "refused before any request"


# ------------------------------------------------------- relations, decisions


def test_relations_wait_for_their_objects_and_decisions_are_upserted(dms) -> None:
    submit(dms, upserted("A-1", minutes=0))
    early = submit(dms, envelope("relation.upserted", 1, kind="annex_of", from_object="A-2", to_object="A-1"))
    assert early.status == EventStatus.FAILED and "ObjectNotYetKnown" in early.error
    submit(dms, upserted("A-2", text=TEXT + " Anlage 1: Grundriss.", minutes=2))
    with dms.sessions() as session, session.begin():
        reopen_event(session, early.id)
    assert tasks.process_event.delay(early.id).get() == "done"
    with dms.sessions() as session:
        relation = session.scalar(select(Relation).where(Relation.kind == RelationKind.ANNEX_OF))
        assert relation.origin == f"dms:{SOURCE}"
    decision = envelope(
        "decision.recorded", 3, decision_id="D-7", project="kontorwerk", locus="§ 4 Miete",
        change_summary="Staffelmiete gestrichen", rationale="Mandantin will feste Miete",
        evidence=[{"object_id": "A-1"}, {"object_id": "A-2"}],
    )
    submit(dms, decision)
    submit(dms, {**decision, "event_id": "evt-decision-again", "occurred_at": "2026-03-01T09:04:00+00:00",
                 "rationale": "Mandantin will feste Miete; Vermieter stimmt zu"})
    with dms.sessions() as session:
        records = list(session.scalars(select(DecisionRecord)))
        assert len(records) == 1 and records[0].rationale.endswith("stimmt zu")
        assert records[0].external_id == f"{SOURCE}:D-7" and len(records[0].evidence) == 2


def _first_chunk(ctx, version_id: str) -> int:
    from ki_core.models import Chunk

    with ctx.sessions() as session:
        return session.scalar(select(Chunk.id).where(Chunk.version_id == version_id).order_by(Chunk.ordinal).limit(1))
