"""Who is this caller: one module resolves names (ki_core.principals), and no other module does it itself."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.orm import Session

from ki_core.config import Settings
from ki_core.migrate import alembic_config, upgrade_to_head
from ki_core.principals import (
    InvalidPrincipal,
    group_principal,
    principals_from_claims,
    normalize_principal,
    unknown_principals,
    viewer_for,
)
from tests.ki_core.access_world import World, local_file, sees

SRC = Path(__file__).resolve().parents[2] / "src"
OWNER = SRC / "ki_core" / "principals.py"
LOW_LEVEL = {"normalize_principal", "principal_aliases", "stored_names", "expand_groups"}


def _low_level_uses(path: Path) -> set[str]:
    """The low-level principal steps a module imports or calls (by name or as an attribute).

    The config field `security.principal_aliases` is read, not called: it does not count.
    """
    used = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            used |= {alias.name for alias in node.names} & LOW_LEVEL
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
            used |= {name} & LOW_LEVEL
    return used


def test_only_the_principals_module_calls_the_low_level_principal_steps() -> None:
    offenders = {
        str(path.relative_to(SRC)): sorted(used)
        for path in sorted(SRC.rglob("*.py"))
        if path != OWNER and (used := _low_level_uses(path))
    }
    assert offenders == {}


def test_the_ownership_check_sees_an_import_and_an_attribute_call(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("from ki_core.acl import stored_names\nimport x\nx.expand_groups(1)\ns.principal_aliases\n")
    assert _low_level_uses(module) == {"stored_names", "expand_groups"}


@pytest.mark.parametrize("name", ["partner", "Partner ", "group:partner", "GROUP:Partner", " group: partner"])
def test_the_group_prefix_is_optional(name: str) -> None:
    assert group_principal(name) == "partner"
    assert normalize_principal(name) == "partner"


@pytest.mark.parametrize("name", ["", "  ", "group:", "group:  "])
def test_a_group_without_a_name_is_refused(name: str) -> None:
    with pytest.raises(InvalidPrincipal):
        group_principal(name)


def test_token_group_claims_are_groups_with_or_without_the_prefix() -> None:
    principals = principals_from_claims(" Anna.Berg ", ["partner", "group:Litigation", "", 7, "group:partner"])
    assert principals == ("anna.berg", "partner", "litigation")


@pytest.fixture
def world(db_session: Session) -> World:
    return World(db_session)


def test_a_local_group_and_a_grant_to_group_prefix_meet_whichever_spelling_each_used(world: World) -> None:
    local_file(world)
    local_file(world, "w", "e")
    world.local_members("partner", ["anna"])  # as `ki groups add partner anna`
    world.allow("group:partner", document="d")  # as the README's grants write it
    world.members("group:litigation", ["bob"], source="dms")
    world.allow("Litigation", document="e")
    assert sees(world, ["anna"], "v") and not sees(world, ["anna"], "w")
    assert sees(world, ["bob"], "w") and sees(world, ["group:litigation"], "w")


def test_unknown_means_named_by_no_grant_membership_alias_or_key(world: World) -> None:
    local_file(world)
    world.allow("alice")
    world.deny("dora")
    world.members("group:x", ["bob"], source="dms")
    world.settings = Settings(security={
        "principal_aliases": {"a.smith": "alice", "carl": "charles"},
        "api_keys": {"svc": {"sha256": "0" * 64, "principals": ["Service.Account"]}},
    })
    names = ["Alice", "A.Smith", "dora", "bob", "group:x", "carl", "charles", "service.account", "role:admin",
             "unknown.user", "  "]
    assert unknown_principals(world.session, names, world.settings) == ["unknown.user"]
    assert unknown_principals(world.session, "nobody", world.settings) == ["nobody"]


def test_the_admin_role_is_decided_on_the_expanded_set(world: World) -> None:
    world.members("role:admin", ["ops"], source="dms")
    assert viewer_for(world.session, ["ops"], world.settings).is_admin
    assert not viewer_for(world.session, ["anna"], world.settings).is_admin


def test_migration_0015_drops_the_group_prefix_from_stored_grants_and_memberships(tmp_path: Path) -> None:
    from alembic import command

    url = f"sqlite:///{tmp_path / 'old.db'}"
    command.upgrade(alembic_config(url), "0014_summary_lock_from_change")
    engine = create_engine(url)
    with engine.begin() as connection:
        connection.execute(text("INSERT INTO projects (id, name, created_at) VALUES ('p1', 'p', '2026-01-01')"))
        connection.execute(text("INSERT INTO sources (id, name, kind, config, created_at) "
                                "VALUES ('s1', 'dms', 'dms', '{}', '2026-01-01')"))
        rows = [("m1", None, "partner", "anna"), ("m2", None, "group:partner", "anna"),
                ("m3", None, "group:senior", "group:partner"), ("m4", "s1", "group:litigation", "bob")]
        for row in rows:
            connection.execute(text("INSERT INTO group_memberships (id, source_id, group_principal, member_principal,"
                                    " created_at) VALUES (:i, :s, :g, :m, '2026-01-01')"),
                               dict(zip("isgm", row, strict=True)))
        for gid, principal in (("g1", "partner"), ("g2", "group:partner"), ("g3", "group:litigation"),
                               ("g4", "alice")):
            connection.execute(text("INSERT INTO grants (id, scope, project_id, effect, principal, origin, created_at)"
                                    " VALUES (:i, 'project', 'p1', 'allow', :p, 'local', '2026-01-01')"),
                               {"i": gid, "p": principal})
    upgrade_to_head(url)
    with engine.connect() as connection:
        memberships = sorted(connection.execute(text("SELECT group_principal, member_principal FROM group_memberships")))
        principals = sorted(connection.scalars(text("SELECT principal FROM grants")))
    engine.dispose()
    assert memberships == [("litigation", "bob"), ("partner", "anna"), ("senior", "partner")]
    assert principals == ["alice", "litigation", "partner"]
