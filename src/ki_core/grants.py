"""Writing who may see what: grants, mirrored ACLs, group memberships, the generation counter.

The one write path for access data, used by the CLI and the DMS ACL sync.
Every principal is stored normalized and alias-mapped, so the visibility
predicate compares with plain equality (spec/access.md, Principals 4), and
every change bumps the access generation in the same transaction, so a scope
cache notices it in the very next search.

Local rules and mirrored ones are kept apart by origin: an operator's grants
(origin LOCAL_ORIGIN, on a project, a document or one source object) and
memberships (no source) are never replaced by a source's sync, and a sync
replaces only what it mirrored (its source's name as origin, its source id).
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from collections.abc import Iterable, Iterator
from pathlib import Path

from pydantic import BaseModel, ConfigDict
from sqlalchemy import ColumnElement, and_, delete, func, insert, select, update
from sqlalchemy.orm import Session, aliased

from ki_core import principals
from ki_core.principals import InvalidPrincipal
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
    SourceKind,
    SourceObject,
    SourceObservation,
)
from ki_core.models.access import LOCAL_ORIGIN


class UnknownTarget(LookupError):
    """A project, document, source or source object named by an operator does not exist."""


class AmbiguousTarget(UnknownTarget):
    """An operator's reference names several source objects (SOURCE:ID names one), or an id prefix several documents."""


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class AclEntry(_Model):
    """One entry of a source object's ACL as a source reports it."""

    principal: str
    effect: GrantEffect = GrantEffect.ALLOW


class GrantTarget(_Model):
    """Where a local grant applies: a whole project, one document or one source object."""

    scope: GrantScope
    id: str

    @classmethod
    def project(cls, project_id: str) -> GrantTarget:
        return cls(scope=GrantScope.PROJECT, id=project_id)

    @classmethod
    def document(cls, document_id: str) -> GrantTarget:
        return cls(scope=GrantScope.DOCUMENT, id=document_id)

    @classmethod
    def source_object(cls, source_object_id: str) -> GrantTarget:
        return cls(scope=GrantScope.SOURCE_OBJECT, id=source_object_id)


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
    # SOURCE:EXTERNAL_ID of a source-object grant, as `ki access grant --object` takes it.
    object_name: str | None = None


class MembershipRecord(_Model):
    """A group membership as listed to an operator; `origin` is LOCAL_ORIGIN or the source's name."""

    group: str
    member: str
    origin: str


class MembershipDiff(_Model):
    """What one sync of a group changed, in stored names: the audit trail records each member."""

    group: str
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()


# ------------------------------------------------------------ generation


def current_access_generation(session: Session) -> int:
    """The counter scope caches key on; one primary-key read."""
    value = session.scalar(select(AccessGeneration.generation).where(AccessGeneration.id == 1))
    return int(value or 0)


def bump_access_generation(session: Session) -> int | None:
    """Increment the counter in the caller's transaction; call it after ANY access change.

    Grants, memberships, aliases and observations (added, deleted, retired)
    all count: a cached scope of the old generation is then never served.
    Inside `bumped_once` only the first call in the transaction bumps (None for the others).
    """
    once = session.info.get(_BUMP_ONCE)
    transaction = session.get_nested_transaction() or session.get_transaction()
    if once is not None and once.get("in") is transaction is not None and transaction.is_active:
        return None
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
    if once is not None:
        # session.connection() began the transaction if there was none.
        once["in"] = session.get_nested_transaction() or session.get_transaction()
    return int(value)


@contextmanager
def bumped_once(session: Session) -> Iterator[None]:
    """Inside, many access changes in one transaction bump the generation once: for a writer
    that reads no scope before it commits (a batch of files ingested in one transaction).

    The changes and the new value become visible together at commit, wherever the bump was.
    A reader of scopes inside the same transaction would need a bump after each change (a
    scope compiled between two changes is cached under the generation), so only such a
    writer uses this. A savepoint rolled back takes its bump with it: the next change bumps again.
    """
    session.info[_BUMP_ONCE] = {}
    try:
        yield
    finally:
        session.info.pop(_BUMP_ONCE, None)


# session.info key of `bumped_once`: {"in": the transaction or savepoint that bumped}.
_BUMP_ONCE = "ki.bump_access_generation_once"


# ------------------------------------------------------------ principals


def stored_principal(raw: str, settings: Settings | None = None) -> str:
    """The form a principal is stored in (ki_core.principals.stored_principal)."""
    return principals.stored_principal(raw)


def names_of(raw: str, settings: Settings | None = None) -> frozenset[str]:
    """Every stored name of the principal `raw` denotes under today's aliases (never empty)."""
    return principals.names_of(raw, settings or get_settings())


# ------------------------------------------------------------ local grants


def grant(
    session: Session,
    target: GrantTarget,
    principal: str,
    *,
    effect: GrantEffect = GrantEffect.ALLOW,
    origin: str = LOCAL_ORIGIN,
    settings: Settings | None = None,
) -> Grant:
    """Add a grant of this origin; granting what exists already changes nothing.

    On a source object only a local rule is written here (a mirrored ACL is
    replaced whole by replace_object_acl); it never touches the object's
    `acl_known`, so an unknown ACL stays unknown.
    """
    stored = stored_principal(principal, settings)
    _require_target(session, target, origin)
    existing = session.scalar(_grant_query(target, stored, effect, origin))
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
    origin: str = LOCAL_ORIGIN,
    settings: Settings | None = None,
) -> int:
    """Remove the principal's grants of this origin under any of its names; returns how many rows went.

    A local revoke never removes what a source mirrored, nor a source's sync what was made here.
    """
    names = names_of(principal, settings)
    _require_target(session, target, origin)
    rows = [row for name in sorted(names) for row in session.scalars(_grant_query(target, name, effect, origin))]
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
    """Project, document and local source-object grants (and mirrored ACL entries if asked), readable."""
    document_project = aliased(Project)
    project_of_grant = func.coalesce(Grant.project_id, Document.project_id)
    stmt = (
        select(
            Grant, func.coalesce(Project.name, document_project.name), Document.key, project_of_grant,
            Source.name, SourceObject.external_id,
        )
        .outerjoin(Document, Document.id == Grant.document_id)
        .outerjoin(Project, Project.id == Grant.project_id)
        .outerjoin(document_project, document_project.id == Document.project_id)
        .outerjoin(SourceObject, SourceObject.id == Grant.source_object_id)
        .outerjoin(Source, Source.id == SourceObject.source_id)
        .order_by(
            Grant.scope == GrantScope.SOURCE_OBJECT,
            func.coalesce(Project.name, document_project.name),
            Document.key.is_not(None),
            Document.key,
            Source.name,
            SourceObject.external_id,
            Grant.principal,
            Grant.effect,
            Grant.origin,
        )
    )
    if not include_mirrored:
        stmt = stmt.where((Grant.scope != GrantScope.SOURCE_OBJECT) | (Grant.origin == LOCAL_ORIGIN))
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
            object_name=f"{source_name}:{external_id}" if row.source_object_id else None,
        )
        for row, project_name, document_key, project, source_name, external_id in session.execute(stmt)
    ]


def grant_origins(
    session: Session, target: GrantTarget, principal: str, *, effect: GrantEffect, settings: Settings | None = None
) -> list[str]:
    """Origins of the principal's grants of this effect on the target, under any of its names."""
    stmt = select(Grant.origin).where(
        *_on_target(target, effect), Grant.principal.in_(sorted(names_of(principal, settings)))
    )
    return sorted(set(session.scalars(stmt)))


_TARGET_COLUMNS = {
    GrantScope.PROJECT: Grant.project_id,
    GrantScope.DOCUMENT: Grant.document_id,
    GrantScope.SOURCE_OBJECT: Grant.source_object_id,
}
_TARGET_MODELS = {GrantScope.PROJECT: Project, GrantScope.DOCUMENT: Document, GrantScope.SOURCE_OBJECT: SourceObject}


def _on_target(target: GrantTarget, effect: GrantEffect) -> tuple[ColumnElement[bool], ...]:
    return Grant.scope == target.scope, _TARGET_COLUMNS[target.scope] == target.id, Grant.effect == effect


def _grant_query(target: GrantTarget, principal: str, effect: GrantEffect, origin: str):
    return select(Grant).where(*_on_target(target, effect), Grant.principal == principal, Grant.origin == origin)


def _target_columns(target: GrantTarget) -> dict[str, str]:
    return {_TARGET_COLUMNS[target.scope].key: target.id}


def _require_target(session: Session, target: GrantTarget, origin: str) -> None:
    if target.scope == GrantScope.SOURCE_OBJECT and origin != LOCAL_ORIGIN:
        raise ValueError("mirrored source-object grants are written by replace_object_acl")
    if session.get(_TARGET_MODELS[target.scope], target.id) is None:
        raise UnknownTarget(f"no {target.scope.value} with id {target.id!r}")


def _touch_versions_of(session: Session, target: GrantTarget) -> None:
    """Mark the affected versions' index projection stale (access_version + 1): the sweep's access-only reindex."""
    if target.scope == GrantScope.SOURCE_OBJECT:
        _touch_versions_observing(session, target.id)
        return
    if target.scope == GrantScope.PROJECT:
        documents = select(Document.id).where(Document.project_id == target.id)
        where = DocumentVersion.document_id.in_(documents)
    else:
        where = DocumentVersion.document_id == target.id
    _bump_access_versions(session, where)


def _bump_access_versions(session: Session, where) -> None:
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
    An operator's local rules on the object (`grant` with a source-object
    target) are neither replaced nor removed, and are not part of `acl_known`.
    """
    obj = session.get(SourceObject, source_object_id)
    if obj is None:
        raise UnknownTarget(f"no source object with id {source_object_id!r}")
    origin = origin or _source_name(session, obj)
    if origin == LOCAL_ORIGIN:
        raise ValueError(f"a mirrored ACL cannot have the origin {LOCAL_ORIGIN!r} of local rules; rename the source")
    wanted = None if entries is None else {(stored_principal(e.principal, settings), e.effect) for e in entries}
    session.execute(
        delete(Grant)
        .where(mirrored_object_grants(source_object_id))
        .execution_options(synchronize_session="fetch")
    )
    for principal, effect in sorted(wanted or ()):
        session.add(
            Grant(
                scope=GrantScope.SOURCE_OBJECT,
                source_object_id=source_object_id,
                principal=principal,
                effect=effect,
                origin=origin,
            )
        )
    obj.acl_known = wanted is not None
    session.flush()
    _touch_versions_observing(session, source_object_id)
    bump_access_generation(session)


def mirrored_object_grants(source_object_id: str):
    """The WHERE clause of an object's mirrored ACL entries: every source-object grant but the local rules."""
    return and_(
        Grant.scope == GrantScope.SOURCE_OBJECT,
        Grant.source_object_id == source_object_id,
        Grant.origin != LOCAL_ORIGIN,
    )


def _source_name(session: Session, obj: SourceObject) -> str:
    source = session.get(Source, obj.source_id)
    return source.name if source is not None else "source"


def _touch_versions_observing(session: Session, source_object_id: str) -> None:
    versions = select(SourceObservation.version_id).where(
        SourceObservation.source_object_id == source_object_id
    )
    _bump_access_versions(session, DocumentVersion.id.in_(versions))


def replace_group_members(
    session: Session,
    source_id: str,
    group: str,
    members: Iterable[str],
    *,
    settings: Settings | None = None,
) -> MembershipDiff:
    """Make the group's members, as mirrored from this source, exactly `members`; returns what changed.

    Empty member names are skipped; a group listing itself is stored (the
    expansion terminates on cycles) but changes nothing. Local memberships of
    the group (no source) are not this source's and stay.
    """
    if session.get(Source, source_id) is None:
        raise UnknownTarget(f"no source with id {source_id!r}")
    stored_group = stored_principal(group, settings)
    wanted = principals.member_names(members)
    current = {
        row.member_principal: row
        for row in session.scalars(
            select(GroupMembership).where(
                GroupMembership.source_id == source_id, GroupMembership.group_principal == stored_group
            )
        )
    }
    removed, added = sorted(set(current) - wanted), sorted(wanted - set(current))
    for member in removed:
        session.delete(current[member])
    for member in added:
        session.add(GroupMembership(source_id=source_id, group_principal=stored_group, member_principal=member))
    session.flush()
    bump_access_generation(session)
    return MembershipDiff(group=stored_group, added=tuple(added), removed=tuple(removed))


# ------------------------------------------------------------ local memberships
#
# Group expansion (spec/access.md, Principals 3) reads every membership, mirrored or local, so a
# local membership gives what the group is given. Memberships are expanded at query time and the
# index projection names grantees, not their members: a change bumps the access generation (the
# next scope and re-verification see it) and leaves every version's projection as it is.


def add_local_members(
    session: Session, group: str, members: Iterable[str], *, settings: Settings | None = None
) -> list[str]:
    """Make each member a local member of the group; returns the stored names added (present ones are skipped)."""
    stored_group = stored_principal(group, settings)
    wanted = {stored_principal(m, settings) for m in members}
    present = set(session.scalars(
        select(GroupMembership.member_principal).where(
            GroupMembership.source_id.is_(None), GroupMembership.group_principal == stored_group
        )
    ))
    added = sorted(wanted - present)
    session.add_all(GroupMembership(source_id=None, group_principal=stored_group, member_principal=m) for m in added)
    if added:
        session.flush()
        bump_access_generation(session)
    return added


def remove_local_members(
    session: Session, group: str, members: Iterable[str], *, settings: Settings | None = None
) -> list[MembershipRecord]:
    """Remove local memberships of the group under any name of group and member; mirrored ones stay."""
    rows = list(session.scalars(
        select(GroupMembership).where(
            GroupMembership.source_id.is_(None),
            GroupMembership.group_principal.in_(sorted(names_of(group, settings))),
            GroupMembership.member_principal.in_(sorted({n for m in members for n in names_of(m, settings)})),
        )
    ))
    for row in rows:
        session.delete(row)
    if rows:
        session.flush()
        bump_access_generation(session)
    pairs = sorted((r.group_principal, r.member_principal) for r in rows)
    return [MembershipRecord(group=g, member=m, origin=LOCAL_ORIGIN) for g, m in pairs]


def list_memberships(
    session: Session, group: str | None = None, *, settings: Settings | None = None
) -> list[MembershipRecord]:
    """Memberships, local and mirrored, with where each comes from; of one group (any of its names) if given."""
    stmt = select(GroupMembership.group_principal, GroupMembership.member_principal, Source.name).outerjoin(
        Source, Source.id == GroupMembership.source_id
    )
    if group is not None:
        stmt = stmt.where(GroupMembership.group_principal.in_(sorted(names_of(group, settings))))
    rows = sorted((g, m, LOCAL_ORIGIN if source is None else source) for g, m, source in session.execute(stmt))
    return [MembershipRecord(group=g, member=m, origin=origin) for g, m, origin in rows]


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
        document = document or _document_by_prefix(session, reference, project.id)
        if document is None:
            raise UnknownTarget(f"no document {reference!r} in project {project.name!r}")
        return document
    document = session.get(Document, reference) or _document_by_path(session, reference)
    document = document or _document_by_prefix(session, reference)
    if document is None:
        raise UnknownTarget(f"no document {reference!r} (give its id, a unique prefix of it, or project/key)")
    return document


def _document_by_id(session: Session, document_id: str, project_id: str) -> Document | None:
    document = session.get(Document, document_id)
    return document if document is not None and document.project_id == project_id else None


# Ids are 32 hex digits; a prefix of at least 4 names one, as `ki get` takes it (ki_query.id_prefix,
# which answers for a caller's visible documents; an operator's commands see every document).
_ID_LENGTH, _MIN_PREFIX = 32, 4


def _document_by_prefix(session: Session, reference: str, project_id: str | None = None) -> Document | None:
    """The one document whose id starts with REFERENCE (4 to 32 hex digits); AmbiguousTarget when several do."""
    prefix = reference.strip().lower()
    if not _MIN_PREFIX <= len(prefix) <= _ID_LENGTH or prefix.strip("0123456789abcdef"):
        return None
    stmt = select(Document).where(Document.id.between(prefix.ljust(_ID_LENGTH, "0"), prefix.ljust(_ID_LENGTH, "f")))
    if project_id is not None:
        stmt = stmt.where(Document.project_id == project_id)
    found = list(session.scalars(stmt.order_by(Document.id).limit(6)))
    if len(found) > 1:
        shown = ", ".join(d.id for d in found[:5]) + (", ..." if len(found) > 5 else "")
        raise AmbiguousTarget(f"document id prefix {reference!r} matches several documents: {shown}; give more characters")
    return found[0] if found else None


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


def resolve_source_object(session: Session, reference: str) -> SourceObject:
    """The source object `ki access grant --object` names: SOURCE:EXTERNAL_ID, or a friendlier form.

    SOURCE is a source's name (`acme`, `local:/abs/folder`) or a registered
    folder's path (absolute, or relative to the working directory); a file's
    path inside a registered folder, and `local:RELATIVE/PATH` when one folder
    holds that path, name a folder's file too. Only objects already seen (an
    ingested file, a DMS object an event named) can be named.
    """
    found = {
        obj.id: obj
        for source in session.scalars(select(Source).order_by(Source.name))
        for external_id in sorted(set(_external_ids(source, reference)))
        if (obj := _object_of(session, source, external_id)) is not None
    }
    if len(found) == 1:
        return next(iter(found.values()))
    if found:
        names = ", ".join(sorted(f"{_source_name(session, o)}:{o.external_id}" for o in found.values()))
        raise AmbiguousTarget(f"{reference!r} names {len(found)} objects ({names}); give SOURCE:ID")
    raise UnknownTarget(
        f"no source object {reference!r} (give SOURCE:ID, e.g. acme:4711 or local:/path/to/folder:file.pdf;"
        " a file must have been ingested, a DMS object named by an event)"
    )


def _external_ids(source: Source, reference: str) -> Iterator[str]:
    """Every external id of `source` the reference could mean."""
    if reference.startswith(f"{source.name}:"):
        yield reference[len(source.name) + 1:]
    root = (source.config or {}).get("root") if source.kind == SourceKind.LOCAL_FS else None
    if not root:
        return
    relative = reference.removeprefix("local:")
    if relative != reference and not os.path.isabs(relative):
        yield relative
    for cut in (i for i, char in enumerate(reference) if char == ":"):
        if _same_path(reference[:cut], root):
            yield reference[cut + 1:]
    inside = _inside(reference, root)
    if inside is not None:
        yield inside


def _same_path(path: str, root: str) -> bool:
    return bool(path) and Path(path).expanduser().resolve() == Path(root).resolve()


def _inside(path: str, root: str) -> str | None:
    """The path relative to `root` (POSIX form) when it lies inside it."""
    try:
        return Path(path).expanduser().resolve().relative_to(Path(root).resolve()).as_posix()
    except ValueError:
        return None


def _object_of(session: Session, source: Source, external_id: str) -> SourceObject | None:
    if not external_id:
        return None
    return session.scalar(
        select(SourceObject).where(SourceObject.source_id == source.id, SourceObject.external_id == external_id)
    )
