"""`ki status` names a failed version by the file it came from, with its reason, its time and its whole id."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from sqlalchemy import select

from ki_core.config import load_settings
from ki_core.db import engine_from_settings
from ki_core.models import DocumentVersion, ProcessingState
from tests.ki.cli_store import BROKEN, PROJECT, database, ki, store, table_rows
from tests.ki.test_ingest_cli import FOLDER

__all__ = ["database", "store"]


def failed_version_ids() -> list[str]:
    engine = engine_from_settings(load_settings())
    try:
        with engine.connect() as connection:
            return list(connection.scalars(
                select(DocumentVersion.id).where(DocumentVersion.processing_state == ProcessingState.FAILED)
            ))
    finally:
        engine.dispose()


def ingest_with_a_broken_pdf(folder: Path) -> str:
    """The id of the one failed version: the fixture folder's broken PDF."""
    shutil.copyfile(FOLDER / BROKEN, folder / BROKEN)
    assert ki("ingest", str(folder), "--project", PROJECT).exit_code == 1
    [version_id] = failed_version_ids()
    return version_id


def test_failed_lists_each_failed_version_by_file_and_document_with_reason_time_and_whole_id(
    database: str, store: Path
) -> None:
    version_id = ingest_with_a_broken_pdf(store)

    result = ki("status", "--failed")

    assert result.exit_code == 0, result.output
    assert "1 failed version(s), newest first" in result.output
    header, first, *wrapped = table_rows(result.output)
    assert header == ["file", "document", "version", "reason", "failed at (UTC)"]
    assert first[:3] == ["kaputt.pdf", f"{PROJECT}/kaputt", version_id]
    assert first[3].startswith("conversion failed: unreadable PDF: PdfStreamError")
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", first[4])
    assert "(pypdf: EOF marker not found)" in " ".join(result.output.split()), "the library's words, in the reason"
    assert f"local:{store}" in "".join(row[0] for row in wrapped), "the folder the file was found in"


def test_status_shows_the_latest_errors_the_same_way_and_points_to_failed(store: Path) -> None:
    version_id = ingest_with_a_broken_pdf(store)

    shown = ki("status")
    none_shown = ki("status", "--errors", "0")

    assert shown.exit_code == 0, shown.output
    assert "latest errors" in shown.output and version_id in shown.output and "kaputt.pdf" in shown.output
    assert "1 version(s) failed in all: `ki status --failed` lists every one" in none_shown.output
    assert version_id not in none_shown.output


def test_failed_says_so_when_nothing_failed(store: Path) -> None:
    result = ki("status", "--failed")

    assert result.exit_code == 0, result.output
    assert result.output.strip() == "no failed versions"
