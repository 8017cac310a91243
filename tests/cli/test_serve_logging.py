"""``toolgate serve``'s logs carry an exception's text and traceback: an unexpected error in a
call was logged as ``{"event": "pipeline_error", "exc_info": true}`` and nothing else."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import ROOT

PROGRAM = """
import structlog
from gateway.cli.serve_cmd import configure_logging
configure_logging()
try:
    int("lots")
except ValueError:
    structlog.get_logger("toolgate.pipeline").error("pipeline_error", exc_info=True)
"""


def test_an_error_logged_with_exc_info_carries_its_traceback() -> None:
    done = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=60, cwd=ROOT)
    record = json.loads(done.stderr.strip().splitlines()[-1])
    assert record["event"] == "pipeline_error" and record["level"] == "error"
    assert "Traceback" in record["exception"] and "invalid literal for int() with base 10: 'lots'" in record["exception"]
