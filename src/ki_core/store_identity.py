"""One store, one index: the SQL database's store id must be the one its search index carries.

The embedded index lives under the state directory whatever `database.url`
names, so pointing the same state directory at another database used to
pair it with an index filled from the first one: `ki reindex` then rebuilt
that index from the other database, and the first store's searches found
nothing. Now the writer claims an unclaimed index for its database's store,
every reader and writer refuses an index claimed by another store, and
`ki reindex` replaces another store's index only when told to.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ki_core.search.types import IndexMappingMismatch

if TYPE_CHECKING:
    from sqlalchemy.orm import Session, sessionmaker

    from ki_core.config import Settings
    from ki_core.search.contract import SearchIndex


class StoreMismatch(IndexMappingMismatch):
    """The search index belongs to another SQL store (HTTP 503, CLI exit 2): never answered from."""


def sql_store_id(sessions: sessionmaker[Session]) -> str:
    from ki_core.models import StoreIdentity

    with sessions() as session:
        row = session.get(StoreIdentity, 1)
    if row is None:  # a database whose identity row was deleted by hand: the check cannot be made
        raise StoreMismatch("the database has no store identity row (table store_identity); run `ki init`")
    return row.store_id


def index_location(settings: Settings) -> str:
    if settings.search.backend == "opensearch":
        return f"OpenSearch alias {settings.retrieval.index_name}"
    return f"embedded index {settings.embedded_index_path}"


def bind_index_to_store(index: SearchIndex, settings: Settings, sessions: sessionmaker[Session], *, claim: bool) -> None:
    """Refuse an index another store claimed; with `claim` (a writer), claim an unclaimed one."""
    ours, theirs = sql_store_id(sessions), index.store_id()
    if theirs is None:
        if claim:
            index.claim_store(ours)
        return
    if theirs != ours:
        raise StoreMismatch(mismatch_message(settings, ours, theirs))


def mismatch_message(settings: Settings, ours: str, theirs: str) -> str:
    from ki_core.config import mask_url_password

    return (
        f"the {index_location(settings)} was filled from another store (id {theirs}) than the database "
        f"{mask_url_password(settings.database_url)} (store {ours}), so it would answer from that store. "
        "Point database.url back at that store's database; or give this database its own index "
        "(another state_dir, or search.backend opensearch with its own retrieval.index_name) and run "
        "`ki reindex`; or, to discard the other store's index, `ki reindex --replace-index`. "
        "To move a store to another database, use `ki store migrate --to URL`."
    )
