"""Fixtures: a real OPA server (see policy_opa_server.py) for the policy tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from policy_opa_server import REGO, OPAServer, opa_path


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
