"""Fixtures for the approval tests (helpers in approval_helpers.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from approval_helpers import serving, write_config


@pytest.fixture
async def gw(tmp_path: Path):
    async with serving(write_config(tmp_path)) as both:
        yield both
