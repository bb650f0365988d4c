"""`ki access grant|revoke|list|explain` as an operator runs them, on the embedded SQLite store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.orm import Session
from typer.testing import CliRunner

from ki.cli import app
from ki_core.config import load_settings
from ki_core.db import engine_from_settings
from ki_core.migrate import upgrade_to_head
from ki_query.retrieval import retrieval_service_from_settings
from tests.ki.cli_store import database, ingested, store  # noqa: F401 - fixtures
from tests.ki_core.access_world import World

# Wide enough that rich does not wrap the phrases the tests look for.
runner = CliRunner(env={"COLUMNS": "200"})


@pytest.fixture
def world() -> Iterator[World]:
    """A migrated embedded store (in the test's working directory) with one local file and one DMS file."""
    settings = load_settings()
    upgrade_to_head(settings.database_url)
    engine = engine_from_settings(settings)
    session = Session(bind=engine)
    world = World(session, settings)
    world.version("v1", "contracts/lease.pdf", "mandant-a")
    world.object("lease.pdf", "fs")
    world.observe("v1", "lease.pdf")
    world.version("v2", "memo.docx", "mandant-a")
    world.object("dms-77", "dms", [("Litigation", "allow")])
    world.observe("v2", "dms-77")
    world.members("litigation", ["alice"], source="dms")
    session.commit()
    try:
        yield world
    finally:
        session.close()
        engine.dispose()


def ki(*args: str):
    return runner.invoke(app, ["access", *args])


def test_grant_list_and_revoke_a_project_grant(world: World) -> None:
    granted = ki("grant", " Alice ", "--project", "mandant-a")
    assert granted.exit_code == 0, granted.output
    assert "allow alice on mandant-a" in granted.output

    listed = ki("list", "--project", "mandant-a")
    assert listed.exit_code == 0, listed.output
    assert "alice" in listed.output and "1 grant(s)" in listed.output

    revoked = ki("revoke", "ALICE", "--project", "mandant-a")
    assert revoked.exit_code == 0, revoked.output
    assert "revoked allow of alice" in revoked.output
    again = ki("revoke", "alice", "--project", "mandant-a")
    assert again.exit_code == 0 and "nothing changed" in again.output
    assert "0 grant(s)" in ki("list").output


def test_a_document_deny_is_listed_by_principal(world: World) -> None:
    result = ki("grant", "bob", "--project", "mandant-a", "--document", "contracts/lease.pdf", "--deny")
    assert result.exit_code == 0, result.output
    listed = ki("list", "--principal", "BOB")
    assert "deny" in listed.output and "contracts/lease.pdf" in listed.output
    assert "alice" not in ki("list", "--principal", "alice").output.split("grant(s)")[1]


def test_mirrored_source_grants_are_listed_on_request(world: World) -> None:
    assert "litigation" not in ki("list").output
    assert "litigation" in ki("list", "--mirrored").output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("grant", "alice", "--project", "no-such-project"), "no project named 'no-such-project'"),
        (("grant", "alice", "--project", "mandant-a", "--document", "missing.pdf"), "no document 'missing.pdf'"),
        (("revoke", "alice", "--project", "nope"), "no project named 'nope'"),
        (("list", "--project", "nope"), "no project named 'nope'"),
        (("explain", "alice", "mandant-a/missing.pdf"), "no document 'mandant-a/missing.pdf'"),
        (("grant", "   ", "--project", "mandant-a"), "empty after trimming"),
    ],
    ids=["grant unknown project", "grant unknown document", "revoke unknown project", "list unknown project",
         "explain unknown document", "blank principal"],
)
def test_unknown_targets_fail_with_one_clear_line(world: World, args, message) -> None:
    result = ki(*args)
    assert result.exit_code == 1
    assert message in result.output
    assert "Traceback" not in result.output


def test_explain_names_the_rule_and_the_group_path(world: World) -> None:
    result = ki("explain", "Alice", "mandant-a/memo.docx")
    assert result.exit_code == 0, result.output
    assert "is visible to Alice" in result.output
    assert "alice -> litigation" in result.output
    assert "known ACL" in result.output


def test_explain_takes_a_unique_id_prefix_as_ki_get_does(world: World) -> None:
    memo = world.documents["memo.docx"].id
    result = ki("explain", "alice", memo[:6].upper())
    assert result.exit_code == 0, result.output
    assert "mandant-a/memo.docx is visible to alice" in result.output
    granted = ki("grant", "bob", "--project", "mandant-a", "--document", memo[:8], "--deny")
    assert granted.exit_code == 0 and "deny bob on mandant-a/memo.docx" in granted.output


def test_explain_says_an_admin_sees_everything_as_admin(world: World) -> None:
    result = ki("explain", "role:admin", "mandant-a/memo.docx")
    assert result.exit_code == 0, result.output
    assert "sees everything as admin" in result.output.splitlines()[0]


def test_explain_warns_when_the_principal_is_unknown_to_the_store(world: World) -> None:
    typo = ki("explain", "alcie", "mandant-a/memo.docx")
    assert typo.exit_code == 0
    assert "unknown principal(s) 'alcie'" in typo.stderr
    assert "unknown" not in ki("explain", "alice", "mandant-a/memo.docx").stderr


def test_explain_a_local_file_before_and_after_a_grant(world: World) -> None:
    before = ki("explain", "alice", "mandant-a/contracts/lease.pdf")
    assert before.exit_code == 0, before.output
    assert "not visible" in before.output
    assert "no local allow" in before.output
    ki("grant", "alice", "--project", "mandant-a")
    after = ki("explain", "alice", world.documents["contracts/lease.pdf"].id)
    assert "is visible" in after.output and "delegates to local grants" in after.output


def test_explain_a_deny(world: World) -> None:
    ki("grant", "alice", "--project", "mandant-a")
    ki("grant", "litigation", "--project", "mandant-a", "--deny")
    result = ki("explain", "alice", "mandant-a/memo.docx")
    assert "not visible" in result.output
    assert "denied by deny to 'litigation'" in result.output


# ------------------------------------------------------------ one file or DMS object


def test_a_deny_on_one_dms_object_is_granted_listed_explained_and_revoked(world: World) -> None:
    granted = ki("grant", "Bob", "--deny", "--object", "dms:dms-77")
    assert granted.exit_code == 0, granted.output
    assert "deny bob on object dms:dms-77" in granted.output
    listed = ki("list", "--principal", "bob")
    assert "source_object" in listed.output and "dms:dms-77" in listed.output and "1 grant(s)" in listed.output
    joined = runner.invoke(app, ["groups", "add", "litigation", "bob"])  # the DMS ACL allows litigation
    assert joined.exit_code == 0, joined.output
    explained = ki("explain", "bob", "mandant-a/memo.docx")
    assert "not visible" in explained.output and "denied by deny to 'bob' on source object 'dms-77'" in explained.output
    revoked = ki("revoke", "bob", "--deny", "--object", "dms:dms-77")
    assert "revoked deny of bob on object dms:dms-77" in revoked.output
    assert "is visible to bob" in ki("explain", "bob", "mandant-a/memo.docx").output


def test_an_allow_on_a_dms_object_says_it_never_overrides_the_dms_acl(world: World) -> None:
    result = ki("grant", "carol", "--object", "dms:dms-77")
    assert result.exit_code == 0, result.output
    assert "note: dms decides this object's ACL; a local allow opens nothing here" in result.output
    assert "note" not in ki("grant", "carol", "--object", "fs:lease.pdf").output
    assert "is visible to carol" in ki("explain", "carol", "mandant-a/contracts/lease.pdf").output


def test_revoking_leaves_the_mirrored_acl_and_says_so(world: World) -> None:
    result = ki("revoke", "litigation", "--object", "dms:dms-77")
    assert result.exit_code == 0, result.output
    assert "litigation had no local allow on object dms:dms-77; nothing changed" in result.output
    assert "(allow mirrored from dms stays: change it there)" in result.output


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (("grant", "bob", "--object", "dms:nope"), 1, "no source object 'dms:nope'"),
        (("grant", "bob", "--object", "dms:dms-77", "--project", "mandant-a"), 2, "without --project"),
        (("revoke", "bob"), 2, "give --project"),
    ],
    ids=["unknown object", "object and project", "no target"],
)
def test_object_grants_name_one_target(world: World, args, code, message) -> None:
    result = ki(*args)
    assert result.exit_code == code, result.output
    assert message in " ".join(result.output.split())
    assert "Traceback" not in result.output


# ------------------------------------------------------------ the whole way: ingest, grant, sweep, search


def redrive_access() -> None:
    """What the sweep does with the versions a grant marked stale: the access-only reindex (ki.reindex_access)."""
    from ki_workers.context import worker_context
    from ki_workers.sweep import redrive_versions

    assert redrive_versions(worker_context())["access_redriven"] > 0


def what_bob_gets(query: str) -> tuple[set[str], set[str], set[str], dict[str, tuple[set[str], set[str]]]]:
    """(file paths of the versions in search hits, files whose document is in scope, files re-verification
    passes, {file: (allowed, denied) principals in the index}) for bob, over every ingested file."""
    from sqlalchemy import select

    from ki_core.models import Chunk, Document, SourceObject, SourceObservation
    from ki_query.scope import AccessService
    from ki_query.types import SearchRequest
    from ki_workers.context import worker_context

    ctx = worker_context()
    with ctx.sessions() as session:
        rows = session.execute(
            select(SourceObject.external_id, SourceObservation.version_id, Document.project_id, Document.id)
            .join(SourceObservation, SourceObservation.source_object_id == SourceObject.id)
            .join(Chunk, Chunk.version_id == SourceObservation.version_id)
            .join(Document, Document.id == Chunk.document_id)
            .distinct()
        ).all()
        chunks = {vid: list(session.scalars(select(Chunk.id).where(Chunk.version_id == vid))) for _f, vid, *_ in rows}
    access = AccessService(ctx.sessions, ctx.settings)
    scope = access.compile_scope(["bob"])
    verified = access.visible_versions(["bob"], [vid for _f, vid, *_ in rows])
    fields = ctx.index().stored_fields_of([c for ids in chunks.values() for c in ids])
    projection = {
        f: ({p for c in chunks[vid] for p in fields[c]["allowed_principals"]},
            {p for c in chunks[vid] for p in fields[c]["denied_principals"]})
        for f, vid, *_ in rows
    }
    file_of = {vid: f for f, vid, *_ in rows}
    service = retrieval_service_from_settings(load_settings())
    try:
        hits = service.search(SearchRequest(query=query, limit=50), ["bob"]).hits
    finally:
        service.close()
    return (
        {file_of[h.version_id] for h in hits},
        {f for f, _vid, project_id, document_id in rows if scope.admits(project_id, document_id)},
        {file_of[v] for v in verified},
        projection,
    )


FILES = {"anlage-grundriss.txt", "schreiben-mieterin.txt", "vertrag/v1-entwurf.txt", "vertrag/v2-final.txt",
         "vertrag/v3-unterzeichnet.txt"}


def test_a_local_deny_on_single_files_keeps_them_out_of_scope_reverification_search_and_the_index(
    database: str, store: Path,
) -> None:
    """The leak test the whole way: a one-version document (the scope must drop it) and one version of a
    three-version contract (its document stays in scope: re-verification alone must drop the version)."""
    folder = ingested(store, "bob")
    letter = ki("grant", "bob", "--deny", "--object", f"{folder}:schreiben-mieterin.txt")
    draft = ki("grant", "bob", "--deny", "--object", "local:vertrag/v2-final.txt")
    assert letter.exit_code == 0 and draft.exit_code == 0, letter.output + draft.output
    redrive_access()
    found, in_scope, verified, projection = what_bob_gets("Miete Heizung Mietvertrag")
    hidden = {"schreiben-mieterin.txt", "vertrag/v2-final.txt"}
    assert in_scope == FILES - {"schreiben-mieterin.txt"}, "SQL scope"
    assert verified == FILES - hidden, "re-verification"
    assert found and not found & hidden, "search"
    assert {f for f, (allowed, denied) in projection.items() if "bob" in denied and "bob" not in allowed} == hidden
    assert all("bob" in projection[f][0] for f in FILES - hidden), "index projection"

    assert ki("revoke", "bob", "--deny", "--object", f"{folder / 'schreiben-mieterin.txt'}").exit_code == 0
    assert ki("revoke", "bob", "--deny", "--object", f"local:{folder}:vertrag/v2-final.txt").exit_code == 0
    redrive_access()
    found, in_scope, verified, projection = what_bob_gets("Miete Heizung Mietvertrag")
    assert in_scope == verified == FILES
    assert "schreiben-mieterin.txt" in found
    assert all(projection[f] == ({"bob"}, set()) for f in FILES)


def test_grants_and_revocations_are_in_the_audit_trail(world: World) -> None:
    from datetime import UTC, datetime

    from ki_core.audit import AuditAction, AuditFilter, audit_log

    started = datetime.now(UTC)  # the module's store holds the other tests' changes too
    assert ki("grant", "bob", "--project", "mandant-a").exit_code == 0
    assert ki("revoke", "bob", "--project", "mandant-a").exit_code == 0
    assert ki("revoke", "bob", "--project", "mandant-a").exit_code == 0  # nothing changed: nothing recorded
    changes = audit_log(world.settings).entries(AuditFilter(since=started))
    assert [(c.action, c.detail) for c in changes] == [
        (AuditAction.ACCESS_CHANGE, "revoke allow bob on mandant-a"),
        (AuditAction.ACCESS_CHANGE, "grant allow bob on mandant-a"),
    ]
    assert all(c.subject.startswith("operator:") for c in changes)
