"""The ingress's hand-over: committed event rows go to their task from one thread, a few at a time.

A webhook answer must not wait for the broker, and a thread hop plus a Celery
publish per event was most of the ingress's CPU. So the request only puts the
row on an in-process queue (microseconds, on the event loop); one thread takes
what has gathered within `broker.publish_linger_seconds` and publishes it in one Redis
pipeline (kombu's producer batch), or with `broker.eager` runs it in-process.
Nothing here needs to be durable: every row is committed as `queued` before it
is put here, so rows a crash leaves on the queue are re-sent by the sweep.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable

from sqlalchemy.orm import Session, sessionmaker

from ki_core.config import Settings
from ki_workers.event_inbox import dispatch_events

log = logging.getLogger(__name__)

# A batch never grows past this, so one publish stays short and a slow eager run cannot hoard rows.
MAX_BATCH = 200
_STOP = object()


class Handover:
    """One daemon thread that dispatches the rows `submit` gives it, in arrival order."""

    def __init__(
        self,
        settings: Settings,
        sessions: sessionmaker[Session],
        *,
        dispatch: Callable[..., int] = dispatch_events,
    ):
        self.settings = settings
        self.sessions = sessions
        # In-process runs take their time anyway; waiting to batch them gains nothing.
        self.linger = 0.0 if settings.broker.eager else settings.broker.publish_linger_seconds
        self._dispatch = dispatch
        self._rows: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._progress = threading.Condition()
        self._submitted = self._finished = 0

    def submit(self, row_id: str, event_type: str) -> None:
        """Queue a committed row; the thread starts with the first one (a test client without lifespan too)."""
        if self._thread is None:
            self._start()
        with self._progress:
            self._submitted += 1
        self._rows.put((row_id, event_type))

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every row submitted so far was handed over (or failed to be); False on timeout."""
        with self._progress:
            target = self._submitted
            return self._progress.wait_for(lambda: self._finished >= target, timeout)

    def stop(self, timeout: float = 5.0) -> None:
        """Finish the batch in hand and return; rows still queued are the sweep's (they are committed)."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is None:
            return
        self._rows.put(_STOP)
        thread.join(timeout)
        if thread.is_alive():
            log.warning("hand-over still busy after %.0f s; its rows are left to the sweep", timeout)

    def _start(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="ki-handover", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            batch, stopping = self._next_batch()
            if batch:
                self._hand_over(dict(batch))
                with self._progress:
                    self._finished += len(batch)
                    self._progress.notify_all()
            if stopping:
                return

    def _next_batch(self) -> tuple[list[tuple[str, str]], bool]:
        """The rows gathered within `linger` of the first one (at most MAX_BATCH), and whether stop was asked."""
        first = self._rows.get()
        if first is _STOP:
            return [], True
        batch = [first]
        deadline = time.monotonic() + self.linger
        while len(batch) < MAX_BATCH:
            try:
                item = self._rows.get(timeout=max(deadline - time.monotonic(), 0.0))
            except queue.Empty:
                break
            if item is _STOP:
                return batch, True
            batch.append(item)
        return batch, False

    def _hand_over(self, batch: dict[str, str]) -> None:
        try:
            self._dispatch(self.settings, self.sessions, batch, queued=True)
        except Exception:  # noqa: BLE001 - the thread must live on; the rows are durable and the sweep re-sends them
            log.exception("hand-over of %d events failed; the sweep will send them", len(batch))
