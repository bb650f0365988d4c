"""Exit codes for the CLI, mapped from exceptions in one place.

The table names each exception class by its dotted path and matches it against
the raised exception's MRO, so importing the CLI does not import SQLAlchemy,
faiss and the search index just to learn their exception classes (~0.7 s of a
1.3 s start-up before this). An exception of a module never imported cannot be
raised, so matching by name finds exactly what isinstance would.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

import typer

EXIT_CONFIG = 2
EXIT_FAILED = 1
# The index or a gateway is unreachable: retrying later may succeed.
EXIT_UNAVAILABLE = 3

# pydantic re-exports it from its compiled core; the class's own module is what the MRO shows.
VALIDATION_ERROR = "pydantic_core._pydantic_core.ValidationError"
DBAPI_ERROR = "sqlalchemy.exc.DBAPIError"

# Most specific first; later issues add their edge exceptions here (module.QualifiedName).
EXIT_CODES: tuple[tuple[str, int], ...] = (
    ("ki_core.config.ConfigError", EXIT_CONFIG),
    ("ki_core.grants.UnknownTarget", EXIT_FAILED),
    ("ki_core.principals.InvalidPrincipal", EXIT_FAILED),
    ("ki_query.federation.errors.ProviderConfigError", EXIT_CONFIG),
    ("ki_query.federation.errors.CorpusEmbeddingMismatch", EXIT_CONFIG),
    ("ki_query.federation.errors.UnknownCorpus", EXIT_FAILED),
    ("ki_query.federation.errors.CorpusLoadError", EXIT_FAILED),
    ("ki_query.federation.errors.EvalFileError", EXIT_FAILED),
    ("ki_core.search.types.IndexSignatureMismatch", EXIT_FAILED),
    ("ki_core.search.types.IndexMappingMismatch", EXIT_CONFIG),
    ("ki_core.search.embedded.IndexLockedError", EXIT_UNAVAILABLE),
    ("ki_core.search.types.SearchBackendError", EXIT_UNAVAILABLE),
    ("ki_core.llm.GatewayError", EXIT_UNAVAILABLE),
    ("ki_core.embedding.EmbedderBusy", EXIT_UNAVAILABLE),
    ("ki_core.store_move.StoreMoveError", EXIT_FAILED),
    ("ki.commands.storage.writer.WriterBusy", EXIT_UNAVAILABLE),
    ("ki_query.types.QueryOverBudget", EXIT_UNAVAILABLE),
    ("ki_core.audit.AuditUnavailable", EXIT_UNAVAILABLE),
    ("ki_workers.sources.local_fs.ManifestError", EXIT_FAILED),
    ("ki_query.types.WindowTooDeep", EXIT_FAILED),
    ("ki_query.types.QueryTooLong", EXIT_CONFIG),  # a usage error: the same query will never pass
    ("ki_query.query_language.syntax.QuerySyntaxError", EXIT_CONFIG),
    ("ki_query.federation.errors.EmptyQuestion", EXIT_CONFIG),  # "" or "?": a usage error too
    ("ki_query.types.TraversalTooDeep", EXIT_FAILED),
    ("ki_core.search.types.ResultWindowTooDeep", EXIT_FAILED),
    ("ki_query.types.InvalidFilters", EXIT_FAILED),
    ("ki_query.types.InvalidDecision", EXIT_FAILED),
    ("ki_query.types.DocumentNotFound", EXIT_FAILED),
    ("ki_query.reading.TextRangeRefused", EXIT_FAILED),
    ("ki_query.reading.OriginalUnavailable", EXIT_FAILED),
    ("ki_query.id_prefix.IdNotFound", EXIT_FAILED),
    ("ki_query.id_prefix.AmbiguousId", EXIT_FAILED),
    ("ki_query.identity.Unauthenticated", EXIT_FAILED),
    ("ki_query.identity.Forbidden", EXIT_FAILED),
    # A request model refusing a value the user typed (a blank query, a NUL).
    (VALIDATION_ERROR, EXIT_FAILED),
)


def class_names(exc: BaseException) -> set[str]:
    """`module.QualifiedName` of the exception's class and every base: what the table is matched against."""
    return {f"{cls.__module__}.{cls.__qualname__}" for cls in type(exc).__mro__}


def one_line(exc: BaseException) -> str:
    """A request model's ValidationError as `field: problem` (pydantic's text spans several lines)."""
    if VALIDATION_ERROR in class_names(exc):
        return "; ".join(
            f"{'.'.join(str(p) for p in error['loc']) or 'input'}: {error['msg'].removeprefix('Value error, ')}"
            for error in exc.errors(include_url=False)  # type: ignore[attr-defined]
        )
    return str(exc)


def exit_code_for(exc: BaseException) -> int | None:
    names = class_names(exc)
    return next((code for name, code in EXIT_CODES if name in names), None)


def cli_errors(func: Callable[..., Any]) -> Callable[..., Any]:
    """Known errors become one readable line and an exit code, not a traceback."""

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except Exception as exc:
            if _schema_missing(exc):
                _print_error(_no_store_message())
                raise typer.Exit(EXIT_CONFIG) from None
            code = exit_code_for(exc)
            if code is None:
                raise
            _print_error(one_line(exc))
            if hint := getattr(exc, "hint", None):  # a second line at most: what would be understood
                _print_hint(hint)
            raise typer.Exit(code) from None

    return wrapper


def _print_error(message: str) -> None:
    from rich.console import Console

    Console(stderr=True, soft_wrap=True).print(f"[bold red]error:[/] {message}", highlight=False, markup=True)


def _print_hint(hint: str) -> None:
    from rich.console import Console

    Console(stderr=True, soft_wrap=True).print(hint, highlight=False, markup=False)


def _schema_missing(exc: BaseException) -> bool:
    """The database has no tables yet: SQLite's "no such table", PostgreSQL's undefined_table (42P01)."""
    if DBAPI_ERROR not in class_names(exc):
        return False
    orig = exc.orig  # type: ignore[attr-defined]
    return "no such table" in str(orig) or getattr(orig, "sqlstate", None) == "42P01"


def _no_store_message() -> str:
    from sqlalchemy.engine import make_url

    from ki_core.config import ConfigError, load_settings

    try:
        url = load_settings().database_url
    except ConfigError:
        url = "the configured database"
    where = make_url(url).render_as_string(hide_password=True) if "://" in url else url
    return f"no knowledge index store in {where} yet: run `ki init` to create it (or set database.url)"
