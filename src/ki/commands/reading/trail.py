"""The audit records of the terminal's reads: `ki search`, `ki get`, `ki related`, `ki ask` and the rest.

Searching `--as anna.berg` from a shell reads what anna.berg may see, so it is
recorded like her search over HTTP: subject the principal searched as, surface
`cli`, and the operator's login in `detail` (who really sat at the terminal). A
read whose record cannot be written exits with the audit error before anything
is printed, as the other surfaces fail closed.
"""

from __future__ import annotations

import getpass
from collections.abc import Iterable, Sequence


def operator() -> str:
    """Who runs the command: the shell's login, as `cli:<login>`."""
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):  # a container user without a passwd entry
        return "cli:unknown"


def record_read(action: str, principals: Sequence[str], *, query: str | None = None,
                document_id: str | None = None, shown: Iterable[object] | None = None, hit_count: int | None = None,
                detail: str | None = None) -> None:
    """One record for a read made `--as` principals, before its result is printed.

    `action` is an AuditAction value, named as a string so that the commands need not import
    the audit module (and SQLAlchemy) when the CLI starts; `shown` are the hits printed."""
    from ki_core.config import load_settings
    from ki_query.audit import AuditAction, Surface, audit_log, record, shown_documents
    from ki_query.identity import Identity

    hits = list(shown) if shown is not None else None
    who = Identity(principals[0], tuple(principals))
    said = f"operator {operator()}" + (f"; {detail}" if detail else "")
    record(audit_log(load_settings()), who, Surface.CLI, AuditAction(action), query=query, document_id=document_id,
           document_ids=shown_documents(hits or ()), hit_count=len(hits) if hits is not None else hit_count,
           detail=said)
