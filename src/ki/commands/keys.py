"""`ki keys create|list|revoke`: the API keys of the HTTP query API and MCP, in the config file.

Only a key's SHA-256 is written (`security.api_keys.NAME`); the key itself is
printed once and kept nowhere. The file is the one the process reads
(`$KI_CONFIG_FILE`, else `./config.json`, created when missing); the rest of
it is written back as it was: same keys in the same order, same indentation.
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

keys_app = typer.Typer(help="API keys for the HTTP query API and MCP: create, list, revoke.", no_args_is_help=True)

# 32 random bytes (256 bits), URL-safe; the prefix lets secret scanners and people tell what it is.
KEY_PREFIX = "ki_"
KEY_BYTES = 32


def config_file() -> Path:
    """Where the process reads its configuration: `$KI_CONFIG_FILE`, else ./config.json (which may not exist yet)."""
    from ki_core.config import CONFIG_FILE_ENV, DEFAULT_CONFIG_FILE

    return Path(os.environ.get(CONFIG_FILE_ENV) or DEFAULT_CONFIG_FILE)


def read_config(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the file's data, how to write it back unchanged: json.dumps arguments)."""
    from ki_core.config import ConfigError

    if not path.is_file():
        return {}, {"indent": 2, "ensure_ascii": False}
    text = path.read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the configuration must be a JSON object")
    return data, _layout(text, data)


def _layout(text: str, data: dict[str, Any]) -> dict[str, Any]:
    """The json.dumps arguments that give TEXT back from DATA; the file's own indent if none does."""
    first_indented = next((line for line in text.splitlines()[1:] if line.strip()), "")
    indent = len(first_indented) - len(first_indented.lstrip(" ")) or 2
    for ensure_ascii in (False, True):
        layout = {"indent": indent, "ensure_ascii": ensure_ascii}
        if json.dumps(data, **layout) == text.rstrip("\n"):
            return layout
    return {"indent": indent, "ensure_ascii": False, "reformatted": True}


def write_config(path: Path, data: dict[str, Any], layout: dict[str, Any]) -> None:
    """Atomically, keeping the file's mode: it may hold secrets besides the key hashes."""
    text = json.dumps(data, indent=layout["indent"], ensure_ascii=layout["ensure_ascii"]) + "\n"
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    temporary.write_text(text, encoding="utf-8")
    if path.exists():
        os.chmod(temporary, path.stat().st_mode & 0o7777)
    os.replace(temporary, path)
    if layout.get("reformatted"):
        typer.echo(f"note: {path} was not in json.dumps layout; it was rewritten with indent {layout['indent']}", err=True)


def file_keys(data: dict[str, Any]) -> dict[str, Any]:
    """`security.api_keys` of the file's data, created (empty) where missing."""
    security = data.setdefault("security", {})
    return security.setdefault("api_keys", {})


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
) -> None:
    """Generate a new API key, store its SHA-256 under security.api_keys.NAME and print the key once."""
    from ki_core.config import ApiKeySettings
    from ki_query.identity import key_digest

    path = config_file()
    existed = path.is_file()
    data, layout = read_config(path)
    keys = file_keys(data)
    if name in keys and not replace:
        raise typer.BadParameter(f"{path} has a key named {name!r} already; --replace to overwrite it", param_hint="NAME")
    named = [p.strip() for p in principals if p.strip()]
    if not named:
        raise typer.BadParameter("name at least one principal", param_hint="--principal")
    key = new_key()
    # A replaced key keeps its other settings (on_behalf_of_principals): a new secret, the same grant.
    entry = keys.get(name, {}) | {"sha256": key_digest(key), "principals": named, "on_behalf_of": on_behalf_of}
    keys[name] = ApiKeySettings.model_validate(entry).model_dump(mode="json", include=set(entry))
    write_config(path, data, layout)
    typer.echo(key)
    created = "" if existed else " (created)"
    behalf = " (on behalf of others)" if on_behalf_of else ""
    typer.echo(f"API key {name!r} for {', '.join(named)}{behalf}: its SHA-256 is in {path}{created} "
               f"(security.api_keys.{name}). The key itself is not stored anywhere: this is the only time it is "
               "shown. Restart `ki serve` (or the api process) to use it.", err=True)

@keys_app.command("list")
@cli_errors
def list_keys() -> None:
    """The configured keys: name, principals, whether they may act on behalf of others, and where they are set."""
    from ki_core.config import load_settings

    path = config_file()
    in_file = file_keys(read_config(path)[0])
    configured = load_settings().security.api_keys
    table = Table(title=f"API keys ({path})")
    for column in ("name", "principals", "on behalf of", "set in"):
        table.add_column(column, overflow="fold")
    for name, spec in sorted(configured.items()):
        behalf = ", ".join(spec.on_behalf_of_principals) if spec.on_behalf_of else "no"
        table.add_row(name, ", ".join(spec.principals), behalf, str(path) if name in in_file else "environment")
    Console().print(table if configured else f"no API keys configured (security.api_keys in {path})")


@keys_app.command("revoke")
@cli_errors
def revoke(name: str = typer.Argument(..., help="Name of the key to remove.")) -> None:
    """Remove key NAME from the config file: it is refused (401) once the server has been restarted."""
    path = config_file()
    data, layout = read_config(path)
    keys = file_keys(data)
    if name not in keys:
        raise typer.BadParameter(f"{path} has no key named {name!r} (see `ki keys list`)", param_hint="NAME")
    del keys[name]
    write_config(path, data, layout)
    typer.echo(f"revoked API key {name!r} in {path}; restart `ki serve` (or the api process) to refuse it")


def register(app: typer.Typer) -> None:
    app.add_typer(keys_app, name="keys")
