"""End to end with a REAL Celery worker on the Redis broker and PostgreSQL.

`ki ingest` (not eager) enqueues; a worker subprocess runs ingest ->
extract_metadata -> chunk_embed; the test then finds the chunks in the
embedded index the worker wrote.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import func, select

from ki_core.config import load_settings
from ki_core.db import make_engine, session_factory
from ki_core.models import Chunk, DocumentVersion, ProcessingState
from ki_core.search.index import open_index
from ki_core.search.types import MultiSearchRequest, ScopeFilter, Leg

FOLDER = Path(__file__).parents[1] / "fixtures" / "folder"
QUEUES = "ki.ingest,ki.index,ki.access,ki.maintenance"


@pytest.fixture
def worker_env(committed_pg_url: str, redis_url: str, redis_client, tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KI_")}
    env.update(
        KI_DATABASE__URL=committed_pg_url,
        KI_BROKER__URL=redis_url,
        KI_BROKER__EAGER="false",
        KI_BROKER__VISIBILITY_TIMEOUT_SECONDS="30",
        KI_STATE_DIR=str(tmp_path / "state"),
        KI_EMBEDDING__PROVIDER="hashing",
        KI_EMBEDDING__DIMENSIONS="64",
    )
    return env


@pytest.fixture
def worker(worker_env: dict[str, str], tmp_path: Path) -> Iterator[subprocess.Popen]:
    log = open(tmp_path / "worker.log", "w")  # noqa: SIM115 - closed below
    process = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "ki_workers.app", "worker", "--pool=solo",
         f"--queues={QUEUES}", "--loglevel=INFO", "--without-gossip", "--without-mingle", "--without-heartbeat"],
        env=worker_env, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT,
    )
    try:
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def _indexed_versions(url: str) -> tuple[int, int]:
    engine = make_engine(url)
    try:
        with session_factory(engine)() as session:
            done = session.scalar(select(func.count()).select_from(DocumentVersion).where(
                DocumentVersion.processing_state.in_([ProcessingState.INDEXED, ProcessingState.FAILED])))
            chunks = session.scalar(select(func.count()).select_from(Chunk))
            return done or 0, chunks or 0
    finally:
        engine.dispose()


def test_a_real_worker_ingests_a_folder_into_the_index(worker, worker_env, committed_pg_url, tmp_path, monkeypatch) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "ki.cli", "ingest", str(FOLDER), "--project", "kontorwerk"],
        env=worker_env, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
    )
    assert result.returncode == 0, result.stderr
    deadline = time.monotonic() + 120
    done, chunks = 0, 0
    while time.monotonic() < deadline:
        done, chunks = _indexed_versions(committed_pg_url)
        if done == 6:
            break
        assert worker.poll() is None, (tmp_path / "worker.log").read_text()
        time.sleep(0.5)
    assert done == 6, (tmp_path / "worker.log").read_text()[-3000:]
    for key, value in worker_env.items():
        if key.startswith("KI_"):
            monkeypatch.setenv(key, value)
    index = open_index(load_settings(), read_only=True)
    try:
        index.ensure()
        assert index.count() == chunks > 0
        hits = index.multi_search(
            MultiSearchRequest(query_text="Heizung Minderung", query_vector=None,
                               scope=ScopeFilter(project_ids=frozenset(_project_ids(committed_pg_url))), size=10)
        )
        assert hits.hits(Leg.LEXICAL), "the lexical leg finds the letter about the heating"
    finally:
        index.close()


def _project_ids(url: str) -> set[str]:
    from ki_core.models import Project

    engine = make_engine(url)
    try:
        with session_factory(engine)() as session:
            return set(session.scalars(select(Project.id)))
    finally:
        engine.dispose()
