"""A throwaway two-node OpenSearch cluster for the tests that need shards on two nodes.

It runs from the distribution `make services` unpacked (KI_TEST_OPENSEARCH_HOME, else the
default cache locations of deploy/services.sh), with its own cluster name, ports, data and
config directories, so stopping one of its nodes never touches the shared test node.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

RUN_AS = "ki-opensearch"  # the system user deploy/services.sh runs the node as when it is root
HEAP = "384m"


def free_ports(count: int) -> tuple[int, ...]:
    """Ports nobody listens on now: two test runs on one machine (or another cluster) never collide
    on fixed ones. Held open together so the kernel hands out distinct ports."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return tuple(sock.getsockname()[1] for sock in sockets)
    finally:
        for sock in sockets:
            sock.close()


def distribution_home() -> Path | None:
    candidates = [os.environ.get("KI_TEST_OPENSEARCH_HOME"), "/var/cache/ki-services", "~/.cache/ki-services"]
    for candidate in filter(None, candidates):
        path = Path(candidate).expanduser()
        if (path / "bin" / "opensearch").exists():
            return path
        homes = sorted(path.glob("opensearch-*/bin/opensearch")) if path.is_dir() else []
        if homes:
            return homes[-1].parents[1]
    return None


@dataclass
class Node:
    name: str
    http_port: int
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"


@dataclass
class TwoNodeCluster:
    home: Path
    workdir: Path
    cluster_name: str
    nodes: dict[str, Node] = field(default_factory=dict)
    # Two HTTP ports, then two transport ports, chosen free in one call.
    ports: tuple[int, ...] = field(default_factory=lambda: free_ports(4))

    @property
    def http_ports(self) -> tuple[int, ...]:
        return self.ports[:2]

    @property
    def transport_ports(self) -> tuple[int, ...]:
        return self.ports[2:]

    @property
    def url(self) -> str:
        """The first node: cluster manager and coordinator, never the one the tests stop."""
        return self.nodes["node-1"].url

    def start(self, timeout: float = 300.0) -> None:
        for number in (1, 2):
            self.nodes[f"node-{number}"] = self._start_node(number)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._fail_if_exited()
            try:
                health = httpx.get(f"{self.url}/_cluster/health", timeout=2).json()
                if health.get("number_of_nodes") == 2:
                    return
            except (httpx.HTTPError, ValueError):
                pass
            time.sleep(1)
        raise RuntimeError(f"the two-node cluster did not form in {timeout:.0f} s; see {self.workdir}")

    def stop_node(self, name: str) -> None:
        """Kill a node the way a crash would (no shard hand-off) and wait until the cluster knows."""
        kill_node(self.nodes.pop(name))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            health = httpx.get(f"{self.url}/_cluster/health", timeout=5).json()
            if health.get("number_of_nodes") == 1:
                return
            time.sleep(0.5)
        raise RuntimeError(f"the cluster still counts {name} after 60 s")

    def close(self) -> None:
        for node in self.nodes.values():
            kill_node(node)
        self.nodes.clear()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def _start_node(self, number: int) -> Node:
        name = f"node-{number}"
        seeds = ", ".join(f'"127.0.0.1:{port}"' for port in self.transport_ports)
        settings = (
            f"discovery.seed_hosts: [{seeds}]\n"
            'cluster.initial_cluster_manager_nodes: ["node-1"]\n'
            # Only node-1 may manage the cluster: stopping node-2 leaves it running.
            + ("node.roles: [cluster_manager, data, ingest]\n" if number == 1 else "node.roles: [data, ingest]\n")
        )
        return launch_node(self.home, self.workdir / name, self.cluster_name, name,
                           (self.http_ports[number - 1], self.transport_ports[number - 1]), settings)

    def _fail_if_exited(self) -> None:
        for node in self.nodes.values():
            if node.process.poll() is not None:
                tail = node.log.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"{node.name} exited with {node.process.returncode}:\n{tail}")


def launch_node(home: Path, root: Path, cluster_name: str, name: str, ports: tuple[int, int],
                extra_settings: str = "single-node", heap: str = HEAP) -> Node:
    """Start one node of `cluster_name` in `root` (its own config, data and logs) on (http, transport) ports;
    `extra_settings` is opensearch.yml text, or "single-node" for a cluster of one."""
    config = root / "config"
    shutil.copytree(home / "config", config, dirs_exist_ok=True)  # a restart reuses the node's directories
    if extra_settings == "single-node":
        extra_settings = "discovery.type: single-node\n"
    (config / "opensearch.yml").write_text(
        f"cluster.name: {cluster_name}\n"
        f"node.name: {name}\n"
        "network.host: 127.0.0.1\n"
        f"http.port: {ports[0]}\n"
        f"transport.port: {ports[1]}\n"
        + extra_settings
        + f"path.data: {root / 'data'}\n"
        f"path.logs: {root / 'logs'}\n"
        "cluster.routing.allocation.disk.threshold_enabled: false\n"
        "action.auto_create_index: false\n",
        encoding="utf-8",
    )
    (root / "data").mkdir(exist_ok=True)
    (root / "logs").mkdir(exist_ok=True)
    env = {
        **os.environ,
        "OPENSEARCH_PATH_CONF": str(config),
        "OPENSEARCH_JAVA_OPTS": f"-Xms{heap} -Xmx{heap}",
        "OPENSEARCH_JAVA_HOME": os.environ.get("KI_OPENSEARCH_JAVA_HOME") or _java_home(),
    }
    command = [str(home / "bin" / "opensearch")]
    if os.geteuid() == 0:  # OpenSearch refuses to run as root
        subprocess.run(["chown", "-R", RUN_AS, str(root)], check=True)
        command = ["runuser", "-u", RUN_AS, "--", "env", *(f"{k}={env[k]}" for k in (
            "OPENSEARCH_PATH_CONF", "OPENSEARCH_JAVA_OPTS", "OPENSEARCH_JAVA_HOME")), *command]
    log = root / "stdout.log"
    with log.open("ab") as out:
        # A session of its own: the kill reaches the JVM behind runuser too.
        process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    return Node(name, ports[0], process, log)


def kill_node(node: Node) -> None:
    try:
        os.killpg(node.process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    node.process.wait(timeout=30)


def _java_home() -> str:
    java = shutil.which("java")
    return str(Path(java).resolve().parents[1]) if java else ""


def start_two_node_cluster(home: Path, workdir: Path) -> TwoNodeCluster:
    workdir.mkdir(parents=True, exist_ok=True)
    os.chmod(workdir, 0o755)
    cluster = TwoNodeCluster(home, workdir, cluster_name=f"ki-shards-{os.getpid()}")
    try:
        cluster.start()
    except BaseException:
        cluster.close()
        raise
    return cluster
