"""Which decision records hold a query term, asked of each database's own text index.

Migration 0006 built the index: on PostgreSQL a stored `text_vector` (the
`german` text search configuration: casefolded, umlauts folded, Snowball
stems, its own stopword list) with a GIN index; on SQLite the FTS5 table
`decision_fts` (unicode61 tokenizer, casefolded, diacritics folded, no
stemming). So "Kündigungen" finds "Kündigung" on PostgreSQL but not on SQLite;
both find "KÜNDIGUNG" for "kündigung". Terms arrive already stripped of the
query side's stopwords, one word each.
"""

from __future__ import annotations

from sqlalchemy import ColumnElement, column, func, literal_column, select, table
from sqlalchemy.orm import Session

from ki_core.models import DecisionRecord

_FTS = table("decision_fts", column("rowid"), column("body"))
_FTS_ROWS = table("decision_fts_rows", column("rowid"), column("decision_id"))
_TEXT_VECTOR = literal_column("decision_records.text_vector")
_GERMAN = literal_column("'german'::regconfig")


def term_matches(session: Session, terms: tuple[str, ...]) -> list[ColumnElement[bool]]:
    """Per term, true where a decision record holds it."""
    if _is_postgresql(session):
        return [_TEXT_VECTOR.op("@@")(func.plainto_tsquery(_GERMAN, term)) for term in terms]
    return [DecisionRecord.id.in_(_fts_ids(_fts_phrase(term))) for term in terms]


def any_term_matches(session: Session, terms: tuple[str, ...]) -> ColumnElement[bool]:
    """True where a record holds at least one term, in one index lookup rather than one per term."""
    if _is_postgresql(session):
        queries = [func.plainto_tsquery(_GERMAN, term) for term in terms]
        either = queries[0]
        for query in queries[1:]:
            either = either.op("||")(query)
        return _TEXT_VECTOR.op("@@")(either)
    return DecisionRecord.id.in_(_fts_ids(" OR ".join(_fts_phrase(term) for term in terms)))


def _fts_ids(expression: str):
    return (
        select(_FTS_ROWS.c.decision_id)
        .join(_FTS, _FTS.c.rowid == _FTS_ROWS.c.rowid)
        .where(_FTS.c.body.match(expression))
    )


def _fts_phrase(term: str) -> str:
    """A term as an FTS5 string: quoted, so a word like "and" or "near" is not read as an operator."""
    return '"' + term.replace('"', '""') + '"'


def _is_postgresql(session: Session) -> bool:
    return session.get_bind().dialect.name == "postgresql"
