"""Client of an OpenAI-compatible chat gateway: JSON-schema output, retries, rerank.

Used by the metadata stage (LLM extractor) and by the optional reranker.
Transient failures (429, 5xx, timeouts, connection errors) are retried with
exponential backoff and jitter, honouring Retry-After; what outlasts the
retries raises `GatewayUnavailable`. Everything else, including model output
that does not validate against the requested pydantic model, raises
`GatewayError` at once: a retry would not fix it.
"""

from __future__ import annotations

import email.utils
import logging
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, Field, ValidationError
from tenacity import RetryCallState, Retrying, before_sleep_log, retry_if_exception_type, stop_after_attempt
from tenacity.wait import wait_exponential, wait_random

from ki_core.config import LLMSettings, Settings, get_settings

logger = logging.getLogger(__name__)

ModelT = TypeVar("ModelT", bound=BaseModel)
Message = dict[str, str]

# A Retry-After beyond this is a quota reset, not a blip: give up and let the task retry later.
MAX_RETRY_AFTER_SECONDS = 60.0
# Backoff ceiling between attempts when the gateway gives no Retry-After.
MAX_BACKOFF_SECONDS = 20.0
# Enough of a candidate for a relevance judgement; 20 of them stay far below a context window.
RERANK_TEXT_CHARS = 1500
_ERROR_DETAIL_CHARS = 300


class GatewayError(Exception):
    """The gateway call failed in a way a retry will not fix (or no longer may)."""


class GatewayUnavailable(GatewayError):
    """429, 5xx, timeouts or connection errors that outlasted the retries: transient."""


class _TransientFailure(Exception):
    def __init__(self, reason: str, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after


class RerankScore(BaseModel):
    id: str
    score: float = Field(ge=0, le=10)


class RerankScores(BaseModel):
    scores: list[RerankScore]


RERANK_INSTRUCTIONS = (
    "Du bewertest Suchergebnisse einer Kanzlei-Dokumentensuche. Gib für jedes Dokument "
    "seine Relevanz für die Anfrage als Zahl von 0 (irrelevant) bis 10 (beantwortet die "
    "Anfrage genau) an. Antworte nur mit JSON: {\"scores\": [{\"id\": \"d1\", \"score\": 7.5}, ...]}, "
    "ein Eintrag je Dokument-ID."
)


class ChatGateway:
    """One configured gateway; holds an HTTP connection pool, so reuse it and close it."""

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout_seconds: float = 60.0,
        max_retries: int = 3,
        backoff_seconds: float = 1.0,
    ) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(base_url=base_url, headers=headers, timeout=timeout_seconds)
        self._model = model
        self._timeout_seconds = timeout_seconds
        self._attempts = max_retries + 1
        self._backoff = wait_exponential(multiplier=backoff_seconds, max=MAX_BACKOFF_SECONDS) + wait_random(
            0, backoff_seconds
        )

    @classmethod
    def from_settings(cls, llm: LLMSettings, **overrides: Any) -> ChatGateway:
        if not llm.base_url:
            raise GatewayError("llm.base_url is not set: no LLM gateway is configured")
        options: dict[str, Any] = {
            "base_url": llm.base_url,
            "model": llm.model,
            "api_key": llm.api_key.get_secret_value() if llm.api_key else None,
            "timeout_seconds": llm.timeout_seconds,
            "max_retries": llm.max_retries,
        }
        return cls(**(options | overrides))

    def __enter__(self) -> ChatGateway:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._client.close()

    @property
    def model(self) -> str:
        return self._model

    def complete_json(
        self, messages: Sequence[Message], schema_model: type[ModelT], *, model: str | None = None
    ) -> ModelT:
        """The model's answer, constrained by and validated against `schema_model`."""
        body = {
            "model": model or self._model,
            "messages": list(messages),
            "temperature": 0,
            "response_format": {
                "type": "json_schema",
                "json_schema": {
                    "name": schema_model.__name__[:64],
                    "schema": strict_json_schema(schema_model),
                    "strict": True,
                },
            },
        }
        content = _message_content(self._post_with_retries(body))
        return _validated(content, schema_model)

    def rerank(
        self, query: str, candidates: Sequence[tuple[str, str]], *, model: str | None = None
    ) -> dict[str, float]:
        """Relevance 0-10 per version id; ids the model did not score are absent."""
        if not candidates:
            return {}
        labels = {f"d{number}": version_id for number, (version_id, _) in enumerate(candidates, 1)}
        listing = "\n\n".join(
            f"[d{number}]\n{text[:RERANK_TEXT_CHARS]}" for number, (_, text) in enumerate(candidates, 1)
        )
        messages = [
            {"role": "system", "content": RERANK_INSTRUCTIONS},
            {"role": "user", "content": f"Anfrage: {query}\n\nDokumente:\n\n{listing}"},
        ]
        scores: dict[str, float] = {}
        for item in self.complete_json(messages, RerankScores, model=model).scores:
            version_id = labels.get(item.id.strip().strip("[]"))
            if version_id is not None:
                scores[version_id] = max(item.score, scores.get(version_id, item.score))
        return scores

    def _post_with_retries(self, body: dict[str, Any]) -> Any:
        retrying = Retrying(
            retry=retry_if_exception_type(_TransientFailure),
            stop=stop_after_attempt(self._attempts),
            wait=self._wait,
            before_sleep=before_sleep_log(logger, logging.WARNING),
            reraise=True,
        )
        try:
            return retrying(self._post_once, body)
        except _TransientFailure as exc:
            raise GatewayUnavailable(f"{exc.reason} (gave up after {self._attempts} attempts)") from None

    def _wait(self, retry_state: RetryCallState) -> float:
        """The gateway's Retry-After when it names one, else exponential backoff with jitter."""
        failure = retry_state.outcome.exception() if retry_state.outcome else None
        if isinstance(failure, _TransientFailure) and failure.retry_after is not None:
            return failure.retry_after
        return self._backoff(retry_state)

    def _post_once(self, body: dict[str, Any]) -> Any:
        try:
            response = self._client.post("chat/completions", json=body)
        except httpx.TimeoutException:
            raise _TransientFailure(f"gateway timed out after {self._timeout_seconds:g} s") from None
        except httpx.TransportError as exc:
            raise _TransientFailure(f"gateway unreachable: {type(exc).__name__}: {exc}") from None
        status = response.status_code
        if status == 429 or status >= 500:
            retry_after = parse_retry_after(response.headers.get("retry-after"))
            if retry_after is not None and retry_after > MAX_RETRY_AFTER_SECONDS:
                raise GatewayUnavailable(f"gateway answered {status} with Retry-After {retry_after:g} s")
            raise _TransientFailure(f"gateway answered {status} {response.reason_phrase}".strip(), retry_after)
        if status != 200:
            raise GatewayError(f"gateway answered {status} {response.reason_phrase}: {_error_detail(response)}")
        try:
            return response.json()
        except ValueError:
            raise GatewayError("gateway answered 200 with a body that is not JSON") from None


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or HTTP date); None if absent or garbled."""
    if not value:
        return None
    value = value.strip()
    if re.fullmatch(r"\d+(\.\d+)?", value):
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def strict_json_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The model's JSON schema in the form OpenAI's strict mode accepts.

    Strict mode wants every object closed (`additionalProperties: false`) with
    every property required (optional ones are already `anyOf [..., null]`),
    and rejects `default`.
    """
    schema = model.model_json_schema()
    _make_strict(schema)
    return schema


def _make_strict(node: Any) -> None:
    if isinstance(node, list):
        for item in node:
            _make_strict(item)
        return
    if not isinstance(node, dict):
        return
    node.pop("default", None)
    if node.get("type") == "object" and "properties" in node:
        node["additionalProperties"] = False
        node["required"] = list(node["properties"])
    for key, value in node.items():
        if key in ("properties", "$defs"):
            for subschema in value.values():
                _make_strict(subschema)
        elif isinstance(value, (dict, list)):
            _make_strict(value)


def _message_content(payload: Any) -> str:
    try:
        choice = payload["choices"][0]
        message = choice["message"]
    except (KeyError, IndexError, TypeError):
        raise GatewayError("gateway answer has no choices[0].message") from None
    if message.get("refusal"):
        raise GatewayError(f"model refused: {_shorten(str(message['refusal']))}")
    if choice.get("finish_reason") == "length":
        raise GatewayError("model output was cut off (finish_reason=length)")
    content = message.get("content")
    if not isinstance(content, str) or not content.strip():
        raise GatewayError("model answer has no content")
    return content


def _validated(content: str, schema_model: type[ModelT]) -> ModelT:
    text = re.sub(r"^\s*```(?:json)?\s*|\s*```\s*$", "", content)
    try:
        return schema_model.model_validate_json(text)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        if errors[0]["type"] == "json_invalid":
            raise GatewayError(f"model output is not JSON: {_shorten(content)}") from None
        first = errors[0]
        where = ".".join(str(part) for part in first["loc"]) or "(root)"
        more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
        raise GatewayError(
            f"model output does not validate against {schema_model.__name__}: {where}: {first['msg']}{more}"
        ) from None


def _error_detail(response: httpx.Response) -> str:
    """The gateway's own error message (OpenAI shape) or the start of the body."""
    try:
        error = response.json().get("error")
        detail = error.get("message") if isinstance(error, dict) else error
    except (ValueError, AttributeError):
        detail = None
    return _shorten(str(detail) if detail else response.text or "(empty body)")


def _shorten(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= _ERROR_DETAIL_CHARS else flat[: _ERROR_DETAIL_CHARS - 1] + "…"


def gateway_from_settings(settings: Settings | None = None, **overrides: Any) -> ChatGateway:
    return ChatGateway.from_settings((settings or get_settings()).llm, **overrides)


def complete_json(
    messages: Sequence[Message], schema_model: type[ModelT], *, settings: Settings | None = None
) -> ModelT:
    """One-off call with the configured gateway; long-lived callers keep a ChatGateway instead."""
    with gateway_from_settings(settings) as gateway:
        return gateway.complete_json(messages, schema_model)


def rerank(
    query: str, candidates: Sequence[tuple[str, str]], *, settings: Settings | None = None
) -> dict[str, float]:
    """Scores 0-10 per version id from `retrieval.rerank_model`; raises GatewayError on failure."""
    settings = settings or get_settings()
    with gateway_from_settings(settings) as gateway:
        return gateway.rerank(query, candidates, model=settings.retrieval.rerank_model)


__all__ = [
    "ChatGateway",
    "GatewayError",
    "GatewayUnavailable",
    "RerankScores",
    "complete_json",
    "gateway_from_settings",
    "parse_retry_after",
    "rerank",
    "strict_json_schema",
]
