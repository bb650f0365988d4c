"""The write side of access: grants, mirrored ACLs, memberships and the generation counter."""

from __future__ import annotations

import pytest
from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from ki_core import grants
from ki_core.config import Settings
from ki_core.grants import AclEntry, GrantTarget, InvalidPrincipal, UnknownTarget
from ki_core.models import (
    AccessGeneration,
    Grant,
    GrantEffect,
    GrantScope,
    GroupMembership,
)
from tests.ki_core.access_world import World

ALIASES = Settings(security={"principal_aliases": {" A.Smith ": " Alice "}})


@pytest.fixture
def world(db_session: Session) -> World:
    world = World(db_session, ALIASES)
    world.version("v", "contract.pdf", "mandant-a")
    world.object("contract.pdf", "fs")
    world.observe("v", "contract.pdf")
    return world


def stored(session: Session, scope: GrantScope | None = None) -> list[tuple[str, str, str]]:
    stmt = select(Grant.scope, Grant.effect, Grant.principal).order_by(Grant.principal, Grant.effect)
    if scope is not None:
        stmt = stmt.where(Grant.scope == scope)
    return [(s.value, e.value, p) for s, e, p in session.execute(stmt)]


def generation(session: Session) -> int:
    return grants.current_access_generation(session)


def test_a_grant_is_stored_normalized_as_named_aliases_apply_when_matching(world: World) -> None:
    project = GrantTarget.project(world.projects["mandant-a"].id)
    grants.grant(world.session, project, "  A.SMITH", settings=ALIASES)
    assert stored(world.session) == [("project", "allow", "a.smith")]


def test_granting_twice_keeps_one_row_and_bumps_once(world: World) -> None:
    project = GrantTarget.project(world.projects["mandant-a"].id)
    before = generation(world.session)
    first = grants.grant(world.session, project, "bob", settings=ALIASES)
    second = grants.grant(world.session, project, " BOB ", settings=ALIASES)
    assert first.id == second.id
    assert generation(world.session) == before + 1


def test_allow_and_deny_for_the_same_principal_are_two_grants(world: World) -> None:
    document = GrantTarget.document(world.documents["contract.pdf"].id)
    grants.grant(world.session, document, "bob", settings=ALIASES)
    grants.grant(world.session, document, "bob", effect=GrantEffect.DENY, settings=ALIASES)
    assert stored(world.session) == [("document", "allow", "bob"), ("document", "deny", "bob")]


def test_revoke_removes_only_the_named_effect_and_bumps_only_on_change(world: World) -> None:
    document = GrantTarget.document(world.documents["contract.pdf"].id)
    grants.grant(world.session, document, "bob", settings=ALIASES)
    grants.grant(world.session, document, "bob", effect=GrantEffect.DENY, settings=ALIASES)
    before = generation(world.session)
    assert grants.revoke(world.session, document, "Bob", effect=GrantEffect.DENY, settings=ALIASES) == 1
    assert generation(world.session) == before + 1
    assert grants.revoke(world.session, document, "bob", effect=GrantEffect.DENY, settings=ALIASES) == 0
    assert generation(world.session) == before + 1
    assert stored(world.session) == [("document", "allow", "bob")]


def test_unknown_targets_and_blank_principals_are_refused(world: World) -> None:
    with pytest.raises(UnknownTarget, match="no project"):
        grants.grant(world.session, GrantTarget.project("nope"), "bob", settings=ALIASES)
    with pytest.raises(UnknownTarget, match="no document"):
        grants.revoke(world.session, GrantTarget.document("nope"), "bob", settings=ALIASES)
    with pytest.raises(InvalidPrincipal):
        grants.grant(world.session, GrantTarget.project(world.projects["mandant-a"].id), " \t", settings=ALIASES)
    with pytest.raises(UnknownTarget, match="no source_object"):
        grants.grant(world.session, GrantTarget.source_object("x"), "bob", settings=ALIASES)
    obj = GrantTarget.source_object(world.objects["contract.pdf"].id)
    with pytest.raises(ValueError, match="replace_object_acl"):
        grants.grant(world.session, obj, "bob", origin="dms", settings=ALIASES)
    assert stored(world.session) == []


def test_a_grant_marks_the_index_projection_of_affected_versions_stale(world: World) -> None:
    version = world.versions["v"]
    before = version.access_version
    grants.grant(world.session, GrantTarget.project(world.projects["mandant-a"].id), "bob", settings=ALIASES)
    world.session.refresh(version)
    assert version.access_version == before + 1


def test_list_grants_by_project_and_principal(world: World) -> None:
    world.version("w", "other.pdf", "mandant-b")
    world.allow("alice", project="mandant-a")
    world.deny("bob", document="contract.pdf")
    world.allow("bob", project="mandant-b")
    world.object("dms-1", "dms", [("bob", "allow")])

    in_a = grants.list_grants(world.session, project_id=world.projects["mandant-a"].id, settings=ALIASES)
    assert [(g.principal, g.scope.value, g.project_name, g.document_key) for g in in_a] == [
        ("alice", "project", "mandant-a", None),
        ("bob", "document", "mandant-a", "contract.pdf"),
    ]
    of_bob = grants.list_grants(world.session, principal=" BOB", settings=ALIASES)
    assert {(g.scope.value, g.effect.value) for g in of_bob} == {("document", "deny"), ("project", "allow")}
    mirrored = grants.list_grants(world.session, principal="bob", include_mirrored=True, settings=ALIASES)
    assert {g.scope.value for g in mirrored} == {"document", "project", "source_object"}


def test_replacing_an_acl_makes_it_known_and_exact(world: World) -> None:
    obj = world.object("dms-1", "dms")
    assert not obj.acl_known
    grants.replace_object_acl(world.session, obj.id, [AclEntry(principal="Team A"), AclEntry(principal="bob")],
                              settings=ALIASES)
    grants.replace_object_acl(
        world.session, obj.id,
        [AclEntry(principal="team a"), AclEntry(principal="A.Smith", effect=GrantEffect.DENY)],
        settings=ALIASES,
    )
    assert obj.acl_known
    assert stored(world.session, GrantScope.SOURCE_OBJECT) == [("source_object", "deny", "a.smith"),
                                                               ("source_object", "allow", "team a")]
    assert {g.origin for g in world.session.scalars(select(Grant))} == {"dms"}


def test_an_empty_acl_is_known_and_none_is_unknown(world: World) -> None:
    obj = world.object("dms-1", "dms", [("bob", "allow")])
    grants.replace_object_acl(world.session, obj.id, [], settings=ALIASES)
    assert obj.acl_known and stored(world.session) == []
    grants.replace_object_acl(world.session, obj.id, [AclEntry(principal="bob")], settings=ALIASES)
    grants.replace_object_acl(world.session, obj.id, None, settings=ALIASES)
    assert not obj.acl_known and stored(world.session) == []


def test_replacing_an_acl_bumps_the_generation_and_the_observing_versions(world: World) -> None:
    version = world.versions["v"]
    before, access_before = generation(world.session), version.access_version
    world.acl("contract.pdf", [("bob", "allow")])
    world.session.refresh(version)
    assert generation(world.session) == before + 1
    assert version.access_version == access_before + 1
    with pytest.raises(UnknownTarget):
        grants.replace_object_acl(world.session, "nope", [], settings=ALIASES)


def test_group_members_are_replaced_normalized_without_empties(world: World) -> None:
    source = world.source("dms")
    grants.replace_group_members(world.session, source.id, " Litigation ", ["A.Smith", "bob", " "],
                                 settings=ALIASES)
    before = generation(world.session)
    grants.replace_group_members(world.session, source.id, "LITIGATION", ["alice", "carol"], settings=ALIASES)
    rows = world.session.execute(
        select(GroupMembership.group_principal, GroupMembership.member_principal).order_by(
            GroupMembership.member_principal
        )
    ).all()
    assert [tuple(r) for r in rows] == [("litigation", "alice"), ("litigation", "carol")]
    assert generation(world.session) == before + 1
    with pytest.raises(UnknownTarget):
        grants.replace_group_members(world.session, "nope", "g", ["a"], settings=ALIASES)


def test_a_local_object_rule_and_the_same_mirrored_entry_are_two_rows_and_the_sync_replaces_only_its_own(
    world: World,
) -> None:
    obj = world.object("dms-1", "dms", [("bob", "deny")])
    grants.grant(world.session, GrantTarget.source_object(obj.id), "Bob", effect=GrantEffect.DENY, settings=ALIASES)
    assert grants.list_grants(world.session, settings=ALIASES)[0].object_name == "dms:dms-1"
    grants.replace_object_acl(world.session, obj.id, [AclEntry(principal="alice")], settings=ALIASES)
    rows = world.session.execute(select(Grant.effect, Grant.principal, Grant.origin).order_by(Grant.origin)).all()
    assert [(e.value, p, o) for e, p, o in rows] == [("allow", "alice", "dms"), ("deny", "bob", "local")]
    grants.replace_object_acl(world.session, obj.id, None, settings=ALIASES)
    assert not obj.acl_known
    assert stored(world.session) == [("source_object", "deny", "bob")]
    listed = grants.list_grants(world.session, settings=ALIASES)
    assert [(g.origin, g.object_name) for g in listed] == [("local", "dms:dms-1")], "local rules list by default"


def test_a_mirrored_acl_cannot_take_the_origin_of_local_rules(world: World) -> None:
    obj = world.object("dms-1", "dms")
    with pytest.raises(ValueError, match="origin 'local'"):
        grants.replace_object_acl(world.session, obj.id, [AclEntry(principal="bob")], origin="local", settings=ALIASES)


def test_a_project_grant_made_here_and_the_same_one_mirrored_are_revoked_each_by_its_own(world: World) -> None:
    project = GrantTarget.project(world.projects["mandant-a"].id)
    grants.grant(world.session, project, "bob", origin="dms", settings=ALIASES)
    local = grants.grant(world.session, project, "bob", settings=ALIASES)
    assert local.origin == "local"
    assert grants.revoke(world.session, project, "bob", settings=ALIASES) == 1
    assert grants.grant_origins(world.session, project, "bob", effect=GrantEffect.ALLOW, settings=ALIASES) == ["dms"]
    assert grants.revoke(world.session, project, "bob", origin="dms", settings=ALIASES) == 1


def test_local_members_are_stored_normalized_once_and_blank_ones_refused(world: World) -> None:
    before = generation(world.session)
    assert grants.add_local_members(world.session, " Litigation ", ["Carol", "carol ", "A.Smith"],
                                    settings=ALIASES) == ["a.smith", "carol"]
    assert grants.add_local_members(world.session, "litigation", ["CAROL"], settings=ALIASES) == []
    assert generation(world.session) == before + 1
    with pytest.raises(InvalidPrincipal):
        grants.add_local_members(world.session, "litigation", [" "], settings=ALIASES)
    rows = world.session.execute(select(GroupMembership.source_id, GroupMembership.member_principal)).all()
    assert sorted(rows) == [(None, "a.smith"), (None, "carol")]


def test_removing_local_members_matches_every_name_and_never_a_mirrored_membership(world: World) -> None:
    world.members("litigation", ["alice"], source="dms")
    grants.add_local_members(world.session, "litigation", ["a.smith", "carol"], settings=ALIASES)
    removed = grants.remove_local_members(world.session, "LITIGATION", ["Alice"], settings=ALIASES)
    assert [(m.group, m.member, m.origin) for m in removed] == [("litigation", "a.smith", "local")]
    assert grants.remove_local_members(world.session, "litigation", ["nobody"], settings=ALIASES) == []
    listed = grants.list_memberships(world.session, settings=ALIASES)
    assert [(m.member, m.origin) for m in listed] == [("alice", "dms"), ("carol", "local")]


def test_source_objects_resolve_by_source_and_id_or_by_a_folders_path(world: World, tmp_path) -> None:
    folder = tmp_path / "akte"
    (folder / "sub").mkdir(parents=True)
    source = world.source(f"local:{folder.resolve()}", "local_fs")
    source.config = {"root": str(folder.resolve())}
    world.object("sub/x.pdf", source.name)
    dms = world.object("4711", "dms")
    expected = world.objects["sub/x.pdf"].id
    for reference in (f"local:{folder}:sub/x.pdf", f"{folder}:sub/x.pdf", "akte:sub/x.pdf", str(folder / "sub/x.pdf"),
                      "akte/sub/x.pdf", "local:sub/x.pdf"):
        assert grants.resolve_source_object(world.session, reference).id == expected, reference
    assert grants.resolve_source_object(world.session, "dms:4711").id == dms.id
    with pytest.raises(UnknownTarget, match="give SOURCE:ID"):
        grants.resolve_source_object(world.session, "dms:4712")


def test_a_relative_path_two_folders_hold_is_ambiguous(world: World, tmp_path) -> None:
    for name in ("one", "two"):
        root = (tmp_path / name).resolve()
        root.mkdir()
        source = world.source(f"local:{root}", "local_fs")
        source.config = {"root": str(root)}
        world.object(f"{name}/x.pdf", source.name)
        world.objects[f"{name}/x.pdf"].external_id = "x.pdf"
    world.session.flush()
    with pytest.raises(grants.AmbiguousTarget, match="names 2 objects"):
        grants.resolve_source_object(world.session, "local:x.pdf")
    assert grants.resolve_source_object(world.session, "one:x.pdf").source_id == world.sources[
        f"local:{(tmp_path / 'one').resolve()}"].id


def test_the_generation_counter_survives_a_missing_row(db_session: Session) -> None:
    db_session.execute(delete(AccessGeneration))
    assert grants.current_access_generation(db_session) == 0
    assert grants.bump_access_generation(db_session) == 1
    assert grants.bump_access_generation(db_session) == 2
    assert grants.current_access_generation(db_session) == 2


def test_documents_resolve_by_id_by_key_and_by_project_slash_key(world: World) -> None:
    document = world.documents["contract.pdf"]
    world.version("deep", "2024/leases/x.pdf", "mandant-a")
    project = grants.resolve_project(world.session, "mandant-a")
    assert grants.resolve_document(world.session, document.id).id == document.id
    assert grants.resolve_document(world.session, "contract.pdf", project).id == document.id
    assert grants.resolve_document(world.session, "mandant-a/2024/leases/x.pdf").key == "2024/leases/x.pdf"
    assert grants.resolve_project(world.session, project.id).name == "mandant-a"
    with pytest.raises(UnknownTarget):
        grants.resolve_document(world.session, "mandant-b/contract.pdf")
    with pytest.raises(UnknownTarget):
        grants.resolve_document(world.session, "x.pdf", project)


def test_inside_bumped_once_a_transaction_bumps_the_generation_once_and_again_after_a_rolled_back_savepoint(
    db_session: Session,
) -> None:
    before = grants.current_access_generation(db_session)
    with grants.bumped_once(db_session):
        grants.bump_access_generation(db_session)
        grants.bump_access_generation(db_session)
        assert grants.current_access_generation(db_session) == before + 1
        savepoint = db_session.begin_nested()
        grants.bump_access_generation(db_session)
        assert grants.current_access_generation(db_session) == before + 2
        savepoint.rollback()
        assert grants.current_access_generation(db_session) == before + 1
        # The savepoint's bump went with it: the next change in the transaction bumps again.
        grants.bump_access_generation(db_session)
        assert grants.current_access_generation(db_session) == before + 2
    # Outside, every change bumps.
    grants.bump_access_generation(db_session)
    grants.bump_access_generation(db_session)
    assert grants.current_access_generation(db_session) == before + 4
