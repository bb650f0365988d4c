"""Ingest: versions by content hash, observations, the version chain and latest final version."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from ki_core.models import (
    Document,
    DocumentVersion,
    ObservationState,
    ProcessingState,
    Relation,
    RelationKind,
    SourceKind,
    SourceObservation,
    VersionStatus,
)
from ki_workers.sources.local_fs import ManifestEntry
from ki_workers.stages.ingest import Outcome, ingest_bytes
from ki_workers.stages.rows import get_or_create_project, get_or_create_source

CONTRACT = "Rahmenliefervertrag\n§ 1 Vertragsgegenstand\nDie Lieferantin liefert Beton.".encode()


def _ingest(session: Session, path: str, data: bytes, **entry: object):
    source = get_or_create_source(session, "ordner", SourceKind.LOCAL_FS)
    project = get_or_create_project(session, "nordbau")
    return ingest_bytes(
        session, source=source, project=project, external_id=path, data=data,
        entry=ManifestEntry(path=path, **entry),
    )


def test_a_new_file_becomes_a_converted_version_with_an_active_observation(db_session: Session) -> None:
    result = _ingest(db_session, "vertrag.txt", CONTRACT)
    assert result.outcome is Outcome.NEW
    version = db_session.get(DocumentVersion, result.version_id)
    assert version.processing_state is ProcessingState.CONVERTED
    assert version.text.startswith("Rahmenliefervertrag")
    observation = db_session.scalar(select(SourceObservation).where(SourceObservation.version_id == version.id))
    assert observation.state is ObservationState.ACTIVE


def test_the_same_bytes_again_are_unchanged_and_create_no_rows(db_session: Session) -> None:
    first = _ingest(db_session, "vertrag.txt", CONTRACT)
    second = _ingest(db_session, "vertrag.txt", CONTRACT)
    assert second.outcome is Outcome.UNCHANGED
    assert second.version_id == first.version_id
    assert db_session.scalar(select(DocumentVersion.id).where(DocumentVersion.id != first.version_id)) is None


def test_changed_content_at_the_same_path_is_a_new_version_that_supersedes_the_old(db_session: Session) -> None:
    first = _ingest(db_session, "vertrag.txt", CONTRACT)
    second = _ingest(db_session, "vertrag.txt", CONTRACT + b"\n\xc2\xa7 2 Laufzeit")
    assert second.outcome is Outcome.NEW and second.document_id == first.document_id
    new = db_session.get(DocumentVersion, second.version_id)
    assert new.seq == 2 and new.previous_version_id == first.version_id
    old_observation = db_session.scalar(
        select(SourceObservation).where(SourceObservation.version_id == first.version_id)
    )
    assert old_observation.state is ObservationState.DELETED
    relation = db_session.scalar(select(Relation).where(Relation.kind == RelationKind.SUPERSEDES))
    assert (relation.from_version_id, relation.to_version_id) == (second.version_id, first.version_id)


def test_a_chain_draft_final_executed_tracks_the_latest_final_version(db_session: Session) -> None:
    draft = _ingest(db_session, "v1.txt", CONTRACT + b" Entwurf", document="rv", status=VersionStatus.DRAFT)
    document = db_session.get(Document, draft.document_id)
    assert document.latest_final_version_id is None
    final = _ingest(db_session, "v2.txt", CONTRACT + b" Final", document="rv", status=VersionStatus.FINAL)
    assert document.latest_final_version_id == final.version_id
    executed = _ingest(db_session, "v3.txt", CONTRACT + b" unterzeichnet", document="rv", status=VersionStatus.EXECUTED)
    assert document.latest_final_version_id == executed.version_id
    assert [v.seq for v in db_session.scalars(
        select(DocumentVersion).where(DocumentVersion.document_id == document.id).order_by(DocumentVersion.seq)
    )] == [1, 2, 3]
    # Separate files stay observed: every version of the chain remains citable.
    active = db_session.scalars(
        select(SourceObservation).where(SourceObservation.state == ObservationState.ACTIVE)
    ).all()
    assert len(active) == 3


def test_an_unconvertible_file_is_recorded_as_failed_with_its_reason(db_session: Session) -> None:
    result = _ingest(db_session, "kaputt.pdf", b"%PDF-1.4 this is not really a pdf")
    assert result.outcome is Outcome.FAILED
    version = db_session.get(DocumentVersion, result.version_id)
    assert version.processing_state is ProcessingState.FAILED
    assert version.last_error.startswith("conversion failed:")
    # The same broken bytes again report the failure without a new row.
    again = _ingest(db_session, "kaputt.pdf", b"%PDF-1.4 this is not really a pdf")
    assert again.outcome is Outcome.FAILED and again.version_id == result.version_id


def test_manifest_fields_land_on_document_and_version(db_session: Session) -> None:
    result = _ingest(
        db_session, "a.txt", CONTRACT, document="rv", version="v2", status=VersionStatus.FINAL,
        matter="Nordbau ./. Stadtwerke", title="Rahmenliefervertrag", doc_date="2023-05-02",
    )
    version = db_session.get(DocumentVersion, result.version_id)
    document = db_session.get(Document, result.document_id)
    assert (version.version_label, version.status, str(version.doc_date)) == ("v2", VersionStatus.FINAL, "2023-05-02")
    assert document.title == "Rahmenliefervertrag" and document.matter_id is not None
