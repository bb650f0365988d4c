"""The data model's constraints hold on both databases."""

from __future__ import annotations

import pytest
from sqlalchemy import select, text
from sqlalchemy.exc import IntegrityError, StatementError
from sqlalchemy.orm import Session

from ki_core.models import (
    AccessGeneration,
    Chunk,
    ChunkKind,
    DecisionEvidence,
    DecisionRecord,
    Document,
    DocumentVersion,
    Grant,
    GrantEffect,
    GrantScope,
    GroupMembership,
    IngestEvent,
    ObservationState,
    OntologyKind,
    OntologyNode,
    Project,
    Relation,
    RelationKind,
    Source,
    SourceKind,
    SourceObject,
    SourceObservation,
    VersionStatus,
)
from ki_workers.stages.chunking import FIRST_CLAUSE_ORDINAL


@pytest.fixture
def world(db_session: Session) -> dict:
    project = Project(name="mandant-a")
    source = Source(name="dms", kind=SourceKind.DMS)
    db_session.add_all([project, source])
    db_session.flush()
    document = Document(project_id=project.id, key="vertrag")
    db_session.add(document)
    db_session.flush()
    version = DocumentVersion(document_id=document.id, seq=1, content_hash="h1")
    obj = SourceObject(source_id=source.id, external_id="obj-1", acl_known=True)
    db_session.add_all([version, obj])
    db_session.flush()
    return {"project": project, "source": source, "document": document, "version": version, "object": obj}


def _fails(session: Session, *rows: object) -> None:
    with pytest.raises((IntegrityError, StatementError)):
        with session.begin_nested():
            session.add_all(rows)
            session.flush()


def test_a_grant_needs_exactly_one_target(db_session: Session, world: dict) -> None:
    _fails(db_session, Grant(scope=GrantScope.PROJECT, effect=GrantEffect.ALLOW, principal="u"))
    _fails(
        db_session,
        Grant(
            scope=GrantScope.PROJECT,
            project_id=world["project"].id,
            document_id=world["document"].id,
            effect=GrantEffect.ALLOW,
            principal="u",
        ),
    )


def test_a_grant_target_must_match_its_scope(db_session: Session, world: dict) -> None:
    _fails(
        db_session,
        Grant(scope=GrantScope.DOCUMENT, project_id=world["project"].id, effect=GrantEffect.ALLOW, principal="u"),
    )


@pytest.mark.parametrize(
    "scope,target",
    [(GrantScope.PROJECT, "project_id"), (GrantScope.DOCUMENT, "document_id"), (GrantScope.SOURCE_OBJECT, "source_object_id")],
)
def test_a_grant_with_one_matching_target_is_stored(db_session: Session, world: dict, scope, target) -> None:
    ids = {"project_id": world["project"].id, "document_id": world["document"].id, "source_object_id": world["object"].id}
    db_session.add(Grant(scope=scope, effect=GrantEffect.DENY, principal="u", **{target: ids[target]}))
    db_session.flush()
    assert db_session.scalar(select(Grant.scope).where(Grant.principal == "u")) == scope


def test_the_same_grant_twice_is_rejected(db_session: Session, world: dict) -> None:
    def grant() -> Grant:
        return Grant(scope=GrantScope.PROJECT, project_id=world["project"].id, effect=GrantEffect.ALLOW, principal="u")

    db_session.add(grant())
    db_session.flush()
    _fails(db_session, grant())


def test_an_allow_and_a_deny_for_the_same_principal_may_coexist(db_session: Session, world: dict) -> None:
    pid = world["project"].id
    db_session.add_all(
        [
            Grant(scope=GrantScope.PROJECT, project_id=pid, effect=GrantEffect.ALLOW, principal="u"),
            Grant(scope=GrantScope.PROJECT, project_id=pid, effect=GrantEffect.DENY, principal="u"),
        ]
    )
    db_session.flush()


def test_a_grant_needs_a_principal(db_session: Session, world: dict) -> None:
    _fails(db_session, Grant(scope=GrantScope.PROJECT, project_id=world["project"].id, effect=GrantEffect.ALLOW, principal=""))


def test_version_status_is_one_of_the_four(db_session: Session, world: dict) -> None:
    _fails(
        db_session,
        DocumentVersion(document_id=world["document"].id, seq=2, content_hash="h2", status="superseded"),
    )


def test_identical_content_is_one_version_of_a_document(db_session: Session, world: dict) -> None:
    _fails(db_session, DocumentVersion(document_id=world["document"].id, seq=2, content_hash="h1"))


def test_version_sequence_numbers_are_unique_per_document(db_session: Session, world: dict) -> None:
    _fails(db_session, DocumentVersion(document_id=world["document"].id, seq=1, content_hash="other"))


def test_document_keys_are_unique_per_project(db_session: Session, world: dict) -> None:
    _fails(db_session, Document(project_id=world["project"].id, key="vertrag"))


def test_a_version_is_observed_once_per_source_object(db_session: Session, world: dict) -> None:
    def observation() -> SourceObservation:
        return SourceObservation(version_id=world["version"].id, source_object_id=world["object"].id)

    db_session.add(observation())
    db_session.flush()
    _fails(db_session, observation())


def test_observation_state_defaults_to_active(db_session: Session, world: dict) -> None:
    obs = SourceObservation(version_id=world["version"].id, source_object_id=world["object"].id)
    db_session.add(obs)
    db_session.flush()
    assert obs.state == ObservationState.ACTIVE


@pytest.mark.parametrize(
    "kind,ordinal,ok",
    [
        (ChunkKind.CHUNK, 0, True),
        (ChunkKind.CHUNK, 20_360, True),  # a 20 MB text: body chunks are not capped at 1,000
        (ChunkKind.PROFILE, -1, True),
        (ChunkKind.CLAUSE, FIRST_CLAUSE_ORDINAL, True),
        (ChunkKind.PROFILE, 0, False),
        (ChunkKind.CLAUSE, 3, False),
        (ChunkKind.CLAUSE, 1000, False),
        (ChunkKind.CHUNK, -1, False),
        (ChunkKind.CHUNK, FIRST_CLAUSE_ORDINAL, False),
    ],
)
def test_chunk_ordinal_matches_its_kind(db_session: Session, world: dict, kind, ordinal, ok) -> None:
    chunk = Chunk(
        id=2**61 + ordinal + 10,
        version_id=world["version"].id,
        document_id=world["document"].id,
        ordinal=ordinal,
        kind=kind,
        text="x",
        text_hash="t",
    )
    if ok:
        db_session.add(chunk)
        db_session.flush()
    else:
        _fails(db_session, chunk)


def test_chunk_ids_are_64_bit(db_session: Session, world: dict) -> None:
    big = 2**63 - 1
    db_session.add(
        Chunk(id=big, version_id=world["version"].id, document_id=world["document"].id, ordinal=0,
              text="x", text_hash="t", embedding=b"\x00\x01", embedding_signature="hashing:384")
    )
    db_session.flush()
    db_session.expire_all()
    assert db_session.get(Chunk, big).embedding == b"\x00\x01"


def test_group_memberships_are_unique_per_source(db_session: Session, world: dict) -> None:
    def membership() -> GroupMembership:
        return GroupMembership(source_id=world["source"].id, group_principal="g", member_principal="u")

    db_session.add(membership())
    db_session.flush()
    _fails(db_session, membership())


def test_local_group_memberships_are_unique_too(db_session: Session) -> None:
    """NULL sources are distinct in the per-source index: the partial index keeps local ones unique."""
    db_session.add(GroupMembership(source_id=None, group_principal="g", member_principal="u"))
    db_session.flush()
    _fails(db_session, GroupMembership(source_id=None, group_principal="g", member_principal="u"))


def test_a_local_grant_and_the_same_mirrored_one_are_two_rows(db_session: Session, world: dict) -> None:
    def grant(origin: str) -> Grant:
        return Grant(scope=GrantScope.PROJECT, project_id=world["project"].id, effect=GrantEffect.DENY,
                     principal="u", origin=origin)

    db_session.add_all([grant("local"), grant("dms")])
    db_session.flush()
    _fails(db_session, grant("dms"))


def test_a_relation_between_the_same_documents_is_stored_once(db_session: Session, world: dict) -> None:
    other = Document(project_id=world["project"].id, key="anlage")
    db_session.add(other)
    db_session.flush()

    def relation() -> Relation:
        return Relation(kind=RelationKind.ANNEX_OF, from_document_id=other.id, to_document_id=world["document"].id)

    db_session.add(relation())
    db_session.flush()
    _fails(db_session, relation())


def test_a_document_cannot_relate_to_itself(db_session: Session, world: dict) -> None:
    doc = world["document"].id
    _fails(db_session, Relation(kind=RelationKind.REFERENCES, from_document_id=doc, to_document_id=doc))


def test_decision_evidence_must_name_something(db_session: Session, world: dict) -> None:
    decision = DecisionRecord(project_id=world["project"].id, locus="§ 5", change_summary="c", rationale="r")
    db_session.add(decision)
    db_session.flush()
    _fails(db_session, DecisionEvidence(decision_id=decision.id))


def test_event_ids_are_unique_per_source(db_session: Session, world: dict) -> None:
    def event() -> IngestEvent:
        return IngestEvent(source_id=world["source"].id, event_id="e-1", event_type="document.upserted", payload={})

    db_session.add(event())
    db_session.flush()
    _fails(db_session, event())


def test_ontology_parent_must_exist(db_session: Session) -> None:
    _fails(db_session, OntologyNode(id="doc_type:x", kind=OntologyKind.DOC_TYPE, label="x", parent_id="doc_type:missing"))


def test_deleting_a_document_cascades_to_versions_and_chunks(db_session: Session, world: dict) -> None:
    db_session.add(
        Chunk(id=7, version_id=world["version"].id, document_id=world["document"].id, ordinal=0, text="x", text_hash="t")
    )
    db_session.flush()
    db_session.execute(text("DELETE FROM documents WHERE id = :id"), {"id": world["document"].id})
    assert db_session.scalar(text("SELECT count(*) FROM document_versions")) == 0
    assert db_session.scalar(text("SELECT count(*) FROM chunks")) == 0


def test_latest_final_version_points_at_a_version(db_session: Session, world: dict) -> None:
    document = world["document"]
    document.latest_final_version_id = "f" * 32
    with pytest.raises(IntegrityError):
        with db_session.begin_nested():
            db_session.flush()


def test_the_access_generation_counter_starts_at_zero_and_has_one_row(db_session: Session) -> None:
    assert db_session.scalar(select(AccessGeneration.generation).where(AccessGeneration.id == 1)) == 0
    _fails(db_session, AccessGeneration(id=2, generation=0))


def test_status_enum_round_trips(db_session: Session, world: dict) -> None:
    world["version"].status = VersionStatus.EXECUTED
    db_session.flush()
    db_session.expire_all()
    assert db_session.get(DocumentVersion, world["version"].id).status is VersionStatus.EXECUTED
