"""The web page for lawyers and operators, served at `/` by `ki serve` and the `api` process.

Server-rendered Jinja2 templates with one small script, not a static bundle
calling the API from the browser: the credential then never has to live where
page scripts can read it (it rides in an HttpOnly, SameSite=Strict session
cookie), a walled document opened by URL is a real 404 from the server, every
page works with JavaScript off, and there is nothing to build, for users or
for us (templates and CSS are package data).

Access is exactly the API's: each page asks the query API's own routes in
process (`api.QueryApi`), with the signed-in credential resolved by the same
resolver (ki_query.identity), and renders what they return; refusals become
pages (401 signs out, 403, 404, 400 with the reason). What the API has no
route for is read inside the caller's compiled scope (`catalog`), and the
operations page only for admin principals (`operations`).

    app.mount("/", create_web_app(settings, service, federated))   # after /v1 and /mcp

Modules: app (routes and refusals as pages), credentials (cookie, CSRF),
api (the in-process API client), search_form (form <-> API request, paging),
catalog (filter choices, matter names, a document's decision records),
operations (the admin page's facts), render (templates, highlighting), text
(German and English words).
"""

from ki_query.web.app import create_web_app

__all__ = ["create_web_app"]
