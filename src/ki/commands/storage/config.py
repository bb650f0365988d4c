"""`ki config show`: the effective configuration, secrets masked."""

from __future__ import annotations

import json

import typer

from ki.errors import cli_errors

config_app = typer.Typer(help="Inspect the effective configuration.", no_args_is_help=True)


@config_app.command("show")
@cli_errors
def show(
    as_json: bool = typer.Option(False, "--json", help="Plain JSON without colours."),
) -> None:
    """Print config.json merged with KI_* environment overrides; secrets are masked."""
    from ki_core.config import config_file_path, load_settings, masked_dump

    settings = load_settings()
    text = json.dumps(masked_dump(settings), indent=2, ensure_ascii=False)
    if as_json:
        typer.echo(text)
        return
    from rich.console import Console
    from rich.syntax import Syntax

    console = Console()
    source = config_file_path()
    console.print(f"# from {source or 'built-in defaults'} + KI_* environment", style="dim")
    console.print(Syntax(text, "json", theme="ansi_dark", background_color="default"))


def register(app: typer.Typer) -> None:
    app.add_typer(config_app, name="config")
