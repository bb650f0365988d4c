"""A real HTTP server on 127.0.0.1 that answers like an OpenAI-compatible chat gateway.

Tests script its answers (status, headers, body, delay) and read back the
requests it received. Used where the LLM itself cannot run: the client under
test speaks real HTTP to it.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest


@dataclass
class ScriptedAnswer:
    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    delay_seconds: float = 0.0


def chat_completion(content: str, *, finish_reason: str = "stop") -> bytes:
    """The body of a successful chat completion whose message is `content`."""
    return json.dumps(
        {
            "id": "chatcmpl-test",
            "object": "chat.completion",
            "model": "test-model",
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": finish_reason}
            ],
        }
    ).encode()


class FakeChatGateway:
    """Answers POST /v1/chat/completions from a queue; an empty queue answers 500."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.request_headers: list[dict[str, str]] = []
        self._answers: deque[ScriptedAnswer] = deque()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, name="fake-chat-gateway", daemon=True
        )

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def start(self) -> FakeChatGateway:
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join(timeout=5)
        self._server.server_close()

    def answer(self, status: int = 200, body: bytes | str = b"", **options: Any) -> None:
        raw = body.encode() if isinstance(body, str) else body
        with self._lock:
            self._answers.append(ScriptedAnswer(status, raw, **options))

    def answer_json(self, payload: Any) -> None:
        """A 200 chat completion whose content is `payload` as JSON."""
        self.answer(200, chat_completion(json.dumps(payload, ensure_ascii=False)))

    def _next_answer(self) -> ScriptedAnswer:
        with self._lock:
            return self._answers.popleft() if self._answers else ScriptedAnswer(500, b'{"error": "no answer scripted"}')

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        gateway = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                length = int(self.headers.get("Content-Length", "0"))
                payload = json.loads(self.rfile.read(length) or b"null")
                with gateway._lock:
                    gateway.requests.append({"path": self.path, "body": payload})
                    gateway.request_headers.append(dict(self.headers))
                scripted = gateway._next_answer()
                time.sleep(scripted.delay_seconds)
                try:
                    self.send_response(scripted.status)
                    for name, value in {"Content-Type": "application/json", **scripted.headers}.items():
                        self.send_header(name, value)
                    self.send_header("Content-Length", str(len(scripted.body)))
                    self.end_headers()
                    self.wfile.write(scripted.body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout test); nothing to answer

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

        return Handler


@pytest.fixture
def fake_gateway() -> Iterator[FakeChatGateway]:
    """A started FakeChatGateway, stopped after the test. Import this fixture into a test module."""
    gateway = FakeChatGateway().start()
    try:
        yield gateway
    finally:
        gateway.stop()
