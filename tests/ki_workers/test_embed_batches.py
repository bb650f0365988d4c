"""A folder sync embeds and stores short files together, with the pipeline's guarantees kept."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import func, select

from ki_core.models import Chunk, ChunkKind, DocumentVersion, ProcessingState
from ki_core.search.index import IndexOp
from ki_workers import tasks
from ki_workers.folder_sync import sync_folder
from ki_workers.stages.embed_index import deferred_index_writes, embed_version, plan_index_writes


class CallCounter:
    """Counts the embedder's calls (not texts) of ctx's embedder; can be told to fail."""

    def __init__(self, ctx) -> None:
        self.inner, self.calls, self.fail = ctx.embedder(), 0, False
        self.signature = self.inner.signature
        ctx._embedder = self

    def embed_passages(self, texts):
        self.calls += 1
        if self.fail:
            raise RuntimeError("the embedder fell over")
        return self.inner.embed_passages(texts)


def _rows(ctx) -> dict[int, tuple]:
    with ctx.sessions() as session:
        return {c.id: (c.version_id, c.kind, c.text, c.text_hash, c.embedding) for c in session.scalars(select(Chunk))}


def _states(ctx) -> dict[str, ProcessingState]:
    with ctx.sessions() as session:
        return dict(session.execute(select(DocumentVersion.id, DocumentVersion.processing_state)).all())


def test_short_files_share_embedder_calls_and_store_what_one_by_one_stores(ctx, folder: Path) -> None:
    counter = CallCounter(ctx)
    summary = sync_folder(ctx, folder, "kontorwerk")
    assert 0 < counter.calls < summary.outcomes["new"]
    batched = _rows(ctx)
    for version_id, state in _states(ctx).items():
        if state != ProcessingState.FAILED:
            embed_version(ctx, version_id)  # outside a sync: at once, one version
    assert _rows(ctx) == batched


def test_a_version_embedded_again_in_a_batch_loses_its_stale_chunks_in_sql_and_index(ctx, folder: Path) -> None:
    sync_folder(ctx, folder, "kontorwerk")
    version_id = next(v for v, s in _states(ctx).items() if s == ProcessingState.INDEXED)
    with ctx.sessions() as session, session.begin():
        stale = session.scalars(select(Chunk).where(Chunk.version_id == version_id, Chunk.kind == ChunkKind.CHUNK)).first()
        session.add(Chunk(id=stale.id + 1, version_id=version_id, document_id=stale.document_id, ordinal=999,
                          kind=ChunkKind.CHUNK, text="veraltet", text_hash="x", embedding=stale.embedding,
                          embedding_signature=stale.embedding_signature))
    with ctx.sessions() as session:
        ctx.index().bulk([op for op in plan_index_writes(session, [version_id], ctx.settings).operations
                          if isinstance(op, IndexOp)])
    with deferred_index_writes(ctx):
        tasks.chunk_embed.delay(version_id).get()
        assert stale.id + 1 in _rows(ctx)  # waits for the batch
    assert stale.id + 1 not in _rows(ctx)
    ctx.index().refresh()
    assert ctx.index().count() == len(_rows(ctx))


def test_a_batch_that_fails_leaves_its_versions_to_be_done_again(ctx, folder: Path) -> None:
    counter = CallCounter(ctx)
    counter.fail = True
    with pytest.raises(RuntimeError, match="fell over"):
        sync_folder(ctx, folder, "kontorwerk")
    assert not _rows(ctx)
    assert ProcessingState.INDEXED not in set(_states(ctx).values())
    counter.fail = False
    summary = sync_folder(ctx, folder, "kontorwerk")
    assert summary.errors == [("kaputt.pdf", summary.errors[0][1])]
    assert set(_states(ctx).values()) == {ProcessingState.INDEXED, ProcessingState.FAILED}
    ctx.index().refresh()
    assert ctx.index().count() == len(_rows(ctx)) > 0


def test_waiting_drafts_are_embedded_once_they_hold_enough_chunks_while_their_index_write_still_waits(
    ctx, tmp_path: Path, monkeypatch
) -> None:
    from ki_workers.stages import embed_index

    monkeypatch.setattr(embed_index, "DEFERRED_MAX_WAIT_SECONDS", 600.0)  # only the chunk count decides here
    folder = tmp_path / "gutachten"
    folder.mkdir()
    paragraph = "Der Sachverständige stellt fest, dass die Abdichtung des Kellers nicht den Regeln der Technik entspricht. "
    for n in range(8):  # some 35 chunks each: no file alone reaches the count, eight together do
        (folder / f"gutachten-{n}.txt").write_text(
            "\n\n".join(f"Abschnitt {n}.{k}\n{paragraph * 9}" for k in range(40)), encoding="utf-8")
    sync_folder(ctx, folder, "gutachten")
    with ctx.sessions() as session:
        chunks = dict(session.execute(
            select(Chunk.version_id, func.count()).group_by(Chunk.version_id).order_by(Chunk.version_id)
        ).all())
    version_ids = list(chunks)
    assert all(count <= embed_index.DEFERRED_MAX_CHUNKS for count in chunks.values())
    assert sum(chunks.values()) >= embed_index.DEFERRED_EMBED_CHUNKS
    counter = CallCounter(ctx)

    calls_after: list[int] = []
    with deferred_index_writes(ctx):
        for version_id in version_ids:
            tasks.chunk_embed.delay(version_id).get()
            calls_after.append(counter.calls)
        still_waiting = set(ctx.index_writes.versions)

    reached = next(n for n in range(len(version_ids))
                   if sum(chunks[v] for v in version_ids[: n + 1]) >= embed_index.DEFERRED_EMBED_CHUNKS)
    assert calls_after[:reached] == [0] * reached, "below the count, the drafts wait"
    assert calls_after[reached] == 1, "at the count, the waiting drafts are embedded in one call"
    assert still_waiting == set(version_ids), "the index write waits for the shared commit"
    ctx.index().refresh()
    assert ctx.index().count() == len(_rows(ctx))
