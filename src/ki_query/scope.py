"""Compile who may see what into the compact search filter, before any score is computed.

`AccessService.compile_scope` returns a `CompiledAccessScope`: the visible
projects and documents and their compact `ScopeFilter` (one term per fully
visible project, document ids only for the exceptions). It never returns an
unfiltered scope: no principals, unknown principals or nothing visible all give
`match_none`.

Set-based, never per document: the trigger-kept access summary and E's grants
decide every document no object rule of E touches (ki_core.acl.version_predicate's
rules reduced to document-level facts); only documents under an object deny or
a local object allow go through the predicate itself. One statement returns
per project its counts and only the ids its term needs, so a caller seeing
90,000 documents through document grants fetches the 10,000 exclusions, not the 90,000.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict
from sqlalchemy import ColumnElement, Select, and_, func, literal, null, or_, select, text, true, union_all
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


# ------------------------------------------------------------ known sets


def compile_for_viewer(
    session: Session, viewer: Viewer, project_filter: str | None, generation: int
) -> CompiledAccessScope:
    """The scope of an expanded viewer: one read of project grants, then one set-based statement."""
    empty = _empty_scope(viewer, project_filter, generation)
    if viewer.sees_nothing:
        return empty
    whole, denied = _whole_and_denied_projects(session, viewer, project_filter)
    sides = [(_hidden_in_whole_projects(viewer, whole), in_set(DocumentAccessSummary.project_id, whole), False)]
    if not viewer.is_admin:
        sides.append((_visible_elsewhere(viewer, project_filter, whole | denied), None, True))
    return _scope_from_forms(empty, _project_forms(session, sides))


def _empty_scope(viewer: Viewer, project_filter: str | None, generation: int) -> CompiledAccessScope:
    return CompiledAccessScope(
        generation=generation,
        principals=viewer.principals,
        is_admin=viewer.is_admin,
        acl_mode=viewer.acl_mode,
        project_filter=project_filter,
    )


def _in_project(column: ColumnElement[str], project_filter: str | None) -> list[ColumnElement[bool]]:
    return [] if project_filter is None else [column == project_filter]


def _whole_and_denied_projects(
    session: Session, viewer: Viewer, project_filter: str | None
) -> tuple[set[str], set[str]]:
    """Projects seen as a whole (every project for admins, else allowed and not denied), and denied ones."""
    if viewer.is_admin:
        return set(session.scalars(select(Project.id).where(*_in_project(Project.id, project_filter)))), set()
    stmt = select(Grant.project_id, Grant.effect).where(
        *_matching(GrantScope.PROJECT, None, viewer), *_in_project(Grant.project_id, project_filter)
    )
    rows = session.execute(stmt).all()
    denied = {p for p, effect in rows if effect == GrantEffect.DENY}
    return {p for p, effect in rows if effect == GrantEffect.ALLOW} - denied, denied


def _matching(scope: GrantScope, effect: GrantEffect | None, viewer: Viewer) -> list[ColumnElement[bool]]:
    conditions = [Grant.scope == scope, in_set(Grant.principal, viewer.principals)]
    return conditions if effect is None else [*conditions, Grant.effect == effect]


def _document_facts(viewer: Viewer) -> Select:
    """(document, allowed, source, denied, ruled) for each document one of E's narrower grants names.

    allowed: a document allow; source: a version whose known-ACL object's
    mirrored ACL allows E; denied: a document deny; ruled: a version under an
    object deny (any origin) or a local object allow, rules that hold per
    version. One GROUP BY, so each document appears once, however many grants name it.
    """
    named = union_all(
        _fact(select(Grant.document_id), allowed=1).where(*_matching(GrantScope.DOCUMENT, GrantEffect.ALLOW, viewer)),
        _fact(select(Grant.document_id), denied=1).where(*_matching(GrantScope.DOCUMENT, GrantEffect.DENY, viewer)),
        _fact(_observed_with_grant(viewer), source=1)
        .join(SourceObject, SourceObject.id == Grant.source_object_id)
        .where(Grant.effect == GrantEffect.ALLOW, Grant.origin != LOCAL_ORIGIN, SourceObject.acl_known.is_(True)),
        _fact(_observed_with_grant(viewer), ruled=1).where(
            or_(Grant.effect == GrantEffect.DENY, Grant.origin == LOCAL_ORIGIN)
        ),
    ).subquery("named")
    flags = [func.max(getattr(named.c, name)).label(name) for name in ("allowed", "source", "denied", "ruled")]
    return select(named.c.document_id, *flags).group_by(named.c.document_id)


def _fact(stmt: Select, *, allowed: int = 0, source: int = 0, denied: int = 0, ruled: int = 0) -> Select:
    values = {"allowed": allowed, "source": source, "denied": denied, "ruled": ruled}
    first = stmt.selected_columns[0].label("document_id")
    return stmt.with_only_columns(first, *(literal(v).label(k) for k, v in values.items()))


def _observed_with_grant(viewer: Viewer) -> Select:
    """Documents with a version actively observed as an object carrying a grant of E (joined, for filtering)."""
    return (
        select(DocumentVersion.document_id)
        .select_from(Grant)
        .join(SourceObservation, SourceObservation.source_object_id == Grant.source_object_id)
        .join(DocumentVersion, DocumentVersion.id == SourceObservation.version_id)
        .where(SourceObservation.state == ObservationState.ACTIVE, *_matching(GrantScope.SOURCE_OBJECT, None, viewer))
    )


def _visible_condition(viewer: Viewer, facts: Any, locally_allowed: ColumnElement[bool]) -> ColumnElement[bool]:
    """Whether a summary row's document is visible, from its facts (NULL: no narrower grant names it).

    No object rule: rule 1 is "no document deny" (projects were settled
    before), rule 2 a source allow, or a local allow on a document whose
    summary says a version delegates; intersect also needs the local allow.
    An object rule: the predicate decides, for these few documents only.
    """
    summary = DocumentAccessSummary
    source = func.coalesce(facts.c.source, 0) == 1
    delegates = summary.local_delegation.is_(True)
    if viewer.acl_mode == "intersect":
        by_rules = and_(locally_allowed, or_(source, delegates))
    else:
        by_rules = or_(source, and_(locally_allowed, delegates))
    ruled = func.coalesce(facts.c.ruled, 0) == 1
    a_version_visible = (
        select(DocumentVersion.id)
        .where(DocumentVersion.document_id == summary.document_id, viewer_predicate(viewer))
        .exists()
    )
    return and_(
        func.coalesce(facts.c.denied, 0) == 0,
        or_(and_(~ruled, by_rules), and_(ruled, a_version_visible)),
    )


def _hidden_in_whole_projects(viewer: Viewer, whole: set[str]) -> Select:
    """(document, project) of the invisible documents of whole projects: usually the few exceptions."""
    summary = DocumentAccessSummary
    rows = select(summary.document_id, summary.project_id).where(in_set(summary.project_id, whole))
    if viewer.is_admin:
        return rows.where(summary.has_active_observation.is_(False))
    facts = _document_facts(viewer).subquery("facts")
    return rows.outerjoin(facts, facts.c.document_id == summary.document_id).where(
        ~_visible_condition(viewer, facts, true())
    )


def _visible_elsewhere(viewer: Viewer, project_filter: str | None, settled: set[str]) -> Select:
    """(document, project) of the visible documents outside whole and denied projects: narrower grants name them."""
    summary = DocumentAccessSummary
    facts = _document_facts(viewer).subquery("facts")
    return (
        select(summary.document_id, summary.project_id)
        .join(facts, facts.c.document_id == summary.document_id)
        .where(
            ~in_set(summary.project_id, settled),
            *_in_project(summary.project_id, project_filter),
            _visible_condition(viewer, facts, facts.c.allowed == 1),
        )
    )


# ------------------------------------------------------------ compact form


@dataclass
class ProjectForm:
    """One visible project: its size, how many of its documents are visible, and the ids its term needs."""

    total: int = 0
    visible: int = 0
    listed: set[str] = field(default_factory=set)
    excluded: set[str] = field(default_factory=set)


def _project_forms(
    session: Session, sides: list[tuple[Select, ColumnElement[bool] | None, bool]]
) -> dict[str, ProjectForm]:
    """Per visible project its counts and only the cheaper id list, in one statement.

    Each side is a set of known documents (the visible ones, or the hidden
    ones of whole projects), the projects it covers (None: those it names) and
    whether it lists the visible ones. A partial project lists its visible ids
    when that costs no more terms than its id plus the exclusions.
    """
    branches = []
    for number, (documents, covered, known_visible) in enumerate(sides):
        branches += _side_rows(documents.cte(f"known_{number}"), covered, known_visible, number)
    result: dict[str, ProjectForm] = {}
    with _hash_joins_only(session):
        rows = session.execute(union_all(*branches)).all()
    for project_id, kind, document_id, visible_count, total in rows:
        form = result.setdefault(project_id, ProjectForm())
        if kind == "count":
            form.visible, form.total = visible_count, total
        else:
            getattr(form, kind).add(document_id)
    return {p: f for p, f in result.items() if f.visible > 0}


# PostgreSQL estimates every filtered aggregate over grants as one row, then joins 16,073 of them by
# a loop each (15 s at the peer-bench shape) and starts parallel workers for a 20 ms sort (50 ms on
# 2 cores). Hash joins in one process are right at every size this statement sees.
_FORMS_PLANNER_SETTINGS = {"enable_nestloop": "off", "max_parallel_workers_per_gather": "0"}


@contextmanager
def _hash_joins_only(session: Session) -> Iterator[None]:
    """The forms statement's planner settings on PostgreSQL, then the transaction's own again."""
    if session.get_bind().dialect.name != "postgresql":
        yield
        return
    names = list(_FORMS_PLANNER_SETTINGS)
    previous = {name: session.scalar(text("SELECT current_setting(:name)"), {"name": name}) for name in names}
    _set_locally(session, _FORMS_PLANNER_SETTINGS)
    try:
        yield
    finally:
        _set_locally(session, previous)


def _set_locally(session: Session, settings: dict[str, str]) -> None:
    for name, value in settings.items():
        session.execute(text("SELECT set_config(:name, :value, true)"), {"name": name, "value": value})


def _side_rows(known: Any, covered: ColumnElement[bool] | None, known_visible: bool, number: int) -> list[Select]:
    """A count row per covered project, the known ids where the form needs them, else their complement."""
    summary = DocumentAccessSummary
    per_project = select(known.c.project_id, func.count().label("known")).group_by(known.c.project_id).subquery()
    totals = select(summary.project_id, func.count().label("total")).group_by(summary.project_id)
    if covered is None:
        totals = totals.where(summary.project_id.in_(select(per_project.c.project_id)))
    else:
        totals = totals.where(covered)
    totals = totals.subquery()
    known_count = func.coalesce(per_project.c.known, 0)
    visible = known_count if known_visible else totals.c.total - known_count
    forms = (
        select(totals.c.project_id, visible.label("visible"), totals.c.total)
        .outerjoin(per_project, per_project.c.project_id == totals.c.project_id)
        .cte(f"forms_{number}")
    )
    partial = and_(forms.c.visible > 0, forms.c.visible < forms.c.total)
    listing = forms.c.visible <= 1 + forms.c.total - forms.c.visible
    known_kind, other_kind = ("listed", "excluded") if known_visible else ("excluded", "listed")
    known_wanted = listing if known_visible else ~listing
    # NOT IN, not NOT EXISTS: PostgreSQL misestimates the known set (a filter over aggregates) as one row and
    # would scan it once per summary row; a hashed NOT IN is built once whatever the estimate.
    unknown = summary.document_id.not_in(select(known.c.document_id))
    return [
        select(forms.c.project_id, literal("count"), null(), forms.c.visible, forms.c.total),
        select(known.c.project_id, literal(known_kind), known.c.document_id, null(), null())
        .join(forms, forms.c.project_id == known.c.project_id).where(partial, known_wanted),
        select(summary.project_id, literal(other_kind), summary.document_id, null(), null())
        .join(forms, forms.c.project_id == summary.project_id).where(partial, ~known_wanted, unknown),
    ]


def _scope_from_forms(empty: CompiledAccessScope, forms: dict[str, ProjectForm]) -> CompiledAccessScope:
    """The compact filter: a term per fully visible project, the fewer ids for a partial one."""
    if not forms:
        return empty
    fully = frozenset(p for p, f in forms.items() if f.visible == f.total)
    listed = {p for p, f in forms.items() if f.listed}
    return empty.model_copy(
        update={
            "visible_project_ids": frozenset(forms),
            "fully_visible_project_ids": fully,
            "visible_document_count": sum(f.visible for f in forms.values()),
            "hidden_document_count": sum(f.total - f.visible for f in forms.values()),
            "filter": ScopeFilter(
                project_ids=frozenset(forms.keys() - listed),
                excluded_document_ids=frozenset(i for f in forms.values() for i in f.excluded),
                document_ids=frozenset(i for f in forms.values() for i in f.listed),
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
