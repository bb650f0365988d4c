"""The read side from a terminal: search, list, get, related, decisions, ask, identifiers, serve, mcp."""
