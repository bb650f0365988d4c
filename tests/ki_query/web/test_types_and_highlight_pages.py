"""Document types and highlighting on the demo store, in headless Chromium against `ki serve`.

The demo's files are typed as examples/demo.json declares them, the court decisions as the
Urteil or Beschluss their text shows; the type filter of the search page finds them so. A
hit is marked where the lexical leg matched it: "Vertrag" marks "Vertrag" and "Verträge",
never "unverträglich". One server for the module.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from ki_core.search.text_index import german_analyzer
from tests.ki_query.web.browsing import browsing, screenshot, search
from tests.ki_query.web.ki_server import ACCOUNTS, KiServer, KiStore
from tests.ki_workers.dms_support import SECRET, SOURCE, upserted

REPO = Path(__file__).resolve().parents[3]
ANNA = ACCOUNTS["anna"]
# Short enough to be its own excerpt: the word forms the stemmer joins and the one it does not.
PROBE_TEXT = "Der Vertrag gilt fort. Beide Verträge sind mit der Satzung nicht unverträglich."
PROBE = upserted("HL-1", text=PROBE_TEXT, project="kontorwerk", title="Prüfnotiz Fortgeltung",
                 acl=[{"principal": "anna.berg"}])
REPLY_LETTER = "Antwortschreiben Hollmann Berg für Nordbau vom 25.03.2024"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KiServer]:
    store = KiStore.create(tmp_path_factory.mktemp("web-types"))
    store.env[f"KI_DMS__SOURCES__{SOURCE.upper()}__SECRET"] = SECRET
    store.ki("demo", "--examples", str(REPO / "examples"), "--state-dir", str(store.root / "state"))
    (store.root / "events.jsonl").write_text(json.dumps(PROBE) + "\n", encoding="utf-8")
    store.ki("events", "replay", str(store.root / "events.jsonl"), "--source", SOURCE)
    running = KiServer.start(store)
    yield running
    running.stop()


def titles_of_type(page, doc_type: str) -> set[str]:
    return {hit["title"] for hit in search(page, "", doc_type=doc_type)}


def test_the_type_filter_finds_the_demo_decisions_as_urteil_and_beschluss(browser, server, artifacts) -> None:
    with browsing(browser, server, ANNA) as page:
        judgments = titles_of_type(page, "doc_type:decision.judgment")
        screenshot(page, artifacts, "types-01-urteil")
        orders = titles_of_type(page, "doc_type:decision.order")
        decisions = titles_of_type(page, "doc_type:decision")

    assert {title.split(",")[0] for title in judgments} == {"LG Berlin", "BAG"}
    assert {title.split(",")[0] for title in orders} == {"BVerwG"}
    assert decisions == judgments | orders


def test_the_type_filter_finds_the_reply_letter_as_a_letter_not_a_contract(browser, server) -> None:
    with browsing(browser, server, ANNA) as page:
        letters = titles_of_type(page, "doc_type:correspondence.letter")
        contracts = titles_of_type(page, "doc_type:contract")
        memos = titles_of_type(page, "doc_type:memo")
        annexes = titles_of_type(page, "doc_type:annex")

    assert any(title.startswith(REPLY_LETTER) for title in letters)
    assert len(letters) == 3  # the Stadtwerke's letter, the reply, the dismissal of Dr. Vogt
    assert not any(title.startswith(REPLY_LETTER) for title in contracts)
    assert len(contracts) == 2 and len(memos) == 2 and len(annexes) == 1  # RV-2023-017 (three versions, one hit), Arbeitsvertrag


def test_a_hit_for_vertrag_marks_vertrag_and_vertraege_but_not_unvertraeglich(browser, server, artifacts) -> None:
    with browsing(browser, server, ANNA) as page:
        search(page, "Vertrag")
        probe = page.locator("#hits > li.hit", has=page.locator(".project", has_text="kontorwerk"))
        excerpt = probe.locator(".excerpt").inner_text()
        probe_marks = probe.locator(".excerpt mark").all_inner_texts()
        every_mark = page.locator("#hits .excerpt mark").all_inner_texts()
        screenshot(page, artifacts, "highlight-01-vertrag")

    assert "unverträglich" in excerpt
    assert probe_marks == ["Vertrag", "Verträge"]
    analyzer = german_analyzer()
    assert every_mark and all(analyzer.analyze(mark) == ["vertrag"] for mark in every_mark), every_mark
