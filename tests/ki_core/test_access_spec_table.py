"""spec/access.md, bullet by bullet: one table-driven test per bullet, on SQLite and PostgreSQL.

Each row is a small world written from the page (not from the implementation):
versions with observations of source objects, grants, memberships, settings,
the caller, and the versions the page says the caller sees.

World notation:
  "versions":  {version: [(object, state), ...]}   all in document "d" unless "documents" says otherwise
  "objects":   {object: (source, acl)}              source "fs*" is local_fs, "dms*" is dms; acl None = unknown
  "grants":    [(effect, principal, scope)]         scope "project" (p), a document name, or "object:NAME"
                                                    for an operator's local rule on that one object
  "groups":    {group: [members]}                   as the source "fs" mirrors them
  "local_groups": {group: [members]}                added by an operator (`ki groups add`)
"""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy.orm import Session

from ki_core.config import Settings
from ki_query.scope import AccessService
from tests.ki_core.access_world import World

FS = ("fs", None)  # a local_fs object without a known ACL


def build(session: Session, case: dict[str, Any]) -> tuple[World, AccessService]:
    settings = Settings(security=case.get("security", {}))
    world = World(session, settings)
    documents = case.get("documents", {})
    for version in case["versions"]:
        world.version(version, documents.get(version, "d"), case.get("projects", {}).get(version, "p"))
    for name, (source, acl) in case.get("objects", {}).items():
        world.object(name, source, acl)
    for version, observations in case["versions"].items():
        for obj, state in observations:
            world.observe(version, obj, state)
    for group, members in case.get("groups", {}).items():
        world.members(group, members)
    for group, members in case.get("local_groups", {}).items():
        world.local_members(group, members)
    for effect, principal, scope in case.get("grants", []):
        (world.allow if effect == "allow" else world.deny)(principal, **_target(scope))
    return world, AccessService(session, settings)


def _target(scope: str) -> dict[str, str]:
    if scope == "project":
        return {"project": "p"}
    if scope.startswith("object:"):
        return {"obj": scope.removeprefix("object:")}
    return {"document": scope}


def visible(session: Session, case: dict[str, Any]) -> set[str]:
    world, service = build(session, case)
    ids = [v.id for v in world.versions.values()]
    versions = world.version_names(service.visible_versions(case["caller"], ids))
    scope = service.compile_scope(case["caller"])
    in_scope = {name for name, d in world.documents.items() if scope.admits(d.project_id, d.id)}
    documents = case.get("documents", {})
    assert in_scope == {documents.get(v, "d") for v in versions}, "scope and re-verification disagree"
    return versions


def cases(*rows: tuple[str, dict[str, Any]]):
    return pytest.mark.parametrize("case", [row[1] for row in rows], ids=[row[0] for row in rows])


ACTIVE_FS = {"versions": {"v": [("o", "active")]}, "objects": {"o": FS}}


# ----------------------------------------------------------------- Principals


@cases(
    ("trim and casefold the caller", {**ACTIVE_FS, "grants": [("allow", "alice", "project")],
                                      "caller": ["  ALICE\t"], "expect": {"v"}}),
    ("trim and casefold the grant", {**ACTIVE_FS, "grants": [("allow", " Alice ", "project")],
                                     "caller": ["alice"], "expect": {"v"}}),
    ("empty strings are dropped", {**ACTIVE_FS, "grants": [("allow", "alice", "project")],
                                   "caller": ["", "   "], "expect": set()}),
    ("an unknown principal sees nothing", {**ACTIVE_FS, "grants": [("allow", "alice", "project")],
                                           "caller": ["mallory"], "expect": set()}),
)
def test_principals_1_normalize_every_caller_principal(db_session: Session, case) -> None:
    assert visible(db_session, case) == case["expect"]


@cases(
    ("the alias is replaced by its canonical name",
     {**ACTIVE_FS, "security": {"principal_aliases": {"A.Smith": "Alice"}},
      "grants": [("allow", "alice", "project")], "caller": [" a.smith "], "expect": {"v"}}),
    ("grants are stored alias-mapped",
     {**ACTIVE_FS, "security": {"principal_aliases": {"a.smith": "ALICE"}},
      "grants": [("allow", "A.Smith", "project")], "caller": ["alice"], "expect": {"v"}}),
    ("the alias itself no longer matches a grant to it",
     {**ACTIVE_FS, "security": {"principal_aliases": {"a.smith": "alice"}},
      "grants": [("allow", "bob", "project")], "caller": ["a.smith"], "expect": set()}),
)
def test_principals_2_aliases_map_to_the_canonical_principal(db_session: Session, case) -> None:
    assert visible(db_session, case) == case["expect"]


@cases(
    ("a group of the caller", {**ACTIVE_FS, "groups": {"team": ["alice"]},
                               "grants": [("allow", "team", "project")], "caller": ["alice"], "expect": {"v"}}),
    ("a group of a group", {**ACTIVE_FS, "groups": {"team": ["alice"], "firm": ["team"]},
                            "grants": [("allow", "firm", "project")], "caller": ["alice"], "expect": {"v"}}),
    ("cycles terminate", {**ACTIVE_FS, "groups": {"a": ["alice", "b"], "b": ["a"], "c": ["b"]},
                          "grants": [("allow", "c", "project")], "caller": ["alice"], "expect": {"v"}}),
    ("membership does not flow downwards", {**ACTIVE_FS, "groups": {"team": ["alice"]},
                                            "grants": [("allow", "alice", "project")], "caller": ["team"],
                                            "expect": set()}),
    ("members are stored normalized", {**ACTIVE_FS, "groups": {" Team ": [" ALICE "]},
                                       "grants": [("allow", "team", "project")], "caller": ["alice"],
                                       "expect": {"v"}}),
    ("a local membership counts like a mirrored one", {**ACTIVE_FS, "local_groups": {"Team": ["Alice"]},
                                                       "grants": [("allow", "team", "project")],
                                                       "caller": ["alice"], "expect": {"v"}}),
    ("local and mirrored memberships chain", {**ACTIVE_FS, "groups": {"firm": ["team"]},
                                              "local_groups": {"team": ["alice"]},
                                              "grants": [("allow", "firm", "project")], "caller": ["alice"],
                                              "expect": {"v"}}),
)
def test_principals_3_expand_with_group_memberships(db_session: Session, case) -> None:
    assert visible(db_session, case) == case["expect"]


@cases(
    ("a grant to another principal does not match", {**ACTIVE_FS, "grants": [("allow", "bob", "project")],
                                                      "caller": ["alice"], "expect": set()}),
    ("a grant to any principal of E matches", {**ACTIVE_FS, "grants": [("allow", "bob", "project")],
                                               "caller": ["alice", "BOB"], "expect": {"v"}}),
)
def test_principals_4_a_grant_matches_when_its_principal_is_in_e(db_session: Session, case) -> None:
    assert visible(db_session, case) == case["expect"]


# --------------------------------------------------------------- Observations


@cases(
    ("an active observation gives access", {**ACTIVE_FS, "grants": [("allow", "alice", "project")],
                                            "caller": ["alice"], "expect": {"v"}}),
    ("a deleted observation gives nothing", {"versions": {"v": [("o", "deleted")]}, "objects": {"o": FS},
                                             "grants": [("allow", "alice", "project")], "caller": ["alice"],
                                             "expect": set()}),
    ("a version without observations is invisible", {"versions": {"v": []},
                                                     "grants": [("allow", "alice", "project")],
                                                     "caller": ["alice"], "expect": set()}),
)
def test_observations_only_active_observations_give_access(db_session: Session, case) -> None:
    assert visible(db_session, case) == case["expect"]


KNOWN = {"versions": {"v": [("o", "active")]}}


@cases(
    ("a matching allow on the object", {**KNOWN, "objects": {"o": ("dms", [("alice", "allow")])},
                                        "caller": ["alice"], "expect": {"v"}}),
    ("known ACL without the caller", {**KNOWN, "objects": {"o": ("dms", [("bob", "allow")])},
                                      "caller": ["alice"], "expect": set()}),
    ("a known empty ACL", {**KNOWN, "objects": {"o": ("dms", [])}, "caller": ["alice"], "expect": set()}),
    ("a known ACL on a local_fs object is used too", {**KNOWN, "objects": {"o": ("fs", [("alice", "allow")])},
                                                      "caller": ["alice"], "expect": {"v"}}),
    ("a local allow does not replace a known ACL", {**KNOWN, "objects": {"o": ("fs", [])},
                                                    "grants": [("allow", "alice", "project")],
                                                    "caller": ["alice"], "expect": set()}),
    ("a local allow on the object is not its ACL", {**KNOWN, "objects": {"o": ("dms", [("bob", "allow")])},
                                                    "grants": [("allow", "alice", "object:o")],
                                                    "caller": ["alice"], "expect": set()}),
)
def test_observations_known_acl_needs_a_matching_allow_on_the_object(db_session: Session, case) -> None:
    assert visible(db_session, case) == case["expect"]


@cases(
    ("project allow", {**ACTIVE_FS, "grants": [("allow", "alice", "project")], "caller": ["alice"],
                       "expect": {"v"}}),
    ("document allow", {**ACTIVE_FS, "grants": [("allow", "alice", "d")], "caller": ["alice"], "expect": {"v"}}),
    ("no local allow", {**ACTIVE_FS, "caller": ["alice"], "expect": set()}),
    ("a local allow on the file", {**ACTIVE_FS, "grants": [("allow", "alice", "object:o")], "caller": ["alice"],
                                   "expect": {"v"}}),
    ("a local allow on another file", {"versions": {"v": [("o", "active")], "w": [("other", "active")]},
                                       "documents": {"w": "e"}, "objects": {"o": FS, "other": FS},
                                       "grants": [("allow", "alice", "object:other")], "caller": ["alice"],
                                       "expect": {"w"}}),
)
def test_observations_unknown_acl_on_local_fs_delegates_to_local_allow(db_session: Session, case) -> None:
    assert visible(db_session, case) == case["expect"]


@cases(
    ("project allow does not help", {**KNOWN, "objects": {"o": ("dms", None)},
                                     "grants": [("allow", "alice", "project"), ("allow", "alice", "d")],
                                     "caller": ["alice"], "expect": set()}),
    ("nor does a local allow on the object", {**KNOWN, "objects": {"o": ("dms", None)},
                                              "grants": [("allow", "alice", "object:o")],
                                              "caller": ["alice"], "expect": set()}),
)
def test_observations_unknown_acl_on_an_external_source_never_gives_access(db_session: Session, case) -> None:
    assert visible(db_session, case) == case["expect"]


MIXED = {"versions": {"v": [("local", "active"), ("ext", "active")]}}


@cases(
    ("a known ACL elsewhere switches delegation off",
     {**MIXED, "objects": {"local": FS, "ext": ("dms", [("bob", "allow")])},
      "grants": [("allow", "alice", "project")], "caller": ["alice"], "expect": set()}),
    ("even a known empty ACL switches it off",
     {**MIXED, "objects": {"local": FS, "ext": ("dms", [])},
      "grants": [("allow", "alice", "project")], "caller": ["alice"], "expect": set()}),
    ("the known ACL itself can still allow",
     {**MIXED, "objects": {"local": FS, "ext": ("dms", [("alice", "allow")])}, "caller": ["alice"],
      "expect": {"v"}}),
    ("a deleted observation with a known ACL does not switch it off",
     {"versions": {"v": [("local", "active"), ("ext", "deleted")]},
      "objects": {"local": FS, "ext": ("dms", [])},
      "grants": [("allow", "alice", "project")], "caller": ["alice"], "expect": {"v"}}),
    ("only the version with the known ACL loses delegation",
     {"versions": {"v1": [("local1", "active"), ("ext", "active")], "v2": [("local2", "active")]},
      "objects": {"local1": FS, "local2": FS, "ext": ("dms", [])},
      "grants": [("allow", "alice", "project")], "caller": ["alice"], "expect": {"v2"}}),
)
def test_observations_any_known_acl_stops_local_fs_delegation(db_session: Session, case) -> None:
    assert visible(db_session, case) == case["expect"]


# ------------------------------------------------------- A version is visible


@cases(
    ("an admin needs one active observation", {**KNOWN, "objects": {"o": ("dms", None)},
                                               "caller": ["role:admin"], "expect": {"v"}}),
    ("an admin ignores denies", {**ACTIVE_FS, "grants": [("deny", "role:admin", "project")],
                                 "caller": ["Role:Admin "], "expect": {"v"}}),
    ("an admin without an active observation sees nothing", {"versions": {"v": [("o", "deleted")]},
                                                             "objects": {"o": FS}, "caller": ["system:admin"],
                                                             "expect": set()}),
    ("admin through a group", {**ACTIVE_FS, "groups": {"role:admin": ["alice"]}, "caller": ["alice"],
                               "expect": {"v"}}),
    ("configured admin principals are normalized", {**ACTIVE_FS, "security": {"admin_principals": [" Ops "]},
                                                    "caller": ["OPS"], "expect": {"v"}}),
    ("a principal not configured as admin is not one", {**ACTIVE_FS, "security": {"admin_principals": ["ops"]},
                                                        "caller": ["role:admin"], "expect": set()}),
)
def test_visible_to_admins_with_an_active_observation(db_session: Session, case) -> None:
    assert visible(db_session, case) == case["expect"]


@cases(
    ("deny on the project", {**ACTIVE_FS, "grants": [("allow", "alice", "d"), ("deny", "alice", "project")],
                             "caller": ["alice"], "expect": set()}),
    ("deny on the document", {**ACTIVE_FS, "grants": [("allow", "alice", "project"), ("deny", "alice", "d")],
                              "caller": ["alice"], "expect": set()}),
    ("deny on an actively observed object", {"versions": {"v": [("a", "active"), ("b", "active")]},
                                             "objects": {"a": ("dms", [("alice", "allow")]),
                                                         "b": ("dms", [("team", "deny")])},
                                             "groups": {"team": ["alice"]}, "caller": ["alice"],
                                             "expect": set()}),
    ("deny and allow on the same object", {**KNOWN, "objects": {"o": ("dms", [("alice", "allow"),
                                                                              ("alice", "deny")])},
                                           "caller": ["alice"], "expect": set()}),
    ("deny on a deleted observation's object does not count",
     {"versions": {"v": [("a", "active"), ("b", "deleted")]},
      "objects": {"a": ("dms", [("alice", "allow")]), "b": ("dms", [("alice", "deny")])},
      "caller": ["alice"], "expect": {"v"}}),
    ("a deny to someone else does not count", {**ACTIVE_FS, "grants": [("allow", "alice", "project"),
                                                                       ("deny", "bob", "project")],
                                               "caller": ["alice"], "expect": {"v"}}),
    ("a local deny on an actively observed object", {**KNOWN, "objects": {"o": ("dms", [("alice", "allow")])},
                                                     "grants": [("deny", "alice", "object:o")],
                                                     "caller": ["alice"], "expect": set()}),
    ("a local deny on a file to a group of the caller", {**ACTIVE_FS, "local_groups": {"team": ["alice"]},
                                                         "grants": [("allow", "alice", "project"),
                                                                    ("deny", "team", "object:o")],
                                                         "caller": ["alice"], "expect": set()}),
    ("a local deny on a deleted observation's object does not count",
     {"versions": {"v": [("a", "active"), ("b", "deleted")]},
      "objects": {"a": ("dms", [("alice", "allow")]), "b": ("dms", None)},
      "grants": [("deny", "alice", "object:b")], "caller": ["alice"], "expect": {"v"}}),
)
def test_visible_1_no_matching_deny_at_any_scope(db_session: Session, case) -> None:
    assert visible(db_session, case) == case["expect"]


@cases(
    ("one accessible observation among several", {"versions": {"v": [("a", "active"), ("b", "active")]},
                                                  "objects": {"a": ("dms", [("bob", "allow")]),
                                                              "b": ("dms", [("alice", "allow")])},
                                                  "caller": ["alice"], "expect": {"v"}}),
    ("no accessible observation", {"versions": {"v": [("a", "active"), ("b", "active")]},
                                   "objects": {"a": ("dms", [("bob", "allow")]), "b": ("dms", None)},
                                   "caller": ["alice"], "expect": set()}),
)
def test_visible_2_at_least_one_accessible_active_observation(db_session: Session, case) -> None:
    assert visible(db_session, case) == case["expect"]


INTERSECT = {"security": {"source_acl_mode": "intersect"}}


@cases(
    ("intersect: a source allow alone is not enough", {**INTERSECT, **KNOWN,
                                                       "objects": {"o": ("dms", [("alice", "allow")])},
                                                       "caller": ["alice"], "expect": set()}),
    ("intersect: source allow and project allow", {**INTERSECT, **KNOWN,
                                                   "objects": {"o": ("dms", [("alice", "allow")])},
                                                   "grants": [("allow", "team", "project")],
                                                   "groups": {"team": ["alice"]},
                                                   "caller": ["alice"], "expect": {"v"}}),
    ("intersect: source allow and document allow", {**INTERSECT, **KNOWN,
                                                    "objects": {"o": ("dms", [("alice", "allow")])},
                                                    "grants": [("allow", "alice", "d")],
                                                    "caller": ["alice"], "expect": {"v"}}),
    ("intersect: a local allow alone is not enough", {**INTERSECT, **KNOWN,
                                                      "objects": {"o": ("dms", [])},
                                                      "grants": [("allow", "alice", "project")],
                                                      "caller": ["alice"], "expect": set()}),
    ("intersect: source allow and a local allow on the object", {**INTERSECT, **KNOWN,
                                                                 "objects": {"o": ("dms", [("alice", "allow")])},
                                                                 "grants": [("allow", "alice", "object:o")],
                                                                 "caller": ["alice"], "expect": {"v"}}),
    ("intersect: local_fs delegation still works", {**INTERSECT, **ACTIVE_FS,
                                                    "grants": [("allow", "alice", "project")],
                                                    "caller": ["alice"], "expect": {"v"}}),
    ("sufficient: a source allow alone is enough", {**KNOWN, "objects": {"o": ("dms", [("alice", "allow")])},
                                                    "caller": ["alice"], "expect": {"v"}}),
)
def test_visible_3_intersect_mode_also_needs_a_local_allow(db_session: Session, case) -> None:
    assert visible(db_session, case) == case["expect"]


# ---------------------------------------------------------------------- Scope


TWO_VERSIONS = {
    "versions": {"v1": [("o1", "active")], "v2": [("o2", "active")]},
    "objects": {"o1": ("dms", [("alice", "allow")]), "o2": ("dms", [("bob", "allow")])},
}


@cases(
    ("one visible version puts the document in scope", {**TWO_VERSIONS, "caller": ["alice"], "expect": {"v1"}}),
    ("the other version for the other caller", {**TWO_VERSIONS, "caller": ["bob"], "expect": {"v2"}}),
)
def test_scope_a_document_is_in_scope_when_one_version_is_visible(db_session: Session, case) -> None:
    # `visible` also asserts that the compiled scope admits exactly the documents of these versions.
    assert visible(db_session, case) == case["expect"]


@pytest.mark.parametrize(
    ("project_filter", "expected"),
    [(None, {"a", "b"}), ("p1", {"a"}), ("p2", {"b"}), ("unknown", set())],
    ids=["no filter", "first project", "second project", "unknown project"],
)
def test_scope_a_requested_project_filter_intersects(db_session: Session, project_filter, expected) -> None:
    world = World(db_session)
    for name, project in (("a", "p1"), ("b", "p2"), ("c", "p3")):
        world.version(name, name, project)
        world.object(name, "fs")
        world.observe(name, name)
    world.allow("alice", project="p1")
    world.allow("alice", project="p2")
    service = AccessService(db_session, world.settings)
    wanted = world.projects[project_filter].id if project_filter in world.projects else project_filter
    scope = service.compile_scope(["alice"], project_id=wanted)
    assert {n for n, d in world.documents.items() if scope.admits(d.project_id, d.id)} == expected
    assert scope.visible_project_ids == {world.documents[name].project_id for name in expected}


def test_scope_hits_are_versions_and_each_is_reverified(db_session: Session) -> None:
    world, service = build(db_session, {**TWO_VERSIONS, "caller": ["alice"]})
    scope = service.compile_scope(["alice"])
    document = world.documents["d"]
    assert scope.admits(document.project_id, document.id)
    hits = [world.versions["v1"].id, world.versions["v2"].id]
    assert world.version_names(service.visible_versions(["alice"], hits)) == {"v1"}


@cases(
    ("no principals", {**ACTIVE_FS, "grants": [("allow", "alice", "project")], "caller": []}),
    ("only unknown principals", {**ACTIVE_FS, "grants": [("allow", "alice", "project")],
                                 "caller": ["mallory", "eve"]}),
    ("only blank principals", {**ACTIVE_FS, "grants": [("allow", "alice", "project")], "caller": [" ", "\t"]}),
    ("an empty result", {**ACTIVE_FS, "caller": ["alice"]}),
)
def test_scope_nothing_visible_is_the_empty_scope_never_unfiltered(db_session: Session, case) -> None:
    _world, service = build(db_session, case)
    scope = service.compile_scope(case["caller"])
    assert scope.is_empty
    assert scope.filter.match_none
    assert scope.opensearch_filter() == {"match_none": {}}
    assert scope.visible_project_ids == frozenset()
