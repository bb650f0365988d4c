"""`ki keys create|list|revoke`: the API keys of the HTTP query API and MCP, in the keys file.

Only a key's SHA-256 is written, into the keys file: `<state_dir>/api_keys.json`
(or `security.api_keys_file`, or `--keys-file`), never config.json, which in a
clone is a tracked file. The key itself is printed once and kept nowhere.
`ki serve`, the api process and MCP read the keys file beside config.json and
KI_SECURITY__API_KEYS (ki_core.config); a name set in those wins.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from ki.errors import cli_errors

keys_app = typer.Typer(help="API keys for the HTTP query API and MCP: create, list, revoke. Keys are kept in "
                       "<state_dir>/api_keys.json (security.api_keys_file), never in config.json.",
                       no_args_is_help=True)

# 32 random bytes (256 bits), URL-safe; the prefix lets secret scanners and people tell what it is.
KEY_PREFIX = "ki_"
KEY_BYTES = 32
KEYS_FILE = typer.Option(None, "--keys-file", help="The keys file (default: security.api_keys_file, else "
                         "<state_dir>/api_keys.json); `ki serve` reads the one security.api_keys_file names.")


def keys_file(given: Path | None) -> Path:
    """--keys-file, else the file the process reads (security.api_keys_file, else <state_dir>/api_keys.json)."""
    from ki_core.config import load_settings

    return given if given is not None else load_settings().api_keys_path


def read_keys(path: Path) -> dict[str, Any]:
    """The keys file's entries as stored (empty when there is none yet)."""
    from ki_core.config import ConfigError

    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the keys file must be a JSON object")
    return data


def write_keys(path: Path, keys: dict[str, Any]) -> None:
    """Atomically, readable by its owner only: the hashes are no secret, but who holds which principals is."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    temporary.write_text(json.dumps(keys, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.chmod(temporary, 0o600)
    os.replace(temporary, path)


def new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(KEY_BYTES)


@keys_app.command("create")
@cli_errors
def create(
    name: str = typer.Argument(..., help="Name of the key, e.g. the service that uses it ('frontend', 'mcp-anna')."),
    principals: list[str] = typer.Option(..., "--principal",
                                         help="Principal the key searches as (repeat for groups)."),
    on_behalf_of: bool = typer.Option(False, "--on-behalf-of",
                                      help="A trusted front end: may name its user in X-KI-On-Behalf-Of."),
    replace: bool = typer.Option(False, "--replace", help="Overwrite an existing key NAME (the old key stops working)."),
    keys_path: Path | None = KEYS_FILE,
) -> None:
    """Generate a new API key, store its SHA-256 as NAME in the keys file and print the key once."""
    from ki_core.config import ApiKeySettings
    from ki_query.identity import key_digest

    path = keys_file(keys_path)
    existed = path.is_file()
    keys = read_keys(path)
    if name in keys and not replace:
        raise typer.BadParameter(f"{path} has a key named {name!r} already; --replace to overwrite it", param_hint="NAME")
    named = [p.strip() for p in principals if p.strip()]
    if not named:
        raise typer.BadParameter("name at least one principal", param_hint="--principal")
    key = new_key()
    # A replaced key keeps its other settings (on_behalf_of_principals): a new secret, the same grant.
    entry = keys.get(name, {}) | {"sha256": key_digest(key), "principals": named, "on_behalf_of": on_behalf_of}
    keys[name] = ApiKeySettings.model_validate(entry).model_dump(mode="json", include=set(entry))
    write_keys(path, keys)
    typer.echo(key)
    created = "" if existed else " (created)"
    behalf = " (on behalf of others)" if on_behalf_of else ""
    typer.echo(f"API key {name!r} for {', '.join(named)}{behalf}: its SHA-256 is in {path}{created}. The key itself "
               "is not stored anywhere: this is the only time it is shown. Restart `ki serve` (or the api process) "
               f"to use it{_unread_note(path)}.", err=True)


def _unread_note(path: Path) -> str:
    """A --keys-file the process does not read is useless until configured: say how."""
    from ki_core.config import load_settings

    if path.resolve() == load_settings().api_keys_path.resolve():
        return ""
    return f"; it reads {path} only once security.api_keys_file (KI_SECURITY__API_KEYS_FILE) names it"

@keys_app.command("list")
@cli_errors
def list_keys() -> None:
    """The keys the server accepts: name, principals, whether they may act on behalf of others, where they are set."""
    from ki_core.config import load_settings

    settings = load_settings()
    path = settings.api_keys_path
    in_file = read_keys(path)
    configured = settings.security.api_keys
    table = Table(title=f"API keys ({path})")
    for column in ("name", "principals", "on behalf of", "set in"):
        table.add_column(column, overflow="fold")
    for name, spec in sorted(configured.items()):
        behalf = ", ".join(spec.on_behalf_of_principals) if spec.on_behalf_of else "no"
        table.add_row(name, ", ".join(spec.principals), behalf, str(path) if name in in_file else "config or environment")
    Console().print(table if configured else f"no API keys yet ({path}); `ki keys create NAME --principal P` makes one")


@keys_app.command("revoke")
@cli_errors
def revoke(name: str = typer.Argument(..., help="Name of the key to remove."), keys_path: Path | None = KEYS_FILE) -> None:
    """Remove key NAME from the keys file: it is refused (401) once the server has been restarted."""
    path = keys_file(keys_path)
    keys = read_keys(path)
    if name not in keys:
        raise typer.BadParameter(f"{path} has no key named {name!r} (see `ki keys list`)", param_hint="NAME")
    del keys[name]
    write_keys(path, keys)
    typer.echo(f"revoked API key {name!r} in {path}; restart `ki serve` (or the api process) to refuse it")


def register(app: typer.Typer) -> None:
    app.add_typer(keys_app, name="keys")
