"""A boolean tree's set algebra over versions means what the tree says of each version (issue 39):
random trees of words, phrases and keyword conditions with AND, OR and NOT, over random versions
of a few chunks each, against the meaning written out per version. The index is played by the
chunks themselves here; tests/ki_core/search/test_query_constraint.py runs the real backends."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ki_core.search.constraint import AllOf, AnyOf, Constraint, KeywordMatch, TextMatch
from ki_core.search.document_sets import DocumentPlan, chunk_local, document_search
from ki_core.search.types import MultiSearchRequest, MultiSearchResult, ScopeFilter, SearchFilters

WORDS = ("miete", "pacht", "kundig", "frist")
PROJECTS = ("p1", "p2")
SCOPE = ScopeFilter(project_ids=frozenset(PROJECTS))

# A chunk: (its words, its version's project); a version: its chunks.
Chunk = tuple[frozenset[str], str]

leaves = st.one_of(
    st.sampled_from(WORDS).map(lambda w: TextMatch(text=w, tokens=((0, w),))),
    st.sampled_from(PROJECTS).map(lambda p: KeywordMatch(field="project_id", values=(p,))),
)
trees = st.recursive(
    leaves,
    lambda inner: st.one_of(
        # NOT x is AllOf(must_not=(x,)), as the query language compiles it.
        st.builds(lambda must, must_not: AllOf(must=tuple(must), must_not=tuple(must_not)),
                  st.lists(inner, max_size=3), st.lists(inner, max_size=2)).filter(lambda n: n.must or n.must_not),
        st.lists(inner, min_size=2, max_size=3).map(lambda children: AnyOf(any=tuple(children))),
    ),
    max_leaves=8,
)  # fmt: skip
versions = st.dictionaries(
    st.sampled_from([f"v{n}" for n in range(8)]),
    st.tuples(st.sampled_from(PROJECTS), st.lists(st.frozensets(st.sampled_from(WORDS)), min_size=1, max_size=3)),
    max_size=8,
)


def on_chunk(node: Constraint, words: frozenset[str], project: str) -> bool:
    if isinstance(node, TextMatch):
        return node.text in words
    if isinstance(node, KeywordMatch):
        return project in node.values
    if isinstance(node, AnyOf):
        return any(on_chunk(child, words, project) for child in node.any)
    assert isinstance(node, AllOf)
    return all(on_chunk(c, words, project) for c in node.must) and not any(
        on_chunk(c, words, project) for c in node.must_not
    )


def on_version(node: Constraint, chunks: list[frozenset[str]], project: str) -> bool:
    """The meaning: a leaf holds where some chunk of the version has it."""
    if isinstance(node, AnyOf):
        return any(on_version(child, chunks, project) for child in node.any)
    if isinstance(node, AllOf):
        return all(on_version(c, chunks, project) for c in node.must) and not any(
            on_version(c, chunks, project) for c in node.must_not
        )
    return any(on_chunk(node, words, project) for words in chunks)


@settings(max_examples=400, deadline=None)
@given(tree=trees, corpus=versions)
def test_the_algebra_gives_the_versions_the_tree_holds_for(tree: Constraint, corpus: dict) -> None:
    def version_sets(scope: ScopeFilter, filters: SearchFilters, conditions) -> list[dict[str, str]]:
        return [
            {v: f"doc-{v}" for v, (project, chunks) in corpus.items() if any(on_chunk(c, w, project) for w in chunks)}
            for c in conditions
        ]

    def legs(request: MultiSearchRequest) -> MultiSearchResult:
        found = None
        if request.collect_versions:  # the chunk-local shortcut: the versions of the tree read per chunk
            found = version_sets(request.scope, request.filters, [request.constraint])[0]
        return MultiSearchResult(legs={}, versions=found)

    request = MultiSearchRequest(query_text="", query_vector=None, scope=SCOPE, size=5, constraint=tree)
    result = document_search(version_sets, legs, request)
    expected = {v for v, (project, chunks) in corpus.items() if on_version(tree, chunks, project)}
    assert set(result.versions or {}) == expected


@given(tree=trees)
def test_a_chunk_local_tree_is_one_condition(tree: Constraint) -> None:
    plan = DocumentPlan.of(tree)
    assert (plan.conditions == (tree,)) == chunk_local(tree)
