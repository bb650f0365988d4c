"""The `ki` entry point itself: its version, its help, and usage errors in two lines."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version

import pytest
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


@pytest.mark.parametrize(("args", "error", "command"), [
    (["ingest"], "error: Missing argument 'path'.", "ki ingest"),
    (["search", "Miete"], "error: Missing option '--as'.", "ki search"),
    (["keys", "create", "app"], "error: Missing option '--principal'.", "ki keys create"),
    (["search", "Miete", "--as", "anna", "--limit", "0"], "error: Invalid value for '--limit'", "ki search"),
    (["no-such-command"], "error: No such command 'no-such-command'.", "ki"),
])
def test_a_usage_error_is_two_lines_the_error_and_where_help_is(args: list[str], error: str, command: str) -> None:
    result = subprocess.run([sys.executable, "-m", "ki.cli", *args], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert result.stdout == ""
    first, second = result.stderr.splitlines()
    assert first.startswith(error)
    assert second == f"Try '{command} --help'"


def test_under_clirunner_too_a_usage_error_is_two_lines() -> None:
    result = CliRunner().invoke(app, ["search", "Miete"])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == ["error: Missing option '--as'.", "Try 'ki search --help'"]
