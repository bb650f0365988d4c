"""The MCP tools over Streamable HTTP: each request authenticated like the HTTP API, each call for its caller.

The SDK's bearer middleware asks `CallerTokenVerifier` about the credential of
every request (an API key or a user JWT, resolved by ki_query.identity exactly
as for /v1); a missing or unknown one is refused with 401 and WWW-Authenticate
before any tool runs. A tool reads its principals from the request that
carried the call, never from a default.

Stateless on purpose: no MCP session outlives a request, so several `api`
processes can sit behind one balancer and no session can be borrowed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken, TokenVerifier
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.requests import HTTPConnection

from ki_core.audit import audit_log
from ki_core.config import Settings
from ki_query.federation.search import FederatedSearch
from ki_query.identity import Forbidden, Identity, Unauthenticated, key_digest, resolve_identity
from ki_query.api.mcp_server import INSTRUCTIONS, SERVER_NAME, add_retrieval_tools
from ki_query.retrieval import RetrievalService

logger = logging.getLogger(__name__)

MCP_PATH = "/mcp"
ON_BEHALF_OF = "X-KI-On-Behalf-Of"
# AuthSettings requires an issuer URL, but the SDK publishes it only with OAuth discovery
# (resource_server_url), which ki does not offer: clients send a key or a token they already hold.
_UNPUBLISHED_ISSUER = "http://localhost"


class CallerToken(AccessToken):
    """A verified credential with the principals it acts for; `token` holds its digest, not the secret."""

    principals: tuple[str, ...]


class CallerTokenVerifier(TokenVerifier):
    """`Authorization: Bearer <API key or JWT>` through the HTTP API's own resolver; None means 401."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings

    async def verify_token(self, token: str) -> AccessToken | None:
        try:
            identity = resolve_identity(self._settings, authorization=f"Bearer {token}", api_key=None)
        except Unauthenticated as exc:
            logger.info("MCP request refused: %s", exc)
            return None
        return CallerToken(token=key_digest(token), client_id=identity.subject, subject=identity.subject,
                           scopes=[], principals=identity.principals)


def request_identity(ctx: Context) -> Identity:
    """The caller of the request that carried this call.

    Read from the call's own HTTP request, not from the SDK's get_access_token()
    context variable, which in a stateful session keeps the opening request's
    token (modelcontextprotocol/python-sdk#2208).
    """
    request = ctx.request_context.request
    if not isinstance(request, HTTPConnection):
        raise Unauthenticated("this MCP call came without an HTTP request")
    user = request.scope.get("user")
    token = user.access_token if isinstance(user, AuthenticatedUser) else None
    if not isinstance(token, CallerToken):
        raise Unauthenticated("this MCP request carries no verified credential")
    if ON_BEHALF_OF in request.headers:
        # Acting as the front end's own principals instead would answer for the wrong person.
        raise Forbidden(f"{ON_BEHALF_OF} is not supported over MCP: send the user's own key or token")
    return Identity(token.subject or token.client_id, token.principals)


def create_mcp_http_app(
    settings: Settings,
    service: Callable[[], RetrievalService],
    *,
    host: str | None = None,
    federated: Callable[[], FederatedSearch] | None = None,
) -> Starlette:
    """An ASGI app serving the tools at /mcp; run its lifespan (the SDK's session manager) with the host app's.

    `host` is the interface `ki mcp --transport http` binds: on localhost the SDK
    also refuses foreign Host/Origin headers (DNS rebinding). Mounted in the query
    API the public host is not known here; a rebinding page cannot send the
    bearer credential every request needs, so that check is left off there. `federated`: the
    FederatedSearch behind `ask` (by default one beside `service`; `ki.asgi` shares the query API's).
    """
    auth = AuthSettings(issuer_url=_UNPUBLISHED_ISSUER, resource_server_url=None)
    server = MCPServer(name=SERVER_NAME, instructions=INSTRUCTIONS, token_verifier=CallerTokenVerifier(settings), auth=auth)
    add_retrieval_tools(server, service, request_identity, federated, audit=audit_log(settings))
    security = None if host else TransportSecuritySettings(enable_dns_rebinding_protection=False)
    return server.streamable_http_app(streamable_http_path=MCP_PATH, stateless_http=True, json_response=True,
                                      transport_security=security, host=host or "")
