"""What the DMS tests share: event builders and a content server the test controls (a real HTTP server)."""

from __future__ import annotations

import base64
import hashlib
import itertools
import posixpath
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote

SOURCE = "acme"
SECRET = "s3cret-for-tests"
BASE_TIME = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
_ids = itertools.count(1)

TEXT = (
    "Mietvertrag über Gewerberäume in der Friedrichstraße. Die Mieterin zahlt eine Miete von 4.200 Euro. "
    "Die Heizung ist vom Vermieter instand zu halten; bei Ausfall ist die Miete nach § 536 BGB gemindert."
)


def at(minutes: float) -> str:
    """An occurred_at `minutes` after the base time (events of one test keep their order explicit)."""
    return (BASE_TIME + timedelta(minutes=minutes)).isoformat()


def envelope(event_type: str, minutes: float = 0, event_id: str | None = None, **fields) -> dict:
    return {
        "schema_version": 1,
        "event_id": event_id or f"evt-{next(_ids)}",
        "type": event_type,
        "occurred_at": at(minutes),
        **fields,
    }


def upserted(object_id: str, text: str = TEXT, acl=None, minutes: float = 0, **fields) -> dict:
    data = text.encode()
    return envelope(
        "document.upserted",
        minutes,
        object_id=object_id,
        project=fields.pop("project", "kontorwerk"),
        filename=fields.pop("filename", f"{object_id}.txt"),
        content=fields.pop("content", {"base64": base64.b64encode(data).decode(), "sha256": sha256(data)}),
        acl=[{"principal": "alice"}] if acl is None else acl,
        **fields,
    )


def acl_changed(object_id: str, acl, minutes: float = 1) -> dict:
    return envelope("acl.changed", minutes, object_id=object_id, acl=acl)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class ContentServer:
    """Serves `files` by path; `failures[path]` answers 503 that many times first; `gate` holds requests."""

    files: dict[str, bytes] = field(default_factory=dict)
    # Served by absolute path outside /content/: what a traversal past the base would reach.
    outside: dict[str, bytes] = field(default_factory=dict)
    failures: dict[str, int] = field(default_factory=dict)
    gate: threading.Event = field(default_factory=threading.Event)
    requests: list[str] = field(default_factory=list)
    base_url: str = ""

    def __post_init__(self) -> None:
        self.gate.set()


@contextmanager
def content_server() -> Iterator[ContentServer]:
    state = ContentServer()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            # Like many servers: decode first, then resolve dot segments (what makes "%2e%2e/" dangerous).
            resolved = posixpath.normpath(unquote(unquote(self.path)).replace("\\", "/"))
            path = resolved.removeprefix("/content/")
            state.requests.append(path)
            state.gate.wait(timeout=60)
            if resolved in state.outside:
                self._answer(200, state.outside[resolved])
            elif state.failures.get(path, 0) > 0:
                state.failures[path] -= 1
                self._answer(503, b"busy")
            elif path in state.files:
                self._answer(200, state.files[path])
            else:
                self._answer(404, b"gone")

        def _answer(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            try:
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                pass

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.base_url = f"http://127.0.0.1:{server.server_address[1]}/content/"
    try:
        yield state
    finally:
        state.gate.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
