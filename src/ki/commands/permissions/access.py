"""`ki access`: grant, revoke and list local grants; explain why someone sees a document or not.

A grant on a project, a document or one source object (`--object`) is a local
rule: a source's sync never replaces it, and `revoke` removes only local rules
(spec/access.md as docs/production.md "Local access rules" applies it).
"""

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
    help="Who may see what: project, document and single-object grants, and why a document is visible or not.",
    no_args_is_help=True,
)

PRINCIPAL = typer.Argument(..., help="User or group, as the DMS names it (case and spaces do not matter).")
PROJECT = typer.Option(None, "--project", help="Project name (or id).")
DOCUMENT = typer.Option(None, "--document", help="Document key (or id) within the project; omit for the whole project.")
OBJECT = typer.Option(
    None, "--object", metavar="SOURCE:ID",
    help="One file or DMS object instead of a project: SOURCE:ID with a source name and the object's id "
    "(acme:4711, local:/abs/folder:sub/file.pdf), the folder's path for SOURCE (akte:sub/file.pdf), the "
    "file's own path, or local:sub/file.pdf when one folder holds it.",
)
DENY = typer.Option(False, "--deny", help="A deny grant: it wins over every allow.")


@contextmanager
def configured_store() -> Iterator[tuple[Settings, Session]]:
    """The settings and one transaction on the store they name, committed when the block ends without error."""
    from ki_core.config import load_settings
    from ki_core.db import engine_from_settings, session_factory, transaction

    settings = load_settings()
    engine = engine_from_settings(settings)
    try:
        with transaction(session_factory(engine)) as session:
            yield settings, session
    finally:
        engine.dispose()


def _target(
    session: Session, project: str | None, document: str | None, obj: str | None
) -> tuple[grants.GrantTarget, str]:
    """The grant target and how to name it in messages: 'project', 'project/key' or 'object source:id'."""
    from ki_core import grants

    if obj is not None:
        if project is not None or document is not None:
            raise typer.BadParameter("--object names one file or DMS object: give it without --project/--document")
        return _object_target(session, obj)
    if project is None:
        raise typer.BadParameter("give --project (and --document for one document) or --object")
    found = grants.resolve_project(session, project)
    if document is None:
        return grants.GrantTarget.project(found.id), found.name
    doc = grants.resolve_document(session, document, found)
    return grants.GrantTarget.document(doc.id), f"{found.name}/{doc.key}"


def _object_target(session: Session, reference: str) -> tuple[grants.GrantTarget, str]:
    from ki_core import grants
    from ki_core.models import Source

    found = grants.resolve_source_object(session, reference)
    source = session.get(Source, found.source_id)
    return grants.GrantTarget.source_object(found.id), f"object {source.name}:{found.external_id}"


def _allow_note(session: Session, target: grants.GrantTarget, settings: Settings) -> str | None:
    """Why a local allow on this object opens nothing: "a local grant never overrides an external ACL"."""
    from ki_core.models import GrantScope, Source, SourceKind, SourceObject

    if target.scope != GrantScope.SOURCE_OBJECT or settings.security.source_acl_mode == "intersect":
        return None
    obj = session.get(SourceObject, target.id)
    source = session.get(Source, obj.source_id)
    if source.kind == SourceKind.LOCAL_FS and not obj.acl_known:
        return None
    return (f"note: {source.name} decides this object's ACL; a local allow opens nothing here "
            "(only a local file without a known ACL delegates to local allows; a deny always counts)")


def _effect(deny: bool) -> GrantEffect:
    from ki_core.models import GrantEffect

    return GrantEffect.DENY if deny else GrantEffect.ALLOW


@access_app.command("grant")
@cli_errors
def grant(principal: str = PRINCIPAL, project: str | None = PROJECT, document: str | None = DOCUMENT,
          obj: str | None = OBJECT, deny: bool = DENY) -> None:
    """Allow (or with --deny, deny) PRINCIPAL on a project, one of its documents, or one file or DMS object.

    The affected versions' index projection is marked stale in the same
    transaction; the sweep's access-only reindex (ki.reindex_access) updates it.
    """
    from ki_core import grants

    with configured_store() as (settings, session):
        target, where = _target(session, project, document, obj)
        row = grants.grant(session, target, principal, effect=_effect(deny), settings=settings)
        stored = row.principal
        _record_change(settings, f"grant {_effect(deny).value} {stored} on {where}", target)
        note = None if deny else _allow_note(session, target, settings)
    console = Console()
    console.print(f"{_effect(deny).value} [bold]{stored}[/] on {where}", highlight=False)
    if note:
        console.print(note, highlight=False)


def _record_change(settings, detail: str, target) -> None:
    """In the audit trail before the change commits: a change that cannot be recorded is not made."""
    from ki.commands.reading.trail import operator_as
    from ki_core.audit import AuditAction, Surface, audit_log, record
    from ki_core.models import GrantScope

    document_id = target.id if target.scope is GrantScope.DOCUMENT else None
    record(audit_log(settings), operator_as(), Surface.CLI, AuditAction.ACCESS_CHANGE, document_id=document_id,
           detail=detail)


@access_app.command("revoke")
@cli_errors
def revoke(principal: str = PRINCIPAL, project: str | None = PROJECT, document: str | None = DOCUMENT,
           obj: str | None = OBJECT, deny: bool = DENY) -> None:
    """Remove PRINCIPAL's local allow (or with --deny, its local deny) on a project, document or object."""
    from ki_core import grants
    from ki_core.models.access import LOCAL_ORIGIN

    with configured_store() as (settings, session):
        target, where = _target(session, project, document, obj)
        removed = grants.revoke(session, target, principal, effect=_effect(deny), settings=settings)
        if removed:
            _record_change(settings, f"revoke {_effect(deny).value} {principal} on {where}", target)
        mirrored = [o for o in grants.grant_origins(session, target, principal, effect=_effect(deny),
                                                    settings=settings) if o != LOCAL_ORIGIN]
    stored = grants.stored_principal(principal, settings)
    kept = f" ({_effect(deny).value} mirrored from {', '.join(mirrored)} stays: change it there)" if mirrored else ""
    if removed:
        Console().print(f"revoked {_effect(deny).value} of [bold]{stored}[/] on {where}{kept}", highlight=False)
    else:
        Console().print(f"{stored} had no local {_effect(deny).value} on {where}; nothing changed{kept}",
                        highlight=False)


@access_app.command("list")
@cli_errors
def list_(
    project: str | None = typer.Option(None, "--project", help="Only grants on this project and its documents."),
    principal: str | None = typer.Option(None, "--principal", help="Only grants to this principal (not its groups)."),
    mirrored: bool = typer.Option(False, "--mirrored", help="Also list the object ACLs mirrored from sources."),
) -> None:
    """List project, document and local object grants; with --mirrored also the sources' object ACLs."""
    from ki_core import grants
    from ki_core.models import GrantEffect

    with configured_store() as (settings, session):
        project_id = grants.resolve_project(session, project).id if project else None
        rows = grants.list_grants(
            session, project_id=project_id, principal=principal, include_mirrored=mirrored, settings=settings
        )
    table = Table(title=f"{len(rows)} grant(s)")
    for column in ("effect", "principal", "scope", "project", "document / object", "origin"):
        table.add_column(column)
    for row in rows:
        table.add_row(
            f"[red]{row.effect.value}[/]" if row.effect == GrantEffect.DENY else row.effect.value,
            row.principal,
            row.scope.value,
            row.project_name or "",
            row.document_key or row.object_name or "",
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
    from ki_query.scope import AccessService

    with configured_store() as (settings, session):
        document_id = grants.resolve_document(session, document).id
        service = AccessService(session, settings)
        explanation, unknown = service.explain(principal, document_id), service.unknown_principals([principal])
    if unknown:
        from ki_core.principals import unknown_warning

        typer.echo(unknown_warning(unknown), err=True)
    _print_explanation(Console(), explanation)


def _print_explanation(console: Console, explanation: AccessExplanation) -> None:
    verdict = "[green]visible[/]" if explanation.visible else "[red]not visible[/]"
    console.print(
        f"{explanation.project_name}/{explanation.document_key} is {verdict} to "
        f"[bold]{explanation.principal}[/] (source_acl_mode {explanation.acl_mode}"
        f"{', sees everything as admin' if explanation.is_admin else ''})",
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
