"""`ki config show` and `ki init` as an operator runs them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from ki.cli import app

runner = CliRunner()


def test_config_show_reflects_an_env_override(monkeypatch) -> None:
    monkeypatch.setenv("KI_RETRIEVAL__FUSION_RRF_K", "30")
    result = runner.invoke(app, ["config", "show", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["retrieval"]["fusion_rrf_k"] == 30


def test_config_show_with_a_bad_value_exits_non_zero_naming_the_key(monkeypatch) -> None:
    monkeypatch.setenv("KI_RETRIEVAL__FUSION_RRF_K", "abc")
    result = subprocess.run(
        [sys.executable, "-m", "ki.cli", "config", "show"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    assert "retrieval.fusion_rrf_k" in result.stderr
    assert "Traceback" not in result.stderr


def test_config_show_masks_secrets(monkeypatch) -> None:
    monkeypatch.setenv("KI_LLM__API_KEY", "sk-very-secret")
    result = runner.invoke(app, ["config", "show", "--json"])
    assert result.exit_code == 0
    assert "sk-very-secret" not in result.output
    assert json.loads(result.output)["llm"]["api_key"] == "********"


def test_init_creates_the_store_and_is_idempotent(tmp_path: Path) -> None:
    first = runner.invoke(app, ["init"])
    assert first.exit_code == 0, first.output
    assert (tmp_path / ".ki" / "ki.db").is_file()
    second = runner.invoke(app, ["init"])
    assert second.exit_code == 0
    assert "up to date" in second.output
