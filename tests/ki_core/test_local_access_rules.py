"""Local rules beside the mirrored ones, on SQLite and PostgreSQL: a deny or allow on one file or DMS
object, and group memberships an operator adds; what a source's sync may and may not change of them."""

from __future__ import annotations

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from ki_core import grants
from ki_core.acl import access_projection
from ki_core.principals import viewer_for
from ki_core.config import Settings
from ki_core.models import Grant, GrantScope
from ki_query.scope import AccessService
from ki_query.verification import citable_sources
from ki_workers.sources.dms import mirror_acl
from ki_workers.sources.dms_events import AclEntry
from tests.ki_core.access_world import World, dms_object, local_file, sees


@pytest.fixture
def world(db_session: Session) -> World:
    return World(db_session)


def in_scope(world: World, principals: list[str], document: str) -> bool:
    doc = world.documents[document]
    return AccessService(world.session, world.settings).compile_scope(principals).admits(doc.project_id, doc.id)


def projection(world: World, version: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(allowed, denied) principals the access-only reindex writes into the index for the version."""
    vid = world.versions[version].id
    return access_projection(world.session, [vid], acl_mode=world.settings.security.source_acl_mode)[vid]


def dms_acl(world: World, obj: str, acl) -> None:
    """An `acl.changed` of the DMS for the object, applied as its handler applies it."""
    entries = acl if acl == "unknown" else [AclEntry(principal=p, effect=e) for p, e in acl]
    mirror_acl(world.session, world.objects[obj], entries, origin="dms")


# ------------------------------------------------------------ object deny


def test_a_local_deny_on_one_file_hides_exactly_its_versions_from_scope_reverification_and_projection(
    world: World,
) -> None:
    """The leak test: each of the three places that decide or show access must honour the deny."""
    local_file(world, "v", "a")
    local_file(world, "w", "b")
    world.allow("bob", project="p")
    world.deny(" Bob", obj="v.txt")
    assert not in_scope(world, ["bob"], "a"), "SQL scope compilation admits the denied file"
    assert in_scope(world, ["bob"], "b")
    assert not sees(world, ["bob"], "v"), "re-verification lets the denied version through"
    assert sees(world, ["bob"], "w")
    assert projection(world, "v") == ((), ("bob",)), "the index projection misses the deny"
    assert projection(world, "w") == (("bob",), ())


def test_a_local_deny_to_a_group_hides_the_file_from_its_members(world: World) -> None:
    local_file(world)
    world.allow("bob", project="p")
    world.members("team", ["bob"], source="dms")
    world.deny("Team", obj="v.txt")
    assert not sees(world, ["bob"], "v") and not in_scope(world, ["bob"], "d")
    assert projection(world, "v") == (("bob",), ("team",)), "the projection names grantees; E is expanded at query time"


def test_a_local_deny_hides_every_version_the_object_carries_and_no_other(world: World) -> None:
    world.version("v1", "d")
    world.version("v2", "d")
    world.version("e1", "e")
    world.object("contract.pdf", "fs")
    world.object("memo.pdf", "fs")
    world.observe("v1", "contract.pdf")
    world.observe("v2", "contract.pdf")
    world.observe("e1", "memo.pdf")
    world.allow("bob", project="p")
    world.deny("bob", obj="contract.pdf")
    assert world.version_names(AccessService(world.session, world.settings).visible_versions(
        ["bob"], [v.id for v in world.versions.values()])) == {"e1"}


def test_a_local_deny_survives_an_acl_change_of_its_object_and_keeps_an_unknown_acl_unknown(world: World) -> None:
    dms_object(world, None)
    world.deny("bob", obj="v.dms")
    assert not world.objects["v.dms"].acl_known, "a local rule is no ACL the source told us"
    dms_acl(world, "v.dms", [("bob", "allow"), ("alice", "allow")])
    assert world.objects["v.dms"].acl_known
    assert sees(world, ["alice"], "v") and not sees(world, ["bob"], "v")
    dms_acl(world, "v.dms", [("bob", "allow")])
    assert not sees(world, ["bob"], "v"), "the replaced ACL took the local deny with it"
    dms_acl(world, "v.dms", "unknown")
    assert not world.objects["v.dms"].acl_known
    assert projection(world, "v") == ((), ("bob",))
    rules = world.session.scalars(select(Grant.origin).where(Grant.scope == GrantScope.SOURCE_OBJECT))
    assert list(rules) == ["local"]


def test_revoking_the_local_deny_restores_what_the_acl_gives(world: World) -> None:
    dms_object(world, [("bob", "allow")])
    world.deny("bob", obj="v.dms")
    assert not sees(world, ["bob"], "v") and not in_scope(world, ["bob"], "d")
    assert world.revoke("BOB", obj="v.dms", effect="deny") == 1
    assert sees(world, ["bob"], "v") and in_scope(world, ["bob"], "d")
    assert projection(world, "v") == (("bob",), ())


def test_a_mirrored_deny_equal_to_a_local_one_is_still_stored_and_outlives_its_revocation(world: World) -> None:
    """The sync compares the source's ACL with what it mirrored, never with the local rules."""
    dms_object(world, [("team", "allow")])
    world.members("team", ["bob"], source="dms")
    world.deny("bob", obj="v.dms")
    dms_acl(world, "v.dms", [("team", "allow"), ("bob", "deny")])
    world.revoke("bob", obj="v.dms", effect="deny")
    assert not sees(world, ["bob"], "v"), "the DMS's own deny was taken for the local one and lost"
    mirrored = grants.list_grants(world.session, principal="bob", include_mirrored=True)
    assert [(g.effect.value, g.origin, g.object_name) for g in mirrored] == [("deny", "dms", "dms:v.dms")]


def test_a_local_revoke_leaves_the_mirrored_acl_alone(world: World) -> None:
    dms_object(world, [("bob", "allow")])
    assert world.revoke("bob", obj="v.dms") == 0
    assert sees(world, ["bob"], "v")


# ------------------------------------------------------------ object allow


def test_a_local_allow_on_one_local_file_opens_that_file_only(world: World) -> None:
    local_file(world, "v", "a")
    local_file(world, "w", "b")
    world.allow("bob", obj="v.txt")
    assert sees(world, ["bob"], "v") and in_scope(world, ["bob"], "a")
    assert not sees(world, ["bob"], "w") and not in_scope(world, ["bob"], "b")
    assert projection(world, "v") == (("bob",), ())
    assert not world.objects["v.txt"].acl_known


def test_a_local_allow_never_overrides_an_external_acl(world: World) -> None:
    dms_object(world, [("alice", "allow")])
    dms_object(world, None, version="w")
    world.allow("bob", obj="v.dms")
    world.allow("bob", obj="w.dms")
    assert not sees(world, ["bob"], "v") and not sees(world, ["bob"], "w")
    assert not in_scope(world, ["bob"], "d")
    assert projection(world, "v") == (("alice",), ())
    assert not world.objects["w.dms"].acl_known, "a local allow makes no unknown ACL known"


def test_a_local_allow_is_never_cited_as_the_objects_acl(world: World) -> None:
    """A hit cites the objects whose own ACL lets the caller in, not one an operator opened locally."""
    dms_object(world, [("bob", "allow")])
    world.object("copy.dms", "dms", [])
    world.observe("v", "copy.dms")
    world.allow("bob", obj="copy.dms")
    viewer = viewer_for(world.session, ["bob"], world.settings)
    sources, delegated = citable_sources(world.session, viewer, [world.versions["v"].id])[world.versions["v"].id]
    assert [s.external_id for s in sources] == ["v.dms"] and not delegated


def test_in_intersect_mode_a_local_allow_on_the_object_is_the_local_half(world: World) -> None:
    world.settings = Settings(security={"source_acl_mode": "intersect"})
    dms_object(world, [("bob", "allow")])
    assert not sees(world, ["bob"], "v")
    world.allow("bob", obj="v.dms")
    assert sees(world, ["bob"], "v") and in_scope(world, ["bob"], "d")
    assert projection(world, "v") == (("bob",), ())


def test_an_object_rule_marks_the_projection_of_the_versions_it_carries_stale(world: World) -> None:
    local_file(world, "v", "a")
    local_file(world, "w", "b")
    before = {name: v.access_version for name, v in world.versions.items()}
    world.deny("bob", obj="v.txt")
    for version in world.versions.values():
        world.session.refresh(version)
    assert world.versions["v"].access_version == before["v"] + 1
    assert world.versions["w"].access_version == before["w"]


# ------------------------------------------------------------ local memberships


def test_a_local_member_gets_what_the_group_is_granted_and_its_denies(world: World) -> None:
    local_file(world, "v", "a")
    local_file(world, "w", "b")
    world.allow("litigation", project="p")
    world.deny("litigation", document="b")
    assert not sees(world, ["carol"], "v")
    world.local_members("Litigation", ["Carol"])
    assert sees(world, ["carol"], "v") and in_scope(world, ["carol"], "a")
    assert not sees(world, ["carol"], "w") and not in_scope(world, ["carol"], "b")


def test_a_local_membership_survives_the_sources_replacement_of_that_group(world: World) -> None:
    local_file(world)
    world.allow("litigation", project="p")
    world.members("litigation", ["alice", "carol"], source="dms")
    world.local_members("litigation", ["carol", "dave"])
    world.members("litigation", [], source="dms")
    assert sees(world, ["carol"], "v") and sees(world, ["dave"], "v")
    assert not sees(world, ["alice"], "v")
    listed = {(m.member, m.origin) for m in grants.list_memberships(world.session, "LITIGATION")}
    assert listed == {("carol", "local"), ("dave", "local")}


def test_removing_a_local_membership_takes_its_access_away_and_leaves_the_mirrored_one(world: World) -> None:
    local_file(world)
    world.allow("litigation", project="p")
    world.members("litigation", ["alice"], source="dms")
    world.local_members("litigation", ["alice", "carol"])
    before = grants.current_access_generation(world.session)
    removed = grants.remove_local_members(world.session, "litigation", ["alice", "Carol"])
    assert [(m.member, m.origin) for m in removed] == [("alice", "local"), ("carol", "local")]
    assert grants.current_access_generation(world.session) == before + 1, "a cached scope is not served again"
    assert not sees(world, ["carol"], "v") and not in_scope(world, ["carol"], "d")
    assert sees(world, ["alice"], "v"), "the DMS's membership is the DMS's to remove"
    assert [(m.member, m.origin) for m in grants.list_memberships(world.session)] == [("alice", "dms")]
