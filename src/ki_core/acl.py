"""Who may see which document version: the one SQL definition (spec/access.md).

`version_predicate` is the only statement of the visibility rules. Scope
compilation, per-hit re-verification (`visible_versions`) and the index
projection (`access_projection`) all evaluate it; nothing else decides.

Principals are compared by plain equality: callers' principals are
normalized, alias-mapped and group-expanded by ki_core.principals, and grants
and memberships are stored already normalized by ki_core.grants.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import (
    BigInteger,
    BindParameter,
    Boolean,
    ColumnElement,
    Select,
    String,
    TypeDecorator,
    and_,
    bindparam,
    false,
    or_,
    select,
    union,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.orm import Session
from sqlalchemy.sql.visitors import InternalTraversal

from ki_core.models import (
    Document,
    DocumentVersion,
    Grant,
    GrantEffect,
    GrantScope,
    ObservationState,
    Source,
    SourceKind,
    SourceObject,
    SourceObservation,
)
from ki_core.models.access import LOCAL_ORIGIN

AclMode = Literal["sufficient", "intersect"]
ACL_MODES: tuple[AclMode, ...] = ("sufficient", "intersect")


# ------------------------------------------------------------- id sets in SQL


class _StringSet(TypeDecorator):
    """A set of strings bound as ONE parameter: a VARCHAR[] on PostgreSQL, a JSON array on SQLite."""

    impl = String
    cache_ok = True
    # The array's element type on PostgreSQL; SQLite always gets the JSON text.
    item_type: type = String

    def load_dialect_impl(self, dialect):
        if dialect.name == "postgresql":
            return dialect.type_descriptor(postgresql.ARRAY(self.item_type))
        return dialect.type_descriptor(String())

    def process_bind_param(self, value, dialect):
        values = sorted(value)
        return values if dialect.name == "postgresql" else json.dumps(values)


class _IntegerSet(_StringSet):
    """The same for integer ids (chunk ids): a BIGINT[] on PostgreSQL, a JSON array on SQLite."""

    impl = BigInteger
    cache_ok = True
    item_type = BigInteger


def set_parameter(name: str, *, integers: bool = False) -> BindParameter:
    """A named id-set parameter for `in_set`: a statement built once takes its sets at execution.

    The hot statements (re-verification, visibility) are built and compiled once per process;
    building the visibility predicate and its cache key on every search cost more Python than
    SQLite took to run it.
    """
    return bindparam(name, type_=_IntegerSet() if integers else _StringSet())


class in_set(ColumnElement[bool]):
    """`column IN values` with all values in one bound parameter.

    An expanding IN of E (50 principals) repeated in every subquery, plus 500
    project ids, made SQLAlchemy render and psycopg parse tens of thousands of
    placeholders: 15 ms of a 35 ms compile. One array (or JSON) parameter costs
    nothing, keeps the statement cacheable, and has no parameter-count limit.
    """

    inherit_cache = True
    type = Boolean()
    _is_implicitly_boolean = True
    _traverse_internals = [  # noqa: RUF012 (SQLAlchemy's cache-key protocol)
        ("column", InternalTraversal.dp_clauseelement),
        ("values", InternalTraversal.dp_clauseelement),
    ]

    def __init__(self, column: ColumnElement[Any], values: Iterable[str] | BindParameter) -> None:
        self.column = column
        if isinstance(values, BindParameter):
            self.values = values
        else:
            self.values = bindparam(None, tuple(sorted(set(values))), type_=_StringSet())


class in_set_not_leading(in_set):
    """`in_set` the SQLite planner must not use to lead the lookup (a unary + on the column).

    In a subquery correlated to one target (this document's grants, this object's grants)
    the target's index finds a handful of rows; SQLite instead chose the principal index and
    walked all of a caller's grants for every row: 16,073 document grants made each
    re-verification 172 ms. PostgreSQL plans from its statistics and gets the plain form.
    """

    inherit_cache = True


class equals_not_leading(ColumnElement[bool]):
    """`column == value` that the SQLite planner must not use to lead the lookup (a unary + on the column).

    A grant's scope is the first column of the unique index on (scope, target, ...): with the
    target's own index just as bound, SQLite led object-grant lookups by `scope` alone and read
    every object grant of a mirrored DMS per candidate (139 ms for 25 chunks at 53,577 grants).
    With the scope out of reach the target leads (migration 0013).
    """

    inherit_cache = True
    type = Boolean()
    _is_implicitly_boolean = True
    _traverse_internals = [("comparison", InternalTraversal.dp_clauseelement)]  # noqa: RUF012

    def __init__(self, column: ColumnElement[Any], value: Any) -> None:
        self.comparison = column == value


@compiles(equals_not_leading)
def _equals_not_leading(element: equals_not_leading, compiler, **kw) -> str:
    return f"+{compiler.process(element.comparison, **kw)}"


@compiles(equals_not_leading, "postgresql")
def _equals(element: equals_not_leading, compiler, **kw) -> str:
    return compiler.process(element.comparison, **kw)


@compiles(in_set)
def _in_json_array(element: in_set, compiler, **kw) -> str:
    column, values = compiler.process(element.column, **kw), compiler.process(element.values, **kw)
    return f"({column} IN (SELECT value FROM json_each({values})))"


@compiles(in_set_not_leading)
def _in_json_array_not_leading(element: in_set, compiler, **kw) -> str:
    column, values = compiler.process(element.column, **kw), compiler.process(element.values, **kw)
    return f"(+{column} IN (SELECT value FROM json_each({values})))"


@compiles(in_set, "postgresql")
@compiles(in_set_not_leading, "postgresql")
def _equals_any_array(element: in_set, compiler, **kw) -> str:
    column, values = compiler.process(element.column, **kw), compiler.process(element.values, **kw)
    return f"({column} = ANY({values}))"

# ---------------------------------------------------------------- the viewer


@dataclass(frozen=True)
class Viewer:
    """The principals grants are matched against, with the two switches the rules depend on.

    `principals` are stored names: every name that denotes a member of E under
    today's aliases, so the SQL predicate stays plain equality. Built by
    ki_core.principals (`viewer_for`), the one place that resolves callers.
    """

    principals: frozenset[str]
    is_admin: bool
    acl_mode: AclMode

    @property
    def sees_nothing(self) -> bool:
        return not self.is_admin and not self.principals


# ----------------------------------------------------------------- predicate

PrincipalMatch = Collection[str] | ColumnElement[str]
# A canonical principal's stored names under today's aliases (ki_core.principals.stored_names).
NamesOf = Callable[[str], frozenset[str]]


def version_predicate(
    principals: PrincipalMatch, *, is_admin: bool = False, acl_mode: AclMode = "sufficient"
) -> ColumnElement[bool]:
    """True for the DocumentVersion rows E may see (spec/access.md, "A version is visible").

    Correlated to DocumentVersion only: use it in a SELECT whose FROM holds
    document_versions (SQLAlchemy would otherwise add the table to every
    subquery). `principals` is E, already expanded, or a correlated principal
    column when the projection asks "would this one principal see it". Denies
    are top-level NOT EXISTS so PostgreSQL plans them as anti-joins.

    Local rules on one source object (`ki access grant --object`, origin
    LOCAL_ORIGIN) take part as the page's terms say, and never as the object's ACL:
    - a local deny is "a matching DENY ... on the source object of any of its
      active observations" (rule 1, deny wins at every scope), whatever its origin;
    - a local allow is a "local allow" narrowed to the versions the object
      carries (Observations: local_fs delegation; rule 3 in `intersect` mode).
      It is never "a matching allow grant on that source object" of a KNOWN
      ACL: "a local grant never overrides an external ACL", and it leaves
      `acl_known` alone, so an external object without a known ACL stays closed.
    """
    if acl_mode not in ACL_MODES:
        raise ValueError(f"unknown security.source_acl_mode {acl_mode!r}")
    if is_admin:
        return _has_active_observation()
    if not isinstance(principals, ColumnElement) and not principals:
        return false()
    no_deny = and_(
        ~_project_grant(GrantEffect.DENY, principals),
        ~_document_grant(GrantEffect.DENY, principals),
        ~_observed_object_grant(GrantEffect.DENY, principals),
    )
    local_allow = or_(
        _project_grant(GrantEffect.ALLOW, principals),
        _document_grant(GrantEffect.ALLOW, principals),
        _observed_object_grant(GrantEffect.ALLOW, principals, origin="local"),
    )
    source_allow = _observed_object_grant(GrantEffect.ALLOW, principals, origin="mirrored", known_acl_only=True)
    if acl_mode == "intersect":
        return and_(no_deny, local_allow, or_(source_allow, _delegates_to_local_grants()))
    return and_(no_deny, or_(source_allow, and_(_delegates_to_local_grants(), local_allow)))


def _matches(principals: PrincipalMatch) -> ColumnElement[bool]:
    """The grant's principal is one of E (a set or a set parameter), or the correlated principal."""
    if isinstance(principals, ColumnElement) and not isinstance(principals, BindParameter):
        return Grant.principal == principals
    return in_set_not_leading(Grant.principal, principals)


# The version's document, looked up inside the subquery so the predicate needs no outer join.
# One Core alias for every statement: an ORM aliased() per call cost 4 ms of Python each time.
_GRANT_DOCUMENT = Document.__table__.alias("grant_document")


def _project_grant(effect: GrantEffect, principals: PrincipalMatch) -> ColumnElement[bool]:
    document = _GRANT_DOCUMENT
    return (
        select(1)
        .select_from(Grant)
        .join(document, document.c.project_id == Grant.project_id)
        .where(
            document.c.id == DocumentVersion.document_id,
            equals_not_leading(Grant.scope, GrantScope.PROJECT),
            Grant.effect == effect,
            _matches(principals),
        )
        .correlate_except(Grant, document)
        .exists()
    )


def _document_grant(effect: GrantEffect, principals: PrincipalMatch) -> ColumnElement[bool]:
    return (
        select(1)
        .select_from(Grant)
        .where(
            Grant.document_id == DocumentVersion.document_id,
            equals_not_leading(Grant.scope, GrantScope.DOCUMENT),
            Grant.effect == effect,
            _matches(principals),
        )
        .correlate_except(Grant)
        .exists()
    )


def _active_observation_of_version() -> ColumnElement[bool]:
    return and_(
        SourceObservation.version_id == DocumentVersion.id,
        SourceObservation.state == ObservationState.ACTIVE,
    )


def _has_active_observation() -> ColumnElement[bool]:
    return (
        select(1)
        .select_from(SourceObservation)
        .where(_active_observation_of_version())
        .correlate_except(SourceObservation)
        .exists()
    )


GrantOrigin = Literal["any", "local", "mirrored"]


def _observed_object_grant(
    effect: GrantEffect, principals: PrincipalMatch, *, origin: GrantOrigin = "any", known_acl_only: bool = False
) -> ColumnElement[bool]:
    """A matching grant on the source object of one of the version's active observations.

    A deny counts on any observed object, of any origin; a source allow only
    where the ACL is known (an object without a known ACL has no source allow
    to offer) and only from the mirrored ACL.
    """
    stmt = (
        select(1)
        .select_from(SourceObservation)
        .join(Grant, Grant.source_object_id == SourceObservation.source_object_id)
        .where(
            _active_observation_of_version(),
            equals_not_leading(Grant.scope, GrantScope.SOURCE_OBJECT),
            Grant.effect == effect,
            _matches(principals),
            *_origin_is(origin),
        )
    )
    if known_acl_only:
        stmt = stmt.join(SourceObject, SourceObject.id == SourceObservation.source_object_id).where(
            SourceObject.acl_known.is_(True)
        )
    return stmt.correlate_except(SourceObservation, Grant, SourceObject).exists()


def _origin_is(origin: GrantOrigin) -> tuple[ColumnElement[bool], ...]:
    if origin == "local":
        return (Grant.origin == LOCAL_ORIGIN,)
    if origin == "mirrored":
        return (Grant.origin != LOCAL_ORIGIN,)
    return ()


def _delegates_to_local_grants() -> ColumnElement[bool]:
    """An active local_fs observation without a known ACL, and no active observation with one.

    A single known ACL among the active observations switches delegation off:
    a local grant never overrides an external ACL.
    """
    local_unknown = (
        select(1)
        .select_from(SourceObservation)
        .join(SourceObject, SourceObject.id == SourceObservation.source_object_id)
        .join(Source, Source.id == SourceObject.source_id)
        .where(
            _active_observation_of_version(),
            SourceObject.acl_known.is_(False),
            Source.kind == SourceKind.LOCAL_FS,
        )
        .correlate_except(SourceObservation, SourceObject, Source)
        .exists()
    )
    known = (
        select(1)
        .select_from(SourceObservation)
        .join(SourceObject, SourceObject.id == SourceObservation.source_object_id)
        .where(_active_observation_of_version(), SourceObject.acl_known.is_(True))
        .correlate_except(SourceObservation, SourceObject)
        .exists()
    )
    return and_(local_unknown, ~known)


def viewer_predicate(viewer: Viewer) -> ColumnElement[bool]:
    return version_predicate(viewer.principals, is_admin=viewer.is_admin, acl_mode=viewer.acl_mode)


# ----------------------------------------------------------- evaluations


def visible_versions(session: Session, viewer: Viewer, version_ids: Iterable[str]) -> set[str]:
    """The subset of `version_ids` the viewer may see, in one query however many there are.

    This is the re-verification every search hit passes before it is returned.
    """
    ids = set(version_ids)
    if not ids or viewer.sees_nothing:
        return set()
    stmt = visible_versions_statement(viewer.is_admin, viewer.acl_mode)
    return set(session.connection().scalars(stmt, {"version_ids": ids, "principals": viewer.principals}))


@functools.cache
def visible_versions_statement(is_admin: bool, acl_mode: AclMode) -> Select:
    """The ids among :version_ids that the principals in :principals may see; built once per mode."""
    return select(DocumentVersion.id).where(
        in_set(DocumentVersion.id, set_parameter("version_ids")),
        prepared_predicate(is_admin, acl_mode),
    )


def prepared_predicate(is_admin: bool, acl_mode: AclMode) -> ColumnElement[bool]:
    """version_predicate over the set parameter :principals, for statements built once."""
    return version_predicate(set_parameter("principals"), is_admin=is_admin, acl_mode=acl_mode)


def visible_document_ids(session: Session, viewer: Viewer, project_id: str | None = None) -> dict[str, str]:
    """{document_id: project_id} of every document with a visible version: the plain id list.

    Evaluates the predicate for every version (about 100 ms per 100,000 on
    PostgreSQL); compile_scope gives the same documents in compact form, faster.
    """
    if viewer.sees_nothing:
        return {}
    stmt = (
        select(DocumentVersion.document_id, Document.project_id)
        .join(Document, Document.id == DocumentVersion.document_id)
        .where(viewer_predicate(viewer))
        .distinct()
    )
    if project_id is not None:
        stmt = stmt.where(Document.project_id == project_id)
    return {document_id: project_id for document_id, project_id in session.execute(stmt)}


def access_projection(
    session: Session, version_ids: Iterable[str], *, acl_mode: AclMode = "sufficient",
    aliases: Mapping[str, str] | None = None, names_of: NamesOf | None = None,
) -> dict[str, tuple[tuple[str, ...], tuple[str, ...]]]:
    """{version_id: (allowed_principals, denied_principals)} for the index's inspection fields.

    Allowed: each granted principal (canonical name) that, on its own, sees the
    version under the same predicate. Denied: each principal with a deny on the
    version's project, document or an actively observed source object (mirrored
    or a local rule). Admins are not listed: they come from configuration, not
    from grants. `names_of` gives a canonical principal's stored names (from
    ki_core.principals.index_projection, which callers use).
    """
    ids = sorted(set(version_ids))
    aliases = aliases or {}
    allowed: dict[str, set[str]] = {vid: set() for vid in ids}
    denied: dict[str, set[str]] = {vid: set() for vid in ids}
    aliased = set(aliases) | set(aliases.values())
    for vid, principal in session.execute(_allowed_principals_stmt(ids, acl_mode)):
        if principal not in aliased:  # one stored name per principal: the SQL answer is exact
            allowed[vid].add(principal)
    for vid, principal in session.execute(_granted_principals_stmt(ids, GrantEffect.DENY)):
        denied[vid].add(aliases.get(principal, principal))
    if aliased:
        assert names_of is not None, "aliases need names_of: call ki_core.principals.index_projection"
        for principal, vids in _aliased_viewers(session, ids, aliases, aliased, acl_mode, names_of).items():
            for vid in vids:
                allowed[vid].add(principal)
    return {vid: (tuple(sorted(allowed[vid])), tuple(sorted(denied[vid]))) for vid in ids}


def _aliased_viewers(
    session: Session, version_ids: list[str], aliases: Mapping[str, str], aliased: set[str], acl_mode: AclMode,
    names_of: NamesOf,
) -> dict[str, set[str]]:
    """{canonical principal: versions it sees} for allow-granted principals known under several names.

    Evaluated per principal with all its names, since the one-name SQL above
    cannot join an allow under one name with a deny under another. `aliased`:
    every name that is an alias or the target of one.
    """
    granted = {principal for _vid, principal in session.execute(_granted_principals_stmt(version_ids, GrantEffect.ALLOW))}
    principals = {aliases.get(name, name) for name in granted & aliased}
    return {
        principal: visible_versions(
            session, Viewer(principals=names_of(principal), is_admin=False, acl_mode=acl_mode),
            version_ids,
        )
        for principal in sorted(principals)
    }


def _granted_principals_stmt(version_ids: list[str], effect: GrantEffect):
    """(version_id, principal) for every grant of `effect` on the version's three scopes."""
    local = (
        select(DocumentVersion.id.label("version_id"), Grant.principal.label("principal"))
        .join(Document, Document.id == DocumentVersion.document_id)
        .join(
            Grant,
            or_(
                and_(Grant.scope == GrantScope.PROJECT, Grant.project_id == Document.project_id),
                and_(Grant.scope == GrantScope.DOCUMENT, Grant.document_id == Document.id),
            ),
        )
        .where(in_set(DocumentVersion.id, version_ids), Grant.effect == effect)
    )
    observed = (
        select(SourceObservation.version_id, Grant.principal)
        .join(Grant, Grant.source_object_id == SourceObservation.source_object_id)
        .where(
            in_set(SourceObservation.version_id, version_ids),
            SourceObservation.state == ObservationState.ACTIVE,
            equals_not_leading(Grant.scope, GrantScope.SOURCE_OBJECT),
            Grant.effect == effect,
        )
    )
    return union(local, observed)


def _allowed_principals_stmt(version_ids: list[str], acl_mode: AclMode):
    candidates = _granted_principals_stmt(version_ids, GrantEffect.ALLOW).subquery()
    return (
        select(candidates.c.version_id, candidates.c.principal)
        .join(DocumentVersion, DocumentVersion.id == candidates.c.version_id)
        .join(Document, Document.id == DocumentVersion.document_id)
        .where(version_predicate(candidates.c.principal, acl_mode=acl_mode))
    )
