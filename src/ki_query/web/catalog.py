"""What a page shows beside the API's answers, read from SQL inside the caller's compiled scope.

The query API has no route for the filter choices, the matter names of hits
or the decision records of one document; these come from the same scope
compiler (projects and documents the caller may see) and the same evidence
check as decision search (ki_query.decisions.visible_evidence), for ids the
API already returned or the scope already admits. Nothing here widens a view.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from functools import cache

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from ki_core.acl import in_set
from ki_core.models import DecisionEvidence, DecisionRecord, Document, Matter, OntologyKind, Project, VersionStatus
from ki_core.ontology import load_ontology
from ki_query.decisions import visible_evidence
from ki_query.scope import AccessService, CompiledAccessScope


@dataclass(frozen=True)
class Choice:
    value: str
    label: str


@dataclass(frozen=True)
class FilterChoices:
    projects: tuple[Choice, ...]
    matters: tuple[Choice, ...]


STATUS_CHOICES = tuple(Choice(status.value, status.value) for status in VersionStatus)
LANGUAGE_CHOICES = (Choice("de", "Deutsch"), Choice("en", "English"))


@cache
def doc_type_choices() -> tuple[Choice, ...]:
    """The ontology's document types, a subtree indented under its root (a filter matches the subtree)."""
    ontology = load_ontology()
    return tuple(Choice(node, "\u2003" * (len(ontology.ancestors(node)) - 1) + ontology.label(node))
                 for node in ontology.ids(OntologyKind.DOC_TYPE))


def filter_choices(session: Session, access: AccessService, principals: Collection[str],
                   scope: CompiledAccessScope) -> FilterChoices:
    """Projects with a visible document; matters holding one (every matter of a fully visible project)."""
    if not scope.visible_project_ids:
        return FilterChoices((), ())
    projects = dict(session.execute(select(Project.id, Project.name).where(in_set(Project.id, scope.visible_project_ids))).all())
    matter_ids = set(session.scalars(select(Matter.id).where(in_set(Matter.project_id, scope.fully_visible_project_ids))))
    for project_id in scope.visible_project_ids - scope.fully_visible_project_ids:
        visible = access.visible_document_ids(principals, project_id)
        matter_ids |= set(session.scalars(select(Document.matter_id).where(in_set(Document.id, visible))))
    matter_ids.discard(None)
    matters = session.execute(select(Matter.id, Matter.name, Matter.project_id).where(in_set(Matter.id, matter_ids))).all()
    return FilterChoices(
        projects=tuple(sorted((Choice(i, name) for i, name in projects.items()), key=lambda c: c.label)),
        matters=tuple(sorted((Choice(i, f"{name} ({projects.get(p, '?')})") for i, name, p in matters), key=lambda c: c.label)),
    )


def matter_names(session: Session, document_ids: Collection[str]) -> dict[str, str]:
    """{document id: its matter's name} for documents the API returned (hits carry no matter)."""
    if not document_ids:
        return {}
    rows = session.execute(
        select(Document.id, Matter.name).join(Matter, Matter.id == Document.matter_id).where(in_set(Document.id, document_ids))
    )
    return dict(rows.all())


def document_decisions(session: Session, scope: CompiledAccessScope, version_ids: Collection[str],
                       source_object_ids: Collection[str]) -> list[DecisionRecord]:
    """Decision records citing one of these (visible) versions or objects, shown only when the
    caller may see ALL their evidence, as in decision search; newest first."""
    if not version_ids and not source_object_ids:
        return []
    cited = set(session.scalars(select(DecisionEvidence.decision_id).where(or_(
        in_set(DecisionEvidence.version_id, version_ids), in_set(DecisionEvidence.source_object_id, source_object_ids),
    ))))
    shown = visible_evidence(session, scope.viewer, cited)
    if not shown:
        return []
    records = session.scalars(select(DecisionRecord).where(in_set(DecisionRecord.id, shown)))
    return sorted(records, key=lambda r: (r.decided_at is not None, r.decided_at or r.created_at), reverse=True)
