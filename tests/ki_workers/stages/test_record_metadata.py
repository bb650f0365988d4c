"""The metadata stage's write side: what of the extractor's answer lands on the document and its version."""

from __future__ import annotations

import io
from datetime import date
from pathlib import Path

from sqlalchemy.orm import Session

from ki_core.models import Document, DocumentVersion, SourceKind
from ki_workers.sources.local_fs import ManifestEntry
from ki_workers.stages.ingest import ingest_bytes
from ki_workers.stages.rows import get_or_create_project, get_or_create_source
from ki_workers.stages.metadata import RuleBasedExtractor
from ki_workers.stages.record_metadata import record_metadata

CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "firm-documents"
# A Klageschrift dated "Berlin, den 12. März 2024" that cites BAG and BGH decisions of 2003 to 2008.
BRIEF = (CORPUS / "01-klage-kuendigungsschutz.txt").read_text(encoding="utf-8")


def docx_of(text: str, *, language: str, title: str) -> bytes:
    import docx

    document = docx.Document()
    document.core_properties.language = language
    document.core_properties.title = title
    for paragraph in text.split("\n\n"):
        document.add_paragraph(paragraph)
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


def ingest_and_extract(session: Session, path: str, data: bytes, **entry: object) -> DocumentVersion:
    source = get_or_create_source(session, "ordner", SourceKind.LOCAL_FS)
    project = get_or_create_project(session, "lindqvist")
    result = ingest_bytes(
        session, source=source, project=project, external_id=path, data=data, entry=ManifestEntry(path=path, **entry)
    )
    record_metadata(session, result.version_id, RuleBasedExtractor(), link_now=False)
    return session.get(DocumentVersion, result.version_id)


def test_a_german_docx_from_an_english_template_is_german(db_session: Session) -> None:
    data = docx_of(BRIEF, language="en-US", title="Klage Brenner ./. Lindqvist")

    version = ingest_and_extract(db_session, "klage.docx", data)

    assert version.language == "de"


def test_a_brief_is_dated_by_its_own_date_line_not_by_the_decisions_it_cites(db_session: Session) -> None:
    version = ingest_and_extract(db_session, "klage.txt", BRIEF.encode())

    assert version.doc_date == date(2024, 3, 12)


def test_the_date_the_dms_supplies_wins_over_the_text(db_session: Session) -> None:
    version = ingest_and_extract(db_session, "klage.txt", BRIEF.encode(), doc_date=date(2024, 3, 13))

    assert version.doc_date == date(2024, 3, 13)


def test_a_generic_file_title_gives_way_to_the_title_the_text_gives(db_session: Session) -> None:
    version = ingest_and_extract(db_session, "klage.docx", docx_of(BRIEF, language="de-DE", title="Dokument1"))

    assert db_session.get(Document, version.document_id).title == "Klage wegen Kündigungsschutz"


def test_a_title_the_manifest_gives_stays(db_session: Session) -> None:
    version = ingest_and_extract(db_session, "klage.txt", BRIEF.encode(), title="Kündigungsschutzklage Brenner")

    assert db_session.get(Document, version.document_id).title == "Kündigungsschutzklage Brenner"


def test_extracting_a_version_again_keeps_one_artifact_per_kind_with_the_newest_answer(db_session: Session) -> None:
    from sqlalchemy import select

    from ki_core.models import MetadataArtifact

    version = ingest_and_extract(db_session, "klage.txt", BRIEF.encode())
    # Another extractor release of the same producer answered differently the first time.
    first = db_session.scalar(select(MetadataArtifact).where(MetadataArtifact.kind == "metadata"))
    first.payload = {**first.payload, "title": "veraltet"}
    db_session.flush()
    record_metadata(db_session, version.id, RuleBasedExtractor(), link_now=False)
    rows = db_session.execute(select(MetadataArtifact.kind, MetadataArtifact.payload)).all()
    assert sorted(kind for kind, _ in rows) == ["metadata", "notable_clauses"]
    assert dict(rows)["metadata"]["title"] != "veraltet"


def test_a_batch_applies_two_versions_of_one_document_in_the_order_given(db_session: Session) -> None:
    from ki_workers.stages.record_metadata import record_metadata_many

    source = get_or_create_source(db_session, "ordner", SourceKind.LOCAL_FS)
    project = get_or_create_project(db_session, "lindqvist")
    texts = ("Vermerk zum Verfahren 4 C 6/05 vor dem Amtsgericht.", "Vermerk, neue Fassung: nun gilt § 573 BGB.")
    version_ids = [
        ingest_bytes(db_session, source=source, project=project, external_id=f"vermerk-{n}.txt", data=text.encode(),
                     entry=ManifestEntry(path=f"vermerk-{n}.txt", document="vermerk")).version_id
        for n, text in enumerate(texts)
    ]
    for order in (version_ids, version_ids[::-1]):
        assert record_metadata_many(db_session, order, RuleBasedExtractor()) == 2
        document = db_session.get(Document, db_session.get(DocumentVersion, order[-1]).document_id)
        last = RuleBasedExtractor().extract(texts[version_ids.index(order[-1])])
        assert document.identifiers == last.identifiers, "the version given last decides the document's identifiers"
