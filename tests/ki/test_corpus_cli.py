"""`ki corpus load|list|remove`, `ki ask` and `ki eval` as an operator runs them (embedded backend, hashing
embedder)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ki.cli import app

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
STATUTES = FIXTURES / "statutes-excerpt.jsonl"
QUERIES = FIXTURES / "statute-queries-excerpt.jsonl"

runner = CliRunner()


@pytest.fixture
def state(monkeypatch, tmp_path) -> Path:
    monkeypatch.setenv("KI_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("KI_EMBEDDING__PROVIDER", "hashing")
    monkeypatch.setenv("KI_EMBEDDING__MODEL", "hashing")
    return tmp_path / "state"


@pytest.fixture
def loaded(state) -> Path:
    result = runner.invoke(app, ["corpus", "load", "statutes", str(STATUTES)])
    assert result.exit_code == 0, result.output
    return state


def invoke_json(args: list[str]) -> dict:
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_corpus_load_reports_records_units_and_containers(state) -> None:
    result = runner.invoke(app, ["corpus", "load", "statutes", str(STATUTES), "--title", "Bundesgesetze"])
    assert result.exit_code == 0, result.output
    assert "55 records" in result.stdout and "BGB, GG, SGB V, ZPO" in result.stdout
    assert "corpus-statutes-hashing-hashing-384" in result.stdout


def test_corpus_list_shows_the_registered_corpus(loaded) -> None:
    listed = invoke_json(["corpus", "list", "--json"])
    [spec] = listed["corpora"]
    assert spec["id"] == "statutes" and spec["kind"] == "statutes" and spec["unit_count"] == 70
    assert spec["embedding_signature"] == "hashing:hashing:384" and spec["metric"] == "cosine"
    assert listed["embedding_warning"] is None
    table = runner.invoke(app, ["corpus", "list"])
    assert "statutes" in table.stdout and "SGB V" in table.stdout


def test_corpus_list_says_which_corpora_can_answer_now_and_why_not(loaded, monkeypatch) -> None:
    monkeypatch.setenv("KI_EMBEDDING__MODEL", "other")
    assert runner.invoke(app, ["corpus", "load", "fremd", str(STATUTES)]).exit_code == 0
    monkeypatch.setenv("KI_EMBEDDING__MODEL", "hashing")
    listed = {c["id"]: c for c in invoke_json(["corpus", "list", "--json"])["corpora"]}
    assert listed["statutes"]["can_answer_now"] is True and listed["statutes"]["cannot_answer_because"] is None
    assert listed["fremd"]["can_answer_now"] is False
    assert "was indexed with hashing:other:384" in listed["fremd"]["cannot_answer_because"]
    table = runner.invoke(app, ["corpus", "list"], env={"COLUMNS": "250"})
    assert "can answer now" in table.stdout and "yes" in table.stdout
    assert "no (corpus fremd was indexed with hashing:other:384" in table.stdout


def test_corpus_remove_asks_first_and_removes_rows_and_index(loaded) -> None:
    index = loaded / "index" / "corpus-statutes-hashing-hashing-384"
    assert index.is_dir()
    declined = runner.invoke(app, ["corpus", "remove", "statutes"], input="n\n")
    assert declined.exit_code == 1 and "remove corpus statutes (70 units" in declined.stdout
    assert index.is_dir()
    removed = runner.invoke(app, ["corpus", "remove", "statutes"], input="y\n")
    assert removed.exit_code == 0, removed.output
    assert "corpus statutes removed: 70 units; index corpus-statutes-hashing-hashing-384 deleted" in removed.stdout
    assert not index.exists()
    assert invoke_json(["corpus", "list", "--json"])["corpora"] == []


def test_corpus_remove_yes_asks_nothing_and_an_unknown_id_is_one_line_exit_1(loaded) -> None:
    assert runner.invoke(app, ["corpus", "remove", "statutes", "--yes"]).exit_code == 0
    unknown = runner.invoke(app, ["corpus", "remove", "statutes", "--yes"])
    assert unknown.exit_code == 1
    assert unknown.output.strip().splitlines() == [
        "error: no corpus 'statutes' is registered (ki corpus list shows the registered ones)"
    ]


@pytest.mark.parametrize("question", ["", "?"])
def test_ask_without_words_is_a_usage_error_in_one_line(loaded, question) -> None:
    result = runner.invoke(app, ["ask", question, "--as", "user:anna"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        f"error: the question {question!r} has no words to search for: ask with at least one word or number"
    ]


def test_ask_answers_with_corpus_address_kinds_and_score(loaded) -> None:
    answer = invoke_json(["ask", "Was regelt § 573c Abs. 1 BGB?", "--as", "user:anna", "--json"])
    top = answer["hits"][0]
    assert top["corpus_id"] == "statutes" and top["address"] == "§ 573c Abs. 1 BGB"
    assert "section_lookup" in top["retrieval_kinds"] and top["score"] == 1.0
    assert answer["selection"] is None


def test_ask_explain_shows_the_selection_and_the_table(loaded) -> None:
    explained = invoke_json(["ask", "Kündigung von Wohnraum", "--as", "user:anna", "--json", "--explain"])
    assert explained["selection"]["selected"] == ["statutes"]
    assert explained["diagnostics"]["federated"] is True
    table = runner.invoke(app, ["ask", "Kündigung von Wohnraum", "--as", "user:anna", "--explain", "--top-k", "3"])
    assert table.exit_code == 0, table.output
    assert "selected ['statutes']" in table.stdout and "BGB" in table.stdout


def test_ask_for_an_unknown_corpus_exits_with_a_readable_error(loaded) -> None:
    result = runner.invoke(app, ["ask", "Kündigung", "--as", "user:anna", "--corpus", "nope"])
    assert result.exit_code == 1
    assert "no corpus 'nope' is registered" in result.output


def test_a_broken_anchors_file_is_a_configuration_error(loaded, monkeypatch, tmp_path) -> None:
    anchors = tmp_path / "anchors.json"
    anchors.write_text('{"anchors": [{"pattern": "(", "addresses": []}]}')
    monkeypatch.setenv("KI_FEDERATION__ANCHORS_FILE", str(anchors))
    result = runner.invoke(app, ["ask", "Kündigung", "--as", "user:anna"])
    assert result.exit_code == 2
    assert "anchors[0]" in result.output


def test_eval_scores_each_run_overall_and_per_query_type(loaded) -> None:
    report = invoke_json(["eval", "--corpus", "statutes", "--queries", str(QUERIES), "--legs", "lexical",
                          "--legs", "semantic", "--legs", "lexical,semantic,identifier", "--json"])
    runs = {run["label"]: run for run in report["runs"]}
    assert set(runs) == {"lexical", "semantic", "hybrid"}
    lexical = runs["lexical"]
    assert lexical["queries"] == 4 and set(lexical["by_type"]) == {"caselaw", "heading", "xref"}
    assert set(lexical["overall"]) == {"ndcg@10", "recall@10", "recall@100"}
    by_qid = {q["qid"]: q for q in lexical["per_query"]}
    # "Kündigung" is in Abs. 1 and 3 of § 573c; Abs. 2 says "Kündigungsfrist", Abs. 4 neither: they
    # join as the other Absätze of the best § (whole sections, issue 44).
    assert by_qid["t001"]["recall@10"] == 1.0
    assert 0.0 <= lexical["overall"]["ndcg@10"] <= 1.0


def test_eval_prints_a_table_with_the_chosen_cutoff(loaded) -> None:
    result = runner.invoke(app, ["eval", "--corpus", "statutes", "--queries", str(QUERIES), "--k", "5",
                                 "--legs", "lexical"])
    assert result.exit_code == 0, result.output
    assert "ndcg@5" in result.stdout and "recall@100" in result.stdout and "heading" in result.stdout


def test_eval_of_a_malformed_queries_file_names_the_line(loaded, tmp_path) -> None:
    bad = tmp_path / "queries.jsonl"
    bad.write_text(QUERIES.read_text(encoding="utf-8").splitlines()[0] + '\n{"qid": "x"}\n', encoding="utf-8")
    result = runner.invoke(app, ["eval", "--corpus", "statutes", "--queries", str(bad)])
    assert result.exit_code == 1
    assert "queries.jsonl:2" in result.output


def test_corpus_load_of_a_malformed_file_names_the_line(state, tmp_path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"law": "BGB"}\n', encoding="utf-8")
    result = runner.invoke(app, ["corpus", "load", "broken", str(bad)])
    assert result.exit_code == 1
    assert "bad.jsonl:1" in result.output


def test_eval_with_an_unknown_leg_is_a_usage_error(loaded) -> None:
    result = runner.invoke(app, ["eval", "--corpus", "statutes", "--queries", str(QUERIES), "--legs", "fuzzy"])
    assert result.exit_code == 2
    assert "unknown leg" in result.output
