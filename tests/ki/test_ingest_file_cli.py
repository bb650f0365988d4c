"""`ki ingest FILE`: one file, as part of the folder it was ingested with; the folder's other files stay as they are."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import func, select

from ki_core.config import load_settings
from ki_core.db import engine_from_settings, session_factory
from ki_core.models import Document, DocumentVersion, Source, SourceObject
from tests.ki.cli_store import BROKEN, PROJECT, document_keys_found, ingested, ki, store, summary_counts  # noqa: F401


def versions_per_document() -> dict[str, int]:
    engine = engine_from_settings(load_settings())
    try:
        with session_factory(engine)() as session:
            rows = session.execute(
                select(Document.key, func.count(DocumentVersion.id))
                .join(DocumentVersion, DocumentVersion.document_id == Document.id).group_by(Document.key)
            )
            return dict(rows.all())
    finally:
        engine.dispose()


def sources_and_objects() -> tuple[int, int]:
    engine = engine_from_settings(load_settings())
    try:
        with session_factory(engine)() as session:
            return (session.scalar(select(func.count()).select_from(Source)),
                    session.scalar(select(func.count()).select_from(SourceObject)))
    finally:
        engine.dispose()


def test_a_changed_file_becomes_a_new_version_and_the_other_files_stay_searchable(store: Path) -> None:  # noqa: F811
    ingested(store, "anna")
    before = versions_per_document()
    letter = store / "schreiben-mieterin.txt"
    letter.write_text(letter.read_text(encoding="utf-8") + "\nNachtrag: Wasserschaden im Keller.\n", encoding="utf-8")

    single = ki("ingest", str(letter), "--project", PROJECT)

    assert single.exit_code == 0, single.output
    assert f"schreiben-mieterin.txt: as part of folder {store.resolve()}" in single.output
    counts = summary_counts(single.output)
    assert (counts["files"], counts["new"]) == ("1", "1")
    assert counts["removed from folder"] == "(not checked: single file)"
    assert versions_per_document() == before | {"schreiben-heizung": before["schreiben-heizung"] + 1}
    assert "schreiben-heizung" in document_keys_found("Wasserschaden Keller", "anna")
    assert {"anlage-1", "mietvertrag"} <= document_keys_found("Grundriss Mietvertrag Haftung", "anna"), \
        "the folder's other files were not pruned"

    folder = ki("ingest", str(store), "--project", PROJECT, "--exclude", BROKEN)

    assert folder.exit_code == 0, folder.output
    counts = summary_counts(folder.output)
    assert (counts["files"], counts["unchanged"], counts["removed from folder"]) == ("5", "5", "0")
    assert "new" not in counts
    assert versions_per_document() == before | {"schreiben-heizung": before["schreiben-heizung"] + 1}


def test_a_file_in_a_subfolder_is_the_object_the_folder_ingest_made(store: Path) -> None:  # noqa: F811
    ingested(store)
    counts = sources_and_objects()

    again = ki("ingest", str(store / "vertrag" / "v2-final.txt"), "--project", PROJECT)

    assert again.exit_code == 0, again.output
    assert f"vertrag/v2-final.txt: as part of folder {store.resolve()}" in again.output
    assert summary_counts(again.output)["unchanged"] == "1"
    assert sources_and_objects() == counts, "no second source, no second object"


def test_a_file_of_a_folder_never_ingested_is_ingested_as_part_of_its_own_folder(store: Path) -> None:  # noqa: F811
    result = ki("ingest", str(store / "anlage-grundriss.txt"), "--project", PROJECT)

    assert result.exit_code == 0, result.output
    assert f"anlage-grundriss.txt: as part of folder {store.resolve()}" in result.output
    assert versions_per_document() == {"anlage-1": 1}, "the manifest of that folder keys it"


def test_the_manifest_itself_is_refused(store: Path) -> None:  # noqa: F811
    result = ki("ingest", str(store / "ki-manifest.json"), "--project", PROJECT)

    assert result.exit_code == 2
    assert "manifest" in result.output
