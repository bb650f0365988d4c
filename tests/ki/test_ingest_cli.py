"""`ki ingest` as a user meets it: exit 1 naming each failed file, a size guard and excludes, plain
progress lines off a terminal, and a warning before a large file."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ki.cli import app
from ki_workers.context import reset_worker_context

FOLDER = Path(__file__).parents[1] / "fixtures" / "folder"
runner = CliRunner(env={"COLUMNS": "200"})


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """An initialised embedded store with the hashing embedder, and a copy of the fixture folder."""
    monkeypatch.setenv("KI_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("KI_EMBEDDING__PROVIDER", "hashing")
    monkeypatch.setenv("KI_EMBEDDING__DIMENSIONS", "64")
    reset_worker_context()
    assert runner.invoke(app, ["init"]).exit_code == 0
    folder = tmp_path / "akte"
    shutil.copytree(FOLDER, folder)
    yield folder
    reset_worker_context()


def test_a_failed_file_makes_the_exit_code_1_and_is_named_with_its_reason(store: Path) -> None:
    result = runner.invoke(app, ["ingest", str(store), "--project", "mietsache"])
    assert result.exit_code == 1, result.output
    assert "failed kaputt.pdf:" in result.output
    assert "1 of 6 files failed" in result.output


def test_excluded_and_oversized_files_are_left_out_and_the_rest_exits_0(store: Path) -> None:
    (store / "protokoll.txt").write_text("Zeugenaussage zur Heizung. " * 60_000, encoding="utf-8")  # ~1.5 MB
    result = runner.invoke(app, ["ingest", str(store), "--project", "mietsache", "--exclude", "*.pdf",
                                 "--max-file-mb", "1"])
    assert result.exit_code == 0, result.output
    assert "skipping protokoll.txt: 1.5 MB is above --max-file-mb 1" in result.output, "warned before the work"
    assert "skipped protokoll.txt: 1.5 MB is above the limit of 1 MB (--max-file-mb)" in result.output
    assert "excluded (--exclude)" in result.output and "kaputt.pdf" not in result.output


def test_files_of_a_type_ki_does_not_read_are_skipped_in_one_line_and_the_exit_stays_0(store: Path) -> None:
    (store / "tabelle.xyz").write_bytes(b"\x00\x01")
    (store / "export.log").write_text("log", encoding="utf-8")
    (store / "server.log").write_text("log", encoding="utf-8")
    result = runner.invoke(app, ["ingest", str(store), "--project", "mietsache", "--exclude", "kaputt.pdf"])
    assert result.exit_code == 0, result.output
    skipped = [line for line in result.output.splitlines() if "of a type ki does not read" in line]
    assert skipped == ["skipped 3 file(s) of a type ki does not read: .log (2), .xyz (1)"]
    assert "failed" not in result.output


def test_off_a_terminal_progress_is_plain_lines_and_a_large_file_is_announced(store: Path) -> None:
    (store / "protokoll.txt").write_text("Zeugenaussage zur Heizung. " * 100_000, encoding="utf-8")  # ~2.7 MB
    result = runner.invoke(app, ["ingest", str(store), "--project", "mietsache", "--exclude", "kaputt.pdf"])
    assert result.exit_code == 0, result.output
    assert "large file protokoll.txt: 2.6 MB, this may take a while" in result.output
    assert "ingest mietsache: 6/6 files, done in" in result.output


def test_ingest_while_another_process_writes_the_index_writes_nothing_and_says_so(store: Path) -> None:
    """A running `ki serve` holds the embedded index's writer lock; SQL must not get ahead of the index."""
    from sqlalchemy import func, select

    from ki_core.config import load_settings
    from ki_core.db import make_engine
    from ki_core.models import DocumentVersion
    from ki_core.search.index import open_index

    settings = load_settings()
    other_writer = open_index(settings)  # takes the lock, as the server's writer does
    try:
        result = runner.invoke(app, ["ingest", str(store), "--project", "mietsache"])
    finally:
        other_writer.close()
    assert result.exit_code == 3, result.output
    assert "Nothing was written" in result.output and "--wait" in result.output
    engine = make_engine(settings.database_url)
    with engine.connect() as connection:
        assert connection.scalar(select(func.count()).select_from(DocumentVersion)) == 0
    engine.dispose()


def test_ingest_with_wait_goes_on_once_the_other_writer_is_done(store: Path) -> None:
    import threading

    from ki_core.config import load_settings
    from ki_core.search.index import open_index

    other_writer = open_index(load_settings())
    threading.Timer(1.5, other_writer.close).start()
    result = runner.invoke(app, ["ingest", str(store), "--project", "mietsache", "--wait", "30"])
    assert result.exit_code == 1, result.output  # the fixture folder's broken PDF; the rest is ingested
    assert "waiting up to 30 s for the other writer" in result.output and "failed kaputt.pdf" in result.output
