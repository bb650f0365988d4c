"""`ki serve` as an operator runs it: it stops within seconds of SIGTERM, even with a client hanging."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from ki.commands.query import SHUTDOWN_SECONDS


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_sigterm_stops_the_server_within_seconds_while_a_client_hangs(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KI_")}
    env.update(KI_STATE_DIR=str(tmp_path / "state"), KI_EMBEDDING__PROVIDER="hashing", KI_EMBEDDING__DIMENSIONS="64")
    subprocess.run([sys.executable, "-m", "ki.cli", "init"], env=env, cwd=tmp_path, check=True, capture_output=True)
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "ki.cli", "serve", "--port", str(port)], env=env, cwd=tmp_path,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    hanging = socket.socket()
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "ki serve did not come up"
            time.sleep(0.2)
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
        if server.poll() is None:
            server.kill()
            server.wait()
