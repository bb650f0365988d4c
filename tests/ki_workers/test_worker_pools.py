"""Worker pools by role on the embedded index: the access worker is its one writer.

Two REAL worker processes as the Procfile splits them (embedding on ki.index,
access on ki.access) on the embedded index, which only one process may write:
the embed worker embeds and stores vectors, the index write (ki.write_index)
and the access update both run in the access worker, and the embed worker
never asks for the writer lock.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ki_core.config import load_settings
from ki_core.search.index import open_index
from ki_core.search.types import ScopeFilter, SearchFilters
from tests.ki_workers.dms_support import acl_changed, upserted
from tests.ki_workers.test_ingress import post
from tests.ki_workers.test_worker_crash import (  # noqa: F401 - fixtures
    Worker,
    env,
    indexed,
    ingress,
    object_versions,
    server,
    wait_until,
)

pytestmark = [pytest.mark.postgres, pytest.mark.redis]


def ran(worker: Worker, task: str) -> bool:
    """The worker's log has the line of a received `task` (its start-up banner lists every task name)."""
    return f"Task {task}[" in worker.logs()


@pytest.fixture
def pools(env, tmp_path: Path) -> Iterator[tuple[Worker, Worker]]:  # noqa: F811
    embed = Worker(env, tmp_path, queues="ki.ingest,ki.index", name="embed")
    access = Worker(env, tmp_path, queues="ki.access,ki.maintenance", name="access")
    try:
        yield embed, access
    finally:
        embed.stop()
        access.stop()


def test_the_embed_pool_never_writes_the_embedded_index_and_access_changes_reach_it(
    ingress, pools, committed_pg_url  # noqa: F811
) -> None:
    embed, access = pools
    embed.start()
    access.start()
    assert post(ingress, upserted("POOL-1", acl=[{"principal": "alice"}])).status_code == 202
    wait_until(lambda: indexed(committed_pg_url, "POOL-1"), embed)
    [before] = object_versions(committed_pg_url, "POOL-1")
    assert post(ingress, acl_changed("POOL-1", [{"principal": "bob"}], minutes=5)).status_code == 202

    def access_indexed() -> bool:
        [version] = object_versions(committed_pg_url, "POOL-1")
        return version.access_version > before.access_version and version.indexed_access_version == version.access_version

    wait_until(access_indexed, access)
    embed.stop()
    access.stop()
    assert ran(embed, "ki.chunk_embed") and not ran(embed, "ki.write_index")
    assert ran(access, "ki.write_index") and ran(access, "ki.reindex_access")
    assert "IndexLockedError" not in embed.logs() + access.logs()
    [version] = object_versions(committed_pg_url, "POOL-1")
    index = open_index(load_settings(), read_only=True)
    try:
        index.ensure()
        hits = index.search_filter(ScopeFilter(document_ids=frozenset([version.document_id])), SearchFilters(), size=50)
        assert hits and all(index.stored_fields(hit.chunk_id)["allowed_principals"] == ("bob",) for hit in hits)
    finally:
        index.close()
