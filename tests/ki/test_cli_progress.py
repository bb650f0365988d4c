"""Long CLI work shows progress off a terminal too: plain lines in a CI log or `| tee`, a live bar on a terminal."""

from __future__ import annotations

import io
import re
from pathlib import Path

from rich.console import Console
from typer.testing import CliRunner

from ki.cli import app
from ki.commands import progress_report

STATUTES = Path(__file__).resolve().parents[1] / "fixtures" / "statutes-excerpt.jsonl"


def plain_console() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=False, width=80), out


def test_corpus_load_off_a_terminal_prints_plain_progress_and_a_final_line(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("KI_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("KI_EMBEDDING__PROVIDER", "hashing")
    result = CliRunner().invoke(app, ["corpus", "load", "statutes", str(STATUTES)])
    assert result.exit_code == 0, result.output
    lines = result.stderr.splitlines()
    assert re.fullmatch(r"embedding and indexing statutes: \d+/70 units", lines[0]), lines
    assert re.fullmatch(r"embedding and indexing statutes: 70/70 units, done in \d+\.\d s", lines[-1]), lines
    assert "\x1b[" not in result.stderr  # no cursor movement or colour in a log


def test_quick_updates_print_one_line_every_few_seconds_not_one_per_update() -> None:
    console, out = plain_console()
    with progress_report(console, "ingest nordbau", "files", total=1000) as progress:
        for number in range(1000):
            progress.advance(current=f"brief-{number}.pdf")
    assert out.getvalue().splitlines()[0] == "ingest nordbau: 1/1000 files, current: brief-0.pdf"
    assert len(out.getvalue().splitlines()) == 2
    assert re.fullmatch(r"ingest nordbau: 1000/1000 files, done in \d+\.\d s", out.getvalue().splitlines()[1])


def test_work_that_fails_says_where_it_stopped() -> None:
    console, out = plain_console()
    try:
        with progress_report(console, "reindex", "versions") as progress:
            progress.update(3)
            raise RuntimeError("index down")
    except RuntimeError:
        pass
    assert re.fullmatch(r"reindex: 3 versions, stopped in \d+\.\d s", out.getvalue().splitlines()[-1])


def test_on_a_terminal_the_bar_is_drawn_instead_of_plain_lines() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120)
    with progress_report(console, "ingest nordbau", "files", total=2) as progress:
        progress.advance(current="a.pdf")
        progress.advance(current="b.pdf")
    assert progress.bar is not None
    assert "2/2" in out.getvalue() and "ingest nordbau: " not in out.getvalue()
