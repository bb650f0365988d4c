"""`ki serve` as an operator runs it: it stops within seconds of SIGTERM, even with a client hanging, and
it holds the embedded index's writer from start to stop, so an ingest beside it is refused every time."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from ki.commands.reading.query import SHUTDOWN_SECONDS


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def store_env(tmp_path: Path) -> dict[str, str]:
    """An initialised embedded store in TMP_PATH/state with the hashing embedder."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KI_")}
    env.update(KI_STATE_DIR=str(tmp_path / "state"), KI_EMBEDDING__PROVIDER="hashing", KI_EMBEDDING__DIMENSIONS="64")
    subprocess.run([sys.executable, "-m", "ki.cli", "init"], env=env, cwd=tmp_path, check=True, capture_output=True)
    return env


def started_server(env: dict[str, str], cwd: Path, port: int) -> subprocess.Popen:
    server = subprocess.Popen([sys.executable, "-m", "ki.cli", "serve", "--port", str(port)], env=env, cwd=cwd,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 180  # a loaded 2-core CI machine took 60 s
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return server
        except httpx.TransportError:
            pass
        assert server.poll() is None and time.monotonic() < deadline, "ki serve did not come up"
        time.sleep(0.2)


def stopped(server: subprocess.Popen) -> None:
    if server.poll() is None:
        server.kill()
        server.wait()


def test_an_ingest_beside_an_idle_server_is_refused_at_once_naming_the_server(tmp_path: Path) -> None:
    env = store_env(tmp_path)
    folder = tmp_path / "akte"
    folder.mkdir()
    (folder / "brief.txt").write_text("Sehr geehrte Frau Berg, die Heizung ist ausgefallen.", encoding="utf-8")
    server = started_server(env, tmp_path, free_port())
    try:
        refused = subprocess.run([sys.executable, "-m", "ki.cli", "ingest", str(folder), "--project", "p"], env=env,
                                 cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert refused.returncode == 3, refused.stdout + refused.stderr
        assert f"`ki serve` (pid {server.pid})" in refused.stderr
        assert "holds it from start to stop" in refused.stderr and "Nothing was written" in refused.stderr
    finally:
        stopped(server)
    after = subprocess.run([sys.executable, "-m", "ki.cli", "ingest", str(folder), "--project", "p"], env=env,
                           cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert after.returncode == 0, after.stdout + after.stderr


def test_sigterm_stops_the_server_within_seconds_while_a_client_hangs(tmp_path: Path) -> None:
    env = store_env(tmp_path)
    port = free_port()
    server = started_server(env, tmp_path, port)
    hanging = socket.socket()
    try:
        # A request that promises a body and never sends it: the server waits on it.
        hanging.connect(("127.0.0.1", port))
        hanging.sendall(b"POST /v1/search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                        b"Content-Length: 1000\r\n\r\n{\"query\": ")
        time.sleep(0.5)
        started = time.monotonic()
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=SHUTDOWN_SECONDS + 20)
        assert time.monotonic() - started < SHUTDOWN_SECONDS + 5
    finally:
        hanging.close()
        stopped(server)
