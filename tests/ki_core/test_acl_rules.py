"""The visibility rules, one readable test each, on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from ki_core.acl import access_projection, version_predicate, visible_versions
from ki_core.config import Settings
from ki_core.principals import (
    caller_paths,
    canonical_principals,
    expand_principals,
    index_projection,
    normalize_principal,
    viewer_for,
)
from ki_core.models import DocumentAccessSummary, DocumentVersion, SourceObject
from tests.ki_core.access_world import World, dms_object, local_file, sees


@pytest.fixture
def world(db_session: Session) -> World:
    return World(db_session)


# ------------------------------------------------------------------ principals


def test_principals_are_trimmed_casefolded_and_empties_dropped() -> None:
    assert normalize_principal("  Alice@Firm.DE\t") == "alice@firm.de"
    assert canonical_principals(["", "  ", " Bob "], Settings()) == {"bob"}


def test_an_alias_is_replaced_by_its_canonical_principal_in_one_step() -> None:
    settings = Settings(security={"principal_aliases": {" A.Smith ": "Alice", "alice": "ALICE.SMITH"}})
    assert canonical_principals(["a.smith"], settings) == {"alice"}


def aliased(world: World, aliases: dict[str, str]) -> None:
    """The operator changes security.principal_aliases (a restart with the new table)."""
    world.settings = Settings(security={"principal_aliases": aliases})


def test_an_alias_added_later_joins_the_grants_and_groups_given_to_the_old_name(world: World) -> None:
    local_file(world)
    local_file(world, "w", "e")
    world.allow("jdoe", project="p")
    world.members("team", ["JDoe"])
    world.allow("team", document="e")
    assert not sees(world, ["john.doe"]) and not sees(world, ["john.doe"], "w")
    aliased(world, {"jdoe": "john.doe"})
    assert sees(world, ["john.doe"]) and sees(world, ["john.doe"], "w")
    assert sees(world, ["jdoe"]) and sees(world, ["jdoe"], "w")


def test_an_alias_removed_later_stops_matching_what_was_given_to_the_alias(world: World) -> None:
    """A wrong alias (two people under one name) is undone by removing it: nothing stays granted to the wrong one."""
    local_file(world)
    aliased(world, {"jdoe": "john.doe"})
    world.allow("jdoe", project="p")
    world.deny("john.doe", document="d")
    assert not sees(world, ["jdoe"]) and not sees(world, ["john.doe"]), "one person: the deny wins"
    aliased(world, {})
    assert sees(world, ["jdoe"])
    assert not sees(world, ["john.doe"])


def test_revoking_a_principal_removes_its_grants_under_every_name(world: World) -> None:
    local_file(world)
    world.allow("jdoe", project="p")
    world.allow("john.doe", project="p")
    aliased(world, {"jdoe": "john.doe"})
    world.revoke("john.doe", project="p")
    assert not sees(world, ["jdoe"]) and not sees(world, ["john.doe"])


def test_the_index_projection_names_an_aliased_principal_once_by_its_canonical_name(world: World) -> None:
    local_file(world)
    world.allow("jdoe", project="p")
    world.allow("erika", project="p")
    world.deny("J.Doe", document="d")
    aliases = {"jdoe": "john.doe", "j.doe": "john.doe"}
    plain = access_projection(world.session, [world.versions["v"].id])[world.versions["v"].id]
    assert plain == (("erika", "jdoe"), ("j.doe",))
    settings = Settings(security={"principal_aliases": aliases})
    projected = index_projection(world.session, [world.versions["v"].id], settings)
    assert projected[world.versions["v"].id] == (("erika",), ("john.doe",))


def test_group_expansion_follows_nested_groups_and_stops_on_cycles(world: World) -> None:
    world.members("team", ["alice"])
    world.members("firm", ["team", "firm"])
    world.members("team", ["alice", "firm"])
    paths = caller_paths(world.session, ["Alice"], world.settings)
    assert set(paths) == {"alice", "team", "firm"}
    assert paths["firm"] == ("alice", "team", "firm")


def test_expanding_nobody_gives_the_empty_set(world: World) -> None:
    world.members("team", ["alice"])
    assert expand_principals(world.session, ["", "   "], world.settings) == frozenset()


# ------------------------------------------------------------------ denies


def test_a_deny_on_the_project_wins_over_an_allow_on_the_document(world: World) -> None:
    local_file(world)
    world.allow("alice", document="d")
    world.deny("alice", project="p")
    assert not sees(world, ["alice"])


def test_a_deny_on_the_document_wins_over_an_allow_on_the_project(world: World) -> None:
    local_file(world)
    world.allow("alice", project="p")
    world.deny("alice", document="d")
    assert not sees(world, ["alice"])


def test_a_deny_on_the_source_object_wins_over_an_allow_on_the_project(world: World) -> None:
    world.version("v")
    world.object("shared.txt", "fs", [("alice", "deny")])
    world.object("copy.txt", "fs")
    world.observe("v", "shared.txt")
    world.observe("v", "copy.txt")
    world.allow("alice", project="p")
    assert not sees(world, ["alice"])


def test_a_deny_to_a_group_of_the_caller_wins_over_an_allow_to_the_caller(world: World) -> None:
    dms_object(world, [("alice", "allow"), ("interns", "deny")])
    world.members("interns", ["alice"])
    assert not sees(world, ["alice"])
    assert sees(world, ["bob", "alice"]) is False


def test_a_deny_on_an_object_only_seen_in_a_deleted_observation_does_not_count(world: World) -> None:
    dms_object(world, [("alice", "allow")])
    world.object("old.dms", "dms", [("alice", "deny")])
    world.observe("v", "old.dms", "deleted")
    assert sees(world, ["alice"])


# ------------------------------------------------------------------ observations


def test_a_deleted_observation_gives_nothing(world: World) -> None:
    local_file(world)
    world.allow("alice", project="p")
    world.set_state("v", "v.txt", "deleted")
    assert not sees(world, ["alice"])


def test_a_known_acl_allow_on_the_source_object_is_enough_in_sufficient_mode(world: World) -> None:
    dms_object(world, [("Litigation", "allow")])
    world.members("litigation", ["alice"])
    assert sees(world, ["alice"])


def test_a_known_empty_acl_hides_the_object_from_everyone_but_admins(world: World) -> None:
    dms_object(world, [])
    world.allow("alice", project="p")
    assert not sees(world, ["alice"])
    assert sees(world, ["role:admin"])


def test_an_external_object_without_a_known_acl_is_never_visible(world: World) -> None:
    dms_object(world, None)
    world.allow("alice", project="p")
    world.allow("alice", document="d")
    assert not sees(world, ["alice"])


def test_a_local_file_without_a_known_acl_follows_the_project_allow(world: World) -> None:
    local_file(world)
    assert not sees(world, ["alice"])
    world.allow("alice", project="p")
    assert sees(world, ["alice"])


def test_a_local_grant_never_overrides_an_external_acl_on_the_same_version(world: World) -> None:
    local_file(world)
    world.object("v.dms", "dms", [("bob", "allow")])
    world.observe("v", "v.dms")
    world.allow("alice", project="p")
    assert not sees(world, ["alice"])
    assert sees(world, ["bob"])


def test_forgetting_an_objects_acl_makes_it_unknown_again(world: World) -> None:
    dms_object(world, [("alice", "allow")])
    assert sees(world, ["alice"])
    world.acl("v.dms", None)
    assert not world.objects["v.dms"].acl_known
    assert not sees(world, ["alice"])


# ------------------------------------------------------------------ modes and admins


def test_intersect_mode_needs_a_local_allow_besides_the_source_allow(world: World) -> None:
    world.settings = Settings(security={"source_acl_mode": "intersect"})
    dms_object(world, [("alice", "allow")])
    assert not sees(world, ["alice"])
    world.allow("alice", project="p")
    assert sees(world, ["alice"])


def test_an_admin_ignores_grants_but_needs_an_active_observation(world: World) -> None:
    dms_object(world, None)
    world.deny("role:admin", project="p")
    assert sees(world, [" ROLE:ADMIN "])
    world.set_state("v", "v.dms", "deleted")
    assert not sees(world, ["role:admin"])


def test_hits_are_reverified_per_version_not_per_document(world: World) -> None:
    dms_object(world, [("alice", "allow")], version="v1")
    world.version("v2")
    world.object("v2.dms", "dms", [("bob", "allow")])
    world.observe("v2", "v2.dms")
    viewer = viewer_for(world.session, ["alice"], world.settings)
    ids = [world.versions["v1"].id, world.versions["v2"].id]
    assert world.version_names(visible_versions(world.session, viewer, ids)) == {"v1"}


def test_the_predicate_is_usable_in_any_query_over_document_versions(world: World) -> None:
    local_file(world)
    world.allow("alice", project="p")
    stmt = select(DocumentVersion.id).where(version_predicate({"alice"}))
    assert list(world.session.scalars(stmt)) == [world.versions["v"].id]
    assert list(world.session.scalars(select(DocumentVersion.id).where(version_predicate(set())))) == []


def test_unknown_acl_mode_is_refused_rather_than_guessed() -> None:
    with pytest.raises(ValueError, match="source_acl_mode"):
        version_predicate({"alice"}, acl_mode="lenient")  # type: ignore[arg-type]


# ------------------------------------------------------------------ projection and summary


def test_the_projection_lists_who_sees_a_version_on_their_own_and_who_is_denied(world: World) -> None:
    local_file(world)
    world.allow("team", project="p")
    world.allow("bob", document="d")
    world.deny("bob", project="p")
    world.deny("carol", document="d")
    projection = access_projection(world.session, [world.versions["v"].id])
    assert projection[world.versions["v"].id] == (("team",), ("bob", "carol"))


def test_the_projection_of_a_known_acl_ignores_local_allows(world: World) -> None:
    dms_object(world, [("litigation", "allow"), ("interns", "deny")])
    world.allow("alice", project="p")
    projection = access_projection(world.session, [world.versions["v"].id])
    assert projection[world.versions["v"].id] == (("litigation",), ("interns",))


def test_the_access_summary_follows_every_observation_change(world: World) -> None:
    def flags() -> tuple[bool, bool]:
        world.session.expire_all()
        row = world.session.get(DocumentAccessSummary, world.documents["d"].id)
        return row.local_delegation, row.has_active_observation

    world.version("v")
    assert flags() == (False, False)
    world.object("v.txt", "fs")
    world.observe("v", "v.txt")
    assert flags() == (True, True)
    world.object("v.dms", "dms", [])
    world.observe("v", "v.dms")
    assert flags() == (False, True)
    world.acl("v.dms", None)
    assert flags() == (True, True)
    world.set_state("v", "v.txt", "deleted")
    assert flags() == (False, True)
    world.session.delete(world.objects["v.dms"])
    world.session.flush()
    assert flags() == (False, False)


def test_one_statement_over_many_objects_refreshes_each_document_once_and_all_of_them(world: World) -> None:
    """A folder mirrored from a DMS has its objects' ACLs turned known in bulk: one firing whose change names a document
    twice (two objects observe its two versions) and documents in two projects. Every summary row
    follows, none is written twice (ON CONFLICT would refuse that), and the firing locks each once."""
    names = [f"d{n}" for n in range(12)]
    for n, document in enumerate(names):
        world.version(f"{document}.v1", document, project="p" if n % 2 else "q")
        world.object(f"{document}.1", "files-a")
        world.observe(f"{document}.v1", f"{document}.1")
    world.version("d0.v2", "d0", project="q")
    world.object("d0.2", "files-a")
    world.observe("d0.v2", "d0.2")
    world.session.expire_all()
    assert all(row.local_delegation for row in world.session.scalars(select(DocumentAccessSummary)))
    world.session.execute(
        update(SourceObject).where(SourceObject.source_id == world.sources["files-a"].id).values(acl_known=True)
    )
    world.session.expire_all()
    rows = {row.document_id: row for row in world.session.scalars(select(DocumentAccessSummary))}
    assert {world.documents[d].id for d in names} <= set(rows)
    assert not any(rows[world.documents[d].id].local_delegation for d in names)
    assert all(rows[world.documents[d].id].has_active_observation for d in names)
