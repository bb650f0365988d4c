"""`ki reindex`: a rebuild from SQL that reuses stored vectors and survives an embedder change."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import select

from ki_core.config import get_settings
from ki_core.embedding import HashingEmbedder
from ki_core.models import Chunk, Document, Project
from ki_core.search.index import open_index
from ki_core.search.types import (
    IndexDimensionMismatch,
    IndexMappingMismatch,
    IndexSignatureMismatch,
    Leg,
    MultiSearchRequest,
    ScopeFilter,
)
from tests.ki_core.search.backends import OPENSEARCH_URL
from ki_workers.context import reset_worker_context, worker_context
from ki_workers.folder_sync import sync_folder
from ki_workers.reindex import rebuild_index
from ki_workers.stages.metadata import RuleBasedExtractor
from tests.ki_workers.conftest import CountingEmbedder


def test_rebuild_reuses_stored_vectors(search_backend: str, ctx, folder: Path) -> None:
    sync_folder(ctx, folder, "kontorwerk")
    before = ctx.index().count()
    embedded = ctx.embedder().passages
    report = rebuild_index(ctx)
    assert report.chunks == before and report.re_embedded_versions == 0
    assert ctx.embedder().passages == embedded
    assert ctx.index().count() == before


def test_a_new_embedder_dimension_needs_reindex_and_reindex_fixes_it(search_backend: str, ctx, folder: Path,
                                                                   monkeypatch) -> None:
    sync_folder(ctx, folder, "kontorwerk")
    count = ctx.index().count()
    reset_worker_context()
    monkeypatch.setenv("KI_EMBEDDING__DIMENSIONS", "32")
    get_settings.cache_clear()
    with pytest.raises(IndexDimensionMismatch, match="ki reindex"):
        open_index(get_settings()).ensure()
    new_ctx = worker_context()
    new_ctx._embedder = CountingEmbedder(HashingEmbedder(dimensions=32, model=get_settings().embedding.model))
    report = rebuild_index(new_ctx)
    assert report.re_embedded_versions == 5
    assert new_ctx.index().count() == count
    with new_ctx.sessions() as session:
        signatures = set(session.scalars(select(Chunk.embedding_signature)))
    assert signatures == {f"hashing:{get_settings().embedding.model}:32"}



def everything(ctx) -> ScopeFilter:
    with ctx.sessions() as session:
        return ScopeFilter(project_ids=frozenset(session.scalars(select(Project.id))))


def chunk_ids_of_project(ctx, name: str) -> set[int]:
    with ctx.sessions() as session:
        return set(session.scalars(
            select(Chunk.id).join(Document, Document.id == Chunk.document_id)
            .join(Project, Project.id == Document.project_id).where(Project.name == name)
        ))  # fmt: skip


def test_documents_written_while_the_index_is_rebuilt_are_in_the_new_index(search_backend: str, ctx, folder: Path,
                                                                           tmp_path: Path) -> None:
    sync_folder(ctx, folder, "kontorwerk")
    late = tmp_path / "nachtrag"
    late.mkdir()
    (late / "nachtrag.txt").write_text(
        "Nachtrag zum Rahmenvertrag: Die Kaution wird nach Rückgabe der Mietsache binnen sechs Monaten "
        "zurückgezahlt. Die Parteien vereinbaren die Schriftform für jede weitere Änderung.\n" * 4,
        encoding="utf-8",
    )
    written = []

    def write_meanwhile(done: int, total: int) -> None:
        if not written:  # a worker's write into the live index while the new one is filled
            written.append(sync_folder(ctx, late, "nachtrag"))

    report = rebuild_index(ctx, on_progress=write_meanwhile)

    assert written and report.caught_up_versions >= 1
    index = ctx.index()
    index.refresh()
    late_chunks = chunk_ids_of_project(ctx, "nachtrag")
    assert late_chunks and set(index.stored_fields_of(late_chunks)) == late_chunks
    with ctx.sessions() as session:
        assert index.count() == len(list(session.scalars(select(Chunk.id))))


@pytest.mark.skipif(not OPENSEARCH_URL, reason="needs an OpenSearch node (KI_TEST_OPENSEARCH_URL)")
@pytest.mark.parametrize("search_backend", ["opensearch"], indirect=True)
def test_an_old_configuration_reads_through_the_rebuild_then_is_told_to_restart(search_backend: str, ctx,
                                                                                folder: Path, monkeypatch) -> None:
    sync_folder(ctx, folder, "kontorwerk")
    old = open_index(get_settings())  # a query process still on the old embedder (64 dimensions)
    old.ensure()
    vector = tuple(float(x) for x in HashingEmbedder(dimensions=64).embed_query("Vertrag Haftung"))
    request = MultiSearchRequest(query_text="Vertrag Haftung", query_vector=vector, scope=everything(ctx), size=20)
    outcomes: list[str] = []
    stop = threading.Event()

    def query_loop() -> None:
        while not stop.is_set():
            try:
                outcomes.append("ok" if old.multi_search(request).hits(Leg.SEMANTIC) else "empty")
            except IndexMappingMismatch:  # the dimension, or the signature checked first
                outcomes.append("restart")
            except Exception as exc:  # noqa: BLE001 - any other outcome is a failed query
                outcomes.append(f"failed: {exc}")
            time.sleep(0.01)

    reset_worker_context()
    monkeypatch.setenv("KI_EMBEDDING__DIMENSIONS", "32")
    get_settings.cache_clear()
    new_ctx = worker_context()
    loop = threading.Thread(target=query_loop)
    loop.start()
    try:
        report = rebuild_index(new_ctx)
    finally:
        stop.set()
        loop.join()

    assert report.re_embedded_versions == 5
    assert not [o for o in outcomes if o.startswith("failed") or o == "empty"], outcomes
    assert outcomes.count("ok") >= 3
    with pytest.raises(IndexSignatureMismatch, match="restart this process"):
        old.multi_search(request)
    new_vector = tuple(float(x) for x in HashingEmbedder(dimensions=32).embed_query("Vertrag Haftung"))
    served = new_ctx.index().multi_search(request.model_copy(update={"query_vector": new_vector}))
    assert served.hits(Leg.SEMANTIC) and served.hits(Leg.LEXICAL)
    old.close()


def test_reindex_re_extracts_what_an_older_extractor_wrote_and_keeps_what_the_source_said(ctx, tmp_path: Path) -> None:
    """A store indexed before the date rule changed: the brief was dated by the decision it cites."""
    from datetime import date

    from sqlalchemy import update

    from ki_core.models import DocumentVersion, MetadataArtifact

    folder = tmp_path / "akte"
    folder.mkdir()
    brief = ("Klageschrift\n\nBerlin, den 12. März 2024\n\nIn Sachen Meier ./. Schulz wegen Kündigung.\n"
             "Nach BGH, Urteil vom 8. Mai 2007 – VI ZR 1/06, ist die Kündigung unwirksam.\n")
    (folder / "klage.txt").write_text(brief, encoding="utf-8")
    (folder / "vermerk.txt").write_text("Vermerk\n\nBesprechung vom 3. Februar 2023 zur Klage.\n", encoding="utf-8")
    sync_folder(ctx, folder, "meier")
    cited, source_said = date(2007, 5, 8), date(2023, 2, 1)
    with ctx.sessions() as session, session.begin():
        versions = dict(session.execute(
            select(Document.key, DocumentVersion.id).join(DocumentVersion, DocumentVersion.document_id == Document.id)
        ).all())
        # As the previous release's extractor left them ("rules:2", which did not yet name the
        # identifier rules): its wrong date on the brief; a DMS date on the note.
        session.execute(update(MetadataArtifact).values(producer="rules:2"))
        brief_artifact = session.scalar(select(MetadataArtifact).where(
            MetadataArtifact.version_id == versions["klage"], MetadataArtifact.kind == "metadata"))
        brief_artifact.payload = {**brief_artifact.payload, "doc_date": cited.isoformat()}
        session.get(DocumentVersion, versions["klage"]).doc_date = cited
        session.get(DocumentVersion, versions["vermerk"]).doc_date = source_said

    report = rebuild_index(ctx)

    assert report.re_extracted_versions == 2 and report.metadata_changed_versions == 1
    with ctx.sessions() as session:
        assert session.get(DocumentVersion, versions["klage"]).doc_date == date(2024, 3, 12), "its own date line"
        assert session.get(DocumentVersion, versions["vermerk"]).doc_date == source_said, "the source's date stays"
        producers = set(session.scalars(select(MetadataArtifact.producer)))
    assert RuleBasedExtractor().producer in producers
    with ctx.sessions() as session:
        chunk_id = session.scalar(select(Chunk.id).where(Chunk.version_id == versions["klage"]))
    assert str(ctx.index().stored_fields(chunk_id)["doc_date"]) == "2024-03-12", "the rebuilt index carries it"
