"""The Procfile, the compose file and the code they name agree (no Docker needed to check that)."""

from __future__ import annotations

import re
from pathlib import Path

import ki.asgi

ROOT = Path(__file__).parents[2]


def procfile() -> dict[str, str]:
    lines = (ROOT / "Procfile").read_text().splitlines()
    return dict(line.split(": ", 1) for line in lines if line.strip() and not line.startswith("#"))


def compose_services() -> set[str]:
    text = (ROOT / "deploy" / "compose.yml").read_text()
    services = text.split("\nservices:\n", 1)[1].split("\nvolumes:\n", 1)[0]
    return set(re.findall(r"^  ([a-z][a-z0-9-]*):$", services, flags=re.MULTILINE))


def test_compose_runs_one_service_per_procfile_line_and_the_backing_services() -> None:
    assert set(procfile()) == {"release", "api", "ingress", "worker", "beat", "flower"}
    assert compose_services() == set(procfile()) | {"postgres", "redis", "opensearch"}


def test_the_asgi_factories_named_by_the_procfile_exist() -> None:
    factories = {m for command in procfile().values() for m in re.findall(r"ki\.asgi:(\w+)", command)}
    assert factories == {"create_api", "create_ingress"}
    assert all(callable(getattr(ki.asgi, name)) for name in factories)


def test_the_docker_image_installs_the_ops_extra_for_flower() -> None:
    assert '".[ops]"' in (ROOT / "deploy" / "Dockerfile").read_text()
    assert "flower>=" in (ROOT / "pyproject.toml").read_text()
