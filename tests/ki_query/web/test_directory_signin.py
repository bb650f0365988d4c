"""Signing in to the web page through the firm's directory: Keycloak's real login form, its groups as access.

`ki serve` on the demo store, configured for the realm `ki` of `make services`' Keycloak:
clara.wolf (group partner) reaches both clients through the demo's grant to group:partner;
ben.kurz (group arbeitsrecht) only nordbau, which the test grants to group:arbeitsrecht, so
hanse-pharma stays behind the wall for him.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.ki_query.keycloak import BEN, CLARA, DirectoryUser, issuer, jwt_settings, oidc_settings  # noqa: F401
from tests.ki_query.web.browsing import screenshot, search
from tests.ki_query.web.ki_server import ACCOUNTS, KiServer, KiStore

REPO = Path(__file__).resolve().parents[3]
WALL_QUERY = "Kündigung aus wichtigem Grund"
WALLED_PROJECT, OPEN_PROJECT = "hanse-pharma", "nordbau"
ADMIN = ACCOUNTS["admin"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, issuer: str) -> Iterator[KiServer]:  # noqa: F811
    store = KiStore.create(tmp_path_factory.mktemp("web-directory"))
    config = json.loads(Path(store.env["KI_CONFIG_FILE"]).read_text(encoding="utf-8"))
    config["security"] |= {"jwt": jwt_settings(issuer).model_dump(exclude_defaults=True),
                           "oidc": {"client_id": oidc_settings().client_id, "client_secret": "ki-web-test-secret"}}
    Path(store.env["KI_CONFIG_FILE"]).write_text(json.dumps(config), encoding="utf-8")
    store.ki("demo", "--examples", str(REPO / "examples"), "--state-dir", str(store.root / "state"))
    store.ki("access", "grant", "group:" + BEN.group, "--project", OPEN_PROJECT)
    running = KiServer.start(store)
    yield running
    running.stop()


def sign_in_at_the_directory(page, user: DirectoryUser) -> None:
    page.goto("/signin")
    page.click("#signin-directory")
    page.wait_for_selector("#kc-form-login")  # Keycloak's own login form
    page.fill("#username", user.username)
    page.fill("#password", user.password)
    page.click("#kc-login")
    page.wait_for_url("**/search")


@pytest.fixture
def signed_in(browser, server):
    contexts = []

    def open_as(user: DirectoryUser):
        context = browser.new_context(base_url=server.url)
        context.set_default_timeout(30_000)
        contexts.append(context)
        page = context.new_page()
        sign_in_at_the_directory(page, user)
        return page

    yield open_as
    for context in contexts:
        context.close()


def test_a_partner_signs_in_at_the_directory_and_sees_both_clients(signed_in, artifacts) -> None:
    page = signed_in(CLARA)
    assert "partner" in page.locator("#subject").inner_text().split(", ")
    hits = search(page, WALL_QUERY)
    screenshot(page, artifacts, "20-directory-partner")
    assert {WALLED_PROJECT, OPEN_PROJECT} <= {h["project"] for h in hits}


def test_another_group_sees_the_wall(signed_in, server, artifacts) -> None:
    page = signed_in(BEN)
    hits = search(page, WALL_QUERY)
    screenshot(page, artifacts, "21-directory-associate")
    assert hits and {h["project"] for h in hits} == {OPEN_PROJECT}
    walled = _walled_document(server)
    assert page.goto(f"/documents/{walled}").status == 404
    assert page.goto(f"/documents/{hits[0]['document_id']}").status == 200
    trail = httpx.get(f"{server.url}/v1/audit", params={"user": BEN.username},
                      headers={"X-API-Key": ADMIN.key}, timeout=30).json()
    reads = [e["document_id"] for e in trail if e["action"] == "read" and e["surface"] == "web"]
    assert reads == [hits[0]["document_id"]]  # a refused read shows nothing, so records nothing
    searched = next(e for e in trail if e["action"] == "search" and e["surface"] == "web")
    assert searched["query"] == WALL_QUERY and searched["principals"][-1] == BEN.group


def test_the_session_cookie_lives_as_long_as_the_token(signed_in) -> None:
    page = signed_in(CLARA)
    cookie = next(c for c in page.context.cookies() if c["name"] == "ki_session")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    assert time.time() < cookie["expires"] <= time.time() + 900 + 5  # the realm's access token lifespan
    assert "ki_session" not in page.evaluate("document.cookie")


def test_every_page_carries_a_content_security_policy(signed_in) -> None:
    page = signed_in(CLARA)
    for path in ("/search", "/ask", "/signin"):
        policy = page.goto(path).headers.get("content-security-policy", "")
        assert "default-src 'self'" in policy and "frame-ancestors 'none'" in policy


def test_sign_out_ends_the_directory_session_too(signed_in) -> None:
    page = signed_in(CLARA)
    page.click("#signout")
    page.wait_for_url("**/signin")
    assert not [c for c in page.context.cookies() if c["name"] in ("ki_session", "ki_id_token")]
    page.goto("/search")
    assert page.url.endswith("/signin")
    page.click("#signin-directory")
    page.wait_for_selector("#kc-form-login")  # asked for the password again, not signed in silently


def test_a_callback_that_is_not_this_browsers_sign_in_is_refused(server) -> None:
    response = httpx.get(f"{server.url}/signin/callback", params={"code": "stolen", "state": "guessed"}, timeout=30)
    assert response.status_code == 401
    assert "ki_session" not in response.headers.get("set-cookie", "")


def _walled_document(server: KiServer) -> str:
    hits = httpx.post(f"{server.url}/v1/search", json={"query": WALL_QUERY, "limit": 20},
                      headers={"X-API-Key": ADMIN.key}, timeout=30).json()["hits"]
    return next(h["document_id"] for h in hits if h["citation"]["project"]["name"] == WALLED_PROJECT)
