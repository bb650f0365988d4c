"""The type a source declares and the type the text shows, decided in one place (decided_doc_type)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from ki_core.models import Document, MetadataArtifact, SourceKind
from ki_core.models.ontology import OntologyKind
from ki_core.ontology import load_ontology, seed_ontology
from ki_workers.sources.local_fs import Manifest, ManifestEntry, ManifestError
from ki_workers.stages import metadata
from ki_workers.stages.ingest import ingest_bytes
from ki_workers.stages.metadata import RuleBasedExtractor, decided_doc_type
from ki_workers.stages.record_metadata import re_extract, record_metadata
from ki_workers.stages.rows import get_or_create_project, get_or_create_source

REPO = Path(__file__).resolve().parents[3]
DECISIONS = REPO / "tests" / "fixtures" / "doctypes" / "decisions"
# A published Urteil (Leitsatz, Tenor, Tatbestand) and a letter whose subject names a contract.
JUDGMENT = (DECISIONS / "bgh_2010-05-12_79a71a550f5d.txt").read_text(encoding="utf-8")
LETTER = "Kanzlei\n\nRahmenliefervertrag Nr. 17 – Ihr Schreiben vom 1. März\n\nSehr geehrte Frau Meinke,\nwir weisen zurück."


@pytest.mark.parametrize(
    ("declared", "extracted", "decided"),
    [
        (None, "doc_type:decision.judgment", "doc_type:decision.judgment"),
        ("doc_type:decision", "doc_type:decision.judgment", "doc_type:decision.judgment"),
        ("doc_type:decision", "doc_type:contract", "doc_type:decision"),
        ("doc_type:decision", None, "doc_type:decision"),
        ("doc_type:decision.order", "doc_type:decision", "doc_type:decision.order"),
        (None, None, None),
    ],
)
def test_the_declaration_is_a_floor_the_text_may_narrow_but_never_leave(declared, extracted, decided) -> None:
    assert decided_doc_type(declared, extracted) == decided


def test_a_manifest_declares_a_type_by_its_last_segment_or_its_id() -> None:
    assert ManifestEntry(path="a.txt", doc_type="letter").doc_type == "doc_type:correspondence.letter"
    assert ManifestEntry(path="a.txt", doc_type="doc_type:decision.order").doc_type == "doc_type:decision.order"


def test_an_unknown_declared_type_is_a_manifest_error_naming_the_file() -> None:
    with pytest.raises(ManifestError, match=r"b\.txt: doc_type: .*unknown document type 'podcast'"):
        Manifest().declaring({"b.txt": "podcast"})


def test_declaring_fills_only_what_the_manifest_leaves_open() -> None:
    manifest = Manifest(files=[ManifestEntry(path="a.txt", doc_type="memo", title="Vermerk")])

    declared = manifest.declaring({"a.txt": "letter", "b.txt": "contract"})

    assert declared.entry_for("a.txt").doc_type == "doc_type:memo"
    assert declared.entry_for("a.txt").title == "Vermerk"
    assert declared.entry_for("b.txt").doc_type == "doc_type:contract"


def test_every_type_demo_json_declares_is_an_ontology_node() -> None:
    plan = json.loads((REPO / "examples" / "demo.json").read_text(encoding="utf-8"))
    declared = {t for project in plan["projects"] for t in project["doc_types"].values()}

    assert all(load_ontology().resolve(OntologyKind.DOC_TYPE, name) for name in declared)


def test_every_type_the_rules_name_is_an_ontology_node() -> None:
    named = set(re.findall(r'"(doc_type:[a-z_.]+)"', Path(metadata.__file__).read_text(encoding="utf-8")))

    assert named and named <= set(load_ontology().nodes)


@pytest.fixture
def seeded(db_session: Session) -> Session:
    """A store as `ki init` leaves it: the ontology's nodes in SQL."""
    seed_ontology(db_session)
    return db_session


def ingest(session: Session, path: str, text: str, doc_type: str | None) -> tuple[Document, str]:
    source = get_or_create_source(session, "ordner", SourceKind.LOCAL_FS)
    project = get_or_create_project(session, "hollmann")
    entry = ManifestEntry(path=path, doc_type=doc_type)
    result = ingest_bytes(session, source=source, project=project, external_id=path, data=text.encode(), entry=entry)
    record_metadata(session, result.version_id, RuleBasedExtractor(), link_now=False)
    return session.get(Document, result.document_id), result.version_id


def test_a_declared_decision_becomes_the_urteil_its_text_shows(seeded: Session) -> None:
    document, _ = ingest(seeded, "urteil.txt", JUDGMENT, "decision")

    assert (document.declared_doc_type, document.doc_type_id) == ("doc_type:decision", "doc_type:decision.judgment")


def test_a_declared_letter_stays_a_letter_and_an_undeclared_one_is_read_as_one(seeded: Session) -> None:
    declared, _ = ingest(seeded, "antwort.txt", LETTER, "letter")
    undeclared, _ = ingest(seeded, "antwort-2.txt", LETTER + "\n", None)

    assert declared.doc_type_id == undeclared.doc_type_id == "doc_type:correspondence.letter"


def test_a_declaration_the_text_contradicts_wins(seeded: Session) -> None:
    document, _ = ingest(seeded, "vermerk.txt", JUDGMENT, "memo")

    assert document.doc_type_id == "doc_type:memo"


def test_extracting_again_decides_again_from_the_declaration(seeded: Session) -> None:
    """`ki reindex` after a rules change: the declaration outlives the type decided before."""
    document, version_id = ingest(seeded, "urteil.txt", JUDGMENT, "decision")
    artifact = seeded.scalar(select(MetadataArtifact).where(MetadataArtifact.version_id == version_id,
                                                            MetadataArtifact.kind == "metadata"))
    # What an older rule decided and recorded.
    artifact.payload = {**artifact.payload, "doc_type": "doc_type:decision.order"}
    document.doc_type_id = "doc_type:decision.order"

    re_extract(seeded, version_id, RuleBasedExtractor())

    assert document.doc_type_id == "doc_type:decision.judgment"
