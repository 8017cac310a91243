"""Fixtures: real OPA servers (see policy_opa_server.py) for the policy tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from policy_opa_server import REGO, OPAServer, UnixSocketOPA, opa_path, tls_files


@pytest.fixture(scope="session")
def opa_binary() -> Path:
    return opa_path()


@pytest.fixture(scope="session")
def opa_server(opa_binary: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OPAServer]:
    """One OPA server serving the default bundle for the whole session."""
    server = OPAServer(opa_binary, REGO, tmp_path_factory.mktemp("opa"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def tls_opa(opa_binary: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[OPAServer, Path]]:
    """OPA serving the default bundle over ``https://``, and the file of the CA that signed its certificate."""
    logs, certs = tmp_path_factory.mktemp("opa-tls-logs"), tmp_path_factory.mktemp("opa-tls-certs")
    tls = tls_files(certs)  # apart from the log: OPA reloads its certificate when their folder changes
    server = OPAServer(opa_binary, REGO, logs, tls=tls)
    server.start()
    yield server, tls[0]
    server.stop()


@pytest.fixture
def unix_opa(opa_binary: Path, tmp_path: Path) -> Iterator[UnixSocketOPA]:
    """OPA on a Unix socket serving the default bundle and ``data.echo.n`` (= ``input.n``)."""
    extra = tmp_path / "echo"
    extra.mkdir()
    (extra / "echo.rego").write_text("package echo\n\nn := input.n\n")
    server = UnixSocketOPA(opa_binary, extra, tmp_path)
    server.start()
    yield server
    server.remove()
