"""The parsed query as the index's constraint (ki_core.search.constraint), fields resolved.

Words and phrases become the tokens the German analyzer makes of them ("terms as the
analyzer sees them"): a word that is only stop words or punctuation ("der", "-") constrains
nothing and drops out. Fields become keyword or date conditions on the indexed columns; a
project or matter name the store does not know resolves to no value (matches nothing, the
same answer as for one the caller may not see), an unknown document type is an error.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ki_core.identifiers import Identifier
from ki_core.identifiers.laws import law_table, name_key
from ki_core.identifiers.whole_values import normalized_court
from ki_core.models.ontology import OntologyKind
from ki_core.ontology import Ontology
from ki_core.search.constraint import (
    AllOf,
    AnyOf,
    Constraint,
    DateMatch,
    KeywordMatch,
    KeywordPattern,
    KeywordPrefix,
    TextMatch,
    TextPrefix,
    pattern_literal,
)
from ki_core.search.text_index import analyzed_positions, german_words
from ki_query.query_language.parser import HINT, cited_run, lawless_references, section_range
from ki_query.query_language.syntax import (
    All,
    Any,
    DateSpan,
    Field,
    Node,
    Not,
    Phrase,
    QuerySyntaxError,
    Wildcard,
    Word,
)

# The Snowball German stemmer folds umlauts and ß in the indexed terms; a wildcard's prefix is folded alike.
_FOLD = str.maketrans({"ä": "a", "ö": "o", "ü": "u", "ß": "ss"})


@dataclass(frozen=True, slots=True)
class FieldResolver:
    """What field values name in this store: project and matter ids by name or id, the ontology."""

    project_ids: Callable[[str], tuple[str, ...]]
    matter_ids: Callable[[str], tuple[str, ...]]
    ontology: Ontology


def compile_constraint(tree: Node, resolver: FieldResolver) -> Constraint | None:
    """The tree as a constraint; None when it constrains nothing (only stop words)."""
    return _compile(tree, resolver)


def _compile(node: Node, resolver: FieldResolver) -> Constraint | None:
    if isinstance(node, Word | Phrase):
        tokens = analyzed_positions(node.text)
        return TextMatch(text=node.text, tokens=tokens) if tokens else None
    if isinstance(node, Wildcard):
        return _prefix(node)
    if isinstance(node, Field):
        return _field(node, resolver)
    if isinstance(node, DateSpan):
        return DateMatch(start=node.start, end=node.end)
    if isinstance(node, Not):
        child = _compile(node.child, resolver)
        return AllOf(must_not=(child,)) if child is not None else None
    if isinstance(node, Any):
        children = [_compile(child, resolver) for child in node.children]
        # One branch that holds for everything makes the whole OR hold for everything.
        return None if any(c is None for c in children) else AnyOf(any=tuple(children))  # type: ignore[arg-type]
    return _all(node, resolver)


def _all(node: All, resolver: FieldResolver) -> Constraint | None:
    must: list[Constraint] = []
    must_not: list[Constraint] = []
    for child in node.children:
        compiled = _compile(child, resolver)
        if compiled is None:
            continue
        if isinstance(compiled, AllOf) and not compiled.must:
            must_not += compiled.must_not
        else:
            must.append(compiled)
    if not must and not must_not:
        return None
    if len(must) == 1 and not must_not:
        return must[0]
    return AllOf(must=tuple(must), must_not=tuple(must_not))


def _prefix(node: Wildcard) -> Constraint | None:
    """`Kündig*`: one word before the star is a prefix; anything else ("5a/b*") is read as the word."""
    words = german_words().analyze(node.prefix)
    if len(words) != 1:
        return _compile(Word(text=node.prefix, position=node.position), _NO_FIELDS)
    return TextPrefix(prefix=words[0].translate(_FOLD))


def _field(node: Field, resolver: FieldResolver) -> Constraint:
    if node.name == "type":
        found = resolver.ontology.resolve(OntologyKind.DOC_TYPE, node.value)
        if found is None:
            raise QuerySyntaxError(f"typ:{node.value} ist kein bekannter Dokumenttyp", node.position, HINT)
        return KeywordMatch(field="doc_type_ancestors", values=(found,))
    if node.name == "project":
        return KeywordMatch(field="project_id", values=resolver.project_ids(node.value))
    if node.name == "matter":
        return KeywordMatch(field="matter_id", values=resolver.matter_ids(node.value))
    if node.name == "court":
        return KeywordMatch(field="courts", values=(normalized_court(node.value),))
    if node.name == "statute":
        return _statute(node)
    return KeywordMatch(field="identifier_values", values=normalized_identifiers(node.value))


def _statute(node: Field) -> Constraint:
    """What a norm value names, any of which a document may cite (itself or a part of it; the index
    holds each citation with its ancestors, whole_values): a reference with a law is its value; one
    without a law (`norm:§§ 573, 574`) each section in every law; a range (`§§ 573-575`) every
    section from its first to its last; an act or law alone (`Verordnung (EU) 2016/679`,
    `norm:DSGVO`) the act and each article of it."""
    whole = " ".join(node.value.split())
    if chains := lawless_references(whole):
        conditions = [condition for chain in chains for condition in _in_every_law(chain, node.position)]
    elif run := cited_run(whole):
        conditions = _cited(run, node.position)
    elif (law := named_law(whole)) is not None:
        conditions = [_whole_law(law)]
    else:
        conditions = [KeywordMatch(field="identifier_values", values=(whole,))]  # a value as pasted
    return conditions[0] if len(conditions) == 1 else AnyOf(any=tuple(conditions))


def _in_every_law(chain: str, position: int) -> list[Constraint]:
    """"§ 573c" as every value "§ 573c …" (the prefix ends in a space: "§ 573" never reaches "§ 573c")."""
    sections = section_range(chain, position)
    prefix = KeywordPrefix(field="identifier_values", prefix=chain + " ")
    return [prefix, _in_sections(sections, ".+")] if sections else [prefix]


def _cited(run: tuple[Identifier, ...], position: int) -> list[Constraint]:
    """The run's values (one keyword condition), then what a value alone would miss: an act's
    articles, a range's sections."""
    values: list[str] = []
    conditions: list[Constraint] = []
    for identifier in run:
        if identifier.kind == "eu_reference" and identifier.section is None and identifier.law:
            conditions.append(_whole_law(identifier.law))
            continue
        values.append(identifier.normalized)
        if identifier.section and identifier.law and (sections := section_range(identifier.section, position)):
            conditions.append(_in_sections(sections, pattern_literal(identifier.law)))
    if values:
        conditions.insert(0, KeywordMatch(field="identifier_values", values=tuple(dict.fromkeys(values))))
    return conditions


def _whole_law(citation: str) -> KeywordPattern:
    """The act (or law) itself and every reference that ends in it: "DSGVO", "Art. 6 Abs. 1 DSGVO"."""
    return KeywordPattern(field="identifier_values", pattern=f"(.* )?{pattern_literal(citation)}")


def _in_sections(sections: str, law: str) -> KeywordPattern:
    """Each section's value in `law` (both patterns); its parts carry it as their ancestor."""
    return KeywordPattern(field="identifier_values", pattern=f"{sections} {law}")


def named_law(value: str) -> str | None:
    """The citation of the law or EU act `value` names alone ("DSGVO", "DS-GVO", "BGB"), else None."""
    table = law_table()
    law = table.by_abbr.get(value) or table.by_name.get(name_key(value.split()))
    return law.citation if law is not None else None


def normalized_identifiers(value: str) -> tuple[str, ...]:
    """The normal forms of the citation the value is ("VII ZR 123/19"; "§§ 573, 574 BGB" is
    "§ 573 BGB" and "§ 574 BGB", any of which a filter accepts), else the value as pasted."""
    return tuple(dict.fromkeys(identifier.normalized for identifier in cited_run(value))) or (" ".join(value.split()),)


_NO_FIELDS = FieldResolver(project_ids=lambda _: (), matter_ids=lambda _: (), ontology=Ontology([]))
