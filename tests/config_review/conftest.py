"""Configs that are the demo config with one change, written to a file and loaded as ``toolgate serve`` would."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml

from tests.conftest import DEMO_CONFIG

Change = Callable[[dict[str, Any]], None]


def demo_raw(tmp_path: Path) -> dict[str, Any]:
    """The demo config as a mapping, its data dir in tmp_path and its policy bundle the repository's."""
    raw = yaml.safe_load(DEMO_CONFIG.read_text())
    raw["data_dir"] = str(tmp_path / "data")
    raw["policy"]["bundle"] = str(DEMO_CONFIG.parent.parent / "rego")
    return raw


def tool_named(raw: dict[str, Any], name: str) -> dict[str, Any]:
    return next(t for t in raw["tools"] if t["name"] == name)


@pytest.fixture
def demo_with(tmp_path: Path) -> Callable[[Change], Path]:
    """``demo_with(change)``: the demo config, ``change`` applied to its mapping, written as
    ``toolgate.yaml`` in tmp_path; returns the file."""

    def write(change: Change) -> Path:
        raw = copy.deepcopy(demo_raw(tmp_path))
        change(raw)
        path = tmp_path / "toolgate.yaml"
        path.write_text(yaml.safe_dump(raw))
        return path

    return write
