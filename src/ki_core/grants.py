"""Writing who may see what: grants, mirrored ACLs, group memberships, the generation counter.

The one write path for access data, used by the CLI and the DMS ACL sync.
Every principal is stored normalized and alias-mapped, so the visibility
predicate compares with plain equality (spec/access.md, Principals 4), and
every change bumps the access generation in the same transaction, so a scope
cache notices it in the very next search.
"""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict
from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.orm import Session, aliased

from ki_core.acl import canonical_principal, normalize_principal, principal_aliases, stored_names
from ki_core.config import Settings, get_settings
from ki_core.models import (
    AccessGeneration,
    Document,
    DocumentVersion,
    Grant,
    GrantEffect,
    GrantScope,
    GroupMembership,
    Project,
    Source,
    SourceObject,
    SourceObservation,
)


class UnknownTarget(LookupError):
    """A project, document, source or source object named by an operator does not exist."""


class InvalidPrincipal(ValueError):
    """A principal that is empty after trimming cannot be granted anything."""


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class AclEntry(_Model):
    """One entry of a source object's ACL as a source reports it."""

    principal: str
    effect: GrantEffect = GrantEffect.ALLOW


class GrantTarget(_Model):
    """Where a local grant applies: a whole project or one document."""

    scope: GrantScope
    id: str

    @classmethod
    def project(cls, project_id: str) -> GrantTarget:
        return cls(scope=GrantScope.PROJECT, id=project_id)

    @classmethod
    def document(cls, document_id: str) -> GrantTarget:
        return cls(scope=GrantScope.DOCUMENT, id=document_id)


class GrantRecord(_Model):
    """A grant as listed to an operator, with readable names next to the ids."""

    id: str
    scope: GrantScope
    effect: GrantEffect
    principal: str
    origin: str
    project_id: str | None = None
    project_name: str | None = None
    document_id: str | None = None
    document_key: str | None = None
    source_object_id: str | None = None


# ------------------------------------------------------------ generation


def current_access_generation(session: Session) -> int:
    """The counter scope caches key on; one primary-key read."""
    value = session.scalar(select(AccessGeneration.generation).where(AccessGeneration.id == 1))
    return int(value or 0)


def bump_access_generation(session: Session) -> int:
    """Increment the counter in the caller's transaction; call it after ANY access change.

    Grants, memberships, aliases and observations (added, deleted, retired)
    all count: a cached scope of the old generation is then never served.
    """
    stmt = (
        update(AccessGeneration)
        .where(AccessGeneration.id == 1)
        .values(generation=AccessGeneration.generation + 1)
        .returning(AccessGeneration.generation)
    )
    # A plain statement on the session's connection: the ORM's bulk-update path (autoflush,
    # session synchronization) has nothing to do for a counter row and costs more than the UPDATE.
    connection = session.connection()
    value = connection.execute(stmt).scalar()
    if value is None:
        connection.execute(insert(AccessGeneration).values(id=1, generation=1))
        value = 1
    return int(value)


# ------------------------------------------------------------ principals


def stored_principal(raw: str, settings: Settings | None = None) -> str:
    """The form a principal is stored in: normalized, as named; empty is refused.

    Aliases are applied when grants are matched (ki_core.acl.stored_names), not
    here, so a change of `security.principal_aliases` applies to stored grants
    and memberships at once, in both directions.
    """
    principal = normalize_principal(raw)
    if not principal:
        raise InvalidPrincipal(f"principal {raw!r} is empty after trimming")
    return principal


def names_of(raw: str, settings: Settings | None = None) -> frozenset[str]:
    """Every stored name of the principal `raw` denotes under today's aliases (never empty)."""
    stored_principal(raw, settings)
    aliases = principal_aliases(settings or get_settings())
    return stored_names([canonical_principal(raw, aliases)], aliases)


# ------------------------------------------------------------ local grants


def grant(
    session: Session,
    target: GrantTarget,
    principal: str,
    *,
    effect: GrantEffect = GrantEffect.ALLOW,
    origin: str = "local",
    settings: Settings | None = None,
) -> Grant:
    """Add a project or document grant; granting what exists already changes nothing."""
    stored = stored_principal(principal, settings)
    _require_target(session, target)
    existing = session.scalar(_grant_query(target, stored, effect))
    if existing is not None:
        return existing
    row = Grant(scope=target.scope, effect=effect, principal=stored, origin=origin, **_target_columns(target))
    session.add(row)
    session.flush()
    _touch_versions_of(session, target)
    bump_access_generation(session)
    return row


def revoke(
    session: Session,
    target: GrantTarget,
    principal: str,
    *,
    effect: GrantEffect = GrantEffect.ALLOW,
    settings: Settings | None = None,
) -> int:
    """Remove a project or document grant of the principal under any of its names; returns how many rows went."""
    names = names_of(principal, settings)
    _require_target(session, target)
    rows = [row for name in sorted(names) for row in session.scalars(_grant_query(target, name, effect))]
    for row in rows:
        session.delete(row)
    if rows:
        session.flush()
        _touch_versions_of(session, target)
        bump_access_generation(session)
    return len(rows)


def list_grants(
    session: Session,
    *,
    project_id: str | None = None,
    principal: str | None = None,
    include_mirrored: bool = False,
    settings: Settings | None = None,
) -> list[GrantRecord]:
    """Project and document grants (and mirrored source-object grants if asked), readable."""
    document_project = aliased(Project)
    project_of_grant = func.coalesce(Grant.project_id, Document.project_id)
    stmt = (
        select(Grant, func.coalesce(Project.name, document_project.name), Document.key, project_of_grant)
        .outerjoin(Document, Document.id == Grant.document_id)
        .outerjoin(Project, Project.id == Grant.project_id)
        .outerjoin(document_project, document_project.id == Document.project_id)
        .order_by(
            Grant.scope == GrantScope.SOURCE_OBJECT,
            func.coalesce(Project.name, document_project.name),
            Document.key.is_not(None),
            Document.key,
            Grant.principal,
            Grant.effect,
        )
    )
    if not include_mirrored:
        stmt = stmt.where(Grant.scope != GrantScope.SOURCE_OBJECT)
    if project_id is not None:
        stmt = stmt.where(project_of_grant == project_id)
    if principal is not None:
        stmt = stmt.where(Grant.principal.in_(sorted(names_of(principal, settings))))
    return [
        GrantRecord(
            id=row.id,
            scope=row.scope,
            effect=row.effect,
            principal=row.principal,
            origin=row.origin,
            project_id=project,
            project_name=project_name,
            document_id=row.document_id,
            document_key=document_key,
            source_object_id=row.source_object_id,
        )
        for row, project_name, document_key, project in session.execute(stmt)
    ]


def _grant_query(target: GrantTarget, principal: str, effect: GrantEffect):
    column = Grant.project_id if target.scope == GrantScope.PROJECT else Grant.document_id
    return select(Grant).where(
        Grant.scope == target.scope, column == target.id, Grant.principal == principal, Grant.effect == effect
    )


def _target_columns(target: GrantTarget) -> dict[str, str]:
    if target.scope == GrantScope.PROJECT:
        return {"project_id": target.id}
    if target.scope == GrantScope.DOCUMENT:
        return {"document_id": target.id}
    raise ValueError("source-object grants are written by replace_object_acl")


def _require_target(session: Session, target: GrantTarget) -> None:
    model = {GrantScope.PROJECT: Project, GrantScope.DOCUMENT: Document}.get(target.scope)
    if model is None:
        raise ValueError("source-object grants are written by replace_object_acl")
    if session.get(model, target.id) is None:
        raise UnknownTarget(f"no {target.scope.value} with id {target.id!r}")


def _touch_versions_of(session: Session, target: GrantTarget) -> None:
    """Mark the affected versions' index projection stale (access_version + 1)."""
    if target.scope == GrantScope.PROJECT:
        documents = select(Document.id).where(Document.project_id == target.id)
        where = DocumentVersion.document_id.in_(documents)
    else:
        where = DocumentVersion.document_id == target.id
    session.execute(
        update(DocumentVersion)
        .where(where)
        .values(access_version=DocumentVersion.access_version + 1)
        .execution_options(synchronize_session=False)
    )


# ------------------------------------------------------- mirrored from sources


def replace_object_acl(
    session: Session,
    source_object_id: str,
    entries: Iterable[AclEntry] | None,
    *,
    origin: str | None = None,
    settings: Settings | None = None,
) -> None:
    """Make the object's mirrored ACL exactly `entries`; None means the ACL is unknown.

    An empty list is a KNOWN empty ACL (nobody but admins sees the object); None
    drops the mirrored grants and marks the ACL unknown, which for a DMS object
    means nobody sees it and for a local_fs object defers to local grants.
    """
    obj = session.get(SourceObject, source_object_id)
    if obj is None:
        raise UnknownTarget(f"no source object with id {source_object_id!r}")
    wanted = None if entries is None else {(stored_principal(e.principal, settings), e.effect) for e in entries}
    session.execute(
        delete(Grant)
        .where(Grant.scope == GrantScope.SOURCE_OBJECT, Grant.source_object_id == source_object_id)
        .execution_options(synchronize_session="fetch")
    )
    for principal, effect in sorted(wanted or ()):
        session.add(
            Grant(
                scope=GrantScope.SOURCE_OBJECT,
                source_object_id=source_object_id,
                principal=principal,
                effect=effect,
                origin=origin or _source_name(session, obj),
            )
        )
    obj.acl_known = wanted is not None
    session.flush()
    _touch_versions_observing(session, source_object_id)
    bump_access_generation(session)


def _source_name(session: Session, obj: SourceObject) -> str:
    source = session.get(Source, obj.source_id)
    return source.name if source is not None else "source"


def _touch_versions_observing(session: Session, source_object_id: str) -> None:
    versions = select(SourceObservation.version_id).where(
        SourceObservation.source_object_id == source_object_id
    )
    session.execute(
        update(DocumentVersion)
        .where(DocumentVersion.id.in_(versions))
        .values(access_version=DocumentVersion.access_version + 1)
        .execution_options(synchronize_session=False)
    )


def replace_group_members(
    session: Session,
    source_id: str,
    group: str,
    members: Iterable[str],
    *,
    settings: Settings | None = None,
) -> None:
    """Make the group's members, as mirrored from this source, exactly `members`.

    Empty member names are skipped; a group listing itself is stored (the
    expansion terminates on cycles) but changes nothing.
    """
    if session.get(Source, source_id) is None:
        raise UnknownTarget(f"no source with id {source_id!r}")
    stored_group = stored_principal(group, settings)
    wanted = {m for m in map(normalize_principal, members) if m}
    current = {
        row.member_principal: row
        for row in session.scalars(
            select(GroupMembership).where(
                GroupMembership.source_id == source_id, GroupMembership.group_principal == stored_group
            )
        )
    }
    for member in sorted(set(current) - wanted):
        session.delete(current[member])
    for member in sorted(wanted - set(current)):
        session.add(GroupMembership(source_id=source_id, group_principal=stored_group, member_principal=member))
    session.flush()
    bump_access_generation(session)


# ------------------------------------------------------------ name lookups


def resolve_project(session: Session, name_or_id: str) -> Project:
    """A project by name (what operators type) or by id."""
    project = session.scalar(select(Project).where(Project.name == name_or_id))
    project = project or session.get(Project, name_or_id)
    if project is None:
        raise UnknownTarget(f"no project named {name_or_id!r}")
    return project


def resolve_document(session: Session, reference: str, project: Project | None = None) -> Document:
    """A document by id, by key within `project`, or by 'project/key' (keys may hold slashes)."""
    if project is not None:
        document = session.scalar(
            select(Document).where(Document.project_id == project.id, Document.key == reference)
        )
        document = document or _document_by_id(session, reference, project.id)
        if document is None:
            raise UnknownTarget(f"no document {reference!r} in project {project.name!r}")
        return document
    document = session.get(Document, reference) or _document_by_path(session, reference)
    if document is None:
        raise UnknownTarget(f"no document {reference!r} (give its id or project/key)")
    return document


def _document_by_id(session: Session, document_id: str, project_id: str) -> Document | None:
    document = session.get(Document, document_id)
    return document if document is not None and document.project_id == project_id else None


def _document_by_path(session: Session, reference: str) -> Document | None:
    parts = reference.split("/")
    for cut in range(1, len(parts)):
        name, key = "/".join(parts[:cut]), "/".join(parts[cut:])
        document = session.scalar(
            select(Document).join(Project, Project.id == Document.project_id).where(
                Project.name == name, Document.key == key
            )
        )
        if document is not None:
            return document
    return None
