"""Query terms, token overlap and excerpts: the little text handling the query side does itself.

Ranking is the index's business (BM25 with the german analyzer); this module
only finds where a hit matched, for the excerpt of its citation, and picks
the words of a decision query (the database's text index matches them).
"""

from __future__ import annotations

import re

# A citation shows this much text around the match; enough for a sentence or two of a clause.
EXCERPT_CHARS = 320
# Context kept before the first match, so the excerpt starts mid-sentence rather than at the hit.
EXCERPT_LEAD_CHARS = 80
# A word form matches by its first letters when the full form does not occur ("Kündigung" finds
# "Kündigungsfrist"); shorter prefixes hit too much.
MIN_PREFIX_CHARS = 5

_WORD = re.compile(r"\w+", re.UNICODE)

# Function words of German (and the few English ones that turn up in firm documents): they carry
# no topic, and counting them would make every decision overlap with every question.
GERMAN_STOPWORDS = frozenset(
    """
    aber alle allem allen aller alles als also am an ander andere anderem anderen anderer anderes
    auch auf aus bei beim bin bis bist da damit dann das dass dasselbe dazu dein deine deinem deinen
    deiner dem den denn der derer des dessen dich die dies diese diesem diesen dieser dieses dir doch
    dort du durch ein eine einem einen einer eines einig einige einigem einigen einiger einiges
    einmal er es etwas euch euer eure eurem euren eurer für gegen gewesen hab habe haben hat hatte
    hatten hier hin hinter ich ihm ihn ihnen ihr ihre ihrem ihren ihrer ihres im in indem ins ist
    jede jedem jeden jeder jedes jene jenem jenen jener jenes jetzt kann kein keine keinem keinen
    keiner keines können könnte machen man manche manchem manchen mancher manches mein meine meinem
    meinen meiner meines mich mir mit muss musste nach nicht nichts noch nun nur ob oder ohne sehr
    sein seine seinem seinen seiner seines selbst sich sie sind so solche solchem solchen solcher
    solches soll sollte sondern sonst über um und uns unsere unserem unseren unser unseres unter
    viel vom von vor während war waren warst was weg weil weiter welche welchem welchen welcher
    welches wenn werde werden wie wieder will wir wird wirst wo wollen wollte würde würden zu zum
    zur zwar zwischen wurde wurden worden
    a an and are as at be by for from in is it of on or that the this to was were with
    """.split()
)


def words(text: str) -> list[str]:
    """Casefolded word tokens in order."""
    return [w.casefold() for w in _WORD.findall(text)]


def query_terms(text: str) -> frozenset[str]:
    """The words of a query that carry meaning: casefolded, stopwords and single letters dropped."""
    return frozenset(w for w in words(text) if w not in GERMAN_STOPWORDS and (len(w) > 1 or w.isdigit()))


def excerpt(text: str, query: str, max_chars: int = EXCERPT_CHARS) -> str:
    """At most max_chars of `text` around the first query term it contains (its start if none),
    cut at whitespace and marked with an ellipsis where cut."""
    flat = " ".join(text.split())
    if len(flat) <= max_chars:
        return flat
    position = first_match(flat, query_terms(query))
    start = max(0, position - EXCERPT_LEAD_CHARS) if position is not None else 0
    start = min(start, len(flat) - max_chars)
    if start > 0:
        space = flat.find(" ", start)
        start = space + 1 if 0 <= space < start + EXCERPT_LEAD_CHARS else start
    end = start + max_chars
    if end < len(flat):
        space = flat.rfind(" ", start, end)
        end = space if space > start + max_chars // 2 else end
    return ("…" if start > 0 else "") + flat[start:end] + ("…" if end < len(flat) else "")


def first_match(text: str, terms: frozenset[str]) -> int | None:
    """Earliest position of a term (or of its first MIN_PREFIX_CHARS letters) in the text."""
    lowered = text.lower()
    positions = []
    for term in terms:
        found = lowered.find(term)
        if found < 0 and len(term) > MIN_PREFIX_CHARS:
            found = lowered.find(term[:MIN_PREFIX_CHARS])
        if found >= 0:
            positions.append(found)
    return min(positions, default=None)
