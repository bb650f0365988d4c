"""Metadata of one converted document: type, title, date, parties, references, clauses.

Two extractors behind one protocol. `RuleBasedExtractor` is the offline
default: deterministic German rules over the heading zone of the text.
`LLMExtractor` asks the chat gateway for the same `DocumentMetadata` by JSON
schema and then holds the answer to the ontology. Identifiers (case numbers,
§ references, ECLI, register numbers) always come from
`ki_core.identifiers.extract`, never from a model, so the identifier leg of
retrieval sees one normalization.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from datetime import date
from typing import TYPE_CHECKING, Literal, Protocol

from pydantic import BaseModel, Field

from ki_core.config import Settings
from ki_core.llm import ChatGateway
from ki_core.models.ontology import OntologyKind
from ki_core.ontology import Ontology, load_ontology
from ki_core.text_structure import clause_headings

if TYPE_CHECKING:
    from ki_core.identifiers import Identifier
    from ki_workers.context import WorkerContext

# Bump when a rule changes what it extracts: the producer string tells artifacts apart.
RULES_VERSION = 3
# The opening of a document is where its type, title and parties stand.
HEAD_LINES = 15
OPENING_CHARS = 2500
# A published decision's headnotes may fill pages before its Tatbestand or Gründe (BAG 1966: 5,000 characters).
DECISION_CHARS = 20000
FIRST_HEADING_CHARS = 300
# A clause row is embedded like a body chunk; keep it about one chunk long.
CLAUSE_EXCERPT_CHARS = 1200


class Party(BaseModel):
    name: str
    role: str | None = Field(default=None, description="z. B. Kläger, Beklagte, Vermieter, Mieter, Auftraggeber")


class NotableClause(BaseModel):
    locus: str = Field(description='Fundstelle im Dokument, z. B. "§ 5" oder "Ziffer 3.2"')
    clause_type: str | None = Field(default=None, description="Ontologie-ID, z. B. clause_type:termination")
    text: str = Field(description="Wortlaut der Klausel (Auszug)")


class DocumentMetadata(BaseModel):
    title: str | None = None
    doc_type: str | None = Field(default=None, description="Ontologie-ID, z. B. doc_type:contract.lease")
    matter: str | None = Field(default=None, description='Name der Sache, z. B. "Müller ./. Schmidt"')
    reference_numbers: list[str] = Field(
        default_factory=list, description="Aktenzeichen, Vertragsnummern, Unser/Ihr Zeichen"
    )
    parties: list[Party] = Field(default_factory=list)
    identifiers: list[str] = Field(default_factory=list)
    doc_date: date | None = None
    language: Literal["de", "en"] | None = None
    notable_clauses: list[NotableClause] = Field(default_factory=list)


def identifier_rules_version() -> int:
    """ki_core.identifiers' EXTRACTOR_VERSION, imported late like the extractor itself (CLI start-up)."""
    from ki_core.identifiers import EXTRACTOR_VERSION

    return EXTRACTOR_VERSION


class MetadataExtractor(Protocol):
    @property
    def producer(self) -> str:
        """What MetadataArtifact.producer records: "rules:<version>:ids<n>" or "llm:<model>:ids<n>".

        Both extractors take the document's identifiers from ki_core.identifiers, so the
        identifier rules' version is part of either name: raising it makes `ki reindex`
        re-extract every version, as a change of the metadata rules does."""
        ...

    def extract(self, text: str, *, title: str | None = None) -> DocumentMetadata:
        """Metadata of converted `text`; `title` is the converter's title, if the file had one."""
        ...


def extractor_from_settings(settings: Settings) -> MetadataExtractor:
    if settings.llm.metadata_extractor == "llm":
        return LLMExtractor(ChatGateway.from_settings(settings.llm))
    return RuleBasedExtractor()


def extractor_of(ctx: WorkerContext) -> MetadataExtractor:
    """The worker's extractor, made from its settings on first use and kept by its context."""
    return ctx.kept("metadata.extractor", lambda: extractor_from_settings(ctx.settings))


# ------------------------------------------------------------------- language

_STOPWORDS_DE = frozenset(
    "der die das und ist nicht mit von zu den des dem im auf für sich ein eine einer eines einem "
    "wird werden oder auch als bei nach aus wie wir sie er es hat haben sind wurde nur noch über "
    "vor durch zum zur dass daß gegen ihr ihre unter dieser diese dieses kann soll ob sowie vom".split()
)
_STOPWORDS_EN = frozenset(
    "the and of to is that for with on as by this be are it or from at not which have has shall "
    "any such these those their its been were would should may into upon under between than "
    "hereby herein whereas".split()
)
# Below this share of stopwords among the words a text is a table, a list of names, or a third language.
_MIN_STOPWORD_RATIO = 0.08


def detect_language(text: str) -> Literal["de", "en"] | None:
    """"de" or "en" by which stopword list covers more of the words; None when neither fits."""
    words = re.findall(r"[a-zäöüß]+", text[:20000].lower())
    if len(words) < 5:
        return None
    # map over the set's own membership test: the counting stays in C (a third of the rule's time)
    german = sum(map(_STOPWORDS_DE.__contains__, words)) / len(words)
    english = sum(map(_STOPWORDS_EN.__contains__, words)) / len(words)
    if max(german, english) < _MIN_STOPWORD_RATIO:
        return None
    return "de" if german >= english else "en"


# ------------------------------------------------------------------ doc types

_LINE = re.MULTILINE | re.IGNORECASE
_DECISION_JUDGMENT = re.compile(
    r"^(im namen des volkes|(teil|schluss|end|versäumnis|anerkenntnis)?-?urteil)\b|für recht erkannt", _LINE
)
_DECISION_ORDER = re.compile(r"^beschluss\s*$|^beschluss vom\b|\bhat\b.{0,200}\bbeschlossen\s*:", _LINE | re.DOTALL)
_ADMINISTRATIVE = re.compile(r"^(\w+)?bescheid\b", _LINE)
# How published decisions (juris, Open Legal Data, the courts' own databases) are laid out: a headnote
# or the operative part first, then the reasons under headings of their own line.
_DECISION_OPENING = re.compile(r"^(leitsatz|leitsätze|orientierungssatz|orientierungssätze|tenor)\s*:?\s*$", re.I)
_DECISION_SECTIONS = re.compile(r"^(tenor|gründe|tatbestand|entscheidungsgründe)\s*:?\s*$", _LINE)
# Only an Urteil has a Tatbestand (or, on appeal, says why it has none: § 540 ZPO), is pronounced
# "von Rechts wegen" and declares itself enforceable.
_JUDGMENT_BODY = re.compile(
    r"^(tatbestand|entscheidungsgründe|von rechts wegen)\s*:?\s*$|\b(das|dieses) urteil ist\b[^.\n]{0,60}\bvollstreckbar"
    r"|\banstelle des tatbestand",
    _LINE,
)
# A Beschwerde is always decided by Beschluss, as are leave to appeal and the choice of a court.
_ORDER_BODY = re.compile(
    r"\bbeschwerde\b[^\n]{0,300}?\b(ist unbegründet|ist unzulässig|zurückgewiesen|verworfen)"
    r"|\bantrag auf zulassung der berufung wird abgelehnt|^die sache wird an das \w+ \w+ (zurück|ab)gegeben"
    r"|\b(dieser|der) beschluss ist unanfechtbar|^gründe\s*:?\s*$",
    _LINE,
)
_EMAIL_HEADER = re.compile(r"\A(?:(?:From|To|Cc|Bcc|Date|Sent|Subject|Von|An|Datum|Gesendet|Betreff): .*\n){2,}")
_ANNEX = re.compile(r"^(anlage|anhang)\s*([a-z]{0,2}\s*\d+[a-z]?\b|zu\b)|^(anlage|anhang)\s*$", re.IGNORECASE)
_MEMO_TYPES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"^(akten|gesprächs|telefon|besprechungs)?notiz\b|^aktennotiz\b", re.I), "doc_type:memo.file_note"),
    (re.compile(r"^(rechts)?gutachten\b|^gutachterliche", re.I), "doc_type:memo.legal_opinion"),
    (re.compile(r"^(akten|gesprächs|telefon|besprechungs)?vermerk\b|^memo(randum)?\b", re.I), "doc_type:memo"),
)
_PLEADING_TYPES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"^klageerwiderung\b", re.I), "doc_type:pleading.statement_of_defence"),
    (re.compile(r"^(klage|klageschrift)\s*$|^klage\s+(des|der|wegen)\b", re.I), "doc_type:pleading.statement_of_claim"),
    (re.compile(r"^(berufung|revision|beschwerde)(sbegründung|sschrift)?\s*$", re.I), "doc_type:pleading.appeal"),
    (re.compile(r"^antrag auf\b|^(eil)?antrag\s*$", re.I), "doc_type:pleading.application"),
    (re.compile(r"^schriftsatz\b|^(replik|duplik|stellungnahme|erwiderung)\s*$", re.I), "doc_type:pleading"),
)
_PLEADING_BODY = re.compile(
    r"erheben? (wir )?(namens und in vollmacht .{0,120})?klage|\bin dem rechtsstreit\b.{0,2000}\b(beantragen|werden beantragen)",
    re.IGNORECASE | re.DOTALL,
)
# A law's own title: "Handelsgesetzbuch (HGB)", "Zivilprozessordnung", "Straßenverkehrs-Ordnung",
# "Gesetz betreffend die Gesellschaften mit beschränkter Haftung", "Grundgesetz für die …".
_STATUTE_TITLE = (
    r"^[\w-]*(gesetz|gesetzbuch|ordnung)\b(\s*\([\w .-]+\))?\s*$|^(\w+gesetz|gesetz (über|zur|zum|zu|betreffend|gegen)"
    r"|\w*verordnung)\b|\bgesetzbuch\b|^[\w-]*gesetzbuch\b"
)
# Heading keywords, most specific first: the first pattern that matches a head line wins.
_HEADING_TYPES: tuple[tuple[str, str], ...] = (
    (r"gewerbe(raum)?mietvertrag|mietvertrag über gewerbe|mietvertrag über geschäftsräume", "doc_type:contract.lease.commercial"),
    (r"wohn(raum|ungs)mietvertrag|mietvertrag über wohn", "doc_type:contract.lease.residential"),
    (r"mietvertrag|pachtvertrag|untermietvertrag", "doc_type:contract.lease"),
    (r"geschäftsführer(anstellungs|dienst)?vertrag", "doc_type:contract.managing_director"),
    (r"aufhebungsvertrag|aufhebungsvereinbarung", "doc_type:contract.termination_agreement"),
    (r"arbeitsvertrag|anstellungsvertrag", "doc_type:contract.employment"),
    (r"(geschäfts)?anteils(kauf|übertragungs)vertrag|share purchase agreement", "doc_type:contract.share_purchase"),
    (r"kaufvertrag", "doc_type:contract.purchase"),
    (r"werkvertrag", "doc_type:contract.work"),
    (r"dienst(leistungs)?vertrag|beratervertrag|beratungsvertrag", "doc_type:contract.service"),
    (r"darlehensvertrag", "doc_type:contract.loan"),
    (r"lizenzvertrag", "doc_type:contract.license"),
    (r"geheimhaltungsvereinbarung|vertraulichkeitsvereinbarung|non-disclosure agreement", "doc_type:contract.nda"),
    (r"auftragsverarbeitung", "doc_type:contract.data_processing"),
    (r"gesellschaftsvertrag|^satzung\b", "doc_type:contract.articles"),
    (r"^vergleich\b|vergleichsvereinbarung", "doc_type:contract.settlement"),
    (r"^\d*\.?\s*nachtrag\b|änderungsvereinbarung", "doc_type:contract.amendment"),
    (r"^(prozess|general|vorsorge)?vollmacht\b", "doc_type:power_of_attorney"),
    (r"^(rechnung|kostennote|kostenrechnung|vorschussrechnung)\b", "doc_type:invoice"),
    (r"^(sitzungs|verhandlungs|besprechungs)?protokoll\b|^niederschrift\b", "doc_type:minutes"),
    (_STATUTE_TITLE, "doc_type:statute"),
    (r"^(\w+)?(vertrag|vereinbarung)\b|\bagreement\b", "doc_type:contract"),
)
_HEADING_PATTERNS = tuple((re.compile(pattern, re.IGNORECASE), node) for pattern, node in _HEADING_TYPES)
_LETTER = re.compile(r"^sehr geehrte|^liebe[rs]? |mit freundlichen grüßen|^hochachtungsvoll", _LINE)
# A letter greets its reader before anything else; a contract's parties ("zwischen") come first.
_GREETING = re.compile(r"^(sehr geehrte|liebe[rs]?\s|dear\s)", _LINE)
_PARTIES_LINE = re.compile(r"^(zwischen|between)\b", _LINE)
_CONTRACT_BODY = re.compile(r"\bzwischen\b.{0,600}\bund\b.{0,600}\b(vertrag|vereinbarung)\b", re.IGNORECASE | re.DOTALL)
# Markdown's heading and emphasis marks around a line: "# Aktenvermerk", "**ENTWURF**".
_MARKUP = re.compile(r"^#{1,6}\s+|^[*_]{1,3}|[*_]{1,3}$")


def head_lines(text: str, count: int = HEAD_LINES) -> list[str]:
    """The first `count` non-blank lines, stripped; reads no further than they reach."""
    lines: list[str] = []
    start = 0
    while len(lines) < count and start <= len(text):
        end = text.find("\n", start)
        end = len(text) if end < 0 else end
        line = text[start:end].strip()
        if line:
            lines.append(line)
        start = end + 1
    return lines


def classify_doc_type(text: str, title: str | None = None) -> str | None:
    """The ontology id the opening of `text` announces, by rules in order of how telling they are.

    The one place a document's type is read from its text; `decided_doc_type` weighs it
    against the type its source declares."""
    head = [_MARKUP.sub("", line).strip() for line in head_lines(text)]
    for classify in (_decision_type, _email_type, _annex_type, _memo_type, _pleading_type, _greeting_type):
        found = classify(head, text)
        if found:
            return found
    candidates = [title, *head] if title else head
    found = _first_heading_type(candidates)
    if found:
        return found
    if _LETTER.search(text):
        return "doc_type:correspondence.letter"
    return "doc_type:contract" if _CONTRACT_BODY.search(text[:OPENING_CHARS]) else None


def decided_doc_type(declared: str | None, extracted: str | None) -> str | None:
    """The type a document gets: what its source declares, narrowed by what its text shows.

    The manifest or DMS knows what a file is ("decision"); the text may say more (an
    Urteil). A text that points elsewhere never overrides the declaration.
    """
    if declared is None:
        return extracted
    if extracted is not None and extracted in load_ontology() and declared in load_ontology().ancestors(extracted):
        return extracted
    return declared


def _decision_type(head: list[str], text: str) -> str | None:
    zone, opening = "\n".join(head), text[:OPENING_CHARS]
    if _DECISION_JUDGMENT.search(zone) or "für Recht erkannt" in opening:
        return "doc_type:decision.judgment"
    if _DECISION_ORDER.search(zone):
        return "doc_type:decision.order"
    if _ADMINISTRATIVE.search(zone):
        return "doc_type:decision.administrative"
    if head and (_DECISION_OPENING.match(head[0]) or len(_DECISION_SECTIONS.findall(opening)) >= 2):
        return _published_decision_kind(text[:DECISION_CHARS])
    return None


def _published_decision_kind(zone: str) -> str:
    """Urteil or Beschluss by what only the one has; a bare headnote tells neither."""
    if _JUDGMENT_BODY.search(zone):
        return "doc_type:decision.judgment"
    if _ORDER_BODY.search(zone):
        return "doc_type:decision.order"
    return "doc_type:decision"


def _greeting_type(_head: list[str], text: str) -> str | None:
    """A salutation in the opening, with no party block above it: a letter, whatever its subject names."""
    greeting = _GREETING.search(text, 0, OPENING_CHARS)
    if greeting is None or _PARTIES_LINE.search(text, 0, greeting.start()):
        return None
    return "doc_type:correspondence.letter"


def _email_type(_head: list[str], text: str) -> str | None:
    return "doc_type:correspondence.email" if _EMAIL_HEADER.match(text[:OPENING_CHARS]) else None


def _annex_type(head: list[str], _text: str) -> str | None:
    return "doc_type:annex" if head and _ANNEX.match(head[0]) else None


def _memo_type(head: list[str], _text: str) -> str | None:
    for line in head[:5]:
        for pattern, node in _MEMO_TYPES:
            if pattern.match(line):
                return node
    return None


def _pleading_type(head: list[str], text: str) -> str | None:
    for line in head:
        for pattern, node in _PLEADING_TYPES:
            if pattern.match(line):
                return node
    return "doc_type:pleading" if _PLEADING_BODY.search(text[:OPENING_CHARS]) else None


def _first_heading_type(lines: Iterable[str]) -> str | None:
    """A line longer than a heading is a sentence, except the first: a law's full title runs long
    ("Sozialgesetzbuch (SGB) Fünftes Buch (V) - … - (Artikel 1 des Gesetzes v. 20. Dezember 1988 …)")."""
    for index, line in enumerate(lines):
        if len(line) > (FIRST_HEADING_CHARS if index == 0 else 120):
            continue
        for pattern, node in _HEADING_PATTERNS:
            if pattern.search(line):
                return node
    return None


# ---------------------------------------------------------------------- dates

_MONTHS = {
    "januar": 1, "jänner": 1, "februar": 2, "märz": 3, "april": 4, "mai": 5, "juni": 6, "juli": 7,
    "august": 8, "september": 9, "oktober": 10, "november": 11, "dezember": 12,
    "jan": 1, "feb": 2, "mär": 3, "apr": 4, "jun": 6, "jul": 7, "aug": 8, "sep": 9, "sept": 9,
    "okt": 10, "nov": 11, "dez": 12,
    "january": 1, "february": 2, "march": 3, "may": 5, "june": 6, "july": 7, "october": 10,
    "december": 12, "mar": 3, "oct": 10, "dec": 12,
}  # fmt: skip
# "3. Februar 2023", "3 February 2023", "February 3, 2023", "03.02.2023", "3.2.23", "2023-02-03".
_DATE = (
    r"(?<![\d.])(?:(?P<d1>\d{1,2})(?:\.\s*|(?:st|nd|rd|th)?\s+)(?P<month>[A-Za-zäÄ]{3,9})\.?\s+(?P<y1>\d{4})"
    r"|(?P<month4>[A-Z][a-z]{2,8})\.?\s+(?P<d4>\d{1,2})(?:st|nd|rd|th)?,\s*(?P<y4>\d{4})"
    r"|(?P<d2>\d{1,2})\.(?P<m2>\d{1,2})\.(?P<y2>\d{4}|\d{2})\b"
    r"|(?P<y3>\d{4})-(?P<m3>\d{2})-(?P<d3>\d{2})\b)"
)
_ANY_DATE = re.compile(_DATE)


def _dated(before: str, after: str = "") -> re.Pattern[str]:
    """A pattern with one date in it (the date's group names may stand only once in a pattern)."""
    return re.compile(rf"{before}{_DATE}{after}", re.IGNORECASE | re.MULTILINE)


# A decision's own date; in any other document these words cite a decision.
_DECISION_DATES = (
    _dated(r"^(?:\w+-?)?(?:urteil|beschluss)\s+vom\s+"),
    _dated(r"^vom\s+"),  # the BGH prints "BESCHLUSS / IX ZB 12/23 / vom / 14. März 2024"
    _dated(r"verkündet\s+am:?\s+"),
    _dated(r"\bam\s+", r"\s+(?:beschlossen|für\s+recht\s+erkannt)"),
)
# The letter's or the signature's "Berlin, den 12. März 2024": a place is words without digits
# ("Frankfurt am Main", "Halle (Saale)", "St. Ingbert"), so "SW-R 44/24, 27.02.2024" (a reference) is none.
_PLACE = r"[A-ZÄÖÜ][^\W\d_]*\.?(?:[ -]\(?[^\W\d_]+\.?\)?){0,3}"
_SIGNED_AT = r"(?:(?:Ort|Place)\s*[,/]\s*(?:Datum|date)\s*:?\s*)?"
_PLACE_DATE = _dated(rf"^{_SIGNED_AT}(?P<place>{_PLACE}),\s*(?:den\s+|am\s+|the\s+)?", r"(?:\s*_+.*)?$")
# Where a signature block starts: a place-and-date line, also with the date still blank.
_SIGNATURE_LINE = re.compile(rf"^[ \t]*{_SIGNED_AT}{_PLACE},\s*(?:den\s+|am\s+)?(?:{_DATE}|_{{3}})", re.MULTILINE)
# "BGH, 8.5.2007" has the shape of a place-and-date line; a court is no place a document is written at.
_COURT_NAME = re.compile(
    r"[Gg]ericht|Court\b|\b(?:BGH|BAG|BFH|BSG|BVerfG|BVerwG|BPatG|EuGH|EGMR|OLG|OVG|LAG|LSG|VGH|KG|LG|AG|ArbG|VG|SG|FG)\b"
)
_DATE_FIELD = re.compile(
    r"^(?:datum|date|dated|stand|gesendet|sent|rechnungsdatum|briefdatum|erstellt(?: am)?|am|datum\s*/\s*uhrzeit)"
    r"\s*:\s*(?P<value>.+)$",
    re.I,
)
_MAIL_DATE_FIELD = re.compile(r"^(?:date|datum|gesendet|sent)\s*:\s*(?P<value>.+)$", re.IGNORECASE | re.MULTILINE)
_DATE_ALONE = _dated(r"^(?:den\s+)?", r"$")
# A heading "Telefonnotiz vom 19.01.2024", or a line "dated 28 June 2024" under it; not one that cites something.
_HEADING_DATE = _dated(r"^(?P<heading>.{0,150}?)\s*\b(?:vom|am|dated)\s+", r"\s*$")
_CITING = re.compile(
    r"\b(?:urteil|beschluss|entscheidung|verfügung|fassung|gesetz\w*|verordnung|schreiben|judgment|decision)\b|"
    + _COURT_NAME.pattern,
    re.IGNORECASE,
)
_SALUTATION = re.compile(r"^\s*(?:sehr geehrte|liebe[rs]?\s|dear\s|hallo\b|guten tag\b)", re.IGNORECASE | re.MULTILINE)
# Columns of a letterhead or a signature block: tab stops, runs of spaces, DOCX table cells.
_CELL_GAP = re.compile(r"\t+| {3,}| [|/] ")


def find_doc_date(text: str, doc_type: str | None = None) -> date | None:
    """The document's own date, never one it cites (a decision, a law, an earlier letter, a deadline).

    The rules only take dates in the places a document puts its own: a
    decision's pronouncement (decisions only), an e-mail's header, the
    place-and-date lines, a date field, a dated heading, a date alone in the
    letterhead. `doc_type` is classified here when the caller does not pass it.
    """
    return doc_date_of_type(text, doc_type or classify_doc_type(text))


def doc_date_of_type(text: str, doc_type: str | None) -> date | None:
    """find_doc_date for a text already classified (None: no type): classifying costs as much as the dates."""
    rules = [_mail_header_date, _place_date, _field_date, _heading_date, _letterhead_date]
    if doc_type and doc_type.startswith("doc_type:decision"):
        rules.insert(0, _decision_date)
    for rule in rules:
        found = rule(text)
        if found:
            return found
    return None


def _decision_date(text: str) -> date | None:
    opening = text[:OPENING_CHARS]
    for pattern in _DECISION_DATES:
        for match in pattern.finditer(opening):
            found = _date_of(match)
            if found:
                return found
    return None


def _mail_header_date(text: str) -> date | None:
    """The header on top is the message's; headers further down belong to the quoted ones."""
    header = _EMAIL_HEADER.match(text)
    field = _MAIL_DATE_FIELD.search(header.group(0)) if header else None
    return _first_date(field.group("value")) if field else None


def _place_date(text: str) -> date | None:
    """The latest place-and-date line: a contract is concluded with its last signature."""
    found = []
    for cell in _cells(text):
        match = _PLACE_DATE.match(cell) if "," in cell else None
        if match and not _COURT_NAME.search(match.group("place")):
            found.append(_date_of(match))
    return max((day for day in found if day), default=None)


def _field_date(text: str) -> date | None:
    match = _field_date_match(text)
    return _date_of(match) if match else None


def _field_date_match(text: str) -> re.Match[str] | None:
    """The date of the first "Datum:", "Stand:", "Gesendet:" ... field, as the text writes it."""
    for cell in _cells(text):
        field = _DATE_FIELD.match(cell) if ":" in cell else None
        date_match = _ANY_DATE.search(field.group("value")) if field else None
        if date_match and _date_of(date_match):
            return date_match
    return None


def _heading_date(text: str) -> date | None:
    for line in head_lines(text, 3):
        match = _HEADING_DATE.match(line)
        if match and not _CITING.search(match.group("heading")):
            return _date_of(match)
    return None


def _letterhead_date(text: str) -> date | None:
    """A date standing alone above the salutation; below it, a date alone is a deadline or an event."""
    salutation = _SALUTATION.search(text, 0, OPENING_CHARS)
    head = text[: salutation.start()] if salutation else "\n".join(head_lines(text))
    for cell in _cells(head):
        match = _DATE_ALONE.match(cell)
        if match and _date_of(match):
            return _date_of(match)
    return None


def _cells(text: str) -> Iterator[str]:
    for line in text.split("\n"):
        # Most lines have no column gap: the split is for those that may.
        parts = _CELL_GAP.split(line) if "\t" in line or "  " in line or " | " in line or " / " in line else (line,)
        for cell in parts:
            if cell.strip():
                yield cell.strip()


def _first_date(value: str) -> date | None:
    for match in _ANY_DATE.finditer(value):
        found = _date_of(match)
        if found:
            return found
    return None


def _date_of(match: re.Match[str]) -> date | None:
    parts = match.groupdict()
    if parts["d1"]:
        month, day, year = _MONTHS.get(parts["month"].lower()), parts["d1"], parts["y1"]
    elif parts["d4"]:
        month, day, year = _MONTHS.get(parts["month4"].lower()), parts["d4"], parts["y4"]
    elif parts["d2"]:
        month, day, year = int(parts["m2"]), parts["d2"], parts["y2"]
    else:
        month, day, year = int(parts["m3"]), parts["d3"], parts["y3"]
    year_number = int(year) if len(year) == 4 else 2000 + int(year)
    if month is None or not 1900 <= year_number <= 2100:
        return None
    try:
        return date(year_number, month, int(day))
    except ValueError:
        return None


# -------------------------------------------------------------------- parties

_ROLE_WORDS = (
    r"Kläger(?:in)?|Beklagte[rn]?|Antragsteller(?:in)?|Antragsgegner(?:in)?|Beschwerdeführer(?:in)?|"
    r"Beschwerdegegner(?:in)?|Berufungskläger(?:in)?|Berufungsbeklagte[rn]?|Revisionskläger(?:in)?|"
    r"Revisionsbeklagte[rn]?|Gläubiger(?:in)?|Schuldner(?:in)?|Streithelfer(?:in)?|Nebenintervenient(?:in)?|"
    r"Vermieter(?:in)?|Mieter(?:in)?|Verpächter(?:in)?|Pächter(?:in)?|Arbeitgeber(?:in)?|Arbeitnehmer(?:in)?|"
    r"Auftraggeber(?:in)?|Auftragnehmer(?:in)?|Verkäufer(?:in)?|Käufer(?:in)?|Darlehensgeber(?:in)?|"
    r"Darlehensnehmer(?:in)?|Lizenzgeber(?:in)?|Lizenznehmer(?:in)?|Gesellschaft|Dienstleister(?:in)?|"
    r"Kunde|Kundin|Berater(?:in)?|Verantwortliche[rn]?|Auftragsverarbeiter(?:in)?"
)
_RUBRUM_START = re.compile(r"^(?:in dem|in der|im) (?:rechtsstreit|verfahren|\w*sache)\b.*$", _LINE)
_RUBRUM_ROLE = re.compile(rf"^(?:-\s*)?({_ROLE_WORDS})\b", re.MULTILINE)
_RUBRUM_END = re.compile(r"^(hat|wegen|erkennt|beschließt|für recht erkannt)\b|^der \d+\. \w*senat|^das \w*gericht", _LINE)
_CONTRACT_START = re.compile(r"^(?:wird\s+)?zwischen\b:?", _LINE)
_CONTRACT_AND = re.compile(r"^und\s*$", _LINE)
_CONTRACT_END = re.compile(r"^(§\s*\d|präambel|vorbemerkung|\d+\.\s|wird folgende|schließen folgende|wird nachstehende)", _LINE)
_NAMED_ROLE = re.compile(
    rf"(?:nachstehend|nachfolgend|im folgenden|im weiteren|im nachfolgenden)\s+(?:auch\s+)?[„\"»']?({_ROLE_WORDS})",
    re.I,
)
_BRACKET_ROLE = re.compile(rf"(?:^|\()[-–\s]*(?:als\s+)?[„\"»]?({_ROLE_WORDS})[“\"«]?\s*[-–)]?\s*$", re.MULTILINE)
_DEFAULT_ROLES = {
    "doc_type:contract.lease": ("Vermieter", "Mieter"),
    "doc_type:contract.employment": ("Arbeitgeber", "Arbeitnehmer"),
    "doc_type:contract.managing_director": ("Gesellschaft", "Geschäftsführer"),
    "doc_type:contract.purchase": ("Verkäufer", "Käufer"),
    "doc_type:contract.loan": ("Darlehensgeber", "Darlehensnehmer"),
    "doc_type:contract.service": ("Auftraggeber", "Auftragnehmer"),
    "doc_type:contract.work": ("Auftraggeber", "Auftragnehmer"),
}


def find_parties(text: str, doc_type: str | None = None) -> list[Party]:
    """Parties from a rubrum ("In dem Rechtsstreit ... gegen ...") or a contract preamble ("zwischen ... und ...")."""
    opening = text[: OPENING_CHARS * 2]
    rubrum = _RUBRUM_START.search(opening)
    if rubrum:
        return _rubrum_parties(opening[rubrum.end() :])
    contract = _CONTRACT_START.search(opening)
    if contract:
        return _contract_parties(opening[contract.end() :], doc_type)
    return []


def _rubrum_parties(rest: str) -> list[Party]:
    end = _RUBRUM_END.search(rest)
    block = rest[: end.start()] if end else rest[:2000]
    parties = []
    for segment in re.split(r"^\s*gegen\s*$", block, flags=_LINE):
        name = _party_name(segment)
        role = _RUBRUM_ROLE.search(segment)
        if name:
            parties.append(Party(name=name, role=role.group(1) if role else None))
    return parties


def _contract_parties(rest: str, doc_type: str | None) -> list[Party]:
    end = _CONTRACT_END.search(rest)
    block = rest[: end.start()] if end else rest[:1500]
    segments = _CONTRACT_AND.split(block, maxsplit=1) if _CONTRACT_AND.search(block) else block.split(" und ", 1)
    defaults = _default_roles(doc_type)
    parties = []
    for position, segment in enumerate(segments[:2]):
        name = _party_name(segment)
        if not name:
            continue
        role = _NAMED_ROLE.search(segment) or _BRACKET_ROLE.search(segment)
        parties.append(Party(name=name, role=role.group(1) if role else defaults[position]))
    return parties


def _default_roles(doc_type: str | None) -> tuple[str | None, str | None]:
    for node, roles in _DEFAULT_ROLES.items():
        if doc_type and (doc_type == node or doc_type.startswith(node + ".")):
            return roles
    return (None, None)


_NOT_A_NAME_LINE = re.compile(r"^(vertreten durch|prozessbevollmächtigt|nachstehend|nachfolgend|im folgenden)", re.I)
# Where an inline party name ends: "der Beta AG wird folgende Vereinbarung getroffen".
_NAME_END = re.compile(r",|\s[-–(]|\s(?:wird|werden|schließen|vereinbaren|nachstehend|nachfolgend|im folgenden)\b", re.I)
_NAME_PREFIX = re.compile(r"^(\d+\.\s*)|^(der|die|den|dem|das)\s+(?=[A-ZÄÖÜ])")


def _party_name(segment: str) -> str | None:
    """The first line that is not a role or a connector, up to its first comma or verb."""
    for line in segment.split("\n"):
        line = line.strip(" \t-–")
        if not line or _RUBRUM_ROLE.match(line) or _NOT_A_NAME_LINE.match(line):
            continue
        name = _NAME_PREFIX.sub("", _NAME_END.split(line, maxsplit=1)[0]).strip(" :")
        return name or None
    return None


# --------------------------------------------------------- references, matter

_REFERENCE_LABELS = re.compile(
    r"(?:Unser(?:e)?\s+(?:Zeichen|Az\.?|Aktenzeichen|Gesch\.?-?Z(?:eichen|\.)?)|Ihr(?:e)?\s+(?:Zeichen|Az\.?|Aktenzeichen)"
    r"|Aktenzeichen|Geschäftszeichen|Az\.|Vertrags(?:-?[Nn]r\.|nummer)|Rechnungs(?:-?[Nn]r\.|nummer)"
    r"|Mandats(?:-?[Nn]r\.|nummer)|Kunden(?:-?[Nn]r\.|nummer)|Vorgangsnummer)"
    r"\s*:?\s*(?P<value>[A-Za-z0-9ÄÖÜäöü][\w/.\-ÄÖÜäöü]*(?: [\w/.\-ÄÖÜäöü]+){0,3})",
)
_MATTER = re.compile(r"^(?:in (?:der |den )?sachen?|mandat|mandant|betreff|betr\.|az\.?|subject)\s*:?\s*(.+)$", _LINE)
_MATTER_VERSUS = re.compile(r"([^\n,;:]+?\s\./\.\s[^\n,;]+?)(?=\s+[–-]\s|\s+wegen\s|[,;]|$)", re.M)
# Zero-width, so overlapping signs ("./. ./. X") are all found.
_VERSUS_SIGN = re.compile(r"(?=\s\./\.\s)")


def find_reference_numbers(text: str, case_numbers: Iterable[str]) -> list[str]:
    """Labeled references (Unser Zeichen, Vertragsnummer, ...) in the opening, then case numbers."""
    found = []
    for match in _REFERENCE_LABELS.finditer(text[: OPENING_CHARS * 2]):
        value = re.split(r"\s{2,}|\s+(?:vom|Datum|Seite)\b", match.group("value"))[0].rstrip(".,;")
        if re.search(r"\d", value):  # "das Aktenzeichen des Verfahrens" names no reference
            found.append(value)
    return _unique([*found, *case_numbers])


def find_matter(text: str) -> str | None:
    """A matter named in the opening: "In Sachen Müller ./. Schmidt", else any "X ./. Y"."""
    opening = text[:OPENING_CHARS]
    for line in _MATTER.finditer(opening):
        versus = _first_versus(line.group(1))
        if versus:
            return " ".join(versus.group(1).split())
        if line.group(0).lower().startswith(("in sache", "in der sache", "in den sachen", "mandat")):
            return line.group(1).strip()
    versus = _first_versus(opening)
    return " ".join(versus.group(1).split()) if versus else None


def _first_versus(text: str) -> re.Match[str] | None:
    """`_MATTER_VERSUS.search(text)`, tried only where a "./." stands.

    A plain search retries the lazy left side from every position of a long
    line (quadratic on a page of prose); a match can only begin where the run
    of text holding a "./." begins, so only those starts are tried.
    """
    for sign in _VERSUS_SIGN.finditer(text):
        start = max(text.rfind(stop, 0, sign.start()) for stop in "\n,;:") + 1
        versus = _MATTER_VERSUS.match(text, start)
        if versus:
            return versus
    return None


# --------------------------------------------------------------------- titles

_GENERIC_TITLE = re.compile(
    r"^(microsoft (word|powerpoint|excel)\s*-|untitled|ohne titel|unbenannt|dokument\s*\d*$|document\s*\d*$)|\.(docx?|pdf|rtf|odt)$",
    re.I,
)
_SUBJECT_LINE = re.compile(r"^(?:Betreff|Betr\.|Subject|Re|AW|WG)\s*:\s*(.{3,200})$", re.MULTILINE | re.I)
# Notes also label their subject "Thema:" or "Gegenstand:"; in a contract these words head clauses.
_NOTE_SUBJECT_LINE = re.compile(r"^(?:Betreff|Betr\.|Subject|Re|Thema|Gegenstand)\s*:\s*(.{3,200})$", re.M | re.I)
_REPLY_PREFIX = re.compile(r"^(?:(?:AW|WG|Antw|Re|Fwd?|FW)\s*:\s*)+", re.I)
# Headings run to 20 lines down: a brief's letterhead and court address come first.
HEADING_LINES = 20
_FILE_NOTE = re.compile(r"^(?P<kind>\w*(?:notiz|vermerk))\b(?P<rest>.*)$", re.I)
_NOTE_DATE = _dated(r"\s*(?:vom|am)\s+", r"\s*$")
_CALLER = re.compile(r"^(?:anrufer(?:in)?|anruf von|gesprächspartner(?:in)?)\s*:\s*(?P<who>[^(,\n]+)", re.I | re.M)
# Lines above a salutation that belong to the address or reference block, not to a subject.
_ADDRESS_LINE = re.compile(r"\b\d{5}\b|^postfach\b|@|^(?:tel|fax|telefon)\b", re.I)
_REFERENCE_LINE = re.compile(
    r"^(?:unser|ihr|ihre)\s+(?:zeichen|schreiben|nachricht|e-mail|az\.?)\b|^az\.|^(?:our|your)\s+ref", re.I
)
_CONTINUATION = re.compile(r"^(?:zur|zum|zu|über|für|betreffend|bezüglich|on|regarding|concerning)\s", re.I)
_PLEADING_SUBJECT = re.compile(r"^wegen\s*:?\s+(?P<what>[^\n]{3,80}?)\s*$", re.I | re.M)
_NOT_A_HEADING = re.compile(
    r"@|^\d{5}\s|^(seite|page)\s+\d|^(tel|fax|telefon|e-mail|www\.|http)|^(from|to|cc|date|von|an|datum|stand):|[,;]$"
    r"|^(entwurf|draft|vertraulich|confidential|privileged|muster)\b|^\(|rechtsanw|kanzlei|attorneys|partg|\bllp\b"
    r"|^an das\b|^\w*gericht\w*\b",
    re.I,
)


def is_generic_title(title: str) -> bool:
    """A file's title property that names a template or a file, not the document."""
    return bool(_GENERIC_TITLE.search(title.strip()))


def find_title(
    text: str, converter_title: str | None, doc_type: str | None, identifiers: list[Identifier]
) -> str | None:
    """What a lawyer calls the document; the rule per kind is in tests/fixtures/firm-documents/README.md."""
    if doc_type and doc_type.startswith("doc_type:decision"):
        composed = _decision_title(text, doc_type, identifiers)
        if composed:
            return composed
    found = _note_title(text) or _subject_title(text)
    if found:
        return found
    if converter_title and not is_generic_title(converter_title):
        return converter_title.strip()
    return _type_heading_title(text) or _first_plain_line(text)


def _note_title(text: str) -> str | None:
    """A note heading that names only its kind (and date) takes its subject: "Vermerk: Verjährung …"."""
    heading = next((m for m in map(_FILE_NOTE.match, head_lines(text, 5)) if m), None)
    if heading is None:
        return None
    if _NOTE_DATE.sub("", heading.group("rest")).strip(" :–-"):
        return heading.group(0)
    kind = heading.group("kind")
    subject = _labelled_subject(text, _NOTE_SUBJECT_LINE)
    if subject is None and kind.lower().startswith("telefon"):
        subject = _call_subject(text)
    return f"{kind}: {subject}" if subject else heading.group(0)


def _call_subject(text: str) -> str | None:
    """A phone note without a subject is known by the call: "Anruf Herr Meier, 4.3.2024"."""
    caller = _CALLER.search(text[:OPENING_CHARS])
    if caller is None:
        return None
    when = _field_date_match(text[:OPENING_CHARS])
    who = caller.group("who").strip()
    return f"Anruf {who}, {when.group(0)}" if when else f"Anruf {who}"


def _subject_title(text: str) -> str | None:
    return _labelled_subject(text) or _unlabelled_subject(text[:OPENING_CHARS])


def _labelled_subject(text: str, label: re.Pattern[str] = _SUBJECT_LINE) -> str | None:
    """The labelled subject without "AW:", "WG:", "Re:": a reply is about what the first message was."""
    subject = label.search(text[:OPENING_CHARS])
    if subject is None:
        return None
    return _REPLY_PREFIX.sub("", subject.group(1)).strip() or None


def _unlabelled_subject(opening: str) -> str | None:
    """DIN 5008 letters drop the "Betreff:" label: the subject is the paragraph above the salutation."""
    salutation = _SALUTATION.search(opening)
    if salutation is None:
        return None
    block = re.split(r"\n[ \t]*\n", opening[: salutation.start()].rstrip())[-1]
    lines = [cell for cell in _cells(block) if not _REFERENCE_LINE.match(cell) and not _is_date_cell(cell)]
    if not lines or len(lines) > 2 or any(_ADDRESS_LINE.search(line) for line in lines):
        return None
    return " ".join(lines)


def _is_date_cell(cell: str) -> bool:
    return bool(_DATE_ALONE.match(cell) or _PLACE_DATE.match(cell) or _DATE_FIELD.match(cell))


def _type_heading_title(text: str) -> str | None:
    """The heading that names the kind of document, with its continuation line and a pleading's "wegen"."""
    head = head_lines(text, HEADING_LINES)
    for index, line in enumerate(head):
        if _names_document_type(line):
            following = head[index + 1] if index + 1 < len(head) else ""
            title = f"{line} {following}" if _CONTINUATION.match(following) and len(following) <= 160 else line
            return _with_pleading_subject(title, text)
    return None


def _names_document_type(line: str) -> bool:
    if len(line) > 120 or line.endswith((".", ",", ";", ":")):
        return False
    starts = (pattern for pattern, _ in (*_PLEADING_TYPES, *_MEMO_TYPES))
    return any(p.match(line) for p in starts) or any(p.search(line) for p, _ in _HEADING_PATTERNS)


def _with_pleading_subject(title: str, text: str) -> str:
    """ "Klage" with its rubrum's "wegen: Kündigungsschutz" is "Klage wegen Kündigungsschutz"."""
    if " wegen " in title or not any(pattern.match(title) for pattern, _ in _PLEADING_TYPES):
        return title
    subject = _PLEADING_SUBJECT.search(text[:OPENING_CHARS])
    return f"{title} wegen {subject.group('what')}" if subject else title


def _first_plain_line(text: str) -> str | None:
    """The first line that may be a heading; a letter's body below the salutation names no title."""
    salutation = _SALUTATION.search(text, 0, OPENING_CHARS)
    for line in head_lines(text[: salutation.start()] if salutation else text):
        if 3 <= len(line) <= 120 and not _NOT_A_HEADING.search(line) and re.search(r"[A-Za-zÄÖÜäöü]{3}", line):
            return line
    return None


_COURT_LINE = re.compile(r"^(bundes\w*gericht\w*|\w*gericht\w*(\s+[A-ZÄÖÜ][\w.-]+){0,3}|\w+gerichtshof)$", re.I)
_COURT_SHORT = {
    "bundesgerichtshof": "BGH",
    "bundesverfassungsgericht": "BVerfG",
    "bundesarbeitsgericht": "BAG",
    "bundesfinanzhof": "BFH",
    "bundessozialgericht": "BSG",
    "bundesverwaltungsgericht": "BVerwG",
}


def _decision_title(text: str, doc_type: str, identifiers: list[Identifier]) -> str | None:
    """"BGH, Urteil vom 12.03.2020 – VIII ZR 12/19": how German lawyers cite a decision."""
    court = next((line for line in head_lines(text) if _COURT_LINE.match(line)), None)
    kind = {"doc_type:decision.judgment": "Urteil", "doc_type:decision.order": "Beschluss"}.get(doc_type, "Bescheid")
    when = find_doc_date(text, doc_type)
    case = next((i.normalized for i in identifiers if i.kind == "case_number"), None)
    if not (court or case):
        return None
    parts = [_COURT_SHORT.get(court.lower(), court.title() if court.isupper() else court) if court else None]
    parts.append(f"{kind} vom {when:%d.%m.%Y}" if when else kind)
    title = ", ".join(part for part in parts if part)
    return f"{title} – {case}" if case else title


# -------------------------------------------------------------------- clauses

_CLAUSE_TYPES: tuple[tuple[str, str], ...] = (
    (r"außerordentliche kündigung|fristlose kündigung", "clause_type:termination.extraordinary"),
    (r"kündigung|beendigung", "clause_type:termination"),
    (r"laufzeit|mietdauer|mietzeit|vertragsdauer|vertragsbeginn|dauer des", "clause_type:term"),
    (r"haftungsbeschränkung|haftungsbegrenzung|haftungsausschluss", "clause_type:liability.limitation"),
    (r"haftung", "clause_type:liability"),
    (r"freistellung", "clause_type:indemnity"),
    (r"gewährleistung|mängel|garantie", "clause_type:warranty"),
    (r"vertraulichkeit|geheimhaltung|verschwiegenheit", "clause_type:confidentiality"),
    (r"datenschutz", "clause_type:data_protection"),
    (r"wettbewerbsverbot|konkurrenzschutz|wettbewerb", "clause_type:non_compete"),
    (r"gerichtsstand", "clause_type:jurisdiction"),
    (r"anwendbares recht|rechtswahl", "clause_type:governing_law"),
    (r"schiedsgericht|schiedsklausel|schlichtung|mediation|streitbeilegung", "clause_type:dispute_resolution"),
    (r"salvatorisch|teilunwirksamkeit|unwirksamkeit einzelner", "clause_type:severability"),
    (r"schriftform", "clause_type:written_form"),
    (r"kaution|mietsicherheit|sicherheitsleistung|bürgschaft", "clause_type:security_deposit"),
    (r"wertsicherung|indexmiete|staffelmiete|mieterhöhung|preisanpassung", "clause_type:payment.price_adjustment"),
    (r"\bmiete\b|nebenkosten|betriebskosten|mietzins", "clause_type:payment.rent"),
    (r"vergütung|zahlung|honorar|\bpreis|gehalt|entgelt|bezüge", "clause_type:payment"),
    (r"schönheitsreparatur|instandhaltung|instandsetzung|reparatur", "clause_type:maintenance"),
    (r"vertragsstrafe", "clause_type:penalty"),
    (r"höhere gewalt|force majeure", "clause_type:force_majeure"),
    (r"abtretung|übertragung von rechten|rechtsnachfolge", "clause_type:assignment"),
    (r"nutzungsrecht|urheberrecht|arbeitsergebnis|schutzrecht|erfindung", "clause_type:intellectual_property"),
    (r"versicherung", "clause_type:insurance"),
    (r"arbeitszeit", "clause_type:working_time"),
    (r"urlaub", "clause_type:vacation"),
    (r"probezeit", "clause_type:probation"),
    (r"vertragsgegenstand|mietgegenstand|mietsache|mieträume|gegenstand des vertrages|leistungsumfang|tätigkeit", "clause_type:subject_matter"),
)
_CLAUSE_PATTERNS = tuple((re.compile(pattern, re.IGNORECASE), node) for pattern, node in _CLAUSE_TYPES)


def classify_clause_heading(heading: str) -> str | None:
    for pattern, node in _CLAUSE_PATTERNS:
        if pattern.search(heading):
            return node
    return None


def find_clauses(text: str) -> list[NotableClause]:
    """Clauses under "§ N Überschrift" / "N. Überschrift" headings whose heading names a clause type."""
    headings = clause_headings(text, markdown=False)
    clauses = []
    for index, heading in enumerate(headings):
        clause_type = classify_clause_heading(heading.title)
        if clause_type is None:
            continue
        end = headings[index + 1].start if index + 1 < len(headings) else _body_end(text, heading.end)
        clauses.append(NotableClause(locus=heading.locus, clause_type=clause_type, text=_excerpt(text[heading.start : end])))
    return clauses


def _body_end(text: str, start: int) -> int:
    """The last clause ends where the signature block begins: at the place-and-date line."""
    signature = _SIGNATURE_LINE.search(text, start)
    return signature.start() if signature else len(text)


def _excerpt(text: str) -> str:
    text = text.strip()
    if len(text) <= CLAUSE_EXCERPT_CHARS:
        return text
    cut = text.rfind(" ", 0, CLAUSE_EXCERPT_CHARS)
    return text[: cut if cut > 0 else CLAUSE_EXCERPT_CHARS].rstrip() + " …"


def _unique(values: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(value for value in values if value))


# ----------------------------------------------------------------- extractors


class RuleBasedExtractor:
    """Deterministic German rules; the offline default and the fallback nobody has to pay for."""

    def __init__(self, ontology: Ontology | None = None) -> None:
        self._ontology = ontology or load_ontology()

    @property
    def producer(self) -> str:
        return f"rules:{RULES_VERSION}:ids{identifier_rules_version()}"

    def extract(self, text: str, *, title: str | None = None) -> DocumentMetadata:
        from ki_core.identifiers import extract as extract_identifiers

        identifiers = extract_identifiers(text)
        # Classified once: find_doc_date would classify again without the title, to the same type
        # (a title only adds a candidate heading), at the cost of the date rules themselves.
        doc_type = classify_doc_type(text, title)
        is_contract = bool(doc_type) and doc_type.startswith("doc_type:contract")
        return DocumentMetadata(
            title=find_title(text, title, doc_type, identifiers),
            doc_type=doc_type if doc_type in self._ontology else None,
            matter=find_matter(text),
            reference_numbers=find_reference_numbers(text, (i.normalized for i in identifiers if i.kind == "case_number")),
            parties=find_parties(text, doc_type),
            identifiers=_unique(i.normalized for i in identifiers),
            doc_date=doc_date_of_type(text, doc_type),
            language=detect_language(text),
            notable_clauses=find_clauses(text) if is_contract else [],
        )


# The model sees the start (type, parties, most clauses) and the end (jurisdiction, written form, signatures).
LLM_HEAD_CHARS = 18000
LLM_TAIL_CHARS = 6000

LLM_INSTRUCTIONS = """Du extrahierst Metadaten aus Dokumenten einer deutschen Anwaltskanzlei.
Antworte ausschließlich mit JSON nach dem vorgegebenen Schema.
- title: der Titel des Dokuments, wie er im Dokument steht (bei Entscheidungen: "Gericht, Urteil vom TT.MM.JJJJ – Aktenzeichen").
- doc_type: genau eine ID aus der Liste der Dokumenttypen, so spezifisch wie belegt; null, wenn keine passt.
- matter: die Sache, wenn genannt (z. B. "Müller ./. Schmidt"), sonst null.
- reference_numbers: Aktenzeichen, Geschäftszeichen, "Unser Zeichen", "Ihr Zeichen", Vertrags- und Rechnungsnummern, wörtlich.
- parties: beteiligte Personen und Unternehmen mit ihrer Rolle (Kläger, Beklagte, Vermieter, Mieter, Arbeitgeber, Auftraggeber, ...).
- identifiers: immer eine leere Liste (Normen und Aktenzeichen werden maschinell ermittelt).
- doc_date: Datum des Dokuments (Entscheidungsdatum, Briefdatum, Unterzeichnungsdatum) als JJJJ-MM-TT.
- language: "de" oder "en".
- notable_clauses: nur bei Verträgen; je Klausel locus ("§ 5", "Ziffer 3.2"), clause_type (eine ID aus der Liste der Klauseltypen) und der Wortlaut (höchstens 1200 Zeichen).
Erfinde nichts: was nicht im Text steht, ist null oder eine leere Liste."""


class LLMExtractor:
    """Metadata by the chat gateway, held to the ontology and to our own identifier normalization."""

    def __init__(self, gateway: ChatGateway, ontology: Ontology | None = None) -> None:
        self._gateway = gateway
        self._ontology = ontology or load_ontology()

    @property
    def producer(self) -> str:
        return f"llm:{self._gateway.model}:ids{identifier_rules_version()}"

    def extract(self, text: str, *, title: str | None = None) -> DocumentMetadata:
        from ki_core.identifiers import extract as extract_identifiers

        answer = self._gateway.complete_json(self._messages(text, title), DocumentMetadata)
        identifiers = extract_identifiers(text)
        return answer.model_copy(
            update={
                "doc_type": self._ontology.resolve(OntologyKind.DOC_TYPE, answer.doc_type),
                "identifiers": _unique(i.normalized for i in identifiers),
                "language": answer.language or detect_language(text),
                "notable_clauses": [
                    clause.model_copy(
                        update={"clause_type": self._ontology.resolve(OntologyKind.CLAUSE_TYPE, clause.clause_type)}
                    )
                    for clause in answer.notable_clauses
                ],
            }
        )

    def _messages(self, text: str, title: str | None) -> list[dict[str, str]]:
        vocabulary = "\n".join(
            f"{node_id}: {self._ontology.label(node_id)}"
            for kind in (OntologyKind.DOC_TYPE, OntologyKind.CLAUSE_TYPE)
            for node_id in self._ontology.ids(kind)
        )
        shown = text
        if len(text) > LLM_HEAD_CHARS + LLM_TAIL_CHARS:
            shown = f"{text[:LLM_HEAD_CHARS]}\n\n[…]\n\n{text[-LLM_TAIL_CHARS:]}"
        header = f"Dateititel: {title}\n\n" if title else ""
        return [
            {"role": "system", "content": f"{LLM_INSTRUCTIONS}\n\nDokumenttypen und Klauseltypen:\n{vocabulary}"},
            {"role": "user", "content": f"{header}{shown}"},
        ]
