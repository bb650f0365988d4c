"""The HTTP surface of the read side (FastAPI). Principals come from the caller's credentials only.

Errors map to status codes in one table (ki_query.api.refusals): 400 bad window,
filters or corpus, 401 missing or invalid credentials, 403 not allowed, 404 no
such (visible) document, 502 rerank gateway failed, 503 search index unavailable.

No `from __future__ import annotations` here: FastAPI reads the dependency
annotations at runtime, and `Caller` is local to the router.
"""


from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Header, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from ki_core.audit import AuditAction, AuditEntry, AuditFilter, Surface, audit_log, record, shown_documents
from ki_core.config import Settings
from ki_core.models import RelationKind
from ki_core.openapi import offline_docs, without_validation_422
from ki_core.search.types import SearchFilters
from ki_query.federation.search import FederatedAnswer, FederatedSearch, FederatedSearchOnFirstUse
from ki_query.graph import MAX_TRAVERSAL_DEPTH
from ki_query.identity import Forbidden, Identity, resolve_identity
from ki_query.api.refusals import REFUSAL_STATUS, refusal_reason
from ki_query.reading import DEFAULT_TEXT_CHARS, DocumentText, TextRequest, content_disposition
from ki_query.query_language.syntax import QuerySyntaxError
from ki_query.retrieval import RetrievalService
from ki_query.types import (
    DecisionHit,
    DocumentView,
    NewDecision,
    QueryText,
    RecordId,
    RelatedDocument,
    SearchRequest,
    SearchResponse,
    TraversalResult,
)



class FilterSearchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    filters: SearchFilters = SearchFilters()
    offset: int = Field(default=0, ge=0)
    limit: int = Field(default=10, gt=0, le=500)


class DecisionSearchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: QueryText
    limit: int = Field(default=10, gt=0, le=100)


class AskRequest(BaseModel):
    """A question for the federation; whose it is comes from the credentials, never from the body."""

    model_config = ConfigDict(extra="forbid")

    question: QueryText
    # None: every registered corpus and the firm's index ("firm"); an id no corpus has is a 400.
    corpora: list[RecordId] | None = Field(default=None, min_length=1)
    limit: int = Field(default=8, gt=0, le=100)  # the bounds of `ki ask --top-k`
    explain: bool = False


class TraverseRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    document_id: RecordId
    kinds: list[RelationKind] | None = None
    depth: int = Field(default=1, ge=1, le=MAX_TRAVERSAL_DEPTH)


def create_query_app(
    settings: Settings,
    service: Callable[[], RetrievalService],
    prefix: str = "/v1",
    federated: Callable[[], FederatedSearch] | None = None,
) -> FastAPI:
    """The query API; `service` builds (or returns) the RetrievalService on first use, `federated` the
    FederatedSearch behind /ask (by default one beside `service`; pass the process's one to share it with MCP).

    prefix="" gives an app to mount under /v1 of another one (`ki serve` with the ingress).
    """
    app = FastAPI(title="LegalMemory knowledge index: query API", version="1", docs_url=None, redoc_url=None)
    app.include_router(query_router(settings, service, prefix, federated or FederatedSearchOnFirstUse(service)))
    for exc_type, status in REFUSAL_STATUS:
        app.add_exception_handler(exc_type, _handler(status))
    app.add_exception_handler(RequestValidationError, _invalid_request)
    app.middleware("http")(_not_stored)
    without_validation_422(app)
    return offline_docs(app)


async def _not_stored(request: Request, call_next) -> Response:
    """No answer of the query API may be kept by a cache: a revoked document must not be served from one."""
    response = await call_next(request)
    response.headers.setdefault("Cache-Control", "no-store")
    return response


class ErrorBody(BaseModel):
    """Every refusal: the reason, and for a malformed request each bad field."""

    detail: str
    errors: list[dict[str, str]] | None = None
    # A query the query language cannot read: where (0-based character offset) and what it understands.
    position: int | None = None
    hint: str | None = None


def _error(description: str) -> dict[str, Any]:
    return {"model": ErrorBody, "description": description}


# The statuses every route of the query API may answer (its handlers above), for the OpenAPI document.
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: _error("Malformed request, or a window, depth, filter or corpus outside its bounds (the reason names it)"),
    401: _error("No credentials, or credentials that do not verify"),
    403: _error("Valid credentials that may not do this (e.g. act on behalf of a principal they may not name)"),
    503: _error("The search backend or the database is unavailable, the index does not match this process, "
                "or the search ran past retrieval.query_budget_seconds; retry"),
}
# Only /search reranks; /ask's firm search too, but a failing corpus there is skipped, not refused.
RERANK_FAILED = {502: _error("The LLM gateway (rerank) failed")}
NOT_FOUND = {404: _error("No such document, or not visible to the caller (the two are not told apart)")}
ORIGINAL_UNAVAILABLE = {409: _error("The file changed or is gone since it was indexed, or only its DMS keeps it "
                                    "(the reason names the file)")}


async def _invalid_request(_request: Request, exc: RequestValidationError) -> JSONResponse:
    """400 naming each bad field (FastAPI's default is 422; our clients expect 400 for bad input)."""
    problems = [
        {"field": _printable(".".join(str(p) for p in error["loc"] if p != "body")), "problem": _printable(error["msg"])}
        for error in exc.errors()
    ]
    return JSONResponse({"detail": "invalid request", "errors": problems}, status_code=400)


def _printable(text: str) -> str:
    """A field name from the request may hold a lone surrogate: escaped, so the answer is valid UTF-8."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _handler(status: int):
    async def handle(_request: Request, exc: Exception) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
        body: dict[str, Any] = {"detail": refusal_reason(exc)}
        if isinstance(exc, QuerySyntaxError):
            body |= {"position": exc.position, "hint": exc.hint}
        return JSONResponse(body, status_code=status, headers=headers)

    return handle


def query_router(
    settings: Settings,
    service: Callable[[], RetrievalService],
    prefix: str,
    federated: Callable[[], FederatedSearch],
) -> APIRouter:
    router = APIRouter(prefix=prefix, responses=ERROR_RESPONSES)

    def caller(
        authorization: Annotated[str | None, Header()] = None,
        x_api_key: Annotated[str | None, Header()] = None,
        x_ki_on_behalf_of: Annotated[str | None, Header()] = None,
    ) -> Identity:
        return resolve_identity(settings, authorization=authorization, api_key=x_api_key, on_behalf_of=x_ki_on_behalf_of)

    Caller = Annotated[Identity, Depends(caller)]
    log = audit_log(settings)

    def surface(x_ki_surface: Annotated[str | None, Header(include_in_schema=False)] = None) -> Surface:
        return Surface.WEB if x_ki_surface == Surface.WEB.value else Surface.HTTP

    On = Annotated[Surface, Depends(surface)]

    @router.post("/search", response_model=SearchResponse, responses=RERANK_FAILED)
    def search(body: SearchRequest, who: Caller, on: On) -> Any:
        """Hybrid search (lexical, semantic, identifier legs fused) inside the caller's access scope."""
        answer = service().search(body, who.principals)
        record(log, who, on, AuditAction.SEARCH, query=body.query, hit_count=len(answer.hits),
               document_ids=shown_documents(answer.hits))
        return answer

    @router.post("/ask", response_model=FederatedAnswer)
    def ask(body: AskRequest, who: Caller, on: On) -> Any:
        """Federated search: statutes and the other registered corpora beside the firm's index, which is
        searched as the caller (an unknown principal or a failing firm search gives no firm hits, never more)."""
        answer = federated().ask(body.question, who.principals, corpora=body.corpora, top_k=body.limit,
                                 explain=body.explain)
        record(log, who, on, AuditAction.ASK, query=body.question, hit_count=len(answer.hits),
               document_ids=shown_documents(answer.hits))
        return answer

    @router.post("/search/filter", response_model=SearchResponse)
    def search_filter(body: FilterSearchRequest, who: Caller, on: On) -> Any:
        """Metadata-only listing, newest first; no query text, no embedding."""
        answer = service().search_filter(body.filters, who.principals, body.offset, body.limit)
        record(log, who, on, AuditAction.SEARCH_FILTER, query=body.filters.model_dump_json(exclude_defaults=True),
               hit_count=len(answer.hits), document_ids=shown_documents(answer.hits))
        return answer

    @router.post("/decisions/search", response_model=list[DecisionHit])
    def search_decisions(body: DecisionSearchRequest, who: Caller, on: On) -> Any:
        """Decision records whose evidence the caller may see in full."""
        hits = service().search_decisions(body.query, who.principals, body.limit)
        record(log, who, on, AuditAction.SEARCH_DECISIONS, query=body.query, hit_count=len(hits))
        return hits

    @router.post("/decisions", response_model=DecisionHit, status_code=201)
    def add_decision(body: NewDecision, who: Caller) -> Any:
        """Record a decision; the caller must see all of its evidence."""
        return service().add_decision(body, who.principals)

    @router.get("/documents/{document_id}", response_model=DocumentView, responses=NOT_FOUND)
    def get_document(document_id: Annotated[RecordId, Path()], who: Caller, on: On) -> Any:
        view = service().get_document(document_id, who.principals)
        record(log, who, on, AuditAction.READ, document_id=view.document.id)
        return view

    @router.get("/documents/{document_id}/text", response_model=DocumentText, responses=NOT_FOUND)
    def document_text(
        document_id: Annotated[RecordId, Path()], who: Caller, on: On,
        version: Annotated[RecordId | None, Query(description="A visible version; default the one a citation names")] = None,
        offset: Annotated[int, Query(ge=0, description="Characters to skip (within the section, if one is named)")] = 0,
        limit: Annotated[int, Query(gt=0, description="Characters to return, at most 100,000")] = DEFAULT_TEXT_CHARS,
        section: Annotated[str | None, Query(min_length=1, max_length=200, description='A section id: "§ 6", "page:3"')] = None,
    ) -> Any:
        """The converted text of a visible version (the text the index was built from), a range or a section."""
        request = TextRequest(version=version, offset=offset, limit=limit, section=section)
        text = service().read_text(document_id, request, who.principals)
        record(log, who, on, AuditAction.TEXT, document_id=text.document_id, detail=text.version_id)
        return text

    @router.get("/documents/{document_id}/original", response_class=Response,
                responses=NOT_FOUND | ORIGINAL_UNAVAILABLE | {200: {"content": {"application/octet-stream": {}}}})
    def document_original(
        document_id: Annotated[RecordId, Path()], who: Caller, on: On, version: Annotated[RecordId | None, Query()] = None,
    ) -> Response:
        """The file of a visible version, from the folder it was ingested from, if it is still the same bytes."""
        found = service().read_original(document_id, version, who.principals)
        record(log, who, on, AuditAction.ORIGINAL, document_id=document_id, detail=version)
        return Response(found.data, media_type=found.media_type,
                        headers={"Content-Disposition": content_disposition(found.filename)})

    @router.get("/documents/{document_id}/related", response_model=list[RelatedDocument], responses=NOT_FOUND)
    def related(document_id: Annotated[RecordId, Path()], who: Caller, on: On,
                kinds: Annotated[list[RelationKind] | None, Query()] = None) -> Any:
        related = service().related_documents(document_id, who.principals, kinds)
        record(log, who, on, AuditAction.RELATED, document_id=document_id, hit_count=len(related))
        return related

    @router.post("/traverse", response_model=TraversalResult, responses=NOT_FOUND)
    def traverse(body: TraverseRequest, who: Caller) -> Any:
        return service().traverse(body.document_id, who.principals, body.kinds, body.depth)

    @router.get("/audit", response_model=list[AuditEntry], responses={403: _error("Not an admin principal")})
    def audit(who: Caller, on: On, where: Annotated[AuditFilter, Query()]) -> Any:
        """The audit trail, newest first (security.admin_principals only); looking is recorded too."""
        if not service().access.compile_scope(who.principals).is_admin:
            raise Forbidden("the audit trail is for security.admin_principals")
        entries = log.entries(where)
        record(log, who, on, AuditAction.AUDIT_VIEW, query=where.model_dump_json(exclude_defaults=True),
               hit_count=len(entries))
        return entries

    return router
