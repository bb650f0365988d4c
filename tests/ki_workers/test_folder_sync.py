"""A folder sync a user can watch: done files are searchable while a big one runs, a size guard and
excludes, progress within a long file, and Ctrl-C that keeps what is done and resumes on the next run."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select

from ki_core.models import Chunk, Document, DocumentVersion, ProcessingState
from ki_core.search.index import open_index
from ki_workers.folder_sync import FileSelection, sync_folder

SMALL = {
    "a-mahnung.txt": "Mahnung wegen offener Miete für März, Frist bis zum 15. April.",
    "b-vermerk.txt": "Vermerk zur Besprechung mit der Mandantin über die Räumungsklage.",
    "c-vollmacht.txt": "Vollmacht für das Verfahren vor dem Amtsgericht Charlottenburg.",
}
KEYS = {name.removesuffix(".txt") for name in SMALL}  # a file without a manifest entry is keyed by its stem
# Sorted after the small files, so they are done before it starts.
BIG = "z-protokoll.txt"


def big_text(megabytes: float) -> str:
    line = "Zeuge Meier erklärt zur Sache, dass die Heizung im Winter mehrfach ausfiel und der Vermieter schwieg. "
    return line * int(megabytes * 1024 * 1024 / len(line.encode()))


@pytest.fixture
def matter_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "akte"
    folder.mkdir()
    for name, text in SMALL.items():
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def index_document_ids(ctx) -> set[str]:
    """Documents a separate, read-only reader of the index holds chunks of: what a concurrent search sees."""
    with ctx.sessions() as session:
        chunk_ids = list(session.scalars(select(Chunk.id)))
    reader = open_index(ctx.settings, read_only=True)
    try:
        reader.refresh()
        return {fields["document_id"] for fields in reader.stored_fields_of(chunk_ids).values()}
    finally:
        reader.close()


def keys_of_indexed(ctx) -> set[str]:
    with ctx.sessions() as session:
        rows = session.execute(
            select(Document.key).join(DocumentVersion, DocumentVersion.document_id == Document.id)
            .where(DocumentVersion.processing_state == ProcessingState.INDEXED)
        )
        return set(rows.scalars())


def test_files_done_are_searchable_while_a_20_mb_file_is_still_being_embedded(ctx, matter_folder: Path) -> None:
    (matter_folder / BIG).write_text(big_text(20), encoding="utf-8")
    seen_during_big: list[tuple[set[str], set[str]]] = []
    progress: list[tuple[str, int, int]] = []

    def on_chunks(relative: str, done: int, total: int) -> None:
        progress.append((relative, done, total))
        if not seen_during_big:
            seen_during_big.append((keys_of_indexed(ctx), index_document_ids(ctx)))

    summary = sync_folder(ctx, matter_folder, "mietsache", on_chunks=on_chunks)

    assert summary.outcomes == {"new": 4}
    indexed_then, in_index_then = seen_during_big[0]
    assert indexed_then == KEYS, "the small files were indexed before the big one was embedded"
    assert len(in_index_then) == len(SMALL), "and a separate reader found them in the index"
    totals = {total for name, _, total in progress if name == BIG}
    assert len(totals) == 1 and totals.pop() > 10_000, "a 20 MB file is some 20,000 chunks"
    steps = [done for name, done, _ in progress if name == BIG]
    assert steps == sorted(steps) and len(steps) > 100, "progress is reported within the file, step by step"


def test_a_file_above_the_size_limit_is_skipped_and_listed(ctx, matter_folder: Path) -> None:
    (matter_folder / BIG).write_text(big_text(1.5), encoding="utf-8")
    selection = FileSelection.from_settings(ctx.settings, max_file_mb=1)
    reported: dict[str, dict | None] = {}

    summary = sync_folder(ctx, matter_folder, "mietsache", on_file=reported.__setitem__, selection=selection)

    assert summary.outcomes == {"new": 3, "skipped": 1}
    assert [name for name, _ in summary.skipped] == [BIG]
    assert "above the limit of 1 MB" in summary.skipped[0][1]
    assert reported[BIG]["outcome"] == "skipped"
    assert keys_of_indexed(ctx) == KEYS


def test_excluded_files_are_not_read_and_not_pruned(ctx, matter_folder: Path) -> None:
    sync_folder(ctx, matter_folder, "mietsache")
    (matter_folder / "b-vermerk.txt").write_text("Vermerk, neue Fassung: die Klage ist eingereicht.", encoding="utf-8")
    (matter_folder / "scan.log").write_text("debug output", encoding="utf-8")

    selection = FileSelection.from_settings(ctx.settings, exclude=["*.log", "b-*"])
    summary = sync_folder(ctx, matter_folder, "mietsache", selection=selection)

    assert summary.excluded == 2 and summary.files == 2 and summary.pruned == 0
    assert summary.outcomes == {"unchanged": 2}
    assert keys_of_indexed(ctx) == KEYS, "the excluded Vermerk keeps its indexed version; the log is never read"


def test_ctrl_c_in_a_long_file_keeps_what_is_done_and_the_next_run_finishes_it(ctx, matter_folder: Path) -> None:
    (matter_folder / BIG).write_text(big_text(0.5), encoding="utf-8")

    def interrupt(relative: str, done: int, total: int) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        sync_folder(ctx, matter_folder, "mietsache", on_chunks=interrupt)
    assert keys_of_indexed(ctx) == KEYS, "done files stay indexed; the interrupted one is not half in"
    assert len(index_document_ids(ctx)) == len(SMALL)

    again = sync_folder(ctx, matter_folder, "mietsache")
    assert again.outcomes == {"unchanged": 4}
    assert keys_of_indexed(ctx) == {*KEYS, "z-protokoll"}, "the second run resumed the interrupted file's later stages"
    assert len(index_document_ids(ctx)) == len(SMALL) + 1


def test_a_long_file_embedded_with_a_later_batch_reports_its_progress_under_its_own_name(ctx, matter_folder: Path) -> None:
    # Sorted first, below the large-file size: it waits for its metadata with the small files that follow it.
    (matter_folder / "0-protokoll.txt").write_text(big_text(0.3), encoding="utf-8")
    progress: list[str] = []

    sync_folder(ctx, matter_folder, "mietsache", on_chunks=lambda relative, done, total: progress.append(relative))

    assert progress and set(progress) == {"0-protokoll.txt"}, "not the name of the file ingested last"
    assert keys_of_indexed(ctx) == {*KEYS, "0-protokoll"}


def test_a_folder_of_small_files_is_ingested_and_extracted_in_batches_not_file_by_file(ctx, tmp_path: Path) -> None:
    from sqlalchemy import event

    folder = tmp_path / "vermerke"
    folder.mkdir()
    for n in range(12):
        (folder / f"vermerk-{n:02d}.txt").write_text(f"Vermerk {n} zur Besprechung mit der Mandantin.", encoding="utf-8")
    inserts: list[str] = []
    commits: list[object] = []

    def committed(connection) -> None:
        commits.append(connection)

    def count(_conn, _cursor, statement, *_args) -> None:
        if statement.lstrip().upper().startswith("INSERT INTO METADATA_ARTIFACTS"):
            inserts.append(statement)

    event.listen(ctx.engine, "before_cursor_execute", count)
    event.listen(ctx.engine, "commit", committed)
    try:
        summary = sync_folder(ctx, folder, "vermerke")
    finally:
        event.remove(ctx.engine, "before_cursor_execute", count)
        event.remove(ctx.engine, "commit", committed)

    assert summary.outcomes == {"new": 12}
    assert len(commits) < 12, f"{len(commits)} transactions for 12 files: ingest and metadata a batch at a time"
    # The first lookup of the document type flushes what is pending before it; the rest goes at the end.
    assert len(inserts) <= 2, "the artifacts of twelve files in one or two batched INSERTs, not one per file"
    assert len(keys_of_indexed(ctx)) == 12


def test_a_batch_of_new_files_is_written_in_multi_row_inserts_and_two_versions_of_one_document_chain(
    ctx, tmp_path: Path
) -> None:
    import json

    from sqlalchemy import event

    from ki_core.grants import current_access_generation
    from ki_core.models import Relation, RelationKind, SourceObservation

    folder = tmp_path / "vermerke"
    folder.mkdir()
    for n in range(10):
        (folder / f"vermerk-{n:02d}.txt").write_text(f"Vermerk {n} zur Besprechung mit der Mandantin.", encoding="utf-8")
    # Two files of one document, draft then final, in the same batch as the others.
    (folder / "vertrag-entwurf.txt").write_text("Mietvertrag Entwurf über die Gewerberäume.", encoding="utf-8")
    (folder / "vertrag-final.txt").write_text("Mietvertrag über die Gewerberäume, unterschrieben.", encoding="utf-8")
    (folder / "ki-manifest.json").write_text(json.dumps({"files": [
        {"path": "vertrag-entwurf.txt", "document": "mietvertrag", "status": "draft"},
        {"path": "vertrag-final.txt", "document": "mietvertrag", "status": "final"},
    ]}), encoding="utf-8")
    statements: list[str] = []

    def record(_conn, _cursor, statement, *_args) -> None:
        statements.append(" ".join(statement.split()[:3]).upper())

    with ctx.sessions() as session:
        before = current_access_generation(session)
    event.listen(ctx.engine, "before_cursor_execute", record)
    try:
        summary = sync_folder(ctx, folder, "vermerke")
    finally:
        event.remove(ctx.engine, "before_cursor_execute", record)

    assert summary.outcomes == {"new": 12}
    # The final version's file reads its document's versions (the draft's), which flushes the eleven
    # files before it: two multi-row INSERTs per table for twelve files, not twelve.
    for table in ("SOURCE_OBJECTS", "DOCUMENTS", "DOCUMENT_VERSIONS", "SOURCE_OBSERVATIONS"):
        assert statements.count(f"INSERT INTO {table}") <= 2, f"multi-row INSERTs into {table} for the batch"
    with ctx.sessions() as session:
        document = session.scalar(select(Document).where(Document.key == "mietvertrag"))
        versions = session.scalars(
            select(DocumentVersion).where(DocumentVersion.document_id == document.id).order_by(DocumentVersion.seq)
        ).all()
        assert [v.seq for v in versions] == [1, 2]
        assert versions[1].previous_version_id == versions[0].id
        assert document.latest_final_version_id == versions[1].id
        edge = session.scalar(select(Relation).where(Relation.kind == RelationKind.SUPERSEDES))
        assert (edge.from_version_id, edge.to_version_id) == (versions[1].id, versions[0].id)
        assert len(session.scalars(select(SourceObservation)).all()) == 12
        # The batch's access changes became a new generation (once for the batch, not per file).
        assert current_access_generation(session) > before
    assert statements.count("UPDATE ACCESS_GENERATION SET") < 12
    assert len(keys_of_indexed(ctx)) == 11


def test_a_file_that_vanishes_while_its_batch_waits_fails_alone_and_the_others_are_ingested(ctx, tmp_path: Path) -> None:
    folder = tmp_path / "vermerke"
    folder.mkdir()
    for n in range(20):
        (folder / f"vermerk-{n:02d}.txt").write_text(f"Vermerk {n} zur Besprechung mit der Mandantin.", encoding="utf-8")

    def delete_a_later_file(relative: str, _result: dict | None) -> None:
        if relative == "vermerk-00.txt":  # reported with the first batch; the second is read after
            (folder / "vermerk-18.txt").unlink()

    summary = sync_folder(ctx, folder, "vermerke", on_file=delete_a_later_file)

    assert summary.outcomes == {"new": 19, "failed": 1}
    assert [name for name, _ in summary.errors] == ["vermerk-18.txt"]
    assert "No such file" in summary.errors[0][1]
    assert len(keys_of_indexed(ctx)) == 19


def test_a_long_sync_sets_the_start_up_heap_aside_from_collection_and_hands_it_back(ctx, tmp_path: Path) -> None:
    import gc

    from ki_workers.folder_sync import LONG_SYNC_FILES

    folder = tmp_path / "vermerke"
    folder.mkdir()
    for n in range(LONG_SYNC_FILES):
        (folder / f"vermerk-{n:02d}.txt").write_text(f"Vermerk {n} zur Besprechung mit der Mandantin.", encoding="utf-8")
    frozen_during: list[int] = []

    summary = sync_folder(ctx, folder, "vermerke", on_file=lambda *_: frozen_during.append(gc.get_freeze_count()))

    assert summary.outcomes == {"new": LONG_SYNC_FILES}
    assert min(frozen_during) > 10_000, "the objects alive at the start are exempt while the sync runs"
    assert gc.get_freeze_count() == 0, "and none stays exempt after it"


def test_many_small_files_embedded_together_report_their_progress_too(ctx, tmp_path: Path) -> None:
    """`make demo` piped sat silent for minutes: small files' chunks wait and are embedded in one go at the end."""
    folder = tmp_path / "viele"
    folder.mkdir()
    paragraph = "Der Mieter zeigt an, dass die Heizung ausgefallen ist, und kündigt eine Minderung der Miete an. "
    for number in range(12):
        (folder / f"brief-{number:02d}.txt").write_text(paragraph * 60, encoding="utf-8")
    progress: list[tuple[str, int, int]] = []

    summary = sync_folder(ctx, folder, "mietsache", on_chunks=lambda relative, done, total: progress.append(
        (relative, done, total)))

    assert summary.outcomes == {"new": 12}
    assert progress, "the waiting chunks' embedding is reported"
    assert progress[-1][1] == progress[-1][2] and progress[-1][0].startswith("brief-")


def test_files_of_a_type_ki_does_not_read_are_skipped_not_failed(ctx, matter_folder: Path) -> None:
    (matter_folder / "tabelle.xyz").write_bytes(b"\x00\x01")
    (matter_folder / "LIESMICH").write_text("ohne Endung", encoding="utf-8")

    summary = sync_folder(ctx, matter_folder, "mietsache")

    assert summary.errors == []
    assert sorted(summary.unsupported) == ["LIESMICH", "tabelle.xyz"]
    assert summary.outcomes == {"new": 3, "unsupported": 2}
