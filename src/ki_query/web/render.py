"""The templates (package data beside this module) and the filters they use."""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath
from typing import Any

from fastapi.templating import Jinja2Templates
from markupsafe import Markup, escape
from starlette.requests import Request
from starlette.responses import HTMLResponse

from ki_query.text_match import MIN_PREFIX_CHARS, query_terms
from ki_query.web.text import language_of, translator

PACKAGE_DIR = Path(__file__).parent
TEMPLATES_DIR = PACKAGE_DIR / "templates"
STATIC_DIR = PACKAGE_DIR / "static"
_WORD = re.compile(r"\w+", re.UNICODE)


def highlight(text: str, query: str | None) -> Markup:
    """The text escaped, the query's words marked: a word matches a term as the excerpt chose it
    (ki_query.text_match.first_match: the term, or its first letters, inside the word)."""
    terms = query_terms(query or "")
    if not terms:
        return escape(text)
    parts: list[str] = []
    last = 0
    for match in _WORD.finditer(text):
        word = match.group().casefold()
        if any(t in word or (len(t) > MIN_PREFIX_CHARS and t[:MIN_PREFIX_CHARS] in word) for t in terms):
            parts += [escape(text[last:match.start()]), Markup("<mark>"), escape(match.group()), Markup("</mark>")]
            last = match.end()
    parts.append(escape(text[last:]))
    return Markup("").join(parts)


def file_name(external_id: str) -> str:
    """The last path segment of a folder path or DMS object id: what a lawyer recognizes."""
    return PurePosixPath(external_id.replace("\\", "/")).name or external_id


def templates() -> Jinja2Templates:
    engine = Jinja2Templates(directory=str(TEMPLATES_DIR))
    engine.env.filters["highlight"] = highlight
    engine.env.filters["file_name"] = file_name
    return engine


class Pages:
    """Renders a template with what every page needs: the words, the language, the caller."""

    def __init__(self) -> None:
        self.engine = templates()

    def render(self, request: Request, name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
        language = language_of(request)
        base = {"t": translator(language), "lang": language, "caller": None, "is_admin": False, "csrf": ""}
        return self.engine.TemplateResponse(request, name, {**base, **context}, status_code=status_code)
