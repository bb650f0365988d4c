"""The search page speaks the query language (issue 39): the count, "Keine gute Übereinstimmung",
facets to click, date order, phrases, exclusions and a refused query, in headless Chromium
against `ki serve` on the demo store (anna.berg sees both clients)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.ki_query.web.browsing import browsing, screenshot, search, shown_hits
from tests.ki_query.web.ki_server import ACCOUNTS, KiServer, KiStore

REPO = Path(__file__).resolve().parents[3]
ANNA = ACCOUNTS["anna"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KiServer]:
    store = KiStore.create(tmp_path_factory.mktemp("web-query-language"))
    store.ki("demo", "--examples", str(REPO / "examples"), "--state-dir", str(store.root / "state"))
    running = KiServer.start(store)
    yield running
    running.stop()


def api_search(server: KiServer, body: dict) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/search", json=body, headers={"X-API-Key": ANNA.key}, timeout=60)


def shown_count(page) -> int:
    return int(page.get_attribute("#result-count", "data-total"))


def excerpts(page) -> list[str]:
    return page.eval_on_selector_all("#hits .excerpt", "items => items.map(item => item.textContent)")


def test_the_page_says_how_many_documents_match(browser, server, artifacts) -> None:
    answer = api_search(server, {"query": '"fristlose Kündigung"', "limit": 10}).json()
    with browsing(browser, server, ANNA) as page:
        hits = search(page, '"fristlose Kündigung"')
        assert page.locator("#result-count").inner_text() == f"{answer['total']} Treffer"
        assert shown_count(page) == answer["total"] == len(hits) >= 1
        search(page, "Kündigung")
        assert page.locator("#result-count").inner_text().startswith("etwa ")  # a ranked query: an estimate
        screenshot(page, artifacts, "q-01-count")


def files_containing(pattern: str) -> set[str]:
    """The demo files whose text holds the pattern: the oracle of a phrase search."""
    return {
        path.name for path in (REPO / "examples").glob("kanzlei-*/*/*")
        if re.search(pattern, path.read_text(encoding="utf-8"), re.IGNORECASE)
    }


def test_a_phrase_finds_the_words_in_a_row_only(browser, server) -> None:
    expected = files_containing(r"fristlose\s+Kündigung")
    assert len(expected) == 2  # the Kündigungsschutz memo and the LG Berlin judgment
    with browsing(browser, server, ANNA) as page:
        phrase = search(page, '"fristlose Kündigung"')
        assert shown_count(page) == len(phrase) == len(expected)
        words = search(page, "fristlose Kündigung")
        assert {h["document_id"] for h in phrase} < {h["document_id"] for h in words}


def test_an_excluded_word_is_in_no_hit(browser, server) -> None:
    with browsing(browser, server, ANNA) as page:
        search(page, "Kündigung fristlos")
        assert any("fristlos" in text for text in excerpts(page))
        hits = search(page, "Kündigung -fristlos")
        assert hits
        assert not any("fristlos" in text.lower() for text in excerpts(page))


def test_an_excluded_citation_hides_every_document_citing_it(browser, server) -> None:
    """`-§ 314 BGB` takes the whole citation: no hit cites § 314 BGB (the old reading excluded only "§")."""
    citing = api_search(server, {"query": "norm:§ 314 BGB", "limit": 50}).json()["hits"]
    cited = {hit["citation"]["document"]["id"] for hit in citing}
    with browsing(browser, server, ANNA) as page:
        assert cited & {h["document_id"] for h in search(page, "Kündigung")}  # else the exclusion would show nothing
        hits = search(page, "Kündigung -§ 314 BGB")
        assert hits and not cited & {h["document_id"] for h in hits}
        assert shown_count(page) == len(hits)


def test_a_facet_click_narrows_the_search(browser, server, artifacts) -> None:
    with browsing(browser, server, ANNA) as page:
        search(page, "Kündigung")
        facet = page.locator("#facet-project a.facet-value").first
        name = facet.get_attribute("data-value")
        count = int(facet.locator(".facet-count").inner_text().strip("()"))
        facet.click()
        page.wait_for_selector("#result-count")
        assert f'projekt:"{name}"' in page.input_value("#q")
        hits = shown_hits(page)
        assert hits and {h["project"] for h in hits} == {name}
        assert shown_count(page) == count == len(hits)
        screenshot(page, artifacts, "q-02-facet")


def test_date_order_newest_and_oldest_first(browser, server, artifacts) -> None:
    with browsing(browser, server, ANNA) as page:
        search(page, "Vertrag Kündigung")
        page.click("#sort-date_desc")
        page.wait_for_selector("#sort-date_desc[aria-current]")
        newest = page.eval_on_selector_all("#hits time", "items => items.map(item => item.getAttribute('datetime'))")
        assert len(newest) >= 3 and newest == sorted(newest, reverse=True)
        page.click("#sort-date_asc")
        page.wait_for_selector("#sort-date_asc[aria-current]")
        oldest = page.eval_on_selector_all("#hits time", "items => items.map(item => item.getAttribute('datetime'))")
        assert oldest == sorted(oldest) and oldest[0] <= min(newest) and oldest != newest
        screenshot(page, artifacts, "q-03-date-order")


def test_a_malformed_query_is_refused_with_its_position(browser, server, artifacts) -> None:
    with browsing(browser, server, ANNA) as page:
        hits = search(page, 'Kündigung "fristlos')
        assert hits == []
        error = page.locator("#search-error").inner_text()
        assert "Anführungszeichen wird nicht geschlossen" in error and "Stelle 11" in error
        assert page.locator("#search-hint").is_visible()
        screenshot(page, artifacts, "q-04-error")
    refused = api_search(server, {"query": "datum:2021-01-01..2020-01-01 Kündigung"})
    assert refused.status_code == 400
    assert refused.json()["position"] == 0 and "Anfang liegt nach dem Ende" in refused.json()["detail"]


def test_nonsense_says_no_good_match(browser, server) -> None:
    with browsing(browser, server, ANNA) as page:
        search(page, "xqzw Blumenkohl Raumfahrt")
        assert page.locator("#no-good-match").is_visible()
        assert "Keine gute Übereinstimmung" in page.locator("#no-good-match").inner_text()


def test_facets_and_counts_in_the_http_response(server) -> None:
    answer = api_search(server, {"query": "Kündigung", "facets": True}).json()
    assert answer["total_is_estimate"] is True and answer["total"] >= len(answer["hits"])
    assert {"type", "project", "year", "court"} <= set(answer["facets"])
    assert sum(v["count"] for v in answer["facets"]["project"]) == answer["total"]
