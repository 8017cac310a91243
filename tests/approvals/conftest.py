"""Fixtures for the approval tests (helpers in approval_helpers.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from approval_helpers import Clients, write_config
from gateway.testing import start_gateway


@pytest.fixture
async def gw(tmp_path: Path):
    running = await start_gateway(write_config(tmp_path))
    clients = Clients(running.address)
    try:
        yield running, clients
    finally:
        await clients.channel.close()
        await running.stop()
