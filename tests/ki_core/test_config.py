"""Configuration: spec defaults, config.json, KI_* overrides, and errors that name the key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ki_core.config import ConfigError, load_settings, mask_url_password, masked_dump

# The configuration table of spec/retrieval.md, verbatim.
SPEC_RETRIEVAL_DEFAULTS = {
    "index_name": "knowledge-index-chunks-v1",
    "vector_engine": "lucene",
    "vector_space_type": "cosinesimil",
    "hnsw_m": 16,
    "hnsw_ef_construction": 128,
    "chunk_chars": 1200,
    "chunk_overlap_chars": 120,
    "chunk_contextualize": True,
    "profile_embeddings": True,
    "clause_embeddings": True,
    "fusion_rrf_k": 60,
    "weight_lexical": 1.0,
    "weight_semantic": 1.0,
    "weight_identifier": 1.5,
    "weight_decisions": 0.8,
    "version_status_boost": {"executed": 1.2, "final": 1.0, "unknown": 0.8, "draft": 0.7},
    "collapse_per_document": True,
    "max_chunks_per_document": 3,
    "graph_rag_enabled": False,
}
# rerank_enabled is amended (amendments.md 3): on, with the offline ranker (tests/ki_query/rerank).


@pytest.mark.parametrize("key,expected", SPEC_RETRIEVAL_DEFAULTS.items())
def test_every_retrieval_default_of_the_spec(key: str, expected: object) -> None:
    assert getattr(load_settings().retrieval, key) == expected


def test_embedding_dimensions_default_is_the_gateway_models_1536() -> None:
    settings = load_settings(embedding={"provider": "gateway"})
    assert settings.effective_embedding_dimensions == 1536


@pytest.mark.parametrize("provider,dims", [("e5-small", 384), ("use-multilingual", 512)])
def test_embedding_dimensions_follow_the_offline_embedder(provider: str, dims: int) -> None:
    assert load_settings(embedding={"provider": provider}).effective_embedding_dimensions == dims


def test_dimensions_that_disagree_with_the_embedder_fail_naming_both() -> None:
    with pytest.raises(ConfigError) as err:
        load_settings(embedding={"provider": "e5-small"}, retrieval={"embedding_dimensions": 1536})
    message = str(err.value)
    assert "retrieval.embedding_dimensions is 1536" in message
    assert "e5-small" in message and "384" in message


def test_explicit_dimensions_equal_to_the_embedders_are_accepted() -> None:
    settings = load_settings(embedding={"provider": "e5-small"}, retrieval={"embedding_dimensions": 384})
    assert settings.effective_embedding_dimensions == 384


def test_security_defaults() -> None:
    security = load_settings().security
    assert security.source_acl_mode == "sufficient"
    assert security.principal_aliases == {}
    assert security.admin_principals == ["role:admin", "system:admin"]


def test_database_defaults_to_a_sqlite_file_under_the_state_dir() -> None:
    assert load_settings().database_url == "sqlite:///.ki/ki.db"


def test_search_backend_defaults_to_embedded() -> None:
    assert load_settings().search.backend == "embedded"


def test_env_overrides_a_scalar(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KI_RETRIEVAL__FUSION_RRF_K", "30")
    assert load_settings().retrieval.fusion_rrf_k == 30


MERGED_BOOSTS = {"executed": 2.0, "final": 1.0, "unknown": 0.8, "draft": 0.7, "superseded": 0.1}


def test_an_env_map_changes_the_keys_it_names_and_keeps_the_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KI_RETRIEVAL__VERSION_STATUS_BOOST", '{"executed": 2.0, "superseded": 0.1}')
    assert load_settings().retrieval.version_status_boost == MERGED_BOOSTS


def test_an_env_map_merges_the_same_way_over_the_shipped_config_json(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    shipped = json.loads((Path(__file__).parents[2] / "config.json").read_text(encoding="utf-8"))
    (tmp_path / "config.json").write_text(json.dumps(shipped), encoding="utf-8")
    monkeypatch.setenv("KI_RETRIEVAL__VERSION_STATUS_BOOST", '{"executed": 2.0, "superseded": 0.1}')
    assert load_settings().retrieval.version_status_boost == MERGED_BOOSTS


def test_a_config_json_map_merges_over_the_defaults_too(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"retrieval": {"version_status_boost": {"draft": 0.2}}}),
                                          encoding="utf-8")  # fmt: skip
    assert load_settings().retrieval.version_status_boost == {"executed": 1.2, "final": 1.0, "unknown": 0.8, "draft": 0.2}


def test_env_overrides_a_doubly_nested_field(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KI_SEARCH__OPENSEARCH__TIMEOUT_SECONDS", "2.5")
    assert load_settings().search.opensearch.timeout_seconds == 2.5


def test_config_json_is_read_and_env_wins_over_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "config.json").write_text(
        json.dumps({"retrieval": {"fusion_rrf_k": 10, "hnsw_m": 32}}), encoding="utf-8"
    )
    monkeypatch.setenv("KI_RETRIEVAL__FUSION_RRF_K", "20")
    settings = load_settings()
    assert settings.retrieval.fusion_rrf_k == 20
    assert settings.retrieval.hnsw_m == 32


def test_bad_env_value_names_the_dotted_key_and_type(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KI_RETRIEVAL__FUSION_RRF_K", "abc")
    with pytest.raises(ConfigError) as err:
        load_settings()
    assert "retrieval.fusion_rrf_k" in str(err.value)
    assert "integer" in str(err.value)


def test_unknown_key_in_config_json_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"retrieval": {"fusion_rrk": 1}}))
    with pytest.raises(ConfigError, match="retrieval.fusion_rrk"):
        load_settings()


def test_malformed_config_json_is_an_error_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ConfigError, match="config.json"):
        load_settings()


def test_named_config_file_must_exist(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KI_CONFIG_FILE", "/nonexistent/ki.json")
    with pytest.raises(ConfigError, match="KI_CONFIG_FILE"):
        load_settings()


def test_bad_enum_value_names_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KI_SECURITY__SOURCE_ACL_MODE", "loose")
    with pytest.raises(ConfigError, match="security.source_acl_mode"):
        load_settings()


def test_overlap_must_be_smaller_than_the_chunk_window() -> None:
    with pytest.raises(ConfigError, match="chunk_overlap_chars"):
        load_settings(retrieval={"chunk_chars": 100, "chunk_overlap_chars": 100})


def test_masked_dump_hides_every_secret() -> None:
    settings = load_settings(
        database={"url": "postgresql+psycopg://ki:s3cret@db/ki"},
        embedding={"provider": "gateway", "api_key": "sk-embed"},
        llm={"api_key": "sk-llm"},
        search={"opensearch": {"password": "os-pass"}},
        broker={"url": "redis://:brokerpw@redis:6379/0"},
    )
    dumped = json.dumps(masked_dump(settings))
    for secret in ("s3cret", "sk-embed", "sk-llm", "os-pass", "brokerpw"):
        assert secret not in dumped


def test_mask_url_password_keeps_user_and_host() -> None:
    assert mask_url_password("postgresql://u:p@h:5432/d") == "postgresql://u:********@h:5432/d"
    assert mask_url_password("sqlite:///x.db") == "sqlite:///x.db"


def test_repository_config_json_holds_the_defaults() -> None:
    """The shipped config.json documents the defaults; it must not drift from them."""
    shipped = json.loads((Path(__file__).parents[2] / "config.json").read_text(encoding="utf-8"))
    defaults = load_settings().model_dump(mode="json")
    assert shipped == defaults


def test_rrf_k_must_be_positive(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KI_RETRIEVAL__FUSION_RRF_K", "0")
    with pytest.raises(ConfigError, match="retrieval.fusion_rrf_k"):
        load_settings()


def test_event_retention_must_be_a_whole_day_or_more(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KI_SWEEP__PROCESSED_EVENT_RETENTION_DAYS", "0")
    with pytest.raises(ConfigError, match="sweep.processed_event_retention_days"):
        load_settings()


def test_event_retention_must_outlast_the_signature_replay_window(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KI_SWEEP__PROCESSED_EVENT_RETENTION_DAYS", "1")
    monkeypatch.setenv("KI_DMS__SIGNATURE_TOLERANCE_SECONDS", str(12 * 3600))
    with pytest.raises(ConfigError, match=r"sweep\.processed_event_retention_days \(1\).*dms\.signature_tolerance_seconds"):
        load_settings()
    monkeypatch.setenv("KI_DMS__SIGNATURE_TOLERANCE_SECONDS", str(12 * 3600 - 1))
    assert load_settings().sweep.processed_event_retention_days == 1


def test_opensearch_with_an_engine_that_cannot_filter_inside_knn_is_refused() -> None:
    """The access scope is the filter inside the k-NN query: an engine that ignores it must not start."""
    with pytest.raises(ConfigError, match=r"retrieval\.vector_engine 'nmslib' cannot filter"):
        load_settings(search={"backend": "opensearch"}, retrieval={"vector_engine": "nmslib"})
    for engine in ("lucene", "faiss"):
        assert load_settings(search={"backend": "opensearch"}, retrieval={"vector_engine": engine}).retrieval.vector_engine == engine
    # The embedded backend has no such engine; the key is simply not used there.
    assert load_settings(retrieval={"vector_engine": "nmslib"}).retrieval.vector_engine == "nmslib"
