"""Compile who may see what into the compact search filter, before any score is computed.

`AccessService.compile_scope` evaluates ki_core.acl.version_predicate for the
caller and returns a `CompiledAccessScope`: the visible projects and documents
and their compact `ScopeFilter` (one term per fully visible project, document
ids only for the exceptions). It never returns an unfiltered scope: no
principals, unknown principals or nothing visible all give `match_none`.

Work is proportional to the exceptions, not to the corpus: in a project the
caller may see as a whole (a matching project allow, no project deny), a
document whose summary says "local delegation" (or, for admins, "an active
observation") and which no matching deny touches is visible by the rules
themselves, so only the other documents are evaluated with the predicate.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict
from sqlalchemy import ColumnElement, Select, false, func, or_, select, union, union_all
from sqlalchemy.orm import Session

from ki_core.acl import (
    AclMode,
    Viewer,
    canonical_principals,
    expand_groups,
    in_set,
    principal_aliases,
    viewer_for,
    viewer_of,
    viewer_predicate,
    visible_document_ids,
    visible_versions,
)
from ki_core.config import Settings, get_settings
from ki_core.grants import current_access_generation
from ki_core.models import (
    Document,
    DocumentAccessSummary,
    DocumentVersion,
    Grant,
    GrantEffect,
    GrantScope,
    ObservationState,
    Project,
    SourceObject,
    SourceObservation,
)
from ki_core.models.access import LOCAL_ORIGIN
from ki_core.search.types import ScopeFilter
from ki_query.access_explain import AccessExplanation, explain_document

# Enough for every distinct (caller, project filter) of a busy hour; entries of an
# older generation are never read again and age out.
SCOPE_CACHE_SIZE = 1024


class CompiledAccessScope(BaseModel):
    """What one caller may see, as ids and as the compact filter the index applies."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    generation: int
    principals: frozenset[str]
    is_admin: bool
    acl_mode: AclMode
    project_filter: str | None = None
    visible_project_ids: frozenset[str] = frozenset()
    fully_visible_project_ids: frozenset[str] = frozenset()
    visible_document_count: int = 0
    # Invisible documents inside visible projects: the individual exceptions.
    hidden_document_count: int = 0
    filter: ScopeFilter = ScopeFilter.nothing()

    @property
    def is_empty(self) -> bool:
        return self.filter.match_none

    @property
    def viewer(self) -> Viewer:
        """E and its switches, for re-verifying hits with ki_core.acl.visible_versions."""
        return Viewer(principals=self.principals, is_admin=self.is_admin, acl_mode=self.acl_mode)

    def admits(self, project_id: str, document_id: str) -> bool:
        return self.filter.admits(project_id, document_id)

    def opensearch_filter(self) -> dict[str, Any]:
        return scope_filter_query(self.filter)


def scope_filter_query(scope: ScopeFilter) -> dict[str, Any]:
    """The OpenSearch bool clause selecting exactly what `scope.admits` admits (the backend's own translation)."""
    from ki_core.search.opensearch import scope_clause

    return scope_clause(scope)


# ------------------------------------------------------------------ tallies


@dataclass
class ProjectTally:
    """One project's documents as far as the compilation needed to look at them."""

    total: int = 0
    # Seen as a whole: every document not in `hidden` is visible.
    whole: bool = False
    flagged: int = 0
    hidden: set[str] = field(default_factory=set)
    visible: set[str] = field(default_factory=set)

    @property
    def visible_count(self) -> int:
        return self.total - len(self.hidden) if self.whole else len(self.visible)

    @property
    def fully_visible(self) -> bool:
        return self.total > 0 and self.visible_count == self.total

    @property
    def prefers_listing(self) -> bool:
        """Listing visible ids costs no more terms than project id + exclusions."""
        return self.visible_count <= 1 + self.total - self.visible_count

    @property
    def needs_all_ids(self) -> bool:
        """The cheaper form needs ids the evaluation did not produce."""
        if self.visible_count == 0 or self.fully_visible:
            return False
        return self.prefers_listing if self.whole else not self.prefers_listing


def compile_for_viewer(
    session: Session, viewer: Viewer, project_filter: str | None, generation: int
) -> CompiledAccessScope:
    """The scope of an expanded viewer: a handful of set-based queries, none per document."""
    empty = _empty_scope(viewer, project_filter, generation)
    if viewer.sees_nothing:
        return empty
    whole = _whole_projects(session, viewer, project_filter)
    tallies = _tally_whole_projects(session, whole, viewer)
    unsettled = sorted(p for p, t in tallies.items() if t.flagged < t.total)
    kinds = _narrower_grant_kinds(session, viewer)
    for document_id, project_id, visible in _evaluate_candidates(
        session, viewer, project_filter, sorted(whole), unsettled, kinds
    ):
        tally = tallies.setdefault(project_id, ProjectTally())
        if tally.whole and not visible:
            tally.hidden.add(document_id)
        elif not tally.whole and visible:
            tally.visible.add(document_id)
    _count_partly_visible_projects(session, tallies)
    _complete_ids(session, tallies)
    return _scope_from_tallies(empty, tallies)


def _empty_scope(viewer: Viewer, project_filter: str | None, generation: int) -> CompiledAccessScope:
    return CompiledAccessScope(
        generation=generation,
        principals=viewer.principals,
        is_admin=viewer.is_admin,
        acl_mode=viewer.acl_mode,
        project_filter=project_filter,
    )


def _whole_projects(session: Session, viewer: Viewer, project_filter: str | None) -> set[str]:
    """Projects the caller may see as a whole: every project for admins, else allowed and not denied."""
    if viewer.is_admin:
        stmt = select(Project.id)
        if project_filter is not None:
            stmt = stmt.where(Project.id == project_filter)
        return set(session.scalars(stmt))
    stmt = select(Grant.project_id, Grant.effect).where(
        Grant.scope == GrantScope.PROJECT, in_set(Grant.principal, viewer.principals)
    )
    if project_filter is not None:
        stmt = stmt.where(Grant.project_id == project_filter)
    rows = session.execute(stmt).all()
    allowed = {p for p, effect in rows if effect == GrantEffect.ALLOW}
    return allowed - {p for p, effect in rows if effect == GrantEffect.DENY}


def _narrower_grant_kinds(session: Session, viewer: Viewer) -> frozenset[tuple[GrantScope, GrantEffect]]:
    """Which document and source-object grant kinds E holds at all: four index probes.

    A kind E does not hold cannot name a candidate, so its subquery is left out.
    """
    if viewer.is_admin:
        return frozenset()
    kinds = [
        (scope, effect)
        for scope in (GrantScope.DOCUMENT, GrantScope.SOURCE_OBJECT)
        for effect in (GrantEffect.ALLOW, GrantEffect.DENY)
    ]
    probes = [
        select(1)
        .where(Grant.scope == scope, Grant.effect == effect, in_set(Grant.principal, viewer.principals))
        .exists()
        for scope, effect in kinds
    ]
    row = session.execute(select(*probes)).one()
    return frozenset(kind for kind, held in zip(kinds, row, strict=True) if held)


def _summary_flag(viewer: Viewer) -> ColumnElement[bool]:
    """The summary flag that, with a project allow (or admin rights), makes a document visible."""
    if viewer.is_admin:
        return DocumentAccessSummary.has_active_observation.is_(True)
    return DocumentAccessSummary.local_delegation.is_(True)


def _tally_whole_projects(session: Session, whole: set[str], viewer: Viewer) -> dict[str, ProjectTally]:
    """Documents per whole project, and how many carry the flag: one GROUP BY over a narrow index.

    A project whose documents all carry the flag needs no per-document work.
    """
    if not whole:
        return {}
    stmt = (
        select(DocumentAccessSummary.project_id, func.count(), func.count().filter(_summary_flag(viewer)))
        .where(in_set(DocumentAccessSummary.project_id, whole))
        .group_by(DocumentAccessSummary.project_id)
    )
    return {
        project_id: ProjectTally(total=total, whole=True, flagged=flagged)
        for project_id, total, flagged in session.execute(stmt)
    }


def _evaluate_candidates(
    session: Session,
    viewer: Viewer,
    project_filter: str | None,
    whole: list[str],
    unsettled: list[str],
    kinds: frozenset[tuple[GrantScope, GrantEffect]],
) -> list[tuple[str, str, bool]]:
    """(document, project, visible) for each document the summary does not settle; one round trip.

    Documents under a matching document deny are hidden without evaluation:
    rule 1 of "A version is visible" fails for every version they have. All
    other candidates go through the predicate.
    """
    denied = _denied_documents(viewer, whole, kinds)
    parts = _candidate_parts(viewer, project_filter, whole, unsettled, kinds)
    branches: list[Select] = [denied] if denied is not None else []
    if parts:
        candidates = union(*parts).cte("candidates")
        visible = (
            select(DocumentVersion.document_id)
            .where(DocumentVersion.document_id.in_(select(candidates.c.document_id)), viewer_predicate(viewer))
            .distinct()
            .subquery("visible")
        )
        branches.append(
            select(candidates.c.document_id, candidates.c.project_id, visible.c.document_id.is_not(None))
            .outerjoin(visible, visible.c.document_id == candidates.c.document_id)
        )
    if not branches:
        return []
    stmt = branches[0] if len(branches) == 1 else union_all(*branches)
    return [(d, p, bool(v)) for d, p, v in session.execute(stmt)]


def _denied_documents(
    viewer: Viewer, whole: list[str], kinds: frozenset[tuple[GrantScope, GrantEffect]]
) -> Select | None:
    """(document, project, false) for documents of whole projects under a matching document deny."""
    if viewer.is_admin or not whole or (GrantScope.DOCUMENT, GrantEffect.DENY) not in kinds:
        return None
    return select(Document.id, Document.project_id, false()).join(
        Grant, Grant.document_id == Document.id
    ).where(
        Grant.scope == GrantScope.DOCUMENT,
        Grant.effect == GrantEffect.DENY,
        in_set(Grant.principal, viewer.principals),
        in_set(Document.project_id, whole),
    )


def _candidate_parts(
    viewer: Viewer,
    project_filter: str | None,
    whole: list[str],
    unsettled: list[str],
    kinds: frozenset[tuple[GrantScope, GrantEffect]],
) -> list[Select]:
    """Suspects inside whole projects, and documents reached by narrower grants elsewhere.

    Suspects: documents without the flag, and documents actively observed as
    an object under a matching deny (mirrored or local). Elsewhere a visible
    version needs a document allow, a local allow on an observed object, or
    (in sufficient mode) a source allow, so those grants name every candidate.
    """
    parts: list[Select] = []
    if unsettled:
        parts.append(_unflagged_documents(viewer, unsettled))
    if viewer.is_admin:
        return parts
    principals = viewer.principals
    inside = in_set(Document.project_id, whole)
    if whole and (GrantScope.SOURCE_OBJECT, GrantEffect.DENY) in kinds:
        parts.append(_observed_object_targets(GrantEffect.DENY, principals).where(inside))
    outside = [~inside] if whole else []
    if project_filter is not None:
        outside.append(Document.project_id == project_filter)
    if (GrantScope.DOCUMENT, GrantEffect.ALLOW) in kinds:
        parts.append(_document_grant_targets(GrantEffect.ALLOW, principals).where(*outside))
    # In intersect mode a source allow also needs a local allow; outside whole projects that is a
    # document allow or a local object allow (ki_core.acl.version_predicate), which name the candidate.
    if (GrantScope.SOURCE_OBJECT, GrantEffect.ALLOW) in kinds:
        named = Grant.origin == LOCAL_ORIGIN
        if viewer.acl_mode == "sufficient":
            named = or_(named, SourceObject.acl_known.is_(True))
        parts.append(_observed_object_targets(GrantEffect.ALLOW, principals).where(named, *outside))
    return parts


def _unflagged_documents(viewer: Viewer, project_ids: list[str]) -> Select:
    return select(
        DocumentAccessSummary.document_id.label("document_id"), DocumentAccessSummary.project_id
    ).where(in_set(DocumentAccessSummary.project_id, project_ids), ~_summary_flag(viewer))


def _document_grant_targets(effect: GrantEffect, principals: frozenset[str]) -> Select:
    return (
        select(Document.id.label("document_id"), Document.project_id)
        .join(Grant, Grant.document_id == Document.id)
        .where(Grant.scope == GrantScope.DOCUMENT, Grant.effect == effect, in_set(Grant.principal, principals))
    )


def _observed_object_targets(effect: GrantEffect, principals: frozenset[str]) -> Select:
    """Documents with a version actively observed as an object that carries a matching grant."""
    return (
        select(Document.id.label("document_id"), Document.project_id)
        .select_from(Grant)
        .join(SourceObject, SourceObject.id == Grant.source_object_id)
        .join(SourceObservation, SourceObservation.source_object_id == Grant.source_object_id)
        .join(DocumentVersion, DocumentVersion.id == SourceObservation.version_id)
        .join(Document, Document.id == DocumentVersion.document_id)
        .where(
            Grant.scope == GrantScope.SOURCE_OBJECT,
            Grant.effect == effect,
            in_set(Grant.principal, principals),
            SourceObservation.state == ObservationState.ACTIVE,
        )
    )


def _count_partly_visible_projects(session: Session, tallies: dict[str, ProjectTally]) -> None:
    """Document totals of the projects seen only through narrower grants."""
    wanted = [p for p, t in tallies.items() if not t.whole and t.visible]
    if not wanted:
        return
    stmt = select(Document.project_id, func.count()).where(in_set(Document.project_id, wanted))
    for project_id, count in session.execute(stmt.group_by(Document.project_id)):
        tallies[project_id].total = count


def _complete_ids(session: Session, tallies: dict[str, ProjectTally]) -> None:
    """Fetch the ids the cheaper form needs: visible ids of a whole project, hidden ids of a partial one."""
    needed = [p for p, t in tallies.items() if t.needs_all_ids]
    if not needed:
        return
    all_ids: dict[str, set[str]] = {p: set() for p in needed}
    stmt = select(Document.id, Document.project_id).where(in_set(Document.project_id, needed))
    for document_id, project_id in session.execute(stmt):
        all_ids[project_id].add(document_id)
    for project_id, ids in all_ids.items():
        tally = tallies[project_id]
        if tally.whole:
            tally.visible = ids - tally.hidden
        else:
            tally.hidden = ids - tally.visible


def _scope_from_tallies(empty: CompiledAccessScope, tallies: dict[str, ProjectTally]) -> CompiledAccessScope:
    """The compact filter: a term per fully visible project, the fewer ids for a partial one."""
    projects: set[str] = set()
    excluded: set[str] = set()
    documents: set[str] = set()
    visible_projects = {p: t for p, t in tallies.items() if t.visible_count > 0}
    for project_id, tally in visible_projects.items():
        if tally.fully_visible:
            projects.add(project_id)
        elif tally.prefers_listing:
            documents |= tally.visible
        else:
            projects.add(project_id)
            excluded |= tally.hidden
    if not visible_projects:
        return empty
    return empty.model_copy(
        update={
            "visible_project_ids": frozenset(visible_projects),
            "fully_visible_project_ids": frozenset(p for p, t in visible_projects.items() if t.fully_visible),
            "visible_document_count": sum(t.visible_count for t in visible_projects.values()),
            "hidden_document_count": sum(t.total - t.visible_count for t in visible_projects.values()),
            "filter": ScopeFilter(
                project_ids=frozenset(projects),
                excluded_document_ids=frozenset(excluded),
                document_ids=frozenset(documents),
            ),
        }
    )


# -------------------------------------------------------------------- cache


class ScopeCache:
    """Compiled scopes by (generation, caller, project filter, acl mode); thread-safe LRU.

    The generation is read from SQL on every compile, so an entry is never
    served after any access change has committed.
    """

    def __init__(self, size: int = SCOPE_CACHE_SIZE) -> None:
        self._entries: OrderedDict[tuple, CompiledAccessScope] = OrderedDict()
        self._size = size
        self._lock = threading.Lock()

    def get(self, key: tuple) -> CompiledAccessScope | None:
        with self._lock:
            scope = self._entries.get(key)
            if scope is not None:
                self._entries.move_to_end(key)
            return scope

    def put(self, key: tuple, scope: CompiledAccessScope) -> None:
        with self._lock:
            self._entries[key] = scope
            self._entries.move_to_end(key)
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


# ------------------------------------------------------------------ service


SessionSource = Session | Callable[[], Session]


class AccessService:
    """Scope compilation, re-verification and explanations for the query side.

    Give it a session factory (each call reads in a fresh, on PostgreSQL
    REPEATABLE READ, transaction, so the generation and the scope come from one
    snapshot) or one session (tests, and callers already inside a transaction).
    """

    def __init__(self, sessions: SessionSource, settings: Settings | None = None, *, cache: ScopeCache | None = None):
        self._sessions = sessions
        self.settings = settings or get_settings()
        self._cache = cache if cache is not None else ScopeCache()

    def compile_scope(self, principals: Iterable[str], project_id: str | None = None) -> CompiledAccessScope:
        """The caller's scope, from the cache when no access change happened since it was compiled."""
        canonical = canonical_principals(principals, self.settings)
        with self._reading() as session:
            generation = current_access_generation(session)
            key = (generation, tuple(sorted(canonical)), project_id, self.settings.security.source_acl_mode)
            cached = self._cache.get(key)
            if cached is not None:
                return cached
            viewer = viewer_of(frozenset(expand_groups(session, canonical, principal_aliases(self.settings))), self.settings)
            scope = compile_for_viewer(session, viewer, project_id, generation)
        self._cache.put(key, scope)
        return scope

    def visible_versions(self, principals: Iterable[str], version_ids: Iterable[str]) -> set[str]:
        """Re-verification of search hits: one query for the whole candidate list."""
        with self._reading() as session:
            viewer = viewer_for(session, principals, self.settings)
            return visible_versions(session, viewer, version_ids)

    def visible_document_ids(self, principals: Iterable[str], project_id: str | None = None) -> set[str]:
        """The plain id list compile_scope's compact filter must agree with."""
        with self._reading() as session:
            viewer = viewer_for(session, principals, self.settings)
            return set(visible_document_ids(session, viewer, project_id))

    def explain(self, principal: str, document_id: str) -> AccessExplanation:
        with self._reading() as session:
            return explain_document(session, principal, document_id, self.settings)

    def clear_cache(self) -> None:
        self._cache.clear()

    @contextmanager
    def _reading(self) -> Iterator[Session]:
        if isinstance(self._sessions, Session):
            yield self._sessions
            return
        with self._sessions() as session:
            if session.get_bind().dialect.name == "postgresql":
                session.connection(execution_options={"isolation_level": "REPEATABLE READ"})
            try:
                yield session
            finally:
                session.rollback()
