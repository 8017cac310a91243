"""A private PostgreSQL server for tests: initdb into a temp dir, run on 127.0.0.1, stop after.

Reusable from any test package::

    from tests._postgres import pg_server, pg_dsn  # noqa: F401  (pytest fixtures)

- ``pg_server`` (session): a ``PostgresServer`` on a free port on 127.0.0.1, its unix socket
  in the temp dir; ``restart()`` stops it (fast shutdown: every connection is cut) and starts
  it again on the same port and data dir.
- ``pg_dsn`` (function): a fresh, empty database on that server; its DSN.

The server binaries come from ``pg_config --bindir`` or ``/usr/lib/postgresql/*/bin``
(``make postgres-install``). Missing ⇒ the tests skip with the reason, except under
``CI=true``, where they fail. PostgreSQL refuses to run as root: as root the server runs as
an unprivileged user (``toolgate-test``, created if missing, else ``nobody``).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest

USER = "toolgate"  # the database superuser initdb creates
START_TIMEOUT = 30.0


def find_bindir() -> Path | None:
    """The folder holding initdb and postgres, or None."""
    candidates = []
    pg_config = shutil.which("pg_config")
    if pg_config:
        out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, check=False)
        candidates.append(out.stdout.strip())
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=_version_key, reverse=True)
    for folder in candidates:
        if folder and (Path(folder) / "initdb").exists() and (Path(folder) / "postgres").exists():
            return Path(folder)
    return None


def _version_key(folder: str) -> int:
    part = Path(folder).parent.name
    return int(part) if part.isdigit() else 0


def _run_as() -> tuple[int, int] | None:
    """(uid, gid) to run the server as when we are root, else None (run as ourselves)."""
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam("toolgate-test")
    except KeyError:
        made = subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", "toolgate-test"],
            capture_output=True, check=False,
        )
        entry = pwd.getpwnam("toolgate-test" if made.returncode == 0 else "nobody")
    return entry.pw_uid, entry.pw_gid


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PostgresServer:
    """One postgres process over a throw-away data dir."""

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.root = Path(tempfile.mkdtemp(prefix="tgpg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self.host = "127.0.0.1"
        self.proc: subprocess.Popen[bytes] | None = None
        self._owner = _run_as()
        self._log = self.root / "postgres.log"
        if self._owner:
            os.chown(self.root, *self._owner)

    # -- lifecycle ------------------------------------------------------------------------

    def init(self) -> "PostgresServer":
        self._spawn(
            [str(self.bindir / "initdb"), "-D", str(self.data), "-U", USER, "--auth=trust",
             "-E", "UTF8", "--locale=C", "--no-sync"],
            wait=True,
        )
        return self

    def start(self) -> "PostgresServer":
        self.proc = self._spawn([
            str(self.bindir / "postgres"), "-D", str(self.data), "-p", str(self.port),
            "-c", f"listen_addresses={self.host}", "-c", f"unix_socket_directories={self.root}",
            "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
            "-c", "max_connections=300", "-c", "log_min_messages=warning",
        ])
        self.wait_ready()
        return self

    def stop(self, sig: int = signal.SIGINT) -> None:
        """SIGINT is PostgreSQL's fast shutdown: open connections are cut, then it exits."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def wait_ready(self, timeout: float = START_TIMEOUT) -> None:
        """Bounded wait until the server accepts a connection."""
        import psycopg

        deadline = time.monotonic() + timeout
        delay = 0.02
        while True:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"postgres exited with {self.proc.returncode}: {self.log_tail()}")
            try:
                with psycopg.connect(self.dsn("postgres"), connect_timeout=2):
                    return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"postgres not ready after {timeout} s: {self.log_tail()}") from None
                time.sleep(delay)  # polling the server's readiness, bounded by the deadline
                delay = min(delay * 2, 0.2)

    # -- databases ------------------------------------------------------------------------

    def dsn(self, dbname: str) -> str:
        return f"host={self.host} port={self.port} user={USER} dbname={dbname} connect_timeout=5"

    def create_database(self, prefix: str = "t") -> str:
        """A new empty database; returns its DSN."""
        import psycopg

        name = f"{prefix}_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.dsn("postgres"), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.dsn(name)

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self._log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def _spawn(self, argv: list[str], *, wait: bool = False) -> subprocess.Popen[bytes]:
        owner = self._owner
        log = open(self._log, "ab")
        if owner:
            os.chown(self._log, *owner)
        drop: dict[str, object] = {}
        setpriv = shutil.which("setpriv")
        if owner and setpriv:
            # exec drops privileges, so Popen can vfork: a plain fork in a process running gRPC
            # threads may crash the child in gRPC's fork handlers before it reaches exec
            argv = [setpriv, f"--reuid={owner[0]}", f"--regid={owner[1]}", "--clear-groups", *argv]
        elif owner:
            drop = {"user": owner[0], "group": owner[1], "extra_groups": []}
        try:
            proc = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, cwd=self.root, start_new_session=True,
                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"}, **drop,  # type: ignore[arg-type]
            )
        finally:
            log.close()
        if wait and proc.wait(120) != 0:
            raise RuntimeError(f"{Path(argv[0]).name} failed: {self.log_tail()}")
        return proc


def start_postgres() -> PostgresServer:
    """Start a private server, or skip (fail under CI=true) when the binaries are missing."""
    bindir = find_bindir()
    if bindir is None:
        reason = "PostgreSQL server binaries not found (pg_config --bindir, /usr/lib/postgresql/*/bin); run `make postgres-install`"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    server = PostgresServer(bindir)
    try:
        return server.init().start()
    except BaseException:
        server.cleanup()
        raise


@pytest.fixture(scope="session")
def pg_server():
    server = start_postgres()
    yield server
    server.cleanup()


@pytest.fixture
def pg_dsn(pg_server: PostgresServer) -> str:
    if pg_server.proc is None or pg_server.proc.poll() is not None:
        pg_server.start()  # a test that restarted the server and failed half-way
    return pg_server.create_database()
