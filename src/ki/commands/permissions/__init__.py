"""Access and keys: grants and their explanation, local group memberships, API keys."""
