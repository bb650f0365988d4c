"""The index signature (amendments.md 7): what built the vectors and identifiers an index holds.

Only the dimension used to be checked, so a same-dimension model switch (or a new identifier
extractor) was accepted and the index came to hold vectors of two models while queries used one.
Now the index records the signature it was built with; a process whose configuration differs
refuses to search and to write it (IndexSignatureMismatch: HTTP 503, CLI exit 1) until
`ki reindex` builds an index for the configuration.

The signature is (provider, model identity, dimension, normalisation, extractor version). The
model identity is a digest of an offline model's weights, not the package version: an upgrade
that ships the same weights refuses nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from pydantic import BaseModel, ConfigDict

from ki_core.search.types import IndexSignatureMismatch

if TYPE_CHECKING:
    from sqlalchemy.orm import Session, sessionmaker

    from ki_core.config import Settings

# Every embedder's rows leave ki_core.embedding L2-normalized (inner product = cosine).
NORMALISATION = "l2"


class IndexSignature(BaseModel):
    """Recorded in the index (OpenSearch `_meta`, a file of the embedded index) as JSON."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    provider: str
    model: str
    dimensions: int
    normalisation: str = NORMALISATION
    extractor_version: int

    def text(self) -> str:
        """One line for messages, `ki status` and the SQL column indexed_signature."""
        return (
            f"{self.provider} model={self.model} dim={self.dimensions} "
            f"norm={self.normalisation} ids=v{self.extractor_version}"
        )


class SignedIndex(Protocol):
    def recorded_signature(self) -> IndexSignature | None: ...

    def record_signature(self, signature: IndexSignature) -> None: ...


def configured_signature(settings: Settings) -> IndexSignature:
    from ki_core.embedding import model_identity
    from ki_core.identifiers import EXTRACTOR_VERSION

    return IndexSignature(
        provider=settings.embedding.provider,
        model=model_identity(settings),
        dimensions=settings.effective_embedding_dimensions,
        extractor_version=EXTRACTOR_VERSION,
    )


def legacy_signature(settings: Settings) -> str:
    """How versions indexed before signatures were recorded name their index (indexed_signature)."""
    from ki_core.identifiers import EXTRACTOR_VERSION

    return f"{settings.embedding.label()}:{settings.effective_embedding_dimensions}:ids{EXTRACTOR_VERSION}"


def mismatch_message(stored: str, configured: IndexSignature) -> str:
    return (
        f"the search index was built with \"{stored}\" but this configuration is \"{configured.text()}\": "
        "searching or writing it would mix two models' vectors or identifiers; run `ki reindex` to rebuild "
        "it for this configuration (or, if `ki reindex` just rebuilt it for the other one, restart this "
        "process with that configuration)"
    )


def check_recorded(recorded: IndexSignature | None, expected: IndexSignature | None) -> None:
    """The per-operation check of both backends; an unrecorded index was vetted when it was opened."""
    if expected is not None and recorded is not None and recorded != expected:
        raise IndexSignatureMismatch(mismatch_message(recorded.text(), expected))


def bind_index_signature(
    index: SignedIndex, settings: Settings, sessions: sessionmaker[Session], *, claim: bool
) -> IndexSignature:
    """Refuse an index built for another configuration; with `claim` (a writer) record the signature
    on an index that has none: a new one, or one built before signatures were recorded whose
    versions' indexed_signature all name this configuration."""
    configured = configured_signature(settings)
    recorded = index.recorded_signature()
    if recorded is not None:
        check_recorded(recorded, configured)
        return configured
    others = unrecorded_signatures(sessions) - {legacy_signature(settings), configured.text()}
    if others:
        raise IndexSignatureMismatch(mismatch_message(" and ".join(sorted(others)), configured))
    if claim:
        index.record_signature(configured)
    return configured


def unrecorded_signatures(sessions: sessionmaker[Session]) -> set[str]:
    """The distinct indexed_signature of indexed versions: the only record an old index has."""
    from sqlalchemy import select

    from ki_core.models import DocumentVersion

    with sessions() as session:
        column = DocumentVersion.indexed_signature
        return set(session.scalars(select(column).where(column.is_not(None)).distinct()))


def recorded_signature(settings: Settings) -> IndexSignature | None:
    """What built the configured index, read without opening it for writing (None: nothing yet)."""
    from ki_core.search.index import open_index

    index = open_index(settings, read_only=True)
    try:
        return index.recorded_signature()
    finally:
        index.close()


def signature_status(settings: Settings) -> list[str]:
    """`ki status`'s lines: the recorded signature, and the configured one when they differ."""
    from ki_core.search.types import SearchBackendError

    configured = configured_signature(settings)
    try:
        recorded = recorded_signature(settings)
    except SearchBackendError as exc:
        return [f"index signature: unavailable ({exc})"]
    if recorded is None:
        return [f"index signature: none recorded yet (the next writer records \"{configured.text()}\")"]
    lines = [f"index signature: {recorded.text()}"]
    if recorded != configured:
        lines.append(f"configured: {configured.text()} — mismatch, run ki reindex")
    return lines
