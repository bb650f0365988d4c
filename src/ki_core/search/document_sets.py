"""Boolean queries hold per document version, not per chunk (issue 39).

A lawyer's `Kündigung -fristlos` means documents: one that says "fristlos" anywhere in the
version shown is never a hit, even through a chunk of it that lacks the word, and `Mieter AND
Vermieter` holds for a version whose chunks have each word somewhere (a phrase still has to
stand in one chunk). Keyword and date conditions hold for every chunk of a version alike
(type, project, matter, identifiers, court and date are the version's), so only text
conditions make the difference.

The tree is cut into conditions a chunk can decide on its own (a maximal subtree where "some
chunk satisfies it" equals "the version satisfies it"); the index lists the versions in scope
each condition holds for (`SearchIndex.version_sets`, one round trip), and the tree's AND, OR and
NOT become set algebra over those lists here, for both backends alike. A subtree in NOT whose
complement is asked for alone (`A OR -B`) needs the versions in scope as the universe; it is
listed in the same round trip. Every set is computed inside the compiled access scope, so the
eligible set can only shrink it (fail closed).

The legs then rank chunks of the eligible versions that hold one of the query's positive
conditions: a hit shows a passage with something asked for, never a chunk chosen only
because its version qualified. A tree that is chunk-local as a whole (`"fristlose Kündigung"
typ:Urteil`, `Miete OR Pacht`) needs no second step: its legs filter on the tree itself and
list its versions in the same round trip (`MultiSearchRequest.collect_versions`).

Between the two round trips of the other trees an index writer may add a version: when the legs
got the list of versions to leave out (the shorter form), such a version can show in this one
search without its exclusions checked; the legs still filter on the compiled scope, so it is never
one the caller may not see, and SQL re-verifies every hit.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol, TypeVar

from ki_core.search.constraint import AllOf, AnyOf, Constraint, KeywordMatch, TextMatch, TextPrefix
from ki_core.search.types import MultiSearchRequest, MultiSearchResult, ScopeFilter, SearchFilters

S = TypeVar("S", bound="VersionSet")
EVERYTHING: Constraint = AllOf()


class VersionSet(Protocol):
    """What the algebra needs of a set of versions (here _VersionMap; a frozenset would do)."""

    def __and__(self: S, other: S) -> S: ...
    def __or__(self: S, other: S) -> S: ...
    def __sub__(self: S, other: S) -> S: ...


# The index's two reads: the versions in scope each condition holds for, and the legs of one request.
VersionSets = Callable[[ScopeFilter, SearchFilters, Sequence[Constraint]], list[dict[str, str]]]
LegSearch = Callable[[MultiSearchRequest], MultiSearchResult]


def has_text(node: Constraint) -> bool:
    if isinstance(node, TextMatch | TextPrefix):
        return True
    if isinstance(node, AllOf):
        return any(has_text(child) for child in (*node.must, *node.must_not))
    if isinstance(node, AnyOf):
        return any(has_text(child) for child in node.any)
    return False


def chunk_local(node: Constraint) -> bool:
    """Whether "some chunk of the version satisfies `node`" is "the version satisfies `node`": OR
    distributes over "some chunk", AND only while at most one child varies between chunks, and NOT
    only over what is the same on every chunk."""
    if isinstance(node, AnyOf):
        return all(chunk_local(child) for child in node.any)
    if isinstance(node, AllOf):
        varying = [child for child in node.must if has_text(child)]
        return (
            len(varying) <= 1
            and all(chunk_local(child) for child in varying)
            and not any(has_text(child) for child in node.must_not)
        )
    return True


@dataclass(frozen=True, slots=True)
class DocumentPlan:
    """A boolean tree cut into chunk-local conditions, and how their version sets combine."""

    tree: Constraint
    conditions: tuple[Constraint, ...]
    # Conditions in a positive place (not under NOT): a hit chunk holds one of them.
    positive: tuple[Constraint, ...]

    @classmethod
    def of(cls, tree: Constraint) -> DocumentPlan:
        conditions: dict[Constraint, None] = {}
        positive: dict[Constraint, None] = {}
        _collect(tree, conditions, positive, negated=False)
        if _complemented(tree):
            conditions[EVERYTHING] = None
        return cls(tree, tuple(conditions), tuple(positive))

    @property
    def is_chunk_local(self) -> bool:
        return chunk_local(self.tree)

    def evaluate(self, sets: Mapping[Constraint, S]) -> S:
        """The versions the whole tree holds for, from each condition's versions."""
        found, complemented = _evaluate(self.tree, sets)
        return sets[EVERYTHING] - found if complemented else found

    def legs_constraint(self, eligible: _VersionMap, sets: Mapping[Constraint, _VersionMap]) -> Constraint:
        """What every leg filters on: a chunk of an eligible version holding a positive condition.

        The versions go to the index as a term list, the shorter of two equal ways: the eligible
        versions, or those holding a positive condition that are not eligible (`Kündigung -fristlos`
        on a large set lists the few versions with both words, not the thousands with the first)."""
        if not self.positive or not _holds_a_positive(self.tree):
            # `Pacht OR -Kündigung`: a version may qualify through its exclusion alone.
            return _versions(eligible)
        held = self.positive[0] if len(self.positive) == 1 else AnyOf(any=self.positive)
        removed = _fold([sets[c] for c in self.positive], lambda a, b: a | b) - eligible
        if len(removed.versions) < len(eligible.versions):
            return AllOf(must=(held,), must_not=(_versions(removed),)) if removed.versions else held
        return AllOf(must=(held, _versions(eligible)))


def _versions(found: _VersionMap) -> KeywordMatch:
    return KeywordMatch(field="document_version_id", values=tuple(sorted(found.versions)))


def _collect(node: Constraint, conditions: dict, positive: dict, *, negated: bool) -> None:
    if chunk_local(node):
        conditions[node] = None
        if not negated:
            positive[node] = None
        return
    if isinstance(node, AnyOf):
        for child in node.any:
            _collect(child, conditions, positive, negated=negated)
        return
    assert isinstance(node, AllOf)
    for child in node.must:
        _collect(child, conditions, positive, negated=negated)
    for child in node.must_not:
        _collect(child, conditions, positive, negated=not negated)


def _holds_a_positive(node: Constraint) -> bool:
    """Whether every version the tree holds for satisfies one of its positive conditions."""
    if chunk_local(node):
        return True
    if isinstance(node, AnyOf):
        return all(_holds_a_positive(child) for child in node.any)
    assert isinstance(node, AllOf)
    return any(_holds_a_positive(child) for child in node.must)


def _complemented(node: Constraint) -> bool:
    """Whether the tree's set is "everything but ..." (then the versions in scope are needed)."""
    if chunk_local(node):
        return False
    if isinstance(node, AnyOf):
        return any(_complemented(child) for child in node.any)
    assert isinstance(node, AllOf)
    return all(_complemented(child) for child in node.must) and all(
        not _complemented(child) for child in node.must_not
    )


def _evaluate(node: Constraint, sets: Mapping[Constraint, S]) -> tuple[S, bool]:
    """(set, complemented): a complemented pair means every version in scope but the set, so NOT
    needs no universe until the very end (`Kündigung -fristlos` is a difference of two lists)."""
    if chunk_local(node):
        return sets[node], False
    if isinstance(node, AnyOf):
        return _union([_evaluate(child, sets) for child in node.any])
    assert isinstance(node, AllOf)
    parts = [_evaluate(child, sets) for child in node.must]
    parts += [(found, not complemented) for found, complemented in (_evaluate(c, sets) for c in node.must_not)]
    return _intersection(parts)


def _intersection(parts: list[tuple[S, bool]]) -> tuple[S, bool]:
    plain = [found for found, complemented in parts if not complemented]
    excluded = [found for found, complemented in parts if complemented]
    if not plain:
        return _fold(excluded, lambda a, b: a | b), True
    found = _fold(plain, lambda a, b: a & b)
    for other in excluded:
        found = found - other
    return found, False


def _union(parts: list[tuple[S, bool]]) -> tuple[S, bool]:
    plain = [found for found, complemented in parts if not complemented]
    excluded = [found for found, complemented in parts if complemented]
    if not excluded:
        return _fold(plain, lambda a, b: a | b), False
    found = _fold(excluded, lambda a, b: a & b)
    for other in plain:
        found = found - other
    return found, True


def _fold(items: list[S], combine: Callable[[S, S], S]) -> S:
    result = items[0]
    for item in items[1:]:
        result = combine(result, item)
    return result


def document_search(version_sets: VersionSets, legs: LegSearch, request: MultiSearchRequest) -> MultiSearchResult:
    """Both backends' multi_search: a ranked request runs its legs as they are; a boolean one over the
    versions its tree holds for, and `versions` on the result is that whole set (version id ->
    document id), for exact counts, facets and date order beyond the legs' depth."""
    if request.constraint is None:
        return legs(request)
    plan = DocumentPlan.of(request.constraint)
    if plan.is_chunk_local:  # the legs' own filter is the set: its versions come with them, one round trip
        result = legs(request.model_copy(update={"collect_versions": True}))
        return result if result.versions is not None else replace(result, versions={})
    listed = version_sets(request.scope, request.filters, plan.conditions)
    sets = {condition: _VersionMap(found) for condition, found in zip(plan.conditions, listed, strict=True)}
    eligible = plan.evaluate(sets)
    request = request.model_copy(update={"constraint": plan.legs_constraint(eligible, sets)})
    return replace(legs(request), versions=eligible.versions)


class _VersionMap:
    """version id -> document id, with the set operations on its keys."""

    __slots__ = ("versions",)

    def __init__(self, versions: dict[str, str]) -> None:
        self.versions = versions

    def __and__(self, other: _VersionMap) -> _VersionMap:
        small, large = sorted((self.versions, other.versions), key=len)
        return _VersionMap({v: d for v, d in small.items() if v in large})

    def __or__(self, other: _VersionMap) -> _VersionMap:
        return _VersionMap({**self.versions, **other.versions})

    def __sub__(self, other: _VersionMap) -> _VersionMap:
        return _VersionMap({v: d for v, d in self.versions.items() if v not in other.versions})
