"""`ki get ID --text`: the document's own text, whole when piped, a part or a section on request, and a
document the caller may not see answers exactly like one that does not exist."""

from __future__ import annotations

import json

import pytest

from pathlib import Path

from sqlalchemy import select, update

from ki_core.config import load_settings
from ki_core.db import engine_from_settings
from ki_core.models import Document, DocumentVersion
from tests.ki.cli_store import database, fresh_query_service, ki, store  # noqa: F401 - fixtures
from tests.ki.test_query_cli import listed, list_json, unused_prefix  # noqa: F401 - fixture

__all__ = ["database", "store"]

pytestmark = pytest.mark.usefixtures("fresh_query_service")


def stored_text(version_id: str) -> str:
    engine = engine_from_settings(load_settings())
    try:
        with engine.connect() as connection:
            return connection.scalar(select(DocumentVersion.text).where(DocumentVersion.id == version_id))
    finally:
        engine.dispose()


def test_piped_text_is_the_whole_stored_text_plain(listed: dict[str, dict]) -> None:  # noqa: F811
    contract = listed["mietvertrag"]
    result = ki("get", contract["document_id"][:8], "--as", "anna", "--text")
    assert result.exit_code == 0, result.output
    cited = json.loads(ki("get", contract["document_id"], "--as", "anna", "--text", "--json").output)
    assert result.output == stored_text(cited["version_id"]) + "\n"
    assert "\x1b[" not in result.output  # no colours or pager codes in a pipe


def test_a_section_or_a_range_of_another_version(listed: dict[str, dict]) -> None:  # noqa: F811
    contract = listed["mietvertrag"]
    versions = json.loads(ki("get", contract["document_id"], "--as", "anna", "--json").output)["versions"]
    draft = next(v["version"]["id"] for v in versions if v["version"]["status"] == "draft")
    section = ki("get", contract["document_id"], "--as", "anna", "--text", "--section", "§ 3", "--version", draft[:8])
    assert section.exit_code == 0, section.output
    assert section.output.startswith("§ 3 ") and "§ 4" not in section.output
    assert section.output.strip() in stored_text(draft)
    part = ki("get", contract["document_id"], "--as", "anna", "--text", "--offset", "5", "--limit", "20")
    assert part.exit_code == 0 and len(part.output) == 21


def test_a_limit_above_the_cap_is_one_line_naming_it(listed: dict[str, dict]) -> None:  # noqa: F811
    result = ki("get", listed["mietvertrag"]["document_id"], "--as", "anna", "--text", "--limit", "100001")
    assert result.exit_code == 1 and "100,000" in result.output and len(result.output.strip().splitlines()) == 1


def test_the_text_of_a_document_the_caller_cannot_see_answers_like_none(listed: dict[str, dict]) -> None:  # noqa: F811
    [secret] = [hit["document_id"] for hit in list_json("carol")]
    missing = unused_prefix()
    answers = {}
    for reference in (secret, missing):
        result = ki("get", reference, "--as", "anna", "--text")
        answers[reference] = (result.exit_code, result.output.replace(reference, "REF"))
    assert answers[secret] == answers[missing] == (1, "error: no document 'REF'\n")
    assert ki("get", secret, "--as", "carol", "--text").exit_code == 0


def test_store_pages_gives_pdfs_converted_before_their_page_offsets(store: Path) -> None:  # noqa: F811
    from tests.ki_workers.stages.test_convert import make_pdf

    (store / "protokoll.pdf").write_bytes(make_pdf([["Erste Seite"], ["Zweite Seite"]]))
    (store / "verschoben.pdf").write_bytes(make_pdf([["Nur eine Seite"]]))
    assert ki("ingest", str(store), "--project", "mietsache", "--exclude", "kaputt.pdf").exit_code == 0
    engine = engine_from_settings(load_settings())
    try:
        with engine.begin() as connection:  # as a store converted before migration 0015 left them
            connection.execute(update(DocumentVersion).values(page_starts=None))
    finally:
        engine.dispose()
    (store / "verschoben.pdf").write_bytes(b"%PDF-1.4 changed")

    result = ki("store", "pages")

    assert result.exit_code == 0, result.output
    assert "1 PDF version(s) got page offsets, 1 kept none" in result.output
    assert "verschoben.pdf has changed since it was ingested" in result.output
    text = json.loads(ki("get", document_id_of("protokoll"), "--as", "role:admin", "--text", "--json",
                         "--section", "page:2").output)["text"]
    assert text == "Zweite Seite"


def document_id_of(key: str) -> str:
    engine = engine_from_settings(load_settings())
    try:
        with engine.connect() as connection:
            return connection.scalar(select(Document.id).where(Document.key == key))
    finally:
        engine.dispose()


def in_a_terminal(*args: str) -> str:
    """What `ki ARGS` prints to a real terminal (a pseudo-terminal), with `cat` as the pager."""
    import os
    import pty
    import subprocess
    import sys

    main, terminal = pty.openpty()
    command = [str(Path(sys.executable).with_name("ki")), *args]
    process = subprocess.Popen(command, stdin=terminal, stdout=terminal, stderr=terminal,
                               env={**os.environ, "PAGER": "cat", "MANPAGER": "cat", "TERM": "xterm"})
    os.close(terminal)
    received = bytearray()
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # the terminal's other end closed: the command is done
            break
        if not chunk:
            break
        received += chunk
    os.close(main)
    assert process.wait(timeout=60) == 0, received.decode(errors="replace")
    return received.decode().replace("\r", "")


def test_a_terminal_reads_the_whole_text_through_the_pager_under_its_citation(listed: dict[str, dict]) -> None:  # noqa: F811
    import re

    contract = listed["mietvertrag"]
    cited = json.loads(ki("get", contract["document_id"], "--as", "anna", "--text", "--json").output)
    shown = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", in_a_terminal("get", contract["document_id"], "--as", "anna", "--text"))
    words = " ".join(shown.split())  # the terminal wraps lines at its width
    assert words.startswith(" ".join(cited["citation"].split()))  # the citation on top ...
    assert words.endswith(" ".join(stored_text(cited["version_id"]).split()))  # ... the whole text below it
