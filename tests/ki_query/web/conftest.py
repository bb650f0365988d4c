"""A real `ki serve` per test module and one headless Chromium (Debian's) per session.

Chromium is /usr/bin/chromium (`make browser` installs it; KI_TEST_CHROMIUM overrides the
path) driven by Playwright for Python with `executable_path`: no browser download. Without
it the browser tests skip, or FAIL under KI_REQUIRE_SERVICES=1 as CI sets it. Screenshots
go to KI_TEST_ARTIFACTS (default: a pytest temporary directory), printed at the end of the run.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import service_unavailable

# Read at import: the autouse isolated_settings fixture removes KI_* variables while a test runs.
CHROMIUM = os.environ.get("KI_TEST_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = os.environ.get("KI_TEST_ARTIFACTS")
# The probe's flags: headless as root, and no calls home on a machine whose network is closed.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
_artifacts: list[Path] = []


@pytest.fixture(scope="session")
def browser() -> Iterator[object]:
    if not (shutil.which(CHROMIUM) or Path(CHROMIUM).is_file()):
        service_unavailable("chromium", f"{CHROMIUM} is missing; `make browser` installs Debian's chromium")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as exc:
        service_unavailable("playwright", f"{exc}; install the test extra (pip install -e '.[test]')")
    with sync_playwright() as playwright:
        try:
            chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        except Exception as exc:  # noqa: BLE001 - any launch failure is the same finding: no browser here
            service_unavailable("chromium", exc)
        yield chromium
        chromium.close()


@pytest.fixture(scope="session")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = Path(ARTIFACTS) if ARTIFACTS else tmp_path_factory.mktemp("web-screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    _artifacts.append(folder)
    return folder


def pytest_terminal_summary(terminalreporter) -> None:
    for folder in _artifacts:
        shots = sorted(folder.glob("*.png"))
        terminalreporter.write_line(f"web page screenshots ({len(shots)}): {folder}")
