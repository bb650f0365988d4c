"""Reading a document in headless Chromium (issue 38), against `ki serve` on the demo store with the BGB
tenancy statutes loaded: from a hit to its passage, the contract's § 6, the version switch, the download of
the original, a statute reference to its section page, and the walled lawyer's 404s. One server for the module."""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.ki_query.web.browsing import browsing, screenshot, search
from tests.ki_query.web.ki_server import ACCOUNTS, KiServer, KiStore

REPO = Path(__file__).resolve().parents[3]
ANNA, TOM = ACCOUNTS["anna"], ACCOUNTS["tom"]
CONTRACT = "Rahmenliefervertrag Nr. RV-2023-017"
# Words of the executed contract's § 6 (examples/kanzlei-mandant-nordbau/01_vertraege/rv-2023-017_v3_unterzeichnet.txt).
SECTION_6 = "ist die Haftung der Lieferantin auf den vertragstypischen, vorhersehbaren Schaden begrenzt"
NO_SUCH_DOCUMENT = "0" * 32


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[KiStore, KiServer]]:
    store = KiStore.create(tmp_path_factory.mktemp("web-reading"))
    store.ki("demo", "--examples", str(REPO / "examples"), "--state-dir", str(store.root / "state"))
    store.ki("corpus", "load", "statutes", str(REPO / "examples" / "statutes" / "bgb-mietrecht.jsonl.gz"))
    running = KiServer.start(store)
    yield store, running
    running.stop()


@pytest.fixture(scope="module")
def server(demo: tuple[KiStore, KiServer]) -> KiServer:
    return demo[1]


def api(server: KiServer, account, path: str, **params) -> dict:
    response = httpx.get(f"{server.url}/v1{path}", params=params, headers={"X-API-Key": account.key}, timeout=30)
    response.raise_for_status()
    return response.json()


def search_api(server: KiServer, account, query: str) -> list[dict]:
    response = httpx.post(f"{server.url}/v1/search", json={"query": query, "limit": 20},
                          headers={"X-API-Key": account.key}, timeout=30)
    response.raise_for_status()
    return response.json()["hits"]


def contract_id(server: KiServer) -> str:
    return next(h["document_id"] for h in search_api(server, ANNA, "Haftungsbegrenzung Rahmenliefervertrag")
                if h["citation"]["document"]["title"].startswith(CONTRACT))


def test_from_a_hit_the_matched_passage_is_shown_highlighted(browser, server, artifacts) -> None:
    with browsing(browser, server, ANNA) as page:
        search(page, "Haftungsbegrenzung")
        hit = page.locator("#hits > li.hit", has=page.locator("h3 a", has_text=CONTRACT)).first
        excerpt = hit.locator(".excerpt").inner_text().strip("…")
        hit.locator("h3 a").click()
        page.wait_for_selector("#document-text")
        passage = page.locator("#passage")
        assert passage.is_visible() and passage.evaluate("e => e.getBoundingClientRect().top < window.innerHeight")
        shown = " ".join(page.locator(".passage").all_inner_texts())
        assert " ".join(excerpt.split())[:60] in " ".join(shown.split())
        assert page.locator(".passage mark").count() >= 1  # the query's words inside the passage
        screenshot(page, artifacts, "reading-01-passage")


def test_the_contracts_page_shows_its_section_6(browser, server, artifacts) -> None:
    with browsing(browser, server, ANNA) as page:
        page.goto(f"/documents/{contract_id(server)}")
        text = page.locator("#document-text").inner_text()
        assert "§ 6 Haftung" in text and SECTION_6 in text
        assert "unterzeichnet" in page.locator("#cite-as").input_value()
        page.click("#sections summary")
        page.locator("#sections a[data-section='§ 6']").click()
        page.wait_for_url("**offset=**")
        assert page.locator("#document-text").inner_text().startswith("§ 6 Haftung")
        screenshot(page, artifacts, "reading-02-contract")


def test_the_version_switch_shows_each_visible_version(browser, server) -> None:
    document_id = contract_id(server)
    view = api(server, ANNA, f"/documents/{document_id}")
    draft = next(v["version"]["id"] for v in view["versions"] if v["version"]["status"] == "draft")
    with browsing(browser, server, ANNA) as page:
        page.goto(f"/documents/{document_id}")
        shown = page.locator("#reading").get_attribute("data-version-id")
        assert shown == view["latest_final_version_id"]
        page.locator(f"#version-switch a[data-version-id='{draft}']").click()
        page.wait_for_selector(f"#reading[data-version-id='{draft}']")
        expected = api(server, ANNA, f"/documents/{document_id}/text", version=draft)["text"]
        assert page.locator("#document-text").inner_text().strip() == expected.strip()
        assert page.locator("#version-switch a[aria-current]").get_attribute("data-version-id") == draft


def test_download_returns_the_bytes_of_the_versions_content_hash(browser, demo) -> None:
    store, server = demo
    document_id = contract_id(server)
    with browsing(browser, server, ANNA) as page:
        page.goto(f"/documents/{document_id}")
        version_id = page.locator("#reading").get_attribute("data-version-id")
        with page.expect_download() as download:
            page.click("#download")
        data = Path(download.value.path()).read_bytes()
        assert download.value.suggested_filename == "rv-2023-017_v3_unterzeichnet.txt"
    with sqlite3.connect(store.root / "state" / "ki.db") as db:
        (content_hash,) = db.execute("SELECT content_hash FROM document_versions WHERE id = ?", (version_id,)).fetchone()
    assert hashlib.sha256(data).hexdigest() == content_hash


def test_a_statute_reference_opens_its_section(browser, server, artifacts) -> None:
    hits = search_api(server, ANNA, "Formularklausel preisgebundener Wohnraum Mieterhöhung")
    decision = next(h["document_id"] for h in hits if h["citation"]["document"]["key"] == "lg-berlin-2006-03-16-urteil")
    with browsing(browser, server, ANNA) as page:
        page.goto(f"/documents/{decision}")
        link = page.locator("#document-text a.statute", has_text="§ 535 Abs. 2 BGB").first
        link.click()
        page.wait_for_selector("#statute")
        assert page.locator("#statute h1").inner_text().startswith("§ 535 BGB")
        assert "Der Mieter ist verpflichtet, dem Vermieter die vereinbarte Miete zu entrichten." in page.locator(
            "#statute").inner_text()
        screenshot(page, artifacts, "reading-03-statute")
        assert page.goto("/statutes/statutes/BGB/%C2%A7%209999").status == 404


def test_the_walled_lawyer_gets_the_same_404_for_document_text_and_original_as_for_no_document(
    browser, server, artifacts
) -> None:
    walled = next(h["document_id"] for h in search_api(server, ANNA, "Kündigung aus wichtigem Grund")
                  if h["citation"]["project"]["name"] == "hanse-pharma")
    with browsing(browser, server, TOM) as page:
        for suffix in ("", "/text", "/original"):
            pages = []
            for document_id in (walled, NO_SUCH_DOCUMENT):
                response = page.goto(f"/documents/{document_id}{suffix}")
                assert response.status == 404
                pages.append(page.locator("main").inner_html().replace(document_id, "ID"))
            assert pages[0] == pages[1], suffix
            assert "hanse" not in pages[0]
        screenshot(page, artifacts, "reading-04-walled-404")
