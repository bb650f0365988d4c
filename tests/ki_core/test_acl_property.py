"""Random worlds against a plain-Python reference of spec/access.md, on SQLite and PostgreSQL.

The reference below is written from the page and shares no code with
ki_core.acl. Each generated world (projects, documents, versions, local_fs and
dms objects with and without known ACLs, active and deleted observations,
allow and deny grants at three scopes, an operator's local allows and denies
on single objects, nested and cyclic groups mirrored or added locally,
aliases, admins, both ACL modes) is built inside a SAVEPOINT that is rolled
back, and compile_scope, the compact filter, the plain id list,
re-verification, the index projection, the trigger-kept summary and explain
must all agree with it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st
from sqlalchemy.orm import Session

from ki_core.principals import index_projection
from ki_core.config import Settings
from ki_core.models import (
    Document,
    DocumentAccessSummary,
    DocumentVersion,
    ObservationState,
    Project,
    Source,
    SourceKind,
    SourceObject,
    SourceObservation,
)
from ki_query.scope import AccessService
from tests.ki_core.access_world import World

# 150 worlds per database: 300 per run in total, about 20 s.
WORLDS_PER_DATABASE = 150

# Few names, so grants, groups and callers meet often; repeated names are drawn more often.
NAMES = ["alice", "alice", "team", "team", "firm", "bob", "role:admin", "ops"]
SOURCES = {"fs1": "local_fs", "dms1": "dms", "fs2": "local_fs"}


def spelled(name: str) -> st.SearchStrategy[str]:
    """The same principal as a caller, a DMS or a config file might spell it."""
    return st.sampled_from([name, name.upper(), f"  {name}", f"{name.title()}\t"])


principal = st.sampled_from(NAMES).flatmap(spelled)
caller_principal = st.one_of(principal, principal, principal, st.sampled_from(["", "   ", "mallory"]))


@dataclass(frozen=True)
class Spec:
    """A world as plain data: what the reference reads and the builder writes."""

    documents: tuple[tuple[int, int], ...]  # (project, number of versions)
    objects: tuple[tuple[str, tuple[tuple[str, str], ...] | None], ...]  # (source, ACL or None)
    observations: tuple[tuple[int, int, str], ...]  # (version, object, state)
    grants: tuple[tuple[str, int, str, str], ...]  # (scope, target, effect, principal)
    groups: tuple[tuple[str, tuple[str, ...]], ...]  # (group, members)
    aliases: tuple[tuple[str, str], ...]
    admins: tuple[str, ...]
    mode: str
    callers: tuple[str, ...]
    project_filter: int | None  # -1: an id that does not exist
    explained: int  # which document explain is checked on
    local_rules: tuple[tuple[int, str, str], ...] = ()  # (object, effect, principal): `ki access grant --object`
    local_groups: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (group, members): `ki groups add`

    @property
    def version_documents(self) -> list[int]:
        return [d for d, (_p, n) in enumerate(self.documents) for _ in range(n)]


effect = st.sampled_from(["allow", "allow", "allow", "allow", "deny"])


@st.composite
def specs(draw) -> Spec:
    projects = draw(st.sampled_from([2, 1, 3]))
    documents = tuple(draw(st.lists(
        st.tuples(st.integers(0, projects - 1), st.sampled_from([1, 2, 1, 3, 0])), min_size=1, max_size=7
    )))
    versions = sum(n for _p, n in documents)
    acl = st.none() | st.none() | st.lists(st.tuples(principal, effect), max_size=3).map(tuple)
    # Hypothesis favours the first choices: local files first, so delegation is common.
    objects = tuple(draw(st.lists(st.tuples(st.sampled_from(list(SOURCES)), acl), min_size=1, max_size=7)))
    observed = st.tuples(st.integers(0, len(objects) - 1), st.sampled_from(["active", "active", "deleted"]))
    observations = tuple(
        (v, o, state)
        for v in range(versions)
        for o, state in draw(st.lists(observed, min_size=1, max_size=3, unique_by=lambda t: t[0]))
    )
    scopes = [("project", projects), ("document", len(documents))]
    grant = st.sampled_from(scopes).flatmap(
        lambda s: st.tuples(st.just(s[0]), st.integers(0, s[1] - 1), effect, principal)
    )
    return Spec(
        documents=documents,
        objects=objects,
        observations=observations,
        grants=tuple(draw(st.lists(grant, min_size=2, max_size=8))) + tuple(draw(st.lists(
            # Random grants rarely meet the caller: open a project to the usual caller and
            # deny one of its documents, or grant to a group the caller is made a member of.
            st.sampled_from([
                ("project", documents[0][0], "allow", "alice"),
                ("project", documents[-1][0], "allow", "team"),
                ("document", len(documents) - 1, "deny", "Alice"),
                ("document", 0, "deny", "team"),
            ]),
            max_size=3,
            unique=True,
        ))),
        groups=tuple(draw(st.lists(st.tuples(principal, st.lists(caller_principal, max_size=3).map(tuple)),
                                   max_size=4))) + draw(st.sampled_from([(), (("team", ("alice",)),)])),
        aliases=tuple(draw(st.lists(st.tuples(st.sampled_from(["al", "B.Smith", "Ops"]), principal), max_size=2))),
        admins=tuple(draw(st.sampled_from([("role:admin", "system:admin"), (" OPS ",), ()]))),
        mode=draw(st.sampled_from(["sufficient", "intersect"])),
        callers=tuple(draw(st.one_of(
            *[st.just(["alice"])] * 3, *[st.lists(caller_principal, min_size=1, max_size=3)] * 5, st.just([])
        ))),
        project_filter=draw(st.none() | st.none() | st.integers(-1, projects - 1)),
        explained=draw(st.integers(0, 6)),
        local_rules=tuple(draw(st.lists(
            st.tuples(st.integers(0, len(objects) - 1), st.sampled_from(["deny", "allow"]), principal)
            | st.sampled_from([(0, "deny", "alice"), (0, "allow", "alice"), (len(objects) - 1, "allow", "team")]),
            max_size=3,
        ))),
        local_groups=tuple(draw(st.lists(
            st.tuples(principal, st.lists(caller_principal, min_size=1, max_size=2).map(tuple)), max_size=2
        ))),
    )


# --------------------------------------------------------------- reference


def norm(name: str) -> str:
    return name.strip().casefold()


class Reference:
    """spec/access.md in plain Python over a Spec."""

    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        self.aliases = {norm(k): norm(v) for k, v in spec.aliases if norm(k)}
        self.grants = {(s, t, e, self.canon(p)) for s, t, e, p in spec.grants}
        for o, (_source, acl) in enumerate(spec.objects):
            self.grants |= {("object", o, e, self.canon(p)) for p, e in acl or ()}
        # An operator's rule on one object: never part of the object's ACL.
        self.grants |= {("local object", o, e, self.canon(p)) for o, e, p in spec.local_rules}
        self.members = self._memberships()
        self.admins = {norm(a) for a in spec.admins if norm(a)}

    def _memberships(self) -> set[tuple[str, str]]:
        """Replacing a group's members keeps the last list given for that name, as the sync does; aliases
        apply when matching, so the lists of several names of one group all count (canonical pairs).
        Local memberships count beside them, whatever the sync replaced after they were added."""
        latest: dict[str, tuple[str, ...]] = {}
        for group, members in self.spec.groups:
            if norm(group):
                latest[norm(group)] = members
        mirrored = {(self.canon(g), self.canon(m)) for g, ms in latest.items() for m in ms if self.canon(m)}
        local = {(self.canon(g), self.canon(m)) for g, ms in self.spec.local_groups for m in ms if self.canon(m)}
        return mirrored | local

    def canon(self, name: str) -> str:
        return self.aliases.get(norm(name), norm(name))

    def expand(self, callers: Iterable[str]) -> set[str]:
        found = {self.canon(c) for c in callers} - {""}
        while True:
            more = {g for g, m in self.members if m in found} - found
            if not more:
                return found
            found |= more

    def version_visible(self, version: int, principals: set[str], admin: bool) -> bool:
        document = self.spec.version_documents[version]
        project = self.spec.documents[document][0]
        active = [o for v, o, state in self.spec.observations if v == version and state == "active"]
        if admin:
            return bool(active)

        def granted(scope: str, target: int, effect: str) -> bool:
            return any((scope, target, effect, p) in self.grants for p in principals)

        if granted("project", project, "deny") or granted("document", document, "deny"):
            return False
        if any(granted("object", o, "deny") or granted("local object", o, "deny") for o in active):
            return False
        known = [o for o in active if self.spec.objects[o][1] is not None]
        local_allow = granted("project", project, "allow") or granted("document", document, "allow") or any(
            granted("local object", o, "allow") for o in active
        )
        delegated = not known and any(SOURCES[self.spec.objects[o][0]] == "local_fs" for o in active)
        accessible = any(granted("object", o, "allow") for o in known) or (delegated and local_allow)
        if self.spec.mode == "intersect":
            return accessible and local_allow
        return accessible

    def denied(self, version: int) -> set[str]:
        """Principals with a deny on the version's project, document or actively observed objects."""
        document = self.spec.version_documents[version]
        targets = {("project", self.spec.documents[document][0]), ("document", document)}
        active = [o for v, o, s in self.spec.observations if v == version and s == "active"]
        targets |= {(scope, o) for o in active for scope in ("object", "local object")}
        return {p for scope, target, effect, p in self.grants if effect == "deny" and (scope, target) in targets}

    def visible_versions(self, callers: Iterable[str]) -> set[int]:
        principals = self.expand(callers)
        admin = bool(principals & self.admins)
        return {v for v in range(len(self.spec.version_documents)) if self.version_visible(v, principals, admin)}

    def flags(self, document: int) -> tuple[bool, bool]:
        """(local delegation, has an active observation) of the access summary."""
        versions = [v for v, d in enumerate(self.spec.version_documents) if d == document]
        active = {v: [o for w, o, s in self.spec.observations if w == v and s == "active"] for v in versions}

        def delegates(objects: list[int]) -> bool:
            known = any(self.spec.objects[o][1] is not None for o in objects)
            return not known and any(SOURCES[self.spec.objects[o][0]] == "local_fs" for o in objects)

        return any(delegates(objs) for objs in active.values()), any(active.values())


# --------------------------------------------------------------- the world in SQL


def build(session: Session, spec: Spec) -> World:
    """The corpus in a few flushes; access data through ki_core.grants, as the product writes it."""
    world = World(session, Settings(security={
        "source_acl_mode": spec.mode,
        "principal_aliases": dict(spec.aliases),
        "admin_principals": list(spec.admins),
    }))
    world.projects = {f"p{p}": Project(name=f"p{p}") for p in range(3)}
    world.sources = {name: Source(name=name, kind=SourceKind(kind)) for name, kind in SOURCES.items()}
    session.add_all([*world.projects.values(), *world.sources.values()])
    session.flush()
    world.documents = {
        f"d{d}": Document(project_id=world.projects[f"p{p}"].id, key=f"d{d}")
        for d, (p, _n) in enumerate(spec.documents)
    }
    world.objects = {
        f"o{o}": SourceObject(source_id=world.sources[source].id, external_id=f"o{o}")
        for o, (source, _acl) in enumerate(spec.objects)
    }
    session.add_all([*world.documents.values(), *world.objects.values()])
    session.flush()
    world.versions = {
        f"v{v}": DocumentVersion(document_id=world.documents[f"d{d}"].id, seq=v + 1, content_hash=f"h{v}")
        for v, d in enumerate(spec.version_documents)
    }
    session.add_all(world.versions.values())
    session.flush()
    session.add_all(
        SourceObservation(version_id=world.versions[f"v{v}"].id, source_object_id=world.objects[f"o{o}"].id,
                          state=ObservationState(state))
        for v, o, state in spec.observations
    )
    session.flush()
    for o, (_source, acl) in enumerate(spec.objects):
        if acl is not None:
            world.acl(f"o{o}", acl)
    for group, members in spec.local_groups:
        if norm(group) and any(norm(m) for m in members):
            world.local_members(group, [m for m in members if norm(m)])
    for group, members in spec.groups:  # the sync replaces its lists after the operator's additions
        world.members(group, members)
    for scope, target, effect, who in spec.grants:
        where = {"project": f"p{target}"} if scope == "project" else {"document": f"d{target}"}
        (world.allow if effect == "allow" else world.deny)(who, **where)
    for o, effect, who in spec.local_rules:
        (world.allow if effect == "allow" else world.deny)(who, obj=f"o{o}")
    return world


def minimal_terms(world: World, visible_documents: set[str]) -> int:
    """Terms of the compact form: one per fully visible project, else the fewer of the two lists."""
    terms = 0
    for project in world.projects.values():
        ids = {name for name, d in world.documents.items() if d.project_id == project.id}
        shown = len(ids & visible_documents)
        if shown:
            terms += 1 if shown == len(ids) else min(shown, 1 + len(ids) - shown)
    return terms


def check(session: Session, spec: Spec) -> None:
    world = build(session, spec)
    reference = Reference(spec)
    service = AccessService(session, world.settings)
    wanted = None if spec.project_filter is None else (
        world.projects[f"p{spec.project_filter}"].id if spec.project_filter >= 0 else "no-such-project"
    )

    versions = {f"v{v}" for v in reference.visible_versions(spec.callers)}
    documents = {f"d{spec.version_documents[int(v[1:])]}" for v in versions}
    if wanted is not None:
        documents = {d for d in documents if world.documents[d].project_id == wanted}

    scope = service.compile_scope(list(spec.callers), project_id=wanted)
    describe(scope, world, documents, spec)
    admitted = {n for n, d in world.documents.items() if scope.admits(d.project_id, d.id)}
    assert admitted == documents, "compact filter"
    assert scope.visible_project_ids == {world.documents[d].project_id for d in documents}
    assert scope.visible_document_count == len(documents)
    assert world.document_names(service.visible_document_ids(list(spec.callers), wanted)) == documents
    assert scope.filter.term_count == minimal_terms(world, documents)
    assert scope.filter.match_none == (not documents)

    ids = [v.id for v in world.versions.values()]
    assert world.version_names(service.visible_versions(list(spec.callers), ids)) == versions, "re-verify"

    check_projection(world, reference)
    check_summary(world, reference)
    if len(spec.callers) == 1:
        check_explain(world, service, reference, spec.callers[0], spec.explained % len(world.documents))


def describe(scope, world: World, documents: set[str], spec: Spec) -> None:
    """Label the world so `--hypothesis-show-statistics` shows the generator reaches every shape."""
    event("visible documents: " + ("none" if not documents else "all" if documents == set(world.documents)
                                   else "some"))
    event(f"admin: {scope.is_admin}")
    kinds = [kind for kind, ids in (("projects", scope.filter.project_ids),
                                    ("exclusions", scope.filter.excluded_document_ids),
                                    ("documents", scope.filter.document_ids)) if ids]
    event("filter has: " + (", ".join(kinds) or "nothing"))
    event("local object rules: " + (", ".join(sorted({e for _o, e, _p in spec.local_rules})) or "none"))
    event(f"local memberships: {bool(spec.local_groups)}")


def check_projection(world: World, reference: Reference) -> None:
    projection = index_projection(world.session, [v.id for v in world.versions.values()], world.settings)
    for name, version in world.versions.items():
        index = int(name[1:])
        allowed, denied = projection[version.id]
        stored = {p for *_rest, p in reference.grants}
        assert set(allowed) == {p for p in stored if reference.version_visible(index, {p}, admin=False)}
        assert set(denied) == reference.denied(index)


def check_summary(world: World, reference: Reference) -> None:
    world.session.expire_all()
    for name, document in world.documents.items():
        row = world.session.get(DocumentAccessSummary, document.id)
        assert row is not None, f"no summary row for {name}"
        assert (row.local_delegation, row.has_active_observation) == reference.flags(int(name[1:]))


def check_explain(world: World, service: AccessService, reference: Reference, caller: str, document: int) -> None:
    visible = reference.visible_versions([caller])
    explanation = service.explain(caller, world.documents[f"d{document}"].id)
    for version in explanation.versions:
        assert version.visible == (int(world.version_names([version.version_id]).pop()[1:]) in visible)
        assert "SQL stands" not in version.decided_by, version.decided_by


def run_in_savepoint(session: Session, spec: Spec) -> None:
    savepoint = session.begin_nested()
    try:
        check(session, spec)
    finally:
        savepoint.rollback()


@settings(
    max_examples=WORLDS_PER_DATABASE,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(spec=specs())
@example(spec=Spec(  # a deny under an alias of the caller: explain once narrated it as allowed
    documents=((0, 1),), objects=(("fs1", None),), observations=((0, 0, "active"),),
    grants=(("project", 0, "allow", "alice"), ("project", 0, "deny", "ops")), groups=(),
    aliases=(("Ops", "alice"),), admins=("role:admin", "system:admin"), mode="sufficient",
    callers=("alice",), project_filter=None, explained=0,
))
@example(spec=Spec(  # memberships given under two names of one group both count, and its deny applies
    documents=((0, 1),), objects=(("fs1", None),), observations=((0, 0, "active"),),
    grants=(("project", 0, "allow", "alice"), ("document", 0, "deny", "team")),
    groups=(("team", ("alice",)), ("ops", ())), aliases=(("Ops", "team"),), admins=("role:admin", "system:admin"),
    mode="sufficient", callers=("alice",), project_filter=None, explained=0,
))
@example(spec=Spec(  # an operator's deny on one local file of a project open to the caller (the scope's
    # whole-project shortcut must not pass it) and on a DMS object its ACL opens
    documents=((0, 1), (0, 1), (0, 1)), objects=(("dms1", (("alice", "allow"),)), ("fs1", None), ("fs2", None)),
    observations=((0, 0, "active"), (1, 1, "active"), (2, 2, "active")),
    grants=(("project", 0, "allow", "alice"),), groups=(), aliases=(), admins=(), mode="sufficient",
    callers=("alice",), project_filter=None, explained=1, local_rules=((1, "deny", "Alice"), (0, "deny", "alice")),
))
@example(spec=Spec(  # a local allow opens a local file alone, never a DMS object; a local member gets the group's
    documents=((0, 1), (1, 1)), objects=(("fs1", None), ("dms1", ())),
    observations=((0, 0, "active"), (1, 1, "active")), grants=(("project", 0, "allow", "ops"),), groups=(),
    aliases=(), admins=(), mode="sufficient", callers=("alice",), project_filter=None, explained=1,
    local_rules=((0, "allow", "team"), (1, "allow", "team")), local_groups=(("team", ("alice",)),),
))
@example(spec=Spec(  # explain narrates that local allow: the local file it opens is explained as visible
    documents=((0, 1), (1, 1)), objects=(("fs1", None), ("dms1", ())),
    observations=((0, 0, "active"), (1, 1, "active")), grants=(("project", 0, "allow", "ops"),), groups=(),
    aliases=(), admins=(), mode="sufficient", callers=("alice",), project_filter=None, explained=0,
    local_rules=((0, "allow", "team"), (1, "allow", "team")), local_groups=(("team", ("alice",)),),
))
def test_random_worlds_agree_with_the_reference(db_session: Session, spec: Spec) -> None:
    run_in_savepoint(db_session, spec)
