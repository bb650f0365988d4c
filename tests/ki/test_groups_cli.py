"""`ki groups add|remove|list`: local memberships beside the DMS's mirrored ones, on the embedded store."""

from __future__ import annotations

import json

from ki.cli import app
from tests.ki.cli_store import table_rows
from tests.ki.test_access_cli import runner, world  # noqa: F401 - fixture
from tests.ki_core.access_world import World


def ki(*args: str):
    return runner.invoke(app, ["groups", *args])


def visible_to(principal: str, document: str = "mandant-a/memo.docx") -> bool:
    result = runner.invoke(app, ["access", "explain", principal, document])
    assert result.exit_code == 0, result.output
    return f"is visible to {principal}" in result.output


def test_a_local_member_sees_what_the_group_may_see(world: World) -> None:
    assert not visible_to("carol")
    added = ki("add", " Litigation", "Carol", "dave ")
    assert added.exit_code == 0, added.output
    assert "added to litigation (local): carol, dave" in added.output
    assert visible_to("carol") and visible_to("dave")
    assert "already local members of litigation; nothing changed" in ki("add", "litigation", "CAROL").output


def test_a_group_added_without_the_prefix_meets_a_grant_naming_group_prefix(world: World) -> None:
    assert ki("add", "partner", "carol").exit_code == 0
    granted = runner.invoke(app, ["access", "grant", "group:partner", "--project", "mandant-a"])
    assert granted.exit_code == 0, granted.output
    assert visible_to("carol", "mandant-a/contracts/lease.pdf")
    assert visible_to("group:partner", "mandant-a/contracts/lease.pdf")


def test_the_list_says_where_each_membership_comes_from(world: World) -> None:
    ki("add", "litigation", "carol")
    ki("add", "partners", "erin")
    rows = table_rows(ki("list").output)
    assert rows[1:] == [["litigation", "alice", "dms"], ["litigation", "carol", "local"], ["partners", "erin", "local"]]
    assert [r[1] for r in table_rows(ki("list", "LITIGATION").output)[1:]] == ["alice", "carol"]


def test_a_dms_replacement_of_the_group_keeps_the_local_member(world: World) -> None:
    ki("add", "litigation", "carol")
    world.members("litigation", [], source="dms")  # the DMS's group.changed: nobody any more
    world.session.commit()
    assert visible_to("carol") and not visible_to("alice")
    assert [r[1:] for r in table_rows(ki("list").output)[1:]] == [["carol", "local"]]


def test_remove_takes_a_local_membership_away_and_leaves_a_mirrored_one(world: World) -> None:
    ki("add", "litigation", "carol", "alice")
    removed = ki("remove", "litigation", "Carol", "alice")
    assert removed.exit_code == 0, removed.output
    assert "removed from litigation (local): alice, carol" in removed.output
    assert "alice stays in litigation: mirrored from dms, change it there" in removed.output
    assert not visible_to("carol") and visible_to("alice")
    again = ki("remove", "litigation", "alice")
    assert "no local membership matched; nothing changed" in again.output


def test_a_blank_member_is_refused_with_one_line(world: World) -> None:
    result = ki("add", "litigation", "  ")
    assert result.exit_code == 1
    assert "empty after trimming" in result.output and "Traceback" not in result.output


def _membership_records() -> list[dict]:
    """`ki audit --group litigation`, oldest first (the trail may hold earlier tests' records)."""
    listed = runner.invoke(app, ["audit", "--group", "litigation", "--json", "--limit", "1000"])
    assert listed.exit_code == 0, listed.output
    return [json.loads(line) for line in reversed(listed.output.splitlines())]


def test_each_local_member_added_or_removed_is_in_the_audit_trail(world: World) -> None:
    before = len(_membership_records())
    assert ki("add", "litigation", "carol", "dave").exit_code == 0
    assert ki("add", "litigation", "carol").exit_code == 0  # nothing changed: no record
    assert ki("remove", "litigation", "dave", "nobody").exit_code == 0
    records = _membership_records()[before:]
    assert [(r["action"], r["member"], r["surface"]) for r in records] == [
        ("member_added", "carol", "cli"), ("member_added", "dave", "cli"), ("member_removed", "dave", "cli")]
    assert all(r["subject"].startswith("operator:") and r["event_id"] is None for r in records)
