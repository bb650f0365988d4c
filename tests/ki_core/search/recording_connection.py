"""An opensearch-py Connection that records each request and answers from a script, without a network.

The client, its transport, serializer and error mapping run for real; only the socket is
replaced, so what a test pins is exactly what would go over the wire.
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from opensearchpy import Connection

from ki_core.config import OpenSearchSettings
from ki_core.search.opensearch import make_client


@dataclass
class Sent:
    method: str
    path: str
    params: dict[str, Any]
    body: Any


@dataclass
class Script:
    """Replies per (method, path), consumed in order; every request is kept in `sent`."""

    replies: dict[tuple[str, str], deque[tuple[int, Any]]] = field(default_factory=dict)
    sent: list[Sent] = field(default_factory=list)

    def reply(self, method: str, path: str, payload: Any = None, status: int = 200) -> Script:
        self.replies.setdefault((method, path), deque()).append((status, payload if payload is not None else {}))
        return self

    def answer(self, method: str, path: str, params: dict[str, Any], body: bytes | None) -> tuple[int, Any]:
        self.sent.append(Sent(method, path, params, decode(body)))
        queue = self.replies.get((method, path))
        if not queue:
            raise AssertionError(f"unscripted request {method} {path}")
        return queue.popleft()


def decode(body: bytes | str | None) -> Any:
    """JSON body as data; ndjson (_bulk, _msearch) as a list of lines."""
    if body is None:
        return None
    text = body.decode("utf-8") if isinstance(body, bytes) else body
    lines = [line for line in text.split("\n") if line]
    if len(lines) > 1 or text.endswith("\n"):
        return [json.loads(line) for line in lines]
    return json.loads(text)


class RecordingConnection(Connection):
    def __init__(self, host: str = "localhost", port: int | None = None, *, script: Script, **kwargs: Any):
        kwargs = {k: v for k, v in kwargs.items() if k not in ("http_auth", "verify_certs", "ca_certs")}
        super().__init__(host=host, port=port, **kwargs)
        self.script = script

    def perform_request(
        self, method: str, url: str, params: Any = None, body: Any = None, timeout: Any = None,
        ignore: Any = (), headers: Any = None,
    ) -> Any:  # fmt: skip
        status, payload = self.script.answer(method, url, dict(params or {}), body)
        raw = json.dumps(payload)
        if not (200 <= status < 300) and status not in ignore:
            self._raise_error(status, raw, "application/json")
        return status, {"content-type": "application/json"}, raw


def recording_client(script: Script):
    settings = OpenSearchSettings(hosts=["http://os.test:9200"], max_retries=0)
    return make_client(settings, connection_class=RecordingConnection, script=script)
