"""The `ki` command line: one typer app, command groups registered from ki.commands.

Building the app must stay cheap, since `ki --help` builds all of it: command
modules import their database, index and server libraries inside the commands
(tests/ki/test_cli_startup.py pins that; bench/cli_startup.py times it).
"""

from __future__ import annotations

import sys
from typing import Any

import typer
from typer._click.exceptions import ClickException, UsageError  # typer vendors click: its own classes
from typer.core import TyperGroup

from ki.commands.permissions import access as access_commands
from ki.commands.permissions import audit as audit_commands
from ki.commands.reading import ask as ask_commands
from ki.commands.storage import config as config_commands
from ki.commands.corpora import corpus as corpus_commands
from ki.commands.storage import delete as delete_commands
from ki.commands.corpora import demo as demo_commands
from ki.commands.corpora import eval as eval_commands
from ki.commands.storage import events as events_commands
from ki.commands.permissions import groups as groups_commands
from ki.commands.reading import identifiers as identifiers_commands
from ki.commands.storage import ingest as ingest_commands
from ki.commands.permissions import keys as keys_commands
from ki.commands.storage import projects as projects_commands
from ki.commands.reading import query as query_commands
from ki.commands.storage import store as store_commands
from ki.commands.storage import store_move as store_move_commands


class KiGroup(TyperGroup):
    """The `ki` group, with usage errors in two lines (the error, then where help is) instead of rich's
    five-line box; everything else as typer and click do it."""

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        try:
            code = super().main(*args, standalone_mode=False, **kwargs)
        except UsageError as exc:
            if exc.__class__.__name__ == "NoArgsIsHelpError":  # click printed the help already
                sys.exit(exc.exit_code)
            sys.exit(_usage_error(exc))
        except ClickException as exc:
            exc.show()
            sys.exit(exc.exit_code)
        except typer.Abort:
            typer.echo("Aborted!", err=True)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


def _usage_error(exc: UsageError) -> int:
    """`error: Missing option '--project'.` and `Try 'ki ingest --help'`, on stderr; the exit code (2)."""
    typer.echo(f"error: {exc.format_message()}", err=True)
    if exc.ctx is not None:
        typer.echo(f"Try '{exc.ctx.command_path} --help'", err=True)
    return exc.exit_code


app = typer.Typer(
    name="ki",
    cls=KiGroup,
    help="LegalMemory knowledge index: ingest a firm's documents and search them "
    "without ever showing a document the caller may not see.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)

def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"ki (legalmemory-ki) {version('legalmemory-ki')}")
        raise typer.Exit()


@app.callback()
def _options(
    _version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                  help="Print the installed version and exit."),
) -> None:
    """LegalMemory knowledge index: ingest a firm's documents and search them without ever showing a
    document the caller may not see."""


for _module in (config_commands, store_commands, demo_commands, ingest_commands, query_commands, identifiers_commands,
                access_commands, groups_commands, corpus_commands, ask_commands, eval_commands, events_commands, keys_commands,
                delete_commands, projects_commands, store_move_commands, audit_commands):
    _module.register(app)


def main() -> None:
    app(prog_name="ki")  # `python -m ki.cli` too says `Try 'ki search --help'`


if __name__ == "__main__":
    main()
