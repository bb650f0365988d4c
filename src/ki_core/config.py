"""Settings: `config.json` < environment `KI_<SECTION>__<FIELD>` < explicit arguments.

Every module reads configuration through `Settings`; nothing reads the
environment directly.  A bad value stops start-up with a message that names
the dotted key (`retrieval.fusion_rrf_k`) and the expected type, because the
operator who set `KI_RETRIEVAL__FUSION_RRF_K=abc` needs the key, not a traceback.
"""

from __future__ import annotations

import json
import os
from datetime import timedelta
from functools import cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    JsonConfigSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

CONFIG_FILE_ENV = "KI_CONFIG_FILE"
DEFAULT_CONFIG_FILE = "config.json"
DEFAULT_STATE_DIR = ".ki"
API_KEYS_FILE = "api_keys.json"


class ConfigError(ValueError):
    """A configuration value is missing, malformed or inconsistent."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)


# OpenSearch k-NN engines that apply a filter while searching the graph (efficient filtering).
FILTERING_KNN_ENGINES = ("lucene", "faiss")


DEFAULT_VERSION_STATUS_BOOST: dict[str, float] = {"executed": 1.2, "final": 1.0, "unknown": 0.8, "draft": 0.7}


class RetrievalSettings(_Section):
    """The `retrieval.*` table of spec/retrieval.md, defaults verbatim."""

    index_name: str = "knowledge-index-chunks-v1"
    # None: follow the configured embedder (see Settings.effective_embedding_dimensions).
    embedding_dimensions: int | None = Field(default=None, gt=0)
    vector_engine: Literal["lucene", "faiss", "nmslib"] = "lucene"
    vector_space_type: Literal["cosinesimil", "innerproduct", "l2"] = "cosinesimil"
    hnsw_m: int = Field(default=16, gt=0)
    hnsw_ef_construction: int = Field(default=128, gt=0)
    # Not in the spec's table: the longest query accepted (longer is refused, 400 / exit 2). A query
    # is embedded under the model's lock; a pasted brief of 60,000 characters held it for a minute.
    max_query_chars: int = Field(default=4000, gt=0)
    # Not in the spec's table either: how long one search may take, the wait for the embedding
    # model (busy with indexing or another query) included; past it the caller gets a 503.
    query_budget_seconds: float = Field(default=10.0, gt=0)
    chunk_chars: int = Field(default=1200, gt=0)
    chunk_overlap_chars: int = Field(default=120, ge=0)
    chunk_contextualize: bool = True
    profile_embeddings: bool = True
    clause_embeddings: bool = True
    # k = 0 would divide by zero at rank 0.
    fusion_rrf_k: int = Field(default=60, gt=0)
    weight_lexical: float = Field(default=1.0, ge=0)
    weight_semantic: float = Field(default=1.0, ge=0)
    weight_identifier: float = Field(default=1.5, ge=0)
    # Not in the spec's table: statute corpora with several laws multiply each fused score by
    # 1 + this x P(law of the hit | question), the law prior of ki_query/law_prior.py; 0 turns it off.
    # Own dev sets (tests/fixtures/eval), nDCG@10: 16 laws 0.330 -> 0.375, four laws 0.306 -> 0.31.
    law_prior_strength: float = Field(default=1.0, ge=0)
    # Declared by the spec; search_decisions scores by token overlap and does not read it.
    weight_decisions: float = Field(default=0.8, ge=0)
    version_status_boost: dict[str, float] = Field(default_factory=lambda: dict(DEFAULT_VERSION_STATUS_BOOST))
    collapse_per_document: bool = True
    max_chunks_per_document: int = Field(default=3, gt=0)
    # Amended (issue 19, spec/amendments.md): the reranker is on by default and, unless
    # rerank_provider says "gateway" (the LLM reranker, production), it is the offline learned
    # ranker of ki_query/rerank (no network, about a millisecond).
    rerank_enabled: bool = True
    rerank_provider: Literal["offline", "gateway"] = "offline"
    # The gateway's model name (rerank_provider "gateway").
    rerank_model: str = "rerank"
    # The offline ranker's model file (bench/train_reranker.py writes one); None: the shipped model.
    rerank_model_path: str | None = None
    # Declared by the spec; not read by the retrieval code.
    graph_rag_enabled: bool = False

    @field_validator("version_status_boost", mode="before")
    @classmethod
    def _boosts_merge_over_the_defaults(cls, value: Any) -> Any:
        """Maps merge key by key, from whichever source: `{"executed": 1.5}` changes the executed
        boost and keeps the others, with or without a config.json (pydantic-settings merges
        config.json and environment maps that way; this extends it to the defaults)."""
        return {**DEFAULT_VERSION_STATUS_BOOST, **value} if isinstance(value, dict) else value

    @model_validator(mode="after")
    def _overlap_smaller_than_window(self) -> RetrievalSettings:
        if self.chunk_overlap_chars >= self.chunk_chars:
            raise ValueError(
                "retrieval.chunk_overlap_chars must be smaller than retrieval.chunk_chars "
                f"({self.chunk_overlap_chars} >= {self.chunk_chars})"
            )
        return self


class ApiKeySettings(_Section):
    """A service's API key: only its SHA-256 is configured, never the key itself."""

    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    principals: list[str] = Field(min_length=1)
    # May search on behalf of a principal named in X-KI-On-Behalf-Of (a trusted front end).
    on_behalf_of: bool = False
    # What such a front end may name: shell-style patterns, casefolded ("*@kanzlei.de", "group:team-*").
    # An admin principal (security.admin_principals) is refused unless a pattern names it exactly.
    on_behalf_of_principals: list[str] = Field(default_factory=lambda: ["*"])


class JwtSettings(_Section):
    """Bearer tokens of users, verified with the issuer's keys: a static PEM key, or its JWKS.

    Without `public_key` the keys come from `jwks_uri`, or, when that is unset too, from the
    issuer's OpenID discovery document (`<issuer>/.well-known/openid-configuration`).
    """

    issuer: str
    audience: str | None = None
    # PEM public key (file path or the PEM text itself); None: the issuer's JWKS.
    public_key: str | None = None
    jwks_uri: str | None = None
    # Keys are fetched again after this long, and at once for a token signed with an unknown `kid`,
    # but not more often than jwks_min_refetch_seconds (a flood of forged kids must not flood the issuer).
    jwks_cache_seconds: int = Field(default=600, ge=0)
    jwks_min_refetch_seconds: float = Field(default=10.0, ge=0)
    algorithms: list[str] = Field(default_factory=lambda: ["RS256", "ES256"])
    principal_claim: str = "sub"
    # Further claims naming the same user (e.g. "email"), each a principal of its own; aliases map them.
    also_principal_claims: list[str] = Field(default_factory=list)
    groups_claim: str | None = "groups"
    leeway_seconds: int = Field(default=30, ge=0)


class OidcSettings(_Section):
    """The web page's sign-in through the firm's directory (authorization code + PKCE).

    The access token it receives is checked like any bearer token (security.jwt), so the
    issuer must be the same one.
    """

    client_id: str
    client_secret: SecretStr | None = None
    scope: str = "openid profile email"
    # The page's public address, for the redirect URI; None: taken from the request.
    public_url: str | None = None


class ThrottleSettings(_Section):
    """Failed API keys and bearer tokens per client address (ki_query.throttle, which says why there is no
    limit per claimed subject: no credential ki checks pairs a claimed name with a guessable secret)."""

    failures: int = Field(default=10, gt=0)
    window_seconds: int = Field(default=60, gt=0)
    # `limits` storage: per process by default; "redis://host:6379/1" shares the count among api processes.
    storage_uri: str = "memory://"


class SecuritySettings(_Section):
    source_acl_mode: Literal["sufficient", "intersect"] = "sufficient"
    principal_aliases: dict[str, str] = Field(default_factory=dict)
    admin_principals: list[str] = Field(default_factory=lambda: ["role:admin", "system:admin"])
    # name -> key; HTTP and MCP callers authenticate with one of these or a JWT. The keys of
    # `api_keys_file` (where `ki keys create` writes) join these; a name set here wins.
    api_keys: dict[str, ApiKeySettings] = Field(default_factory=dict)
    # None: `<state_dir>/api_keys.json`, kept out of the tracked config.json.
    api_keys_file: str | None = None
    jwt: JwtSettings | None = None
    oidc: OidcSettings | None = None
    throttle: ThrottleSettings = Field(default_factory=ThrottleSettings)


class AuditSettings(_Section):
    """The audit trail of reads (ki_core.audit)."""

    # Records older than this are deleted (at most once an hour, by the process that writes).
    # Ten years: the retention German professional law asks of a lawyer's files (§ 50 BRAO).
    retention_days: int = Field(default=3650, gt=0)


class DatabaseSettings(_Section):
    # None: a SQLite file under the state directory (the embedded default).
    url: str | None = None
    echo: bool = False
    pool_size: int = Field(default=5, gt=0)


class OpenSearchSettings(_Section):
    hosts: list[str] = Field(default_factory=lambda: ["http://127.0.0.1:9200"])
    username: str | None = None
    password: SecretStr | None = None
    use_ssl: bool = False
    verify_certs: bool = True
    ca_certs: str | None = None
    timeout_seconds: float = Field(default=10.0, gt=0)
    # A search (multi-search, filter listing) gives up after this long: a hung or stopped node answers
    # the caller 503 within 2 s instead of holding it (timeout_seconds is for writes and upkeep).
    query_timeout_seconds: float = Field(default=1.5, gt=0)
    max_retries: int = Field(default=3, ge=0)
    number_of_shards: int = Field(default=1, gt=0)
    number_of_replicas: int = Field(default=1, ge=0)
    # _bulk requests in flight at once (bench/bare_node.py: the node builds HNSW graphs on several
    # threads while one request waits, so two in flight beat one; more only queue on 2 cores).
    bulk_concurrency: int = Field(default=2, gt=0)


class EmbeddedSearchSettings(_Section):
    # None: `<state_dir>/index`.
    path: str | None = None
    commit_batch_chunks: int = Field(default=2000, gt=0)


class SearchSettings(_Section):
    backend: Literal["embedded", "opensearch"] = "embedded"
    embedded: EmbeddedSearchSettings = Field(default_factory=EmbeddedSearchSettings)
    opensearch: OpenSearchSettings = Field(default_factory=OpenSearchSettings)


class BrokerSettings(_Section):
    url: str = "redis://127.0.0.1:6379/0"
    # Embedded mode runs tasks in-process (Celery eager); production sets false.
    eager: bool = True
    visibility_timeout_seconds: int = Field(default=3600, gt=0)
    # The ingress publishes the events accepted within this window together, in one pipeline:
    # a publish each was a quarter of its CPU. The cost is this much delay before a worker starts.
    publish_linger_seconds: float = Field(default=0.1, ge=0, le=5)


# Dimensions of the embedders we ship; the gateway's is configured.
EMBEDDER_DIMENSIONS: dict[str, int] = {"e5-small": 384, "use-multilingual": 512}
GATEWAY_DEFAULT_DIMENSIONS = 1536


class EmbeddingSettings(_Section):
    # e5-small: the better German retrieval quality (README, "Embedders"); USE is ~10x faster.
    provider: Literal["e5-small", "use-multilingual", "gateway", "hashing"] = "e5-small"
    # Gateway model name, or the hashing embedder's label.
    model: str = "text-embedding-3-small"
    # Only read for the gateway and hashing providers; offline models fix their own.
    dimensions: int | None = Field(default=None, gt=0)
    batch_size: int = Field(default=32, gt=0)
    base_url: str | None = None
    api_key: SecretStr | None = None
    timeout_seconds: float = Field(default=30.0, gt=0)
    # None: `<state_dir>/embeddings`.
    cache_dir: str | None = None

    def label(self) -> str:
        """How the embedder is named in messages and index names."""
        if self.provider in ("gateway", "hashing"):
            return f"{self.provider}:{self.model}"
        return self.provider

    def native_dimensions(self) -> int:
        """The dimension the configured embedder produces."""
        if self.provider in EMBEDDER_DIMENSIONS:
            return EMBEDDER_DIMENSIONS[self.provider]
        if self.dimensions is not None:
            return self.dimensions
        return GATEWAY_DEFAULT_DIMENSIONS if self.provider == "gateway" else 384


class LLMSettings(_Section):
    base_url: str | None = None
    api_key: SecretStr | None = None
    model: str = "gpt-4o-mini"
    timeout_seconds: float = Field(default=60.0, gt=0)
    max_retries: int = Field(default=3, ge=0)
    # rules: deterministic German extractor (offline default); llm: the gateway.
    metadata_extractor: Literal["rules", "llm"] = "rules"


class FederationSettings(_Section):
    max_corpora_per_query: int = Field(default=4, gt=0)
    min_hits_per_corpus: int = Field(default=2, ge=0)
    # spec/federation.md says 0.25, meant for scores where off-topic hits are near zero. On the
    # calibrated level (federation/ranking.py) legal corpora without the answer still reach 20-80 % of
    # the best level with e5, so 0.25 rescued nearly every corpus: the quota then cost 0.033 nDCG@10 on
    # the dev statute queries (0.252 against 0.266 for statutes alone); at 0.85 it keeps its intent,
    # rescuing a corpus that is nearly as strong (0.285). See docs/federation.md.
    min_ratio: float = Field(default=0.85, ge=0, le=1)
    max_verweis_normen: int = Field(default=3, ge=0)
    anchors_file: str | None = None
    # Each corpus's levels times floor + (1 - floor) x (P(corpus | question) / P(likeliest corpus)) ** this,
    # from one law prior over the laws of all corpora (federation/corpus_prior.py); 0 weighs no corpus.
    # Chosen on the own sets (tests/fixtures/eval), not on the dev queries: with e5-small beside extra16,
    # nDCG@10 minus the corpus alone over 456 own questions is -0.056 at 0, -0.034 at 0.02-0.05 and
    # -0.049 at 1; the prior names the right corpus for only ~70 % of them (docs/federation.md).
    corpus_prior_strength: float = Field(default=0.05, ge=0)
    # The least weight a corpus keeps: the prior reads only the question's words and is sometimes sure and
    # wrong, so a weight may reorder the corpora but never push one out of the candidates.
    corpus_prior_floor: float = Field(default=0.5, ge=0, le=1)


class DmsSourceSettings(_Section):
    """One DMS that may call `POST /webhooks/<name>`."""

    # HMAC-SHA256 key of the webhook signature; `previous_secret` is also accepted during a rotation.
    secret: SecretStr
    previous_secret: SecretStr | None = None
    # Content given by URL must lie under this base (a relative URL is joined to it).
    content_base_url: str | None = None
    # Sent as `Authorization: Bearer <token>` when fetching content.
    content_token: SecretStr | None = None


class DmsSettings(_Section):
    sources: dict[str, DmsSourceSettings] = Field(default_factory=dict)
    # A signed request older (or newer) than this is a replay or a clock problem: 401.
    signature_tolerance_seconds: int = Field(default=300, gt=0)
    # Inline base64 content makes bodies large; bigger documents should be sent by URL.
    max_body_bytes: int = Field(default=10 * 1024 * 1024, gt=0)
    max_content_bytes: int = Field(default=50 * 1024 * 1024, gt=0)
    fetch_timeout_seconds: float = Field(default=30.0, gt=0)
    fetch_attempts: int = Field(default=3, gt=0)

    def replay_horizon(self) -> timedelta:
        """After this long from its acceptance, a captured signed request is outside the window in any direction."""
        return timedelta(seconds=2 * self.signature_tolerance_seconds)


class SweepSettings(_Section):
    interval_seconds: int = Field(default=60, gt=0)
    # An accepted event not finished after this long lost its message or its worker: dispatch it again.
    # Longer than the task retry backoff cap (300 s), so a retry waiting its turn is rarely doubled.
    event_redispatch_after_seconds: int = Field(default=300, gt=0)
    # Runs (claims) of one event before it is marked failed: a poison event must not loop forever.
    max_event_attempts: int = Field(default=12, gt=0)
    # A version stuck in converted/extracted this long lost its stage task.
    stuck_version_after_seconds: int = Field(default=900, gt=0)
    reconcile_interval_seconds: int = Field(default=3600, gt=0)
    # Processed (`done`) events are deleted this long after they finished; failed and parked ones stay.
    processed_event_retention_days: int = Field(default=30, ge=1)


class IngestSettings(_Section):
    # Bigger files are skipped and reported, not read: a 2 GB scan (or a 20 MB log, ~20,000 chunks,
    # most of an hour with e5) would hold up the folder. `ki ingest --max-file-mb` overrides it.
    max_file_mb: float = Field(default=50.0, gt=0)
    # Files at least this big get a warning line before the work starts (they take a while).
    large_file_mb: float = Field(default=2.0, gt=0)
    # 1: an in-process folder sync of many new files runs the metadata rules in a helper
    # process while it ingests the next files (stages.rules_ahead); 0: in its own process.
    # On a single core set 0: the helper would only take turns with the sync. Celery workers do
    # not use it (their pool is their parallelism).
    helper_processes: int = Field(default=1, ge=0, le=1)


class FlowerSettings(_Section):
    """The Celery monitor (Procfile `flower`, started by `python -m ki.flower`): it shows task
    arguments and can revoke tasks and shut workers down, so it never runs without a password."""

    # "user:password" (several separated by commas), Flower's --basic-auth; no default on purpose.
    basic_auth: SecretStr | None = None
    # Loopback unless configured: reach it through an SSH tunnel or a reverse proxy.
    address: str = "127.0.0.1"
    port: int = Field(default=5555, gt=0, lt=65536)


class Settings(BaseSettings):
    """The effective configuration of one process."""

    model_config = SettingsConfigDict(
        env_prefix="KI_",
        env_nested_delimiter="__",
        extra="forbid",
        validate_default=True,
    )

    state_dir: str = DEFAULT_STATE_DIR
    retrieval: RetrievalSettings = Field(default_factory=RetrievalSettings)
    security: SecuritySettings = Field(default_factory=SecuritySettings)
    database: DatabaseSettings = Field(default_factory=DatabaseSettings)
    search: SearchSettings = Field(default_factory=SearchSettings)
    broker: BrokerSettings = Field(default_factory=BrokerSettings)
    embedding: EmbeddingSettings = Field(default_factory=EmbeddingSettings)
    llm: LLMSettings = Field(default_factory=LLMSettings)
    federation: FederationSettings = Field(default_factory=FederationSettings)
    dms: DmsSettings = Field(default_factory=DmsSettings)
    sweep: SweepSettings = Field(default_factory=SweepSettings)
    ingest: IngestSettings = Field(default_factory=IngestSettings)
    audit: AuditSettings = Field(default_factory=AuditSettings)
    flower: FlowerSettings = Field(default_factory=FlowerSettings)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        json_file = config_file_path()
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        if json_file is not None:
            sources.append(JsonConfigSettingsSource(settings_cls, json_file=json_file))
        return tuple(sources)

    @model_validator(mode="after")
    def _dimensions_match_embedder(self) -> Settings:
        native = self.embedding.native_dimensions()
        configured = self.retrieval.embedding_dimensions
        if configured is not None and configured != native:
            raise ValueError(
                f"retrieval.embedding_dimensions is {configured} but the configured embedder "
                f"{self.embedding.label()} "
                f"produces {native} dimensions; unset one or make them agree"
            )
        return self

    @model_validator(mode="after")
    def _vector_engine_filters_inside_knn(self) -> Settings:
        # The access scope travels as the filter inside the k-NN query; an engine that cannot
        # apply one there (nmslib) is refused up front.
        engine = self.retrieval.vector_engine
        if self.search.backend == "opensearch" and engine not in FILTERING_KNN_ENGINES:
            raise ValueError(
                f"retrieval.vector_engine {engine!r} cannot filter inside a k-NN search, which the "
                "access scope needs on search.backend 'opensearch'; use 'lucene' (default) or 'faiss'"
            )
        return self

    @model_validator(mode="after")
    def _retention_outlasts_the_replay_window(self) -> Settings:
        retention = timedelta(days=self.sweep.processed_event_retention_days)
        if retention <= self.dms.replay_horizon():
            raise ValueError(
                f"sweep.processed_event_retention_days ({self.sweep.processed_event_retention_days}) must be longer "
                f"than twice dms.signature_tolerance_seconds ({self.dms.signature_tolerance_seconds} s): "
                "a deleted event's signed request could otherwise be replayed and accepted as new"
            )
        return self

    @model_validator(mode="after")
    def _keys_from_the_keys_file(self) -> Settings:
        """`ki serve`, MCP and `ki keys list` read the keys file as they read config.json and KI_SECURITY__API_KEYS."""
        stored = read_keys_file(self.api_keys_path)
        self.security.api_keys = {**stored, **self.security.api_keys}
        return self

    @property
    def api_keys_path(self) -> Path:
        return Path(self.security.api_keys_file or Path(self.state_dir) / API_KEYS_FILE)

    @property
    def effective_embedding_dimensions(self) -> int:
        return self.retrieval.embedding_dimensions or self.embedding.native_dimensions()

    @property
    def database_url(self) -> str:
        return self.database.url or f"sqlite:///{Path(self.state_dir) / 'ki.db'}"

    @property
    def audit_database_url(self) -> str:
        """PostgreSQL: the store's database. SQLite: `audit.db` beside the store's file, so a search's
        record never waits for the single SQLite writer an ingest holds."""
        url = self.database_url
        if url.startswith("sqlite"):
            return f"sqlite:///{Path(self.state_dir) / 'audit.db'}"
        return url

    @property
    def embedded_index_path(self) -> Path:
        return Path(self.search.embedded.path or Path(self.state_dir) / "index")

    @property
    def embedding_cache_dir(self) -> Path:
        return Path(self.embedding.cache_dir or Path(self.state_dir) / "embeddings")


def read_keys_file(path: Path) -> dict[str, ApiKeySettings]:
    """The keys `ki keys create` stored in PATH ({name: key settings}); none when it does not exist."""
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        return {name: ApiKeySettings.model_validate(spec) for name, spec in data.items()}
    except (ValueError, ValidationError) as exc:
        raise ValueError(f"API keys file {path}: {exc}") from None


def config_file_path() -> Path | None:
    """`$KI_CONFIG_FILE` if set (it must exist), else `./config.json` when present."""
    named = os.environ.get(CONFIG_FILE_ENV)
    if named:
        path = Path(named)
        if not path.is_file():
            raise ConfigError(f"{CONFIG_FILE_ENV} names {named!r}, which is not a file")
        return path
    default = Path(DEFAULT_CONFIG_FILE)
    return default if default.is_file() else None


def load_settings(**overrides: Any) -> Settings:
    """Build Settings or raise ConfigError naming every bad key."""
    try:
        _check_json_file(config_file_path())
        return Settings(**overrides)
    except ValidationError as exc:
        raise ConfigError(describe_validation_error(exc)) from None


def _check_json_file(path: Path | None) -> None:
    if path is None:
        return
    try:
        json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON ({exc})") from None


def describe_validation_error(exc: ValidationError) -> str:
    """One line per problem: `key: what was expected (got value)`."""
    lines = []
    for error in exc.errors(include_url=False):
        key = ".".join(str(part) for part in error["loc"]) or "(settings)"
        got = error.get("input")
        shown = "" if isinstance(got, (dict, list)) or got is None else f" (got {got!r})"
        lines.append(f"{key}: {error['msg']}{shown}")
    return "invalid configuration:\n  " + "\n  ".join(lines)


def masked_dump(settings: Settings) -> dict[str, Any]:
    """The effective configuration as plain data with every secret masked."""
    data = settings.model_dump(mode="json")
    data["database"]["url"] = mask_url_password(settings.database_url)
    for section in ("embedding", "llm"):
        if data[section].get("api_key"):
            data[section]["api_key"] = "********"
    if data["search"]["opensearch"].get("password"):
        data["search"]["opensearch"]["password"] = "********"
    data["broker"]["url"] = mask_url_password(settings.broker.url)
    data["retrieval"]["embedding_dimensions"] = settings.effective_embedding_dimensions
    return data


def mask_url_password(url: str) -> str:
    """postgresql://user:secret@host -> postgresql://user:********@host."""
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest:
        return url
    credentials, _, host = rest.rpartition("@")
    if ":" not in credentials:
        return url
    user = credentials.split(":", 1)[0]
    return f"{scheme}://{user}:********@{host}"


@cache
def get_settings() -> Settings:
    """The process-wide settings, loaded once."""
    return load_settings()


