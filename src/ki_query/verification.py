"""SQL re-verification of index candidates, and the citations it builds on the way.

The index filter is a projection of the SQL decision; this module is the
backstop. A candidate survives only when its chunk, version and document rows
exist and agree with what the index said, its version passes
ki_core.acl.visible_versions, and at least one ACTIVE source observation of
the version is authorized for the caller (that observation is what the
citation points at). One round trip however many candidates there are: the
chunk rows of visible versions, each with its version's active observations
and the access generation of the same snapshot, so a search also learns there
whether the principals it expanded with its cached scope are still current
(three round trips before: 1.2 ms of a 13 ms search on the peer-bench store).

The statements are built once per process (per admin flag and ACL mode) with the
id sets and principals as array parameters, so SQLAlchemy compiles each once and
a search pays for running SQL, not for building it: re-verifying 40 candidates
on SQLite went from 13.5 ms to 3.2 ms p50 (53 ms to 3.5 ms for a caller with
16,000 document grants; 6,000-chunk peer-bench store).
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from sqlalchemy import ColumnElement, Select, and_, or_, select
from sqlalchemy.orm import Session

from ki_core.acl import (
    AclMode,
    Viewer,
    equals_not_leading,
    in_set,
    in_set_not_leading,
    prepared_predicate,
    set_parameter,
    visible_versions,
)
from ki_core.models import (
    AccessGeneration,
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
from ki_core.models.access import LOCAL_ORIGIN
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
    return verify_batch(session, viewer, candidates).verified


@dataclass(frozen=True)
class Verification:
    verified: dict[int, VerifiedChunk]
    # The access generation in the statement's own snapshot (None: no row came back), so the caller
    # learns in the same round trip whether `viewer` was expanded before an access change.
    generation: int | None


def verify_batch(session: Session, viewer: Viewer, candidates: Iterable[Candidate]) -> Verification:
    """The candidates that pass, with their citations, in one round trip.

    One row per (visible chunk, active observation of its version): the visibility
    predicate in the WHERE, each observation with "its own ACL allows E", and the access
    generation. Which observations are citable is decided here (_citable), as
    citable_sources does for versions.
    """
    wanted = {c.chunk_id: c for c in candidates}
    if not wanted or viewer.sees_nothing:
        return Verification({}, None)
    statement = _visible_chunks_statement(viewer.is_admin, viewer.acl_mode)
    parameters = {"chunk_ids": wanted, "principals": viewer.principals}
    chunks: dict[int, tuple[str | None, _Described] | None] = {}
    # Chunks of one version repeat its columns and observations: each is described once.
    described: dict[str, _Described] = {}
    observed: dict[str, dict[str, _Observed]] = defaultdict(dict)
    generation = None
    for row in session.connection().execute(statement, parameters):
        chunk_id, chunk_version, chunk_document, locus = row[:4]
        generation = row[-1]
        if chunk_id not in chunks:
            description = described.get(chunk_version)
            if description is None:
                description = described[chunk_version] = _Described(*row[4:_OBSERVATION_AT])
            agrees = _agrees(wanted[chunk_id], chunk_version, chunk_document, description)
            chunks[chunk_id] = (locus, description) if agrees else None
        object_id = row[_OBSERVATION_AT]
        if chunks[chunk_id] is not None and object_id not in observed[chunk_version]:
            observed[chunk_version][object_id] = _observed(chunk_version, *row[_OBSERVATION_AT:-1])
    cited = {version_id: _citable(viewer, list(items.values())) for version_id, items in observed.items()}
    facts = {version_id: described[version_id].with_sources(*sources) for version_id, sources in cited.items() if sources}
    verified = {
        chunk_id: VerifiedChunk(chunk_id=chunk_id, locus=entry[0], facts=facts[entry[1].version.id])
        for chunk_id, entry in chunks.items()
        if entry is not None and entry[1].version.id in facts
    }
    return Verification(verified, None if generation is None else int(generation))


# The observation that may be cited, aliased: the predicate's own subqueries over the same
# tables stay independent of it whatever they correlate.
_CITED_OBSERVATION = SourceObservation.__table__.alias("cited_observation")
_CITED_OBJECT = SourceObject.__table__.alias("cited_object")
_CITED_SOURCE = Source.__table__.alias("cited_source")


@functools.cache
def _visible_chunks_statement(is_admin: bool, acl_mode: AclMode) -> Select:
    """The rows of :chunk_ids whose version the principals in :principals may see, described, once per
    active observation of the version (a visible version has one), and the access generation."""
    observation, obj, source = _CITED_OBSERVATION, _CITED_OBJECT, _CITED_SOURCE
    generation = select(AccessGeneration.generation).where(AccessGeneration.id == 1).scalar_subquery()
    return (
        _described(
            select(Chunk.id, Chunk.version_id, Chunk.document_id, Chunk.locus)
            .join(DocumentVersion, DocumentVersion.id == Chunk.version_id)
        )
        .join(observation, and_(
            observation.c.version_id == DocumentVersion.id, observation.c.state == ObservationState.ACTIVE,
        ))
        .join(obj, obj.c.id == observation.c.source_object_id)
        .join(source, source.c.id == obj.c.source_id)
        .add_columns(*_observation_columns(obj, source), generation)
        .where(in_set(Chunk.id, set_parameter("chunk_ids", integers=True)), prepared_predicate(is_admin, acl_mode))
    )


def _agrees(candidate: Candidate, chunk_version: str, chunk_document: str, facts: _Described) -> bool:
    """The index's document, version and project are the ones SQL holds for the chunk."""
    return (
        candidate.version_id == chunk_version == facts.version.id
        and candidate.document_id == chunk_document == facts.document.id
        and candidate.project_id == facts.project.id
    )


# ------------------------------------------------------------------ versions


_VERSION_COLUMNS = (
    DocumentVersion.id, DocumentVersion.seq, DocumentVersion.version_label, DocumentVersion.status,
    DocumentVersion.doc_date, DocumentVersion.language,
    Document.id, Document.key, Document.title, Document.doc_type_id, Document.latest_final_version_id,
    Project.id, Project.name, Project.title,
)
# Where a row of the visible-chunks statement leaves the chunk and version columns for the observation's.
_OBSERVATION_AT = 4 + len(_VERSION_COLUMNS)


def _described(stmt: Select) -> Select:
    """Add a version's citation columns (never its full text) to a select that reaches DocumentVersion."""
    return (
        stmt.add_columns(*_VERSION_COLUMNS)
        .join(Document, Document.id == DocumentVersion.document_id)
        .join(Project, Project.id == Document.project_id)
    )


class _Described:
    """A version, its document and project as citations show them, from one row of _VERSION_COLUMNS."""

    def __init__(self, version_id, seq, label, status, doc_date, language, document_id, key, title, doc_type, latest,
                 project_id, project_name, project_title) -> None:
        self.version = VersionRef(id=version_id, seq=seq, label=label, status=str(status), doc_date=doc_date)
        self.document = DocumentRef(id=document_id, key=key, title=title, doc_type=doc_type)
        self.project = ProjectRef(id=project_id, name=project_name, title=project_title)
        self.language = language
        self.latest_final_version_id = latest

    def with_sources(self, sources: tuple[SourceRef, ...], delegated: bool) -> VersionFacts:
        return VersionFacts(
            project=self.project, document=self.document, version=self.version, language=self.language,
            latest_final_version_id=self.latest_final_version_id, sources=sources, delegated=delegated,
        )


def version_facts(session: Session, viewer: Viewer, version_ids: Collection[str]) -> dict[str, VersionFacts]:
    """Facts of the versions the viewer may see and cite; invisible or uncitable ones are absent.

    Three round-trips: visibility (ki_core.acl.visible_versions), the citable
    observations, the version rows.
    """
    visible = visible_versions(session, viewer, version_ids)
    if not visible:
        return {}
    sources = citable_sources(session, viewer, visible)
    if not sources:
        return {}
    described = [_Described(*row) for row in session.connection().execute(_described_versions_statement(), {"version_ids": sources})]
    return {d.version.id: d.with_sources(*sources[d.version.id]) for d in described}


@functools.cache
def _described_versions_statement() -> Select:
    return _described(select().select_from(DocumentVersion)).where(
        in_set(DocumentVersion.id, set_parameter("version_ids"))
    )


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
    chosen = {version_id: _citable(viewer, items) for version_id, items in observed.items()}
    return {version_id: cited for version_id, cited in chosen.items() if cited is not None}


def _citable(viewer: Viewer, items: list[_Observed]) -> tuple[tuple[SourceRef, ...], bool] | None:
    """(the observations of one visible version the viewer may cite, reached by local delegation); None: none."""
    known = [o for o in items if o.acl_known]
    if viewer.is_admin:
        chosen, delegated = items, False
    elif known:
        chosen, delegated = [o for o in known if o.allowed], False
    else:
        chosen, delegated = [o for o in items if o.source.source_kind == SourceKind.LOCAL_FS.value], True
    if not chosen:
        return None
    return tuple(sorted((o.source for o in chosen), key=lambda s: (s.source, s.external_id))), delegated


def _observed(version_id, object_id, source_name, kind, external_id, uri, title, acl_known, is_allowed) -> _Observed:
    return _Observed(
        version_id=version_id,
        source=SourceRef(
            source_object_id=object_id, source=source_name, source_kind=str(kind),
            external_id=external_id, uri=uri, title=title,
        ),
        acl_known=bool(acl_known),
        allowed=bool(is_allowed),
    )


def _active_observations(session: Session, viewer: Viewer, version_ids: Collection[str]) -> list[_Observed]:
    if not version_ids:
        return []
    parameters = {"version_ids": version_ids, "principals": viewer.principals}
    return [_observed(*row) for row in session.connection().execute(_active_observations_statement(), parameters)]


def _own_acl_allows(object_id: ColumnElement[str]) -> ColumnElement[bool]:
    """The object's own ACL allows :principals: an operator's local allow on the object is not its ACL."""
    return (
        select(Grant.id)
        .where(
            Grant.source_object_id == object_id,
            equals_not_leading(Grant.scope, GrantScope.SOURCE_OBJECT),
            Grant.effect == GrantEffect.ALLOW,
            Grant.origin != LOCAL_ORIGIN,
            in_set_not_leading(Grant.principal, set_parameter("principals")),
        )
        .correlate_except(Grant)
        .exists()
    )


def _observation_columns(obj, source) -> tuple[ColumnElement, ...]:
    """What `_observed` reads after the version id, from an object table and its source's."""
    return (
        obj.c.id, source.c.name, source.c.kind, obj.c.external_id, obj.c.uri, obj.c.title, obj.c.acl_known,
        _own_acl_allows(obj.c.id),
    )


@functools.cache
def _active_observations_statement() -> Select:
    """The active observations of :version_ids, each with "its own ACL allows :principals"."""
    return (
        select(SourceObservation.version_id, *_observation_columns(SourceObject.__table__, Source.__table__))
        .join(SourceObject, SourceObject.id == SourceObservation.source_object_id)
        .join(Source, Source.id == SourceObject.source_id)
        .where(
            in_set(SourceObservation.version_id, set_parameter("version_ids")),
            SourceObservation.state == ObservationState.ACTIVE,
        )
    )


# ------------------------------------------------------------------ text and explanations


@dataclass(frozen=True)
class ChunkText:
    text: str
    # Where a body chunk lies in its version's text, [start, end); None for profile and clause rows.
    start: int | None
    end: int | None


def chunk_texts(session: Session, chunk_ids: Collection[int]) -> dict[int, ChunkText]:
    """Texts and places of the chunks that are shown (only the page and the rerank prefix): one round-trip."""
    if not chunk_ids:
        return {}
    rows = session.connection().execute(_chunk_texts_statement(), {"chunk_ids": chunk_ids})
    return {chunk_id: ChunkText(text, start, end) for chunk_id, text, start, end in rows}


@functools.cache
def _chunk_texts_statement() -> Select:
    return select(Chunk.id, Chunk.text, Chunk.char_start, Chunk.char_end).where(
        in_set(Chunk.id, set_parameter("chunk_ids", integers=True))
    )


def grant_paths(
    session: Session, paths: Mapping[str, tuple[str, ...]], facts: Iterable[VersionFacts], acl_mode: str
) -> dict[str, tuple[GrantPath, ...]]:
    """{version_id: the allow grants that made it visible} for explain, in one query.

    Mirrored object allows on the cited sources when they carry a known ACL;
    the local allows (project, document, or a local rule on a cited object)
    when the sources were reached by delegation or the mode is `intersect`
    (which needs both).
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
            if (g.scope == GrantScope.SOURCE_OBJECT and g.source_object_id in cited
                and (local if g.origin == LOCAL_ORIGIN else not f.delegated))
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
