"""Ids typed by a person: a unique prefix of a visible id stands for the whole id, git-style.

Resolution looks only at what the caller may see (the definitions `ki get`
and evidence checks use: graph.document_views, verification.version_facts),
so a prefix of a document the caller cannot see gets the very answer a prefix
of no document gets, and an ambiguity never counts an invisible match.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from typing import Literal

from sqlalchemy import select
from sqlalchemy.orm import Session

from ki_core.acl import Viewer
from ki_core.models import Document, DocumentVersion
from ki_query.graph import document_views
from ki_query.verification import version_facts

IdKind = Literal["document", "version"]
# Our ids are 32 hex digits (ki_core.models.base.new_id).
ID_LENGTH = 32
# git's minimum too: at 4 hex digits one id in 65,536 shares the prefix, so the visibility check
# runs on a handful of candidates; a shorter prefix would check a sixteenth of the table or more.
MIN_PREFIX = 4
# An ambiguous prefix names this many of its (visible) matches, enough to pick from.
SHOWN_MATCHES = 5

_HEX = re.compile(r"[0-9a-f]+")
_ROWS = {"document": Document.id, "version": DocumentVersion.id}


class IdNotFound(LookupError):
    """No visible record of that kind has this id or prefix: the same answer whether it exists unseen or not."""

    def __init__(self, kind: IdKind, reference: str) -> None:
        self.kind, self.reference = kind, reference
        super().__init__(f"no {kind} {reference!r}")


class AmbiguousId(LookupError):
    """A prefix too short to resolve, or one shared by several records the caller may see."""


def resolve_visible_id(session: Session, viewer: Viewer, kind: IdKind, reference: str) -> str:
    """The one id of `kind` the viewer may see that starts with `reference` (a whole id included)."""
    prefix = reference.strip().lower()
    if not _HEX.fullmatch(prefix) or len(prefix) > ID_LENGTH:
        raise IdNotFound(kind, reference)
    if len(prefix) < MIN_PREFIX:
        raise AmbiguousId(f"{kind} id prefix {reference!r} is too short: give at least {MIN_PREFIX} characters")
    matches = sorted(_VISIBLE[kind](session, viewer, _ids_with_prefix(session, kind, prefix)))
    if not matches:
        raise IdNotFound(kind, reference)
    if len(matches) > 1:
        raise AmbiguousId(_ambiguity(kind, reference, matches))
    return matches[0]


def _ids_with_prefix(session: Session, kind: IdKind, prefix: str) -> list[str]:
    """A range on the primary key, not LIKE: PostgreSQL serves LIKE 'x%' from the index only under the C collation."""
    column = _ROWS[kind]
    low, high = prefix.ljust(ID_LENGTH, "0"), prefix.ljust(ID_LENGTH, "f")
    return list(session.scalars(select(column).where(column.between(low, high))))


def _ambiguity(kind: IdKind, reference: str, matches: list[str]) -> str:
    shown = ", ".join(matches[:SHOWN_MATCHES]) + (", ..." if len(matches) > SHOWN_MATCHES else "")
    return f"{kind} id prefix {reference!r} matches {len(matches)} {kind}s: {shown}; give more characters"


_VISIBLE: dict[IdKind, Callable[[Session, Viewer, Collection[str]], Collection[str]]] = {
    "document": lambda session, viewer, ids: document_views(session, viewer, ids).keys(),
    "version": lambda session, viewer, ids: version_facts(session, viewer, ids).keys(),
}
