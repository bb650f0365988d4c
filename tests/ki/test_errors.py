"""Edge exceptions become one line and a documented exit code, never a traceback."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from ki.errors import EXIT_CONFIG, EXIT_FAILED, EXIT_UNAVAILABLE, exit_code_for, one_line
from ki_core.config import ConfigError
from ki_core.search.types import IndexDimensionMismatch, SearchBackendError
from ki_query.types import DocumentNotFound, QueryTooLong, SearchRequest, WindowTooDeep


@pytest.mark.parametrize(
    "exc,code",
    [
        (ConfigError("x"), EXIT_CONFIG),
        (IndexDimensionMismatch("x"), EXIT_CONFIG),
        (SearchBackendError("down"), EXIT_UNAVAILABLE),
        (WindowTooDeep(495, 10), EXIT_FAILED),
        (QueryTooLong(5000, 4000), EXIT_CONFIG),
        (DocumentNotFound("d"), EXIT_FAILED),
    ],
)
def test_edge_errors_map_to_exit_codes(exc: Exception, code: int) -> None:
    assert exit_code_for(exc) == code


def test_an_unexpected_error_is_not_swallowed() -> None:
    assert exit_code_for(RuntimeError("bug")) is None


def test_search_without_an_index_says_so_in_one_line(tmp_path) -> None:
    from typer.testing import CliRunner

    from ki.cli import app

    result = CliRunner().invoke(app, ["search", "Haftung", "--as", "anna"], env={"KI_EMBEDDING__PROVIDER": "hashing"})
    assert result.exit_code == EXIT_UNAVAILABLE
    assert "Traceback" not in result.output


def test_a_request_value_the_user_typed_is_one_line_naming_the_field() -> None:
    with pytest.raises(ValidationError) as refused:
        SearchRequest(query="   ")
    assert exit_code_for(refused.value) == EXIT_FAILED
    assert one_line(refused.value) == "query: must not be blank; a listing without query words is /v1/search/filter (ki list)"


def test_a_query_longer_than_the_limit_exits_2_in_one_line_before_touching_the_index(tmp_path) -> None:
    from typer.testing import CliRunner

    from ki.cli import app

    result = CliRunner().invoke(app, ["search", "Haftung " * 600, "--as", "anna"],
                                env={"KI_EMBEDDING__PROVIDER": "hashing", "KI_STATE_DIR": str(tmp_path)})
    assert result.exit_code == EXIT_CONFIG, result.output
    assert "retrieval.max_query_chars" in result.output and "Traceback" not in result.output
