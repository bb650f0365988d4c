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

from ki_core.identifiers import extract
from ki_core.identifiers.whole_values import normalized_court
from ki_core.models.ontology import OntologyKind
from ki_core.ontology import Ontology
from ki_core.search.constraint import (
    AllOf,
    AnyOf,
    Constraint,
    DateMatch,
    KeywordMatch,
    KeywordPrefix,
    TextMatch,
    TextPrefix,
)
from ki_core.search.text_index import analyzed_positions, german_words
from ki_query.query_language.parser import HINT, identifier_run, lawless_references
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
    if node.name == "statute" and (chains := lawless_references(node.value)):
        # `norm:§§ 573, 574`: any of the sections, each in every law.
        prefixes = [KeywordPrefix(field="identifier_values", prefix=chain + " ") for chain in chains]
        return prefixes[0] if len(prefixes) == 1 else AnyOf(any=tuple(prefixes))
    return KeywordMatch(field="identifier_values", values=normalized_identifiers(node.value))


def normalized_identifiers(value: str) -> tuple[str, ...]:
    """The normal forms of the citation the value is ("VII ZR 123/19"; "§§ 573, 574 BGB" is
    "§ 573 BGB" and "§ 574 BGB", any of which a filter accepts), else the value as pasted."""
    whole = " ".join(value.split())
    run = identifier_run(whole, extract(whole), 0)
    return tuple(dict.fromkeys(identifier.normalized for identifier in run)) or (whole,)


_NO_FIELDS = FieldResolver(project_ids=lambda _: (), matter_ids=lambda _: (), ontology=Ontology([]))
