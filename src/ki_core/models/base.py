"""Declarative base, naming convention and column helpers shared by all aggregates.

The naming convention gives every constraint a stable name, which Alembic's
batch mode needs to alter tables on SQLite.
"""

from __future__ import annotations

import enum
import uuid
from datetime import UTC, datetime

from sqlalchemy import DateTime, Enum, MetaData, String
from sqlalchemy.orm import DeclarativeBase, mapped_column

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


def new_id() -> str:
    return uuid.uuid4().hex


def utcnow() -> datetime:
    return datetime.now(UTC)


def id_column():
    """A 32-character hex primary key generated client-side, so ids exist before flush."""
    return mapped_column(String(32), primary_key=True, default=new_id)


def created_at_column():
    return mapped_column(DateTime(timezone=True), default=utcnow, nullable=False)


def enum_column(enum_cls: type[enum.Enum], **kwargs):
    """A VARCHAR with a CHECK constraint: portable across PostgreSQL and SQLite."""
    return mapped_column(
        Enum(
            enum_cls,
            native_enum=False,
            create_constraint=True,
            length=24,
            values_callable=lambda members: [m.value for m in members],
            name=f"{enum_cls.__name__.lower()}",
            validate_strings=True,
        ),
        **kwargs,
    )
