"""Search index: one contract (`SearchIndex`), two backends (embedded, OpenSearch)."""

from ki_core.search import index as _factory
from ki_core.search.index import *  # noqa: F403 - the factory's public names, listed once there

__all__ = _factory.__all__
