"""Decision records: why something changed, searchable only where ALL their evidence is visible.

Records are scored by the share of the query's terms (casefolded words, German
stopwords dropped) that their locus, change summary and rationale hold, as the
database's text index matches them (decision_text_index), then by the newest
decision. Ranked and limited in SQL; they are not a fused leg of search.
A record is returned only when every evidence entry is visible to the caller
(spec/access.md, Scope: it may summarize any of them); a record without
evidence is never returned (fail closed).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection

from sqlalchemy import Select, case, select
from sqlalchemy.orm import Session

from ki_core.acl import Viewer, in_set
from ki_core.models import (
    DecisionEvidence,
    DecisionRecord,
    Document,
    DocumentVersion,
    Matter,
    ObservationState,
    Project,
    SourceObject,
    SourceObservation,
)
from ki_core.search.types import ScopeFilter
from ki_query.decision_text_index import any_term_matches, term_matches
from ki_query.text_match import query_terms
from ki_query.types import (
    DecisionEvidenceRef,
    DecisionHit,
    InvalidDecision,
    NewDecision,
)
from ki_query.verification import version_facts

# Records verified per batch while filling a page: most candidates are visible to their readers.
VERIFY_BATCH_FACTOR = 4
# Each further batch doubles, up to this many records checked in one go.
MAX_VERIFY_BATCH = 2_000


def search_decisions(
    session: Session, viewer: Viewer, query: str, limit: int, scope: ScopeFilter | None = None
) -> list[DecisionHit]:
    """The best `limit` visible records sharing terms with the query, best first.

    The database ranks the records holding a query term in its text index, once;
    the ranked ids are read from its cursor a batch at a time and their evidence
    checked, until the page is full or the ranking ends, so a record the caller
    may see is never hidden by the limit, and rows past the page are not read.
    `scope`, the caller's compiled access scope, drops a record with an evidence
    version in a document outside it before the (costlier) evidence check,
    which still decides what is shown.
    """
    terms = tuple(sorted(query_terms(query)))
    if not terms or limit <= 0 or viewer.sees_nothing:
        return []
    batch = max(VERIFY_BATCH_FACTOR * limit, 20)
    hits: list[DecisionHit] = []
    ranked = session.execute(_ranking(session, terms).execution_options(stream_results=True))
    try:
        while len(hits) < limit and (rows := ranked.fetchmany(batch)):
            matched = {row[0]: tuple(t for t, flag in zip(terms, row[1:], strict=True) if flag) for row in rows}
            candidates = list(matched) if scope is None else _inside_scope(session, scope, list(matched))
            evidence = visible_evidence(session, viewer, candidates)
            shown = [record_id for record_id in matched if record_id in evidence][: limit - len(hits)]
            records = _records(session, shown)
            hits += [_hit(records[i], len(matched[i]) / len(terms), matched[i], evidence[i]) for i in shown]
            batch = min(2 * batch, MAX_VERIFY_BATCH)  # a caller who sees few of them: fewer round trips
    finally:
        ranked.close()
    return hits


def _ranking(session: Session, terms: tuple[str, ...]) -> Select:
    """Ids of the records holding a query term with a flag per term: by share of terms, newest decision, id.

    Each term is matched by the database's own text index (decision_text_index):
    the `german` configuration on PostgreSQL, FTS5's unicode61 tokenizer on SQLite.
    Only ids and flags go through the sort; the records of the page are read after.
    """
    flags = [case((matches, 1), else_=0) for matches in term_matches(session, terms)]
    shared = sum(flags[1:], flags[0])
    return (
        select(DecisionRecord.id, *flags)
        .where(any_term_matches(session, terms))
        .order_by(shared.desc(), DecisionRecord.decided_at.desc().nulls_last(), DecisionRecord.id)
    )


def _inside_scope(session: Session, scope: ScopeFilter, decision_ids: list[str]) -> list[str]:
    """The decisions without an evidence version in a document the scope does not admit, in order.

    Evidence naming only a source object is left to the evidence check: which
    version it shows is a question of observations.
    """
    stmt = (
        select(DecisionEvidence.decision_id, Document.project_id, Document.id)
        .join(DocumentVersion, DocumentVersion.id == DecisionEvidence.version_id)
        .join(Document, Document.id == DocumentVersion.document_id)
        .where(in_set(DecisionEvidence.decision_id, decision_ids))
    )
    outside = {decision for decision, project, document in session.execute(stmt) if not scope.admits(project, document)}
    return [decision for decision in decision_ids if decision not in outside]


def _records(session: Session, ids: list[str]) -> dict[str, DecisionRecord]:
    if not ids:
        return {}
    return {record.id: record for record in session.scalars(select(DecisionRecord).where(in_set(DecisionRecord.id, ids)))}


def _hit(record: DecisionRecord, score: float, matched: tuple[str, ...], evidence) -> DecisionHit:
    return DecisionHit(
        id=record.id, project_id=record.project_id, matter_id=record.matter_id, locus=record.locus,
        change_summary=record.change_summary, rationale=record.rationale, decided_by=record.decided_by,
        decided_at=record.decided_at, score=score, matched_terms=matched, evidence=tuple(evidence),
    )


# ------------------------------------------------------------------ evidence


def visible_evidence(
    session: Session, viewer: Viewer, decision_ids: Collection[str]
) -> dict[str, list[DecisionEvidenceRef]]:
    """{decision_id: its evidence} for the decisions whose evidence is ALL visible to the viewer.

    A version is visible evidence when the viewer sees it (and may cite it); a
    source object when a visible version is actively observed as it and the
    viewer may cite that observation; both named: that version through that object.
    """
    if not decision_ids or viewer.sees_nothing:
        return {}
    entries: dict[str, list[DecisionEvidenceRef]] = defaultdict(list)
    stmt = select(DecisionEvidence.decision_id, DecisionEvidence.source_object_id, DecisionEvidence.version_id)
    for decision_id, object_id, version_id in session.execute(stmt.where(in_set(DecisionEvidence.decision_id, decision_ids))):
        entries[decision_id].append(DecisionEvidenceRef(source_object_id=object_id, version_id=version_id))
    citable = _citable_pairs(session, viewer, [e for refs in entries.values() for e in refs])
    return {
        decision_id: sorted(refs, key=lambda e: (e.source_object_id or "", e.version_id or ""))
        for decision_id, refs in entries.items()
        if refs and all(_evidence_visible(e, citable) for e in refs)
    }


def _citable_pairs(session: Session, viewer: Viewer, evidence: list[DecisionEvidenceRef]) -> set[tuple[str, str | None]]:
    """(version, object) for each source the viewer may cite, plus (version, None) for each visible version."""
    objects = {e.source_object_id for e in evidence if e.source_object_id}
    versions = {e.version_id for e in evidence if e.version_id}
    if objects:
        versions |= set(
            session.scalars(
                select(SourceObservation.version_id).where(
                    in_set(SourceObservation.source_object_id, objects),
                    SourceObservation.state == ObservationState.ACTIVE,
                )
            )
        )
    pairs: set[tuple[str, str | None]] = set()
    for version_id, facts in version_facts(session, viewer, versions).items():
        pairs.add((version_id, None))
        pairs |= {(version_id, s.source_object_id) for s in facts.sources}
    return pairs


def _evidence_visible(entry: DecisionEvidenceRef, citable: set[tuple[str, str | None]]) -> bool:
    if entry.version_id is not None:
        return (entry.version_id, entry.source_object_id) in citable
    return any(obj == entry.source_object_id for _version, obj in citable if obj is not None)


# ------------------------------------------------------------------ writing


def add_decision(session: Session, decision: NewDecision, writer: Viewer | None = None) -> DecisionHit:
    """Record a decision (flushes; the caller commits). Replaying an external_id returns the stored record.

    `writer`: the principals of a person recording it, who must see every
    evidence entry; None for trusted writers (the DMS event, an operator's CLI).
    """
    if decision.external_id is not None:
        existing = session.scalar(select(DecisionRecord).where(DecisionRecord.external_id == decision.external_id))
        if existing is not None:
            return _stored(existing)
    if writer is not None:
        _check_writer_sees_evidence(session, writer, decision)
    _check_targets(session, decision)
    record = DecisionRecord(
        project_id=decision.project_id, matter_id=decision.matter_id, external_id=decision.external_id,
        locus=decision.locus, change_summary=decision.change_summary, rationale=decision.rationale,
        decided_by=decision.decided_by, decided_at=decision.decided_at,
    )
    record.evidence = [
        DecisionEvidence(source_object_id=e.source_object_id, version_id=e.version_id) for e in decision.evidence
    ]
    session.add(record)
    session.flush()
    return _stored(record)


def _stored(record: DecisionRecord) -> DecisionHit:
    evidence = sorted(
        (DecisionEvidenceRef(source_object_id=e.source_object_id, version_id=e.version_id) for e in record.evidence),
        key=lambda e: (e.source_object_id or "", e.version_id or ""),
    )
    return _hit(record, 0.0, (), evidence)


def _check_targets(session: Session, decision: NewDecision) -> None:
    if session.get(Project, decision.project_id) is None:
        raise InvalidDecision(f"no project {decision.project_id!r}")
    if decision.matter_id is not None:
        matter = session.get(Matter, decision.matter_id)
        if matter is None or matter.project_id != decision.project_id:
            raise InvalidDecision(f"no matter {decision.matter_id!r} in project {decision.project_id!r}")
    for entry in decision.evidence:
        if entry.source_object_id is not None and session.get(SourceObject, entry.source_object_id) is None:
            raise InvalidDecision(f"no source object {entry.source_object_id!r}")
        if entry.version_id is not None and session.get(DocumentVersion, entry.version_id) is None:
            raise InvalidDecision(f"no document version {entry.version_id!r}")


def _check_writer_sees_evidence(session: Session, writer: Viewer, decision: NewDecision) -> None:
    """Nobody records a decision over evidence they cannot see (the message does not say which exists)."""
    citable = _citable_pairs(session, writer, list(decision.evidence))
    for entry in decision.evidence:
        if not _evidence_visible(entry, citable):
            raise InvalidDecision("evidence not found: every evidence entry must be visible to the writer")
