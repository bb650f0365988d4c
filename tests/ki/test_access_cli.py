"""`ki access grant|revoke|list|explain` as an operator runs them, on the embedded SQLite store."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy.orm import Session
from typer.testing import CliRunner

from ki.cli import app
from ki_core.config import load_settings
from ki_core.db import engine_from_settings
from ki_core.migrate import upgrade_to_head
from tests.ki_core.access_world import World

# Wide enough that rich does not wrap the phrases the tests look for.
runner = CliRunner(env={"COLUMNS": "200"})


@pytest.fixture
def store() -> Iterator[World]:
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


def test_grant_list_and_revoke_a_project_grant(store: World) -> None:
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


def test_a_document_deny_is_listed_by_principal(store: World) -> None:
    result = ki("grant", "bob", "--project", "mandant-a", "--document", "contracts/lease.pdf", "--deny")
    assert result.exit_code == 0, result.output
    listed = ki("list", "--principal", "BOB")
    assert "deny" in listed.output and "contracts/lease.pdf" in listed.output
    assert "alice" not in ki("list", "--principal", "alice").output.split("grant(s)")[1]


def test_mirrored_source_grants_are_listed_on_request(store: World) -> None:
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
def test_unknown_targets_fail_with_one_clear_line(store: World, args, message) -> None:
    result = ki(*args)
    assert result.exit_code == 1
    assert message in result.output
    assert "Traceback" not in result.output


def test_explain_names_the_rule_and_the_group_path(store: World) -> None:
    result = ki("explain", "Alice", "mandant-a/memo.docx")
    assert result.exit_code == 0, result.output
    assert "is visible to Alice" in result.output
    assert "alice -> litigation" in result.output
    assert "known ACL" in result.output


def test_explain_a_local_file_before_and_after_a_grant(store: World) -> None:
    before = ki("explain", "alice", "mandant-a/contracts/lease.pdf")
    assert before.exit_code == 0, before.output
    assert "not visible" in before.output
    assert "no local allow" in before.output
    ki("grant", "alice", "--project", "mandant-a")
    after = ki("explain", "alice", store.documents["contracts/lease.pdf"].id)
    assert "is visible" in after.output and "delegates to local grants" in after.output


def test_explain_a_deny(store: World) -> None:
    ki("grant", "alice", "--project", "mandant-a")
    ki("grant", "litigation", "--project", "mandant-a", "--deny")
    result = ki("explain", "alice", "mandant-a/memo.docx")
    assert "not visible" in result.output
    assert "denied by deny to 'litigation'" in result.output
