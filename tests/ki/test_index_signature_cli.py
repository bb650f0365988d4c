"""`ki` under a changed embedder: search and ingest exit 1 naming both signatures, `ki status` shows
the recorded one and the mismatch, `ki reindex` makes it serve again."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ki_core.config import get_settings
from ki_workers.context import reset_worker_context
from tests.ki.cli_store import BROKEN, PROJECT, database, ingested, ki, store
from tests.ki_core.test_store_identity import forget_the_service

__all__ = ["database", "store"]


@pytest.fixture(autouse=True)
def own_process() -> Iterator[None]:
    """Each `ki` run is a process of its own: no query service of another test's store."""
    forget_the_service()
    yield
    forget_the_service()


def test_a_same_dimension_model_switch_is_refused_by_search_and_ingest_and_shown_by_status(
    database: str, store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ingested(store, "anna")
    stored = "hashing model=text-embedding-3-small/v1 dim=64 norm=l2 ids=v"
    first_status = ki("status").output
    assert f"index signature: {stored}" in first_status, first_status

    reset_worker_context()
    monkeypatch.setenv("KI_EMBEDDING__MODEL", "another-model")
    get_settings.cache_clear()
    forget_the_service()
    configured = "hashing model=another-model/v1 dim=64 norm=l2 ids=v"
    search = ki("search", "Miete", "--as", "anna")
    ingest = ki("ingest", str(store), "--project", PROJECT, "--exclude", BROKEN)
    status = ki("status")

    for refused in (search, ingest):
        assert refused.exit_code == 1, refused.output
        flat = " ".join(refused.output.split())
        assert stored in flat and configured in flat and "`ki reindex`" in flat, flat
    assert status.exit_code == 0
    lines = [line for line in status.output.splitlines() if "signature" in line or line.startswith("configured")]
    assert lines[0].startswith(f"index signature: {stored}")
    assert lines[1].startswith(f"configured: {configured}") and lines[1].endswith("— mismatch, run ki reindex")

    assert ki("reindex").exit_code == 0
    forget_the_service()
    assert ki("search", "Miete", "--as", "anna").exit_code == 0
    status = ki("status").output
    assert f"index signature: {configured}" in status and "mismatch" not in status
