"""The document-type and clause-type ontology: data in `data/ontology.json`, closure in SQL.

A node's parent is its id without the last dotted segment
("doc_type:contract.lease" -> "doc_type:contract"), so the file cannot
disagree with itself about the tree. The index stores `ancestors(doc_type)`
as `doc_type_ancestors`, which is what makes a doc_type filter a subtree filter.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from ki_core.models.ontology import OntologyClosure, OntologyKind, OntologyNode


class UnknownOntologyNode(KeyError):
    """An id that is not in the ontology."""


@dataclass(frozen=True)
class OntologyEntry:
    id: str
    kind: OntologyKind
    label: str
    parent_id: str | None


@dataclass(frozen=True)
class SeedResult:
    nodes_added: int
    nodes_updated: int
    closure_added: int
    closure_removed: int

    @property
    def changed(self) -> bool:
        return any((self.nodes_added, self.nodes_updated, self.closure_added, self.closure_removed))


class Ontology:
    """Nodes in file order, parents before children."""

    def __init__(self, entries: list[OntologyEntry]) -> None:
        self.nodes = {entry.id: entry for entry in entries}

    def __contains__(self, node_id: object) -> bool:
        return node_id in self.nodes

    def label(self, node_id: str) -> str:
        return self._entry(node_id).label

    def ancestors(self, node_id: str) -> tuple[str, ...]:
        """The node itself first, its root last."""
        chain = [self._entry(node_id).id]
        while (parent := self.nodes[chain[-1]].parent_id) is not None:
            chain.append(parent)
        return tuple(chain)

    def ids(self, kind: OntologyKind) -> list[str]:
        return [node_id for node_id, entry in self.nodes.items() if entry.kind is kind]

    def closure(self) -> dict[tuple[str, str], int]:
        """(ancestor, descendant) -> depth for every node and each node on its root path."""
        return {
            (ancestor, node_id): depth
            for node_id in self.nodes
            for depth, ancestor in enumerate(self.ancestors(node_id))
        }

    def resolve(self, kind: OntologyKind, value: str | None) -> str | None:
        """Map a model's answer to a known node: the id, its nearest known ancestor, a label, or None.

        "doc_type:contract.franchise" -> "doc_type:contract"; "Mietvertrag" ->
        "doc_type:contract.lease"; an unknown root -> None.
        """
        if not value or not value.strip():
            return None
        raw = value.strip()
        prefix = f"{kind.value}:"
        candidate = raw.lower() if raw.lower().startswith(prefix) else prefix + raw.lower()
        path = candidate.removeprefix(prefix).replace(" ", "_").strip(".")
        segments = path.split(".")
        for length in range(len(segments), 0, -1):
            node_id = prefix + ".".join(segments[:length])
            if node_id in self.nodes:
                return node_id
        return self._by_label(kind, raw)

    def _by_label(self, kind: OntologyKind, value: str) -> str | None:
        wanted = value.casefold().removeprefix(f"{kind.value}:")
        for node_id, entry in self.nodes.items():
            if entry.kind is not kind:
                continue
            labels = {part.strip().casefold() for part in entry.label.split("/")}
            if wanted in labels or wanted == node_id.rsplit(".", 1)[-1].split(":")[-1]:
                return node_id
        return None

    def _entry(self, node_id: str) -> OntologyEntry:
        try:
            return self.nodes[node_id]
        except KeyError:
            raise UnknownOntologyNode(node_id) from None


def parse_ontology(data: dict) -> Ontology:
    """Validate the file: kinds from the prefix, parents present and listed before children."""
    entries: list[OntologyEntry] = []
    known: set[str] = set()
    for raw in data["nodes"]:
        node_id, label = raw["id"], raw["label"]
        kind_name, _, path = node_id.partition(":")
        kind = OntologyKind(kind_name)
        if not path or any(not segment for segment in path.split(".")):
            raise ValueError(f"ontology: malformed id {node_id!r}")
        if node_id in known:
            raise ValueError(f"ontology: duplicate id {node_id!r}")
        parent_id = f"{kind_name}:{path.rsplit('.', 1)[0]}" if "." in path else None
        if parent_id is not None and parent_id not in known:
            raise ValueError(f"ontology: {node_id!r} is listed before its parent {parent_id!r}")
        entries.append(OntologyEntry(node_id, kind, label, parent_id))
        known.add(node_id)
    return Ontology(entries)


@cache
def load_ontology(path: str | None = None) -> Ontology:
    """The shipped ontology, or the file at `path`."""
    if path is None:
        text = resources.files("ki_core").joinpath("data/ontology.json").read_text(encoding="utf-8")
    else:
        text = Path(path).read_text(encoding="utf-8")
    return parse_ontology(json.loads(text))


def ancestors(node_id: str) -> tuple[str, ...]:
    """`node_id` and its ancestors, self first, root last (the index's doc_type_ancestors)."""
    return load_ontology().ancestors(node_id)


def seed_ontology(session: Session, ontology: Ontology | None = None) -> SeedResult:
    """Upsert nodes and closure rows; running it again changes nothing.

    Nodes dropped from the file stay in SQL: documents may still point at them.
    Closure rows of the file's nodes that no longer hold (a node moved) are deleted.
    Flushes, never commits: the caller owns the transaction.
    """
    ontology = ontology or load_ontology()
    added, updated = _upsert_nodes(session, ontology)
    closure_added, closure_removed = _sync_closure(session, ontology)
    return SeedResult(added, updated, closure_added, closure_removed)


def _upsert_nodes(session: Session, ontology: Ontology) -> tuple[int, int]:
    existing = {node.id: node for node in session.scalars(select(OntologyNode))}
    added = updated = 0
    for entry in ontology.nodes.values():
        node = existing.get(entry.id)
        if node is None:
            session.add(OntologyNode(id=entry.id, kind=entry.kind, label=entry.label, parent_id=entry.parent_id))
            # Flush per new node: the parent row must exist before its child's FK is checked.
            session.flush()
            added += 1
        elif (node.kind, node.label, node.parent_id) != (entry.kind, entry.label, entry.parent_id):
            node.kind, node.label, node.parent_id = entry.kind, entry.label, entry.parent_id
            updated += 1
    session.flush()
    return added, updated


def _sync_closure(session: Session, ontology: Ontology) -> tuple[int, int]:
    wanted = ontology.closure()
    rows = session.scalars(
        select(OntologyClosure).where(OntologyClosure.descendant_id.in_(list(ontology.nodes)))
    ).all()
    have = {(row.ancestor_id, row.descendant_id): row for row in rows}
    removed = 0
    for key, row in have.items():
        if key not in wanted:
            session.delete(row)
            removed += 1
        elif row.depth != wanted[key]:
            row.depth = wanted[key]
    missing = [key for key in wanted if key not in have]
    session.add_all(
        OntologyClosure(ancestor_id=ancestor, descendant_id=descendant, depth=wanted[(ancestor, descendant)])
        for ancestor, descendant in missing
    )
    session.flush()
    return len(missing), removed
