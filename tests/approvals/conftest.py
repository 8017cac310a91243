"""Fixtures for the approval tests (helpers in approval_helpers.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from approval_helpers import gateway_process, private_demo_keys, serving, write_config


@pytest.fixture
async def gw(tmp_path: Path):
    async with serving(write_config(tmp_path)) as both:
        yield both


@pytest.fixture
def keys(tmp_path: Path) -> Path:
    """A folder with 0600 copies of the demo keys (``private_demo_keys``)."""
    return private_demo_keys(tmp_path / "keys")


@pytest.fixture
def gateway(tmp_path: Path):
    """``toolgate serve`` in a subprocess for this test (files using one per module define their own)."""
    with gateway_process(tmp_path) as gw:
        yield gw
