"""Page offsets for PDF versions converted before ingest recorded them (migration 0015).

Nothing is re-indexed and no text changes: a version's file is read again from
the folder it was ingested from, only while its bytes still hash to the
version's content_hash, converted again, and its page starts are recorded only
when the new conversion gives exactly the stored text (else the offsets would
point into another text). A DMS-only version, a changed or missing file, or a
converter that now reads the file differently keeps NULL and is counted.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from ki_core.models import DocumentVersion, ObservationState, ProcessingState, Source, SourceKind, SourceObject, SourceObservation
from ki_workers.stages.convert import MEDIA_PDF, ConversionError, convert


@dataclass
class PageBackfill:
    recorded: int = 0
    # "version id: why" for every PDF version left without offsets.
    skipped: list[str] = field(default_factory=list)


def record_page_starts(session: Session) -> PageBackfill:
    """Page starts of every PDF version that has text and none recorded; the caller commits."""
    outcome = PageBackfill()
    versions = session.scalars(select(DocumentVersion).where(
        DocumentVersion.media_type == MEDIA_PDF, DocumentVersion.page_starts.is_(None),
        DocumentVersion.processing_state != ProcessingState.FAILED, DocumentVersion.text.is_not(None),
    ))
    for version in versions:
        problem = _record(session, version)
        if problem is None:
            outcome.recorded += 1
        else:
            outcome.skipped.append(f"{version.id}: {problem}")
    return outcome


def _record(session: Session, version: DocumentVersion) -> str | None:
    """None when recorded; else why not."""
    for path in _folder_files(session, version.id):
        try:
            data = path.read_bytes()
        except OSError as exc:
            return f"{path} cannot be read ({exc.strerror or type(exc).__name__})"
        if hashlib.sha256(data).hexdigest() != version.content_hash:
            return f"{path} has changed since it was ingested"
        try:
            converted = convert(data, filename=path.name, media_type=MEDIA_PDF)
        except ConversionError as exc:
            return f"{path}: {exc.reason}"
        if converted.text != version.text:
            return f"{path} converts to another text now; re-ingest it as a new version to page it"
        version.page_starts = list(converted.page_starts)
        return None
    return "no active observation in a local folder (a DMS keeps the file)"


def _folder_files(session: Session, version_id: str) -> list[Path]:
    rows = session.execute(
        select(Source.config, SourceObject.external_id)
        .join(SourceObject, SourceObject.source_id == Source.id)
        .join(SourceObservation, SourceObservation.source_object_id == SourceObject.id)
        .where(SourceObservation.version_id == version_id, SourceObservation.state == ObservationState.ACTIVE,
               Source.kind == SourceKind.LOCAL_FS)
    )
    return [Path(config["root"]) / external_id for config, external_id in rows if (config or {}).get("root")]
