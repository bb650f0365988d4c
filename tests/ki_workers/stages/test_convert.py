"""Conversion of real files the tests generate: text, title, language, and precise failures."""

from __future__ import annotations

import io
import logging
import re
import warnings
import zipfile
from datetime import UTC, datetime
from email.message import EmailMessage

import pytest

from ki_workers.stages.convert import (
    MEDIA_DOCX,
    MEDIA_EML,
    MEDIA_HTML,
    MEDIA_MARKDOWN,
    MEDIA_MSG,
    MEDIA_PDF,
    MEDIA_TEXT,
    MSG_ATTACHMENTS_UNSUPPORTED,
    Attachment,
    ConversionError,
    convert,
    library_output_captured,
    normalize_text,
)
from tests.ki_workers.stages.msg_builder import build_compound_file, build_msg

UMLAUT_LINE = "§ 5 Kündigung – Größe der Räume, Übergabe"


# ------------------------------------------------------------------ builders


def make_pdf(pages: list[list[str]], *, title: str | None = None, lang: str | None = None) -> bytes:
    from reportlab.pdfgen import canvas

    buffer = io.BytesIO()
    pdf = canvas.Canvas(buffer, lang=lang)
    if title:
        pdf.setTitle(title)
    for lines in pages:
        for number, line in enumerate(lines):
            pdf.drawString(72, 760 - 18 * number, line)
        pdf.showPage()
    pdf.save()
    return buffer.getvalue()


def encrypt_pdf(data: bytes, *, user_password: str, owner_password: str) -> bytes:
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(data)))
    writer.encrypt(user_password, owner_password=owner_password, algorithm="AES-256")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def make_docx() -> bytes:
    import docx

    document = docx.Document()
    document.core_properties.title = "Arbeitsvertrag Jürgen Weiß"
    document.core_properties.language = "de-DE"
    document.add_heading("Arbeitsvertrag", level=1)
    document.add_paragraph(UMLAUT_LINE)
    document.add_paragraph("Die Kündigungsfrist beträgt drei Monate.")
    table = document.add_table(rows=2, cols=2)
    table.cell(0, 0).text = "Vergütung"
    table.cell(0, 1).text = "4.500 € brutto"
    table.cell(1, 0).text = "Urlaub"
    table.cell(1, 1).text = "30 Tage"
    document.add_paragraph("Ort, Datum: München, 12.03.2020")
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def make_eml(*, html_only: bool = False) -> bytes:
    message = EmailMessage()
    message["From"] = "Jörg Müller <mueller@kanzlei.example>"
    message["To"] = "Bärbel Schröder <schroeder@mandant.example>"
    message["Date"] = "Thu, 12 Mar 2020 10:15:00 +0100"
    message["Subject"] = "Kündigung des Mietvertrags – Frist"
    body = "Sehr geehrte Frau Schröder,\n\ndie Kündigungsfrist läuft am 30.06.2020 ab.\n\nMit freundlichen Grüßen"
    if html_only:
        message.set_content(
            "<html><body><p>Sehr geehrte Frau Schröder,</p><p>die Frist läuft ab.</p>"
            "<script>alert(1)</script></body></html>",
            subtype="html",
        )
    else:
        message.set_content(body)
        message.add_alternative("<p>HTML-Fassung</p>", subtype="html")
    message.add_attachment(b"%PDF-1.4", maintype="application", subtype="pdf", filename="anlage.pdf")
    message["Content-Language"] = "de-DE"  # after set_content, which clears Content-* headers
    return message.as_bytes()


def make_mail(*files: tuple[str, bytes, str] | EmailMessage, subject: str = "Unterlagen zur Kündigung",
              body: str = "Anbei die Unterlagen.") -> bytes:
    """A mail with a plain and an HTML body and `files` attached: (file name, bytes, media type) or a message."""
    message = EmailMessage()
    message["From"] = "Jörg Müller <mueller@kanzlei.example>"
    message["To"] = "Bärbel Schröder <schroeder@mandant.example>"
    message["Date"] = "Thu, 12 Mar 2020 10:15:00 +0100"
    message["Subject"] = subject
    message.set_content(body)
    message.add_alternative(f"<p>{body}</p>", subtype="html")
    for item in files:
        if isinstance(item, EmailMessage):
            message.add_attachment(item)
            continue
        filename, data, media_type = item
        maintype, subtype = media_type.split("/")
        message.add_attachment(data, maintype=maintype, subtype=subtype, filename=filename)
    return message.as_bytes()


# ---------------------------------------------------------------------- PDF


def test_pdf_text_title_and_umlauts_survive() -> None:
    data = make_pdf([[UMLAUT_LINE, "Straße 12, 80331 München"], ["Seite zwei"]], title="Mietvertrag Müller")

    result = convert(data, filename="Mietvertrag.pdf")

    assert result.media_type == MEDIA_PDF
    assert result.converter == "pypdf"
    assert result.title == "Mietvertrag Müller"
    assert result.text == f"{UMLAUT_LINE}\nStraße 12, 80331 München\n\nSeite zwei"


def test_pdf_catalog_language_is_the_language_hint() -> None:
    assert convert(make_pdf([["Urteil"]], lang="de-DE"), filename="u.pdf").language == "de"
    assert convert(make_pdf([["Urteil"]]), filename="u.pdf").language is None


def test_pdf_with_only_an_owner_password_is_read() -> None:
    data = encrypt_pdf(make_pdf([["Vertraulich: Übergabeprotokoll"]]), user_password="", owner_password="kanzlei")

    assert convert(data, filename="x.pdf").text == "Vertraulich: Übergabeprotokoll"


def test_pdf_that_needs_a_password_is_an_encrypted_pdf() -> None:
    data = encrypt_pdf(make_pdf([["geheim"]]), user_password="geheim", owner_password="kanzlei")

    with pytest.raises(ConversionError, match=r"^encrypted PDF"):
        convert(data, filename="x.pdf")


def test_pdf_without_text_layer_says_so() -> None:
    with pytest.raises(ConversionError, match=r"^no text in PDF \(scanned"):
        convert(make_pdf([[]]), filename="scan.pdf")


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"Dies ist kein PDF", r"^not a PDF file \(no %PDF- header\)$"),
        (b"%PDF-1.7\n1 0 obj << /Type /Catalog", r"^unreadable PDF: \w+"),
    ],
)
def test_corrupt_pdf_raises_with_reason(data: bytes, reason: str) -> None:
    with pytest.raises(ConversionError, match=reason):
        convert(data, filename="kaputt.pdf")


def test_truncated_pdf_raises_and_what_pypdf_logged_is_part_of_the_reason(
    capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    data = make_pdf([["Text"]])

    with pytest.raises(ConversionError, match=r"^unreadable PDF: ") as failed:
        convert(data[: len(data) // 3], filename="kaputt.pdf")

    assert failed.value.reason.endswith("(pypdf: EOF marker not found)")
    assert capfd.readouterr().err == "", "no bare library line on stderr"
    assert caplog.records == [], "nothing reached the application's log handlers either"


def test_a_pdf_pypdf_repairs_converts_and_keeps_its_complaints_as_notes(
    capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    data = re.sub(rb"startxref\n\d+", b"startxref\n900", make_pdf([["Vertragstext"]]))

    result = convert(data, filename="repariert.pdf")

    assert result.text == "Vertragstext"
    assert "pypdf: incorrect startxref pointer(1)" in result.notes
    assert capfd.readouterr().err == ""
    assert [r.levelno for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_library_warnings_and_log_records_are_captured_in_order_and_the_loggers_restored() -> None:
    pypdf_log = logging.getLogger("pypdf._reader")

    with library_output_captured() as output:
        pypdf_log.warning("Xref table   invalid")
        pypdf_log.warning("Xref table invalid")
        warnings.warn("odd font", UserWarning, stacklevel=1)
        pypdf_log.info("below WARNING: not a note")

    assert output.notes() == ("pypdf: Xref table invalid", "UserWarning: odd font")
    assert logging.getLogger("pypdf").propagate and not logging.getLogger("pypdf").handlers


# --------------------------------------------------------------------- DOCX


def test_docx_keeps_paragraph_breaks_and_table_cells_in_order() -> None:
    result = convert(make_docx(), filename="vertrag.docx")

    assert result.media_type == MEDIA_DOCX
    assert result.title == "Arbeitsvertrag Jürgen Weiß"
    assert result.language == "de"
    assert result.text == (
        "Arbeitsvertrag\n\n"
        f"{UMLAUT_LINE}\n\n"
        "Die Kündigungsfrist beträgt drei Monate.\n\n"
        "Vergütung | 4.500 € brutto\nUrlaub | 30 Tage\n\n"
        "Ort, Datum: München, 12.03.2020"
    )


def test_docx_merged_cell_appears_once() -> None:
    import docx

    document = docx.Document()
    table = document.add_table(rows=1, cols=3)
    merged = table.cell(0, 0).merge(table.cell(0, 1))
    merged.text = "Parteien"
    table.cell(0, 2).text = "Vermieter und Mieter"
    out = io.BytesIO()
    document.save(out)

    assert convert(out.getvalue(), filename="t.docx").text == "Parteien | Vermieter und Mieter"


def test_non_zip_docx_is_rejected() -> None:
    with pytest.raises(ConversionError, match=r"^not a DOCX \(zip\) file$"):
        convert(b"PK but not really a zip", filename="vertrag.docx")


def test_zip_without_word_document_is_rejected() -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("readme.txt", "hallo")

    with pytest.raises(ConversionError, match=r"without word/document\.xml"):
        convert(buffer.getvalue(), filename="vertrag.docx")


def test_docx_with_broken_xml_is_unreadable() -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(make_docx())) as source, zipfile.ZipFile(buffer, "w") as target:
        for item in source.infolist():
            content = source.read(item)
            target.writestr(item, b"<w:document><broken" if item.filename == "word/document.xml" else content)

    with pytest.raises(ConversionError, match=r"^unreadable DOCX: "):
        convert(buffer.getvalue(), filename="vertrag.docx")


# --------------------------------------------------------------------- HTML


def test_html_drops_scripts_and_styles_and_keeps_block_breaks() -> None:
    html = """<!DOCTYPE html>
    <html lang="de-DE"><head><title>Urteil   des BGH</title>
    <style>p { color: red }</style><script>var geheim = 1;</script></head>
    <body><!-- Kommentar -->
      <h1>Urteil</h1>
      <p>Die Revision
         wird zurückgewiesen.<br>Kosten trägt der Kläger.</p>
      <table><tr><th>Az.</th><td>VIII ZR 12/19</td></tr></table>
      <ul><li>Erstens</li><li>Zweitens</li></ul>
      <noscript>Bitte JavaScript aktivieren</noscript>
    </body></html>"""

    result = convert(html.encode("utf-8"), filename="urteil.html")

    assert result.media_type == MEDIA_HTML
    assert result.title == "Urteil des BGH"
    assert result.language == "de"
    assert result.text == (
        "Urteil\n\nDie Revision wird zurückgewiesen.\nKosten trägt der Kläger.\n\n"
        "Az. | VIII ZR 12/19\n\nErstens\n\nZweitens"
    )


def test_html_charset_from_meta_tag() -> None:
    html = '<html><head><meta charset="windows-1252"></head><body><p>Gebühren für Übersetzungen</p></body></html>'

    result = convert(html.encode("cp1252"), filename="seite.htm")

    assert result.text == "Gebühren für Übersetzungen"


# ---------------------------------------------------------------------- EML


def test_eml_header_block_then_plain_body() -> None:
    result = convert(make_eml(), filename="mail.eml")

    assert result.media_type == MEDIA_EML
    assert result.title == "Kündigung des Mietvertrags – Frist"
    assert result.language == "de"
    assert result.text == (
        "From: Jörg Müller <mueller@kanzlei.example>\n"
        "To: Bärbel Schröder <schroeder@mandant.example>\n"
        "Date: Thu, 12 Mar 2020 10:15:00 +0100\n"
        "Subject: Kündigung des Mietvertrags – Frist\n\n"
        "Sehr geehrte Frau Schröder,\n\ndie Kündigungsfrist läuft am 30.06.2020 ab.\n\nMit freundlichen Grüßen"
    )


def test_eml_without_plain_part_falls_back_to_html() -> None:
    result = convert(make_eml(html_only=True), filename="mail.eml")

    assert result.text.endswith("Subject: Kündigung des Mietvertrags – Frist\n\nSehr geehrte Frau Schröder,\n\ndie Frist läuft ab.")
    assert "alert" not in result.text


def test_eml_with_unknown_charset_is_decoded_anyway() -> None:
    raw = (
        "From: a@example.org\r\nSubject: Test\r\nContent-Type: text/plain; charset=x-unbekannt\r\n"
        "Content-Transfer-Encoding: 8bit\r\n\r\nGrüße aus Köln\r\n"
    ).encode("cp1252")

    assert convert(raw, filename="mail.eml").text.endswith("Grüße aus Köln")


def test_eml_attachments_come_back_in_order_beside_the_body_text() -> None:
    pdf = make_pdf([["Gutachten zur Heizungsanlage"]])
    forwarded = EmailMessage()
    forwarded["Subject"] = "WG: Mängelanzeige"
    forwarded.set_content("Die Heizung fällt aus.")
    result = convert(make_mail(("Gutachten März.pdf", pdf, MEDIA_PDF), ("notiz.txt", b"Frist notiert", MEDIA_TEXT), forwarded), filename="m.eml")

    assert [(a.filename, a.media_type) for a in result.attachments] == [
        ("Gutachten März.pdf", MEDIA_PDF), ("notiz.txt", MEDIA_TEXT), ("attachment.eml", MEDIA_EML),
    ]
    assert result.attachments[0].data == pdf and result.attachments[1].data == b"Frist notiert"
    assert convert(result.attachments[2].data, filename="attachment.eml").text.endswith("Die Heizung fällt aus.")
    assert result.text.endswith("Anbei die Unterlagen.") and "Gutachten" not in result.text


def test_inline_pictures_of_the_body_are_not_attachments_but_named_inline_files_are() -> None:
    message = EmailMessage()
    message["Subject"] = "Signatur mit Logo"
    message.set_content("Text")
    message.add_alternative('<p>Text <img src="cid:logo"></p>', subtype="html")
    message.get_payload()[1].add_related(b"\x89PNG", maintype="image", subtype="png", cid="<logo>", filename="logo.png")
    message.make_mixed()
    message.attach(_inline_part("scan.pdf", b"%PDF-1.4 inline"))
    attachments = convert(message.as_bytes(), filename="m.eml").attachments

    assert attachments == (Attachment(filename="scan.pdf", media_type=MEDIA_PDF, data=b"%PDF-1.4 inline"),)


def _inline_part(filename: str, data: bytes) -> EmailMessage:
    """What Apple Mail sends for an attached file: disposition inline, with a name."""
    part = EmailMessage()
    part.set_content(data, maintype="application", subtype="pdf", disposition="inline", filename=filename)
    return part


def test_an_attachment_without_a_name_is_named_by_its_type() -> None:
    message = EmailMessage()
    message["Subject"] = "Ohne Namen"
    message.set_content("Text")
    message.add_attachment(b"%PDF-1.4", maintype="application", subtype="pdf")

    assert [a.filename for a in convert(message.as_bytes(), filename="m.eml").attachments] == ["attachment.pdf"]


def test_bytes_that_are_not_a_mail_are_rejected() -> None:
    with pytest.raises(ConversionError, match=r"^not an e-mail \(no From, To, Date or Subject header\)$"):
        convert(b"\x00\x01\x02 irgendwas", filename="mail.eml")


# ---------------------------------------------------------------------- MSG


def make_msg(*, body: str, html: str | None = None) -> bytes:
    return build_msg(
        subject="Kündigung Mietvertrag – Frist",
        body=body,
        html=html,
        sender="Jörg Müller <mueller@kanzlei.example>",
        to="Bärbel Schröder <schroeder@mandant.example>",
        sent=datetime(2020, 3, 12, 9, 15, tzinfo=UTC),
    )


def test_msg_header_block_then_body() -> None:
    data = make_msg(body="Sehr geehrte Frau Schröder,\r\n\r\ndie Frist läuft ab.\r\n\r\nMit freundlichen Grüßen")

    result = convert(data, filename="Mail.MSG")

    assert result.media_type == MEDIA_MSG
    assert result.converter == "extract-msg"
    assert result.title == "Kündigung Mietvertrag – Frist"
    assert result.text == (
        "From: Jörg Müller <mueller@kanzlei.example>\n"
        "To: Bärbel Schröder <schroeder@mandant.example>\n"
        "Date: Thu, 12 Mar 2020 09:15:00 +0000\n"
        "Subject: Kündigung Mietvertrag – Frist\n\n"
        "Sehr geehrte Frau Schröder,\n\ndie Frist läuft ab.\n\nMit freundlichen Grüßen"
    )


def test_msg_without_plain_body_falls_back_to_html() -> None:
    data = make_msg(body="", html="<html><body><p>Grüße aus Köln</p><style>p{}</style></body></html>")

    assert convert(data, filename="mail.msg").text.endswith("Subject: Kündigung Mietvertrag – Frist\n\nGrüße aus Köln")


def test_msg_attachments_are_named_and_marked_as_not_extracted() -> None:
    data = build_msg(
        subject="Vertrag", body="Anbei der Vertrag.", sender="a@kanzlei.example", to="b@mandant.example",
        sent=datetime(2020, 3, 12, 9, 15, tzinfo=UTC), attachments=(("Vertrag.pdf", b"%PDF-1.4"),),
    )
    result = convert(data, filename="mail.msg")

    assert result.text.endswith("Anbei der Vertrag.")
    assert result.attachments == (Attachment(filename="Vertrag.pdf", unavailable=MSG_ATTACHMENTS_UNSUPPORTED),)


def test_msg_that_is_not_an_ole_file_is_rejected() -> None:
    with pytest.raises(ConversionError, match=r"^not an Outlook MSG \(OLE compound\) file$"):
        convert(make_eml(), filename="mail.msg")


def test_ole_file_that_is_not_a_message_is_unreadable() -> None:
    # An OLE header followed by garbage: olefile accepts the magic, the parser then fails.
    data = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 2040

    with pytest.raises(ConversionError, match=r"^unreadable Outlook MSG: "):
        convert(data, filename="mail.msg", media_type=MEDIA_MSG)


def test_compound_file_without_message_class_is_unreadable() -> None:
    # A valid compound file (like a .doc) that holds no MAPI message.
    data = build_compound_file({"WordDocument": b"\x00" * 100})

    with pytest.raises(ConversionError, match=r"^OLE compound file without MAPI properties: not an Outlook message$"):
        convert(data, filename="mail.msg")


def test_truncated_msg_is_unreadable() -> None:
    data = make_msg(body="Text")

    # olefile reads what it can of a cut-off container; the MAPI streams are then missing.
    with pytest.raises(ConversionError, match=r"^(unreadable Outlook MSG: |OLE compound file without MAPI)"):
        convert(data[:1600], filename="mail.msg")


# ------------------------------------------------------------ text, Markdown


def test_utf8_text_with_crlf_and_blank_runs_is_normalized() -> None:
    data = "Aktennotiz\r\n\r\n\r\n\r\nBesprechung  mit\tHerrn Löw \r\nam 12.03.2020\r\n".encode()

    result = convert(data, filename="notiz.txt")

    assert result.media_type == MEDIA_TEXT
    assert result.text == "Aktennotiz\n\nBesprechung mit Herrn Löw\nam 12.03.2020"


def test_cp1252_text_is_decoded() -> None:
    data = "Schriftsatz – Gebührenrechnung über 1.000 €".encode("cp1252")

    assert convert(data, filename="alt.txt").text == "Schriftsatz – Gebührenrechnung über 1.000 €"


def test_latin1_bytes_undefined_in_cp1252_still_decode() -> None:
    assert convert(b"Stra\xdfe \x81", filename="alt.txt").text == "Straße \x81"


def test_utf16_with_bom_is_decoded() -> None:
    assert convert("Vermerk: Fristablauf".encode("utf-16"), filename="u.txt").text == "Vermerk: Fristablauf"


def test_decomposed_umlauts_become_nfc() -> None:
    decomposed = "Mu\u0308ller"

    assert convert(decomposed.encode(), filename="n.txt").text == "Müller"


def test_markdown_title_from_first_heading() -> None:
    result = convert("Intro\n\n# Vermerk zur Kündigung\n\nText".encode(), filename="vermerk.md")

    assert result.media_type == MEDIA_MARKDOWN
    assert result.title == "Vermerk zur Kündigung"


def test_binary_garbage_as_text_is_rejected() -> None:
    with pytest.raises(ConversionError, match=r"^binary content, not text"):
        convert(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe", filename="bild.txt")


# ---------------------------------------------------------- type and limits


def test_media_type_wins_over_the_suffix() -> None:
    result = convert(b"<p>Hallo</p>", filename="download.bin", media_type="text/html; charset=utf-8")

    assert result.media_type == MEDIA_HTML
    assert result.text == "Hallo"


def test_generic_media_type_falls_back_to_the_suffix() -> None:
    assert convert(b"Hallo", filename="A.TXT", media_type="application/octet-stream").text == "Hallo"


@pytest.mark.parametrize(
    ("filename", "reason"),
    [
        ("tabelle.xyz", r"^unsupported file type \.xyz$"),
        ("alt.doc", r"^unsupported file type \.doc$"),
        ("OHNE_ENDUNG", r"^unsupported file type: no file name suffix$"),
    ],
)
def test_unsupported_types_are_named(filename: str, reason: str) -> None:
    with pytest.raises(ConversionError, match=reason):
        convert(b"irgendwas", filename=filename)


def test_size_cap() -> None:
    with pytest.raises(ConversionError, match=r"^file too large: 2049 bytes, limit 2048$"):
        convert(b"a" * 2049, filename="gross.txt", max_bytes=2048)


def test_empty_file() -> None:
    with pytest.raises(ConversionError, match=r"^empty file$"):
        convert(b"", filename="leer.txt")


def test_whitespace_only_text_has_no_text() -> None:
    with pytest.raises(ConversionError, match=r"^no text in text file$"):
        convert(b" \r\n\t\r\n", filename="leer.txt")


def test_normalize_drops_soft_hyphens_and_zero_width_and_unifies_breaks() -> None:
    assert normalize_text("Kün\u00addi\u200bgung\u2028Zeile\x0cSeite\u00a0zwei") == "Kündigung\nZeile\nSeite zwei"


def test_pdf_pages_keep_their_start_offsets_in_the_normalized_text() -> None:
    data = make_pdf([["Seite  eins", "Zeile zwei"], [], ["Seite drei"]])
    result = convert(data, filename="protokoll.pdf")
    starts = result.page_starts
    assert len(starts) == 3 and starts[0] == 0
    assert result.text[starts[2]:] == "Seite drei"
    assert result.text[starts[0]:starts[1]].strip() == "Seite eins\nZeile zwei"
    assert result.text[starts[1]:starts[2]].strip() == ""  # the empty page holds no more than the blank line


def test_formats_without_pages_have_no_page_offsets() -> None:
    assert convert(b"Mietvertrag\n\n\x0cSeite zwei", filename="a.txt").page_starts == ()
