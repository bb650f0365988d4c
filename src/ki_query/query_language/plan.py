"""What one search asks of the index: the query parsed once, its fields resolved in SQL.

A plain query (words only) keeps today's ranked hybrid on the text as typed. Any operator,
phrase, wildcard or field makes a boolean set: the constraint goes into every leg's strict
filter, the semantic leg embeds the words that are not excluded, and the identifier leg ranks
on the identifiers those words hold plus the az:/norm: values.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from functools import cache

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from ki_core.identifiers import query_identifier_terms
from ki_core.identifiers.query_terms import EXACT_WEIGHT, IdentifierTerms
from ki_core.models import Matter, Project
from ki_core.ontology import Ontology, load_ontology
from ki_core.search.constraint import Constraint
from ki_query.query_language.compiler import FieldResolver, compile_constraint, normalized_identifiers
from ki_query.query_language.parser import parse_query
from ki_query.query_language.syntax import ParsedQuery


@dataclass(frozen=True, slots=True)
class QueryPlan:
    parsed: ParsedQuery
    # The text the lexical (plain) and semantic legs read.
    text: str
    constraint: Constraint | None
    identifier_terms: IdentifierTerms

    @property
    def boolean(self) -> bool:
        return self.constraint is not None


# A read session for a moment (RetrievalService._session).
ReadSessions = Callable[[], AbstractContextManager[Session]]


def plan_query(query: str, session_for_names: ReadSessions | None) -> QueryPlan:
    """Parse (QuerySyntaxError on bad input) and compile; SQL is read only when a project or matter is named."""
    parsed = ParsedQuery(text=query, tree=None, plain=True) if surely_plain(query) else parse_query(query)
    if parsed.plain or parsed.tree is None:
        return QueryPlan(parsed, query, None, query_identifier_terms(query))
    constraint = compile_constraint(parsed.tree, _resolver(session_for_names))
    text = parsed.positive_text()
    if constraint is None:  # only stop words under the operators: nothing to constrain
        return QueryPlan(parsed, text, None, query_identifier_terms(text))
    fields = [field for name in ("docket", "statute") for field in parsed.fields(name)]
    named = [value for field in fields for value in normalized_identifiers(field.value)]
    terms = dict(query_identifier_terms(text)) | dict.fromkeys(named, EXACT_WEIGHT)
    return QueryPlan(parsed, text, constraint, tuple(sorted(terms.items(), key=lambda item: (-item[1], item[0]))))


# What the grammar could read as an operator: quotes, parentheses, a star, a colon (a field), a
# minus before a word, the upper-case keywords. A query without any of them is plain text.
_OPERATOR_SIGNS = re.compile(r'["()*:]|(?:^|\s)-[^\s-]|\b(?:OR|AND|NOT)\b')


def surely_plain(query: str) -> bool:
    """True for words only: today's ranked query without running the parser (lark took 2-4 ms of a
    plain search on the loaded bench machine, for a tree the plain path never reads)."""
    return _OPERATOR_SIGNS.search(query) is None


def _resolver(sessions: ReadSessions | None) -> FieldResolver:
    def ids(model: type[Project] | type[Matter]) -> Callable[[str], tuple[str, ...]]:
        def lookup(value: str) -> tuple[str, ...]:
            if sessions is None:
                return ()
            with sessions() as session:
                return _ids_named(session, model, value)

        return lookup

    return FieldResolver(project_ids=ids(Project), matter_ids=ids(Matter), ontology=_ontology())


def _ids_named(session: Session, model: type[Project] | type[Matter], value: str) -> tuple[str, ...]:
    """Ids whose name (case-insensitive), title or id is the value."""
    folded = value.casefold()
    rows = session.scalars(
        select(model.id).where(or_(func.lower(model.name) == folded, func.lower(model.title) == folded, model.id == value))
    )
    return tuple(sorted(rows))


@cache
def _ontology() -> Ontology:
    return load_ontology()
