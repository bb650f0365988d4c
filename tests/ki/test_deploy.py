"""The Procfile, the compose file and the code they name agree (no Docker needed to check that)."""

from __future__ import annotations

import re
from pathlib import Path

import ki.asgi
from ki_workers.app import TASK_ROUTES

ROOT = Path(__file__).parents[2]


def procfile() -> dict[str, str]:
    lines = (ROOT / "Procfile").read_text().splitlines()
    return dict(line.split(": ", 1) for line in lines if line.strip() and not line.startswith("#"))


def compose_services() -> set[str]:
    text = (ROOT / "deploy" / "compose.yml").read_text()
    services = text.split("\nservices:\n", 1)[1].split("\nvolumes:\n", 1)[0]
    return set(re.findall(r"^  ([a-z][a-z0-9-]*):$", services, flags=re.MULTILINE))


WORKER_QUEUES = {
    "ingest-worker": {"ki.ingest"},
    "embed-worker": {"ki.index"},
    "access-worker": {"ki.access"},
    "maintenance-worker": {"ki.maintenance"},
}


def test_compose_runs_one_service_per_procfile_line_and_the_backing_services() -> None:
    assert set(procfile()) == {"release", "api", "ingress", "beat", "flower", *WORKER_QUEUES}
    assert compose_services() == set(procfile()) | {"postgres", "redis", "opensearch"}


def queues_of(command: str) -> set[str]:
    (queues,) = re.findall(r"--queues=([\w.,]+)", command)
    return set(queues.split(","))


def test_each_worker_pool_takes_its_own_queues_so_access_never_waits_behind_embedding() -> None:
    workers = {name: command for name, command in procfile().items() if name.endswith("worker")}
    assert {name: queues_of(command) for name, command in workers.items()} == WORKER_QUEUES
    assert set().union(*WORKER_QUEUES.values()) == {q for route in TASK_ROUTES.values() for q in route.values()}
    for name, command in workers.items():
        assert "--concurrency=" in command and "--prefetch-multiplier=" in command, name
        assert f"--hostname={name.removesuffix('-worker')}@%h" in command, "one node name per pool"
    compose = (ROOT / "deploy" / "compose.yml").read_text()
    for name, queues in WORKER_QUEUES.items():
        block = compose.split(f"\n  {name}:\n", 1)[1].split("\n\n", 1)[0]
        assert queues_of(block) == queues, name


def test_flower_runs_behind_the_password_launcher_on_loopback() -> None:
    assert procfile()["flower"] == "python -m ki.flower"
    compose = (ROOT / "deploy" / "compose.yml").read_text()
    assert '"127.0.0.1:5555:5555"' in compose and "KI_FLOWER__BASIC_AUTH" in compose


def test_the_asgi_factories_named_by_the_procfile_exist() -> None:
    factories = {m for command in procfile().values() for m in re.findall(r"ki\.asgi:(\w+)", command)}
    assert factories == {"create_api", "create_ingress"}
    assert all(callable(getattr(ki.asgi, name)) for name in factories)


def test_the_docker_image_installs_the_ops_extra_for_flower() -> None:
    assert '".[ops]"' in (ROOT / "deploy" / "Dockerfile").read_text()
    extras = (ROOT / "pyproject.toml").read_text().split("[project.optional-dependencies]", 1)[1]
    assert extras.count("flower>=") == 2, "in ops (the image) and in test (the smoke test starts it)"
    assert "honcho>=" in extras
