"""compile_scope: the compact filter, the cache, fail-closed inputs, explain, and a service over committed data."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy.orm import Session

from ki_core.config import Settings
from ki_core.db import make_engine, session_factory
from ki_core.grants import UnknownTarget, bump_access_generation
from ki_core.search.types import ScopeFilter
from ki_query.access_explain import AccessExplanation
from ki_query.scope import (
    AccessService,
    CompiledAccessScope,
    ScopeCache,
    scope_filter_query,
)
from tests.ki_core.access_world import World


def local_files(world: World, project: str, count: int) -> list[str]:
    """`count` documents of one version, each seen as a local file without a known ACL."""
    names = []
    for i in range(count):
        name = f"{project}-{i}"
        world.version(name, name, project)
        world.object(name, "fs")
        world.observe(name, name)
        names.append(name)
    return names


def admitted(world: World, scope: CompiledAccessScope) -> set[str]:
    return {name for name, d in world.documents.items() if scope.admits(d.project_id, d.id)}


@pytest.fixture
def world(db_session: Session) -> World:
    return World(db_session)


@pytest.fixture
def service(world: World) -> AccessService:
    return AccessService(world.session, world.settings)


# ------------------------------------------------------------ compact form


def test_a_fully_visible_project_costs_one_term(world: World, service: AccessService) -> None:
    local_files(world, "a", 5)
    world.allow("alice", project="a")
    scope = service.compile_scope(["alice"])
    assert scope.filter.project_ids == {world.projects["a"].id}
    assert scope.filter.term_count == 1
    assert scope.fully_visible_project_ids == {world.projects["a"].id}
    assert (scope.visible_document_count, scope.hidden_document_count) == (5, 0)


def test_a_mostly_visible_project_is_its_id_plus_the_exclusions(world: World, service: AccessService) -> None:
    names = local_files(world, "a", 6)
    world.allow("alice", project="a")
    world.deny("alice", document=names[0])
    scope = service.compile_scope(["alice"])
    assert scope.filter.project_ids == {world.projects["a"].id}
    assert scope.filter.excluded_document_ids == {world.documents[names[0]].id}
    assert admitted(world, scope) == set(names[1:])
    assert (scope.visible_document_count, scope.hidden_document_count) == (5, 1)


def test_a_barely_visible_project_lists_its_visible_documents(world: World, service: AccessService) -> None:
    names = local_files(world, "a", 6)
    world.allow("alice", document=names[0])
    world.allow("alice", document=names[1])
    scope = service.compile_scope(["alice"])
    assert scope.filter.project_ids == frozenset()
    assert scope.filter.document_ids == {world.documents[n].id for n in names[:2]}


def test_a_whole_project_with_many_hidden_documents_lists_the_visible_ones(world: World,
                                                                            service: AccessService) -> None:
    names = local_files(world, "a", 5)
    for name in names[:4]:
        world.object(f"{name}.dms", "dms", [])
        world.observe(name, f"{name}.dms")
    world.allow("alice", project="a")
    scope = service.compile_scope(["alice"])
    assert scope.filter.document_ids == {world.documents[names[4]].id}
    assert scope.filter.term_count == 1
    assert scope.visible_project_ids == {world.projects["a"].id}
    assert scope.fully_visible_project_ids == frozenset()


def test_a_project_seen_through_document_grants_becomes_one_term_when_complete(world: World,
                                                                                service: AccessService) -> None:
    names = local_files(world, "a", 3)
    for name in names:
        world.allow("alice", document=name)
    scope = service.compile_scope(["alice"])
    assert scope.filter.project_ids == {world.projects["a"].id}
    assert scope.filter.document_ids == frozenset()


def test_a_project_seen_through_source_grants_writes_exclusions_when_cheaper(world: World,
                                                                              service: AccessService) -> None:
    for i in range(5):
        world.version(f"m{i}", f"m{i}", "a")
        world.object(f"m{i}", "dms", [("alice", "allow")] if i else [])
        world.observe(f"m{i}", f"m{i}")
    scope = service.compile_scope(["alice"])
    assert scope.filter.project_ids == {world.projects["a"].id}
    assert scope.filter.excluded_document_ids == {world.documents["m0"].id}


def test_a_document_without_versions_keeps_its_project_from_being_whole(world: World,
                                                                       service: AccessService) -> None:
    local_files(world, "a", 3)
    world.document("empty", "a")
    world.allow("alice", project="a")
    scope = service.compile_scope(["alice"])
    assert "empty" not in admitted(world, scope)
    assert scope.filter.excluded_document_ids == {world.documents["empty"].id}


def test_the_project_filter_narrows_the_scope(world: World, service: AccessService) -> None:
    local_files(world, "a", 2)
    local_files(world, "b", 2)
    world.allow("alice", project="a")
    world.allow("alice", project="b")
    scope = service.compile_scope(["alice"], project_id=world.projects["b"].id)
    assert admitted(world, scope) == {"b-0", "b-1"}
    assert scope.project_filter == world.projects["b"].id
    assert service.compile_scope(["alice"], project_id="no-such-project").is_empty


def test_admins_see_every_document_with_an_active_observation(world: World, service: AccessService) -> None:
    local_files(world, "a", 2)
    world.version("gone", "gone", "a")
    world.object("gone", "dms")
    world.observe("gone", "gone", "deleted")
    scope = service.compile_scope(["System:Admin"])
    assert scope.is_admin
    assert admitted(world, scope) == {"a-0", "a-1"}


# ------------------------------------------------------------ fail closed


@pytest.mark.parametrize("principals", [[], [""], ["   ", "\t"], ["mallory"], ["mallory", " "]],
                         ids=["no principals", "empty string", "blanks", "unknown", "unknown and blank"])
def test_nobody_gets_the_empty_scope_without_an_error(world: World, service: AccessService, principals) -> None:
    local_files(world, "a", 2)
    world.allow("alice", project="a")
    scope = service.compile_scope(principals)
    assert scope.is_empty
    assert scope.opensearch_filter() == {"match_none": {}}
    assert service.visible_versions(principals, [v.id for v in world.versions.values()]) == set()


def test_case_and_whitespace_variants_compile_the_same_scope(world: World, service: AccessService) -> None:
    local_files(world, "a", 2)
    world.allow("alice", project="a")
    first = service.compile_scope(["alice"])
    assert service.compile_scope([" ALICE\t", "Alice"]) is first


def test_a_lone_string_is_one_principal_not_its_letters(world: World, service: AccessService) -> None:
    local_files(world, "a", 1)
    world.allow("a", project="a")
    assert service.compile_scope("alice").is_empty  # type: ignore[arg-type]
    assert not service.compile_scope("a").is_empty  # type: ignore[arg-type]


# ------------------------------------------------------------ the cache


def test_an_unchanged_generation_serves_the_cached_scope(world: World, service: AccessService) -> None:
    local_files(world, "a", 2)
    world.allow("alice", project="a")
    first = service.compile_scope(["alice"])
    assert service.compile_scope(["alice"]) is first
    bump_access_generation(world.session)
    assert service.compile_scope(["alice"]) is not first


def test_a_revoked_grant_shows_in_the_very_next_compile(world: World, service: AccessService) -> None:
    local_files(world, "a", 2)
    world.allow("alice", project="a")
    assert admitted(world, service.compile_scope(["alice"])) == {"a-0", "a-1"}
    world.revoke("alice", project="a")
    assert service.compile_scope(["alice"]).is_empty


def test_a_removed_membership_shows_in_the_very_next_compile(world: World, service: AccessService) -> None:
    local_files(world, "a", 1)
    world.members("team", ["alice", "bob"])
    world.allow("team", project="a")
    assert not service.compile_scope(["alice"]).is_empty
    world.members("team", ["bob"])
    assert service.compile_scope(["alice"]).is_empty


def test_a_deleted_observation_shows_in_the_very_next_compile(world: World, service: AccessService) -> None:
    local_files(world, "a", 2)
    world.allow("alice", project="a")
    assert admitted(world, service.compile_scope(["alice"])) == {"a-0", "a-1"}
    world.set_state("a-1", "a-1", "deleted")
    assert admitted(world, service.compile_scope(["alice"])) == {"a-0"}


def test_a_new_deny_in_the_source_acl_shows_in_the_very_next_compile(world: World, service: AccessService) -> None:
    world.version("m", "m", "a")
    world.object("m", "dms", [("alice", "allow")])
    world.observe("m", "m")
    assert admitted(world, service.compile_scope(["alice"])) == {"m"}
    world.acl("m", [("alice", "allow"), ("alice", "deny")])
    assert service.compile_scope(["alice"]).is_empty


def test_the_cache_forgets_the_least_recently_used_scope() -> None:
    cache = ScopeCache(size=2)
    scopes = [CompiledAccessScope(generation=g, principals=frozenset(), is_admin=False, acl_mode="sufficient")
              for g in range(3)]
    for g, scope in enumerate(scopes):
        cache.put((g,), scope)
        cache.get((0,))
    assert len(cache) == 2
    assert cache.get((0,)) is scopes[0] and cache.get((1,)) is None and cache.get((2,)) is scopes[2]


# ------------------------------------------------------------ explain


def test_explain_is_typed_and_names_the_deciding_rule(world: World, service: AccessService) -> None:
    world.version("v1", "memo", "a")
    world.object("memo.dms", "dms", [("litigation", "allow")])
    world.observe("v1", "memo.dms")
    world.version("v2", "memo", "a")
    world.object("memo-2.dms", "dms", None)
    world.observe("v2", "memo-2.dms")
    world.members("litigation", ["team"])
    world.members("team", ["alice"])
    explanation = service.explain(" Alice ", world.documents["memo"].id)
    assert isinstance(explanation, AccessExplanation)
    assert explanation.visible
    first, second = explanation.versions
    assert first.visible and "known ACL" in first.decided_by
    assert first.grants[0].via == ("alice", "team", "litigation")
    assert not second.visible and "fail closed" in second.decided_by
    assert AccessExplanation.model_validate_json(explanation.model_dump_json()) == explanation


@pytest.mark.parametrize(
    ("setup", "caller", "phrase"),
    [
        ("deny", "alice", "denied by deny to 'alice' on project 'a'"),
        ("admin", "role:admin", "admin (role:admin)"),
        ("nothing", " ", "no principals"),
        ("deleted", "alice", "no active observation"),
        ("intersect", "alice", "intersect mode"),
        ("known elsewhere", "alice", "delegation off"),
    ],
)
def test_explain_phrases_each_rule(world: World, setup: str, caller: str, phrase: str) -> None:
    if setup == "intersect":
        world.settings = Settings(security={"source_acl_mode": "intersect"})
    world.version("v", "d", "a")
    world.object("f", "fs", [("alice", "allow")] if setup == "intersect" else None)
    world.observe("v", "f", "deleted" if setup == "deleted" else "active")
    if setup != "intersect":
        world.allow("alice", project="a")
    if setup == "deny":
        world.deny("alice", project="a")
    if setup == "known elsewhere":
        world.object("x", "dms", [])
        world.observe("v", "x")
    version = AccessService(world.session, world.settings).explain(caller, world.documents["d"].id).versions[0]
    assert phrase in version.decided_by + " ".join(o.reason for o in version.observations)


def test_explain_an_unknown_document_is_an_error_naming_it(service: AccessService) -> None:
    with pytest.raises(UnknownTarget, match="no-such-id"):
        service.explain("alice", "no-such-id")


# ------------------------------------------------------------ the OpenSearch filter


def evaluate(clause: dict[str, Any], doc: dict[str, str]) -> bool:
    """A tiny evaluator of the bool/terms/match_none clauses OpenSearch would apply."""
    if "match_none" in clause:
        return False
    if "terms" in clause:
        (field, values), = clause["terms"].items()
        return doc[field] in values
    body = clause["bool"]
    return (
        all(evaluate(c, doc) for c in body.get("filter", []))
        and not any(evaluate(c, doc) for c in body.get("must_not", []))
        and (not body.get("should") or sum(evaluate(c, doc) for c in body["should"]) >= body["minimum_should_match"])
    )


ids = st.frozensets(st.sampled_from([f"d{i}" for i in range(8)]))


@settings(max_examples=200, deadline=None)
@given(projects=st.frozensets(st.sampled_from(["p0", "p1", "p2"])), excluded=ids, documents=ids)
def test_the_opensearch_filter_admits_exactly_what_the_scope_admits(projects, excluded, documents) -> None:
    scope = ScopeFilter(project_ids=projects, excluded_document_ids=excluded, document_ids=documents)
    query = scope_filter_query(scope)
    for i in range(8):
        doc = {"project_id": f"p{i % 3}", "document_id": f"d{i}"}
        assert evaluate(query, doc) == scope.admits(doc["project_id"], doc["document_id"])


# ------------------------------------------------------------ a service with its own sessions


@pytest.fixture
def committed(committed_pg_url: str) -> Iterator[tuple[World, AccessService]]:
    engine = make_engine(committed_pg_url)
    factory = session_factory(engine)
    writer = factory()
    try:
        yield World(writer), AccessService(factory, Settings())
    finally:
        writer.rollback()
        writer.close()
        engine.dispose()


def test_a_service_with_a_session_factory_sees_each_commit_in_the_next_compile(committed) -> None:
    world, service = committed
    names = local_files(world, "committed", 2)
    world.allow("carol", project="committed")
    world.session.commit()
    assert admitted(world, service.compile_scope(["carol"])) == set(names)
    assert service.visible_document_ids(["carol"]) == {world.documents[n].id for n in names}
    world.deny("carol", document=names[0])
    assert admitted(world, service.compile_scope(["carol"])) == set(names), "uncommitted changes stay invisible"
    world.session.commit()
    assert admitted(world, service.compile_scope(["carol"])) == {names[1]}
