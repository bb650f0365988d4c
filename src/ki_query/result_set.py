"""What a search says about its whole result, beside the page: which documents matched (the
count), how they spread over type, project, year and court (facets), how well the best of them
answers the query (match), and the date order a lawyer may ask for instead of relevance.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from datetime import date
from functools import cache

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from ki_core.identifiers.whole_values import court_names
from ki_core.models import Chunk, ChunkKind, Document, DocumentVersion, Project
from ki_core.ontology import load_ontology
from ki_core.search.types import Leg, MultiSearchResult
from ki_query.federation.ranking import Calibration
from ki_query.fusion import Candidate
from ki_query.types import Facets, FacetValue, MatchLevel
from ki_query.verification import VerifiedChunk

# Levels on the federation's calibrated scale (ranking.Calibration: 0 is an unrelated question's best
# hit, 1 an identical text) for the best semantic hit, chosen by bench/match_threshold.py on the
# calibration half of bench/data/match_queries.json (e5-small, demo + BGB tenancy statutes): off-topic
# best hits reached at most 0.245, on-topic ones at least 0.369; the middle of that gap is 0.307, the
# weak band starts at half of it (as the federation's weak level is half its found level). The report
# half, not used for the choice: off-topic 0.000-0.177 (15/15 none or weak), on-topic 0.341-0.638
# (15/15 strong).
STRONG_FROM = 0.307
NONE_BELOW = STRONG_FROM / 2
# An IN list of this many ids per statement (PostgreSQL and SQLite take far more; this keeps plans small).
_IDS_PER_STATEMENT = 1_000
# Facet lists show at most this many values each, the most frequent first.
FACET_VALUES = 12


def matched_documents(result: MultiSearchResult) -> dict[str, str]:
    """document id -> a version of it: a boolean query's whole set (every version the index listed,
    however deep; a document's version from the lexical leg where it ranks one), or what a ranked
    query's words and identifiers matched as far as the legs reached."""
    found = result.hits(Leg.LEXICAL).documents()
    for document_id, version_id in result.hits(Leg.IDENTIFIER).documents().items():
        found.setdefault(document_id, version_id)
    if result.versions is not None:
        found = {d: v for d, v in found.items() if v in result.versions}
        for version_id, document_id in sorted(result.versions.items()):
            found.setdefault(document_id, version_id)
    return found


def match_level(
    result: MultiSearchResult, total: int, calibration: Calibration, cosine: Callable[[float], float]
) -> MatchLevel:
    """none / weak / strong: nothing matched is none; a document carrying an identifier the query
    names is strong; otherwise the best semantic hit's level decides (a set of fields alone, with no
    text to compare, is strong once it holds a document)."""
    semantic = result.hits(Leg.SEMANTIC)
    if total == 0 and not len(semantic):
        return "none"
    if len(result.hits(Leg.IDENTIFIER)):
        return "strong"
    if not len(semantic):
        return "strong" if total else "none"
    level = calibration.level(cosine(float(semantic.scores[0])))
    if level < NONE_BELOW:
        return "none"
    return "weak" if level < STRONG_FROM else "strong"


def by_date(
    session: Session, candidates: Sequence[Candidate], versions: dict[str, str] | None, *, newest_first: bool,
    documents: int,
) -> list[Candidate]:
    """The candidates in their version's date order (undated last), relevance breaking ties.

    The date becomes the score collapse and verification order by, so each document shows its
    newest (oldest) found version and paging stays one ranking; the shown score is the relevance.
    A boolean query orders its whole set (`versions`), not only what the legs reached: a version
    no leg ranked joins with its first body chunk, for the first `documents` documents in date order."""
    ranked = {c.version_id: c for c in sorted(candidates, key=lambda c: (-c.score, c.chunk_id))[::-1]}
    dates = version_dates(session, versions if versions is not None else ranked)
    listed = ranked if versions is None else _with_unranked(session, ranked, versions, dates, newest_first, documents)
    sign = 1 if newest_first else -1
    shown = list(candidates) if versions is None else [c for c in candidates if c.version_id in versions]
    shown += [c for version_id, c in listed.items() if version_id not in ranked]
    for candidate in shown:
        day = dates.get(candidate.version_id)
        key = sign * day.toordinal() if day is not None else -10_000_000
        candidate.score = key + min(candidate.score, 0.999)
    return sorted(shown, key=lambda c: (-c.score, c.chunk_id))


def _with_unranked(
    session: Session, ranked: dict[str, Candidate], versions: dict[str, str], dates: dict[str, date],
    newest_first: bool, documents: int,
) -> dict[str, Candidate]:
    """`ranked`, plus a candidate (first body chunk) for each unranked version among the first
    `documents` documents of the set in date order."""
    sign = 1 if newest_first else -1
    ordered = sorted(versions, key=lambda v: (-(sign * dates[v].toordinal()) if v in dates else 10_000_000, v))
    head: list[str] = []
    seen: set[str] = set()
    for version_id in ordered:
        if len(seen) >= documents and versions[version_id] not in seen:
            break
        seen.add(versions[version_id])
        head.append(version_id)
    missing = [v for v in head if v not in ranked]
    return ranked | first_chunks(session, missing)


def first_chunks(session: Session, version_ids: Sequence[str]) -> dict[str, Candidate]:
    """version id -> a candidate of its first body chunk (a version no leg ranked, shown by date)."""
    found: dict[str, Candidate] = {}
    for batch in _batches(list(version_ids)):
        first = (
            select(Chunk.version_id, func.min(Chunk.ordinal).label("ordinal"))
            .where(Chunk.version_id.in_(batch), Chunk.kind == ChunkKind.CHUNK)
            .group_by(Chunk.version_id)
            .subquery()
        )
        rows = session.execute(
            select(Chunk.id, Chunk.version_id, Chunk.document_id, Document.project_id, DocumentVersion.status)
            .join(first, (first.c.version_id == Chunk.version_id) & (first.c.ordinal == Chunk.ordinal))
            .join(DocumentVersion, DocumentVersion.id == Chunk.version_id)
            .join(Document, Document.id == Chunk.document_id)
            .where(Chunk.kind == ChunkKind.CHUNK)
        )
        for chunk_id, version_id, document_id, project_id, status in rows:
            found[version_id] = Candidate(chunk_id=chunk_id, document_id=document_id, version_id=version_id,
                                          project_id=project_id, version_status=str(status), chunk_kind="chunk")  # fmt: skip
    return found


def version_dates(session: Session, version_ids: Iterable[str]) -> dict[str, date]:
    found: dict[str, date] = {}
    for batch in _batches(sorted(version_ids)):
        rows = session.execute(select(DocumentVersion.id, DocumentVersion.doc_date).where(DocumentVersion.id.in_(batch)))
        found.update({version_id: day for version_id, day in rows if day is not None})
    return found


def folded_versions(verified: dict[int, VerifiedChunk], page: Sequence[Candidate]) -> dict[str, tuple[str, ...]]:
    """Per shown document, the other verified versions the search found: one row per document.

    Read from the verified chunks, not the candidate list: fusion builds a candidate only when it is
    read, and reading all 7,500 of a ranked search cost a plain query more than the rest of it."""
    shown = {c.document_id: c.version_id for c in page}
    others: dict[str, dict[str, None]] = {}
    for chunk in verified.values():
        document_id, version_id = chunk.facts.document.id, chunk.facts.version.id
        if document_id in shown and shown[document_id] != version_id:
            others.setdefault(document_id, {})[version_id] = None
    return {document_id: tuple(versions) for document_id, versions in others.items()}


def document_facets(session: Session, found: dict[str, str], labels: dict[str, str]) -> Facets:
    """Documents per type, project, year (of the version found) and court, most frequent first."""
    types: Counter[str] = Counter()
    projects: Counter[str] = Counter()
    years: Counter[int] = Counter()
    courts: Counter[str] = Counter()
    for batch in _batches(sorted(found.values())):
        rows = session.execute(
            select(Document.doc_type_id, Project.name, DocumentVersion.doc_date, Document.identifiers)
            .join(Document, Document.id == DocumentVersion.document_id)
            .join(Project, Project.id == Document.project_id)
            .where(DocumentVersion.id.in_(batch))
        )
        for doc_type, project, day, identifiers in rows:
            types.update([doc_type] if doc_type else [])
            projects[project] += 1
            years.update([day.year] if day else [])
            courts.update(court_names(identifiers or ()))
    return Facets(
        type=_values(types, lambda v: labels.get(v, v), lambda v: f'typ:"{labels.get(v, v).split("/")[0].strip()}"'),
        project=_values(projects, str, lambda v: f'projekt:"{v}"'),
        year=_values(years, str, lambda v: f"datum:{v}-01-01..{v}-12-31"),
        court=_values(courts, str, lambda v: f'gericht:"{v}"'),
    )


def _values(counts: Counter, label: Callable, query: Callable) -> tuple[FacetValue, ...]:  # type: ignore[type-arg]
    ordered = sorted(counts.items(), key=lambda item: (-item[1], str(item[0])))[:FACET_VALUES]
    return tuple(FacetValue(value=str(v), label=label(v), count=n, query=query(v)) for v, n in ordered)


@cache
def ontology_labels() -> dict[str, str]:
    ontology = load_ontology()
    return {node_id: ontology.label(node_id) for node_id in ontology.nodes}


def _batches(ids: list[str]) -> Iterable[list[str]]:
    for start in range(0, len(ids), _IDS_PER_STATEMENT):
        yield ids[start : start + _IDS_PER_STATEMENT]
