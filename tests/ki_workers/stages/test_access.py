"""The access-only reindex on the OpenSearch node: an ACL change is a SQL change plus one small
projection document per version; no chunk is rewritten, and the search follows SQL at once."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select

from ki_core.grants import GrantTarget, grant, revoke
from ki_core.models import Chunk, DocumentVersion, ProcessingState, Project
from ki_query.retrieval import retrieval_service_from_settings
from ki_query.types import SearchRequest
from ki_workers import tasks
from ki_workers.folder_sync import sync_folder

QUERY = "Miete Heizung"


def bobs_versions(ctx) -> set[str]:
    """The versions of bob's hits for QUERY: the product's whole search, scope compiled from SQL."""
    service = retrieval_service_from_settings(ctx.settings)
    try:
        return {hit.version_id for hit in service.search(SearchRequest(query=QUERY, limit=50), ["bob"]).hits}
    finally:
        service.close()


def chunk_copies(ctx, chunk_ids: list[int]) -> dict[str, tuple[int, int]]:
    """{chunk id: (_seq_no, _version)} of every chunk document on the node: any rewrite changes both."""
    index = ctx.index()
    response = index.client.mget(index=index.alias, body={"ids": [str(c) for c in chunk_ids]}, params={"_source": "false"})
    assert all(doc["found"] for doc in response["docs"])
    return {doc["_id"]: (doc["_seq_no"], doc["_version"]) for doc in response["docs"]}


@pytest.mark.parametrize("search_backend", ["opensearch"], indirect=True)
def test_a_revoke_hides_and_a_grant_shows_on_the_next_search_and_no_chunk_is_rewritten(
    search_backend: str, ctx, folder: Path
) -> None:
    sync_folder(ctx, folder, "kontorwerk")
    with ctx.sessions() as session:
        project = GrantTarget.project(session.scalar(select(Project.id).where(Project.name == "kontorwerk")))
        versions = list(session.scalars(select(DocumentVersion.id).where(DocumentVersion.processing_state == ProcessingState.INDEXED)))
        chunk_ids = list(session.scalars(select(Chunk.id).where(Chunk.version_id.in_(versions))))
    first_chunk = chunk_ids[0]
    assert bobs_versions(ctx) == set(), "no grant yet: nothing"
    before = chunk_copies(ctx, chunk_ids)

    with ctx.sessions() as session, session.begin():
        grant(session, project, "bob", settings=ctx.settings)
    shown = bobs_versions(ctx)
    assert shown and shown <= set(versions), "the grant shows on the next search, before any index write"
    tasks.reindex_access.delay(versions).get()
    assert ctx.index().stored_fields(first_chunk)["allowed_principals"] == ("bob",)

    with ctx.sessions() as session, session.begin():
        revoke(session, project, "bob", settings=ctx.settings)
    assert bobs_versions(ctx) == set(), "the revoke hides on the very next search"
    tasks.reindex_access.delay(versions).get()
    assert bobs_versions(ctx) == set()
    assert ctx.index().stored_fields(first_chunk)["allowed_principals"] == ()

    with ctx.sessions() as session, session.begin():
        grant(session, project, "bob", settings=ctx.settings)
    assert bobs_versions(ctx) == shown
    tasks.reindex_access.delay(versions).get()
    assert ctx.index().stored_fields(first_chunk)["allowed_principals"] == ("bob",)
    assert chunk_copies(ctx, chunk_ids) == before, "three access changes rewrote no chunk (no vector re-inserted)"
