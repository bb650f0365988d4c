"""The web app: sign-in, search, document, ask and operations pages, mounted at `/` by ki.asgi.

No `from __future__ import annotations`: FastAPI reads the handlers' annotations at runtime.
"""

from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from ki_core.config import Settings
from ki_core.grants import UnknownTarget
from ki_query.retrieval import RetrievalService
from ki_query.web import catalog, oidc, operations, reading
from ki_query.web.api import ApiRefusal, QueryApi
from ki_query.web.credentials import (
    CrossSiteRequest,
    SignInRequired,
    WebCaller,
    check_csrf,
    check_same_origin,
    forget,
    refusal,
    remember,
    signed_in,
)
from ki_query.web.render import STATIC_DIR, Pages
from ki_query.web.search_form import PAGE_SIZE, SORT_ORDERS, SearchForm
from ki_query.web.text import LANGUAGE_COOKIE, LANGUAGES

# A sign-in or redrive form is a few hundred bytes; anything much larger is not ours.
MAX_FORM_BYTES = 16_384
CONTENT_SECURITY_POLICY = "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'"
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    # A signed-out browser's back button must not show a page of hits again.
    "Cache-Control": "no-store",
}


class AdminOnly(Exception):
    """A page for security.admin_principals, asked for by someone else (HTTP 403)."""


def create_web_app(
    settings: Settings,
    service: Callable[[], RetrievalService],
    federated: Callable[[], Any] | None = None,
    redrive: operations.Redrive | None = None,
    flower_url: str | None = None,
) -> FastAPI:
    """The pages, for `app.mount("/", ...)` after /v1 and /mcp; they share the process's `service`
    and `federated` (its models and caches) through a query app of their own."""
    from ki_query.api.http import create_query_app

    web = WebPages(settings, service, QueryApi(create_query_app(settings, service, federated=federated)),
                   redrive=redrive, flower_url=flower_url)
    app = FastAPI(title="LegalMemory knowledge index: web", docs_url=None, redoc_url=None, openapi_url=None)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    web.register(app)
    app.middleware("http")(_security_headers(settings))
    return app


def _security_headers(settings: Settings) -> Callable:
    """The headers of every page. Sign-out posts a form that redirects to the directory's logout,
    and a browser checks form-action along the redirects: the issuer's origin is allowed there too."""
    headers = dict(SECURITY_HEADERS)
    if oidc.configured(settings) is not None and settings.security.jwt is not None:
        issuer = urlsplit(settings.security.jwt.issuer)
        headers["Content-Security-Policy"] = f"{CONTENT_SECURITY_POLICY} {issuer.scheme}://{issuer.netloc}"

    async def add(request: Request, call_next) -> Response:
        response = await call_next(request)
        for name, value in headers.items():
            response.headers.setdefault(name, value)
        return response

    return add


class WebPages:
    def __init__(self, settings: Settings, service: Callable[[], RetrievalService], api: QueryApi, *,
                 redrive: operations.Redrive | None, flower_url: str | None) -> None:
        self.settings, self.service, self.api = settings, service, api
        self.redrive, self.flower_url = redrive, flower_url
        self.pages = Pages()
        self._session_factory: sessionmaker[Session] | None = None

    def register(self, app: FastAPI) -> None:
        routes: list[tuple[str, Callable, str]] = [
            ("/", self.home, "GET"), ("/signin", self.signin_page, "GET"), ("/signin", self.signin, "POST"),
            ("/signin/oidc", self.signin_oidc, "GET"), (oidc.CALLBACK_PATH, self.signin_callback, "GET"),
            ("/signout", self.signout, "POST"), ("/language/{code}", self.language, "GET"),
            ("/search", self.search, "GET"), ("/documents/{document_id}", self.document, "GET"),
            ("/documents/{document_id}/text", self.document_text, "GET"),
            ("/documents/{document_id}/original", self.document_original, "GET"),
            ("/statutes/{corpus_id}/{container}/{section}", self.statute, "GET"),
            ("/ask", self.ask, "GET"), ("/operations", self.operations_page, "GET"), ("/audit", self.audit_page, "GET"),
            ("/operations/events/{row_id}/redrive", self.redrive_event, "POST"),
        ]
        for path, handler, method in routes:
            app.add_api_route(path, handler, methods=[method], response_class=HTMLResponse, include_in_schema=False)
        app.add_exception_handler(SignInRequired, self._to_signin)
        app.add_exception_handler(ApiRefusal, self._refused)
        app.add_exception_handler(CrossSiteRequest, self._forbidden)
        app.add_exception_handler(AdminOnly, self._forbidden)
        app.add_exception_handler(StarletteHTTPException, self._http_error)

    # ------------------------------------------------------------ sign-in

    async def home(self, request: Request) -> Response:
        signed_in(self.settings, request)
        return RedirectResponse("/search", status_code=303)

    async def signin_page(self, request: Request) -> Response:
        try:
            signed_in(self.settings, request)
        except SignInRequired:
            return self.pages.render(request, "signin.html", directory=oidc.configured(self.settings) is not None)
        return RedirectResponse("/search", status_code=303)

    async def signin_oidc(self, request: Request) -> Response:
        if oidc.configured(self.settings) is None:
            raise StarletteHTTPException(404, "sign-in through a directory is not configured (security.oidc)")
        return await run_in_threadpool(oidc.begin, self.settings, request, RedirectResponse)

    async def signin_callback(self, request: Request) -> Response:
        """The directory's answer: a signed-in page that moves on to the search by itself.

        Not a redirect: a SameSite=Strict cookie set in a navigation that started at another
        site would not be sent on the redirect's request; the page's own move is same-site.
        """
        if oidc.configured(self.settings) is None:
            raise StarletteHTTPException(404, "sign-in through a directory is not configured (security.oidc)")
        try:
            tokens = await oidc.finish(self.settings, request)
        except oidc.SignInFailed as exc:
            return self.pages.render(request, "signin.html", status_code=401, error=str(exc), directory=True)
        problem = refusal(self.settings, tokens.access_token)
        if problem is not None:
            return self.pages.render(request, "signin.html", status_code=401, error=problem, directory=True)
        response = self.pages.render(request, "signed_in.html")
        remember(response, request, tokens.access_token, max_age=tokens.expires_in)
        oidc.remember_id_token(response, request, tokens)
        return response

    async def signin(self, request: Request) -> Response:
        check_same_origin(request)
        credential = (await _form(request)).get("credential", "").strip()
        problem = refusal(self.settings, credential)
        if problem is not None:
            return self.pages.render(request, "signin.html", status_code=401, error=problem,
                                     directory=oidc.configured(self.settings) is not None)
        response = RedirectResponse("/search", status_code=303)
        remember(response, request, credential)
        return response

    async def signout(self, request: Request) -> Response:
        form = await _form(request)
        try:
            check_csrf(signed_in(self.settings, request), form.get("csrf"))
        except SignInRequired:
            pass  # nothing valid to sign out of: clearing the cookie is all there is to do
        directory_logout = await run_in_threadpool(oidc.logout_url, self.settings, request)
        response = RedirectResponse(directory_logout or "/signin", status_code=303)
        forget(response, request)
        oidc.forget_id_token(response)
        return response

    async def language(self, request: Request, code: str) -> Response:
        target = request.query_params.get("next", "/search")
        target = target if target.startswith("/") and not target.startswith("//") else "/search"
        response = RedirectResponse(target, status_code=303)
        if code in LANGUAGES:
            response.set_cookie(LANGUAGE_COOKIE, code, samesite="strict", secure=request.url.scheme == "https",
                                max_age=365 * 24 * 3600, path="/")
        return response

    # ------------------------------------------------------------ lawyer pages

    async def search(self, request: Request) -> Response:
        caller, is_admin = await self._caller(request)
        form = SearchForm.from_params(request.query_params)
        choices = await run_in_threadpool(self._choices, caller)
        answer, error = await self._answer(caller, *form.request())
        hits = answer.get("hits", [])
        matters = await run_in_threadpool(self._read, catalog.matter_names, [h["document_id"] for h in hits])
        return self._render(request, "search.html", caller, is_admin, form=form, choices=choices, hits=hits,
                            has_more=answer.get("has_more", False), matters=matters, error=error, page_size=PAGE_SIZE,
                            total=answer.get("total"), estimate=answer.get("total_is_estimate", False),
                            match=answer.get("match"), facets=answer.get("facets"), sort_orders=SORT_ORDERS,
                            doc_types=catalog.doc_type_choices(), statuses=catalog.STATUS_CHOICES,
                            languages=catalog.LANGUAGE_CHOICES)

    async def document(self, request: Request, document_id: str) -> Response:
        caller, is_admin = await self._caller(request)
        path = f"/v1/documents/{quote(document_id, safe='')}"
        view = await self.api.get(caller, path)
        text = await self._text(caller, path, request)
        related = await self.api.get(caller, f"{path}/related")
        decisions = await run_in_threadpool(self._decisions, caller, view)
        who = request.query_params.get("who", "").strip() if is_admin else ""
        access = await run_in_threadpool(self.service().access.explain, who, view["document"]["id"]) if who else None
        return self._render(request, "document.html", caller, is_admin, view=view, related=related,
                            decisions=decisions, who=who, access=access, text=text, reader=False)

    async def document_text(self, request: Request, document_id: str) -> Response:
        """The text alone (a long document page by page), through the same API reads as the document page."""
        caller, is_admin = await self._caller(request)
        path = f"/v1/documents/{quote(document_id, safe='')}"
        view = await self.api.get(caller, path)
        text = await self._text(caller, path, request)
        return self._render(request, "document.html", caller, is_admin, view=view, text=text, reader=True)

    async def document_original(self, request: Request, document_id: str) -> Response:
        caller, _is_admin = await self._caller(request)
        version = request.query_params.get("version")
        answer = await self.api.download(caller, f"/v1/documents/{quote(document_id, safe='')}/original",
                                         {"version": version} if version else None)
        headers = {"Content-Disposition": answer.headers["content-disposition"]}
        return Response(answer.content, media_type=answer.headers["content-type"], headers=headers)

    async def statute(self, request: Request, corpus_id: str, container: str, section: str) -> Response:
        caller, is_admin = await self._caller(request)
        units = await run_in_threadpool(self._read, reading.section_units, corpus_id, container, section)
        if not units:
            raise StarletteHTTPException(404, f"no section {section} {container} in corpus {corpus_id}")
        return self._render(request, "statute.html", caller, is_admin, corpus_id=corpus_id, container=container,
                            section=section, units=units)

    async def ask(self, request: Request) -> Response:
        caller, is_admin = await self._caller(request)
        question = request.query_params.get("q", "").strip()
        answer, error = await self._answer(caller, "/v1/ask", {"question": question, "limit": 8}) if question else ({}, None)
        return self._render(request, "ask.html", caller, is_admin, question=question, answer=answer, error=error)

    # ------------------------------------------------------------ operations

    async def operations_page(self, request: Request) -> Response:
        caller, is_admin = await self._caller(request)
        if not is_admin:
            raise AdminOnly("operations are for security.admin_principals")
        facts = await run_in_threadpool(self._overview)
        return self._render(request, "operations.html", caller, is_admin, facts=facts, can_redrive=self.redrive is not None,
                            flower_url=self.flower_url, note=request.query_params.get("note", ""))

    async def audit_page(self, request: Request) -> Response:
        """The newest audit records, from the API's admin-only route (its 403 is this page's)."""
        caller, is_admin = await self._caller(request)
        where = {k: v.strip() for k, v in request.query_params.items() if k in ("user", "document", "group") and v.strip()}
        entries = await self.api.get(caller, "/v1/audit", params=where)
        return self._render(request, "audit.html", caller, is_admin, entries=entries, where=where)

    async def redrive_event(self, request: Request, row_id: str) -> Response:
        caller, is_admin = await self._caller(request)
        check_csrf(caller, (await _form(request)).get("csrf"))
        if not is_admin:
            raise AdminOnly("operations are for security.admin_principals")
        if self.redrive is None:
            raise ApiRefusal(400, f"this process cannot redrive events; run: ki events redrive {row_id}")
        try:
            outcome = await run_in_threadpool(self.redrive, row_id)
        except UnknownTarget as exc:
            raise ApiRefusal(404, str(exc)) from None
        return RedirectResponse(f"/operations?note={quote(outcome)}", status_code=303)

    # ------------------------------------------------------------ helpers

    async def _text(self, caller: WebCaller, path: str, request: Request) -> dict:
        """The part of the version's text the page shows, drawn: around the hit's passage (`from`, `to`),
        at `offset`, or from the start; the query's words marked in the passage."""
        params = request.query_params
        passage = _passage(params.get("from"), params.get("to"))
        offset = params.get("offset")
        window = reading.TextWindow.around(int(offset) if offset and offset.isdigit() else None, passage)
        asked = {"offset": offset if offset and not offset.isdigit() else window.offset, "limit": window.limit}
        if params.get("version"):
            asked["version"] = params["version"]
        text = await self.api.get(caller, f"{path}/text", asked)
        links = await run_in_threadpool(self._read, reading.statute_links, text["text"])
        drawn = reading.text_markup(text["text"], text["offset"], passage, params.get("q", ""), links)
        return {**text, "markup": drawn, "passage": passage, "query": params.get("q", "")}

    async def _caller(self, request: Request) -> tuple[WebCaller, bool]:
        caller = signed_in(self.settings, request)
        scope = await run_in_threadpool(self.service().access.compile_scope, caller.identity.principals)
        return caller, scope.is_admin

    async def _answer(self, caller: WebCaller, path: str, body: dict) -> tuple[dict, str | None]:
        """The API's answer, or its reason for a bad request (shown on the page beside the form)."""
        try:
            return await self.api.post(caller, path, body), None
        except ApiRefusal as refusal:
            if refusal.status != 400:
                raise
            return {}, refusal.detail

    def _render(self, request: Request, name: str, caller: WebCaller, is_admin: bool, **context: Any) -> Response:
        return self.pages.render(request, name, caller=caller, is_admin=is_admin, csrf=caller.csrf_token, **context)

    def _sessions(self) -> sessionmaker[Session]:
        """One engine for the page's own reads, opened on the first page that needs it."""
        if self._session_factory is None:
            from ki_core.db import engine_from_settings, session_factory

            self._session_factory = session_factory(engine_from_settings(self.settings))
        return self._session_factory

    def _read(self, reader: Callable, *args: Any) -> Any:
        with self._sessions()() as session:
            return reader(session, *args)

    def _choices(self, caller: WebCaller) -> catalog.FilterChoices:
        access = self.service().access
        principals = caller.identity.principals
        return self._read(catalog.filter_choices, access, principals, access.compile_scope(principals))

    def _decisions(self, caller: WebCaller, view: dict) -> list:
        scope = self.service().access.compile_scope(caller.identity.principals)
        versions = [v["version"]["id"] for v in view["versions"]]
        objects = [s["source_object_id"] for v in view["versions"] for s in v["source_objects"]]
        return self._read(catalog.document_decisions, scope, versions, objects)

    def _overview(self) -> operations.Overview:
        return self._read(operations.overview, self.settings, self.service().index)

    # ------------------------------------------------------------ refusals as pages

    async def _to_signin(self, request: Request, _exc: Exception) -> Response:
        response = RedirectResponse("/signin", status_code=303)
        forget(response, request)
        return response

    async def _refused(self, request: Request, exc: ApiRefusal) -> Response:
        if exc.status == 401:
            return await self._to_signin(request, exc)
        return self.pages.render(request, "error.html", status_code=exc.status, status=exc.status, detail=exc.detail)

    async def _forbidden(self, request: Request, exc: Exception) -> Response:
        return self.pages.render(request, "error.html", status_code=403, status=403, detail=str(exc))

    async def _http_error(self, request: Request, exc: StarletteHTTPException) -> Response:
        return self.pages.render(request, "error.html", status_code=exc.status_code, status=exc.status_code,
                                 detail=str(exc.detail))


def _passage(start: str | None, end: str | None) -> tuple[int, int] | None:
    """A hit's passage from the link's `from` and `to`; anything else is no passage (the text still shows)."""
    if start and end and start.isdigit() and end.isdigit() and int(start) < int(end):
        return int(start), int(end)
    return None


async def _form(request: Request) -> dict[str, str]:
    """An urlencoded form's first value per field (no multipart: the pages send none)."""
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        raise CrossSiteRequest("form too large")
    return {name: values[0] for name, values in parse_qs(body.decode("utf-8", "replace")).items()}
