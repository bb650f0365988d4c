"""SQL re-verification of index candidates, and the citations it builds on the way.

The index filter is a projection of the SQL decision; this module is the
backstop. A candidate survives only when its chunk, version and document rows
exist and agree with what the index said, its version passes
ki_core.acl.visible_versions, and at least one ACTIVE source observation of
the version is authorized for the caller (that observation is what the
citation points at). Three round-trips however many candidates there are.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from sqlalchemy import and_, or_, select
from sqlalchemy.orm import Session

from ki_core.acl import Viewer, in_set, visible_versions
from ki_core.models import (
    Chunk,
    Document,
    DocumentVersion,
    Grant,
    GrantEffect,
    GrantScope,
    ObservationState,
    Project,
    Source,
    SourceKind,
    SourceObject,
    SourceObservation,
)
from ki_query.fusion import Candidate
from ki_query.types import DocumentRef, GrantPath, ProjectRef, SourceRef, VersionRef


@dataclass(frozen=True)
class VersionFacts:
    """What SQL says about one visible version: its document, project and citable sources."""

    project: ProjectRef
    document: DocumentRef
    version: VersionRef
    language: str | None
    latest_final_version_id: str | None
    sources: tuple[SourceRef, ...]
    # The sources are local_fs objects reached through a local project/document allow.
    delegated: bool


@dataclass(frozen=True)
class VerifiedChunk:
    chunk_id: int
    locus: str | None
    facts: VersionFacts


@dataclass(frozen=True)
class _Observed:
    version_id: str
    source: SourceRef
    acl_known: bool
    allowed: bool


# ------------------------------------------------------------------ candidates


def verify_candidates(session: Session, viewer: Viewer, candidates: Iterable[Candidate]) -> dict[int, VerifiedChunk]:
    """{chunk_id: VerifiedChunk} for the candidates that pass; the rest simply are not there."""
    wanted = {c.chunk_id: c for c in candidates}
    if not wanted or viewer.sees_nothing:
        return {}
    rows = _chunk_rows(session, list(wanted))
    consistent = {
        chunk_id: row for chunk_id, row in rows.items() if _agrees(row, wanted[chunk_id])
    }
    facts = version_facts(session, viewer, {row.version_id for row in consistent.values()})
    verified = {}
    for chunk_id, row in consistent.items():
        version = facts.get(row.version_id)
        if version is not None:
            verified[chunk_id] = VerifiedChunk(chunk_id=chunk_id, locus=row.locus, facts=version)
    return verified


@dataclass(frozen=True)
class _ChunkRow:
    version_id: str
    document_id: str
    version_document_id: str
    project_id: str
    locus: str | None


def _chunk_rows(session: Session, chunk_ids: list[int]) -> dict[int, _ChunkRow]:
    stmt = (
        select(Chunk.id, Chunk.version_id, Chunk.document_id, DocumentVersion.document_id, Document.project_id, Chunk.locus)
        .join(DocumentVersion, DocumentVersion.id == Chunk.version_id)
        .join(Document, Document.id == DocumentVersion.document_id)
        .where(Chunk.id.in_(chunk_ids))
    )
    return {chunk_id: _ChunkRow(*rest) for chunk_id, *rest in session.execute(stmt)}


def _agrees(row: _ChunkRow, candidate: Candidate) -> bool:
    """The index's document, version and project are the ones SQL holds for the chunk."""
    return (
        row.version_id == candidate.version_id
        and row.document_id == candidate.document_id == row.version_document_id
        and row.project_id == candidate.project_id
    )


# ------------------------------------------------------------------ versions


def version_facts(session: Session, viewer: Viewer, version_ids: Collection[str]) -> dict[str, VersionFacts]:
    """Facts of the versions the viewer may see and cite; invisible or uncitable ones are absent.

    Two round-trips: visibility (ki_core.acl.visible_versions) and rows with observations.
    """
    visible = visible_versions(session, viewer, version_ids)
    if not visible:
        return {}
    sources = citable_sources(session, viewer, visible)
    rows = _version_rows(session, [v for v in visible if sources.get(v)])
    return {
        version_id: VersionFacts(
            project=project, document=document, version=version, language=language,
            latest_final_version_id=latest_final, sources=sources[version_id][0], delegated=sources[version_id][1],
        )
        for version_id, (project, document, version, language, latest_final) in rows.items()
    }


def _version_rows(session: Session, version_ids: list[str]) -> dict[str, tuple]:
    if not version_ids:
        return {}
    stmt = (
        select(DocumentVersion, Document, Project)
        .join(Document, Document.id == DocumentVersion.document_id)
        .join(Project, Project.id == Document.project_id)
        .where(in_set(DocumentVersion.id, version_ids))
    )
    rows = {}
    for version, document, project in session.execute(stmt):
        rows[version.id] = (
            ProjectRef(id=project.id, name=project.name, title=project.title),
            DocumentRef(id=document.id, key=document.key, title=document.title),
            VersionRef(
                id=version.id, seq=version.seq, label=version.version_label,
                status=str(version.status), doc_date=version.doc_date,
            ),
            version.language,
            document.latest_final_version_id,
        )
    return rows


def citable_sources(
    session: Session, viewer: Viewer, visible_version_ids: Collection[str]
) -> dict[str, tuple[tuple[SourceRef, ...], bool]]:
    """{version_id: (authorized active source objects, reached by local delegation)} for VISIBLE versions.

    Per spec/access.md, for a version the predicate already found visible: an
    admin may cite every active observation; otherwise, if any active
    observation has a known ACL, exactly those with a matching allow (local
    delegation is then off), else the local_fs observations (visibility
    needed a local allow for them). External objects without a known ACL are
    never cited. One round-trip.
    """
    observed: dict[str, list[_Observed]] = defaultdict(list)
    for item in _active_observations(session, viewer, visible_version_ids):
        observed[item.version_id].append(item)
    result = {}
    for version_id, items in observed.items():
        known = [o for o in items if o.acl_known]
        if viewer.is_admin:
            chosen, delegated = items, False
        elif known:
            chosen, delegated = [o for o in known if o.allowed], False
        else:
            chosen, delegated = [o for o in items if o.source.source_kind == SourceKind.LOCAL_FS.value], True
        if chosen:
            ordered = sorted((o.source for o in chosen), key=lambda s: (s.source, s.external_id))
            result[version_id] = (tuple(ordered), delegated)
    return result


def _active_observations(session: Session, viewer: Viewer, version_ids: Collection[str]) -> list[_Observed]:
    if not version_ids:
        return []
    allowed = (
        select(Grant.id)
        .where(
            Grant.source_object_id == SourceObject.id,
            Grant.scope == GrantScope.SOURCE_OBJECT,
            Grant.effect == GrantEffect.ALLOW,
            in_set(Grant.principal, viewer.principals),
        )
        .exists()
    )
    stmt = (
        select(
            SourceObservation.version_id, SourceObject.id, Source.name, Source.kind, SourceObject.external_id,
            SourceObject.uri, SourceObject.title, SourceObject.acl_known, allowed,
        )
        .join(SourceObject, SourceObject.id == SourceObservation.source_object_id)
        .join(Source, Source.id == SourceObject.source_id)
        .where(in_set(SourceObservation.version_id, version_ids), SourceObservation.state == ObservationState.ACTIVE)
    )
    return [
        _Observed(
            version_id=version_id,
            source=SourceRef(
                source_object_id=object_id, source=source_name, source_kind=str(kind),
                external_id=external_id, uri=uri, title=title,
            ),
            acl_known=bool(acl_known),
            allowed=bool(is_allowed),
        )
        for version_id, object_id, source_name, kind, external_id, uri, title, acl_known, is_allowed in session.execute(stmt)
    ]


# ------------------------------------------------------------------ text and explanations


def chunk_texts(session: Session, chunk_ids: Collection[int]) -> dict[int, str]:
    """Texts of the chunks that are shown (only the page and the rerank prefix): one round-trip."""
    if not chunk_ids:
        return {}
    return {chunk_id: text for chunk_id, text in session.execute(select(Chunk.id, Chunk.text).where(Chunk.id.in_(list(chunk_ids))))}


def grant_paths(
    session: Session, paths: Mapping[str, tuple[str, ...]], facts: Iterable[VersionFacts], acl_mode: str
) -> dict[str, tuple[GrantPath, ...]]:
    """{version_id: the allow grants that made it visible} for explain, in one query.

    Object allows on the cited sources when they carry a known ACL; the local
    project/document allows when the sources were reached by delegation or
    the mode is `intersect` (which needs both).
    """
    facts = list(facts)
    if not facts or not paths:
        return {}
    projects = {f.project.id for f in facts}
    documents = {f.document.id for f in facts}
    objects = {s.source_object_id for f in facts for s in f.sources}
    stmt = select(Grant).where(
        Grant.effect == GrantEffect.ALLOW,
        in_set(Grant.principal, paths),
        or_(
            and_(Grant.scope == GrantScope.PROJECT, in_set(Grant.project_id, projects)),
            and_(Grant.scope == GrantScope.DOCUMENT, in_set(Grant.document_id, documents)),
            and_(Grant.scope == GrantScope.SOURCE_OBJECT, in_set(Grant.source_object_id, objects)),
        ),
    )
    grants = list(session.scalars(stmt))
    result = {}
    for f in facts:
        local = f.delegated or acl_mode == "intersect"
        cited = {s.source_object_id for s in f.sources}
        chosen = [
            g for g in grants
            if (g.scope == GrantScope.SOURCE_OBJECT and g.source_object_id in cited and not f.delegated)
            or (local and g.scope == GrantScope.PROJECT and g.project_id == f.project.id)
            or (local and g.scope == GrantScope.DOCUMENT and g.document_id == f.document.id)
        ]
        result[f.version.id] = tuple(
            GrantPath(
                scope=str(g.scope), target_id=g.project_id or g.document_id or g.source_object_id or "",
                principal=g.principal, via=paths[g.principal],
            )
            for g in sorted(chosen, key=lambda g: (str(g.scope), g.principal))
        )
    return result


def access_reason(viewer: Viewer, facts: VersionFacts, granted: tuple[GrantPath, ...]) -> str:
    """The rule that let the version through, in words (SQL decided; this only narrates)."""
    cited = ", ".join(f"{s.source}:{s.external_id}" for s in facts.sources)
    if viewer.is_admin:
        return f"admin: grants are ignored; active observation {cited}"
    how = "; ".join(g.describe() for g in granted) or "no matching grant found to narrate"
    if facts.delegated:
        return f"local file without a known ACL ({cited}) delegates to local grants: {how}"
    return f"known source ACL ({cited}): {how}"
