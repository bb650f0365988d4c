"""The `ki` entry point itself: its version and its help."""

from __future__ import annotations

from importlib.metadata import version

from typer.testing import CliRunner

from ki.cli import app


def test_version_prints_the_installed_version_and_exits_0() -> None:
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"ki (legalmemory-ki) {version('legalmemory-ki')}"


def test_help_lists_the_commands() -> None:
    result = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "--version" in result.output and "search" in result.output and "events" in result.output
