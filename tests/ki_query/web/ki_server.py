"""`ki` as a user runs it, for the browser tests: a store built by its commands, and `ki serve` on a free port."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

SERVER_START_SECONDS = 90


@dataclass(frozen=True)
class Account:
    name: str
    key: str
    principals: tuple[str, ...]


ACCOUNTS = {
    "anna": Account("anna", "ki_web_test_anna_0123456789abcdef", ("anna.berg",)),
    "tom": Account("tom", "ki_web_test_tom_0123456789abcdef", ("tom.krause",)),
    "admin": Account("admin", "ki_web_test_admin_0123456789abcdef", ("ops.admin", "role:admin")),
}


@dataclass
class KiStore:
    """A state directory and config file, and the environment every `ki` command of it runs with."""

    root: Path
    env: dict[str, str] = field(default_factory=dict)

    @classmethod
    def create(cls, root: Path) -> KiStore:
        config = root / "config.json"
        keys = {a.name: {"sha256": hashlib.sha256(a.key.encode()).hexdigest(), "principals": list(a.principals)}
                for a in ACCOUNTS.values()}
        config.write_text(json.dumps({"security": {"api_keys": keys}}), encoding="utf-8")
        env = {k: v for k, v in os.environ.items() if not k.startswith("KI_")}
        env.update(KI_CONFIG_FILE=str(config), KI_STATE_DIR=str(root / "state"),
                   KI_EMBEDDING__PROVIDER="hashing", KI_EMBEDDING__DIMENSIONS="64")
        return cls(root, env)

    def ki(self, *args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "ki.cli", *args], env=self.env, cwd=self.root,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"ki {' '.join(args)} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        return done.stdout


@dataclass
class KiServer:
    url: str
    process: subprocess.Popen
    log: Path

    @classmethod
    def start(cls, store: KiStore) -> KiServer:
        port = _free_port()
        log = store.root / "serve.log"
        with log.open("w") as output:  # the child keeps its own copy of the descriptor
            process = subprocess.Popen([sys.executable, "-m", "ki.cli", "serve", "--port", str(port)], env=store.env,
                                       cwd=store.root, stdout=output, stderr=subprocess.STDOUT)
        server = cls(f"http://127.0.0.1:{port}", process, log)
        server._wait_until_up()
        return server

    def _wait_until_up(self) -> None:
        deadline = time.monotonic() + SERVER_START_SECONDS
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"ki serve exited {self.process.returncode}:\n{self.log.read_text()[-3000:]}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        pytest.fail(f"ki serve did not answer /healthz within {SERVER_START_SECONDS} s")

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
