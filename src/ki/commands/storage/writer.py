"""The embedded index has one writer: a writing command takes it before it writes anything to SQL.

`ki ingest` used to write its SQL rows and only then find the index locked by a
running `ki serve`: it exited 1, and the added files stayed out of search until
the server's sweep found them. Taking the writer first means a refused command
has written nothing; `--wait` waits for the other writer instead.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

    from rich.console import Console

    from ki_core.config import Settings

    from ki_workers.context import WorkerContext

# The rule, as --help, the README and the refusal state it.
WRITER_RULE = ("The embedded index has one writer: `ki serve` holds it from start to stop, so while it runs "
               "ki ingest and ki reindex are refused (exit 3) or, ki ingest with --wait, wait for it.")

# How often a waiting command tries the lock again.
RETRY_SECONDS = 1.0


class WriterBusy(RuntimeError):
    """Another process writes the embedded index; nothing was written (CLI exit 3)."""


def take_the_writer(ctx: WorkerContext, wait_seconds: float, console: Console) -> None:
    """Open ctx's index for writing now; wait up to WAIT_SECONDS for another writer, saying so once."""
    _until_free(ctx.index, wait_seconds, console)


def hold_the_writer(settings: Settings) -> None:
    """`ki serve` on the embedded store takes the writer at start and keeps it until it stops (WRITER_RULE):
    before, it took it on its first write only, so an ingest beside it worked or not by chance."""
    from ki_core.search.embedded import IndexLockedError
    from ki_workers.context import worker_context

    if settings.search.backend == "embedded" and settings.broker.eager:
        try:
            worker_context().index()
        except IndexLockedError as exc:
            raise WriterBusy(f"the embedded index is being written by {exc.holder}: `ki serve` needs its "
                             "writer; stop that first") from None


def no_other_writer(settings: Settings, console: Console) -> None:
    """Refuse now when another process writes the embedded index (`ki reindex`, which builds a new index
    beside the live one and must not swap it under a running server). Only the lock is tried: the live
    index may belong to another store, which the rebuild itself decides about."""
    from ki_core.search.index import open_index

    _until_free(lambda: open_index(settings).close(), 0.0, console)


def _until_free(open_writer: Callable[[], object], wait_seconds: float, console: Console) -> None:
    from ki_core.search.embedded import IndexLockedError

    deadline = time.monotonic() + wait_seconds
    told = False
    while True:
        try:
            open_writer()
            return
        except IndexLockedError as exc:
            if time.monotonic() >= deadline:
                raise WriterBusy(
                    f"the embedded index is being written by {exc.holder}. Nothing was written. "
                    f"{WRITER_RULE} Stop it first, or run this again with --wait SECONDS"
                ) from None
            if not told:
                console.print(f"waiting up to {wait_seconds:g} s for the other writer of the embedded index…",
                              markup=False, highlight=False)
                told = True
            time.sleep(RETRY_SECONDS)
