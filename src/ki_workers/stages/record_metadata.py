"""The metadata stage's write side: store the extractor's output and apply it to the rows.

The extractor (rules or LLM) only reads text; this module decides what of its
answer lands on Document and DocumentVersion, and keeps the raw answer as a
MetadataArtifact so a later re-run or audit can see what the model said.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from ki_core.models import (
    Document,
    DocumentVersion,
    MetadataArtifact,
    OntologyNode,
    ProcessingState,
    Project,
    Relation,
    RelationKind,
)
from ki_workers.stages.rows import get_or_create_matter, version_and_document, versions_and_documents
from ki_workers.stages.metadata import (
    DocumentMetadata,
    MetadataExtractor,
    decided_doc_type,
    extractor_of,
    is_generic_title,
)
from ki_workers.stages.rules_ahead import Answer, RulesAhead, RulesHelper, runs_ahead, start_helper

if TYPE_CHECKING:
    from ki_workers.context import WorkerContext

# The document's own identifiers (its Aktenzeichen, its contract number) stand in its
# title or its opening; identifiers further down are citations of other documents.
OWN_IDENTIFIER_WINDOW_CHARS = 600


def record_metadata(
    session: Session, version_id: str, extractor: MetadataExtractor, *, link_now: bool = True
) -> DocumentMetadata | None:
    """Extract, store the artifacts, apply to document and version. Idempotent.

    link_now=False leaves `references` edges to one link_project_references
    pass after a batch (a folder sync), instead of one project scan per document.
    """
    version, document = version_and_document(session, version_id)
    metadata = _record(session, version, document, extractor)
    if metadata is None:
        return None
    session.flush()
    if link_now:
        link_references(session, document)
    return metadata


def record_metadata_many(
    session: Session, version_ids: list[str], extractor: MetadataExtractor, ahead: RulesAhead | None = None
) -> int:
    """record_metadata for a batch, in one read and one flush; returns how many had text to extract.

    For in-process batch work (a folder sync): one transaction, one SELECT and one
    round of INSERTs and UPDATEs however many versions, instead of each. The
    `references` edges are left to one link_project_references pass, as with link_now=False.
    `ahead`: the rules' answers a helper process computed meanwhile (stages.rules_ahead).
    """
    rows = versions_and_documents(session, version_ids)
    # In the order given: two versions of one document apply to the one row, the later one last.
    wanted = [version_id for version_id in dict.fromkeys(version_ids) if version_id in rows]
    answers = ahead.answers(
        [(v, rows[v][0].text, rows[v][1].title) for v in wanted if _extractable(rows[v][0])], extractor
    ) if ahead is not None else {}
    recorded = sum(_record(session, *rows[v], extractor, answers.get(v)) is not None for v in wanted)
    session.flush()
    return recorded


# Inside deferred_extractions, this many versions share one transaction (with a helper: this many
# it has answered), and none waits longer than this before it is extracted (and handed on to be
# embedded and indexed).
EXTRACTIONS_PER_BATCH = 64
EXTRACTION_MAX_WAIT_SECONDS = 1.0


@dataclass
class ExtractionBatch:
    """The versions waiting for one extraction transaction, each with when it began to wait, and
    what takes their ids next; `ahead`, when a helper runs the rules for them meanwhile."""

    hand_on: Callable[[list[str]], None]
    ahead: RulesAhead | None = None
    # In the order ingested (a document's later version is recorded after its earlier one).
    waiting: dict[str, float] = field(default_factory=dict)
    # False inside extracting_at_once: a version is extracted when it is ingested.
    deferring: bool = True

    def waited_seconds(self) -> float:
        """How long the oldest waiting version has waited."""
        return time.monotonic() - next(iter(self.waiting.values()), time.monotonic())


@contextmanager
def deferred_extractions(
    ctx: WorkerContext, hand_on: Callable[[list[str]], None], *, rules_ahead: bool = False
) -> Iterator[None]:
    """Collect the versions to extract and hand them on a batch at a time (`hand_on`: the task
    that records them with record_metadata_many, in one transaction).

    For in-process batch work (a folder sync): per document, a transaction of its
    own with its read and its flush cost about as much as the rules themselves.
    The caller flushes between files (`flush_extractions_if_waiting`), never from
    inside a task, so a batch runs where a file's progress watcher is not set.
    Until its batch commits a version stays CONVERTED: a crash or Ctrl-C leaves
    it for the next sync to resume (tasks._left_unfinished), never skipped.
    `rules_ahead`: a helper process runs the rules meanwhile (a long sync: for a few files,
    starting one costs more than it saves).
    """
    ctx.extraction_batch = ExtractionBatch(hand_on, _rules_ahead(ctx) if rules_ahead else None)
    try:
        yield
    finally:
        batch = ctx.extraction_batch
        try:
            flush_all_extractions(ctx)
        finally:
            ctx.extraction_batch = None
            if batch.ahead is not None:
                batch.ahead.close()


def _rules_ahead(ctx: WorkerContext) -> RulesAhead | None:
    """A helper for the rules, where they are the extractor, run in this process (eager) and a
    helper process is allowed; the process itself is kept by the context from one sync to the next."""
    extractor = extractor_of(ctx)
    if not ctx.settings.broker.eager or not runs_ahead(extractor) or ctx.settings.ingest.helper_processes < 1:
        return None

    def helper() -> RulesHelper | None:
        if ctx.rules_helper is None or not ctx.rules_helper.alive:
            ctx.rules_helper = start_helper(ctx.settings.database_url)
        return ctx.rules_helper

    return RulesAhead(helper, extractor.producer)


def rules_ahead_of(ctx: WorkerContext) -> RulesAhead | None:
    """The answers a helper computes for the waiting versions, if one does."""
    return ctx.extraction_batch.ahead if ctx.extraction_batch is not None else None


def defer_extraction(ctx: WorkerContext, version_id: str) -> bool:
    """True when the version now waits for a batch; False outside deferred_extractions (extract it now)."""
    batch = ctx.extraction_batch
    if batch is None or not batch.deferring:
        return False
    batch.waiting.setdefault(version_id, time.monotonic())
    if batch.ahead is not None:
        batch.ahead.start(version_id)
    return True


def flush_extractions_if_waiting(ctx: WorkerContext, *, before_long_work: bool = False) -> None:
    """Record the waiting batch when it is full, has waited long enough, or a large file is next.

    With a helper running the rules, full means a batch's worth answered, from the oldest on:
    those are recorded and the rest waits for the helper (up to the longest wait), so the sync's
    process does not run the rules on what the helper reaches a moment later. The helper then
    works through the batch while this process ingests, embeds and indexes.
    """
    batch = ctx.extraction_batch
    if batch is None or not batch.waiting:
        return
    if before_long_work or batch.waited_seconds() >= EXTRACTION_MAX_WAIT_SECONDS:
        flush_extractions(ctx)
    elif batch.ahead is not None and batch.ahead.running:
        answered = batch.ahead.answered_from_front(batch.waiting)
        if answered >= EXTRACTIONS_PER_BATCH:
            flush_extractions(ctx, count=answered)
    elif len(batch.waiting) >= EXTRACTIONS_PER_BATCH:
        flush_extractions(ctx)


# At the end, the helper's answers are recorded first (their embedding runs while it answers the
# rest) as long as it has this many ready; fewer, and this process runs the rules on the rest too.
EXTRACTIONS_AT_THE_END_MIN = 8


def flush_all_extractions(ctx: WorkerContext) -> None:
    """Hand on every waiting version: with a helper, what it has answered first, again and again."""
    batch = ctx.extraction_batch
    while batch is not None and batch.waiting:
        running = batch.ahead is not None and batch.ahead.running
        answered = batch.ahead.answered_from_front(batch.waiting) if running else 0
        flush_extractions(ctx, count=answered if answered >= EXTRACTIONS_AT_THE_END_MIN else None)


def flush_extractions(ctx: WorkerContext, *, count: int | None = None) -> None:
    """Hand the waiting versions on (`count`: the oldest so many), in one batch (to
    record_metadata_many, through its task)."""
    batch = ctx.extraction_batch
    if batch is None or not batch.waiting:
        return
    waiting = list(batch.waiting.items())
    taken = waiting if count is None else waiting[:count]
    batch.waiting = dict(waiting[len(taken):])
    batch.hand_on([version_id for version_id, _since in taken])


@contextmanager
def extracting_at_once(ctx: WorkerContext) -> Iterator[None]:
    """Inside deferred_extractions, a stretch (a large file) whose versions are extracted at once:
    its embedding then runs while its watcher sees it. What waits is recorded first."""
    batch = ctx.extraction_batch
    if batch is None or not batch.deferring:
        yield
        return
    flush_extractions(ctx)
    batch.deferring = False
    try:
        yield
    finally:
        batch.deferring = True


def _record(
    session: Session, version: DocumentVersion | None, document: Document | None, extractor: MetadataExtractor,
    answer: Answer | None = None,
) -> DocumentMetadata | None:
    """Extract, store the artifacts, apply; nothing for a version without text or that failed.

    `answer`: the rules' answer computed before, taken if it read the title the document has now
    (an earlier version of the same batch may have just given it one).
    """
    if version is None or not _extractable(version):
        return None
    version_id = version.id
    if answer is not None and answer.title == document.title:
        metadata = answer.metadata
    else:
        metadata = extractor.extract(version.text, title=document.title)
    clauses = [clause.model_dump(mode="json") for clause in metadata.notable_clauses]
    _store_artifacts(
        session,
        version_id,
        extractor.producer,
        {"metadata": metadata.model_dump(mode="json"), "notable_clauses": {"clauses": clauses}},
        # Artifacts and the EXTRACTED state commit together: a version still CONVERTED has none to read.
        first=version.processing_state == ProcessingState.CONVERTED,
    )
    _apply(session, document, version, metadata)
    version.processing_state = ProcessingState.EXTRACTED
    return metadata


def _extractable(version: DocumentVersion) -> bool:
    return version.text is not None and version.processing_state != ProcessingState.FAILED


def outdated_versions(session: Session, producer: str) -> list[str]:
    """Indexed versions whose newest metadata came from another extractor version than PRODUCER."""
    newest = (
        select(MetadataArtifact.version_id, func.max(MetadataArtifact.created_at).label("at"))
        .where(MetadataArtifact.kind == "metadata")
        .group_by(MetadataArtifact.version_id)
        .subquery()
    )
    rows = session.execute(
        select(MetadataArtifact.version_id)
        .join(newest, (newest.c.version_id == MetadataArtifact.version_id) & (newest.c.at == MetadataArtifact.created_at))
        .join(DocumentVersion, DocumentVersion.id == MetadataArtifact.version_id)
        .where(
            MetadataArtifact.kind == "metadata",
            MetadataArtifact.producer != producer,
            DocumentVersion.processing_state.in_([ProcessingState.INDEXED, ProcessingState.EXTRACTED]),
        )
        .order_by(MetadataArtifact.version_id)
    )
    return list(dict.fromkeys(rows.scalars()))


def re_extract(session: Session, version_id: str, extractor: MetadataExtractor) -> bool:
    """Extract again with a newer extractor; True when title, date or type changed.

    What the earlier extractor put on the rows is replaced; what differs from its
    answer came from the manifest or the DMS and stays (a source-supplied date is
    never overwritten by a guess). The version keeps its processing state: the
    caller (`ki reindex`) writes it to the index.
    """
    version = session.get(DocumentVersion, version_id)
    document = session.get(Document, version.document_id)
    earlier = _newest_metadata(session, version_id)
    before = (document.title, version.doc_date, document.doc_type_id)
    extracted_title = document.title if document.title == earlier.title else None
    state = version.processing_state
    if extracted_title is not None:
        document.title = None
    if version.doc_date == earlier.doc_date:
        version.doc_date = None
    if document.doc_type_id == earlier.doc_type:
        document.doc_type_id = None
    metadata = record_metadata(session, version_id, extractor, link_now=False)
    if metadata is None:  # no text: nothing to extract from; put back what was there
        document.title, version.doc_date, document.doc_type_id = before
        return False
    version.processing_state = state
    return (document.title, version.doc_date, document.doc_type_id) != before


def _newest_metadata(session: Session, version_id: str) -> DocumentMetadata:
    payload = session.scalar(
        select(MetadataArtifact.payload)
        .where(MetadataArtifact.version_id == version_id, MetadataArtifact.kind == "metadata")
        .order_by(MetadataArtifact.created_at.desc())
        .limit(1)
    )
    return DocumentMetadata.model_validate(payload or {})


def _store_artifacts(
    session: Session, version_id: str, producer: str, payloads: dict[str, dict], *, first: bool = False
) -> None:
    """One artifact per kind and producer: a re-run overwrites its own earlier answer.

    `first`: the version was never extracted, so there is no earlier answer to read.
    """
    stored = {} if first else {
        artifact.kind: artifact
        for artifact in session.scalars(
            select(MetadataArtifact).where(
                MetadataArtifact.version_id == version_id,
                MetadataArtifact.kind.in_(list(payloads)),
                MetadataArtifact.producer == producer,
            )
        )
    }
    for kind, payload in payloads.items():
        if kind in stored:
            stored[kind].payload = payload
        else:
            session.add(MetadataArtifact(version_id=version_id, kind=kind, producer=producer, payload=payload))


def _apply(session: Session, document: Document, version: DocumentVersion, metadata: DocumentMetadata) -> None:
    """Manifest and DMS values win; the extractor fills what they left open.

    Two exceptions, where what ingest stored may be a file property rather than a
    declaration: a generic title ("Dokument1.docx") gives way to the extracted one,
    and the language is the text's. A DOCX declares its template's language (an
    "en-US" template under a German brief), and ingest stores the DMS's language and
    the file's in the one column, so only the text can tell them apart.
    """
    if not document.title or is_generic_title(document.title):
        document.title = metadata.title or document.title
    declared = _if_known(session, document.declared_doc_type)
    # The first version's type stays the document's; one the source declared is only a floor.
    earlier = document.doc_type_id if document.doc_type_id != declared else None
    document.doc_type_id = decided_doc_type(declared, earlier or _if_known(session, metadata.doc_type))
    document.identifiers = _merged(metadata.identifiers, metadata.reference_numbers)
    version.doc_date = version.doc_date or metadata.doc_date
    version.language = metadata.language or version.language
    if document.matter_id is None and metadata.matter:
        project = session.get(Project, document.project_id)
        matter = get_or_create_matter(session, project, metadata.matter)
        document.matter_id = matter.id if matter else None


def declare_doc_type(session: Session, document: Document, declared: str) -> None:
    """The source says what the document is: that type from now on, or the narrower one its text showed."""
    document.declared_doc_type = declared
    if _known_node(session, declared):
        document.doc_type_id = decided_doc_type(declared, document.doc_type_id)


def _if_known(session: Session, node_id: str | None) -> str | None:
    return node_id if node_id and _known_node(session, node_id) else None


def _known_node(session: Session, node_id: str) -> bool:
    """Whether the store's ontology has the node. Nothing this stage writes can change that, so the
    lookup leaves what is pending unflushed (a batch's rows go out in one flush, not one per version)."""
    with session.no_autoflush:
        return session.get(OntologyNode, node_id) is not None


def _merged(*lists: list[str]) -> list[str]:
    seen: dict[str, None] = {}
    for values in lists:
        for value in values:
            if value and value.strip():
                seen.setdefault(value.strip(), None)
    return list(seen)


def own_identifiers(document: Document, text: str | None) -> set[str]:
    """Identifiers that name this document itself: in its title or its opening lines."""
    head = f"{document.title or ''}\n{(text or '')[:OWN_IDENTIFIER_WINDOW_CHARS]}".casefold()
    return {value for value in document.identifiers or [] if value.casefold() in head}


def link_references(session: Session, document: Document) -> int:
    """`references` edges between this document and those of its project whose own identifier the other cites.

    Limited to the project: its documents are the ones a matter's work cites, and
    the scan stays proportional to one project, not to the firm.
    """
    mine = set(document.identifiers or [])
    if not mine:
        return 0
    heads = _project_heads(session, document.project_id)
    own_mine = own_identifiers(document, heads.get(document.id))
    created = 0
    others = session.scalars(
        select(Document).where(Document.project_id == document.project_id, Document.id != document.id)
    )
    for other in others:
        theirs = set(other.identifiers or [])
        if not theirs:
            continue
        if own_identifiers(other, heads.get(other.id)) & mine:
            created += _ensure_reference(session, document.id, other.id)
        if own_mine & theirs:
            created += _ensure_reference(session, other.id, document.id)
    return created


def link_project_references(session: Session, project_id: str) -> int:
    """All `references` edges of a project in one pass: identifier -> the documents it names."""
    heads = _project_heads(session, project_id)
    documents = list(session.scalars(select(Document).where(Document.project_id == project_id)))
    owners: dict[str, set[str]] = {}
    for document in documents:
        for identifier in own_identifiers(document, heads.get(document.id)):
            owners.setdefault(identifier, set()).add(document.id)
    existing = set(
        session.execute(
            select(Relation.from_document_id, Relation.to_document_id)
            .join(Document, Document.id == Relation.from_document_id)
            .where(Relation.kind == RelationKind.REFERENCES, Relation.from_version_id.is_(None),
                   Document.project_id == project_id)
        ).all()
    )
    created = 0
    for document in documents:
        for identifier in document.identifiers or []:
            for owner in owners.get(identifier, ()):
                if owner != document.id and (document.id, owner) not in existing:
                    session.add(Relation(kind=RelationKind.REFERENCES, from_document_id=document.id,
                                         to_document_id=owner, origin="identifiers"))
                    existing.add((document.id, owner))
                    created += 1
    session.flush()
    return created


def _project_heads(session: Session, project_id: str) -> dict[str, str | None]:
    """The opening of each document's newest version, read as a prefix only."""
    rows = session.execute(
        select(DocumentVersion.document_id, func.substr(DocumentVersion.text, 1, OWN_IDENTIFIER_WINDOW_CHARS))
        .join(Document, Document.id == DocumentVersion.document_id)
        .where(Document.project_id == project_id)
        .order_by(DocumentVersion.seq)
    )
    return {document_id: head for document_id, head in rows}


def _ensure_reference(session: Session, from_id: str, to_id: str) -> int:
    exists = session.scalar(
        select(Relation.id).where(
            Relation.kind == RelationKind.REFERENCES,
            Relation.from_document_id == from_id,
            Relation.to_document_id == to_id,
            Relation.from_version_id.is_(None),
        )
    )
    if exists:
        return 0
    session.add(Relation(kind=RelationKind.REFERENCES, from_document_id=from_id, to_document_id=to_id, origin="identifiers"))
    session.flush()
    return 1
