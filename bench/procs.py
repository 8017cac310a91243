"""Child processes: the echo and gateway servers (``bench.server``) and an OPA server."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench import procstat
from bench.scenarios import REPO


class ServerProcess:
    """``python -m bench.server KIND`` in a child; ``address`` once started."""

    def __init__(self, kind: str, workdir: Path, *, config: dict[str, Any] | None = None, profile: str = "",
                 workers: int = 1) -> None:
        self.kind, self.workdir, self.config, self.profile, self.workers = kind, workdir, config, profile, workers
        self.proc: subprocess.Popen[bytes] | None = None
        self.address = ""

    def start(self, timeout: float = 60.0) -> "ServerProcess":
        self.workdir.mkdir(parents=True, exist_ok=True)
        port_file = self.workdir / "port"
        port_file.unlink(missing_ok=True)
        argv = [sys.executable, "-m", "bench.server", self.kind, "--port-file", str(port_file)]
        if self.config is not None:
            config_file = self.workdir / "config.json"
            config_file.write_text(json.dumps(self.config))
            argv += ["--config", str(config_file)]
        if self.profile:
            argv += ["--profile", self.profile]
        if self.workers > 1:
            argv += ["--workers", str(self.workers)]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
        env.pop("TOOLGATE_DATA_DIR", None)
        log = open(self.workdir / "server.log", "ab")
        self.proc = subprocess.Popen(argv, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env=env)
        log.close()
        deadline = time.monotonic() + timeout
        while not port_file.exists():
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.kind} server exited: {(self.workdir / 'server.log').read_text()[-2000:]}")
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(f"{self.kind} server did not start in {timeout:g} s")
            time.sleep(0.05)
        self.address = f"127.0.0.1:{int(port_file.read_text())}"
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def cpu(self) -> float:
        """CPU seconds of the server and its workers (all threads)."""
        return procstat.tree_cpu_seconds(self.pid) if self.workers > 1 else procstat.cpu_seconds(self.pid)

    def rss(self) -> int:
        """Resident memory of the server and its workers."""
        return procstat.tree_rss_bytes(self.pid) if self.workers > 1 else procstat.rss_bytes(self.pid)

    def stop(self, timeout: float = 60.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


def opa_binary() -> Path | None:
    """``$TOOLGATE_OPA`` or the Makefile's cache location, if it exists."""
    env = os.environ.get("TOOLGATE_OPA")
    candidates = [Path(env)] if env else []
    candidates.append(Path.home() / ".cache" / "toolgate" / "opa-v1.22.0" / "opa")
    return next((p for p in candidates if p.is_file() and os.access(p, os.X_OK)), None)


def opa_engine_available() -> bool:
    """True once ``policies.opa`` (the OPA REST engine) exists in the tree."""
    try:
        import policies.opa  # noqa: F401
    except ModuleNotFoundError:
        return False
    return True


class OPAProcess:
    """``opa run --server`` on a free loopback port, serving the repository's rego/ bundle."""

    def __init__(self, binary: Path, workdir: Path) -> None:
        self.binary, self.workdir = binary, workdir
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""

    def start(self, timeout: float = 30.0) -> "OPAProcess":
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.workdir.mkdir(parents=True, exist_ok=True)
        log = open(self.workdir / "opa.log", "ab")
        self.proc = subprocess.Popen(
            [str(self.binary), "run", "--server", "--addr", f"127.0.0.1:{port}", "--log-level", "error", str(REPO / "rego")],
            stdout=log, stderr=subprocess.STDOUT,
        )
        log.close()
        self.url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=1) as resp:
                    if resp.status == 200:
                        return self
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("OPA server did not become healthy")
            time.sleep(0.1)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
