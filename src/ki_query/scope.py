"""Compile who may see what into the compact search filter, before any score is computed.

`AccessService.compile_scope` returns a `CompiledAccessScope`: the visible
projects and documents and their compact `ScopeFilter` (one term per fully
visible project, document ids only for the exceptions, whichever side of a
partly visible project is smaller). It never returns an unfiltered scope: no
principals, unknown principals or nothing visible all give `match_none`.

Set-based, never per document: the trigger-kept access summary and E's
grants decide every document no object grant of E names
(ki_core.acl.version_predicate reduced to document-level facts), so a caller
who sees whole projects pays one GROUP BY, and one who sees 90,000 of
100,000 documents through document grants one merge of two sorted covering
indexes that yields the 10,000 others. Only documents an object grant names
get a verdict of their own.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict
from sqlalchemy import (
    ColumnElement,
    Select,
    and_,
    case,
    except_,
    false,
    func,
    literal,
    literal_column,
    or_,
    select,
    text,
    true,
    union_all,
)
from sqlalchemy.orm import Session

from ki_core.acl import (
    AclMode,
    Viewer,
    in_set,
    in_set_not_leading,
    viewer_predicate,
    visible_document_ids,
    visible_versions,
)
from ki_core.principals import canonical_principals, unknown_principals, viewer_for, viewer_of_canonical
from ki_core.config import Settings, get_settings
from ki_core.db import read_transaction
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


# ------------------------------------------------------------------ tallies


@dataclass
class ProjectTally:
    """One project's documents as far as the compilation needed to look at them.

    `ids` are the hidden documents when `lists_hidden` (every other one is
    visible), else the visible ones; `total` is None until counted.
    """

    lists_hidden: bool
    total: int | None = None
    unflagged: int = 0
    ids: set[str] = field(default_factory=set)

    def mark(self, document_id: str, visible: bool) -> None:
        if visible != self.lists_hidden:
            self.ids.add(document_id)
        else:
            self.ids.discard(document_id)

    @property
    def visible_count(self) -> int:
        return (self.total or 0) - len(self.ids) if self.lists_hidden else len(self.ids)

    @property
    def fully_visible(self) -> bool:
        return bool(self.total) and self.visible_count == self.total

    @property
    def prefers_listing(self) -> bool:
        """Listing visible ids costs no more terms than project id + exclusions."""
        return self.visible_count <= 1 + (self.total or 0) - self.visible_count

    @property
    def needs_other_ids(self) -> bool:
        """The cheaper form needs the ids of the side the compilation did not list."""
        if self.visible_count == 0 or self.fully_visible:
            return False
        return self.prefers_listing == self.lists_hidden


Tallies = dict[str, ProjectTally]
OBJECT_GRANT_KINDS = frozenset({(GrantScope.SOURCE_OBJECT, GrantEffect.ALLOW), (GrantScope.SOURCE_OBJECT, GrantEffect.DENY)})


def compile_for_viewer(
    session: Session, viewer: Viewer, project_filter: str | None, generation: int
) -> CompiledAccessScope:
    """The scope of an expanded viewer: a few set-based statements, none evaluated per document.

    A document no object grant of E names is visible exactly when it carries
    the summary's flag, no document deny of E names it, and its project is
    whole or a document allow names it (ki_core.acl.version_predicate reduced
    to document-level facts); only documents an object grant names get a
    verdict of their own.
    """
    empty = _empty_scope(viewer, project_filter, generation)
    if viewer.sees_nothing:
        return empty
    whole, denied = _whole_and_denied_projects(session, viewer, project_filter)
    tallies = _tally_projects(session, viewer, in_set(DocumentAccessSummary.project_id, whole)) if whole else {}
    kinds = frozenset() if viewer.is_admin else _narrower_grant_kinds(session, viewer)
    if (GrantScope.DOCUMENT, GrantEffect.ALLOW) in kinds:
        _add_allowed_elsewhere(session, viewer, project_filter, whole | denied, tallies)
    _mark_unflagged_hidden(session, viewer, tallies)
    if (GrantScope.DOCUMENT, GrantEffect.DENY) in kinds:
        _mark_all(tallies, _grouped(_rows(session, _document_denied(viewer))), False)
    if kinds & OBJECT_GRANT_KINDS:
        verdicts = _rows(session, _object_rule_verdicts(viewer, whole))
        opens = lambda p: p not in denied and project_filter in (None, p)  # noqa: E731
        for visible in (True, False):
            _mark_all(tallies, _grouped(row for row in verdicts if bool(row[2]) == visible), visible, opens)
    _count_totals(session, viewer, tallies)
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


def _in_project(column: ColumnElement[str], project_filter: str | None) -> list[ColumnElement[bool]]:
    return [] if project_filter is None else [column == project_filter]


def _whole_and_denied_projects(
    session: Session, viewer: Viewer, project_filter: str | None
) -> tuple[set[str], set[str]]:
    """Projects seen as a whole (every project for admins, else allowed and not denied), and denied ones."""
    if viewer.is_admin:
        return set(session.scalars(select(Project.id).where(*_in_project(Project.id, project_filter)))), set()
    stmt = select(Grant.project_id, Grant.effect).where(
        Grant.scope == GrantScope.PROJECT,
        in_set(Grant.principal, viewer.principals),
        *_in_project(Grant.project_id, project_filter),
    )
    rows = session.execute(stmt).all()
    denied = {p for p, effect in rows if effect == GrantEffect.DENY}
    return {p for p, effect in rows if effect == GrantEffect.ALLOW} - denied, denied


def _narrower_grant_kinds(session: Session, viewer: Viewer) -> frozenset[tuple[GrantScope, GrantEffect]]:
    """Which document and source-object grant kinds E holds at all: four index probes.

    A kind E does not hold cannot name a document, so its statement is left out.
    """
    kinds = [
        (scope, effect)
        for scope in (GrantScope.DOCUMENT, GrantScope.SOURCE_OBJECT)
        for effect in (GrantEffect.ALLOW, GrantEffect.DENY)
    ]
    probes = [select(1).where(*_held_by(viewer, scope, effect)).exists() for scope, effect in kinds]
    row = session.execute(select(*probes)).one()
    return frozenset(kind for kind, held in zip(kinds, row, strict=True) if held)


def _held_by(viewer: Viewer, scope: GrantScope, effect: GrantEffect) -> list[ColumnElement[bool]]:
    """E's grants of one kind: seeks in migration 0011's (principal, scope, effect, document_id) index."""
    return [in_set(Grant.principal, viewer.principals), Grant.scope == scope, Grant.effect == effect]


def _summary_flag(viewer: Viewer) -> ColumnElement[bool]:
    """The summary flag that, with a project allow (or admin rights), makes a document visible."""
    if viewer.is_admin:
        return DocumentAccessSummary.has_active_observation.is_(True)
    return DocumentAccessSummary.local_delegation.is_(True)


def _tally_projects(
    session: Session, viewer: Viewer, *where: ColumnElement[bool], lists_hidden: bool = True
) -> Tallies:
    """Documents per project and how many lack the flag: one GROUP BY over the summary's project index."""
    summary = DocumentAccessSummary
    stmt = (
        select(summary.project_id, func.count(), func.count().filter(_summary_flag(viewer)))
        .where(*where)
        .group_by(summary.project_id)
    )
    return {
        project_id: ProjectTally(lists_hidden=lists_hidden, total=total, unflagged=total - flagged)
        for project_id, total, flagged in _rows(session, stmt)
    }


def _mark_all(
    tallies: Tallies,
    by_project: Mapping[str, Iterable[str]],
    visible: bool,
    opens: Callable[[str], bool] | None = None,
) -> None:
    """Give each project's documents one verdict; a visible one opens an untallied project if `opens` says so."""
    for project_id, document_ids in by_project.items():
        tally = tallies.get(project_id)
        if tally is None:
            if not (visible and opens is not None and opens(project_id)):
                continue
            tally = tallies[project_id] = ProjectTally(lists_hidden=False)
        if visible != tally.lists_hidden:
            tally.ids.update(document_ids)
        else:
            tally.ids.difference_update(document_ids)


def _grouped(rows: Iterable[Sequence[Any]]) -> dict[str, list[str]]:
    """(document, project, ...) rows as document ids per project."""
    by_project: dict[str, list[str]] = {}
    for row in rows:
        by_project.setdefault(row[1], []).append(row[0])
    return by_project


def _ids_by_project(session: Session, documents: Select) -> dict[str, Iterable[str]]:
    """The (document, project) rows of `documents` as one aggregated row per project.

    For the statements that return thousands of ids: one array (a JSON array
    on SQLite) per project costs the driver and Python about 10 ms less per
    10,000 ids than a row each.
    """
    named = documents.subquery("named")
    if session.get_bind().dialect.name == "sqlite":
        stmt = select(named.c.project_id, func.json_group_array(named.c.document_id)).group_by(named.c.project_id)
        return {project_id: json.loads(ids) for project_id, ids in _rows(session, stmt)}
    stmt = select(named.c.project_id, func.array_agg(named.c.document_id)).group_by(named.c.project_id)
    return dict(_rows(session, stmt))


def _rows(session: Session, stmt: Select) -> Sequence[Any]:
    """Core rows on the session's connection: the ORM's result processing cost 28 ms per 10,000 ids."""
    return session.connection().execute(stmt).all()


# ------------------------------------------------------- document allows


# Up to this many document allows of E, reading them with their summary rows is cheap whatever the corpus.
FEW_DOCUMENT_ALLOWS = 1_000


def _allowed(viewer: Viewer, *, scanning: bool = False) -> Select:
    """Ids of documents a document allow of E names (repeats where several grants name one).

    `scanning`: in document order, for SQLite's merge: it then walks migration
    0011's (document_id, scope, effect, principal) index instead of seeking
    each principal in (principal, scope, effect, document_id).
    """
    if not scanning:
        return select(Grant.document_id).where(*_held_by(viewer, GrantScope.DOCUMENT, GrantEffect.ALLOW))
    # No column may lead a lookup (unary + on SQLite), so the one index holding all four is scanned.
    return select(Grant.document_id).where(
        in_set_not_leading(Grant.scope, [GrantScope.DOCUMENT.value]),
        in_set_not_leading(Grant.effect, [GrantEffect.ALLOW.value]),
        in_set_not_leading(Grant.principal, viewer.principals),
    )


def _count_capped(session: Session, stmt: Select, cap: int) -> int:
    """min(rows of stmt, cap), reading at most cap rows."""
    return session.scalar(select(func.count()).select_from(stmt.limit(cap).subquery())) or 0


def _add_allowed_elsewhere(
    session: Session, viewer: Viewer, project_filter: str | None, settled: set[str], tallies: Tallies
) -> None:
    """Tally the projects outside whole and denied ones that E's document allows reach.

    Few allows: their own rows. Most of the documents: the complement, so a
    caller who sees 90,000 of 100,000 documents this way costs 10,000 ids.
    """
    summary = DocumentAccessSummary
    outside = [~in_set(summary.project_id, settled)] if settled else []
    outside += _in_project(summary.project_id, project_filter)
    if _count_capped(session, _allowed(viewer), FEW_DOCUMENT_ALLOWS) < FEW_DOCUMENT_ALLOWS:
        _mark_all(tallies, _allowed_ids(session, viewer, outside), True, opens=lambda _: True)
        return
    candidates = _tally_projects(session, viewer, *outside)
    half = sum(t.total or 0 for t in candidates.values()) // 2
    if _count_capped(session, _allowed(viewer), half + 1) <= half:
        for tally in candidates.values():
            tally.lists_hidden = False
        tallies.update(candidates)
        _mark_all(tallies, _allowed_ids(session, viewer, outside), True)
        return
    tallies.update(candidates)
    _mark_all(tallies, _not_allowed_ids(session, viewer, outside), False)


def _allowed_ids(session: Session, viewer: Viewer, outside: list[ColumnElement[bool]]) -> dict[str, Iterable[str]]:
    """Per project the flagged documents a document allow names: one lookup per allow."""
    summary = DocumentAccessSummary
    stmt = select(summary.document_id, summary.project_id).where(
        summary.document_id.in_(_allowed(viewer)), summary.local_delegation.is_(True), *outside
    )
    return _ids_by_project(session, stmt)


def _not_allowed_ids(session: Session, viewer: Viewer, outside: list[ColumnElement[bool]]) -> dict[str, Iterable[str]]:
    """Per project the documents no document allow names, from one merge of two sorted index scans.

    SQLite merges an EXCEPT of two ordered selects (32 ms for 100,000 summary
    rows against 90,000 allows), but would probe per row for NOT EXISTS;
    PostgreSQL runs NOT EXISTS as a merge anti join over the two covering
    indexes once hash joins are off (37 ms; its hash anti join took 62-95 ms).
    """
    summary = DocumentAccessSummary
    if session.get_bind().dialect.name == "sqlite":
        left = select(summary.document_id).where(*outside)
        missing = except_(left, _allowed(viewer, scanning=True)).order_by(literal_column("1"))
        stmt = select(summary.document_id, summary.project_id).where(summary.document_id.in_(missing))
        return _ids_by_project(session, stmt)
    named = _allowed(viewer).where(Grant.document_id == summary.document_id).exists()
    stmt = select(summary.document_id, summary.project_id).where(*outside, ~named)
    with _merge_joins_only(session):
        return _ids_by_project(session, stmt)


# Both inputs of the anti join come sorted from covering indexes; PostgreSQL's cost model still
# prefers hashing 90,000 grants, and a parallel gather costs more than it saves on 2 cores.
_ANTI_JOIN_PLANNER_SETTINGS = {"enable_hashjoin": "off", "max_parallel_workers_per_gather": "0"}


@contextmanager
def _merge_joins_only(session: Session) -> Iterator[None]:
    """The anti join's planner settings for one statement, then the transaction's own again."""
    names = list(_ANTI_JOIN_PLANNER_SETTINGS)
    previous = {name: session.scalar(text("SELECT current_setting(:name)"), {"name": name}) for name in names}
    _set_locally(session, _ANTI_JOIN_PLANNER_SETTINGS)
    try:
        yield
    finally:
        _set_locally(session, previous)


# A plan per execution for the scope's statements: their id arrays hold 10 ids or 90,000, and the
# anti join's settings above apply only when a statement is planned. Reads end with COMMIT, so psycopg
# keeps statements prepared, and a cached generic plan doubled the cold scope at 90 % of 100,000
# documents by document grants (64 -> 128 ms p50, bench/scope.py). The hot path keeps its generic plans.
_COMPILE_PLANNER_SETTINGS = {"plan_cache_mode": "force_custom_plan"}


def _set_locally(session: Session, settings: dict[str, str]) -> None:
    for name, value in settings.items():
        session.execute(text("SELECT set_config(:name, :value, true)"), {"name": name, "value": value})


# ------------------------------------------------- denies and object rules


def _mark_unflagged_hidden(session: Session, viewer: Viewer, tallies: Tallies) -> None:
    """In projects listed by exclusion, documents without the flag are hidden unless a verdict opens them."""
    wanted = [p for p, t in tallies.items() if t.lists_hidden and t.unflagged]
    if not wanted:
        return
    summary = DocumentAccessSummary
    stmt = select(summary.document_id, summary.project_id).where(in_set(summary.project_id, wanted), ~_summary_flag(viewer))
    _mark_all(tallies, _ids_by_project(session, stmt), False)


def _document_denied(viewer: Viewer) -> Select:
    """(document, project) of every document a document deny of E names: rule 1 hides all its versions."""
    summary = DocumentAccessSummary
    return (
        select(summary.document_id, summary.project_id)
        .join(Grant, Grant.document_id == summary.document_id)
        .where(Grant.scope == GrantScope.DOCUMENT, Grant.effect == GrantEffect.DENY, in_set(Grant.principal, viewer.principals))
    )


def _object_rule_verdicts(viewer: Viewer, whole: set[str]) -> Select:
    """(document, project, visible) for each document an object grant of E names.

    A mirrored allow on a known-ACL object (source), an object deny of any
    origin or a local object allow (ruled) decide per version; their facts
    are gathered with the document grants of the same documents, and only
    the ruled ones go through the predicate.
    """
    summary = DocumentAccessSummary
    facts = _object_named_facts(viewer).subquery("facts")
    locally_allowed = or_(in_set(summary.project_id, whole), facts.c.allowed == 1)
    return select(summary.document_id, summary.project_id, _visible_condition(viewer, facts, locally_allowed)).join(
        facts, facts.c.document_id == summary.document_id
    )


def _object_named_facts(viewer: Viewer) -> Select:
    """(document, allowed, source, denied, ruled) per document an object grant of E names; one GROUP BY."""
    source = (
        _fact(_observed_with_grant(viewer), source=1)
        .join(SourceObject, SourceObject.id == Grant.source_object_id)
        .where(Grant.effect == GrantEffect.ALLOW, Grant.origin != LOCAL_ORIGIN, SourceObject.acl_known.is_(True))
    )
    ruled = _fact(_observed_with_grant(viewer), ruled=1).where(
        or_(Grant.effect == GrantEffect.DENY, Grant.origin == LOCAL_ORIGIN)
    )
    objects = union_all(source, ruled).cte("object_named")
    named = select(objects.c.document_id)
    documents = [
        _fact(select(Grant.document_id), **{flag: 1}).where(
            Grant.scope == GrantScope.DOCUMENT,
            Grant.effect == effect,
            in_set(Grant.principal, viewer.principals),
            Grant.document_id.in_(named),
        )
        for flag, effect in (("allowed", GrantEffect.ALLOW), ("denied", GrantEffect.DENY))
    ]
    every = union_all(select(objects), *documents).subquery("every")
    flags = [func.max(getattr(every.c, name)).label(name) for name in FACT_NAMES]
    return select(every.c.document_id, *flags).group_by(every.c.document_id)


FACT_NAMES = ("allowed", "source", "denied", "ruled")


def _fact(stmt: Select, **flags: int) -> Select:
    first = stmt.selected_columns[0].label("document_id")
    return stmt.with_only_columns(first, *(literal(flags.get(name, 0)).label(name) for name in FACT_NAMES))


def _observed_with_grant(viewer: Viewer) -> Select:
    """Documents with a version actively observed as an object carrying a grant of E (joined, for filtering)."""
    return (
        select(DocumentVersion.document_id)
        .select_from(Grant)
        .join(SourceObservation, SourceObservation.source_object_id == Grant.source_object_id)
        .join(DocumentVersion, DocumentVersion.id == SourceObservation.version_id)
        .where(
            SourceObservation.state == ObservationState.ACTIVE,
            Grant.scope == GrantScope.SOURCE_OBJECT,
            in_set(Grant.principal, viewer.principals),
        )
    )


def _visible_condition(viewer: Viewer, facts: Any, locally_allowed: ColumnElement[bool]) -> ColumnElement[bool]:
    """Whether an object-named document is visible, from its facts.

    Not ruled: rule 1 is "no document deny" (projects were settled before),
    rule 2 a source allow, or a local allow on a document whose summary says
    a version delegates; intersect also needs the local allow. Ruled: the
    predicate decides, for these few documents only.
    """
    summary = DocumentAccessSummary
    source = facts.c.source == 1
    delegates = summary.local_delegation.is_(True)
    if viewer.acl_mode == "intersect":
        by_rules = and_(locally_allowed, or_(source, delegates))
    else:
        by_rules = or_(source, and_(locally_allowed, delegates))
    ruled = facts.c.ruled == 1
    a_version_visible = (
        select(DocumentVersion.id)
        .where(DocumentVersion.document_id == summary.document_id, viewer_predicate(viewer))
        .exists()
    )
    # CASE, not AND: in a result column SQLite evaluated the predicate's subqueries for every row, ruled
    # or not (a mirrored DMS names every document by an object grant: 500 of 790 ms at 17,859 documents).
    ruled_and_visible = case((ruled, a_version_visible), else_=false())
    return and_(facts.c.denied == 0, or_(and_(~ruled, by_rules), ruled_and_visible))


# ------------------------------------------------------------ compact form


def _count_totals(session: Session, viewer: Viewer, tallies: Tallies) -> None:
    """Document totals of the projects opened by document allows or verdicts alone."""
    wanted = [p for p, t in tallies.items() if t.total is None]
    if not wanted:
        return
    for project_id, counted in _tally_projects(session, viewer, in_set(DocumentAccessSummary.project_id, wanted)).items():
        tallies[project_id].total = counted.total


def _complete_ids(session: Session, tallies: Tallies) -> None:
    """Fetch the ids the cheaper form needs when the compilation listed the other side."""
    needed = [p for p, t in tallies.items() if t.needs_other_ids]
    if not needed:
        return
    summary = DocumentAccessSummary
    all_ids = _ids_by_project(
        session, select(summary.document_id, summary.project_id).where(in_set(summary.project_id, needed))
    )
    for project_id in needed:
        tally = tallies[project_id]
        tally.ids = set(all_ids.get(project_id, ())) - tally.ids
        tally.lists_hidden = not tally.lists_hidden


def _scope_from_tallies(empty: CompiledAccessScope, tallies: Tallies) -> CompiledAccessScope:
    """The compact filter: a term per fully visible project, the fewer ids for a partial one."""
    visible_projects = {p: t for p, t in tallies.items() if t.visible_count > 0}
    if not visible_projects:
        return empty
    fully = frozenset(p for p, t in visible_projects.items() if t.fully_visible)
    listed = {p for p, t in visible_projects.items() if p not in fully and not t.lists_hidden}
    return empty.model_copy(
        update={
            "visible_project_ids": frozenset(visible_projects),
            "fully_visible_project_ids": fully,
            "visible_document_count": sum(t.visible_count for t in visible_projects.values()),
            "hidden_document_count": sum((t.total or 0) - t.visible_count for t in visible_projects.values()),
            "filter": ScopeFilter(
                project_ids=frozenset(visible_projects.keys() - listed),
                excluded_document_ids=frozenset().union(
                    *(t.ids for p, t in visible_projects.items() if t.lists_hidden and p not in fully)
                ),
                document_ids=frozenset().union(*(visible_projects[p].ids for p in listed)),
            ),
        }
    )


# -------------------------------------------------------------------- cache


class ScopeCache:
    """The latest compiled scope per (caller, project filter, acl mode); thread-safe LRU.

    compile_scope reads the generation from SQL and serves an entry only when it is that
    generation's. recent_scope serves the entry whatever its generation: the ranked search
    uses it for the index filter and learns the generation from its verification statement
    (retrieval.StaleScope), so no answer is ever built from a scope older than its SQL check.
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
        """Keep `scope` unless the entry is of a later generation (a slower compile finishing last)."""
        with self._lock:
            held = self._entries.get(key)
            if held is None or held.generation <= scope.generation:
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
        key = self._key(principals, project_id)
        with self._reading() as session:
            generation = current_access_generation(session)
            cached = self._cache.get(key)
            if cached is not None and cached.generation == generation:
                return cached
            canonical = key[0]
            viewer = viewer_of_canonical(session, canonical, self.settings)
            scope = compile_for_viewer(session, viewer, project_id, generation)
        self._cache.put(key, scope)
        return scope

    def recent_scope(self, principals: Iterable[str], project_id: str | None = None) -> CompiledAccessScope | None:
        """The caller's last compiled scope without reading SQL, possibly of an older generation
        (None: none cached). Only for a caller that compares the generation its own SQL reads
        with the scope's before it answers, as the ranked search does."""
        return self._cache.get(self._key(principals, project_id))

    def _key(self, principals: Iterable[str], project_id: str | None) -> tuple:
        canonical = tuple(sorted(canonical_principals(principals, self.settings)))
        return (canonical, project_id, self.settings.security.source_acl_mode)

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

    def unknown_principals(self, principals: Iterable[str]) -> list[str]:
        """The caller's names no grant, membership, alias or API key of this store knows (ki_core.principals)."""
        with self._reading() as session:
            return unknown_principals(session, principals, self.settings)

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
        with read_transaction(self._sessions) as session:
            if session.get_bind().dialect.name == "postgresql":
                session.connection(execution_options={"isolation_level": "REPEATABLE READ"})
                _set_locally(session, _COMPILE_PLANNER_SETTINGS)
            yield session
