"""`ki delete document|project`: out of search at once, the versions kept in SQL, who and when recorded."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import func, select

from ki_core.models import (
    Chunk,
    Document,
    DocumentVersion,
    ObservationState,
    SourceObject,
    SourceObservation,
    SourceWatermark,
)
from ki_core.search.index import open_index
from ki_core.search.types import ScopeFilter
from ki_workers.context import worker_context
from ki_workers.stages.convert import MEDIA_TEXT
from tests.ki.cli_store import PROJECT, database, document_keys_found, ingested, ki, store, table_rows  # noqa: F401
from tests.ki_workers.stages.test_convert import make_mail

LETTER = "schreiben-heizung"
EVERYTHING = "Heizungsausfall Mietvertrag Grundriss Haftung Kontorwerk"


def document_id(key: str) -> str:
    with worker_context().sessions() as session:
        return session.scalar(select(Document.id).where(Document.key == key))


def sql_rows_of(key: str) -> tuple[int, int]:
    """(versions, chunks) SQL holds for the document."""
    with worker_context().sessions() as session:
        found = document_id(key)
        return (session.scalar(select(func.count()).where(DocumentVersion.document_id == found)),
                session.scalar(select(func.count()).where(Chunk.document_id == found)))


def chunks_in_index(key: str) -> int:
    reader = open_index(worker_context().settings, read_only=True)
    try:
        reader.refresh()
        return reader.count(ScopeFilter(document_ids=frozenset([document_id(key)])))
    finally:
        reader.close()


def deletion_record(key: str) -> list[tuple[str, bool, str | None]]:
    """(observation state, whether its end is dated, the event recorded at its object) per observation."""
    with worker_context().sessions() as session:
        return list(session.execute(
            select(SourceObservation.state, SourceObservation.deleted_at.is_not(None), SourceWatermark.event_id)
            .join(DocumentVersion, DocumentVersion.id == SourceObservation.version_id)
            .join(SourceObject, SourceObject.id == SourceObservation.source_object_id)
            .outerjoin(SourceWatermark, SourceWatermark.subject == "content:" + SourceObject.external_id)
            .where(DocumentVersion.document_id == document_id(key))
        ).all())


def test_a_deleted_document_leaves_search_at_once_and_its_versions_stay_in_sql(
    database: str, store: Path,  # noqa: F811
) -> None:
    ingested(store, "anna")
    assert LETTER in document_keys_found(EVERYTHING, "anna")
    kept = sql_rows_of(LETTER)

    deleted = ki("delete", "document", LETTER, "--project", PROJECT, "--by", "tom.krause", input="y\n")

    assert deleted.exit_code == 0, deleted.output
    assert "schreiben-mieterin.txt" in deleted.output, "the confirmation names the source object"
    assert f"removed {PROJECT}/{LETTER} from search" in deleted.output
    assert LETTER not in document_keys_found(EVERYTHING, "anna")
    assert document_keys_found(EVERYTHING, "anna") == {"mietvertrag", "anlage-1"}, "the others stay"
    assert chunks_in_index(LETTER) == 0, "its rows left the index, not only the verified results"
    assert sql_rows_of(LETTER) == kept
    assert deletion_record(LETTER) == [(ObservationState.DELETED, True, "ki delete by tom.krause")]

    again = ki("delete", "document", LETTER, "--project", PROJECT, "--yes")
    assert again.exit_code == 0, again.output
    assert f"{PROJECT}/{LETTER} is already deleted: removed from search" in again.output
    assert "(ki delete by tom.krause)" in again.output


def test_declining_the_confirmation_removes_nothing(store: Path) -> None:  # noqa: F811
    ingested(store, "anna")

    declined = ki("delete", "document", LETTER, "--project", PROJECT, input="n\n")

    assert declined.exit_code == 1
    assert LETTER in document_keys_found(EVERYTHING, "anna")


def test_a_deleted_project_leaves_search_and_is_listed_with_its_documents_removed(
    database: str, store: Path,  # noqa: F811
) -> None:
    ingested(store, "anna")

    deleted = ki("delete", "project", PROJECT, "--yes", "--by", "tom.krause")

    assert deleted.exit_code == 0, deleted.output
    assert "3 document(s)" in deleted.output and "still in the folder" in deleted.output
    assert document_keys_found(EVERYTHING, "anna") == set()
    assert sql_rows_of("mietvertrag")[0] == 3, "the contract's three versions are kept"
    listed = ki("projects")
    assert ["mietsache", "", "1"] == listed_row(listed.output, "mietsache")[:3]
    assert listed_row(listed.output, "mietsache")[-2:] == ["0", "3"]
    assert "already deleted" in ki("delete", "project", PROJECT, "--yes").output


def listed_row(output: str, first: str) -> list[str]:
    return next(row for row in table_rows(output) if row[0] == first)


@pytest.fixture
def mail_folder(store: Path) -> Path:  # noqa: F811
    (store / "post").mkdir()
    mail = make_mail(("protokoll.txt", "Protokoll der Begehung: Heizkessel defekt.".encode(), MEDIA_TEXT))
    (store / "post" / "anfrage.eml").write_bytes(mail)
    return store


def test_an_attachment_is_deleted_with_its_mail_not_alone(mail_folder: Path) -> None:
    ingested(mail_folder, "anna")
    attachment = "post/anfrage#attachment/1-protokoll.txt"
    assert attachment in document_keys_found("Protokoll Begehung Heizkessel", "anna")

    alone = ki("delete", "document", attachment, "--project", PROJECT, "--yes")
    assert alone.exit_code == 1
    assert "post/anfrage" in alone.output and "delete the mail" in alone.output

    with_mail = ki("delete", "document", "post/anfrage", "--project", PROJECT, "--yes")
    assert with_mail.exit_code == 0, with_mail.output
    assert "2 document(s)" in with_mail.output
    assert document_keys_found("Protokoll Begehung Heizkessel Unterlagen", "anna") & {attachment, "post/anfrage"} == set()


def test_an_unknown_document_is_named() -> None:
    assert ki("init").exit_code == 0
    result = ki("delete", "document", "nope", "--project", PROJECT, "--yes")

    assert result.exit_code == 1 and "no project named 'mietsache'" in result.output
