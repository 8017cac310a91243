"""A real OPA server for the policy tests (helpers; the fixtures are in conftest.py).

The binary comes from ``$TOOLGATE_OPA`` (the Makefile sets it), else the Makefile's cache
(``~/.cache/toolgate/opa-v1.22.0/opa``). Without it the OPA tests are skipped with the
reason — or fail when ``CI=true``, so CI cannot go green without running them.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from policies.testing import OPA_VERSION

REGO = Path(__file__).resolve().parents[2] / "rego"


def opa_path() -> Path:
    """The OPA binary, or skip (fail under CI=true) naming where it was looked for."""
    env = os.environ.get("TOOLGATE_OPA")
    path = Path(env) if env else Path.home() / ".cache" / "toolgate" / f"opa-{OPA_VERSION}" / "opa"
    if path.is_file():
        return path
    reason = f"OPA binary not found at {path} (set TOOLGATE_OPA or run `make opa`)"
    if os.environ.get("CI") == "true":
        pytest.fail(reason)
    pytest.skip(reason)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class OPAServer:
    """``opa run --server`` on 127.0.0.1 with decision logging on; start/stop/restart."""

    def __init__(self, binary: Path, bundle: Path, log_dir: Path, port: int | None = None) -> None:
        self.binary, self.bundle, self.log_dir = binary, bundle, log_dir
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 20.0) -> None:
        """Start OPA and return once ``/health`` answers 200; fail after ``timeout`` seconds."""
        log = open(self.log_dir / f"opa-{self.port}.log", "ab")
        argv = [str(self.binary), "run", "--server", "--addr", f"127.0.0.1:{self.port}"]
        argv += ["--set", "decision_logs.console=true", str(self.bundle)]
        self._proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"opa exited with {self._proc.returncode}; see {log.name}")
            try:
                if httpx.get(f"{self.url}/health", timeout=0.5).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"opa did not become healthy within {timeout} s")

    def stop(self) -> None:
        """Stop OPA (SIGTERM, then SIGKILL) and wait for it to exit."""
        if self._proc is None:
            return
        self._proc.terminate()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._proc = None
