"""Flower starts only behind a password, on loopback unless configured (ki.flower)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ki_core.config import ConfigError, load_settings
from ki.flower import flower_command


def run_flower(**env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("KI_")}
    return subprocess.run([sys.executable, "-m", "ki.flower"], env={**clean, **env}, capture_output=True, text=True,
                          timeout=60)


def test_without_basic_auth_the_procfile_line_exits_non_zero_naming_the_setting() -> None:
    done = run_flower()
    assert done.returncode == 2
    assert "KI_FLOWER__BASIC_AUTH" in done.stderr and "flower.basic_auth" in done.stderr


@pytest.mark.parametrize("auth", ["", "admin", "admin:", ":secret", "ops:pw,broken"])
def test_a_malformed_or_empty_password_is_refused(auth: str, monkeypatch) -> None:
    monkeypatch.setenv("KI_FLOWER__BASIC_AUTH", auth)
    with pytest.raises(ConfigError, match="flower.basic_auth"):
        flower_command(load_settings())


def test_flower_binds_loopback_and_gets_the_password_outside_its_command_line(monkeypatch) -> None:
    monkeypatch.setenv("KI_FLOWER__BASIC_AUTH", "ops:s3cret")
    argv, env = flower_command(load_settings())
    assert "--address=127.0.0.1" in argv and "--port=5555" in argv
    assert env == {"FLOWER_BASIC_AUTH": "ops:s3cret"}
    assert not any("s3cret" in arg for arg in argv)
