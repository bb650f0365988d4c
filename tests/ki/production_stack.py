"""Every long-running Procfile process under honcho, on a private Redis and a private OpenSearch node.

The smoke test restarts Redis and stops OpenSearch, so it never uses the shared
services: its redis-server listens on REDIS_PORT and its OpenSearch node (from
the distribution `make services` unpacked) on OPENSEARCH_PORTS, with their own
data directories; PostgreSQL is a database of its own on the shared server.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.ki_core.search.opensearch_cluster import Node, distribution_home, kill_node, launch_node
from ki_workers.sources.dms_events import sign
from tests.ki_workers.dms_support import SECRET, SOURCE

ROOT = Path(__file__).parents[2]
REDIS_PORT = 6391
OPENSEARCH_PORTS = (9250, 9350)
OPENSEARCH_HEAP = "512m"
FLOWER_AUTH = ("ops", "smoke-test-password")
KEYS = {"alice": "key-of-alice-for-the-smoke-test", "bob": "key-of-bob-for-the-smoke-test"}


def procfile_processes() -> list[str]:
    """The long-running lines: all but `release`, which `ki init` is run as first."""
    lines = (ROOT / "Procfile").read_text().splitlines()
    return [line.split(":", 1)[0] for line in lines if re.match(r"^[a-z][a-z0-9-]*:", line) and not line.startswith("release:")]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_for(condition, timeout: float, what: str, interval: float = 0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if result := condition():
                return result
        except (httpx.HTTPError, OSError, ValueError):
            pass
        time.sleep(interval)
    raise AssertionError(f"{what}: not within {timeout:.0f} s")


@dataclass
class PrivateRedis:
    workdir: Path
    port: int = REDIS_PORT
    process: subprocess.Popen | None = None
    restarts: int = 0

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        with (self.workdir / "redis.log").open("ab") as log:
            self.process = subprocess.Popen(
                ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                 "--dir", str(self.workdir)],
                stdout=log, stderr=subprocess.STDOUT,
            )
        wait_for(self._answers, 20, f"redis on port {self.port}")

    def _answers(self) -> bool:
        with socket.create_connection(("127.0.0.1", self.port), timeout=1):
            return True

    def stop(self) -> None:
        """SIGKILL: what a crash does; without persistence every queued message is gone."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)

    def restart(self, down_seconds: float = 2.0) -> None:
        self.stop()
        time.sleep(down_seconds)
        self.restarts += 1
        self.start()


@dataclass
class PrivateOpenSearch:
    workdir: Path
    node: Node | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{OPENSEARCH_PORTS[0]}"

    def start(self, timeout: float = 240.0) -> None:
        home = distribution_home()
        if home is None:
            raise RuntimeError("no OpenSearch distribution: run `make services` (deploy/services.sh) first")
        self.node = launch_node(home, self.workdir, f"ki-smoke-{os.getpid()}", "smoke-1", OPENSEARCH_PORTS,
                                heap=OPENSEARCH_HEAP)
        wait_for(self._healthy, timeout, f"private OpenSearch on {self.url} (log {self.node.log})", interval=1.0)

    def _healthy(self) -> bool:
        if self.node.process.poll() is not None:
            raise RuntimeError(f"OpenSearch exited: {self.node.log.read_text(errors='replace')[-2000:]}")
        health = httpx.get(f"{self.url}/_cluster/health?wait_for_status=yellow&timeout=1s", timeout=3).json()
        return health.get("status") in ("yellow", "green")

    def stop(self) -> None:
        if self.node is not None:
            kill_node(self.node)
            self.node = None


@dataclass
class Stack:
    """`make production` (deploy/production.sh: `ki init`, then honcho with every long-running Procfile line)."""

    workdir: Path
    env: dict[str, str]
    ports: dict[str, int]
    redis: PrivateRedis
    opensearch: PrivateOpenSearch | None
    procfile: Path = ROOT / "Procfile"
    process: subprocess.Popen | None = None
    starts: int = 0

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.ports['api']}"

    @property
    def ingress(self) -> str:
        return f"http://127.0.0.1:{self.ports['ingress']}"

    @property
    def flower(self) -> str:
        return f"http://127.0.0.1:{self.ports['flower']}"

    def start(self) -> None:
        self.starts += 1
        log = (self.workdir / f"honcho-{self.starts}.log").open("w")
        env = {**self.env, "VENV": str(Path(sys.executable).parents[1]), "PROCFILE": str(self.procfile)}
        self.process = subprocess.Popen(["bash", str(ROOT / "deploy" / "production.sh")], env=env, cwd=self.workdir,
                                        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        self.wait_ready()

    def wait_ready(self) -> None:
        wait_for(self._ready, 240, f"every process up\n{self.logs()}", interval=1.0)

    def _ready(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"honcho exited with {self.process.returncode}:\n{self.logs()}")
        if httpx.get(f"{self.ingress}/readyz", timeout=2).status_code != 200:
            return False
        if httpx.get(f"{self.api}/v1/openapi.json", timeout=2).status_code >= 500:
            return False
        workers = httpx.get(f"{self.flower}/api/workers?refresh=1", auth=FLOWER_AUTH, timeout=10).json()
        return len(workers) == sum(1 for name in procfile_processes() if name.endswith("worker"))

    def pids(self) -> dict[str, int]:
        """Procfile name -> pid, from honcho's "<name>.1 started (pid=N)" lines of this start (the last ones:
        production.sh starts them all again when one exited)."""
        text = (self.workdir / f"honcho-{self.starts}.log").read_text(errors="replace")
        return {name: int(pid) for name, pid in re.findall(r"\| ([a-z-]+)\.1 started \(pid=(\d+)\)", text)}

    def terminate(self, timeout: float = 120.0) -> float:
        """SIGTERM to honcho, which passes it to every process; returns how long they took to exit."""
        started = time.monotonic()
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=timeout)
        return time.monotonic() - started

    def kill(self) -> None:
        """Stop everything, also what a SIGKILLed honcho would leave behind (each of its processes
        leads a process group of its own, with the worker's pool in it)."""
        if self.process is None:
            return
        if self.process.poll() is None:
            try:
                self.terminate(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=30)
        for log in self.workdir.glob("honcho-*.log"):
            for pid in re.findall(r"started \(pid=(\d+)\)", log.read_text(errors="replace")):
                try:
                    os.killpg(int(pid), signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass

    def logs(self, chars: int = 6000) -> str:
        return "\n".join(p.read_text(errors="replace")[-chars:] for p in sorted(self.workdir.glob("honcho-*.log")))

    # ------------------------------------------------------------- clients

    def webhook(self, data: dict) -> int:
        """POST a signed event as the DMS does; the status code (202 new, 200 duplicate, 503 retry later)."""
        body = json.dumps(data).encode()
        headers = {"Content-Type": "application/json", **sign(SECRET, body)}
        return httpx.post(f"{self.ingress}/webhooks/{SOURCE}", content=body, headers=headers, timeout=10).status_code

    def deliver(self, data: dict) -> None:
        """Until acknowledged, as a DMS re-sends what got no 2xx."""
        deadline = time.monotonic() + 240  # the ingress may be starting again (production.sh)
        while time.monotonic() < deadline:
            try:
                if self.webhook(data) in (200, 202):
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise AssertionError(f"event {data['event_id']} never accepted\n{self.logs()}")

    def search(self, user: str, query: str = "Mietvertrag Heizung", timeout: float = 10.0) -> httpx.Response:
        return httpx.post(f"{self.api}/v1/search", json={"query": query, "limit": 50},
                          headers={"X-API-Key": KEYS[user]}, timeout=timeout)

    def metrics(self) -> str:
        return httpx.get(f"{self.ingress}/metrics", timeout=10).text

    def flower_tasks(self) -> dict[str, dict]:
        return httpx.get(f"{self.flower}/api/tasks?limit=100000", auth=FLOWER_AUTH, timeout=20).json()
