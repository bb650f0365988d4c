"""Turn the bytes of a stored file into normalized plain text.

One converter per format; all of them end in `normalize_text`, so every
version's text has NFC, `\\n` line ends, single spaces and at most one blank
line in a row: block boundaries are blank lines, line breaks single newlines,
which is what the chunker cuts at. Anything we cannot read raises
`ConversionError` with a one-line reason that is recorded on the version row.
A mail's attachments come back as bytes beside its text (`ConvertedText.attachments`);
the ingest stage converts each one as a document of its own. What the parsers
warn or log while a file converts belongs to that file: it joins the failure
reason, or `ConvertedText.notes` when the file converts.
"""

from __future__ import annotations

import email
import email.policy
import io
import logging
import mimetypes
import re
import threading
import unicodedata
import warnings
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email.message import EmailMessage
from pathlib import PurePosixPath

from pydantic import BaseModel, ConfigDict

log = logging.getLogger(__name__)

DEFAULT_MAX_BYTES = 50 * 1024 * 1024

MEDIA_PDF = "application/pdf"
MEDIA_DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
MEDIA_HTML = "text/html"
MEDIA_EML = "message/rfc822"
MEDIA_MSG = "application/vnd.ms-outlook"
MEDIA_TEXT = "text/plain"
MEDIA_MARKDOWN = "text/markdown"
MAIL_MEDIA_TYPES = (MEDIA_EML, MEDIA_MSG)

_MEDIA_BY_TYPE = {
    MEDIA_PDF: MEDIA_PDF,
    MEDIA_DOCX: MEDIA_DOCX,
    MEDIA_HTML: MEDIA_HTML,
    "application/xhtml+xml": MEDIA_HTML,
    MEDIA_EML: MEDIA_EML,
    MEDIA_MSG: MEDIA_MSG,
    "application/x-msg": MEDIA_MSG,
    MEDIA_TEXT: MEDIA_TEXT,
    MEDIA_MARKDOWN: MEDIA_MARKDOWN,
    "text/x-markdown": MEDIA_MARKDOWN,
}
_MEDIA_BY_SUFFIX = {
    ".pdf": MEDIA_PDF,
    ".docx": MEDIA_DOCX,
    ".html": MEDIA_HTML,
    ".htm": MEDIA_HTML,
    ".xhtml": MEDIA_HTML,
    ".eml": MEDIA_EML,
    ".msg": MEDIA_MSG,
    ".txt": MEDIA_TEXT,
    ".text": MEDIA_TEXT,
    ".md": MEDIA_MARKDOWN,
    ".markdown": MEDIA_MARKDOWN,
}


class ConversionError(Exception):
    """The file cannot be turned into text; permanent, recorded on the version."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Attachment(BaseModel):
    """A file a mail carries, in the mail's order."""

    model_config = ConfigDict(frozen=True)

    filename: str
    media_type: str | None = None
    data: bytes = b""
    # Why the file cannot be taken out of the mail; the ingest stage records it as failed.
    unavailable: str | None = None


class ConvertedText(BaseModel):
    text: str
    media_type: str
    title: str | None = None
    # Primary language subtag the file declares ("de"), not a detection.
    language: str | None = None
    converter: str
    attachments: tuple[Attachment, ...] = ()
    # What the parsers warned or logged while converting it ("pypdf: incorrect startxref pointer(1)").
    notes: tuple[str, ...] = ()
    # Where each page starts in `text` (PDF only); a page without text holds no more than the blank line.
    page_starts: tuple[int, ...] = ()


def convert(
    data: bytes,
    *,
    filename: str,
    media_type: str | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> ConvertedText:
    """Text of `data`, chosen by `media_type` when it names a format we read, else by suffix."""
    if len(data) > max_bytes:
        raise ConversionError(f"file too large: {len(data)} bytes, limit {max_bytes}")
    if not data:
        raise ConversionError("empty file")
    kind = resolve_media_type(filename, media_type)
    result = _run_converter(kind, data)
    text = normalize_text(result.text)
    if not text:
        reason = f"no text in {_FORMAT_NAMES[kind]}{_EMPTY_HINTS.get(kind, '')}"
        raise ConversionError(_with_notes(reason, result.notes))
    if result.notes:
        log.debug("%s converted with notes: %s", filename, "; ".join(result.notes))
    title = normalize_text(result.title).replace("\n", " ") if result.title else None
    if text != result.text:  # page offsets are of the converter's text; normalized anew they would be off
        result = result.model_copy(update={"page_starts": ()})
    return result.model_copy(update={"text": text, "title": title or None})


def _run_converter(kind: str, data: bytes) -> ConvertedText:
    """The converter's result with the parsers' notes; a failure's reason carries them."""
    with library_output_captured() as output:
        try:
            result = _CONVERTERS[kind](data)
        except ConversionError as exc:
            raise ConversionError(_with_notes(exc.reason, output.notes())) from exc
        except Exception as exc:  # noqa: BLE001 - parsers raise anything on broken input
            reason = f"unreadable {_FORMAT_NAMES[kind]}: {_one_line(exc)}"
            raise ConversionError(_with_notes(reason, output.notes())) from exc
        return result.model_copy(update={"notes": output.notes()})


def _with_notes(reason: str, notes: tuple[str, ...]) -> str:
    return f"{reason} ({'; '.join(notes)})" if notes else reason


# ------------------------------------------------------------ library output

# The parsers' loggers, and ours: unhandled, logging's last resort printed their records on stderr
# with no file name ("EOF marker not found" in the middle of `ki ingest`).
LIBRARY_LOGGERS = ("pypdf", "docx", "bs4", "extract_msg", "olefile", __name__)
# A broken PDF repeats one complaint per object, hundreds of times: a reason keeps a few, distinct.
MAX_NOTES = 5
NOTE_CHARS = 200
# The warnings filters and the loggers' propagation are process-wide, so captures take turns.
# Little is lost: pypdf is pure Python and holds the GIL, so threads never converted in parallel.
_CAPTURE_TURN = threading.RLock()


@dataclass
class LibraryOutput:
    """Log records and warnings the parsers emitted while one file converted."""

    logged: list[str] = field(default_factory=list)
    warned: list[warnings.WarningMessage] = field(default_factory=list)

    def notes(self) -> tuple[str, ...]:
        """`library: message` per distinct complaint, log records first, at most MAX_NOTES."""
        lines = [*self.logged, *(f"{w.category.__name__}: {w.message}" for w in self.warned)]
        distinct = dict.fromkeys(" ".join(line.split())[:NOTE_CHARS] for line in lines)
        return tuple(distinct)[:MAX_NOTES]


class _NoteHandler(logging.Handler):
    def __init__(self, output: LibraryOutput) -> None:
        super().__init__(logging.WARNING)
        self.output = output

    def emit(self, record: logging.LogRecord) -> None:
        self.output.logged.append(f"{record.name.split('.')[0]}: {record.getMessage()}")


@contextmanager
def library_output_captured() -> Iterator[LibraryOutput]:
    """Within the block the parsers' warnings and log records (WARNING and up) land here, not on stderr."""
    output = LibraryOutput()
    handler = _NoteHandler(output)
    loggers = [logging.getLogger(name) for name in LIBRARY_LOGGERS]
    with _CAPTURE_TURN, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        output.warned = caught
        propagated = [logger.propagate for logger in loggers]
        for logger in loggers:
            logger.addHandler(handler)
            logger.propagate = False
        try:
            yield output
        finally:
            for logger, propagate in zip(loggers, propagated, strict=True):
                logger.removeHandler(handler)
                logger.propagate = propagate


def supported_file_name(filename: str) -> bool:
    """Whether a file of this name can be converted at all (by its suffix, as a folder file is)."""
    return PurePosixPath(filename.replace("\\", "/")).suffix.lower() in _MEDIA_BY_SUFFIX


def resolve_media_type(filename: str, media_type: str | None) -> str:
    declared = (media_type or "").split(";")[0].strip().lower()
    if declared in _MEDIA_BY_TYPE:
        return _MEDIA_BY_TYPE[declared]
    suffix = PurePosixPath(filename.replace("\\", "/")).suffix.lower()
    if suffix in _MEDIA_BY_SUFFIX:
        return _MEDIA_BY_SUFFIX[suffix]
    if suffix:
        raise ConversionError(f"unsupported file type {suffix}")
    shown = f" ({declared})" if declared else ""
    raise ConversionError(f"unsupported file type: no file name suffix{shown}")


# ------------------------------------------------------------------ normalize

# Controls (tab, newline and the line breaks aside), soft hyphens and zero-width marks. A regex,
# not str.translate with a table: translate looks every character up in a dict, 5 % of an ingest.
_DROPPED_CHARS = re.compile("[\x00-\x08\x0b\x0e-\x1f\x7f\u00ad\u200b-\u200d\u2060\ufeff]+")
_OTHER_LINE_BREAKS = ("\r", "\x0c", "\u2028", "\u2029", "\x85")
# Horizontal whitespace other than a lone space: a lone space is what it becomes, and replacing
# each of a text's spaces by itself was most of the time the normalization took.
_HORIZONTAL_SPACE = re.compile(r" [^\S\n]+|[^\S\n ][^\S\n]*")
_BLANK_RUNS = re.compile(r"\n{3,}")


def normalize_text(text: str) -> str:
    """NFC, `\\n` only, single spaces, no blank line runs; soft hyphens and controls dropped."""
    text = unicodedata.normalize("NFC", text).replace("\r\n", "\n")
    for line_break in _OTHER_LINE_BREAKS:
        if line_break in text:
            text = text.replace(line_break, "\n")
    text = _DROPPED_CHARS.sub("", text)
    text = _HORIZONTAL_SPACE.sub(" ", text)
    text = "\n".join(line.strip() for line in text.split("\n"))
    return (_BLANK_RUNS.sub("\n\n", text) if "\n\n\n" in text else text).strip()


def decode_text(data: bytes) -> str:
    """UTF-8 (BOM or not), UTF-16 with BOM, else cp1252, the German Windows default.

    A statistical detector guesses wrong on short German files (cp1250, mac_roman);
    cp1252 is what the firm's non-UTF-8 files actually are. latin-1 catches the
    five bytes cp1252 leaves undefined.
    """
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return data.decode("utf-16")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        pass
    if b"\x00" in data:
        raise ConversionError("binary content, not text (NUL bytes, no UTF-16 byte order mark)")
    try:
        return data.decode("cp1252")
    except UnicodeDecodeError:
        return data.decode("latin-1")


def _language_tag(value: object) -> str | None:
    """"de-DE" -> "de"; anything that is not a language tag -> None."""
    match = re.match(r"\s*([A-Za-z]{2,3})(?:[-_][A-Za-z0-9]+)*\s*$", str(value or ""))
    return match.group(1).lower() if match else None


def _one_line(exc: BaseException) -> str:
    message = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {message}"[:300] if message else type(exc).__name__


# ------------------------------------------------------------------------ PDF


def _convert_pdf(data: bytes) -> ConvertedText:
    from pypdf import PdfReader

    if not data.lstrip()[:5] == b"%PDF-":
        raise ConversionError("not a PDF file (no %PDF- header)")
    reader = PdfReader(io.BytesIO(data))
    if reader.is_encrypted and not _opens_without_password(reader):
        raise ConversionError("encrypted PDF (password required)")
    text, starts = joined_pages([page.extract_text() or "" for page in reader.pages])
    metadata = reader.metadata
    root = reader.trailer["/Root"]
    return ConvertedText(
        text=text,
        page_starts=starts,
        media_type=MEDIA_PDF,
        title=str(metadata.title) if metadata is not None and metadata.title else None,
        language=_language_tag(root.get("/Lang")),
        converter="pypdf",
    )


def joined_pages(pages: list[str]) -> tuple[str, tuple[int, ...]]:
    """The pages normalized one by one and joined by a blank line, with where each starts.

    Normalized before joining, so `normalize_text` leaves the joined text as it is and the
    offsets stay true (a normalized page has no blank-line runs and no edge whitespace).
    """
    parts: list[str] = []
    starts: list[int] = []
    length = 0
    for page in pages:
        normalized = normalize_text(page)
        if normalized and parts:
            length += 2  # the blank line between two pages
        starts.append(length)
        if normalized:
            parts.append(normalized)
            length += len(normalized)
    return "\n\n".join(parts), tuple(starts)


def _opens_without_password(reader) -> bool:
    """Owner-password-only PDFs (print/copy restrictions) open with the empty user password."""
    from pypdf import PasswordType

    return reader.decrypt("") != PasswordType.NOT_DECRYPTED


# ----------------------------------------------------------------------- DOCX


def _convert_docx(data: bytes) -> ConvertedText:
    import docx
    from docx.oxml.ns import qn

    if not zipfile.is_zipfile(io.BytesIO(data)):
        raise ConversionError("not a DOCX (zip) file")
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        if "word/document.xml" not in archive.namelist():
            raise ConversionError("not a DOCX file (zip without word/document.xml)")
    document = docx.Document(io.BytesIO(data))
    blocks = _docx_blocks(document)
    properties = document.core_properties
    default_lang = document.styles.element.find(f"{qn('w:docDefaults')}/{qn('w:rPrDefault')}/{qn('w:rPr')}/{qn('w:lang')}")
    language = properties.language or (default_lang.get(qn("w:val")) if default_lang is not None else None)
    return ConvertedText(
        text="\n\n".join(blocks),
        media_type=MEDIA_DOCX,
        title=properties.title or None,
        language=_language_tag(language),
        converter="python-docx",
    )


def _docx_blocks(container) -> list[str]:
    """Paragraphs and tables in body order; a table row is one line, cells joined by " | "."""
    from docx.table import Table

    blocks = []
    for item in container.iter_inner_content():
        if isinstance(item, Table):
            blocks.append("\n".join(_docx_rows(item)))
        else:
            blocks.append(item.text)
    return blocks


def _docx_rows(table) -> list[str]:
    rows = []
    for row in table.rows:
        cells, seen = [], set()
        for cell in row.cells:
            # A merged cell is returned once per grid column it spans.
            if id(cell._tc) in seen:
                continue
            seen.add(id(cell._tc))
            cells.append(" ".join(" ".join(_docx_blocks(cell)).split()))
        rows.append(" | ".join(cells))
    return rows


# ----------------------------------------------------------------------- HTML

_HTML_DROPPED = {"script", "style", "noscript", "template", "head", "svg", "iframe", "object", "canvas"}
_HTML_BLOCKS = {
    "address", "article", "aside", "blockquote", "body", "caption", "dd", "details", "div", "dl", "dt",
    "fieldset", "figcaption", "figure", "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6", "header",
    "hr", "li", "main", "nav", "ol", "p", "section", "summary", "table", "ul",
}  # fmt: skip


def _convert_html(data: bytes) -> ConvertedText:
    soup = _parse_html(data)
    title_tag = soup.find("title")
    html_tag = soup.find("html")
    language = html_tag.get("lang") if html_tag is not None else None
    if not language:
        meta = soup.find("meta", attrs={"http-equiv": re.compile("^content-language$", re.I)})
        language = meta.get("content") if meta is not None else None
    parts: list[str] = []
    _html_text(soup, parts)
    return ConvertedText(
        text="".join(parts),
        media_type=MEDIA_HTML,
        title=title_tag.get_text() if title_tag is not None else None,
        language=_language_tag(language),
        converter="beautifulsoup4",
    )


def _parse_html(data: bytes | str):
    from bs4 import BeautifulSoup, MarkupResemblesLocatorWarning, XMLParsedAsHTMLWarning

    with warnings.catch_warnings():
        # Advice about the input (looks like a URL, looks like XML), not a failure.
        warnings.simplefilter("ignore", MarkupResemblesLocatorWarning)
        warnings.simplefilter("ignore", XMLParsedAsHTMLWarning)
        return BeautifulSoup(data, "html.parser")


def _html_text(node, parts: list[str]) -> None:
    """Collapse source whitespace like a browser; blocks become blank lines, <br> a newline."""
    from bs4 import NavigableString, Tag
    from bs4.element import PreformattedString

    for child in node.children:
        if isinstance(child, PreformattedString):  # comments, doctype, CDATA
            continue
        if isinstance(child, NavigableString):
            parts.append(re.sub(r"\s+", " ", str(child)))
        elif isinstance(child, Tag):
            _html_tag_text(child, parts)


def _html_tag_text(tag, parts: list[str]) -> None:
    name = tag.name.lower()
    if name in _HTML_DROPPED:
        return
    if name == "br":
        parts.append("\n")
    elif name == "pre":
        parts.append(f"\n\n{tag.get_text()}\n\n")
    elif name == "tr":
        parts.append(f"\n{_html_row(tag)}\n")
    else:
        block = name in _HTML_BLOCKS
        parts.append("\n\n" if block else "")
        _html_text(tag, parts)
        parts.append("\n\n" if block else "")


def _html_row(row) -> str:
    cells = []
    for cell in row.find_all(["td", "th"], recursive=False):
        parts: list[str] = []
        _html_text(cell, parts)
        cells.append(" ".join("".join(parts).split()))
    return " | ".join(cells)


# ------------------------------------------------------------------------ EML

_HEADER_FIELDS = ("From", "To", "Cc", "Date", "Subject")


def _convert_eml(data: bytes) -> ConvertedText:
    message = email.message_from_bytes(data, policy=email.policy.default)
    if not any(message[field] for field in ("From", "To", "Date", "Subject")):
        raise ConversionError("not an e-mail (no From, To, Date or Subject header)")
    headers = [(field, str(message[field])) for field in _HEADER_FIELDS if message[field]]
    body = _eml_body(message)
    subject = str(message["Subject"]) if message["Subject"] else None
    return ConvertedText(
        text=_mail_text(headers, body),
        media_type=MEDIA_EML,
        title=subject,
        language=_language_tag(message["Content-Language"]),
        converter="email",
        attachments=tuple(_eml_attachments(message)),
    )


def _eml_body(message: EmailMessage) -> str:
    plain = message.get_body(preferencelist=("plain",))
    if plain is not None:
        return _part_text(plain)
    html = message.get_body(preferencelist=("html",))
    return _html_to_text(_part_text(html)) if html is not None else ""


def _part_text(part: EmailMessage) -> str:
    try:
        return part.get_content()
    except (LookupError, UnicodeError):
        # Unknown or lying charset header: decode the raw bytes ourselves.
        return decode_text(part.get_payload(decode=True) or b"")


def _eml_attachments(message: EmailMessage) -> list[Attachment]:
    """The files the mail carries, in MIME order; the body parts and inline images are the mail itself."""
    bodies = {id(part) for part in (message.get_body(("plain",)), message.get_body(("html",))) if part is not None}
    return [_eml_attachment(part) for part in _leaf_parts(message) if id(part) not in bodies and _is_attachment(part)]


def _leaf_parts(message: EmailMessage) -> list[EmailMessage]:
    """Non-multipart parts, depth first; an attached message is one leaf, not opened here."""
    if not message.is_multipart() or message.get_content_type() == MEDIA_EML:
        return [message]
    return [leaf for part in message.iter_parts() for leaf in _leaf_parts(part)]


def _is_attachment(part: EmailMessage) -> bool:
    if part.get_content_type() == MEDIA_EML:
        return True
    if part.get_content_maintype() == "image" and (part["Content-ID"] or part.get_content_disposition() == "inline"):
        return False  # a picture the HTML body shows (a signature logo)
    # Apple Mail sends attached files "inline", with a name.
    return part.get_content_disposition() == "attachment" or bool(part.get_filename())


def _eml_attachment(part: EmailMessage) -> Attachment:
    media_type = part.get_content_type()
    filename = (part.get_filename() or "").strip() or f"attachment{mimetypes.guess_extension(media_type) or ''}"
    try:
        if media_type == MEDIA_EML:
            data = part.get_payload(0).as_bytes()
        else:
            data = part.get_payload(decode=True) or b""
    except Exception as exc:  # noqa: BLE001 - a broken part must not cost the mail its text
        return Attachment(filename=filename, media_type=media_type, unavailable=f"unreadable MIME part: {_one_line(exc)}")
    return Attachment(filename=filename, media_type=media_type, data=data)


def _html_to_text(html: str) -> str:
    parts: list[str] = []
    _html_text(_parse_html(html), parts)
    return "".join(parts)


def _mail_text(headers: list[tuple[str, str]], body: str) -> str:
    """A header block, a blank line, the body: the header lines are searchable text too."""
    block = "\n".join(f"{field}: {' '.join(value.split())}" for field, value in headers)
    return f"{block}\n\n{body}"


# ------------------------------------------------------------------------ MSG


def _convert_msg(data: bytes) -> ConvertedText:
    import extract_msg
    import olefile

    if not olefile.isOleFile(data=data):
        raise ConversionError("not an Outlook MSG (OLE compound) file")
    with olefile.OleFileIO(data) as container:
        if not container.exists("__properties_version1.0"):
            raise ConversionError("OLE compound file without MAPI properties: not an Outlook message")
    message = extract_msg.openMsg(data)
    try:
        if not isinstance(message, extract_msg.msg_classes.MessageBase):
            raise ConversionError(f"MSG file holds no e-mail ({type(message).__name__})")
        return _msg_text(message)
    finally:
        message.close()


def _msg_text(message) -> ConvertedText:
    values = {
        "From": message.sender,
        "To": message.to,
        "Cc": message.cc,
        "Date": message.date.strftime("%a, %d %b %Y %H:%M:%S %z").strip() if message.date else None,
        "Subject": message.subject,
    }
    headers = [(field, str(value)) for field, value in values.items() if value]
    body = message.body
    if not (body and body.strip()) and message.htmlBody:
        body = _html_to_text(message.htmlBody)
    return ConvertedText(
        text=_mail_text(headers, body or ""),
        media_type=MEDIA_MSG,
        title=message.subject or None,
        converter="extract-msg",
        attachments=tuple(_msg_attachment(number, item) for number, item in enumerate(message.attachments, start=1)),
    )


# extract-msg is GPL-3.0 (this project is Apache-2.0): the mail text stays where it was, and we
# lean on it no further. Its attachments are named, and recorded as failed with the way out.
MSG_ATTACHMENTS_UNSUPPORTED = "attachments of Outlook .msg files are not extracted; save the mail as .eml to index them"


def _msg_attachment(number: int, item) -> Attachment:
    try:
        name = (item.getFilename() or "").strip("\x00 \t\r\n")
    except Exception as exc:  # noqa: BLE001 - only the name is at stake; say so and go on
        log.warning("no name for attachment %d of an Outlook message: %s", number, _one_line(exc))
        name = ""
    return Attachment(filename=name or f"attachment-{number}", unavailable=MSG_ATTACHMENTS_UNSUPPORTED)


# ----------------------------------------------------------------- plain text


def _convert_text(data: bytes) -> ConvertedText:
    return ConvertedText(text=decode_text(data), media_type=MEDIA_TEXT, converter="text")


def _convert_markdown(data: bytes) -> ConvertedText:
    text = decode_text(data)
    heading = re.search(r"^#[ \t]+(.+?)[ \t#]*$", text, re.MULTILINE)
    return ConvertedText(
        text=text,
        media_type=MEDIA_MARKDOWN,
        title=heading.group(1) if heading else None,
        converter="text",
    )


_CONVERTERS: dict[str, Callable[[bytes], ConvertedText]] = {
    MEDIA_PDF: _convert_pdf,
    MEDIA_DOCX: _convert_docx,
    MEDIA_HTML: _convert_html,
    MEDIA_EML: _convert_eml,
    MEDIA_MSG: _convert_msg,
    MEDIA_TEXT: _convert_text,
    MEDIA_MARKDOWN: _convert_markdown,
}
_FORMAT_NAMES = {
    MEDIA_PDF: "PDF",
    MEDIA_DOCX: "DOCX",
    MEDIA_HTML: "HTML",
    MEDIA_EML: "e-mail",
    MEDIA_MSG: "Outlook MSG",
    MEDIA_TEXT: "text file",
    MEDIA_MARKDOWN: "Markdown file",
}
_EMPTY_HINTS = {MEDIA_PDF: " (scanned without a text layer?)"}
