"""A DMS sync changes who may see what, so each member it adds to or removes from a group, and each ACL or
project grant change, is in the audit trail, listed by `ki audit`, on SQLite and PostgreSQL; a change whose
record cannot be written is not applied."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from sqlalchemy import select
from typer.testing import CliRunner

from ki.cli import app
from ki_core import audit
from ki_core.audit import AuditAction, AuditFilter, Surface, audit_log
from ki_core.config import get_settings
from ki_core.grants import MembershipDiff
from ki_core.models import EventStatus, GroupMembership
from tests.ki_workers.dms_support import SOURCE, acl_changed, envelope, upserted
from tests.ki_workers.test_dms_events import dms, server, submit  # noqa: F401 - fixtures

runner = CliRunner()


def members(ctx, group: str) -> set[str]:
    with ctx.sessions() as session:
        return set(session.scalars(select(GroupMembership.member_principal)
                                   .where(GroupMembership.group_principal == group)))


def listed(*args: str) -> list[dict]:
    """`ki audit --json ARGS`, oldest first."""
    result = runner.invoke(app, ["audit", "--json", *args])
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in reversed(result.output.splitlines())]


def test_each_member_a_sync_adds_or_removes_is_one_record_listed_by_ki_audit(dms) -> None:  # noqa: F811
    first = envelope("group.changed", 1, group="Team-A", members=["alice", "bob", "carol"])
    second = envelope("group.changed", 2, group="team-a", members=["alice", "dora"])
    assert submit(dms, first).status == EventStatus.DONE
    assert submit(dms, second).status == EventStatus.DONE

    records = listed("--group", "team-a")
    changes = [(r["action"], r["member"], r["event_id"]) for r in records]
    assert changes == [("member_added", "alice", first["event_id"]), ("member_added", "bob", first["event_id"]),
                       ("member_added", "carol", first["event_id"]), ("member_added", "dora", second["event_id"]),
                       ("member_removed", "bob", second["event_id"]), ("member_removed", "carol", second["event_id"])]
    assert {r["subject"] for r in records} == {f"source:{SOURCE}"}
    assert {r["surface"] for r in records} == {"sync"}
    assert all(r["at"] and r["detail"].startswith("event occurred ") for r in records)
    assert [(r["action"], r["group"]) for r in listed("--user", "bob")] == [
        ("member_added", "team-a"), ("member_removed", "team-a")]


def test_a_superseded_or_unchanged_sync_records_nothing(dms) -> None:  # noqa: F811
    submit(dms, envelope("group.changed", 5, group="team-b", members=["alice"]))
    submit(dms, envelope("group.changed", 6, group="team-b", members=["alice"]))  # the same members again
    late = submit(dms, envelope("group.changed", 1, group="team-b", members=["mallory"]))
    assert late.error.startswith("superseded")
    log = audit_log(dms.settings)
    records = log.entries(AuditFilter(group="team-b"))
    assert [(r.action, r.member, r.surface) for r in records] == [(AuditAction.MEMBER_ADDED, "alice", Surface.SYNC)]
    assert members(dms, "team-b") == {"alice"}


def test_a_sync_whose_record_cannot_be_written_is_not_applied(dms) -> None:  # noqa: F811
    """The trail's table is gone: the membership stays as it was and the event is not done (it is retried)."""
    submit(dms, envelope("group.changed", 1, group="team-c", members=["alice"]))
    log = audit_log(dms.settings)
    with log._connect() as connection:
        connection.exec_driver_sql("ALTER TABLE audit_records RENAME TO audit_records_away")
    try:
        row = submit(dms, envelope("group.changed", 2, group="team-c", members=["mallory"]))
        assert row.status != EventStatus.DONE
        assert members(dms, "team-c") == {"alice"}
    finally:
        with log._connect() as connection:
            connection.exec_driver_sql("ALTER TABLE audit_records_away RENAME TO audit_records")
    assert [r.member for r in log.entries(AuditFilter(group="team-c"))] == ["alice"]


def test_a_trail_file_written_before_the_membership_columns_gets_them(tmp_path: Path, monkeypatch) -> None:
    """SQLite's trail file is not under Alembic: one made by 0017's table takes the new columns when opened."""
    state = tmp_path / "state"
    state.mkdir()
    old = sqlite3.connect(state / "audit.db")
    old.execute("CREATE TABLE audit_records (id INTEGER PRIMARY KEY, at DATETIME NOT NULL, subject VARCHAR(512) "
                "NOT NULL, principals TEXT NOT NULL, surface VARCHAR(16) NOT NULL, action VARCHAR(32) NOT NULL, "
                "query TEXT, hit_count INTEGER, document_id VARCHAR(64), document_ids TEXT, detail TEXT)")
    old.execute("INSERT INTO audit_records (at, subject, principals, surface, action, query) "
                "VALUES ('2026-12-01 10:00:00', 'anna', '[\"anna\"]', 'http', 'search', 'Miete')")
    old.commit()
    old.close()
    monkeypatch.setenv("KI_STATE_DIR", str(state))
    monkeypatch.delenv("KI_DATABASE__URL", raising=False)
    get_settings.cache_clear()
    audit.close_audit_logs()
    log = audit_log(get_settings())
    audit.record_membership(log, audit.Actor.named("source:acme"), Surface.SYNC,
                            MembershipDiff(group="partner", added=("anna",)), event_id="E-1")
    assert [(r.subject, r.member) for r in log.entries(AuditFilter(user="anna"))] == [
        ("source:acme", "anna"), ("anna", None)]
    indexed = {row[0] for row in sqlite3.connect(state / "audit.db").execute("SELECT name FROM sqlite_master "
                                                                             "WHERE type = 'index'")}
    assert {"ix_audit_records_group_principal", "ix_audit_records_member_principal"} <= indexed
    audit.close_audit_logs()
    get_settings.cache_clear()


def test_acl_and_project_grant_syncs_are_access_changes_in_the_trail(dms) -> None:  # noqa: F811
    """Who may see a document changes with its ACL and its project's grants too: one record per event naming
    the entries removed and added; an upsert that repeats the same ACL records nothing."""
    upsert = upserted("A-1", acl=[{"principal": "alice"}, {"principal": "bob"}])
    submit(dms, upsert)
    submit(dms, upserted("A-1", acl=[{"principal": "alice"}, {"principal": "bob"}], minutes=1, text="anders"))
    acl = acl_changed("A-1", [{"principal": "alice"}, {"principal": "carol", "effect": "deny"}], minutes=2)
    submit(dms, acl)
    project = envelope("project.changed", 3, project="mandant-x", grants=[{"principal": "Team-A"}])
    submit(dms, project)
    records = [r for r in reversed(audit_log(dms.settings).entries(AuditFilter(user=f"source:{SOURCE}")))
               if r.action is AuditAction.ACCESS_CHANGE]
    assert [(r.event_id, r.detail) for r in records] == [
        (upsert["event_id"], "acl of A-1: +allow alice, +allow bob"),
        (acl["event_id"], "acl of A-1: -allow bob, +deny carol"),
        (project["event_id"], "grants of project mandant-x: +allow team-a")]
    assert {r.surface for r in records} == {Surface.SYNC}
