"""Parse the search box's text once into the typed tree of `syntax` (issue 39).

lark with the grammar file `query.lark`, not luqum: luqum reads all of Lucene, so `?`, `~`,
`^`, `[ ]`, `{ }`, `/…/`, `&&`, `||` and every `word:` would be operators that a German
question ("Wann verjährt der Anspruch?"), a citation ("Abs. 2 [neu]") or "Haftung:" would
trip over, and each would have to be escaped and checked again. The grammar names only what
this language has; everything else is a word.

Field values: a quoted phrase, or the text up to the next keyword, field, phrase or
parenthesis, cut here: `az:`/`norm:` take the citation ki_core.identifiers finds at the
value's start ("§§ 573, 574 BGB", or identifiers joined by commas; the rest is text; a file
number without its spaces, "5U12/21", with them put back), `datum:` one range, the other fields
one word. A citation that is an operand of its own -- right after `-` or NOT, or inside
parentheses after the opening one, OR or AND -- is read as the field it stands for (`-§ 573c
BGB` as `-norm:§ 573c BGB`, `-(§ 573c BGB)` alike), so the operator takes the whole citation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date
from functools import cache, lru_cache
from importlib.resources import files

from lark import Lark, Token, Transformer, v_args
from lark.exceptions import UnexpectedInput, VisitError

from ki_core.identifiers import Identifier, court_table, extract
from ki_query.query_language.syntax import (
    FIELD_NAMES,
    GERMAN_FIELD,
    All,
    Any,
    DateSpan,
    Field,
    Node,
    Not,
    ParsedQuery,
    Phrase,
    QuerySyntaxError,
    Wildcard,
    Word,
)

HINT = 'Hinweis: "genaue Phrase", -ausschließen, OR, (Klammern), Kündig*, typ:Urteil, datum:2020-01-01..2021-12-31'
_WORD_CHAR = re.compile(r"[\w§]")
_DATE_RANGE = re.compile(r"^(\d{4}-\d{2}-\d{2})?\.\.(\d{4}-\d{2}-\d{2})?$|^(\d{4}-\d{2}-\d{2})$")


@cache
def _parser() -> Lark:
    grammar = files("ki_query.query_language").joinpath("query.lark").read_text(encoding="utf-8")
    return Lark(grammar, parser="lalr", lexer="contextual", propagate_positions=True, maybe_placeholders=False)


def parse_query(text: str) -> ParsedQuery:
    """The tree of `text`; QuerySyntaxError (with position and a German message) when it cannot be read."""
    if not text.strip():
        return ParsedQuery(text=text, tree=None, plain=True)
    _check_balanced(text)
    masked, citations = protected_identifiers(text)
    try:
        tree = _ToNodes(text, citations).transform(_parser().parse(masked))
    except VisitError as exc:
        if isinstance(exc.orig_exc, QuerySyntaxError):
            raise exc.orig_exc from None
        raise
    except UnexpectedInput as exc:
        raise _unexpected(text, exc) from None
    _check_not_only_exclusions(tree)
    _check_ranges(tree)
    return ParsedQuery(text=text, tree=tree, plain=_is_plain(tree))


# What an identifier's characters become for the grammar: a letter no operator uses (Unicode private use).
_MASK = "\ue000"


def protected_identifiers(text: str) -> tuple[str, dict[int, Field]]:
    """`text` with every identifier ki_core.identifiers finds masked for the grammar, same length and
    same spaces: an ECLI's colons make no field, "Verordnung (EU) 2016/679" no group, "C-123/19" or
    "2 OR 12/19" no operator. The parse reads each token's text back from the query at its position,
    so the identifier stays the words it was. A span's parentheses and quotes are masked only when
    they pair inside it (an unpaired one belongs to the user's grouping).

    A citation that is an operand of its own (`-§ 573c BGB`, `NOT Az. 5 U 12/21`, `-(§ 573c BGB)`,
    `(§ 573c BGB OR § 574 BGB)`; `_citation_operands`) is masked with its spaces, so the grammar
    reads it as one word, and returned by where it starts as the field it stands for: the exclusion
    or the group applies to the whole citation, not to its first token ("§")."""
    masked = list(text)
    found = extract(text)
    for identifier in found:
        keep = _unpaired(text[identifier.start : identifier.end])
        for at in range(identifier.start, identifier.end):
            if not masked[at].isspace() and masked[at] not in keep:
                masked[at] = _MASK
    operands = _citation_operands(text, "".join(masked), found)
    for start, field in operands.items():
        masked[start : start + field.length] = _MASK * field.length
    return "".join(masked), {start: field.node for start, field in operands.items()}


def _unpaired(span: str) -> set[str]:
    """The parentheses and quotes of `span` that do not pair inside it."""
    return {c for c in '()"' if span.count("(") != span.count(")") or span.count('"') % 2} & set(span)


# What makes a citation an operand of its own: an exclusion (`-`, NOT) right before it, or, inside
# parentheses, the group's opening or an OR/AND (`(§ 573c BGB OR § 574 BGB)`); a file-number label
# may stand between. Elsewhere a citation stays words: a query without operators is plain text, and
# `Kündigung § 573c BGB` keeps reading "573c" and "BGB" as the words they are.
_OPERAND_BEFORE = re.compile(
    r"(?:(?P<exclusion>(?:^|[\s(])(?:-|NOT\s+))|\(\s*|\s(?P<keyword>OR|AND)\s+)"
    r"(?P<label>(?:Az|AZ|Aktenzeichen)\.?:?\s*)?$"  # "Az.5 U 12/21": the extractor reads it after the full stop
)
# Identifiers joined by commas are one citation: "§ 573 Abs. 1, § 574 BGB", "VII ZR 1/19, VII ZR 2/19".
_JOINED = re.compile(r"\s*,\s*")


@dataclass(frozen=True, slots=True)
class _CitationOperand:
    node: Field
    length: int


def _citation_operands(text: str, masked: str, found: list[Identifier]) -> dict[int, _CitationOperand]:
    """Per masked start (the label's, else the citation's): the field of each citation that is an
    operand of its own (_OPERAND_BEFORE). A run whose parentheses or quotes do not pair stays words.
    `masked` has the identifiers' own parentheses masked, so only the user's grouping counts."""
    operands: dict[int, _CitationOperand] = {}
    for start in sorted({identifier.start for identifier in found}):
        before = _operand_before(text, masked, start)
        if before is None:
            continue
        run = identifier_run(text, found, start)
        end = max(identifier.end for identifier in run)
        if _unpaired(text[start:end]):
            continue
        masked_from = before.start("label") if before.group("label") else start
        name = "statute" if all(i.kind in ("statute", "eu_reference") for i in run) else "docket"
        field = Field(name=name, value=text[start:end], position=masked_from)
        operands[masked_from] = _CitationOperand(field, end - masked_from)
    starts = {identifier.start for identifier in found}
    return operands | _lawless_operands(text, masked, starts) | _unspaced_dockets(text, masked, starts)


def _operand_before(text: str, masked: str, start: int) -> re.Match[str] | None:
    """The exclusion or group opening right before `start`; an OR/AND counts only inside parentheses."""
    before = _OPERAND_BEFORE.search(text, 0, start)
    if before is None or (before.group("keyword") and _depth(masked, before.start()) == 0):
        return None
    return before


def _depth(masked: str, end: int) -> int:
    """How many of the user's parentheses are open before `end` (quoted ones are text)."""
    depth, quoted = 0, False
    for char in masked[:end]:
        quoted = quoted != (char == '"')
        if not quoted:
            depth += (char == "(") - (char == ")")
    return depth


# How far a reference without a law may run ("§ 573c Abs. 1 Satz 2 Nr. 3" is eight words).
_LAWLESS_WORDS = 10
# Where a reference without a law must end at the latest: a parenthesis, a quote or a keyword.
_OPERAND_WINDOW = re.compile(r'(?:(?!\s(?:OR|AND|NOT)(?=[\s()"]|$))[^()"])*')


def _lawless_operands(text: str, masked: str, identifier_starts: set[int]) -> dict[int, _CitationOperand]:
    """`-§ 573c`, `(§§ 573, 574 OR …)`: the extractor knows no reference without a law; the same cut as
    `norm:` values finds where one ends, and it is read like `norm:§ 573c`."""
    operands: dict[int, _CitationOperand] = {}
    for reference in re.finditer(r"(?<![\w§])(?=§|Art)", text):
        start = reference.start()
        if start in identifier_starts or _operand_before(text, masked, start) is None:
            continue
        window = _OPERAND_WINDOW.match(text, start).group()  # type: ignore[union-attr]
        head, _ = _lawless_cut(" ".join(window.split(" ")[:_LAWLESS_WORDS]).rstrip())
        if lawless_references(head):
            operands[start] = _CitationOperand(Field(name="statute", value=head, position=start), len(head))
    return operands


# A file number without the spaces the extractor needs: after its label ("Az.5 U 12/21") or written
# together ("5U12/21"): chamber, register, number/year.
_DOCKET_PARTS = (
    r"(?P<chamber>\d{1,4}[a-z]?|[IVX]{1,5})?\s*(?P<register>[A-ZÄÖÜ][A-Za-zÄÖÜäöü]{0,5})\s*"
    r"(?P<number>\d{1,6}/\d{2})(?![\d/])"
)
_UNSPACED_DOCKET = re.compile(_DOCKET_PARTS)
_LABELLED_DOCKET = re.compile(r"(?P<label>Az\.?:?|AZ:?|Aktenzeichen:?)\s*" + _DOCKET_PARTS)


def _unspaced_dockets(text: str, masked: str, identifier_starts: set[int]) -> dict[int, _CitationOperand]:
    """`-Az.5U12/21`: a labelled file number the extractor cannot read as written, read with its spaces
    put back ("5 U 12/21"; spaced_case_number)."""
    operands: dict[int, _CitationOperand] = {}
    for docket in _LABELLED_DOCKET.finditer(text):
        start = docket.start()
        if any(docket.end("label") <= at < docket.end() for at in identifier_starts):
            continue  # "Az. 5 U 12/21": the extractor read it, _citation_operands has it
        if _operand_before(text, masked, start) is not None and (spaced := spaced_case_number(docket)):
            operands[start] = _CitationOperand(Field(name="docket", value=spaced, position=start), docket.end() - start)
    return operands


def spaced_case_number(docket: re.Match[str]) -> str | None:
    """The case number a docket match spells, with its spaces, when the extractor reads that as one
    case number (the court table then vouches for the register, as for any file number)."""
    spaced = " ".join(part for part in docket.group("chamber", "register", "number") if part)
    found = extract(spaced)
    whole = len(found) == 1 and found[0].kind == "case_number" and (found[0].start, found[0].end) == (0, len(spaced))
    return found[0].normalized if whole else None


def identifier_run(text: str, found: list[Identifier], start: int) -> list[Identifier]:
    """The identifiers starting at `start` ("§§ 573, 574 BGB" is two) and those joined to them by
    commas: one citation, which a filter or an exclusion reads as any of its identifiers."""
    run = [identifier for identifier in found if identifier.start == start]
    while run:
        joined = _JOINED.match(text, max(identifier.end for identifier in run))
        following = [identifier for identifier in found if joined is not None and identifier.start == joined.end()]
        if not following:
            return run
        run += following
    return run


@lru_cache(maxsize=4096)  # the parse's checks, the compiler and the identifier leg ask about the same value
def cited_run(value: str) -> tuple[Identifier, ...]:
    """The citation a field value starts with (identifier_run at 0), spaces collapsed; () for none."""
    whole = " ".join(value.split())
    return tuple(identifier_run(whole, extract(whole), 0))


def _is_plain(tree: Node) -> bool:
    """Only words, joined by the implicit AND: today's ranked query (`Kündigung fristlos`)."""
    if isinstance(tree, Word):
        return True
    return isinstance(tree, All) and tree.position == -1 and all(isinstance(c, Word) for c in tree.children)


def _check_balanced(text: str) -> None:
    """Quotes and parentheses are checked before the grammar so the message names the opening one."""
    quote: int | None = None
    opened: list[int] = []
    for position, char in enumerate(text):
        if char == '"':
            quote = position if quote is None else None
        elif quote is None and char == "(":
            opened.append(position)
        elif quote is None and char == ")":
            if not opened:
                raise QuerySyntaxError("Schließende Klammer ohne öffnende", position, HINT)
            opened.pop()
    if quote is not None:
        raise QuerySyntaxError("Anführungszeichen wird nicht geschlossen", quote, HINT)
    if opened:
        raise QuerySyntaxError("Klammer wird nicht geschlossen", opened[-1], HINT)


def _unexpected(text: str, exc: UnexpectedInput) -> QuerySyntaxError:
    position = min(getattr(exc, "pos_in_stream", None) or len(text), len(text))
    token = getattr(exc, "token", None)
    if token is not None and getattr(token, "type", "") == "$END":
        return QuerySyntaxError("Der Suche fehlt nach dem letzten Operator ein Suchbegriff", len(text.rstrip()), HINT)
    if token is not None and str(token) == ")":
        return QuerySyntaxError("Leere Klammer", position, HINT)
    return QuerySyntaxError(f"Hier fehlt ein Suchbegriff vor {str(token or text[position:position + 1])!r}",
                            position, HINT)  # fmt: skip


def _check_not_only_exclusions(tree: Node) -> None:
    """`-Wohnraum` alone would list everything but one word: refused, the user meant something to find."""
    children = tree.children if isinstance(tree, All) else (tree,)
    if all(isinstance(child, Not) for child in children):
        raise QuerySyntaxError(
            "Die Suche schließt nur aus; es fehlt ein Begriff, nach dem gesucht wird", children[0].position, HINT
        )


def _check_ranges(node: Node) -> None:
    """A range too wide or backwards is refused by the parse (the CLI parses before it opens the index)."""
    if isinstance(node, Not):
        _check_ranges(node.child)
    elif isinstance(node, All | Any):
        for child in node.children:
            _check_ranges(child)
    elif isinstance(node, Field) and node.name == "statute":
        cited = [i.section for i in cited_run(node.value) if i.section]
        for section in lawless_references(node.value) or cited:
            section_range(section, node.position)


@v_args(inline=True)
class _ToNodes(Transformer):
    """lark's parse tree to `syntax` nodes; field values resolved to what they name."""

    def __init__(self, text: str, citations: dict[int, Field]) -> None:
        super().__init__()
        self.text = text
        self.citations = citations

    def _original(self, token: Token) -> str:
        """The token as typed (the grammar read the identifiers masked, ki: protected_identifiers)."""
        return self.text[token.start_pos : token.start_pos + len(token)]

    def word(self, token: Token) -> Node:
        if token.start_pos in self.citations:  # a citation that is an operand of its own, read as one word
            return self.citations[token.start_pos]
        value = self._original(token)
        if value.endswith("*") and len(value) > 1 and _WORD_CHAR.search(value[:-1]) and "*" not in value[:-1]:
            return Wildcard(prefix=value[:-1], position=token.start_pos)
        return Word(text=value, position=token.start_pos)

    def phrase(self, token: Token) -> Node:
        return Phrase(text=self._original(token)[1:-1], position=token.start_pos)

    def negated(self, keyword: Token, child: Node) -> Node:
        return Not(child=child, position=keyword.start_pos)

    def excluded(self, _minus: Token, child: Node) -> Node:
        return Not(child=child, position=_minus.start_pos)

    def and_expr(self, *items: Node | Token) -> Node:
        """Implicit ANDs get position -1 (a plain query may consist of them); an explicit AND
        keyword makes the query an operator query."""
        keywords = [item for item in items if isinstance(item, Token)]
        children = tuple(item for item in items if not isinstance(item, Token))
        return All(children=_flat(children, All), position=keywords[0].start_pos if keywords else -1)

    def group(self, paren: Token, inner: Node) -> Node:
        """Parentheses mark an operator query even around plain words."""
        children = inner.children if isinstance(inner, All) and inner.position == -1 else (inner,)
        return All(children=children, position=paren.start_pos)

    def or_expr(self, *children: Node) -> Node:
        return Any(children=_flat(children, Any), position=_position(children[0]))

    def field(self, name: Token, value: Token) -> Node:
        field = FIELD_NAMES[str(name).split(":")[0].strip().lower()]
        raw = self._original(value)
        if value.type == "PHRASE":
            head, rest = raw[1:-1].strip(), ""
        else:
            head, rest = _cut_value(field, raw)
        if not head:
            raise QuerySyntaxError(f"{GERMAN_FIELD[field]}: ohne Wert", name.start_pos, HINT)
        if field == "statute":
            _check_reference(head, name.start_pos)
        node: Node = (
            _date_span(head, name.start_pos) if field == "date" else Field(name=field, value=head, position=name.start_pos)
        )
        if not rest.strip():
            return node
        offset = value.start_pos + raw.index(rest)
        words = [Word(text=m.group(), position=offset + m.start()) for m in re.finditer(r"\S+", rest)]
        return All(children=(node, *[self.word(_word_token(w)) for w in words]), position=name.start_pos)


def _word_token(word: Word) -> Token:
    return Token("WORD", word.text, start_pos=word.position)


def _flat(children: tuple[Node, ...], kind: type[All] | type[Any]) -> tuple[Node, ...]:
    """Nested ANDs (or ORs) as one list: `a (b c)` has the same meaning as `a b c`, but the
    parentheses themselves make a query an operator query, so only unmarked ones are merged."""
    flat: list[Node] = []
    for child in children:
        if isinstance(child, kind) and child.position == -1:
            flat += child.children
        else:
            flat.append(child)
    return tuple(flat)


def _position(node: Node) -> int:
    if isinstance(node, All) and node.position == -1:
        return _position(node.children[0])
    return node.position


def _cut_value(field: str, raw: str) -> tuple[str, str]:
    """(value, rest as text): the identifier at the start for az/norm (else the whole value, a
    pasted file number), else the first word."""
    stripped = raw.strip()
    if field in ("docket", "statute"):
        run = identifier_run(stripped, extract(stripped), 0)
        if run:
            end = max(identifier.end for identifier in run)
            return stripped[:end], stripped[end:]
        if field == "statute":
            return _lawless_cut(stripped)
        if (docket := _UNSPACED_DOCKET.match(stripped)) and (spaced := spaced_case_number(docket)):
            return spaced, stripped[docket.end() :]
        return stripped, ""
    head, _, rest = stripped.partition(" ")
    if field == "court" and rest and head in _regional_court_codes():  # "OLG München": the court and its seat
        seat, _, rest = rest.partition(" ")
        return f"{head} {seat}", rest
    return head, rest


def _lawless_cut(value: str) -> tuple[str, str]:
    """`norm:§ 573c Mietsache`: the longest run of leading words that is a reference without a law
    (the compiler widens it to every law); the whole value when none is."""
    words = value.split(" ")
    for end in range(len(words), 0, -1):
        if lawless_references(" ".join(words[:end])):
            return " ".join(words[:end]), " ".join(words[end:])
    return value, ""


# A law every statute reference can be read with: `norm:§ 573c` is parsed as "§ 573c BGB" and the law
# cut off again, so a reference without a law is normalized by the same rules as one with a law.
_STAND_IN_LAW = "BGB"


@lru_cache(maxsize=4096)  # the cut, the check and the compiler ask about the same few values
def lawless_references(value: str) -> tuple[str, ...]:
    """"§ 573c" / "§573c Abs. 1" -> the normalized chain without a law ("§ 573c Abs. 1"); "§§ 573, 574"
    -> each section's; () when the value names a law or is no § / Art. reference."""
    whole = " ".join(value.split())
    if not whole.startswith(("§", "Art")) or any(i.start == 0 and i.end == len(whole) for i in extract(whole)):
        return ()
    read = f"{whole} {_STAND_IN_LAW}"
    run = [i for i in identifier_run(read, extract(read), 0) if i.kind == "statute"]
    if not run or max(i.end for i in run) != len(read) or any(i.law != _STAND_IN_LAW for i in run):
        return ()
    return tuple(dict.fromkeys(i.normalized.removesuffix(f" {_STAND_IN_LAW}") for i in run))


# Sections a range may span: `norm:§§ 1-2385 BGB` would be the whole law, asked for by accident.
MAX_RANGE_SECTIONS = 50
_RANGE = re.compile(r"(§§|Art\.) (\d+)([a-z]?)-(\d+)([a-z]?)")
_SINGLE = {"§§": "§", "Art.": r"Art\."}


def section_range(section: str, position: int) -> str | None:
    """"§§ 573-575" -> a pattern of the sections from 573 to 575 ("§ (573[a-z]?|574[a-z]?|575)"):
    letter sections between the ends count (§ 573c lies inside §§ 573-575), those after the last
    number do not (§ 575a follows § 575). Likewise "Art. 5-7". None when `section` is no range."""
    match = _RANGE.fullmatch(section)
    if match is None:
        return None
    first, first_letter, last, last_letter = int(match[2]), match[3], int(match[4]), match[5]
    if (last, last_letter) < (first, first_letter):
        raise QuerySyntaxError(f"{section}: der Bereich endet vor seinem Anfang", position, HINT)
    if last - first + 1 > MAX_RANGE_SECTIONS:
        wide = f"{section} umfasst {last - first + 1} Vorschriften"
        raise QuerySyntaxError(f"{wide}; ein Bereich darf höchstens {MAX_RANGE_SECTIONS} umfassen", position, HINT)
    parts = [
        _section_part(number, first_letter if number == first else "", last_letter if number == last else None)
        for number in range(first, last + 1)
    ]
    return f"{_SINGLE[match[1]]} ({'|'.join(parts)})"


def _section_part(number: int, from_letter: str, to_letter: str | None) -> str:
    """`number` with the letters it may carry: from `from_letter` ("" is the bare number) up to
    `to_letter` (None: every letter; "" the bare number only)."""
    if to_letter == "":
        return str(number)
    low, high = from_letter or "a", to_letter or "z"
    letters = low if low == high else f"[{low}-{high}]"
    return f"{number}{letters}" if from_letter else f"{number}{letters}?"


# A norm value that starts like a § or Art. reference must read as one (or as several).
_REFERENCE_START = re.compile(r"(?:§+|Art\.|Artikel|Art)(?=\s|\d|$)")


def _check_reference(value: str, position: int) -> None:
    """`norm:§§` or `norm:§ Mietsache` names no norm: refused, not a filter that silently matches nothing."""
    if _REFERENCE_START.match(value) and not extract(value) and not lawless_references(value):
        raise QuerySyntaxError(
            f"norm:{value} nennt keine Vorschrift (z. B. norm:§ 573c BGB oder norm:§§ 573, 574)",
            position,
            HINT,
        )


@cache
def _regional_court_codes() -> frozenset[str]:
    """Court codes that need their seat to name one court (OLG, LG, AG, ...)."""
    return frozenset(court_table().court_types.values())


def _date_span(value: str, position: int) -> DateSpan:
    match = _DATE_RANGE.match(value)
    if match is None:
        raise QuerySyntaxError(
            f"datum:{value} ist kein Zeitraum; erwartet JJJJ-MM-TT..JJJJ-MM-TT (ein Ende darf fehlen)", position, HINT
        )
    start_text, end_text, single = match.groups()
    try:
        start = date.fromisoformat(single or start_text) if (single or start_text) else None
        end = date.fromisoformat(single or end_text) if (single or end_text) else None
    except ValueError:
        raise QuerySyntaxError(f"datum:{value} enthält kein gültiges Datum", position, HINT) from None
    if start is None and end is None:
        raise QuerySyntaxError("datum:.. ohne Anfang und Ende", position, HINT)
    if start and end and start > end:
        raise QuerySyntaxError(f"datum:{value}: der Anfang liegt nach dem Ende", position, HINT)
    return DateSpan(start=start, end=end, position=position)
