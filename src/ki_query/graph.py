"""Documents and their relations as one caller may see them.

`document_views` is the one way the query side shows a document: only its
visible versions, each resolved to the source objects the caller may cite.
`traverse` walks relations (supersedes, annex_of, responds_to, references,
thread) breadth-first and checks every entity it returns on its own: an
invisible neighbour vanishes, together with every edge that would reveal it,
and the walk does not continue through it (a path through an invisible
document would reveal that it exists).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from ki_core.acl import Viewer, in_set
from ki_core.models import Document, DocumentVersion, Relation, RelationKind
from ki_query.citations import decision_citations, german_citation, is_decision
from ki_query.types import (
    DocumentNotFound,
    DocumentView,
    RelatedDocument,
    RelationEdge,
    TraversalResult,
    TraversalTooDeep,
    VersionView,
)
from ki_query.verification import VersionFacts, version_facts

# Beyond three hops a neighbourhood is most of a matter; callers page through search instead.
MAX_TRAVERSAL_DEPTH = 3


def document_views(session: Session, viewer: Viewer, document_ids: Collection[str]) -> dict[str, DocumentView]:
    """{document_id: view} of the documents with at least one visible, citable version; others absent."""
    if not document_ids or viewer.sees_nothing:
        return {}
    versions = session.scalars(
        select(DocumentVersion.id).where(in_set(DocumentVersion.document_id, document_ids))
    ).all()
    facts = version_facts(session, viewer, versions)
    by_document: dict[str, list[VersionFacts]] = {}
    for fact in facts.values():
        by_document.setdefault(fact.document.id, []).append(fact)
    if not by_document:
        return {}
    documents = session.scalars(select(Document).where(in_set(Document.id, by_document))).all()
    views = {d.id: _view(d, by_document[d.id]) for d in documents}
    return _cited(session, views)


def _cited(session: Session, views: dict[str, DocumentView]) -> dict[str, DocumentView]:
    """Each view with the German citation of its cited version (one read for the decisions among them)."""
    decided = decision_citations(session, [v.cited_version.version.id for v in views.values() if is_decision(v.doc_type)])
    return {
        document_id: view.model_copy(update={"cite_as": german_citation(
            view.document, view.cited_version.version, view.cited_version.source_objects,
            decided.get(view.cited_version.version.id),
        )})
        for document_id, view in views.items()
    }


def _view(document: Document, facts: list[VersionFacts]) -> DocumentView:
    facts.sort(key=lambda f: f.version.seq)
    visible = {f.version.id for f in facts}
    latest = document.latest_final_version_id if document.latest_final_version_id in visible else None
    return DocumentView(
        project=facts[0].project,
        document=facts[0].document,
        matter_id=document.matter_id,
        doc_type=document.doc_type_id,
        identifiers=tuple(document.identifiers or ()),
        latest_final_version_id=latest,
        versions=tuple(
            VersionView(
                version=f.version, language=f.language, is_latest_final=f.version.id == latest,
                source_objects=f.sources,
            )
            for f in facts
        ),
    )


def get_document(session: Session, viewer: Viewer, document_id: str) -> DocumentView:
    """The document with its visible versions, or DocumentNotFound (also when it exists unseen)."""
    view = document_views(session, viewer, [document_id]).get(document_id)
    if view is None:
        raise DocumentNotFound(document_id)
    return view


# ------------------------------------------------------------------ traversal


def traverse(
    session: Session,
    viewer: Viewer,
    document_id: str,
    kinds: Iterable[RelationKind | str] | None = None,
    depth: int = 1,
) -> TraversalResult:
    """Visible documents within `depth` relation hops of a visible start, with the visible edges."""
    if not 1 <= depth <= MAX_TRAVERSAL_DEPTH:
        raise TraversalTooDeep(depth, MAX_TRAVERSAL_DEPTH)
    wanted = None if kinds is None else sorted({RelationKind(k) for k in kinds})
    start = get_document(session, viewer, document_id)
    views = {document_id: start}
    related: list[RelatedDocument] = []
    edges: dict[str, RelationEdge] = {}
    frontier = {document_id}
    for level in range(1, depth + 1):
        relations = _relations_touching(session, frontier, wanted)
        reached = _neighbours(relations, frontier) - set(views)
        views |= document_views(session, viewer, reached)
        for relation in relations:
            edge = _visible_edge(relation, views)
            if edge is not None:
                edges[relation.id] = edge
        new = _first_reach(relations, frontier, views, set(reached) & set(views))
        related.extend(
            RelatedDocument(document=views[other], depth=level, kind=r.kind, direction=direction, via_document_id=via)
            for other, (r, direction, via) in sorted(new.items())
        )
        frontier = set(new)
        if not frontier:
            break
    ordered_edges = sorted(edges.values(), key=lambda e: (e.kind, e.from_document_id, e.to_document_id,
                                                          e.from_version_id or "", e.to_version_id or ""))
    return TraversalResult(start=start, related=tuple(related), edges=tuple(ordered_edges))


def _relations_touching(session: Session, documents: set[str], kinds: list[RelationKind] | None) -> list[Relation]:
    stmt = select(Relation).where(
        or_(in_set(Relation.from_document_id, documents), in_set(Relation.to_document_id, documents))
    )
    if kinds is not None:
        stmt = stmt.where(Relation.kind.in_(kinds))
    return sorted(session.scalars(stmt), key=lambda r: (r.kind, r.from_document_id, r.to_document_id, r.id))


def _neighbours(relations: list[Relation], frontier: set[str]) -> set[str]:
    found = set()
    for r in relations:
        if r.from_document_id in frontier:
            found.add(r.to_document_id)
        if r.to_document_id in frontier:
            found.add(r.from_document_id)
    return found


def _visible_edge(relation: Relation, views: dict[str, DocumentView]) -> RelationEdge | None:
    """The edge if both documents, and each version it names, are visible; else None."""
    source, target = views.get(relation.from_document_id), views.get(relation.to_document_id)
    if source is None or target is None:
        return None
    for view, version_id in ((source, relation.from_version_id), (target, relation.to_version_id)):
        if version_id is not None and version_id not in {v.version.id for v in view.versions}:
            return None
    return RelationEdge(
        kind=relation.kind,
        from_document_id=relation.from_document_id,
        to_document_id=relation.to_document_id,
        from_version_id=relation.from_version_id,
        to_version_id=relation.to_version_id,
        origin=relation.origin,
    )


def _first_reach(
    relations: list[Relation], frontier: set[str], views: dict[str, DocumentView], new: set[str]
) -> dict[str, tuple[Relation, str, str]]:
    """For each newly reached visible document, the first visible edge (in stable order) that reached it."""
    reach: dict[str, tuple[Relation, str, str]] = {}
    for r in relations:
        if _visible_edge(r, views) is None:
            continue
        if r.from_document_id in frontier and r.to_document_id in new:
            reach.setdefault(r.to_document_id, (r, "outgoing", r.from_document_id))
        if r.to_document_id in frontier and r.from_document_id in new:
            reach.setdefault(r.from_document_id, (r, "incoming", r.to_document_id))
    return reach
