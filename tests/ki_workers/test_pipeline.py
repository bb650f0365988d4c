"""The pipeline in-process: folder -> versions -> metadata -> chunks -> index, on both databases."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import func, select

from ki_core.config import get_settings
from ki_core.grants import GrantTarget, grant, revoke
from ki_core.models import (
    Chunk,
    ChunkKind,
    Document,
    DocumentVersion,
    ProcessingState,
    Project,
    Relation,
    RelationKind,
)
from ki_core.search.types import ScopeFilter
from ki_workers import tasks
from ki_workers.folder_sync import sync_folder
from ki_workers.stages.chunking import FIRST_CLAUSE_ORDINAL


def _chunks(ctx, **where) -> list[Chunk]:
    with ctx.sessions() as session:
        stmt = select(Chunk)
        for column, value in where.items():
            stmt = stmt.where(getattr(Chunk, column) == value)
        return list(session.scalars(stmt))


def _index_count(ctx) -> int:
    index = ctx.index()
    index.refresh()
    return index.count()


def _document(ctx, key: str) -> Document:
    with ctx.sessions() as session:
        return session.scalar(select(Document).where(Document.key == key))


def test_a_folder_becomes_indexed_chunks(ctx, folder: Path) -> None:
    summary = sync_folder(ctx, folder, "kontorwerk")
    assert summary.files == 6
    assert summary.outcomes == {"new": 5, "failed": 1}
    assert [path for path, _ in summary.errors] == ["kaputt.pdf"]
    chunks = _chunks(ctx)
    assert chunks and all(c.embedding and c.embedding_signature == f"hashing:{get_settings().embedding.model}:64" for c in chunks)
    assert _index_count(ctx) == len(chunks)
    with ctx.sessions() as session:
        states = dict(session.execute(select(DocumentVersion.processing_state, func.count()).group_by(DocumentVersion.processing_state)).all())
    assert states == {ProcessingState.INDEXED: 5, ProcessingState.FAILED: 1}


def test_running_twice_changes_nothing_and_embeds_nothing(ctx, folder: Path) -> None:
    sync_folder(ctx, folder, "kontorwerk")
    chunk_ids = sorted(c.id for c in _chunks(ctx))
    embedded = ctx.embedder().passages
    second = sync_folder(ctx, folder, "kontorwerk")
    assert second.outcomes == {"unchanged": 5, "failed": 1}
    assert sorted(c.id for c in _chunks(ctx)) == chunk_ids
    assert ctx.embedder().passages == embedded


def test_each_task_run_twice_is_harmless(ctx, folder: Path) -> None:
    sync_folder(ctx, folder, "kontorwerk")
    version_id = _document(ctx, "mietvertrag").latest_final_version_id
    before = sorted((c.id, c.text_hash) for c in _chunks(ctx))
    tasks.extract_metadata.delay(version_id).get()
    tasks.chunk_embed.delay(version_id).get()
    assert sorted((c.id, c.text_hash) for c in _chunks(ctx)) == before
    assert _index_count(ctx) == len(before)


def test_version_chain_draft_final_executed(ctx, folder: Path) -> None:
    sync_folder(ctx, folder, "kontorwerk")
    document = _document(ctx, "mietvertrag")
    with ctx.sessions() as session:
        versions = list(session.scalars(select(DocumentVersion).where(DocumentVersion.document_id == document.id).order_by(DocumentVersion.seq)))
        supersedes = session.scalars(select(Relation).where(Relation.kind == RelationKind.SUPERSEDES)).all()
    assert [v.status.value for v in versions] == ["draft", "final", "executed"]
    assert document.latest_final_version_id == versions[2].id
    assert {(r.from_version_id, r.to_version_id) for r in supersedes} == {
        (versions[1].id, versions[0].id), (versions[2].id, versions[1].id)
    }
    profiles = _chunks(ctx, kind=ChunkKind.PROFILE, document_id=document.id)
    assert [p.version_id for p in profiles] == [versions[2].id]
    assert profiles[0].ordinal == -1 and "Titel:" in profiles[0].text
    clause_versions = {c.version_id for c in _chunks(ctx, kind=ChunkKind.CLAUSE, document_id=document.id)}
    assert clause_versions == {versions[1].id, versions[2].id}  # final and executed, not the draft
    assert all(c.ordinal >= FIRST_CLAUSE_ORDINAL for c in _chunks(ctx, kind=ChunkKind.CLAUSE))


def test_manifest_relations_and_identifier_references(ctx, folder: Path) -> None:
    sync_folder(ctx, folder, "kontorwerk")
    contract = _document(ctx, "mietvertrag").id
    annex = _document(ctx, "anlage-1").id
    with ctx.sessions() as session:
        edges = {(r.kind, r.from_document_id, r.to_document_id) for r in session.scalars(select(Relation))}
    assert (RelationKind.ANNEX_OF, annex, contract) in edges
    assert (RelationKind.REFERENCES, _document(ctx, "schreiben-heizung").id, contract) in edges


def test_stored_text_is_raw_while_the_embedded_string_carries_the_context_header(ctx, folder: Path) -> None:
    sync_folder(ctx, folder, "kontorwerk")
    body = _chunks(ctx, kind=ChunkKind.CHUNK, document_id=_document(ctx, "anlage-1").id)[0]
    assert body.text.startswith("Anlage 1 zum Mietvertrag")
    from ki_workers.stages.chunking import text_hash

    assert body.text_hash != text_hash(body.text)  # the hash is of header + text


def test_access_only_reindex_updates_the_projection_without_embedding(ctx, folder: Path) -> None:
    sync_folder(ctx, folder, "kontorwerk")
    with ctx.sessions() as session, session.begin():
        project_id = session.scalar(select(Project.id).where(Project.name == "kontorwerk"))
        grant(session, GrantTarget.project(project_id), "Anna.Berg ", settings=ctx.settings)
        version_ids = list(session.scalars(select(DocumentVersion.id).where(DocumentVersion.processing_state == ProcessingState.INDEXED)))
    embedded = ctx.embedder().passages
    tasks.reindex_access.delay(version_ids).get()
    assert ctx.embedder().passages == embedded
    chunk = _chunks(ctx, document_id=_document(ctx, "anlage-1").id)[0]
    fields = ctx.index().stored_fields(chunk.id)
    assert list(fields["allowed_principals"]) == ["anna.berg"]
    with ctx.sessions() as session, session.begin():
        revoke(session, GrantTarget.project(project_id), "anna.berg", settings=ctx.settings)
    tasks.reindex_access.delay(version_ids).get()
    assert list(ctx.index().stored_fields(chunk.id)["allowed_principals"]) == []
    assert ctx.embedder().passages == embedded


def test_a_file_removed_from_the_folder_leaves_search_but_stays_in_sql(ctx, folder: Path) -> None:
    sync_folder(ctx, folder, "kontorwerk")
    annex = _document(ctx, "anlage-1")
    annex_chunks = _chunks(ctx, document_id=annex.id)
    before = _index_count(ctx)
    (folder / "anlage-grundriss.txt").unlink()
    summary = sync_folder(ctx, folder, "kontorwerk")
    assert summary.pruned == 1
    assert _index_count(ctx) == before - len(annex_chunks)
    assert len(_chunks(ctx, document_id=annex.id)) == len(annex_chunks)
    scope = ScopeFilter(project_ids=frozenset({annex.project_id}))
    assert ctx.index().count(scope=scope) == before - len(annex_chunks)


def test_changed_file_content_replaces_the_old_version_in_search(ctx, folder: Path) -> None:
    sync_folder(ctx, folder, "kontorwerk")
    letter = _document(ctx, "schreiben-heizung")
    old_chunks = _chunks(ctx, document_id=letter.id)
    path = folder / "schreiben-mieterin.txt"
    path.write_text(path.read_text(encoding="utf-8") + "\nNachtrag: Die Heizung läuft wieder.\n", encoding="utf-8")
    summary = sync_folder(ctx, folder, "kontorwerk")
    assert summary.outcomes.get("new") == 1
    index = ctx.index()
    index.refresh()
    assert all(index.stored_fields(c.id) is None for c in old_chunks)
    new_chunks = [c for c in _chunks(ctx, document_id=letter.id) if c.id not in {o.id for o in old_chunks}]
    assert new_chunks and all(index.stored_fields(c.id) is not None for c in new_chunks)


def test_the_index_plan_and_watermarks_take_more_versions_than_one_statement_has_parameters(ctx, folder: Path) -> None:
    """`ki reindex` records the watermarks of every version at once: no per-statement parameter limit
    (SQLite 32,766, psycopg 65,535) may cap how many versions one plan or one watermark write covers."""
    from ki_workers.stages.embed_index import plan_index_writes, record_watermarks

    sync_folder(ctx, folder, "kontorwerk")
    with ctx.sessions() as session:
        real = list(session.scalars(select(DocumentVersion.id).where(DocumentVersion.processing_state == ProcessingState.INDEXED)))
    unknown = [f"{n:032x}" for n in range(70_000)]
    with ctx.sessions() as session:
        plan = plan_index_writes(session, [*unknown, *real], ctx.settings)
    assert set(plan.watermarks) == set(real)
    assert len([op for op in plan.operations if hasattr(op, "chunk")]) == len(_chunks(ctx))
    record_watermarks(ctx, {**dict.fromkeys(unknown), **plan.watermarks})
    with ctx.sessions() as session:
        recorded = dict(session.execute(select(DocumentVersion.id, DocumentVersion.indexed_access_version)).all())
    assert all(recorded[version_id] == plan.watermarks[version_id] for version_id in real)
