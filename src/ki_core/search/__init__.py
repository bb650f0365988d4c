"""Search index: one contract (`SearchIndex`), two backends (embedded, OpenSearch)."""

from ki_core.search.index import (
    BulkOperation,
    DeleteOp,
    IndexOp,
    SearchIndex,
    UpdateAccessOp,
    index_signature,
    open_index,
)

__all__ = [
    "BulkOperation",
    "DeleteOp",
    "IndexOp",
    "SearchIndex",
    "UpdateAccessOp",
    "index_signature",
    "open_index",
]
