"""The pipeline's task names, and the one way for a service to start a task by its name.

Tasks call services (folder sync, the sweep); a service that imported the tasks module back
to start the next piece of work would make the two depend on each other. A service names the
task instead. The current app resolves the name: the worker's, or `running_in`'s for an
in-process sync, where `.delay()` runs eagerly. So a queued and an eager run go through the same
configuration as a task object's own `.delay()`.
"""

from __future__ import annotations

from typing import Any

INGEST = "ki.ingest"
INGEST_MANY = "ki.ingest_many"
EXTRACT_METADATA = "ki.extract_metadata"
EXTRACT_METADATA_MANY = "ki.extract_metadata_many"
CHUNK_EMBED = "ki.chunk_embed"
CHUNK_EMBED_MANY = "ki.chunk_embed_many"
REINDEX_ACCESS = "ki.reindex_access"
SWEEP = "ki.sweep"
PROCESS_EVENT = "ki.process_event"
PROCESS_ACCESS_EVENT = "ki.process_access_event"
RECONCILE = "ki.reconcile"


def start(name: str, *args: Any) -> Any:
    """`.delay(*args)` of the task `name` in the current app: its AsyncResult (eager: already run)."""
    from celery import current_app

    # The configured app registers the tasks when it is made; importing it here, not at the top,
    # keeps this module free of imports that the tasks module's own imports would run into.
    import ki_workers.app  # noqa: F401

    return current_app.tasks[name].delay(*args)
