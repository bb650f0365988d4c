"""The metadata rules run ahead in a helper process: the same answers, taken only when they fit,
and nothing lost when the helper is late, wrong about the title, or gone."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import select

from ki_core.models import Document, DocumentVersion, MetadataArtifact, ProcessingState
from ki_workers.folder_sync import LONG_SYNC_FILES, ingest_local_objects, register_folder, sync_folder
from ki_workers.stages.metadata import RuleBasedExtractor
from ki_workers.stages.record_metadata import (
    EXTRACTION_MAX_WAIT_SECONDS,
    EXTRACTIONS_PER_BATCH,
    ExtractionBatch,
    defer_extraction,
    flush_all_extractions,
    flush_extractions_if_waiting,
    record_metadata_many,
)
from ki_workers.stages.rules_ahead import RulesAhead, RulesHelper, start_helper

FIRM_DOCUMENTS = Path(__file__).resolve().parents[2] / "fixtures" / "firm-documents"


def firm_folder(tmp_path: Path, copies: int = 1) -> Path:
    """The firm documents (briefs, letters, contracts, decisions), `copies` times each, one file each."""
    folder = tmp_path / "akten"
    folder.mkdir()
    for copy in range(copies):
        for source in sorted(FIRM_DOCUMENTS.glob("*.txt")):
            text = source.read_text(encoding="utf-8")
            (folder / f"{copy}-{source.name}").write_text(text if copy == 0 else f"{text}\n\nAbschrift {copy}.",
                                                           encoding="utf-8")
    return folder


def ready_helper(database_url: str) -> RulesHelper:
    """A helper past its start-up (its imports take about a second), so what it answers shows."""
    helper = start_helper(database_url)
    assert helper is not None
    helper.ask("no-such-version")
    deadline = time.monotonic() + 60
    while "no-such-version" not in helper.arrived:
        assert time.monotonic() < deadline, "the helper never answered"
        helper.collect()
        time.sleep(0.01)
    assert helper.arrived.pop("no-such-version") is None
    return helper


def ingested(ctx, folder: Path) -> list[str]:
    source_id, project_id = register_folder(ctx, folder, "akten")
    files = [(path.name, {"path": path.name}) for path in sorted(folder.iterdir())]
    results = ingest_local_objects(ctx, source_id, project_id, files, None)
    return [result.version_id for result in results]


def recorded(ctx, version_ids: list[str], ahead: RulesAhead | None) -> dict[str, tuple]:
    """What record_metadata_many writes for the versions, read back and rolled back."""
    with ctx.sessions() as session:
        session.begin()
        record_metadata_many(session, version_ids, RuleBasedExtractor(), ahead)
        rows = session.execute(
            select(DocumentVersion.id, DocumentVersion.language, DocumentVersion.doc_date, Document.title,
                   Document.doc_type_id, Document.identifiers, MetadataArtifact.payload)
            .join(Document, Document.id == DocumentVersion.document_id)
            .join(MetadataArtifact, (MetadataArtifact.version_id == DocumentVersion.id) & (MetadataArtifact.kind == "metadata"))
            .where(DocumentVersion.id.in_(version_ids))
        ).all()
        session.rollback()
    return {row[0]: tuple(row[1:]) for row in rows}


def answered_ahead(helper: RulesHelper, version_ids: list[str]) -> RulesAhead:
    """The versions asked of the helper, once it has answered every one."""
    ahead = RulesAhead(lambda: helper, RuleBasedExtractor().producer)
    for version_id in version_ids:
        ahead.start(version_id)
    deadline = time.monotonic() + 60
    while not set(version_ids) <= set(helper.arrived):
        assert time.monotonic() < deadline, "the helper did not answer every version"
        helper.collect()
        time.sleep(0.01)
    return ahead


def test_the_helper_records_exactly_what_the_rules_record_in_the_sync_process(ctx, tmp_path: Path) -> None:
    version_ids = ingested(ctx, firm_folder(tmp_path))
    without = recorded(ctx, version_ids, None)
    helper = ready_helper(ctx.settings.database_url)
    try:
        with_helper = recorded(ctx, version_ids, answered_ahead(helper, version_ids))
    finally:
        helper.close()

    assert len(without) == len(version_ids) == len(list(FIRM_DOCUMENTS.glob("*.txt")))
    assert helper.taken == len(version_ids), "every answer came from the helper"
    assert with_helper == without


def test_an_answer_read_under_another_title_is_computed_again_with_the_title_the_document_has(ctx, tmp_path: Path) -> None:
    version_ids = ingested(ctx, firm_folder(tmp_path))[:3]
    helper = ready_helper(ctx.settings.database_url)
    try:
        ahead = answered_ahead(helper, version_ids)
        with ctx.sessions() as session:
            texts = dict(session.execute(select(DocumentVersion.id, DocumentVersion.text)
                                         .where(DocumentVersion.id.in_(version_ids))).all())
        asked = [(version_id, texts[version_id], "Vermerk über das Telefonat mit Frau Berg") for version_id in version_ids]
        answers = ahead.answers(asked, RuleBasedExtractor())
    finally:
        helper.close()

    assert helper.taken == 0, "the helper read other titles: none of its answers fits"
    for version_id, text, title in asked:
        assert answers[version_id].metadata == RuleBasedExtractor().extract(text, title=title)


def test_a_helper_that_dies_in_the_middle_of_a_sync_leaves_every_file_extracted_and_indexed(ctx, tmp_path: Path) -> None:
    folder = firm_folder(tmp_path, copies=2)
    ctx.rules_helper = ready_helper(ctx.settings.database_url)
    killed: list[str] = []

    def kill_the_helper(relative: str, _result: dict | None) -> None:
        if not killed:
            ctx.rules_helper.kill()
            killed.append(relative)

    summary = sync_folder(ctx, folder, "akten", on_file=kill_the_helper)

    files = 2 * len(list(FIRM_DOCUMENTS.glob("*.txt")))
    assert killed and summary.outcomes == {"new": files}
    with ctx.sessions() as session:
        states = session.scalars(select(DocumentVersion.processing_state)).all()
        artifacts = session.scalars(select(MetadataArtifact.version_id).where(MetadataArtifact.kind == "metadata")).all()
    assert len(states) == files and set(states) == {ProcessingState.INDEXED}
    assert len(set(artifacts)) == files


def test_a_sync_of_many_files_takes_the_helpers_answers(ctx, tmp_path: Path) -> None:
    folder = firm_folder(tmp_path, copies=2)
    files = 2 * len(list(FIRM_DOCUMENTS.glob("*.txt")))
    assert files >= LONG_SYNC_FILES
    ctx.rules_helper = ready_helper(ctx.settings.database_url)

    # A caller's report of each file (a progress bar) takes a moment: the helper, which never
    # holds the sync up, has time to answer even on a loaded machine.
    summary = sync_folder(ctx, folder, "akten", on_file=lambda *_: time.sleep(0.02))

    assert summary.outcomes == {"new": files}
    assert ctx.rules_helper.taken > 0, "the helper ran along, but the sync computed every answer itself"


@pytest.mark.parametrize("files", [LONG_SYNC_FILES - 1])
def test_a_small_sync_starts_no_helper(ctx, tmp_path: Path, files: int) -> None:
    folder = tmp_path / "wenige"
    folder.mkdir()
    for n in range(files):
        (folder / f"vermerk-{n:02d}.txt").write_text(f"Vermerk {n} zur Besprechung mit der Mandantin.", encoding="utf-8")

    sync_folder(ctx, folder, "wenige")

    assert ctx.rules_helper is None


@contextmanager
def deferred_with_a_helper(ctx, version_ids: list[str]) -> Iterator[tuple[RulesAhead, list[list[str]]]]:
    """The versions deferred in an extraction batch whose rules a ready helper runs; yields the
    helper's answers and the batches handed on."""
    helper = ready_helper(ctx.settings.database_url)
    handed: list[list[str]] = []
    ahead = RulesAhead(lambda: helper, RuleBasedExtractor().producer)
    ctx.extraction_batch = ExtractionBatch(handed.append, ahead)
    try:
        for version_id in version_ids:
            defer_extraction(ctx, version_id)
        yield ahead, handed
    finally:
        ctx.extraction_batch = None
        helper.close()


def wait_until_answered(ctx, ahead: RulesAhead, count: int) -> None:
    deadline = time.monotonic() + 60
    while ahead.answered_from_front(ctx.extraction_batch.waiting) < count:
        assert time.monotonic() < deadline, f"the helper did not answer {count} versions"
        time.sleep(0.005)


def test_with_a_helper_a_full_batch_records_what_it_answered_from_the_oldest_on_and_the_rest_waits(
    ctx, tmp_path: Path
) -> None:
    version_ids = ingested(ctx, firm_folder(tmp_path, copies=3))
    assert len(version_ids) > EXTRACTIONS_PER_BATCH
    with deferred_with_a_helper(ctx, version_ids) as (ahead, handed):
        # A batch's worth waits, but the helper has just been asked (a few ms a version).
        flush_extractions_if_waiting(ctx)
        assert handed == [], "what the helper has not answered yet waits for it"
        wait_until_answered(ctx, ahead, EXTRACTIONS_PER_BATCH)
        flush_extractions_if_waiting(ctx)
        assert len(handed) == 1 and len(handed[0]) >= EXTRACTIONS_PER_BATCH
        assert handed[0] == version_ids[: len(handed[0])], "the oldest first, in order"
        assert list(ctx.extraction_batch.waiting) == version_ids[len(handed[0]):]


def test_with_a_helper_a_version_that_waited_the_longest_wait_is_recorded_answered_or_not(
    ctx, tmp_path: Path
) -> None:
    version_ids = ingested(ctx, firm_folder(tmp_path))
    with deferred_with_a_helper(ctx, version_ids) as (_ahead, handed):
        long_ago = time.monotonic() - EXTRACTION_MAX_WAIT_SECONDS
        ctx.extraction_batch.waiting = dict.fromkeys(ctx.extraction_batch.waiting, long_ago)
        flush_extractions_if_waiting(ctx)
        assert handed == [version_ids] and not ctx.extraction_batch.waiting


def test_at_the_end_what_the_helper_answered_is_handed_on_first_and_then_the_rest_in_order(ctx, tmp_path: Path) -> None:
    version_ids = ingested(ctx, firm_folder(tmp_path, copies=2))
    with deferred_with_a_helper(ctx, version_ids) as (ahead, handed):
        wait_until_answered(ctx, ahead, len(version_ids) // 2)
        flush_all_extractions(ctx)

    assert len(handed[0]) >= len(version_ids) // 2, "first what the helper had answered"
    assert [version_id for part in handed for version_id in part] == version_ids, "then the rest, all, in order"
