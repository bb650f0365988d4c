"""ki.errors names exception classes by dotted path (so the CLI starts without importing them): the names stay true."""

from __future__ import annotations

import importlib

import pytest

from ki.errors import DBAPI_ERROR, EXIT_CODES, EXIT_UNAVAILABLE, VALIDATION_ERROR, exit_code_for
from ki_core.search.types import SearchBackendError


def resolve(dotted: str) -> type:
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


@pytest.mark.parametrize("dotted", [name for name, _ in EXIT_CODES] + [DBAPI_ERROR])
def test_every_name_in_the_table_is_an_exception_class_defined_under_that_name(dotted: str) -> None:
    found = resolve(dotted)
    assert issubclass(found, BaseException)
    assert f"{found.__module__}.{found.__qualname__}" == dotted


def test_pydantic_s_validation_error_is_the_one_named() -> None:
    from pydantic import ValidationError

    assert resolve(VALIDATION_ERROR) is ValidationError


def test_a_subclass_defined_anywhere_maps_like_its_base() -> None:
    class ReplicaDown(SearchBackendError):
        pass

    assert exit_code_for(ReplicaDown("down")) == EXIT_UNAVAILABLE


def test_a_class_that_only_shares_the_name_is_not_mapped() -> None:
    class ConfigError(ValueError):
        pass

    assert exit_code_for(ConfigError("x")) is None


def instance_of(dotted: str) -> BaseException:
    """An instance without running the class's own __init__ (several take required arguments)."""
    exc_type = resolve(dotted)
    if dotted == VALIDATION_ERROR:
        return exc_type.from_exception_data("SearchRequest", [])
    return exc_type.__new__(exc_type)


@pytest.mark.parametrize("dotted", [name for name, _ in EXIT_CODES])
def test_matching_by_name_gives_the_code_isinstance_gave(dotted: str) -> None:
    """The table was a list of classes checked with isinstance, first match wins; names must agree with it."""
    exc = instance_of(dotted)
    by_isinstance = next(code for name, code in EXIT_CODES if isinstance(exc, resolve(name)))
    assert exit_code_for(exc) == by_isinstance
