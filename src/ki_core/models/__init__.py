"""The ORM, one module per aggregate; importing this package registers every table."""

from ki_core.models.access import (
    AccessGeneration,
    DocumentAccessSummary,
    Grant,
    GrantEffect,
    GrantScope,
    GroupMembership,
)
from ki_core.models.audit import AuditRecord
from ki_core.models.base import Base, new_id
from ki_core.models.corpora import Corpus, CorpusKind
from ki_core.models.documents import (
    Chunk,
    ChunkKind,
    Document,
    DocumentVersion,
    Matter,
    ProcessingState,
    Project,
    VersionStatus,
)
from ki_core.models.events import EventStatus, IngestEvent, MetadataArtifact, SourceWatermark
from ki_core.models.graph import DecisionEvidence, DecisionRecord, Relation, RelationKind
from ki_core.models.ontology import OntologyClosure, OntologyKind, OntologyNode
from ki_core.models.sources import ObservationState, Source, SourceKind, SourceObject, SourceObservation
from ki_core.models.store import StoreIdentity

__all__ = [
    "AccessGeneration",
    "AuditRecord",
    "Base",
    "Chunk",
    "ChunkKind",
    "Corpus",
    "CorpusKind",
    "DecisionEvidence",
    "DecisionRecord",
    "Document",
    "DocumentAccessSummary",
    "DocumentVersion",
    "EventStatus",
    "Grant",
    "GrantEffect",
    "GrantScope",
    "GroupMembership",
    "IngestEvent",
    "Matter",
    "MetadataArtifact",
    "ObservationState",
    "OntologyClosure",
    "OntologyKind",
    "OntologyNode",
    "ProcessingState",
    "Project",
    "Relation",
    "RelationKind",
    "Source",
    "SourceKind",
    "SourceObject",
    "SourceObservation",
    "SourceWatermark",
    "StoreIdentity",
    "VersionStatus",
    "new_id",
]
