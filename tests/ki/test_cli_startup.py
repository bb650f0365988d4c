"""Starting `ki` imports no database, index, model or server library: those load inside the command that needs them.

Checked in a fresh interpreter, since this test process has long imported all of
them. Timings are not asserted here; bench/cli_startup.py measures them.
"""

from __future__ import annotations

import subprocess
import sys
from typing import get_args


# What made `ki --help` take 1.3 s: SQLAlchemy and the ORM, pydantic-settings, the embedded index
# (faiss, numpy, tantivy), the servers, Celery, and the ki packages that pull them in.
HEAVY = (
    "sqlalchemy", "alembic", "faiss", "numpy", "tantivy", "fastapi", "uvicorn", "httpx", "celery", "pydantic",
    "ki_core.config", "ki_core.models", "ki_core.search", "ki_core.identifiers", "ki_query", "ki_workers",
)
OWN_COMMAND_MODULES = (
    "ki.errors", "ki.commands", "ki.commands.permissions.access", "ki.commands.reading.ask", "ki.commands.storage.config", "ki.commands.corpora.corpus",
    "ki.commands.corpora.demo", "ki.commands.corpora.eval", "ki.commands.storage.events", "ki.commands.reading.identifiers", "ki.commands.reading.query",
    "ki.commands.storage.store", "ki.commands.storage.ingest", "ki.commands.storage.writer", "ki.commands.storage.store_move", "ki.commands.permissions.keys", "ki.commands.storage.delete", "ki.commands.storage.projects",
)


def heavy_modules_after_import(*modules: str) -> list[str]:
    """The HEAVY modules a fresh interpreter holds after importing MODULES."""
    code = (
        f"import sys\nfor name in {modules!r}: __import__(name)\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return eval(done.stdout)  # noqa: S307 - our own subprocess printing a list of str


def test_the_command_modules_and_the_error_mapping_import_nothing_heavy() -> None:
    assert heavy_modules_after_import(*OWN_COMMAND_MODULES) == []


def test_importing_the_cli_imports_nothing_heavy() -> None:
    assert heavy_modules_after_import("ki.cli") == []


def test_the_cli_s_corpus_kinds_are_the_model_s() -> None:
    from ki.commands.corpora.corpus import CorpusKindName
    from ki_core.models.corpora import CorpusKind

    assert get_args(CorpusKindName) == tuple(kind.value for kind in CorpusKind)


def test_the_cli_s_event_statuses_are_the_model_s() -> None:
    from ki.commands.storage.events import EventStatusName
    from ki_core.models import EventStatus

    assert get_args(EventStatusName) == tuple(status.value for status in EventStatus)
