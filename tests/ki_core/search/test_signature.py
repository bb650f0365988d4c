"""The model identity is the weights' digest, not the package's version: an upgrade that ships the same
weights refuses nothing, one that ships other weights of the same name and size is a new model."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ki_core.embedding import weights_digest


def install(site: Path, version: str, weights: bytes) -> None:
    package = site / "fakemodel"
    (package / "resources").mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text(f'__version__ = "{version}"\n', encoding="utf-8")
    (package / "resources" / "weights.bin").write_bytes(weights)
    importlib.invalidate_caches()


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    sys.modules.pop("fakemodel", None)


def test_a_package_upgrade_with_the_same_weights_keeps_the_identity_and_new_weights_change_it(site: Path) -> None:
    install(site, "0.3.0", b"\x01" * 4096)
    first = weights_digest("fakemodel", ["resources/weights.bin"])
    install(site, "0.4.0", b"\x01" * 4096)
    assert weights_digest("fakemodel", ["resources/weights.bin"]) == first
    install(site, "0.4.1", b"\x01" * 4095 + b"\x02")  # same size, one byte differs
    changed = weights_digest("fakemodel", ["resources/weights.bin"])
    assert changed != first and changed.startswith("sha256:") and len(changed) == len("sha256:") + 12
