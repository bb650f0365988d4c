"""Paging on the web page, in headless Chromium: a store of 250 BGB sections (one file each, from
tests/fixtures/bgb-absaetze.jsonl.gz) ingested by `ki ingest`, so a query has far more hits than
four pages; clicking "Weiter" walks one ranking with no hit twice."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ki_query.web.browsing import browsing, screenshot, search, shown_hits
from tests.ki_query.web.ki_server import ACCOUNTS, KiServer, KiStore

CORPUS = Path(__file__).parents[2] / "fixtures" / "bgb-absaetze.jsonl.gz"
SECTIONS = 250
PAGES = 5


def write_sections(folder: Path, count: int) -> None:
    """One text file per section: its heading, then its Absätze."""
    sections: dict[str, list[dict]] = {}
    with gzip.open(CORPUS, "rt", encoding="utf-8") as lines:
        for row in map(json.loads, lines):
            sections.setdefault(row["section"], []).append(row)
    folder.mkdir()
    for n, (section, parts) in enumerate(list(sections.items())[:count]):
        body = "\n\n".join(part["text"] for part in parts)
        (folder / f"bgb-{n:04d}.txt").write_text(f"{section} BGB {parts[0]['heading'] or ''}\n\n{body}\n", encoding="utf-8")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KiServer]:
    store = KiStore.create(tmp_path_factory.mktemp("web-paging"))
    write_sections(store.root / "bgb", SECTIONS)
    store.ki("init")
    store.ki("ingest", str(store.root / "bgb"), "--project", "bgb")
    store.ki("access", "grant", "anna.berg", "--project", "bgb")
    running = KiServer.start(store)
    yield running
    running.stop()


def test_clicking_through_five_pages_shows_no_hit_twice(browser, server, artifacts) -> None:
    seen: list[str] = []
    with browsing(browser, server, ACCOUNTS["anna"]) as page:
        search(page, "Vertrag Schuldner Leistung")
        for number in range(1, PAGES + 1):
            assert page.locator("#page-number").inner_text() == str(number)
            hits = shown_hits(page)
            assert len(hits) == 10, f"page {number} is not full"
            seen += [h["document_id"] for h in hits]
            if number == 4:
                screenshot(page, artifacts, "12-search-page-4")
            page.click("#next-page")
            page.wait_for_url(f"**page={number + 1}")
        page.click("#previous-page")
        page.wait_for_url(f"**page={PAGES}")
        assert [h["document_id"] for h in shown_hits(page)] == seen[-10:], "a page read again is the same slice"
    assert len(seen) == len(set(seen)) == PAGES * 10


def test_the_filter_only_listing_pages_too(browser, server) -> None:
    with browsing(browser, server, ACCOUNTS["anna"]) as page:
        first = [h["document_id"] for h in search(page)]
        page.click("#next-page")
        page.wait_for_url("**page=2")
        second = [h["document_id"] for h in shown_hits(page)]
    assert len(first) == len(second) == 10 and not set(first) & set(second)


def test_a_lawyer_without_a_grant_sees_none_of_it(browser, server) -> None:
    with browsing(browser, server, ACCOUNTS["tom"]) as page:
        assert search(page, "Vertrag Schuldner Leistung") == []
        assert page.locator("#no-hits").is_visible()
