"""`ki access`: grant, revoke and list local grants; explain why someone sees a document or not."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.table import Table

from ki.errors import cli_errors

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from ki_core import grants
    from ki_core.config import Settings
    from ki_core.models import GrantEffect
    from ki_query.access_explain import AccessExplanation, VersionExplanation

access_app = typer.Typer(
    help="Who may see what: project and document grants, and why a document is visible or not.",
    no_args_is_help=True,
)

PRINCIPAL = typer.Argument(..., help="User or group, as the DMS names it (case and spaces do not matter).")
PROJECT = typer.Option(..., "--project", help="Project name (or id).")
DOCUMENT = typer.Option(None, "--document", help="Document key (or id) within the project; omit for the whole project.")
DENY = typer.Option(False, "--deny", help="A deny grant: it wins over every allow.")


@contextmanager
def _session(settings: Settings) -> Iterator[Session]:
    from ki_core.db import engine_from_settings, session_factory, transaction

    engine = engine_from_settings(settings)
    try:
        with transaction(session_factory(engine)) as session:
            yield session
    finally:
        engine.dispose()


def _target(session: Session, project: str, document: str | None) -> tuple[grants.GrantTarget, str]:
    """The grant target and how to name it in messages: 'project' or 'project/key'."""
    from ki_core import grants

    found = grants.resolve_project(session, project)
    if document is None:
        return grants.GrantTarget.project(found.id), found.name
    doc = grants.resolve_document(session, document, found)
    return grants.GrantTarget.document(doc.id), f"{found.name}/{doc.key}"


def _effect(deny: bool) -> GrantEffect:
    from ki_core.models import GrantEffect

    return GrantEffect.DENY if deny else GrantEffect.ALLOW


@access_app.command("grant")
@cli_errors
def grant(principal: str = PRINCIPAL, project: str = PROJECT, document: str | None = DOCUMENT,
          deny: bool = DENY) -> None:
    """Allow (or with --deny, deny) PRINCIPAL on a project or one of its documents."""
    from ki_core import grants
    from ki_core.config import load_settings

    settings = load_settings()
    with _session(settings) as session:
        target, where = _target(session, project, document)
        row = grants.grant(session, target, principal, effect=_effect(deny), settings=settings)
        stored = row.principal
    Console().print(f"{_effect(deny).value} [bold]{stored}[/] on {where}", highlight=False)


@access_app.command("revoke")
@cli_errors
def revoke(principal: str = PRINCIPAL, project: str = PROJECT, document: str | None = DOCUMENT,
           deny: bool = DENY) -> None:
    """Remove PRINCIPAL's allow (or with --deny, its deny) on a project or document."""
    from ki_core import grants
    from ki_core.config import load_settings

    settings = load_settings()
    with _session(settings) as session:
        target, where = _target(session, project, document)
        removed = grants.revoke(session, target, principal, effect=_effect(deny), settings=settings)
    stored = grants.stored_principal(principal, settings)
    if removed:
        Console().print(f"revoked {_effect(deny).value} of [bold]{stored}[/] on {where}", highlight=False)
    else:
        Console().print(f"{stored} had no {_effect(deny).value} on {where}; nothing changed", highlight=False)


@access_app.command("list")
@cli_errors
def list_(
    project: str | None = typer.Option(None, "--project", help="Only grants on this project and its documents."),
    principal: str | None = typer.Option(None, "--principal", help="Only grants to this principal (not its groups)."),
    mirrored: bool = typer.Option(False, "--mirrored", help="Also list source-object grants mirrored from sources."),
) -> None:
    """List grants, local ones by default."""
    from ki_core import grants
    from ki_core.config import load_settings
    from ki_core.models import GrantEffect

    settings = load_settings()
    with _session(settings) as session:
        project_id = grants.resolve_project(session, project).id if project else None
        rows = grants.list_grants(
            session, project_id=project_id, principal=principal, include_mirrored=mirrored, settings=settings
        )
    table = Table(title=f"{len(rows)} grant(s)")
    for column in ("effect", "principal", "scope", "project", "document", "origin"):
        table.add_column(column)
    for row in rows:
        table.add_row(
            f"[red]{row.effect.value}[/]" if row.effect == GrantEffect.DENY else row.effect.value,
            row.principal,
            row.scope.value,
            row.project_name or "",
            row.document_key or row.source_object_id or "",
            row.origin,
        )
    Console().print(table)


@access_app.command("explain")
@cli_errors
def explain(
    principal: str = PRINCIPAL,
    document: str = typer.Argument(..., help="Document id, or project/key."),
) -> None:
    """Show, per version, the rule that makes DOCUMENT visible to PRINCIPAL or hides it."""
    from ki_core import grants
    from ki_core.config import load_settings
    from ki_query.scope import AccessService

    settings = load_settings()
    with _session(settings) as session:
        document_id = grants.resolve_document(session, document).id
        explanation = AccessService(session, settings).explain(principal, document_id)
    _print_explanation(Console(), explanation)


def _print_explanation(console: Console, explanation: AccessExplanation) -> None:
    verdict = "[green]visible[/]" if explanation.visible else "[red]not visible[/]"
    console.print(
        f"{explanation.project_name}/{explanation.document_key} is {verdict} to "
        f"[bold]{explanation.principal}[/] (source_acl_mode {explanation.acl_mode}"
        f"{', admin' if explanation.is_admin else ''})",
        highlight=False,
    )
    paths = [" -> ".join(p.via) for p in explanation.principals]
    console.print("principals: " + (", ".join(paths) if paths else "none after normalization"), highlight=False)
    for version in explanation.versions:
        console.print(_version_table(version))


def _version_table(version: VersionExplanation) -> Table:
    verdict = "[green]visible[/]" if version.visible else "[red]not visible[/]"
    table = Table(title=f"version {version.seq}: {verdict} - {version.decided_by}", title_justify="left")
    for column in ("kind", "what", "detail"):
        table.add_column(column)
    for g in version.grants:
        via = " via " + " -> ".join(g.via) if len(g.via) > 1 else ""
        table.add_row(f"{g.effect.value} grant", f"{g.scope.value} {g.target_name}", f"{g.principal}{via}")
    for o in version.observations:
        acl = "known ACL" if o.acl_known else "ACL unknown"
        kind = f"observation ({o.state.value}{', accessible' if o.accessible else ''})"
        table.add_row(kind, f"{o.source_name}:{o.external_id} [{o.source_kind}, {acl}]", o.reason)
    if not version.grants and not version.observations:
        table.add_row("-", "no matching grants, no observations", "")
    return table


def register(app: typer.Typer) -> None:
    app.add_typer(access_app, name="access")
