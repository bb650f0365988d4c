"""The `ki` command line: one typer app, command groups registered from ki.commands.

Building the app must stay cheap, since `ki --help` builds all of it: command
modules import their database, index and server libraries inside the commands
(tests/ki/test_cli_startup.py pins that; bench/cli_startup.py times it).
"""

from __future__ import annotations

import typer

from ki.commands import access as access_commands
from ki.commands import ask as ask_commands
from ki.commands import audit as audit_commands
from ki.commands import config as config_commands
from ki.commands import corpus as corpus_commands
from ki.commands import delete as delete_commands
from ki.commands import demo as demo_commands
from ki.commands import eval as eval_commands
from ki.commands import events as events_commands
from ki.commands import groups as groups_commands
from ki.commands import identifiers as identifiers_commands
from ki.commands import ingest as ingest_commands
from ki.commands import keys as keys_commands
from ki.commands import projects as projects_commands
from ki.commands import query as query_commands
from ki.commands import store as store_commands
from ki.commands import store_move as store_move_commands

app = typer.Typer(
    name="ki",
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
    app()


if __name__ == "__main__":
    main()
