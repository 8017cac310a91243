"""An in-process gateway on 127.0.0.1 with observability on."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from gateway.testing import start_gateway  # noqa: E402
from tests.observability._support import Client, make_config  # noqa: E402


@pytest.fixture
async def observed(tmp_path):
    """(running gateway, client) with metrics on a free port."""
    running = await start_gateway(make_config(tmp_path, metrics_port=0))
    client = Client(running.address)
    try:
        yield running, client
    finally:
        await client.close()
        await running.stop()
