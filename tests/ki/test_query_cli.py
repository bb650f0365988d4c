"""`ki search`, `ki list`, `ki get`, `ki related` as a lawyer reads them and an IT person reuses them:
tables naming the files, whole ids every other command takes (or a unique prefix of one), --explain
unabridged, --json for machines; a prefix of a document the caller cannot see answers like none."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from sqlalchemy import select

from ki.cli import app
from ki_core.config import load_settings
from ki_core.db import engine_from_settings
from ki_core.models import Document
from tests.ki.cli_store import PROJECT, database, ingested, ki, store, table_rows
from tests.ki.test_ingest_cli import FOLDER, runner

__all__ = ["database", "store"]

SECRET = "geheim"


@pytest.fixture
def listed(store: Path, tmp_path: Path) -> dict[str, dict]:
    """The fixture folder as `mietsache` for anna, one file of it as project `geheim` for carol only;
    {document key: one of its hits (a version) in anna's `ki list --json`}."""
    ingested(store, "anna")
    secret = tmp_path / "geheim"
    secret.mkdir()
    shutil.copyfile(FOLDER / "anlage-grundriss.txt", secret / "vermerk.txt")
    assert ki("ingest", str(secret), "--project", SECRET).exit_code == 0
    assert ki("access", "grant", "carol", "--project", SECRET).exit_code == 0
    return {hit["citation"]["document"]["key"]: hit for hit in list_json("anna")}


def list_json(principal: str) -> list[dict]:
    result = ki("list", "--as", principal, "--json", "--limit", "50")
    assert result.exit_code == 0, result.output
    return json.loads(result.output)["hits"]


def all_document_ids() -> list[str]:
    engine = engine_from_settings(load_settings())
    try:
        with engine.connect() as connection:
            return list(connection.scalars(select(Document.id)))
    finally:
        engine.dispose()


def unused_prefix(length: int = 6) -> str:
    """A prefix no document id starts with."""
    taken = all_document_ids()
    return next(p for n in range(16**length) if not any(i.startswith(p := f"{n:0{length}x}") for i in taken))


# ------------------------------------------------------------------ search and list


def test_search_rows_name_the_file_and_show_whole_ids_that_every_command_takes(listed: dict[str, dict]) -> None:
    result = ki("search", "Heizungsausfall Miete", "--as", "anna")
    assert result.exit_code == 0, result.output
    letter = listed["schreiben-heizung"]
    assert "schreiben-mieterin.txt" in result.output
    assert letter["document_id"] in result.output and letter["version_id"] in result.output

    for command in (("get", letter["document_id"], "--as", "anna"), ("related", letter["document_id"], "--as", "anna"),
                    ("access", "explain", "anna", letter["document_id"]),
                    ("decisions", "add", "--project", PROJECT, "--locus", "Brief", "--change", "Minderung angekündigt",
                     "--evidence", letter["version_id"], "--as", "anna")):
        taken = ki(*command)
        assert taken.exit_code == 0, (command, taken.output)


def test_below_120_columns_each_hit_is_a_block_of_whole_lines_not_a_squeezed_table(listed: dict[str, dict]) -> None:
    from typer.testing import CliRunner

    narrow = CliRunner(env={"COLUMNS": "80"}).invoke(app, ["search", "Heizungsausfall Miete", "--as", "anna"])

    assert narrow.exit_code == 0, narrow.output
    letter = listed["schreiben-heizung"]
    lines = narrow.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines)
    assert any(letter["document_id"] in line for line in lines) and any(letter["version_id"] in line for line in lines)
    assert "schreiben-mieterin.txt" in narrow.stdout
    excerpt = " ".join(letter["citation"]["excerpt"].split())[:40]
    assert excerpt in " ".join(narrow.stdout.split()), "the excerpt reads as text, not a column a few letters wide"
    assert "┃" not in narrow.stdout, "no table header"


def test_an_unknown_principal_is_named_on_stderr_and_strict_makes_it_a_usage_error(listed: dict[str, dict]) -> None:
    typo = ki("search", "Heizungsausfall Miete", "--as", "unknown.user")
    known = ki("search", "Heizungsausfall Miete", "--as", "anna", "--as", "Group:Anna")
    strict = ki("list", "--as", "unknown.user", "--strict")

    assert typo.exit_code == 0 and "no hits" in typo.stdout
    assert typo.stderr.count("\n") == 1 and "unknown principal(s) 'unknown.user'" in typo.stderr
    assert known.exit_code == 0 and known.stderr == ""
    assert strict.exit_code == 2 and "'unknown.user'" in strict.stderr


def test_explain_renders_legs_fusion_boost_access_and_grants_whole_and_json_is_the_machine_form(
    listed: dict[str, dict],
) -> None:
    args = ("search", "Heizungsausfall Miete", "--as", "anna", "--explain", "--limit", "3")
    result = runner.invoke(app, list(args), env={"COLUMNS": "400"})  # the access reason on one line
    machine = ki(*args, "--json")

    assert result.exit_code == 0 and machine.exit_code == 0, result.output + machine.output
    hits = json.loads(machine.output)["hits"]
    assert hits and all(hit["explain"] for hit in hits)
    for n, hit in enumerate(hits, start=1):
        explanation = hit["explain"]
        assert f"#{n} {hit['citation']['document']['title']}" in result.output
        for leg, ranked in explanation["legs"].items():
            assert any(row[:2] == [leg, str(ranked["rank"])] for row in tree_rows(result.output)), leg
        assert f"x boost {explanation['boost']:g} ({hit['version_status']})" in result.output
        assert f"access: {explanation['access']}" in result.output, "the whole reason, not 600 characters of JSON"
        for path in explanation["grant_paths"]:
            assert f"grant: allow to '{path['principal']}' on {path['scope']} {path['target_id']}" in result.output


def tree_rows(output: str) -> list[list[str]]:
    """The words of each line of the explain trees, tree drawing left out."""
    return [line.translate(str.maketrans("", "", "│├└─")).split() for line in output.splitlines()]


def test_list_title_says_the_filters_as_typed_and_rows_name_the_files(listed: dict[str, dict]) -> None:
    result = ki("list", "--as", "anna", "--matter", "Kontorwerk Miete")

    assert result.exit_code == 0, result.output
    assert "documents (matter 'Kontorwerk Miete') as anna, newest first" in result.output
    assert "{" not in result.output.splitlines()[0] and "matter_id" not in result.output
    assert "vertrag/v3-unterzeichnet.txt" in result.output and "anlage-grundriss.txt" in result.output
    assert "score" not in result.output, "a listing has no ranking to show"


# ------------------------------------------------------------------ get and related


def test_get_is_a_table_of_title_files_status_date_and_matter_and_json_on_request(listed: dict[str, dict]) -> None:
    document_id = listed["mietvertrag"]["document_id"]

    result = ki("get", document_id, "--as", "anna")
    raw = ki("get", document_id, "--as", "anna", "--json")

    assert result.exit_code == 0, result.output
    assert "Mietvertrag über Gewerberäume" in result.output and "Kontorwerk Miete" in result.output
    rows = {row[0]: row for row in table_rows(result.output)}
    assert rows["1"][1:6] == ["v1", "draft", "2024-02-01", "de", "vertrag/v1-entwurf.txt"]
    assert rows["3"][1:6] == ["v3 (latest final)", "executed", "2024-03-28", "de", "vertrag/v3-unterzeichnet.txt"]
    view = json.loads(raw.output)
    assert view["document"]["key"] == "mietvertrag" and rows["3"][6] == view["latest_final_version_id"]


def test_related_names_kind_direction_and_target_of_each_edge(listed: dict[str, dict]) -> None:
    contract, annex = listed["mietvertrag"]["document_id"], listed["anlage-1"]["document_id"]

    from_contract = ki("related", contract, "--as", "anna")
    from_annex = ki("related", annex, "--as", "anna", "--depth", "2")
    raw = ki("related", contract, "--as", "anna", "--json")

    assert from_contract.exit_code == 0, from_contract.output
    rows = table_rows(from_contract.output)
    assert ["1", "anlage-1 annex_of -> mietvertrag", "incoming", "Anlage 1 zum Mietvertrag MV-2024-003", "final",
            ""] in rows
    assert any(row[1:3] == ["schreiben-heizung references -> mietvertrag", "incoming"] for row in rows)
    assert "anlage-grundriss.txt" in from_contract.output and f"{PROJECT} / Kontorwerk Miete" in from_contract.output
    annex_rows = [row[:3] for row in table_rows(from_annex.output)]
    assert ["1", "anlage-1 annex_of -> mietvertrag", "outgoing"] in annex_rows
    assert ["2", "schreiben-heizung references -> mietvertrag", "incoming"] in annex_rows
    assert {item["document"]["document"]["key"] for item in json.loads(raw.output)["related"]} == {
        "anlage-1", "schreiben-heizung"}


# ------------------------------------------------------------------ id prefixes


def test_a_unique_prefix_stands_for_the_whole_id_in_get_related_and_decision_evidence(listed: dict[str, dict]) -> None:
    contract = listed["mietvertrag"]
    prefix = contract["document_id"][:8]

    got = ki("get", prefix, "--as", "anna")
    related = ki("related", prefix, "--as", "anna")
    recorded = ki("decisions", "add", "--project", PROJECT, "--locus", "§ 3 Haftung", "--change", "Haftung begrenzt",
                  "--evidence", contract["version_id"][:8], "--as", "anna")

    assert got.exit_code == 0 and contract["document_id"] in got.output, got.output
    assert related.exit_code == 0 and "anlage-1" in related.output, related.output
    assert recorded.exit_code == 0, recorded.output
    assert json.loads(recorded.output)["evidence"] == [{"source_object_id": None, "version_id": contract["version_id"]}]


@pytest.mark.parametrize("command", ["get", "related"])
def test_a_prefix_of_a_document_the_caller_cannot_see_answers_exactly_like_a_prefix_of_none(
    database: str, listed: dict[str, dict], command: str
) -> None:
    [secret] = [hit["document_id"] for hit in list_json("carol")]
    missing = unused_prefix()

    answers = {}
    for reference in (secret[:6], missing, secret):
        result = ki(command, reference, "--as", "anna")
        answers[reference] = (result.exit_code, result.output.replace(reference, "REF"))

    assert answers[secret[:6]] == answers[missing] == answers[secret] == (1, "error: no document 'REF'\n")


def test_a_too_short_prefix_is_refused_in_one_line(listed: dict[str, dict]) -> None:
    result = ki("get", listed["mietvertrag"]["document_id"][:3], "--as", "anna")

    assert result.exit_code == 1
    assert result.output.strip().endswith("is too short: give at least 4 characters")
    assert len(result.output.strip().splitlines()) == 1
