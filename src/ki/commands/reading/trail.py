"""The audit records of the terminal: reads made `--as` a principal, and the operator's access changes.

Who ran the command is the one identity a terminal can honestly claim: the
operating-system account the process runs as, `operator:<login>` (the
effective uid's passwd name; not $USER or $LOGNAME, which anyone can set).
ki cannot authenticate it further: whoever runs `ki` holds the store's files
and could read them without ki. So the record is the firm's record of honest
operators, and the account is what it is worth, no more.

`ki search --as anna.berg` is recorded with the operator as subject and
`anna.berg` as the principal read as (column `principals`), so `ki audit
--user operator:root` lists what that account read and `ki audit --user
anna.berg` lists anna.berg's own reads and the reads made as her. A read
whose record cannot be written exits 3 with the audit error before anything
is printed, as the other surfaces answer 503.
"""

from __future__ import annotations

import os
import pwd
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ki_core.audit import Actor
    from ki_core.config import Settings
    from ki_core.grants import MembershipDiff


def operator() -> str:
    """`operator:<login>` of the effective uid; `operator:uid<N>` for a container user without a passwd entry."""
    uid = os.geteuid()
    try:
        return f"operator:{pwd.getpwuid(uid).pw_name}"
    except KeyError:
        return f"operator:uid{uid}"


def operator_as(principals: Sequence[str] = ()) -> Actor:
    """The operator, reading as `principals` (or acting as itself when none are named)."""
    from ki_core.audit import Actor

    return Actor(operator(), tuple(principals)) if principals else Actor.named(operator())


def record_read(action: str, principals: Sequence[str], *, query: str | None = None,
                document_id: str | None = None, shown: Iterable[object] | None = None, hit_count: int | None = None,
                detail: str | None = None) -> None:
    """One record for a read made `--as` principals, before its result is printed.

    `action` is an AuditAction value, named as a string so that the commands need not import
    the audit module (and SQLAlchemy) when the CLI starts; `shown` are the hits printed."""
    from ki_core.audit import AuditAction, Surface, audit_log, record, shown_documents
    from ki_core.config import load_settings

    hits = list(shown) if shown is not None else None
    record(audit_log(load_settings()), operator_as(principals), Surface.CLI, AuditAction(action), query=query,
           document_id=document_id, document_ids=shown_documents(hits or ()),
           hit_count=len(hits) if hits is not None else hit_count, detail=detail)


def record_memberships(settings: Settings, *diffs: MembershipDiff) -> None:
    """`ki groups add/remove`: each local member added or removed, before the change commits."""
    from ki_core.audit import Surface, audit_log, record_membership

    for diff in diffs:
        record_membership(audit_log(settings), operator_as(), Surface.CLI, diff, detail="local membership")
