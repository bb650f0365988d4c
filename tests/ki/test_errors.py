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


def test_a_command_before_ki_init_says_where_it_looked_and_what_to_run(tmp_path) -> None:
    from typer.testing import CliRunner

    from ki.cli import app

    env = {"KI_EMBEDDING__PROVIDER": "hashing", "KI_STATE_DIR": str(tmp_path / "state")}
    for command in (["status"], ["access", "list"]):
        result = CliRunner().invoke(app, command, env=env)
        assert result.exit_code == EXIT_CONFIG, (command, result.output)
        assert "no knowledge index store in sqlite:///" in result.output and "run `ki init`" in result.output
        assert "Traceback" not in result.output


def test_an_empty_postgresql_database_is_recognized_as_no_store(pg_template) -> None:
    import uuid

    from sqlalchemy import text
    from sqlalchemy.exc import DBAPIError

    from ki.errors import _schema_missing
    from ki_core.db import make_engine
    from tests.conftest import create_database, drop_database

    name = f"ki_empty_{uuid.uuid4().hex[:12]}"
    engine = make_engine(create_database(name))
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1 FROM document_versions"))
    except DBAPIError as exc:
        assert _schema_missing(exc)
    else:
        raise AssertionError("an empty database has no document_versions")
    finally:
        engine.dispose()
        drop_database(name)


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ('Kündigung "fristlos', "Anführungszeichen wird nicht geschlossen (Stelle 11)"),
        ("(Miete OR Pacht", "Klammer wird nicht geschlossen (Stelle 1)"),
        ("datum:2021-01-01..2020-01-01", "der Anfang liegt nach dem Ende (Stelle 1)"),
        ("-Wohnraum", "es fehlt ein Begriff, nach dem gesucht wird (Stelle 1)"),
        ("Kündigung norm:§§", "norm:§§ nennt keine Vorschrift (z. B. norm:§ 573c BGB oder norm:§§ 573, 574) (Stelle 11)"),
        ("Kündigung norm:§§ 1-100 BGB",
         "§§ 1-100 umfasst 100 Vorschriften; ein Bereich darf höchstens 50 umfassen (Stelle 11)"),
    ],
)
def test_a_malformed_query_exits_2_with_the_error_and_a_hint_before_touching_the_index(
    tmp_path, query: str, message: str
) -> None:
    from typer.testing import CliRunner

    from ki.cli import app

    # "--": a query that starts with "-" is not an option.
    result = CliRunner().invoke(app, ["search", "--as", "anna", "--", query],
                                env={"KI_EMBEDDING__PROVIDER": "hashing", "KI_STATE_DIR": str(tmp_path), "COLUMNS": "300"})
    assert result.exit_code == EXIT_CONFIG, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 2, lines
    assert lines[0].startswith("error: ") and lines[0].endswith(message)
    assert lines[1].startswith("Hinweis: ")
