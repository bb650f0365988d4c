"""The query language means the same on both backends (amendments.md 6, issue 39).

A fixture of 360 chunks (real BGB Absätze with added sentences, 90 documents of four chunks) is
searched with syntax queries compiled by the query side. Each query's set of versions is written
out by an oracle that reads the chunks the way the analyzer does, per version: a word or phrase
holds where some chunk of the version has it (a phrase inside one chunk), AND, OR and NOT combine
those (issue 39: a lawyer means documents, not chunks). Every leg's hits must lie in that set,
the lexical leg must reach every version of it, and the set and the document count must be
exact. The legs ask for five hits, far fewer than the set holds, so a constraint applied after
ranking would show; several queries' sets differ from what a per-chunk reading gives, so a
per-chunk constraint would show too.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import cache
from datetime import date

import pytest

from ki_core.identifiers import extract
from ki_core.ontology import ancestors
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
)
from ki_core.search.index import IndexOp, SearchIndex
from ki_core.search.text_index import analyzed_positions
from ki_core.search.types import IndexChunk, Leg, MultiSearchRequest
from ki_query.query_language.plan import plan_query
from tests.ki_core.search.backends import CONTRACT_BACKENDS, make_backend
from tests.ki_core.search.conftest import EVERYTHING, FIXTURE_CHUNKS, unit_vector

SENTENCES = (
    "Die fristlose Kündigung des Mietverhältnisses über Wohnraum ist unwirksam.",
    "Eine fristlose Kündigung wurde nicht ausgesprochen.",
    "Die Kündigung war fristlos und kam überraschend.",
    "Der Pachtvertrag endet mit Ablauf des Jahres.",
    "Schadensersatz wegen Pflichtverletzung nach Verzug des Schuldners.",
    "Müller/Schmidt haben die Haftung für Folgeschäden übernommen.",
    "",
)
TYPES = ("doc_type:decision.judgment", "doc_type:contract.lease.residential", "doc_type:memo", "doc_type:decision.order")
DATES = (date(2019, 5, 2), date(2020, 3, 12), None, date(2021, 7, 30), date(2020, 11, 1))
IDENTIFIERS = (
    ("§ 573c Abs. 1 BGB", "VII ZR 123/19"),
    ("§ 573c BGB",),
    ("§ 573 BGB", "VIII ZR 123/20"),
    ("ECLI:DE:BGH:2020:120320UVIIZR123.19.0",),
    (),
)
SIZE = 5


def constraint_chunks() -> list[IndexChunk]:
    chunks = []
    for i in range(360):
        base = FIXTURE_CHUNKS[i % len(FIXTURE_CHUNKS)]
        document = i // 4
        doc_type = TYPES[document % len(TYPES)]
        chunks.append(base.model_copy(update={
            "chunk_id": 10_000 + i,
            "document_id": f"doc-{document}",
            "document_version_id": f"ver-{document}-{i % 2}",
            "project_id": base.project_id,
            "text": f"{base.text} {SENTENCES[(i + i // len(FIXTURE_CHUNKS)) % len(SENTENCES)]}",
            "embedding": unit_vector(f"c{i}"),
            "doc_type": doc_type,
            "doc_type_ancestors": ancestors(doc_type),
            "doc_date": DATES[document % len(DATES)],
            "identifiers": IDENTIFIERS[document % len(IDENTIFIERS)],
        }))  # fmt: skip
    return chunks


def split_documents() -> list[IndexChunk]:
    """Documents whose words lie in different chunks: the per-chunk reading answers these wrongly."""
    texts = {
        "doc-excluded-elsewhere": ("Die Kündigung wurde dem Zaunkönig zugestellt.", "Sie war fristlos."),
        "doc-excluded-nowhere": ("Die Kündigung wurde dem Zaunkönig zugestellt.", "Sie kam überraschend."),
        "doc-and-split": ("Am Ufer brütet der Kormoran.", "Weiter draußen taucht ein Haubentaucher."),
    }
    base = FIXTURE_CHUNKS[0]
    return [
        base.model_copy(update={
            "chunk_id": 20_000 + 10 * n + ordinal, "document_id": document, "document_version_id": f"{document}-v1",
            "text": text, "embedding": unit_vector(text + document), "identifiers": (), "doc_date": None,
        })  # fmt: skip
        for n, (document, parts) in enumerate(texts.items())
        for ordinal, text in enumerate(parts)
    ]


CITING = {
    "doc-cites-573c-abs1": ("Die Kündigung hält die Frist nach § 573c Abs. 1 BGB ein.", "Der Mieter widerspricht."),
    "doc-cites-573c": ("Die Kündigung stützt sich auf § 573c BGB.",),
    "doc-cites-574": ("Der Mieter widerspricht der Kündigung nach § 574 BGB.",),
    "doc-cites-573-zpo": ("Gegen die Kündigung hilft die Erinnerung nach § 573 ZPO.",),
    "doc-cites-both": ("Die Kündigung ist an §§ 573, 574 BGB zu messen.",),
    "doc-cites-docket": ("Die Kündigung folgt dem Urteil des OLG Köln, Az. 5 U 12/21.",),
    "doc-cites-nothing": ("Die Kündigung nennt keine Vorschrift.",),
    # The law spelled out: cited, though the words "573c" and "BGB" never stand together.
    "doc-cites-573c-spelled-out": ("Die Kündigung hält § 573c Abs. 1 des Bürgerlichen Gesetzbuchs ein.",),
    "doc-cites-574-spelled-out": ("Der Mieter widerspricht der Kündigung nach § 574 des Bürgerlichen Gesetzbuchs.",),
    "doc-cites-dsgvo-article": ("Die Kündigung des Newsletters stützt sich auf Art. 6 Abs. 1 DSGVO.",),
    "doc-cites-dsgvo-act": ("Die Kündigung wahrt die Verordnung (EU) 2016/679.",),
    # Letter sections: § 573a lies inside §§ 573-575, § 575a after it.
    "doc-cites-573a": ("Die Kündigung der Einliegerwohnung folgt § 573a Abs. 1 BGB.",),
    "doc-cites-575": ("Die Kündigung des Zeitmietvertrags scheitert an § 575 Abs. 1 BGB.",),
    "doc-cites-575a": ("Die Kündigung mit gesetzlicher Frist regelt § 575a BGB.",),
}


def citing_documents() -> list[IndexChunk]:
    """Documents whose text cites norms and a file number, with the identifiers the extractor reads
    there: what an excluded citation or a several-section norm filter must tell apart."""
    base = FIXTURE_CHUNKS[1]
    return [
        base.model_copy(update={
            "chunk_id": 30_000 + 10 * n + ordinal, "document_id": document, "document_version_id": f"{document}-v1",
            "text": text, "embedding": unit_vector(text + document), "doc_date": None,
            "identifiers": tuple(dict.fromkeys(i.normalized for i in extract(text))),
        })  # fmt: skip
        for n, (document, parts) in enumerate(CITING.items())
        for ordinal, text in enumerate(parts)
    ]


CHUNKS = constraint_chunks() + split_documents() + citing_documents()
SCOPE = EVERYTHING.model_copy(update={"project_ids": frozenset(c.project_id for c in CHUNKS)})

QUERIES = [
    '"fristlose Kündigung"',
    '"fristlose Kündigung" -Wohnraum',
    "Kündig*",
    "Kündigung -fristlos",
    "Pachtvertrag OR Schadensersatz",
    "(Pachtvertrag OR Schadensersatz) Mietsache",
    "Kündigung NOT Wohnraum",
    "typ:Urteil",
    "typ:Urteil Kündigung",
    "typ:Vertrag OR typ:Beschluss",
    "datum:2020-01-01..2020-12-31",
    "datum:..2019-12-31 Mietsache",
    "datum:2021-06-01..",
    "az:VII ZR 123/19",
    "norm:§ 573c BGB",
    "norm:§ 573c Abs. 1 BGB",
    "gericht:BGH",
    '"Mietverhältnisses über Wohnraum"',
    "Vermiet* -Schadensersatz",
    "Mieter AND Vermieter",
    '"Müller/Schmidt"',
    "-(Wohnraum OR Pacht*) Kündigung",
    '"Kündigung des Mietverhältnisses"',
    'az:"VIII ZR 123/20" Mietsache',
    "typ:Urteil -datum:2020-01-01..2020-12-31",
    "Pachtvertrag OR -Kündigung",
    "Mietsache AND Pachtvertrag",
    "norm:§ 573c",
    "norm:§ 573c Abs. 1",
    "Kündigung -§ 573c BGB",
    "Kündigung NOT § 573c Abs. 1 BGB",
    'Kündigung -"§ 573c BGB"',
    "Kündigung -Az. 5 U 12/21",
    "Kündigung -§§ 573, 574 BGB",
    "Kündigung -§ 573",
    "norm:§§ 573, 574",
    "norm:§§ 573, 574 BGB",
    "Kündigung -(§ 573c BGB)",
    "Kündigung NOT (§ 573c BGB)",
    "Kündigung (§ 573c BGB OR § 574 BGB)",
    "Kündigung -Verordnung (EU) 2016/679",
    "Kündigung norm:DSGVO",
    "norm:§§ 573-575",
    "norm:§§ 573–575 BGB",
    "Kündigung -Az.5 U 12/21",
    "Kündigung -Az.5U12/21",
]


@cache
def tokens_of(text: str) -> tuple[tuple[int, str], ...]:
    return analyzed_positions(text)


def chunk_oracle(node: Constraint, chunk: IndexChunk) -> bool:
    """A leaf's meaning, written out plainly over one chunk (AND/OR/NOT too: the per-chunk reading)."""
    if isinstance(node, TextMatch):
        at = dict(tokens_of(chunk.text))
        first = node.tokens[0][0]
        return any(
            all(at.get(start + position - first) == token for position, token in node.tokens) for start in at
        )
    if isinstance(node, TextPrefix):
        return any(token.startswith(node.prefix) for _, token in tokens_of(chunk.text))
    if isinstance(node, KeywordMatch | KeywordPrefix | KeywordPattern):
        values = {
            "doc_type_ancestors": chunk.doc_type_ancestors, "project_id": (chunk.project_id,),
            "matter_id": (chunk.matter_id,), "identifier_values": chunk.identifier_values, "courts": chunk.courts,
        }[node.field]  # fmt: skip
        if isinstance(node, KeywordPrefix):
            return any(value.startswith(node.prefix) for value in values)
        if isinstance(node, KeywordPattern):
            return any(re.fullmatch(node.pattern, value) for value in values)
        return bool(set(values) & set(node.values))
    if isinstance(node, DateMatch):
        day = chunk.doc_date
        return day is not None and (node.start is None or day >= node.start) and (node.end is None or day <= node.end)
    if isinstance(node, AnyOf):
        return any(chunk_oracle(child, chunk) for child in node.any)
    assert isinstance(node, AllOf)
    return all(chunk_oracle(c, chunk) for c in node.must) and not any(chunk_oracle(c, chunk) for c in node.must_not)


def oracle(node: Constraint, chunks: list[IndexChunk]) -> bool:
    """The tree's meaning over one version's chunks: a leaf holds where some chunk has it."""
    if isinstance(node, AnyOf):
        return any(oracle(child, chunks) for child in node.any)
    if isinstance(node, AllOf):
        return all(oracle(c, chunks) for c in node.must) and not any(oracle(c, chunks) for c in node.must_not)
    return any(chunk_oracle(node, chunk) for chunk in chunks)


def versions_of(chunks: list[IndexChunk]) -> dict[str, list[IndexChunk]]:
    grouped: dict[str, list[IndexChunk]] = {}
    for chunk in chunks:
        grouped.setdefault(chunk.document_version_id, []).append(chunk)
    return grouped


def expected_versions(node: Constraint, chunks: list[IndexChunk] = CHUNKS) -> dict[str, str]:
    """version id -> document id of the versions the tree holds for."""
    return {
        version: parts[0].document_id for version, parts in versions_of(chunks).items() if oracle(node, parts)
    }


@pytest.fixture(scope="module", params=CONTRACT_BACKENDS)
def constrained_index(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SearchIndex]:
    chosen, cleanup = make_backend(request.param, tmp_path_factory.mktemp("constraint") / "index")
    try:
        index = chosen.open()
        index.ensure()
        index.bulk(IndexOp(chunk) for chunk in CHUNKS)
        index.refresh()
        yield index
    finally:
        chosen.close_all()
        cleanup()


def _request(query: str, size: int) -> MultiSearchRequest:
    plan = plan_query(query, None)
    assert plan.constraint is not None, query
    return MultiSearchRequest(
        query_text=plan.text, query_vector=unit_vector(query), scope=SCOPE, size=size,
        identifier_terms=plan.identifier_terms, constraint=plan.constraint,
    )  # fmt: skip


@pytest.mark.parametrize("query", QUERIES)
def test_every_leg_stays_inside_the_set_and_the_count_is_exact(constrained_index: SearchIndex, query: str) -> None:
    request = _request(query, SIZE)
    assert request.constraint is not None
    expected = expected_versions(request.constraint)
    assert expected, f"{query!r} matches nothing in the fixture: the test would show nothing"
    result = constrained_index.multi_search(request)
    for leg, hits in result.legs.items():
        assert {hit.document_version_id for hit in hits} <= set(expected), (query, leg)
        assert len(hits) == min(SIZE, len(expected)) or leg is Leg.IDENTIFIER, (query, leg)
    assert result.versions == expected
    assert result.document_count == len(set(expected.values()))


@pytest.mark.parametrize("query", QUERIES)
def test_the_lexical_leg_reaches_every_version_of_the_set(constrained_index: SearchIndex, query: str) -> None:
    request = _request(query, 2500)
    assert request.constraint is not None
    lexical = constrained_index.multi_search(request).hits(Leg.LEXICAL)
    assert {hit.document_version_id for hit in lexical} == set(expected_versions(request.constraint))


def test_the_fixture_is_larger_than_the_legs_depth() -> None:
    """Most queries' sets hold more chunks than a leg returns, so a filter after ranking would show."""
    larger = [
        q for q in QUERIES
        if sum(len(versions_of(CHUNKS)[v]) for v in expected_versions(_request(q, SIZE).constraint)) > SIZE  # type: ignore[arg-type]
    ]  # fmt: skip
    assert len(larger) >= 20


def test_several_queries_mean_other_documents_than_a_per_chunk_reading() -> None:
    """Exclusions and ANDs split over chunks: the per-chunk reading would answer these differently."""
    differing = []
    for query in QUERIES:
        constraint = _request(query, SIZE).constraint
        per_chunk = {c.document_version_id for c in CHUNKS if chunk_oracle(constraint, c)}  # type: ignore[arg-type]
        if per_chunk != set(expected_versions(constraint)):  # type: ignore[arg-type]
            differing.append(query)
    assert len(differing) >= 5, differing


@pytest.mark.parametrize(
    ("query", "shown", "hidden"),
    [
        ("Kündigung Zaunkönig -fristlos", {"doc-excluded-nowhere"}, {"doc-excluded-elsewhere"}),
        ("Kormoran AND Haubentaucher", {"doc-and-split"}, set()),
        ('"Ufer brütet" Haubentaucher', {"doc-and-split"}, set()),
    ],
)
def test_a_document_is_judged_whole(constrained_index: SearchIndex, query: str, shown: set, hidden: set) -> None:
    """An excluded word in another chunk hides the document; ANDed words may stand in two chunks."""
    result = constrained_index.multi_search(_request(query, SIZE))
    found = set((result.versions or {}).values())
    assert found == shown and not found & hidden
    assert {hit.document_id for leg in result.legs.values() for hit in leg} == shown
    per_chunk = {c.document_id for c in CHUNKS if chunk_oracle(_request(query, SIZE).constraint, c)}  # type: ignore[arg-type]
    assert per_chunk != shown  # the per-chunk reading would have answered otherwise


def _words(text: str) -> TextMatch:
    return TextMatch(text=text, tokens=tokens_of(text))


def _cites(*values: str) -> KeywordMatch:
    return KeywordMatch(field="identifier_values", values=values)


def _cites_in_any_law(*sections: str) -> AnyOf:
    return AnyOf(any=tuple(KeywordPrefix(field="identifier_values", prefix=f"{section} ") for section in sections))


def _cites_act(act: str) -> KeywordPattern:
    """The act itself or any article of it, with or without its parts."""
    return KeywordPattern(field="identifier_values", pattern=rf"{act}|Art\. [0-9]+[a-z]?( .*)? {act}")


# What a lawyer means by each citation query, written out by hand (not by the query compiler): the
# old parser excluded only the "§" and required "573c" and "BGB" as words, and `norm:§§ 573, 574`
# matched nothing, so each of these sets differs from what the old code returned.
MEANINGS: dict[str, Constraint] = {
    "Kündigung -§ 573c BGB": AllOf(must=(_words("Kündigung"),), must_not=(_cites("§ 573c BGB"),)),
    "Kündigung NOT § 573c Abs. 1 BGB": AllOf(must=(_words("Kündigung"),), must_not=(_cites("§ 573c Abs. 1 BGB"),)),
    "Kündigung -Az. 5 U 12/21": AllOf(must=(_words("Kündigung"),), must_not=(_cites("5 U 12/21"),)),
    "Kündigung -§§ 573, 574 BGB": AllOf(must=(_words("Kündigung"),), must_not=(_cites("§ 573 BGB", "§ 574 BGB"),)),
    "Kündigung -§ 573": AllOf(must=(_words("Kündigung"),), must_not=(_cites_in_any_law("§ 573"),)),
    "norm:§§ 573, 574": _cites_in_any_law("§ 573", "§ 574"),
    "norm:§§ 573, 574 BGB": _cites("§ 573 BGB", "§ 574 BGB"),
    # A citation in parentheses is the citation, as after a minus (the old parser read its words).
    "Kündigung -(§ 573c BGB)": AllOf(must=(_words("Kündigung"),), must_not=(_cites("§ 573c BGB"),)),
    "Kündigung NOT (§ 573c BGB)": AllOf(must=(_words("Kündigung"),), must_not=(_cites("§ 573c BGB"),)),
    "Kündigung (§ 573c BGB OR § 574 BGB)": AllOf(
        must=(_words("Kündigung"), AnyOf(any=(_cites("§ 573c BGB"), _cites("§ 574 BGB"))))
    ),
    # An EU act is the act and each of its articles (the Absätze of the end-to-end test cite more of them).
    "Kündigung -Verordnung (EU) 2016/679": AllOf(must=(_words("Kündigung"),), must_not=(_cites_act("DSGVO"),)),
    "Kündigung norm:DSGVO": AllOf(must=(_words("Kündigung"), _cites_act("DSGVO"))),
    # A range is every section from its first to its last, letter sections between them included.
    "norm:§§ 573-575": _cites_in_any_law("§ 573", "§ 573a", "§ 573c", "§ 574", "§ 575"),
    "norm:§§ 573–575 BGB": _cites("§ 573 BGB", "§ 573a BGB", "§ 573c BGB", "§ 574 BGB", "§ 575 BGB"),
    # A file number right after its label, or without any spaces.
    "Kündigung -Az.5 U 12/21": AllOf(must=(_words("Kündigung"),), must_not=(_cites("5 U 12/21"),)),
    "Kündigung -Az.5U12/21": AllOf(must=(_words("Kündigung"),), must_not=(_cites("5 U 12/21"),)),
}


@pytest.mark.parametrize("query", MEANINGS)
def test_a_citation_in_a_query_means_the_documents_citing_it(constrained_index: SearchIndex, query: str) -> None:
    """An excluded citation removes every document citing it (a part of it included); several
    sections in one norm filter mean any of them."""
    meant = expected_versions(MEANINGS[query])
    assert meant and set(meant) != set(versions_of(CHUNKS)), query
    assert constrained_index.multi_search(_request(query, SIZE)).versions == meant


def test_an_excluded_citation_reaches_its_parts_and_other_laws_where_a_quoted_one_reads_text(
    constrained_index: SearchIndex,
) -> None:
    """`-§ 573c BGB` also removes the document citing § 573c Abs. 1 BGB; `-"§ 573c BGB"` removes only
    text with those words in a row; `-§ 573` removes § 573 of every law but never § 573c."""
    def documents(query: str) -> set[str]:
        return set((constrained_index.multi_search(_request(query, SIZE)).versions or {}).values())

    cited, quoted = documents("Kündigung -§ 573c BGB"), documents('Kündigung -"§ 573c BGB"')
    lawless = documents("Kündigung -§ 573")
    assert "doc-cites-573c-abs1" not in cited and "doc-cites-573c" not in cited and "doc-cites-nothing" in cited
    assert "doc-cites-573c-abs1" in quoted and "doc-cites-573c" not in quoted
    assert not {"doc-cites-573-zpo", "doc-cites-both"} & lawless and {"doc-cites-573c", "doc-cites-574"} <= lawless
