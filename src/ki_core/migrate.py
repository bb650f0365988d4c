"""Run the Alembic migrations that ship inside the package (used by `ki init` and tests)."""

from __future__ import annotations

from importlib.resources import files

from alembic import command
from alembic.config import Config

from ki_core.db import make_engine


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(files("ki_core") / "migrations"))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def upgrade_to_head(url: str) -> None:
    """Idempotent: an up-to-date database is left as it is."""
    make_engine(url).dispose()  # creates the SQLite parent directory when needed
    command.upgrade(alembic_config(url), "head")


def downgrade_to_base(url: str) -> None:
    command.downgrade(alembic_config(url), "base")


def current_revision(url: str) -> str | None:
    from alembic.runtime.migration import MigrationContext

    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    finally:
        engine.dispose()
