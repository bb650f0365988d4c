"""Exit codes for the CLI, mapped from exceptions in one place."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

import typer
from pydantic import ValidationError
from rich.console import Console

from ki_core.config import ConfigError
from ki_core.grants import InvalidPrincipal, UnknownTarget
from ki_core.llm import GatewayError
from ki_core.search.embedded import IndexLockedError
from ki_core.search.types import IndexMappingMismatch, ResultWindowTooDeep, SearchBackendError
from ki_query.identity import Forbidden, Unauthenticated
from ki_query.types import (
    DocumentNotFound,
    InvalidDecision,
    InvalidFilters,
    QueryTooLong,
    TraversalTooDeep,
    WindowTooDeep,
)
from ki_workers.sources.local_fs import ManifestError
from ki_query.corpus_errors import (
    CorpusEmbeddingMismatch,
    CorpusLoadError,
    EvalFileError,
    ProviderConfigError,
    UnknownCorpus,
)

EXIT_CONFIG = 2
EXIT_FAILED = 1
# The index or a gateway is unreachable: retrying later may succeed.
EXIT_UNAVAILABLE = 3

_stderr = Console(stderr=True, soft_wrap=True)

# Most specific first; later issues add their edge exceptions here.
EXIT_CODES: list[tuple[type[BaseException], int]] = [
    (ConfigError, EXIT_CONFIG),
    (UnknownTarget, EXIT_FAILED),
    (InvalidPrincipal, EXIT_FAILED),
    (ProviderConfigError, EXIT_CONFIG),
    (CorpusEmbeddingMismatch, EXIT_CONFIG),
    (UnknownCorpus, EXIT_FAILED),
    (CorpusLoadError, EXIT_FAILED),
    (EvalFileError, EXIT_FAILED),
    (IndexMappingMismatch, EXIT_CONFIG),
    (IndexLockedError, EXIT_UNAVAILABLE),
    (SearchBackendError, EXIT_UNAVAILABLE),
    (GatewayError, EXIT_UNAVAILABLE),
    (ManifestError, EXIT_FAILED),
    (WindowTooDeep, EXIT_FAILED),
    (QueryTooLong, EXIT_CONFIG),  # a usage error: the same query will never pass
    (TraversalTooDeep, EXIT_FAILED),
    (ResultWindowTooDeep, EXIT_FAILED),
    (InvalidFilters, EXIT_FAILED),
    (InvalidDecision, EXIT_FAILED),
    (DocumentNotFound, EXIT_FAILED),
    (Unauthenticated, EXIT_FAILED),
    (Forbidden, EXIT_FAILED),
    # A request model refusing a value the user typed (a blank query, a NUL).
    (ValidationError, EXIT_FAILED),
]


def one_line(exc: BaseException) -> str:
    """A request model's ValidationError as `field: problem` (pydantic's text spans several lines)."""
    if isinstance(exc, ValidationError):
        return "; ".join(
            f"{'.'.join(str(p) for p in error['loc']) or 'input'}: {error['msg'].removeprefix('Value error, ')}"
            for error in exc.errors(include_url=False)
        )
    return str(exc)


def exit_code_for(exc: BaseException) -> int | None:
    for exc_type, code in EXIT_CODES:
        if isinstance(exc, exc_type):
            return code
    return None


def cli_errors(func: Callable[..., Any]) -> Callable[..., Any]:
    """Known errors become one readable line and an exit code, not a traceback."""

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except Exception as exc:
            if _schema_missing(exc):
                _stderr.print(f"[bold red]error:[/] {_no_store_message()}", highlight=False, markup=True)
                raise typer.Exit(EXIT_CONFIG) from None
            code = exit_code_for(exc)
            if code is None:
                raise
            _stderr.print(f"[bold red]error:[/] {one_line(exc)}", highlight=False, markup=True)
            raise typer.Exit(code) from None

    return wrapper


def _schema_missing(exc: BaseException) -> bool:
    """The database has no tables yet: SQLite's "no such table", PostgreSQL's undefined_table (42P01)."""
    from sqlalchemy.exc import DBAPIError

    if not isinstance(exc, DBAPIError):
        return False
    return "no such table" in str(exc.orig) or getattr(exc.orig, "sqlstate", None) == "42P01"


def _no_store_message() -> str:
    from ki_core.config import load_settings

    try:
        url = load_settings().database_url
    except ConfigError:
        url = "the configured database"
    from sqlalchemy.engine import make_url

    where = make_url(url).render_as_string(hide_password=True) if "://" in url else url
    return f"no knowledge index store in {where} yet: run `ki init` to create it (or set database.url)"
