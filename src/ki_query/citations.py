"""German citations: how a lawyer writes down what a hit or a document is.

Decisions as "BGH, Urteil vom 12.03.2020 – VII ZR 123/19", the form the
metadata stage composes from the decision's own text (court line, kind, date,
Aktenzeichen; kept in its "metadata" artifact even where a manifest gave the
document another title); statutes by their address ("§ 573c Abs. 1 BGB",
ki_query.federation.corpus_loader.unit_address); firm documents by title,
version, date and the DMS (or folder) reference.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from ki_core.acl import in_set
from ki_core.models import MetadataArtifact
from ki_query.types import DocumentRef, SourceRef, VersionRef

DECISION_TYPE = "doc_type:decision"
# A version's status as a German citation names it.
STATUS_WORDS = {"draft": "Entwurf", "final": "Endfassung", "executed": "unterzeichnet", "unknown": None}
SOURCE_WORDS = {"dms": "DMS-Nr.", "local_fs": "Ablage"}


def is_decision(doc_type: str | None) -> bool:
    return bool(doc_type) and (doc_type == DECISION_TYPE or doc_type.startswith(DECISION_TYPE + "."))


def german_citation(
    document: DocumentRef, version: VersionRef, sources: Sequence[SourceRef], decision_citation: str | None = None
) -> str:
    """A decision's composed citation when there is one; else title, version, date and reference."""
    if decision_citation:
        return decision_citation
    status = STATUS_WORDS.get(version.status)
    label = f"Version {version.label or version.seq}" + (f" ({status})" if status else "")
    parts = [document.title or document.key, label]
    if version.doc_date:
        parts.append(f"{version.doc_date:%d.%m.%Y}")
    if sources:
        source = sources[0]
        parts.append(f"{SOURCE_WORDS.get(source.source_kind, source.source)} {source.external_id}")
    return ", ".join(parts)


def decision_citations(session: Session, version_ids: Collection[str]) -> dict[str, str]:
    """{version_id: "Gericht, Urteil vom … – Az."} of the decisions among `version_ids` whose metadata
    artifact composed one (the rules' or a model's; any of them names the same decision)."""
    if not version_ids:
        return {}
    rows = session.execute(
        select(MetadataArtifact.version_id, MetadataArtifact.payload)
        .where(in_set(MetadataArtifact.version_id, version_ids), MetadataArtifact.kind == "metadata")
        .order_by(MetadataArtifact.created_at)
    )
    found: dict[str, str] = {}
    for version_id, payload in rows:
        title = (payload or {}).get("title")
        if is_decision((payload or {}).get("doc_type")) and title and " vom " in title:
            found[version_id] = title
    return found
