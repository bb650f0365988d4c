"""What the query side refuses, and with which HTTP status: one table for the HTTP API and the MCP tools.

A refusal is an answer with a reason (a 4xx, or 503 for a dependency that is
away), never a 500. The database's own errors carry SQL and connection
details, so their reason is a plain sentence instead.
"""

from __future__ import annotations

from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from ki_core.audit import AuditUnavailable
from ki_core.embedding import EmbedderBusy
from ki_core.llm import GatewayError
from ki_core.search.types import IndexMappingMismatch, ResultWindowTooDeep, SearchBackendError
from ki_query.federation.errors import EmptyQuestion, UnknownCorpus
from ki_query.identity import Forbidden, Unauthenticated
from ki_query.reading import OriginalUnavailable, TextRangeRefused
from ki_query.query_language.syntax import QuerySyntaxError
from ki_query.types import (
    DocumentNotFound,
    InvalidDecision,
    InvalidFilters,
    QueryOverBudget,
    QueryTooLong,
    TraversalTooDeep,
    WindowTooDeep,
)

# The database went away or its pool is exhausted: retry later (a malformed value is refused before SQL).
DATABASE_UNAVAILABLE = (OperationalError, InterfaceError, PoolTimeout)

REFUSAL_STATUS: tuple[tuple[type[BaseException], int], ...] = (
    (Unauthenticated, 401),
    (Forbidden, 403),
    (DocumentNotFound, 404),
    (WindowTooDeep, 400),
    (TextRangeRefused, 400),
    (OriginalUnavailable, 409),
    (QueryTooLong, 400),
    (QuerySyntaxError, 400),
    (EmptyQuestion, 400),
    (UnknownCorpus, 400),
    (TraversalTooDeep, 400),
    (ResultWindowTooDeep, 400),
    (InvalidFilters, 400),
    (InvalidDecision, 400),
    (GatewayError, 502),
    (SearchBackendError, 503),
    (EmbedderBusy, 503),
    (QueryOverBudget, 503),
    (IndexMappingMismatch, 503),
    (AuditUnavailable, 503),
    *((database_error, 503) for database_error in DATABASE_UNAVAILABLE),
)
REFUSALS = tuple(exc_type for exc_type, _status in REFUSAL_STATUS)


def refusal_reason(exc: BaseException) -> str:
    return "the database is unavailable; retry later" if isinstance(exc, DATABASE_UNAVAILABLE) else str(exc)
