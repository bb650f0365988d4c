"""The metadata rules run ahead, in a helper process, while the sync's own process ingests on.

An in-process folder sync (the embedded default) does everything in one process
on one core, and the rules are about a quarter of its time (bench/ingest.py).
A version waits for its extraction batch after its ingest committed; a helper
process reads it from the database then and runs the same rules on it. When
the batch is recorded, a helper's answer is taken if the text and the title it
read are what the recording process sees; anything else (not done yet, failed,
the helper gone, a title an earlier version of the batch changed) is computed
there as before. Either way the answer is the same: the rules are a function of
the text and the title alone, so the helper changes when they run, never what
they say.
"""

from __future__ import annotations

import hashlib
import logging
import os
import subprocess
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from multiprocessing.connection import Connection

from sqlalchemy import Engine, select

from ki_core.models import Document, DocumentVersion
from ki_workers.stages.metadata import DocumentMetadata, MetadataExtractor, RuleBasedExtractor

log = logging.getLogger(__name__)

# What a batch asks for: (version id, its text, its document's title).
Version = tuple[str, str, str | None]


@dataclass(frozen=True)
class Answer:
    """What the rules said for a version, and what they read: its text's digest and the title."""

    digest: bytes
    title: str | None
    metadata: DocumentMetadata


def text_digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def runs_ahead(extractor: MetadataExtractor) -> bool:
    """Only the rules: an LLM extractor waits on the network, not the CPU, and costs per call."""
    return type(extractor) is RuleBasedExtractor


class RulesHelper:
    """One helper process that answers version ids with the rules' answers, over a pair of pipes.

    Its own interpreter (`python -m ki_workers.stages.rules_ahead`), not a multiprocessing
    child: those re-run the parent's main script, and a script that ingests at its top
    level would ingest again in the helper. Pipes and no executor: a process pool's feeder
    and manager threads take the GIL from the sync's own thread at every call, which cost
    about what the helper saved. The database URL goes down the pipe, not on the command
    line, where `ps` would show its password.
    """

    def __init__(self, database_url: str):
        to_helper_read, to_helper_write = os.pipe()
        from_helper_read, from_helper_write = os.pipe()
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "ki_workers.stages.rules_ahead", str(to_helper_read), str(from_helper_write)],
                pass_fds=(to_helper_read, from_helper_write), stdin=subprocess.DEVNULL, close_fds=True,
            )
        except BaseException:
            for fd in (to_helper_write, from_helper_read):
                os.close(fd)
            raise
        finally:
            os.close(to_helper_read)
            os.close(from_helper_write)
        self._to_helper = Connection(to_helper_write, readable=False)
        self._from_helper = Connection(from_helper_read, writable=False)
        self._to_helper.send(database_url)
        # Asked and not yet taken or forgotten; the answers in for those (later ones are dropped).
        self.asked: set[str] = set()
        self.arrived: dict[str, Answer | None] = {}
        # Answers taken in place of computing them in the sync's process, over the helper's life.
        self.taken = 0

    @property
    def alive(self) -> bool:
        return self._process.poll() is None

    def ask(self, version_id: str) -> None:
        self.collect()  # its answers read first: never both ends blocked on a full pipe
        self._to_helper.send(version_id)
        self.asked.add(version_id)

    def collect(self) -> None:
        """Take in every answer that has arrived, without waiting; an answer no one waits for any
        more (computed in the sync's process meanwhile) is dropped, not kept for the process's life."""
        while self._from_helper.poll():
            version_id, answer = self._from_helper.recv()
            if version_id in self.asked:
                self.arrived[version_id] = answer

    def take(self, version_id: str) -> Answer | None:
        """The answer for `version_id` if it is in, no longer waited for either way."""
        if version_id not in self.arrived:
            return None
        self.asked.discard(version_id)
        return self.arrived.pop(version_id)

    def forget(self, version_ids: Iterable[str]) -> None:
        for version_id in version_ids:
            self.asked.discard(version_id)
            self.arrived.pop(version_id, None)

    def kill(self) -> None:
        self._process.kill()
        self._process.wait()

    def close(self) -> None:
        try:
            self._to_helper.send(None)
        except OSError:
            pass
        self._to_helper.close()
        try:
            self._process.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            self.kill()
        self._from_helper.close()


class RulesAhead:
    """The answers a helper computes for the versions of one folder sync."""

    def __init__(self, helper: Callable[[], RulesHelper | None], producer: str):
        self._start_helper: Callable[[], RulesHelper | None] | None = helper
        self._helper: RulesHelper | None = None
        self._producer = producer

    def start(self, version_id: str) -> None:
        """Have the helper read the committed version and run the rules on it (started on first use:
        a sync that finds nothing new spawns nothing)."""
        if self._start_helper is not None:
            self._helper, self._start_helper = self._start_helper(), None
        if self._helper is None or version_id in self._helper.asked:
            return
        try:
            self._helper.ask(version_id)
        except (OSError, EOFError) as exc:
            self._lost(exc)

    @property
    def running(self) -> bool:
        """A helper is started (or will be at the first version) and not known to be gone."""
        return self._start_helper is not None or (self._helper is not None and self._helper.alive)

    def answered_from_front(self, version_ids: Iterable[str]) -> int:
        """How many of `version_ids`, from the first on, the helper has answered (it answers in order)."""
        if self._helper is None:
            return 0
        try:
            self._helper.collect()
        except (OSError, EOFError) as exc:
            self._lost(exc)
            return 0
        answered = 0
        for version_id in version_ids:
            if version_id not in self._helper.arrived:
                break
            answered += 1
        return answered

    def answers(self, versions: list[Version], extractor: MetadataExtractor) -> dict[str, Answer]:
        """The rules' answer for each version: the helper's where it read the same text and title,
        else computed here.

        Never waits for the helper: it works from the front of the batch and this process
        from the back, each taking what the other has not done, until they meet. A helper
        still starting, or gone, leaves it all to this process, as without one. Each of the
        helper's answers is judged once, when it is in.
        """
        answered: dict[str, Answer] = {}
        left = list(versions) if extractor.producer == self._producer else []
        while left:
            self._take_arrived(left, answered)
            left = [item for item in left if item[0] not in answered]
            if left:
                version_id, text, title = left.pop()
                answered[version_id] = Answer(b"", title, extractor.extract(text, title=title))
        if self._helper is not None:
            self._helper.forget(version_id for version_id, _text, _title in versions)
        return answered

    def close(self) -> None:
        """Stop waiting for what no batch took (a version that failed, a sync cut short)."""
        if self._helper is not None:
            self._helper.forget(list(self._helper.asked))

    def _take_arrived(self, versions: list[Version], answered: dict[str, Answer]) -> None:
        if self._helper is None:
            return
        try:
            self._helper.collect()
        except (OSError, EOFError) as exc:
            self._lost(exc)
            return
        for version_id, text, title in versions:
            answer = self._helper.take(version_id)
            if answer is not None and answer.title == title and answer.digest == text_digest(text):
                answered[version_id] = answer
                self._helper.taken += 1

    def _lost(self, exc: BaseException) -> None:
        log.warning("the metadata rules helper is gone, the rules run in the sync's own process: %r", exc)
        self._helper = None


def start_helper(database_url: str) -> RulesHelper | None:
    """A helper process, or None where none can start."""
    try:
        return RulesHelper(database_url)
    except OSError as exc:
        log.warning("no metadata rules helper, the rules run in the sync's own process: %r", exc)
        return None


# ------------------------------------------------------------ in the helper process


def serve(to_helper: Connection, from_helper: Connection) -> None:
    """The helper's loop: the database URL first, then a version id in, (id, its answer or None) out,
    until None or the pipe closes (the sync's process is gone)."""
    from ki_core.db import make_engine

    database_url = _next_message(to_helper)
    if database_url is None:
        return
    engine = make_engine(database_url, pool_size=1)
    extractor = RuleBasedExtractor()
    try:
        while (version_id := _next_message(to_helper)) is not None:
            try:
                answer = answer_for_committed(engine, extractor, version_id)
            except Exception as exc:  # noqa: BLE001 - the sync's own process computes this one
                log.warning("metadata rules helper could not answer %s: %r", version_id, exc)
                answer = None
            from_helper.send((version_id, answer))
    finally:
        engine.dispose()


def _next_message(connection: Connection) -> str | None:
    try:
        return connection.recv()
    except EOFError:
        return None


def answer_for_committed(engine: Engine, extractor: RuleBasedExtractor, version_id: str) -> Answer | None:
    """The rules' answer for a committed version; None when it has no text."""
    with engine.connect() as connection:
        row = connection.execute(
            select(DocumentVersion.text, Document.title)
            .join(Document, Document.id == DocumentVersion.document_id)
            .where(DocumentVersion.id == version_id)
        ).one_or_none()
    if row is None or row.text is None:
        return None
    return Answer(text_digest(row.text), row.title, extractor.extract(row.text, title=row.title))


if __name__ == "__main__":
    # Run as `python -m`: the answers' classes must come from the module by its name, not __main__.
    from ki_workers.stages import rules_ahead

    rules_ahead.serve(Connection(int(sys.argv[1]), writable=False), Connection(int(sys.argv[2]), readable=False))
