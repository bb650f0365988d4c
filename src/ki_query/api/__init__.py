"""The programmatic surfaces of the query side: the HTTP API, the MCP tools (stdio and HTTP) and
the one mapping of refusals to status codes and reasons that they share. The web page is `web/`."""
