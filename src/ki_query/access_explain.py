"""Why a principal sees a document or not: per version, the facts and the rule that decided.

The verdict (`visible`) always comes from SQL (ki_core.acl.visible_versions);
the words come from the same facts read back here, so an operator can follow
the decision to the grant, the group path and the observation behind it. The
property tests check that the words never disagree with SQL.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict
from sqlalchemy import and_, or_, select
from sqlalchemy.orm import Session

from ki_core.acl import AclMode, Viewer, in_set, visible_versions
from ki_core.principals import admin_principals, caller_paths, stored_paths, viewer_of
from ki_core.config import Settings
from ki_core.grants import UnknownTarget
from ki_core.models.access import LOCAL_ORIGIN
from ki_core.models import (
    Document,
    DocumentVersion,
    Grant,
    GrantEffect,
    GrantScope,
    ObservationState,
    Project,
    Source,
    SourceObject,
    SourceObservation,
)


class _Explained(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class PrincipalPath(_Explained):
    """A principal of E and the membership path that brought it in (caller first)."""

    principal: str
    via: tuple[str, ...]


class GrantMatch(_Explained):
    scope: GrantScope
    target_id: str
    # Project name, document key or the object's external id: what an operator recognizes.
    target_name: str
    effect: GrantEffect
    principal: str
    via: tuple[str, ...]
    origin: str

    def describe(self) -> str:
        group = f" via {' -> '.join(self.via)}" if len(self.via) > 1 else ""
        scope = self.scope.value.replace("_", " ")
        return f"{self.effect.value} to {self.principal!r} on {scope} {self.target_name!r}{group}"


class ObservationAccess(_Explained):
    source_object_id: str
    external_id: str
    source_name: str
    source_kind: str
    state: ObservationState
    acl_known: bool
    accessible: bool
    reason: str


class VersionExplanation(_Explained):
    version_id: str
    seq: int
    # Decided by SQL (version_predicate); `decided_by` names the rule in words.
    visible: bool
    decided_by: str
    grants: tuple[GrantMatch, ...]
    observations: tuple[ObservationAccess, ...]


class AccessExplanation(_Explained):
    principal: str
    principals: tuple[PrincipalPath, ...]
    is_admin: bool
    acl_mode: AclMode
    document_id: str
    document_key: str
    project_id: str
    project_name: str
    visible: bool
    versions: tuple[VersionExplanation, ...]


@dataclass
class _VersionFacts:
    version_id: str
    seq: int
    grants: list[GrantMatch] = field(default_factory=list)
    observations: list[tuple[str, str, str, str, ObservationState, bool]] = field(default_factory=list)


def explain_document(
    session: Session, principal: str, document_id: str, settings: Settings
) -> AccessExplanation:
    """Why `principal` does or does not see each version of the document."""
    document = session.get(Document, document_id)
    if document is None:
        raise UnknownTarget(f"no document with id {document_id!r}")
    project = session.get(Project, document.project_id)
    paths = caller_paths(session, [principal], settings)
    viewer = viewer_of(paths, settings)
    # Grants are stored under the names given; each stored name of E narrates with its principal's path.
    facts = _version_facts(session, document, stored_paths(paths, settings))
    sql_visible = visible_versions(session, viewer, [f.version_id for f in facts])
    versions = tuple(_explain_version(f, viewer, settings, f.version_id in sql_visible) for f in facts)
    return AccessExplanation(
        principal=principal,
        principals=tuple(PrincipalPath(principal=p, via=v) for p, v in sorted(paths.items())),
        is_admin=viewer.is_admin,
        acl_mode=viewer.acl_mode,
        document_id=document.id,
        document_key=document.key,
        project_id=document.project_id,
        project_name=project.name if project is not None else "",
        visible=any(v.visible for v in versions),
        versions=versions,
    )


def _version_facts(session: Session, document: Document, paths: dict[str, tuple[str, ...]]) -> list[_VersionFacts]:
    facts = {
        vid: _VersionFacts(vid, seq)
        for vid, seq in session.execute(
            select(DocumentVersion.id, DocumentVersion.seq)
            .where(DocumentVersion.document_id == document.id)
            .order_by(DocumentVersion.seq)
        )
    }
    observed = session.execute(
        select(
            SourceObservation.version_id, SourceObject.id, SourceObject.external_id,
            Source.name, Source.kind, SourceObservation.state, SourceObject.acl_known,
        )
        .join(SourceObject, SourceObject.id == SourceObservation.source_object_id)
        .join(Source, Source.id == SourceObject.source_id)
        .where(in_set(SourceObservation.version_id, facts))
        .order_by(SourceObject.external_id)
    )
    for vid, object_id, external_id, source_name, kind, state, acl_known in observed:
        facts[vid].observations.append((object_id, external_id, source_name, kind.value, state, bool(acl_known)))
    project = session.get(Project, document.project_id)
    names = {document.project_id: project.name if project else document.project_id, document.id: document.key}
    names |= {o[0]: o[1] for f in facts.values() for o in f.observations}
    grants = _matching_grants(session, document, facts, paths, names)
    for f in facts.values():
        active = {o[0] for o in f.observations if o[4] == ObservationState.ACTIVE}
        f.grants = [g for g in grants if g.scope != GrantScope.SOURCE_OBJECT or g.target_id in active]
    return list(facts.values())


def _matching_grants(
    session: Session,
    document: Document,
    facts: dict[str, _VersionFacts],
    paths: dict[str, tuple[str, ...]],
    names: dict[str, str],
) -> list[GrantMatch]:
    objects = sorted({o[0] for f in facts.values() for o in f.observations})
    stmt = select(Grant).where(
        in_set(Grant.principal, paths),
        or_(
            and_(Grant.scope == GrantScope.PROJECT, Grant.project_id == document.project_id),
            and_(Grant.scope == GrantScope.DOCUMENT, Grant.document_id == document.id),
            and_(Grant.scope == GrantScope.SOURCE_OBJECT, in_set(Grant.source_object_id, objects)),
        ),
    )
    matches = []
    for g in sorted(session.scalars(stmt), key=lambda g: (g.effect != GrantEffect.DENY, g.scope, g.principal)):
        target = g.project_id or g.document_id or g.source_object_id or ""
        matches.append(GrantMatch(
            scope=g.scope,
            target_id=target,
            target_name=names.get(target, target),
            effect=g.effect,
            principal=g.principal,
            via=paths[g.principal],
            origin=g.origin,
        ))
    return matches


def _explain_version(facts: _VersionFacts, viewer: Viewer, settings: Settings, visible: bool) -> VersionExplanation:
    observations = tuple(_observation_access(o, facts, viewer) for o in facts.observations)
    narrated, decided_by = _decision(facts, observations, viewer, settings)
    if narrated != visible:
        decided_by += f" (but SQL decides {'visible' if visible else 'not visible'}, and SQL stands)"
    return VersionExplanation(
        version_id=facts.version_id,
        seq=facts.seq,
        visible=visible,
        decided_by=decided_by,
        grants=tuple(facts.grants),
        observations=observations,
    )


def _observation_access(observation: tuple, facts: _VersionFacts, viewer: Viewer) -> ObservationAccess:
    object_id, external_id, source_name, kind, state, acl_known = observation
    accessible, reason = _observation_verdict(observation, facts, viewer)
    return ObservationAccess(
        source_object_id=object_id, external_id=external_id, source_name=source_name,
        source_kind=kind, state=state, acl_known=acl_known, accessible=accessible, reason=reason,
    )


def _observation_verdict(observation: tuple, facts: _VersionFacts, viewer: Viewer) -> tuple[bool, str]:
    object_id, _external, _source, kind, state, acl_known = observation
    if state != ObservationState.ACTIVE:
        return False, "deleted observation: history, gives nothing"
    if viewer.is_admin:
        return True, "active (admins need nothing more)"
    if acl_known:
        allow = _first_mirrored_allow(facts.grants, object_id)
        return (True, f"known ACL: {allow.describe()}") if allow else (False, "known ACL without a matching allow")
    if kind != "local_fs":
        return False, "external source without a known ACL: fail closed"
    if any(o[5] and o[4] == ObservationState.ACTIVE for o in facts.observations):
        return False, "local_fs delegation off: another active observation has a known ACL"
    local = _local_allow(facts)
    if local is None:
        return False, "no known ACL, delegates to local grants, and no local allow matches"
    return True, f"no known ACL, delegates to local grants: {local.describe()}"


def _decision(
    facts: _VersionFacts, observations: tuple[ObservationAccess, ...], viewer: Viewer, settings: Settings
) -> tuple[bool, str]:
    """The rule of spec/access.md that decides this version, in words."""
    active = [o for o in observations if o.state == ObservationState.ACTIVE]
    if viewer.is_admin:
        admins = ", ".join(sorted(viewer.principals & admin_principals(settings)))
        return (True, f"sees everything as admin ({admins}): grants ignored, an active observation exists") if active else (
            False, f"sees everything as admin ({admins}), but no active observation")
    if not viewer.principals:
        return False, "no principals after normalization: nothing is visible"
    deny = next((g for g in facts.grants if g.effect == GrantEffect.DENY), None)
    if deny is not None:
        return False, f"denied by {deny.describe()} (deny wins)"
    if not active:
        return False, "no active observation"
    accessible = [o for o in active if o.accessible]
    if not accessible:
        return False, "no accessible observation: " + "; ".join(f"{o.external_id}: {o.reason}" for o in active)
    local = _local_allow(facts)
    if viewer.acl_mode == "intersect" and local is None:
        return False, "intersect mode: an observation is accessible, but no local project/document allow"
    return True, f"allowed: {accessible[0].external_id}: {accessible[0].reason}"


def _first_mirrored_allow(grants: list[GrantMatch], object_id: str) -> GrantMatch | None:
    """An allow of the object's known ACL: mirrored from its source, never a local rule on the object
    ("a local grant never overrides an external ACL", ki_core.acl.version_predicate)."""
    return next(
        (g for g in grants if g.effect == GrantEffect.ALLOW and g.scope == GrantScope.SOURCE_OBJECT
         and g.target_id == object_id and g.origin != LOCAL_ORIGIN),
        None,
    )


def _local_allow(facts: _VersionFacts) -> GrantMatch | None:
    """A project or document allow, or a local allow on an object this version is actively observed at
    (facts.grants holds object grants of active observations only)."""
    return next(
        (g for g in facts.grants if g.effect == GrantEffect.ALLOW
         and (g.scope != GrantScope.SOURCE_OBJECT or g.origin == LOCAL_ORIGIN)),
        None,
    )
