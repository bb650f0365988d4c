"""Browsing the web page as one account: a fresh browser context (its own cookies), signed in by the form."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlencode

from tests.ki_query.web.ki_server import Account, KiServer

LAPTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}


@contextmanager
def browsing(browser, server: KiServer, account: Account | None, viewport: dict = LAPTOP) -> Iterator[object]:
    context = browser.new_context(base_url=server.url, viewport=viewport)
    context.set_default_timeout(15_000)
    page = context.new_page()
    try:
        if account is not None:
            sign_in(page, account)
        yield page
    finally:
        context.close()


def sign_in(page, account: Account) -> None:
    page.goto("/signin")
    page.fill("#credential", account.key)
    page.press("#credential", "Enter")
    page.wait_for_url("**/search")


def search(page, query: str = "", **params: str) -> list[dict]:
    """Open the result page of a search; the hits as (document id, project, title)."""
    page.goto("/search?" + urlencode({"q": query, **params}))
    return shown_hits(page)


def shown_hits(page) -> list[dict]:
    return page.eval_on_selector_all(
        "#hits > li.hit",
        """items => items.map(item => ({document_id: item.dataset.documentId,
            project: item.querySelector('.project').textContent, title: item.querySelector('h3 a').textContent}))""",
    )


def screenshot(page, artifacts: Path, name: str) -> None:
    page.screenshot(path=str(artifacts / f"{name}.png"), full_page=True)
