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


def test_each_log_line_goes_out_in_one_write_with_its_newline(monkeypatch):
    """Workers share the supervisor's stderr: print() wrote a line and its newline in two writes,
    so two workers logging at once (at a stop) glued their lines into one, no longer JSON."""
    import json
    import sys

    import structlog

    from gateway.cli.serve_cmd import configure_logging

    class Recorder:
        def __init__(self) -> None:
            self.writes: list[str] = []

        def write(self, text: str) -> int:
            self.writes.append(text)
            return len(text)

        def flush(self) -> None:
            pass

    recorder = Recorder()
    monkeypatch.setattr(sys, "stderr", recorder)
    try:
        configure_logging(worker=3)
        structlog.get_logger().info("stopping", reason="SIGTERM")
    finally:
        structlog.reset_defaults()
    assert len(recorder.writes) == 1 and recorder.writes[0].endswith("\n"), recorder.writes
    line = json.loads(recorder.writes[0])
    assert line["event"] == "stopping" and line["worker"] == 3
