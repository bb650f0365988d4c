"""Services start tasks by name (app.start_task): tasks call services, never the reverse."""

from __future__ import annotations

import ast
from pathlib import Path

import ki_workers
from ki_core.config import Settings
from ki_workers.app import TASK_NAMES, TASK_ROUTES, app, beat_schedule, celery_config

PACKAGE = Path(ki_workers.__file__).parent


def _imported_modules(path: Path) -> set[str]:
    """Every module `path` imports, at the top or inside a function ("from a import b" gives a and a.b)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def test_no_module_the_tasks_call_imports_the_tasks_module():
    callers = [path for path in PACKAGE.rglob("*.py") if path.name != "tasks.py"]
    assert len(callers) > 20
    importing = [str(path.relative_to(PACKAGE)) for path in callers if "ki_workers.tasks" in _imported_modules(path)]
    assert importing == []


def test_every_task_name_is_registered_and_routed_to_a_queue():
    assert len(TASK_NAMES) == 12
    for name in TASK_NAMES:
        assert name in app.tasks, name
        assert name in TASK_ROUTES, name
    assert set(TASK_ROUTES) == set(TASK_NAMES)
    assert {entry["task"] for entry in beat_schedule(Settings()).values()} <= set(TASK_NAMES)


def test_with_real_workers_on_the_embedded_index_every_index_write_goes_to_the_access_worker():
    """One writer process (the access worker): the embed pool only embeds, so an ACL change never
    waits behind an embedding batch for the writer lock."""
    embedded = celery_config(Settings(broker={"eager": False}))["task_routes"]
    assert embedded["ki.write_index"] == embedded["ki.reindex_access"] == embedded["ki.reconcile"] == {"queue": "ki.access"}
    assert embedded["ki.chunk_embed"] == {"queue": "ki.index"}
    opensearch = celery_config(Settings(broker={"eager": False}, search={"backend": "opensearch"}))["task_routes"]
    assert opensearch["ki.reconcile"] == {"queue": "ki.maintenance"}


def test_a_broker_that_refuses_the_next_stage_is_a_transient_error_of_every_task():
    """`.delay()` of a follow-up while Redis restarts raises kombu's OperationalError ("Error 111
    connecting to ..."): the task retries, and an event that ran out of retries is redriven by the sweep."""
    import kombu.exceptions

    from ki_workers.event_inbox import is_transient

    refused = kombu.exceptions.OperationalError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")
    for name in TASK_NAMES:
        assert is_transient(app.tasks[name], refused), name
