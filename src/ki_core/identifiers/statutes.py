"""Statute references: "§§ 823 Abs. 2 BGB, 263 StGB" -> one identifier per norm, in German citation order.

Finds the heads (§, Art., and with a context section a bare "Absatz"), reads
the chains joined to each head, closes the group with its law and renders each
leaf. Articles of EU acts come out here too, as `eu_reference`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from .law_names import LawHit, law_after, law_before
from .laws import Law, law_table
from .model import Identifier
from .spans import at_word_start, skip_ws
from .statute_chains import ABS, BUCHST, LIST_SEP, NR, PART, SATZ, SEC, SEC_NUM, SUBSEC, Chain, Part, parse_chain

# Trigger regexes start with a literal or a character class so that `re` can skip ahead fast;
# the "not inside a word" condition is checked in Python (`at_word_start`), not by a lookbehind.
# Only a plain alternation of literals gives `re` that skip: a lookahead or a named group in
# front of the alternatives made it try every position (7x slower on decisions), so the head's
# word is the whole match and "§"/"Paragraph" versus "Art." is read from its first letter.
_STATUTE_HEAD = re.compile(r"(?:§§?|Paragra(?:ph|f)(?:en|s)?\b|Art(?:ikeln?s?|t?\.|icles?)?)(?=\s*\d)")
_REL_HEAD = re.compile(r"\b(?:Absatz(?:es)?|Absätzen?|Abs\.)(?=\s*\d)")
_GROUP_SEP = re.compile(
    r"\s*(?:,|;|und|oder|sowie|bzw\.|i\.\s?V\.\s?(?:m\.|mit)|iVm|in Verbindung mit)?\s*"
    r"(?:(?:die|der|des|den|dem|jeweils)\s+)?"
    r"(?:Anh(?:\.|ang)\s*(?:Nr\.\s*)?\d+[a-z]?\s*,\s*)?"  # "§ 3 Abs. 3 i.V. mit Anh. Nr. 13, § 5 Abs. 2 UWG"
    r"(?=§|Art|Paragra)"
)
# "SozR 4-2500 § 13 Nr 33", "Buchholz 406.11 § 9 BauGB Nr. 74", "OLGSt StVG § 25 Nr. 52", "BGHR StGB § 64
# Ablehnung 4": collections that file decisions under a law and section, not a norm
_REPORTER_BEFORE = re.compile(r"(?:(?:SozR|Buchholz|BVerwGE)\s*[\d.\-–]*|(?:BGHR|OLGSt)\s+[A-ZÄÖÜ][\w-]*)\s*\Z")


def scan_statutes(text: str, context_law: str | None, context_section: str | None) -> Iterator[Identifier]:
    context = law_table().by_abbr.get(context_law) if context_law else None
    if context_law and context is None:
        context = Law(abbr=context_law)
    resume = 0
    heads = [
        (m.start(), m)
        for m in _STATUTE_HEAD.finditer(text)
        if text[m.start()] == "§" or at_word_start(text, m.start())
    ]
    if context_section:
        heads += [(m.start(), m) for m in _REL_HEAD.finditer(text)]
        heads.sort(key=lambda h: h[0])
    for start, head in heads:
        if start < resume:
            continue
        if head.re is _REL_HEAD:
            groups = _parse_relative_group(text, head, context_section or "")
        else:
            groups = _parse_groups(text, head)
        if not groups:
            continue
        last_chains, last_hit = groups[-1]
        resume = max(last_chains[-1].end, last_hit.end if last_hit else 0)
        if _REPORTER_BEFORE.search(text, max(0, start - 24), start):
            continue
        for chains, law_hit in groups:
            yield from _group_identifiers(text, chains, law_hit, context)


_Group = tuple[list[Chain], LawHit | None]


def _parse_groups(text: str, head: re.Match[str]) -> list[_Group]:
    """Chains joined by ',', 'und', 'i.V.m.' ... up to the law that closes them.

    After a law, '§§ 823 Abs. 2 BGB, 263 StGB' goes on with the next number and its own law.
    """
    chains: list[Chain] = []
    chain = _parse_chain_at_head(text, head)
    while chain is not None:
        chains.append(chain)
        hit = law_after(text, chain.end)
        if hit is not None:
            return [(chains, hit), *_continue_after_law(text, chain, hit)]
        sep = _GROUP_SEP.match(text, chain.end)
        next_head = _STATUTE_HEAD.match(text, sep.end()) if sep else None
        chain = _parse_chain_at_head(text, next_head) if next_head else None
    if not chains:
        return []
    return [(chains, law_before(text, chains[0].start))]


def _continue_after_law(text: str, chain: Chain, hit: LawHit) -> list[_Group]:
    groups: list[_Group] = []
    while chain.plural and hit.law is not None:
        sep = LIST_SEP.match(text, hit.end)
        m = SEC_NUM.match(text, sep.end()) if sep else None
        if m is None:
            break
        value = m.group(1) + (m.group(2) or m.group(3) or "")
        head = Part(SEC, chain.leaves[0][0].label, value)
        chain = parse_chain(text, m.start(), m.end(), [head], chain.is_par, plural=True)
        next_hit = law_after(text, chain.end)
        if next_hit is None or next_hit.law is None:
            break
        hit = next_hit
        groups.append(([chain], hit))
    return groups


def _parse_relative_group(text: str, head: re.Match[str], context_section: str) -> list[_Group]:
    m = re.match(r"\s*(§|Art\.?)\s*(\d{1,4}[a-z]?)", context_section)
    if m is None:
        return []
    kind = "Art." if m.group(1).startswith("Art") else "§"
    chain = parse_chain(text, head.start(), head.start(), [Part(SEC, kind, m.group(2))], kind == "§", plural=False)
    if len(chain.leaves[0]) < 2:
        return []
    hit = law_after(text, chain.end)
    if hit is not None and hit.law is not None:
        return []  # "Absatz 2 des Vertrags über ...": not a part of the section being read
    return [([chain], hit)]


def _parse_chain_at_head(text: str, head: re.Match[str]) -> Chain | None:
    word = head.group()
    is_par = not word.startswith("A")
    plural = word in ("§§", "Artt.", "Paragraphen", "Paragrafen", "Artikeln", "Articles")
    pos = skip_ws(text, head.end())
    m = SEC_NUM.match(text, pos)
    if m is None:
        return None
    value = m.group(1) + (m.group(2) or m.group(3) or "")
    if not is_par and _looks_like_kind_of(text, head.start(), pos, m.end()):
        return None
    return parse_chain(text, head.start(), m.end(), [Part(SEC, "§" if is_par else "Art.", value)], is_par, plural)


def _looks_like_kind_of(text: str, head_start: int, num_start: int, num_end: int) -> bool:
    """'psychischer Art.\\n8\\n': the noun Art (kind) followed by a paragraph number on its own line."""
    return "\n" in text[head_start:num_start] and (num_end >= len(text) or text[num_end] == "\n")


def _group_identifiers(
    text: str, chains: list[Chain], hit: LawHit | None, context: Law | None
) -> Iterator[Identifier]:
    if hit is not None and hit.blocked:
        return
    law = hit.law if hit is not None and hit.law is not None else context
    if law is None:
        return
    for i, chain in enumerate(chains):
        start, end = chain.start, chain.end
        if hit is not None and i == 0 and hit.end <= chain.start:
            start = hit.start  # the law written first: "GG Art 80"
        if hit is not None and i == len(chains) - 1 and hit.start >= chain.end:
            end = hit.end  # the law closing the group belongs to its last citation
        for leaf in chain.leaves:
            yield _statute_identifier(text, leaf, law, start, end)


def _statute_identifier(text: str, leaf: list[Part], law: Law, start: int, end: int) -> Identifier:
    article = leaf[0].value if leaf[0].label == "Art." else None
    rendered = [_render_part(part, law, article) for part in leaf]
    values = {part.level: part.value for part in reversed(leaf)}
    section = " ".join(r for part, r in zip(leaf, rendered, strict=True) if part.level in (SEC, SUBSEC, PART))
    celex = None
    if law.is_eu:
        celex = law.celex
        if law.article_celex_prefix and article and article.isdigit():
            celex = f"{law.article_celex_prefix}{int(article):03d}"
    return Identifier(
        kind="eu_reference" if law.is_eu else "statute",
        normalized=" ".join([*rendered, law.citation]),
        as_written=text[start:end],
        start=start,
        end=end,
        law=law.citation,
        section=section,
        absatz=values.get(ABS),
        satz=values.get(SATZ),
        nummer=values.get(NR),
        buchstabe=values.get(BUCHST),
        celex=celex,
    )


def _render_part(part: Part, law: Law, article: str | None) -> str:
    if part.level == SEC:
        label = part.label
        if label == "§" and ("-" in part.value or part.suffix):
            label = "§§"
        return f"{label} {part.value}{part.suffix}"
    label = part.label
    if label == "(":
        label = "Nr." if article in law.point_articles else "Abs."
    elif label == "Buchst." and law.is_eu:
        label = "lit."
    return f"{label} {part.value}{part.suffix}"
