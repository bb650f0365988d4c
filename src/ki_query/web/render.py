"""The templates (package data beside this module) and the filters they use."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from fastapi.templating import Jinja2Templates
from markupsafe import Markup, escape
from starlette.requests import Request
from starlette.responses import HTMLResponse

from ki_core.search.highlight import match_spans
from ki_query.web.text import language_of, translator

PACKAGE_DIR = Path(__file__).parent
TEMPLATES_DIR = PACKAGE_DIR / "templates"
STATIC_DIR = PACKAGE_DIR / "static"


def highlight(
    text: str, query: str | None = None, *, terms: Sequence[str] = (), phrases: Sequence[str] = ()
) -> Markup:
    """The text escaped, the words the search matched marked (ki_core.search.highlight: analysed
    tokens equal, a phrase as a whole). `query`: an unparsed query, each word a term; the query
    language passes its plain `terms` and its quoted `phrases` apart."""
    spans = match_spans(text, [*terms, *([query] if query else [])], phrases)
    parts: list[str] = []
    last = 0
    for start, end in spans:
        parts += [escape(text[last:start]), Markup("<mark>"), escape(text[start:end]), Markup("</mark>")]
        last = end
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
