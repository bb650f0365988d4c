"""What only the embedded backend has: files, one writer, readers, crash recovery, two kNN paths."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from unittest.mock import patch

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ki_core.search.embedded as embedded_module
import ki_core.search.vector_index as vector_module
from ki_core.config import Settings
from ki_core.search.chunk_store import ChunkStore
from ki_core.search.embedded import STORE_FILE, TABLE_FILE, TEXT_DIR, EmbeddedIndex, IndexLockedError
from ki_core.search.index import DeleteOp, IndexOp, SearchIndex, open_index
from ki_core.search.text_index import TextIndex, identifier_analyzer
from ki_core.search.types import (
    BulkFailure,
    Leg,
    MultiSearchRequest,
    ScopeFilter,
    SearchBackendError,
    SearchFilters,
)
from ki_core.search.vector_index import DENSE_FRACTION, best_first
from tests.ki_core.search.conftest import DIMS, EVERYTHING, FIXTURE_CHUNKS, admitted_ids, unit_vector, write_fixture
from tests.ki_core.search.test_contract import BROAD_QUERY, BY_ID, filter_sets, ids, scopes, search


@pytest.fixture
def index_path(tmp_path: Path) -> Path:
    return tmp_path / "index"


@pytest.fixture
def writer(index_path: Path):
    index = EmbeddedIndex(index_path, dimensions=DIMS)
    index.ensure()
    yield index
    index.close()


def consistent(path: Path) -> bool:
    """Both sides hold the same chunks at the same stamps."""
    text = TextIndex(path / TEXT_DIR, writable=False)
    store = ChunkStore(path / STORE_FILE, writable=False)
    try:
        return text.stamps() == store.alive_stamps()
    finally:
        store.close()


def test_open_index_builds_the_embedded_backend_under_the_state_dir(tmp_path: Path) -> None:
    settings = Settings(state_dir=str(tmp_path / ".ki"), embedding={"provider": "hashing", "dimensions": DIMS})
    with open_index(settings) as index:
        assert isinstance(index, EmbeddedIndex) and isinstance(index, SearchIndex)
        index.ensure()
        assert index.path == tmp_path / ".ki" / "index"
        assert (index.path / STORE_FILE).exists()


def test_the_index_persists_across_reopen(index_path: Path, writer: EmbeddedIndex) -> None:
    write_fixture(writer)
    before = search(writer, "Kündigungsfrist", vector=BY_ID[110].embedding)
    writer.close()
    with EmbeddedIndex(index_path, dimensions=DIMS) as reopened:
        after = search(reopened, "Kündigungsfrist", vector=BY_ID[110].embedding)
        assert reopened.count() == len(FIXTURE_CHUNKS)
    assert after == before


def test_a_stale_or_broken_saved_table_only_costs_a_replay_from_the_store(
    monkeypatch: pytest.MonkeyPatch, index_path: Path, writer: EmbeddedIndex
) -> None:
    monkeypatch.setattr(embedded_module, "COMPACT_MIN_DEAD", 5)
    write_fixture(writer)
    writer.close()
    stale = (index_path / TABLE_FILE).read_bytes()
    with EmbeddedIndex(index_path, dimensions=DIMS) as second:
        second.delete_document("doc-kv-1")
        second.bulk([IndexOp(chunk) for chunk in FIXTURE_CHUNKS[:12]])  # rewrites: a compaction, a new epoch
        expected = search(second, "Kündigung Vertrag", vector=BY_ID[103].embedding)
    for saved in (stale, b"not an npz file"):
        (index_path / TABLE_FILE).write_bytes(saved)
        with EmbeddedIndex(index_path, dimensions=DIMS, read_only=True) as reader:
            assert reader.count() == len(FIXTURE_CHUNKS) - 6
            assert search(reader, "Kündigung Vertrag", vector=BY_ID[103].embedding) == expected


def test_a_second_writer_is_refused_with_the_lock_path(index_path: Path, writer: EmbeddedIndex) -> None:
    with pytest.raises(IndexLockedError, match=str(index_path / "LOCK")):
        EmbeddedIndex(index_path, dimensions=DIMS)
    writer.close()
    EmbeddedIndex(index_path, dimensions=DIMS).close()


def test_a_reader_sees_each_commit_of_the_writer(index_path: Path, writer: EmbeddedIndex) -> None:
    write_fixture(writer)
    with EmbeddedIndex(index_path, dimensions=DIMS, read_only=True) as reader:
        assert reader.count() == len(FIXTURE_CHUNKS)
        writer.delete_document("doc-kv-1")
        writer.bulk([IndexOp(BY_ID[121].model_copy(update={"chunk_id": 700, "text": "Grundschuld bestellt"}))])
        reader.refresh()
        assert reader.count() == len(FIXTURE_CHUNKS) - 6 + 1
        assert ids(search(reader, "Grundschuld").hits(Leg.LEXICAL)) == {700}
        assert not ids(search(reader, vector=BY_ID[121].embedding).hits(Leg.SEMANTIC)) & {121, 122, 123}


def test_a_reader_refuses_writes_and_needs_an_existing_index(index_path: Path) -> None:
    with pytest.raises(SearchBackendError, match="no embedded search index"):
        EmbeddedIndex(index_path, dimensions=DIMS, read_only=True).ensure()
    EmbeddedIndex(index_path, dimensions=DIMS).close()
    with EmbeddedIndex(index_path, dimensions=DIMS, read_only=True) as reader:
        with pytest.raises(SearchBackendError, match="read-only"):
            reader.bulk([DeleteOp(1)])


@pytest.mark.parametrize(
    ("embedding", "reason"),
    [((1.0,) * (DIMS - 1), "dimensions"), ((0.0,) * DIMS, "zero vector"), ((float("nan"),) * DIMS, "non-finite")],
)
def test_an_unusable_vector_fails_its_item_with_the_reason(writer: EmbeddedIndex, embedding, reason) -> None:
    bad = BY_ID[101].model_copy(update={"chunk_id": 5, "embedding": embedding})
    with pytest.raises(BulkFailure, match=reason):
        writer.bulk([IndexOp(bad), IndexOp(BY_ID[102])])
    assert writer.count() == 1


def test_operations_of_one_bulk_apply_in_order(writer: EmbeddedIndex) -> None:
    chunk = BY_ID[103]
    writer.bulk([IndexOp(chunk), DeleteOp(chunk.chunk_id), IndexOp(BY_ID[104]), DeleteOp(104), IndexOp(BY_ID[104])])
    assert writer.stored_fields(103) is None
    assert ids(search(writer, "Kündigungsfrist").hits(Leg.LEXICAL)) == {104}


# ------------------------------------------------------------------ crashes


def test_a_failed_vector_write_leaves_both_sides_consistent(
    monkeypatch: pytest.MonkeyPatch, index_path: Path, writer: EmbeddedIndex
) -> None:
    write_fixture(writer)

    def disk_full(*args: object) -> None:
        raise OSError("No space left on device")

    monkeypatch.setattr(embedded_module, "append_rows", disk_full)
    changed = BY_ID[124].model_copy(update={"text": "Erbbaurecht am Grundstück"})
    with pytest.raises(OSError, match="No space"):
        writer.bulk([IndexOp(changed), IndexOp(BY_ID[101].model_copy(update={"chunk_id": 800}))])
    # Tantivy had committed the new text; reconciling dropped chunk 124 from both sides.
    assert search(writer, "Erbbaurecht").hits(Leg.LEXICAL) == ()
    assert writer.stored_fields(124) is None and writer.count() == len(FIXTURE_CHUNKS) - 1
    monkeypatch.undo()
    writer.bulk([IndexOp(changed)])
    assert ids(search(writer, "Erbbaurecht").hits(Leg.LEXICAL)) == {124}
    assert search(writer, vector=changed.embedding).hits(Leg.SEMANTIC)[0].chunk_id == 124
    writer.close()
    assert consistent(index_path)


def test_a_batch_that_fails_while_staging_publishes_nothing_of_it(
    monkeypatch: pytest.MonkeyPatch, index_path: Path, writer: EmbeddedIndex
) -> None:
    import ki_core.search.text_index as text_module

    real = text_module.chunk_document
    staged: list[int] = []

    def fail_on_second(chunk, stamp):
        staged.append(chunk.chunk_id)
        if len(staged) == 2:
            raise RuntimeError("tokenizer crashed")
        return real(chunk, stamp)

    monkeypatch.setattr(text_module, "chunk_document", fail_on_second)
    with pytest.raises(RuntimeError, match="tokenizer crashed"):
        writer.bulk([IndexOp(BY_ID[101]), IndexOp(BY_ID[102])])
    monkeypatch.undo()
    writer.bulk([IndexOp(BY_ID[103])])
    assert ids(search(writer, "Mietzeit entrichten").hits(Leg.LEXICAL)) == set()
    assert writer.count() == 1
    writer.close()
    assert consistent(index_path)


def test_a_negative_chunk_id_fails_its_item(writer: EmbeddedIndex) -> None:
    with pytest.raises(BulkFailure, match="negative") as failure:
        writer.bulk([IndexOp(BY_ID[101].model_copy(update={"chunk_id": -4})), IndexOp(BY_ID[102])])
    assert set(failure.value.failed) == {-4} and writer.count() == 1


def test_a_writer_killed_between_the_text_and_the_vector_commit_is_reconciled_on_open(
    index_path: Path, writer: EmbeddedIndex
) -> None:
    write_fixture(writer)
    writer.close()
    script = textwrap.dedent(
        f"""
        import os
        import ki_core.search.embedded as embedded
        from ki_core.search.embedded import EmbeddedIndex
        from ki_core.search.index import IndexOp
        from tests.ki_core.search.conftest import FIXTURE_CHUNKS
        embedded.append_rows = lambda *args: os._exit(9)  # the process dies after tantivy's commit
        index = EmbeddedIndex({str(index_path)!r}, dimensions={DIMS})
        chunk = FIXTURE_CHUNKS[0].model_copy(update={{"text": "Vorkaufsrecht des Mieters"}})
        index.bulk([IndexOp(chunk), IndexOp(FIXTURE_CHUNKS[1].model_copy(update={{"chunk_id": 900}}))])
        """
    )
    died = subprocess.run([sys.executable, "-c", script], cwd=Path(__file__).parents[3], capture_output=True)
    assert died.returncode == 9, died.stderr.decode()
    assert not consistent(index_path)
    with EmbeddedIndex(index_path, dimensions=DIMS) as reopened:
        assert search(reopened, "Vorkaufsrecht").hits(Leg.LEXICAL) == ()
        assert reopened.stored_fields(101) is None and reopened.stored_fields(900) is None
        assert reopened.count() == len(FIXTURE_CHUNKS) - 1
        reopened.bulk([IndexOp(BY_ID[101])])
        assert search(reopened, vector=BY_ID[122].embedding).hits(Leg.SEMANTIC)[0].chunk_id == 122
    assert consistent(index_path)


def test_compaction_rewrites_the_vectors_and_readers_follow(
    monkeypatch: pytest.MonkeyPatch, index_path: Path, writer: EmbeddedIndex
) -> None:
    monkeypatch.setattr(embedded_module, "COMPACT_MIN_DEAD", 5)
    write_fixture(writer)
    with EmbeddedIndex(index_path, dimensions=DIMS, read_only=True) as reader:
        reader.ensure()
        for _ in range(3):
            writer.bulk([IndexOp(chunk) for chunk in FIXTURE_CHUNKS[:12]])
        assert sorted(p.name for p in index_path.glob("vectors-*.f32")) != ["vectors-0.f32"]
        for index in (writer, reader):
            assert index.count() == len(FIXTURE_CHUNKS)
            for chunk_id in (102, 115, 128):
                top = search(index, vector=BY_ID[chunk_id].embedding).hits(Leg.SEMANTIC)[0]
                assert (top.chunk_id, top.score) == (chunk_id, pytest.approx(1.0, abs=1e-5))


# ------------------------------------------------------- filters and kNN paths


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scope=scopes, filters=filter_sets)
def test_the_tantivy_filter_admits_exactly_what_the_slot_mask_admits(
    shared_loaded_index, scope: ScopeFilter, filters: SearchFilters
) -> None:
    if not isinstance(shared_loaded_index, EmbeddedIndex):
        return
    text = shared_loaded_index.text
    expected = len(admitted_ids(scope, filters))
    assert shared_loaded_index.table.admitted(scope, filters).count == expected
    for known_projects in ((), shared_loaded_index.table.project_ids()):  # as a term set, and as exclusions
        strict = text.strict_filter(scope, filters, known_projects)
        assert text.index.searcher().search(strict.query(), 100).count == expected


BROAD_FILTERS = [SearchFilters(), SearchFilters(chunk_kind="chunk"), SearchFilters(doc_type="contract"),
                 SearchFilters(version_status="final")]  # fmt: skip


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scope=scopes, filters=st.sampled_from(BROAD_FILTERS), size=st.integers(1, 30))
def test_post_filtering_a_long_scope_ranks_exactly_like_the_term_set_filter(
    shared_loaded_index, scope: ScopeFilter, filters: SearchFilters, size: int
) -> None:
    if not isinstance(shared_loaded_index, EmbeddedIndex):
        return
    request = MultiSearchRequest(query_text=BROAD_QUERY + " § 573c BGB", query_vector=None, scope=scope,
                                 filters=filters, size=size)  # fmt: skip
    exact = shared_loaded_index.multi_search(request)
    with patch.object(embedded_module, "LARGE_SCOPE_TERMS", -1):
        post_filtered = shared_loaded_index.multi_search(request)
    assert post_filtered == exact


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scope=scopes, filters=st.sampled_from(BROAD_FILTERS), size=st.integers(1, 30),
       all_matches=st.sampled_from([0, 1, 5, 10_000]))  # fmt: skip
def test_ranking_every_counted_match_of_a_narrow_long_scope_is_exact_too(
    shared_loaded_index, scope: ScopeFilter, filters: SearchFilters, size: int, all_matches: int
) -> None:
    """The path a scope admitting few rows takes (its oversampled window would be too deep): the
    matches are counted, and at most POST_FILTER_ALL_MATCHES of them are all ranked and masked;
    more, and the term set runs. Both must give the term set's ranking."""
    if not isinstance(shared_loaded_index, EmbeddedIndex):
        return
    request = MultiSearchRequest(query_text=BROAD_QUERY + " § 573c BGB", query_vector=None, scope=scope,
                                 filters=filters, size=size)  # fmt: skip
    exact = shared_loaded_index.multi_search(request)
    with (
        patch.object(embedded_module, "LARGE_SCOPE_TERMS", -1),
        patch.object(embedded_module, "POST_FILTER_MAX_WINDOW", 0),
        patch.object(embedded_module, "POST_FILTER_ALL_MATCHES", all_matches),
    ):
        counted = shared_loaded_index.multi_search(request)
    assert counted == exact


@pytest.mark.parametrize(
    "scope",
    [EVERYTHING, ScopeFilter(project_ids=frozenset({"proj-kauf"})), ScopeFilter(document_ids=frozenset({"doc-mv-2"}))],
    ids=["split scan", "one scan", "tiny scan"],
)
def test_semantic_leg_is_the_exact_top_k_inside_the_filter(
    monkeypatch: pytest.MonkeyPatch, writer: EmbeddedIndex, scope: ScopeFilter
) -> None:
    monkeypatch.setattr(vector_module, "DENSE_MIN_ROWS", 0)
    write_fixture(writer)
    admitted = sorted(admitted_ids(scope, None))
    fraction = len(admitted) / len(FIXTURE_CHUNKS)
    assert (fraction >= DENSE_FRACTION) == (scope is EVERYTHING)
    query = np.array(unit_vector("kNN"))
    cosines = {c: float(np.dot(query, BY_ID[c].embedding)) for c in admitted}
    expected = sorted(cosines.values(), reverse=True)[:5]
    hits = writer.multi_search(
        MultiSearchRequest(query_text="", query_vector=tuple(query), scope=scope, size=5)
    ).hits(Leg.SEMANTIC)
    assert [hit.score for hit in hits] == pytest.approx(expected, abs=1e-5)
    assert all(cosines[hit.chunk_id] == pytest.approx(hit.score, abs=1e-5) for hit in hits)


def test_the_split_scan_merge_orders_by_score_then_slot_like_a_lexsort() -> None:
    """Duplicate texts embed to equal vectors, so equal scores are common: they must come out by slot."""
    rng = np.random.default_rng(17)
    scores = rng.choice(np.linspace(-0.4, 0.9, 300), 5_000).astype(np.float32)  # many ties, negatives too
    slots = rng.permutation(60_000)[:5_000].astype(np.int64)
    for k in (1, 37, 2_500, 5_000, 6_000):
        expected = np.lexsort((slots, -scores))[:k]
        assert best_first(slots, scores, k).tolist() == expected.tolist()
    assert best_first(slots, scores, 0).tolist() == []


def test_identifier_tokens_keep_case_numbers_and_paragraph_letters_whole() -> None:
    tokens = identifier_analyzer().analyze("BGH VIII ZR 123/20, § 573c BGB; ECLI:DE:BGH:2021:123 HRB 12345 B.")
    assert tokens == ["bgh", "viii", "zr", "123/20", "§", "573c", "bgb", "ecli:de:bgh:2021:123", "hrb", "12345", "b"]
