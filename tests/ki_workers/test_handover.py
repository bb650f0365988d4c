"""The ingress's hand-over thread: rows of a burst share one publish, and nothing it does can stall or kill it."""

from __future__ import annotations

import threading
import time

import pytest

from ki_core.config import load_settings
from ki_core.db import make_engine, session_factory
from ki_workers.event_inbox import dispatch_events
from ki_workers.handover import Handover
from tests.ki_workers.test_ingress import queued_messages


@pytest.fixture
def settings(monkeypatch: pytest.MonkeyPatch, committed_pg_url: str, redis_url: str, tmp_path):
    for key, value in {
        "KI_DATABASE__URL": committed_pg_url, "KI_BROKER__URL": redis_url, "KI_BROKER__EAGER": "false",
        "KI_BROKER__PUBLISH_LINGER_SECONDS": "0.3", "KI_STATE_DIR": str(tmp_path / "state"),
    }.items():  # fmt: skip
        monkeypatch.setenv(key, value)
    return load_settings()


@pytest.fixture
def sessions(committed_pg_url: str):
    engine = make_engine(committed_pg_url)
    yield session_factory(engine)
    engine.dispose()


class Recorder:
    """The real dispatch, with the batches it was called with written down."""

    def __init__(self, fail_first: int = 0):
        self.batches: list[list[str]] = []
        self.fail_first = fail_first

    def __call__(self, settings, sessions, events, *, queued):
        self.batches.append(list(events))
        if len(self.batches) <= self.fail_first:
            raise RuntimeError("the broker blinked")
        return dispatch_events(settings, sessions, events, queued=queued)


def test_rows_accepted_within_the_linger_are_published_together_in_order(settings, sessions, redis_client) -> None:
    recorder = Recorder()
    handover = Handover(settings, sessions, dispatch=recorder)
    ids = [f"{n:032x}" for n in range(1, 8)]
    for row_id in ids:
        handover.submit(row_id, "acl.changed")
    assert handover.flush(10)
    handover.stop()
    assert recorder.batches == [ids], "one publish for the burst"
    waiting = queued_messages(redis_client, "ki.access")  # LPUSHed, taken from the right: the first is last
    assert waiting[::-1] == [("ki.process_access_event", [row_id]) for row_id in ids]


def test_rows_further_apart_than_the_linger_go_in_separate_publishes(settings, sessions, redis_client) -> None:
    recorder = Recorder()
    handover = Handover(settings, sessions, dispatch=recorder)
    handover.submit("a" * 32, "document.upserted")
    assert handover.flush(10)
    handover.submit("b" * 32, "document.upserted")
    assert handover.flush(10)
    handover.stop()
    assert recorder.batches == [["a" * 32], ["b" * 32]]
    assert len(queued_messages(redis_client)) == 2


def test_a_failed_hand_over_does_not_stop_the_thread(settings, sessions, redis_client) -> None:
    recorder = Recorder(fail_first=1)
    handover = Handover(settings, sessions, dispatch=recorder)
    handover.submit("a" * 32, "document.upserted")
    assert handover.flush(10), "the failed batch counts as finished: its rows are the sweep's"
    handover.submit("b" * 32, "document.upserted")
    assert handover.flush(10)
    handover.stop()
    assert queued_messages(redis_client) == [("ki.process_event", ["b" * 32])]


def test_stop_returns_while_a_hand_over_hangs(settings, sessions) -> None:
    """A broker that hangs must not keep the server from stopping: the rows are committed already."""
    release = threading.Event()

    def hanging(*args, **kwargs) -> int:
        release.wait(30)
        return 0

    handover = Handover(settings, sessions, dispatch=hanging)
    handover.submit("a" * 32, "document.upserted")
    time.sleep(0.5)  # past the linger: the thread is inside the dispatch
    started = time.monotonic()
    handover.stop(timeout=1.0)
    assert time.monotonic() - started < 3
    assert not handover.flush(0.1), "the hung batch is not reported as handed over"
    release.set()
