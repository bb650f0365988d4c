"""`ki projects` and `ki matters`: what the store holds, as tables an operator reads."""

from __future__ import annotations

from pathlib import Path

from tests.ki.cli_store import ingested, ki, store, table_rows  # noqa: F401 - fixture


def second_project(root: Path) -> None:
    folder = root.parent / "nachbar"
    folder.mkdir()
    (folder / "klage.txt").write_text("Klage wegen Überbau der Grenzmauer.", encoding="utf-8")
    (folder / "vermerk.txt").write_text("Vermerk zum Ortstermin an der Grenzmauer.", encoding="utf-8")
    result = ki("ingest", str(folder), "--project", "nachbar", "--matter", "Müller ./. Schmidt")
    assert result.exit_code == 0, result.output


def test_projects_list_their_matters_and_documents(store: Path) -> None:  # noqa: F811
    ingested(store)
    second_project(store)

    result = ki("projects")

    assert result.exit_code == 0, result.output
    rows = {row[0]: row for row in table_rows(result.output)}
    assert rows["project"] == ["project", "title", "matters", "created", "documents", "removed"]
    assert [rows["mietsache"][i] for i in (2, 4, 5)] == ["1", "3", "0"]
    assert [rows["nachbar"][i] for i in (2, 4, 5)] == ["1", "2", "0"]


def test_matters_are_listed_per_project_or_for_one(store: Path) -> None:  # noqa: F811
    ingested(store)
    second_project(store)

    everything = {row[0]: row for row in table_rows(ki("matters").output)}
    only = table_rows(ki("matters", "--project", "nachbar").output)

    assert everything["Kontorwerk Miete"][1:] == ["mietsache", "", "3", "0"]
    assert everything["Müller ./. Schmidt"][1:] == ["nachbar", "", "2", "0"]
    assert [row[0] for row in only] == ["matter", "Müller ./. Schmidt"]


def test_an_empty_store_says_how_to_make_a_project(store: Path) -> None:  # noqa: F811
    result = ki("projects")

    assert result.exit_code == 0 and "no projects yet" in result.output
    unknown = ki("matters", "--project", "nope")
    assert unknown.exit_code == 1 and "no project named 'nope'" in unknown.output
