"""``python -m bench``'s options: what cannot run is refused before any server starts (exit 2,
a message naming the option), and the results file is written whole or not at all."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench import __main__ as bench_main

REPO = Path(__file__).resolve().parents[2]
_PROGRESS = re.compile(r"^\[ *\d+\.\ds\] ", re.MULTILINE)
"""A progress line (``bench.__main__.progress``): printed once a run has begun."""


def _bench(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bench", *argv], cwd=REPO, capture_output=True, text=True,
                          timeout=60)


@pytest.mark.parametrize(("argv", "says"), [
    (["--rounds", "0"], "argument --rounds: 0 is not a positive whole number"),
    (["--rounds", "-3"], "argument --rounds: -3 is not a positive whole number"),
    (["--rounds", "two"], "argument --rounds: 'two' is not a whole number"),
    (["--workers", "0"], "argument --workers: 0 is not a positive whole number"),
    (["--channels", "-1"], "argument --channels: -1 is not a positive whole number"),
    (["--open-loop-fraction", "0"], "argument --open-loop-fraction: 0 is not a fraction above 0 and at most 1"),
    (["--open-loop-fraction", "-0.5"], "argument --open-loop-fraction: -0.5 is not a fraction"),
    (["--open-loop-fraction", "1.01"], "argument --open-loop-fraction: 1.01 is not a fraction"),
    (["--open-loop-fraction", "nan"], "argument --open-loop-fraction: nan is not a fraction"),
    (["--open-loop-fraction", "inf"], "argument --open-loop-fraction: inf is not a fraction"),
    (["--open-loop-fraction", "half"], "argument --open-loop-fraction: 'half' is not a number"),
])
def test_options_that_cannot_run_are_refused_at_once(argv: list[str], says: str) -> None:
    done = _bench(*argv)
    assert done.returncode == 2, done.stderr
    assert says in done.stderr
    assert not _PROGRESS.search(done.stderr)  # nothing started
    assert done.stdout == ""


def test_an_out_path_under_a_file_is_refused_before_the_run(tmp_path: Path) -> None:
    blocker = tmp_path / "results"
    blocker.write_text("a file where a folder would go")
    done = _bench("--out", str(blocker / "deeper" / "latest.json"))
    assert done.returncode == 2
    assert f"{blocker} is a file, not a folder" in done.stderr
    assert not _PROGRESS.search(done.stderr)  # the run never began
    assert blocker.read_text() == "a file where a folder would go"


def test_an_out_path_that_is_a_folder_is_refused(tmp_path: Path) -> None:
    done = _bench("--out", str(tmp_path))
    assert done.returncode == 2
    assert "it is a folder" in done.stderr


def test_the_check_makes_the_folder_and_leaves_nothing_else(tmp_path: Path) -> None:
    out = tmp_path / "a" / "b" / "latest.json"
    bench_main._check_writable(out)
    assert out.parent.is_dir()
    assert list(out.parent.iterdir()) == []


def test_sound_options_parse_with_their_defaults(tmp_path: Path) -> None:
    args = bench_main._parse(["--quick", "--out", str(tmp_path / "r.json"), "--open-loop-fraction", "1"])
    assert (args.quick, args.rounds, args.workers, args.channels, args.open_loop_fraction) == (True, None, None, None, 1.0)
    args = bench_main._parse(["--rounds", "7", "--workers", "1", "--channels", "3", "--out", str(tmp_path / "r.json")])
    assert (args.rounds, args.workers, args.channels) == (7, 1, 3)


def test_results_replace_the_old_file_whole(tmp_path: Path) -> None:
    out = tmp_path / "latest.json"
    out.write_text('{"old": true}')
    os.chmod(out, 0o644)
    bench_main._write_results(out, json.dumps({"new": 1}))
    assert json.loads(out.read_text()) == {"new": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["latest.json"]  # no temporary file left
    assert out.stat().st_mode & 0o777 == 0o666 & ~_umask()


def test_a_failed_write_leaves_the_old_results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "latest.json"
    out.write_text('{"old": true}')

    def refuse(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(bench_main.os, "replace", refuse)
    with pytest.raises(OSError, match="No space left"):
        bench_main._write_results(out, json.dumps({"new": 1}))
    assert json.loads(out.read_text()) == {"old": True}
    assert [p.name for p in tmp_path.iterdir()] == ["latest.json"]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
