"""The HTTP API's docs page works on a network without the internet: Swagger UI comes from the package.

Headless Chromium against a real `ki serve`, every request that leaves the server's own address
aborted, as on a firm's closed network; the page must still draw the API's operations. An admin's
web page says what admin means: they see everything.
"""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import urlparse

import pytest

from tests.ki_query.web.browsing import browsing, screenshot
from tests.ki_query.web.ki_server import ACCOUNTS, KiServer, KiStore


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KiServer]:
    store = KiStore.create(tmp_path_factory.mktemp("docs-offline"))
    store.ki("init")
    running = KiServer.start(store)
    yield running
    running.stop()


def offline(page, server: KiServer) -> list[str]:
    """Abort every request to another host; returns the URLs that tried to leave."""
    own = urlparse(server.url).netloc
    left: list[str] = []

    def route(request_route) -> None:
        if urlparse(request_route.request.url).netloc == own:
            request_route.continue_()
        else:
            left.append(request_route.request.url)
            request_route.abort()

    page.route("**/*", route)
    return left


@pytest.mark.parametrize(("path", "title"), [("/v1/docs", "query API"), ("/docs", "DMS ingress")])
def test_the_docs_page_draws_the_api_without_the_internet(browser, server, artifacts, path: str, title: str) -> None:
    with browsing(browser, server, None) as page:
        left = offline(page, server)
        page.goto(path)
        page.wait_for_selector(".swagger-ui .info .title", timeout=30_000)
        assert title in page.locator(".swagger-ui .info .title").inner_text()
        assert page.locator(".opblock").count() > 0, "the operations are listed"
        screenshot(page, artifacts, f"docs-offline{path.replace('/', '-')}")
        assert left == []


def test_an_admin_is_told_they_see_everything(browser, server) -> None:
    with browsing(browser, server, ACCOUNTS["admin"]) as page:
        assert page.locator("#admin-banner").inner_text() == "Sie sehen als Admin alles, auch gesperrte Dokumente."
    with browsing(browser, server, ACCOUNTS["anna"]) as page:
        assert page.locator("#admin-banner").count() == 0
