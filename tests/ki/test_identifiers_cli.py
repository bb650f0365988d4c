"""`ki identifiers TEXT` as a user runs it, on a small app the command registers into."""

from __future__ import annotations

import json

import typer
from typer.testing import CliRunner

from ki.commands.reading.identifiers import register

runner = CliRunner()


def _app() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def main() -> None:
        """A group, so that `identifiers` is a subcommand as in the real CLI."""

    register(app)
    return app


def test_table_lists_kind_normalized_form_and_span() -> None:
    result = runner.invoke(_app(), ["identifiers", "Nach § 573c Abs. 1 Satz 2 BGB und VIII ZR 123/20"])
    assert result.exit_code == 0, result.output
    assert "§ 573c Abs. 1 Satz 2 BGB" in result.output
    assert "case_number" in result.output and "VIII ZR 123/20" in result.output
    assert "5-29" in result.output


def test_json_is_a_list_of_identifiers_with_offsets() -> None:
    text = "§ 5 Abs. 2 und ECLI:DE:BGH:2020:040220B3STR313.19.1"
    result = runner.invoke(_app(), ["identifiers", text, "--law", "ZPO", "--json"])
    assert result.exit_code == 0, result.output
    items = json.loads(result.output)
    assert [(i["kind"], i["normalized"]) for i in items] == [
        ("statute", "§ 5 Abs. 2 ZPO"),
        ("ecli", "ECLI:DE:BGH:2020:040220B3STR313.19.1"),
    ]
    assert all(text[i["start"] : i["end"]] == i["as_written"] for i in items)


def test_nothing_found_exits_zero_with_one_line() -> None:
    result = runner.invoke(_app(), ["identifiers", "NJW 2015, 1827"])
    assert result.exit_code == 0
    assert result.output.strip() == "no identifiers found"


def test_nothing_found_as_json_is_an_empty_list() -> None:
    result = runner.invoke(_app(), ["identifiers", "kein Zitat", "--json"])
    assert result.exit_code == 0
    assert json.loads(result.output) == []


def test_dash_reads_the_text_from_standard_input() -> None:
    result = runner.invoke(_app(), ["identifiers", "-", "--json"], input="Amtsgericht München HRB 12345")
    assert result.exit_code == 0, result.output
    (item,) = json.loads(result.output)
    assert (item["normalized"], item["court"]) == ("HRB 12345", "AG München")
