"""The search page's form (a GET, so a result page is a link) and the API request it becomes.

With words it is a ranked search (/v1/search), without them the filter-only
listing, newest first (/v1/search/filter). A page is a slice of one ranking:
page n asks for offset (n - 1) * PAGE_SIZE of the same query and filters.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any
from urllib.parse import urlencode

from starlette.datastructures import QueryParams

from ki_core.search.types import MAX_RANKED_WINDOW

PAGE_SIZE = 10
SORT_ORDERS = ("relevance", "date_desc", "date_asc")
# The ranked window ends at offset + limit = MAX_RANKED_WINDOW: the last page a ranked search has.
LAST_RANKED_PAGE = MAX_RANKED_WINDOW // PAGE_SIZE
# form field -> SearchFilters field
FILTER_FIELDS = {"project": "project_id", "matter": "matter_id", "doc_type": "doc_type", "status": "version_status",
                 "language": "language", "date_from": "date_from", "date_to": "date_to"}


@dataclass(frozen=True)
class SearchForm:
    q: str = ""
    project: str = ""
    matter: str = ""
    doc_type: str = ""
    status: str = ""
    language: str = ""
    date_from: str = ""
    date_to: str = ""
    # relevance (empty), date_desc or date_asc: a ranked search's order (SearchRequest.sort).
    sort: str = ""
    page: int = 1

    @classmethod
    def from_params(cls, params: QueryParams) -> SearchForm:
        values = {f.name: params.get(f.name, "").strip() for f in fields(cls) if f.name != "page"}
        try:
            page = max(1, int(params.get("page", "1")))
        except ValueError:
            page = 1
        return cls(**values, page=page)

    @property
    def filters(self) -> dict[str, str]:
        return {api: getattr(self, name) for name, api in FILTER_FIELDS.items() if getattr(self, name)}

    @property
    def has_filters(self) -> bool:
        return bool(self.filters)

    @property
    def last_page(self) -> int | None:
        return LAST_RANKED_PAGE if self.q else None

    def request(self) -> tuple[str, dict[str, Any]]:
        """(API path, body) for this page."""
        window = {"offset": (self.page - 1) * PAGE_SIZE, "limit": PAGE_SIZE}
        if self.q:
            order = self.sort if self.sort in SORT_ORDERS else "relevance"
            return "/v1/search", {"query": self.q, "filters": self.filters, "explain": True, "sort": order,
                                  "facets": True, **window}  # fmt: skip
        return "/v1/search/filter", {"filters": self.filters, **window}

    def url(self, page: int, **changes: str) -> str:
        """The link to another page of the same search, or (changes) of a changed one."""
        params = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "page" and getattr(self, f.name)}
        params = {name: value for name, value in {**params, **changes}.items() if value}
        return "/search?" + urlencode({**params, "page": page})

    def narrowed(self, field_filter: str) -> str:
        """Page 1 of this search with a facet's field filter added to the query (`typ:"Urteil"`)."""
        return self.url(1, q=f"{self.q} {field_filter}")

    def sorted_by(self, order: str) -> str:
        return self.url(1, sort="" if order == "relevance" else order)
