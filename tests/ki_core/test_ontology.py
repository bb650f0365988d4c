"""The ontology file, its closure, and seeding it into SQL on both databases."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from ki_core.models import OntologyClosure, OntologyKind, OntologyNode
from ki_core.ontology import (
    UnknownOntologyNode,
    ancestors,
    load_ontology,
    parse_ontology,
    seed_ontology,
)


def test_ancestors_run_from_the_node_to_its_root() -> None:
    assert ancestors("doc_type:contract.lease.commercial") == (
        "doc_type:contract.lease.commercial",
        "doc_type:contract.lease",
        "doc_type:contract",
    )
    assert ancestors("clause_type:termination") == ("clause_type:termination",)


def test_unknown_node_has_no_ancestors() -> None:
    with pytest.raises(UnknownOntologyNode):
        ancestors("doc_type:contract.franchise")


def test_closure_holds_every_root_path_pair_with_its_depth() -> None:
    ontology = load_ontology()
    closure = ontology.closure()

    assert closure[("doc_type:contract.lease.commercial", "doc_type:contract.lease.commercial")] == 0
    assert closure[("doc_type:contract.lease", "doc_type:contract.lease.commercial")] == 1
    assert closure[("doc_type:contract", "doc_type:contract.lease.commercial")] == 2
    assert ("doc_type:contract.employment", "doc_type:contract.lease") not in closure
    assert len(closure) == sum(len(ontology.ancestors(node)) for node in ontology.nodes)


def test_every_kind_has_the_nodes_the_extractors_name() -> None:
    ontology = load_ontology()
    for node in (
        "doc_type:decision.judgment",
        "doc_type:decision.order",
        "doc_type:contract.lease",
        "doc_type:contract.employment",
        "doc_type:annex",
        "doc_type:correspondence.letter",
        "doc_type:memo",
        "doc_type:pleading",
        "clause_type:termination",
        "clause_type:liability",
        "clause_type:confidentiality",
        "clause_type:jurisdiction",
        "clause_type:payment",
        "clause_type:term",
        "clause_type:warranty",
        "clause_type:data_protection",
        "clause_type:non_compete",
        "clause_type:written_form",
        "clause_type:severability",
    ):
        assert node in ontology
    assert all(node.startswith("clause_type:") for node in ontology.ids(OntologyKind.CLAUSE_TYPE))


@pytest.mark.parametrize(
    ("kind", "answer", "resolved"),
    [
        (OntologyKind.DOC_TYPE, "doc_type:contract.lease", "doc_type:contract.lease"),
        (OntologyKind.DOC_TYPE, " DOC_TYPE:Contract.Lease ", "doc_type:contract.lease"),
        (OntologyKind.DOC_TYPE, "doc_type:contract.franchise", "doc_type:contract"),
        (OntologyKind.DOC_TYPE, "contract.lease.residential.student", "doc_type:contract.lease.residential"),
        (OntologyKind.DOC_TYPE, "Mietvertrag", "doc_type:contract.lease"),
        (OntologyKind.DOC_TYPE, "judgment", "doc_type:decision.judgment"),
        (OntologyKind.DOC_TYPE, "doc_type:podcast", None),
        (OntologyKind.DOC_TYPE, "", None),
        (OntologyKind.DOC_TYPE, None, None),
        (OntologyKind.CLAUSE_TYPE, "clause_type:termination.notice_period", "clause_type:termination"),
        (OntologyKind.CLAUSE_TYPE, "Salvatorische Klausel", "clause_type:severability"),
        (OntologyKind.CLAUSE_TYPE, "doc_type:contract", None),
    ],
)
def test_resolve_maps_model_answers_to_known_nodes(kind: OntologyKind, answer: str | None, resolved: str | None) -> None:
    assert load_ontology().resolve(kind, answer) == resolved


@pytest.mark.parametrize(
    ("nodes", "message"),
    [
        ([{"id": "doc_type:a.b", "label": "x"}], "listed before its parent"),
        ([{"id": "doc_type:a", "label": "x"}, {"id": "doc_type:a", "label": "y"}], "duplicate id"),
        ([{"id": "doc_type:a..b", "label": "x"}], "malformed id"),
    ],
)
def test_a_broken_ontology_file_is_rejected(nodes: list[dict], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_ontology({"nodes": nodes})


def _closure_rows(session: Session) -> set[tuple[str, str, int]]:
    rows = session.execute(select(OntologyClosure.ancestor_id, OntologyClosure.descendant_id, OntologyClosure.depth))
    return {tuple(row) for row in rows}


def test_seed_writes_nodes_and_the_closure(db_session: Session) -> None:
    ontology = load_ontology()

    result = seed_ontology(db_session)

    assert result.nodes_added == len(ontology.nodes)
    lease = db_session.get(OntologyNode, "doc_type:contract.lease")
    assert (lease.kind, lease.label, lease.parent_id) == (OntologyKind.DOC_TYPE, "Mietvertrag", "doc_type:contract")
    assert _closure_rows(db_session) == {(a, d, depth) for (a, d), depth in ontology.closure().items()}
    subtree = db_session.scalars(
        select(OntologyClosure.descendant_id).where(OntologyClosure.ancestor_id == "doc_type:contract.lease")
    ).all()
    assert set(subtree) == {
        "doc_type:contract.lease",
        "doc_type:contract.lease.residential",
        "doc_type:contract.lease.commercial",
    }


def test_seeding_twice_changes_nothing(db_session: Session) -> None:
    seed_ontology(db_session)
    before = _closure_rows(db_session)

    again = seed_ontology(db_session)

    assert not again.changed
    assert _closure_rows(db_session) == before
    assert db_session.scalar(select(func.count()).select_from(OntologyNode)) == len(load_ontology().nodes)


def test_seeding_a_changed_label_updates_the_node_and_keeps_the_closure(db_session: Session) -> None:
    seed_ontology(
        db_session,
        parse_ontology({"nodes": [{"id": "doc_type:x", "label": "X"}, {"id": "doc_type:x.y", "label": "Y"}]}),
    )

    result = seed_ontology(
        db_session,
        parse_ontology({"nodes": [{"id": "doc_type:x", "label": "X neu"}, {"id": "doc_type:x.y", "label": "Y"}]}),
    )

    assert (result.nodes_added, result.nodes_updated, result.closure_added) == (0, 1, 0)
    assert db_session.get(OntologyNode, "doc_type:x").label == "X neu"
    assert _closure_rows(db_session) == {
        ("doc_type:x", "doc_type:x", 0),
        ("doc_type:x.y", "doc_type:x.y", 0),
        ("doc_type:x", "doc_type:x.y", 1),
    }
