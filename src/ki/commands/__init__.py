"""CLI command groups; each module exposes `register(app)`.

Also the one progress display of long CLI work (ingest, corpus load, the demo's
ingest): every command module imports this package, so it stays light (rich is
imported only when a report starts).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress, TaskID

# Off a terminal (CI logs, `| tee`) a line this often: often enough to see work moving, rarely enough
# that a 10,000-file ingest writes a few hundred lines, not 10,000.
PLAIN_EVERY_SECONDS = 5.0


@dataclass
class ProgressReport:
    """Progress of one long step: rich's live bar on a terminal, else a plain line every few seconds.

    Rich draws nothing live when its console is not a terminal, so piped output
    stayed silent for minutes; the plain lines are what a log reader sees instead.
    """

    console: Console
    label: str
    unit: str
    total: int | None = None
    done: int = 0
    current: str = ""
    bar: Progress | None = None
    task: TaskID | None = None
    started: float = field(default_factory=time.monotonic)
    last_line: float = float("-inf")

    def advance(self, current: str | None = None) -> None:
        self.update(self.done + 1, current=current)

    def update(self, done: int, total: int | None = None, current: str | None = None) -> None:
        """Record DONE of TOTAL; also fits `Callable[[int, int], None]` progress callbacks."""
        self.done = done
        self.total = self.total if total is None else total
        self.current = self.current if current is None else current
        if self.bar is not None and self.task is not None:
            self.bar.update(self.task, completed=done, total=self.total, status=self.current)
        elif time.monotonic() - self.last_line >= PLAIN_EVERY_SECONDS:
            self.print_line()

    def print_line(self, final: str = "") -> None:
        """`ingest nordbau: 12/40 files, current: brief.pdf`; the final line says done and how long it took."""
        self.last_line = time.monotonic()
        count = f"{self.done}/{self.total}" if self.total is not None else str(self.done)
        tail = f", {final} in {self.last_line - self.started:.1f} s" if final else ""
        current = f", current: {self.current}" if self.current and not final else ""
        self.console.print(f"{self.label}: {count} {self.unit}{current}{tail}",
                           markup=False, highlight=False, soft_wrap=True)


@contextmanager
def progress_report(console: Console, label: str, unit: str, total: int | None = None,
                    transient: bool = False) -> Iterator[ProgressReport]:
    """A ProgressReport for the `with` block; off a terminal it ends with one line saying done (or stopped)."""
    report = ProgressReport(console, label, unit, total)
    if console.is_terminal:
        with _bar(console, transient) as bar:
            report.bar, report.task = bar, bar.add_task(label, total=total, status="")
            yield report
        return
    try:
        yield report
    except BaseException:
        report.print_line(final="stopped")
        raise
    report.print_line(final="done")


def _bar(console: Console, transient: bool) -> Progress:
    """Label, counts and times keep their width on a narrow terminal; the bar and the current item give way."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        ProgressColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )
    from rich.table import Column
    from rich.text import Text

    class CurrentColumn(ProgressColumn):
        """Shrinkable in the layout, yet one line: a long path ends in an ellipsis instead of wrapping."""

        def render(self, task) -> Text:
            return Text(task.fields["status"], no_wrap=True, overflow="ellipsis")

    fixed = Column(no_wrap=True)
    columns = (TextColumn("{task.description}", table_column=fixed), BarColumn(bar_width=20),
               MofNCompleteColumn(table_column=fixed), TimeElapsedColumn(table_column=fixed),
               TimeRemainingColumn(table_column=fixed), CurrentColumn())
    return Progress(*columns, console=console, transient=transient)
