"""compile_scope's set-based paths: each would leak a document or lose one if its set were wrong.

Every world is large enough that a project is partly visible through document
grants (the many-exceptions shape of the scope bench), and every scope is
compared with the predicate's plain id list as well as with the expected names.
Each test runs twice: with the product's threshold (a caller with few
document allows has them read as rows) and with none, so that the allows are
counted against the candidates and a project most of whose documents are
allowed is read as its complement (the merge of two sorted index scans).
"""

from __future__ import annotations

import pytest
from sqlalchemy.orm import Session

from ki_core.config import Settings
from ki_query import scope as scope_module
from ki_query.scope import AccessService, CompiledAccessScope
from tests.ki_core.access_world import World


def files(world: World, project: str, count: int) -> list[str]:
    """`count` local files without a known ACL, one version each."""
    for i in range(count):
        world.version(f"{project}-{i}", f"{project}-{i}", project)
        world.object(f"{project}-{i}", "fs")
        world.observe(f"{project}-{i}", f"{project}-{i}")
    return [f"{project}-{i}" for i in range(count)]


def admitted(world: World, scope: CompiledAccessScope) -> set[str]:
    return {name for name, d in world.documents.items() if scope.admits(d.project_id, d.id)}


def compiled(world: World, principals: list[str], project_id: str | None = None) -> CompiledAccessScope:
    return AccessService(world.session, world.settings).compile_scope(principals, project_id)


def scope_of(world: World, principals: list[str], project: str | None = None) -> set[str]:
    """The names the compact filter admits, checked against the predicate's id list first."""
    service = AccessService(world.session, world.settings)
    project_id = world.projects[project].id if project else None
    scope = service.compile_scope(principals, project_id)
    names = admitted(world, scope)
    expected = world.document_names(service.visible_document_ids(principals, project_id))
    assert names == expected, "compact filter vs predicate"
    assert scope.visible_document_count == len(names)
    visible_projects = {world.documents[n].project_id for n in names}
    assert scope.visible_project_ids == visible_projects
    assert scope.filter.term_count <= len(visible_projects) + scope.hidden_document_count
    return names


@pytest.fixture(params=["few-allows-as-rows", "allows-counted"])
def world(request: pytest.FixtureRequest, db_session: Session, monkeypatch: pytest.MonkeyPatch) -> World:
    if request.param == "allows-counted":
        monkeypatch.setattr(scope_module, "FEW_DOCUMENT_ALLOWS", 0)
    return World(db_session)


def test_document_grants_on_most_of_a_project_show_exactly_those_documents(world: World) -> None:
    names = files(world, "a", 10)
    for name in names[:9]:
        world.allow("alice", document=name)
    assert scope_of(world, ["alice"]) == set(names[:9])


def test_a_document_deny_beats_a_project_allow_and_a_document_allow(world: World) -> None:
    names = files(world, "a", 6) + files(world, "b", 6)
    world.allow("alice", project="a")
    for name in names[6:]:
        world.allow("team", document=name)
    world.members("team", ["alice"])
    world.deny("alice", document=names[0])
    world.deny("team", document=names[7])
    assert scope_of(world, ["alice"]) == set(names) - {names[0], names[7]}


def test_a_project_deny_beats_document_allows_in_it(world: World) -> None:
    names = files(world, "a", 4)
    for name in names:
        world.allow("alice", document=name)
    world.deny("alice", project="a")
    assert scope_of(world, ["alice"]) == set()


@pytest.mark.parametrize("origin", ["mirrored", "local"])
def test_a_deny_on_an_observed_object_hides_the_version_it_carries(world: World, origin: str) -> None:
    names = files(world, "a", 5) + files(world, "b", 5)
    world.allow("alice", project="a")
    for name in names[5:]:
        world.allow("alice", document=name)
    for name in (names[1], names[6]):
        if origin == "local":
            world.deny("alice", obj=name)
        else:
            world.object(f"{name}.dms", "dms", [("alice", "deny")])
            world.observe(name, f"{name}.dms")
    assert scope_of(world, ["alice"]) == set(names) - {names[1], names[6]}


def test_an_object_deny_on_one_version_leaves_the_documents_other_version_visible(world: World) -> None:
    names = files(world, "a", 4)
    world.version("a-0-v2", "a-0", "a")
    world.object("a-0-v2", "fs")
    world.observe("a-0-v2", "a-0-v2")
    for name in names:
        world.allow("alice", document=name)
    world.deny("alice", obj="a-0")
    assert scope_of(world, ["alice"]) == set(names)


def test_known_acl_objects_follow_their_acl_and_never_the_local_grants(world: World) -> None:
    for i in range(6):
        world.version(f"m{i}", f"m{i}", "a")
        world.object(f"m{i}", "dms", [("alice", "allow")] if i % 2 else [])
        world.observe(f"m{i}", f"m{i}")
    world.allow("alice", document="m0")
    world.allow("alice", document="m1")
    assert scope_of(world, ["alice"]) == {"m1", "m3", "m5"}


def test_a_known_acl_on_one_observation_switches_delegation_off(world: World) -> None:
    names = files(world, "a", 4)
    world.object("a-2.dms", "dms", [])
    world.observe("a-2", "a-2.dms")
    for name in names:
        world.allow("alice", document=name)
    assert scope_of(world, ["alice"]) == set(names) - {"a-2"}


def test_admins_see_every_observed_document_and_ignore_denies(world: World) -> None:
    names = files(world, "a", 4)
    world.version("gone", "gone", "a")
    world.object("gone", "dms")
    world.observe("gone", "gone", "deleted")
    world.document("empty", "a")
    world.deny("role:admin", document=names[0])
    assert scope_of(world, ["role:admin"]) == set(names)


def test_in_intersect_mode_a_source_allow_needs_a_local_allow(world: World) -> None:
    world.settings = Settings(security={"source_acl_mode": "intersect"})
    for i in range(6):
        world.version(f"m{i}", f"m{i}", "a")
        world.object(f"m{i}", "dms", [("alice", "allow")])
        world.observe(f"m{i}", f"m{i}")
    for i in range(4):
        world.allow("alice", document=f"m{i}")
    files(world, "b", 3)
    world.allow("alice", project="b")
    world.allow("alice", obj="b-0")
    assert scope_of(world, ["alice"]) == {"m0", "m1", "m2", "m3", "b-0", "b-1", "b-2"}


def test_a_local_object_allow_opens_that_local_file_alone(world: World) -> None:
    names = files(world, "a", 5)
    world.object("x.dms", "dms", [])
    world.version("x", "x", "a")
    world.observe("x", "x.dms")
    world.allow("alice", obj=names[2])
    world.allow("alice", obj="x.dms")
    for name in names[3:]:
        world.allow("alice", document=name)
    assert scope_of(world, ["alice"]) == {names[2], names[3], names[4]}


def test_most_of_a_project_by_document_grants_hides_the_ungranted_denied_and_undelegating(world: World) -> None:
    names = files(world, "a", 12) + files(world, "b", 4)
    for name in names[:11] + names[12:13]:
        world.allow("team", document=name)
    world.members("team", ["alice"])
    world.allow("alice", document=names[0])  # two grants name one document
    world.deny("alice", document=names[1])
    world.deny("alice", obj=names[2])
    world.object("a-3.dms", "dms", [])
    world.observe("a-3", "a-3.dms")  # a known ACL switches delegation off
    expected = set(names[:11]) - {names[1], names[2], names[3]} | {names[12]}
    assert scope_of(world, ["alice"]) == expected
    scope = compiled(world, ["alice"])
    a, b = world.projects["a"].id, world.projects["b"].id
    assert a in scope.filter.project_ids and b not in scope.filter.project_ids
    assert world.document_names(scope.filter.excluded_document_ids) == {names[1], names[2], names[3], names[11]}
    assert world.document_names(scope.filter.document_ids) == {names[12]}


def test_a_whole_project_without_exceptions_costs_one_term_and_no_ids(world: World) -> None:
    files(world, "a", 8)
    files(world, "b", 8)
    world.allow("alice", project="a")
    world.allow("alice", project="b")
    scope = compiled(world, ["alice"])
    assert scope.filter.project_ids == scope.fully_visible_project_ids == {world.projects[p].id for p in "ab"}
    assert not scope.filter.excluded_document_ids and not scope.filter.document_ids
    assert scope.visible_document_count == 16


def test_a_whole_project_with_most_documents_denied_lists_the_visible_ones(world: World) -> None:
    names = files(world, "a", 10)
    world.allow("alice", project="a")
    for name in names[2:]:
        world.deny("alice", document=name)
    assert scope_of(world, ["alice"]) == set(names[:2])
    scope = compiled(world, ["alice"])
    assert not scope.filter.project_ids
    assert world.document_names(scope.filter.document_ids) == set(names[:2])


def test_a_project_filter_keeps_document_grants_elsewhere_out(world: World) -> None:
    names = files(world, "a", 6) + files(world, "b", 6)
    for name in names:
        world.allow("alice", document=name)
    world.deny("alice", document=names[7])
    assert scope_of(world, ["alice"], project="b") == set(names[6:]) - {names[7]}
    assert scope_of(world, ["alice"], project="a") == set(names[:6])


def test_a_source_allow_opens_a_project_no_local_grant_reaches(world: World) -> None:
    files(world, "a", 3)
    for i in range(5):
        world.version(f"m{i}", f"m{i}", "m")
        world.object(f"m{i}", "dms", [("team", "allow")] if i < 4 else [])
        world.observe(f"m{i}", f"m{i}")
    world.members("team", ["alice"], source="dms")
    world.deny("alice", document="m0")
    assert scope_of(world, ["alice"]) == {"m1", "m2", "m3"}
    scope = compiled(world, ["alice"])
    assert scope.visible_project_ids == {world.projects["m"].id}
    assert scope.hidden_document_count == 2


def test_a_denied_project_stays_shut_whatever_names_its_documents(world: World) -> None:
    names = files(world, "a", 6)
    for name in names:
        world.allow("alice", document=name)
    world.object("a-0.dms", "dms", [("alice", "allow")])
    world.observe("a-0", "a-0.dms")
    world.deny("alice", project="a")
    assert scope_of(world, ["alice"]) == set()
    assert compiled(world, ["alice"]).is_empty
