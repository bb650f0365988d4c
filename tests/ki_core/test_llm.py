"""The chat gateway client against a real local HTTP server that answers like the gateway."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest
from pydantic import BaseModel, Field

from ki_core.config import load_settings
from ki_core.llm import (
    ChatGateway,
    GatewayError,
    GatewayUnavailable,
    complete_json,
    parse_retry_after,
    rerank,
    strict_json_schema,
)
from tests.fake_chat_gateway import FakeChatGateway, chat_completion, fake_gateway  # noqa: F401 - fixture

MESSAGES = [{"role": "user", "content": "Welcher Vertragstyp?"}]


class Party(BaseModel):
    name: str
    role: str | None = None


class Answer(BaseModel):
    doc_type: str
    parties: list[Party] = []
    confidence: float = Field(default=0.5, ge=0, le=1)


def gateway_for(fake: FakeChatGateway, **options) -> ChatGateway:
    defaults = {"base_url": fake.base_url, "model": "test-model", "api_key": "sk-test", "backoff_seconds": 0.01}
    return ChatGateway(**(defaults | options))


def test_valid_json_answer_is_returned_as_the_model(fake_gateway: FakeChatGateway) -> None:
    fake_gateway.answer_json({"doc_type": "doc_type:contract.lease", "parties": [{"name": "Müller GmbH", "role": "Vermieter"}], "confidence": 0.9})

    with gateway_for(fake_gateway) as gateway:
        answer = gateway.complete_json(MESSAGES, Answer)

    assert answer == Answer(doc_type="doc_type:contract.lease", parties=[Party(name="Müller GmbH", role="Vermieter")], confidence=0.9)


def test_the_request_asks_for_strict_json_schema_output(fake_gateway: FakeChatGateway) -> None:
    fake_gateway.answer_json({"doc_type": "x", "parties": [], "confidence": 0.1})

    with gateway_for(fake_gateway) as gateway:
        gateway.complete_json(MESSAGES, Answer)

    request = fake_gateway.requests[0]
    assert request["path"] == "/v1/chat/completions"
    assert fake_gateway.request_headers[0]["Authorization"] == "Bearer sk-test"
    body = request["body"]
    assert body["model"] == "test-model"
    assert body["messages"] == MESSAGES
    response_format = body["response_format"]
    assert response_format["type"] == "json_schema"
    assert response_format["json_schema"]["name"] == "Answer"
    assert response_format["json_schema"]["strict"] is True
    assert response_format["json_schema"]["schema"] == strict_json_schema(Answer)


def test_strict_schema_closes_every_object_and_requires_every_property() -> None:
    schema = strict_json_schema(Answer)

    assert schema["additionalProperties"] is False
    assert schema["required"] == ["doc_type", "parties", "confidence"]
    party = schema["$defs"]["Party"]
    assert party["additionalProperties"] is False
    assert party["required"] == ["name", "role"]
    assert "default" not in json.dumps(schema)


def test_a_field_named_default_survives_strictification() -> None:
    class WithDefaultField(BaseModel):
        default: str = "x"

    assert strict_json_schema(WithDefaultField)["required"] == ["default"]


def test_output_that_is_not_json_is_a_gateway_error(fake_gateway: FakeChatGateway) -> None:
    fake_gateway.answer(200, chat_completion("Das ist ein Mietvertrag."))

    with gateway_for(fake_gateway) as gateway, pytest.raises(GatewayError, match=r"^model output is not JSON: Das ist"):
        gateway.complete_json(MESSAGES, Answer)
    assert len(fake_gateway.requests) == 1


def test_output_that_does_not_validate_names_the_field(fake_gateway: FakeChatGateway) -> None:
    fake_gateway.answer_json({"doc_type": "x", "parties": [{"role": "Mieter"}], "confidence": 3})

    with gateway_for(fake_gateway) as gateway, pytest.raises(
        GatewayError, match=r"^model output does not validate against Answer: parties\.0\.name: Field required \(\+1 more\)$"
    ):
        gateway.complete_json(MESSAGES, Answer)


def test_json_in_a_code_fence_is_accepted(fake_gateway: FakeChatGateway) -> None:
    fake_gateway.answer(200, chat_completion('```json\n{"doc_type": "doc_type:memo"}\n```'))

    with gateway_for(fake_gateway) as gateway:
        assert gateway.complete_json(MESSAGES, Answer).doc_type == "doc_type:memo"


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (chat_completion('{"doc_type": "x', finish_reason="length"), r"^model output was cut off"),
        (json.dumps({"choices": []}), r"^gateway answer has no choices\[0\]\.message$"),
        (json.dumps({"choices": [{"message": {"role": "assistant", "content": None, "refusal": "Nein."}}]}), r"^model refused: Nein\.$"),
        (json.dumps({"choices": [{"message": {"role": "assistant", "content": ""}}]}), r"^model answer has no content$"),
        ("<html>proxy</html>", r"^gateway answered 200 with a body that is not JSON$"),
    ],
)
def test_malformed_answers_are_precise_gateway_errors(fake_gateway: FakeChatGateway, body: str, reason: str) -> None:
    fake_gateway.answer(200, body)

    with gateway_for(fake_gateway) as gateway, pytest.raises(GatewayError, match=reason):
        gateway.complete_json(MESSAGES, Answer)


def test_503_then_success_is_retried(fake_gateway: FakeChatGateway) -> None:
    fake_gateway.answer(503, '{"error": {"message": "overloaded"}}')
    fake_gateway.answer(502, "bad gateway")
    fake_gateway.answer_json({"doc_type": "doc_type:decision.judgment"})

    with gateway_for(fake_gateway, max_retries=3) as gateway:
        assert gateway.complete_json(MESSAGES, Answer).doc_type == "doc_type:decision.judgment"
    assert len(fake_gateway.requests) == 3


def test_429_honours_retry_after(fake_gateway: FakeChatGateway) -> None:
    fake_gateway.answer(429, '{"error": {"message": "rate limited"}}', headers={"Retry-After": "0.3"})
    fake_gateway.answer_json({"doc_type": "doc_type:memo"})
    started = datetime.now(UTC)

    with gateway_for(fake_gateway, backoff_seconds=0.0) as gateway:
        gateway.complete_json(MESSAGES, Answer)

    assert datetime.now(UTC) - started >= timedelta(seconds=0.3)
    assert len(fake_gateway.requests) == 2


def test_persistent_5xx_gives_up_as_unavailable(fake_gateway: FakeChatGateway) -> None:
    for _ in range(3):
        fake_gateway.answer(503, "{}")

    with gateway_for(fake_gateway, max_retries=2) as gateway, pytest.raises(
        GatewayUnavailable, match=r"^gateway answered 503 Service Unavailable \(gave up after 3 attempts\)$"
    ):
        gateway.complete_json(MESSAGES, Answer)
    assert len(fake_gateway.requests) == 3


def test_retry_after_beyond_the_cap_is_not_waited_for(fake_gateway: FakeChatGateway) -> None:
    fake_gateway.answer(429, "{}", headers={"Retry-After": "3600"})

    with gateway_for(fake_gateway) as gateway, pytest.raises(GatewayUnavailable, match=r"Retry-After 3600 s$"):
        gateway.complete_json(MESSAGES, Answer)
    assert len(fake_gateway.requests) == 1


def test_a_timeout_is_retried(fake_gateway: FakeChatGateway) -> None:
    fake_gateway.answer(200, chat_completion('{"doc_type": "late"}'), delay_seconds=1.0)
    fake_gateway.answer_json({"doc_type": "doc_type:memo"})

    with gateway_for(fake_gateway, timeout_seconds=0.2) as gateway:
        assert gateway.complete_json(MESSAGES, Answer).doc_type == "doc_type:memo"
    assert len(fake_gateway.requests) == 2


def test_unreachable_gateway_is_unavailable() -> None:
    fake = FakeChatGateway()
    base_url = fake.base_url
    fake.stop()  # bound, never served, now closed: connections are refused

    with ChatGateway(base_url=base_url, model="m", max_retries=1, backoff_seconds=0.01) as gateway, pytest.raises(
        GatewayUnavailable, match=r"^gateway unreachable: ConnectError"
    ):
        gateway.complete_json(MESSAGES, Answer)


def test_client_errors_are_not_retried_and_carry_the_gateway_message(fake_gateway: FakeChatGateway) -> None:
    fake_gateway.answer(401, '{"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}}')

    with gateway_for(fake_gateway) as gateway, pytest.raises(
        GatewayError, match=r"^gateway answered 401 Unauthorized: Incorrect API key provided$"
    ) as raised:
        gateway.complete_json(MESSAGES, Answer)
    assert not isinstance(raised.value, GatewayUnavailable)
    assert len(fake_gateway.requests) == 1


@pytest.mark.parametrize(
    ("header", "seconds"),
    [(None, None), ("", None), ("7", 7.0), ("1.5", 1.5), ("soon", None)],
)
def test_parse_retry_after(header: str | None, seconds: float | None) -> None:
    assert parse_retry_after(header) == seconds


def test_parse_retry_after_http_date() -> None:
    later = datetime.now(UTC) + timedelta(seconds=30)

    assert 25 <= parse_retry_after(format_datetime(later, usegmt=True)) <= 30
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0


def test_rerank_maps_scores_back_to_version_ids(fake_gateway: FakeChatGateway) -> None:
    fake_gateway.answer_json({"scores": [{"id": "d2", "score": 9}, {"id": "[d1]", "score": 2.5}, {"id": "d9", "score": 4}]})
    candidates = [("v-aaa", "Mietvertrag über Gewerberäume"), ("v-bbb", "Kündigung wegen Zahlungsverzugs " * 200), ("v-ccc", "Vermerk")]

    with gateway_for(fake_gateway) as gateway:
        scores = gateway.rerank("Kündigung Zahlungsverzug", candidates, model="rerank-model")

    assert scores == {"v-bbb": 9.0, "v-aaa": 2.5}
    body = fake_gateway.requests[0]["body"]
    assert body["model"] == "rerank-model"
    user = body["messages"][1]["content"]
    assert "Anfrage: Kündigung Zahlungsverzug" in user
    assert "[d1]\nMietvertrag über Gewerberäume" in user
    assert "v-aaa" not in user
    assert len(user) < 3 * 1500 + 500


def test_rerank_score_outside_0_to_10_is_a_gateway_error(fake_gateway: FakeChatGateway) -> None:
    fake_gateway.answer_json({"scores": [{"id": "d1", "score": 11}]})

    with gateway_for(fake_gateway) as gateway, pytest.raises(GatewayError, match=r"scores\.0\.score"):
        gateway.rerank("q", [("v1", "text")])


def test_rerank_of_nothing_makes_no_call(fake_gateway: FakeChatGateway) -> None:
    with gateway_for(fake_gateway) as gateway:
        assert gateway.rerank("q", []) == {}
    assert fake_gateway.requests == []


def test_module_functions_use_the_settings(fake_gateway: FakeChatGateway) -> None:
    settings = load_settings(
        llm={"base_url": fake_gateway.base_url, "model": "extract-model", "api_key": "sk-x"},
        retrieval={"rerank_model": "rerank-model"},
    )
    fake_gateway.answer_json({"doc_type": "doc_type:memo"})
    fake_gateway.answer_json({"scores": [{"id": "d1", "score": 5}]})

    assert complete_json(MESSAGES, Answer, settings=settings).doc_type == "doc_type:memo"
    assert rerank("q", [("v1", "t")], settings=settings) == {"v1": 5.0}
    assert [r["body"]["model"] for r in fake_gateway.requests] == ["extract-model", "rerank-model"]


def test_without_a_base_url_there_is_no_gateway() -> None:
    with pytest.raises(GatewayError, match=r"^llm\.base_url is not set"):
        complete_json(MESSAGES, Answer, settings=load_settings())
