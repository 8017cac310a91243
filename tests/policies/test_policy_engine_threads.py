"""A regorus engine may be freed only on the thread that made it (pyo3 refuses elsewhere, says
"unsendable, but is being dropped on another thread" and leaks it). An engine that a reference
cycle holds — a failed compile's traceback kept by an exception stored in one of its own frames,
as ``pytest.raises`` and many error paths keep one — is freed by the cyclic garbage collector, on
whichever thread allocates: a worker of ``asyncio.to_thread``, a metrics exporter. Each engine is
held in an ``OwnedEngine`` that, collected on another thread, hands its engine back to be freed
on its own thread later."""

from __future__ import annotations

import gc
import sys
import threading
from pathlib import Path

import pytest

from policies._bundle import compile_bundle, read_bundle
from policies._errors import PolicyLoadError
from policies._owned import _strays, free_strays


def _bundle(tmp_path: Path) -> Path:
    (tmp_path / "a.rego").write_text('package toolgate\nimport rego.v1\ndecision := {"decision": "allow"}\n')
    (tmp_path / "b.rego").write_text("package toolgate\nthis is not rego\n")  # the compile fails here
    return tmp_path


def _failed_compile_kept_in_a_cycle(folder: Path) -> None:
    """Compile, fail, and keep the error in a local of this frame: error -> traceback -> this frame
    -> error, a cycle holding compile_bundle's frame, and with it the engine it made."""
    try:
        compile_bundle(read_bundle(folder))
    except PolicyLoadError as exc:
        kept = exc  # noqa: F841 - the cycle
        return


def test_an_engine_collected_on_another_thread_is_freed_on_its_own(tmp_path, monkeypatch):
    unraisable: list[str] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: unraisable.append(repr(u.exc_value)))
    gc.collect()
    gc.disable()
    try:
        _failed_compile_kept_in_a_cycle(_bundle(tmp_path))
        collector = threading.Thread(target=gc.collect)
        collector.start()
        collector.join()
    finally:
        gc.enable()
    assert not [u for u in unraisable if "unsendable" in u], unraisable
    assert any(owner == threading.get_ident() for owner, _ in _strays)  # handed back, not leaked
    elsewhere = threading.Thread(target=free_strays)  # another thread frees only its own
    elsewhere.start()
    elsewhere.join()
    assert any(owner == threading.get_ident() for owner, _ in _strays)
    free_strays()  # here, on the thread that made it
    assert not any(owner == threading.get_ident() for owner, _ in _strays)
    gc.collect()
    assert not [u for u in unraisable if "unsendable" in u], unraisable


def test_a_failed_compile_still_names_where_it_failed(tmp_path):
    with pytest.raises(PolicyLoadError, match="b.rego"):
        compile_bundle(read_bundle(_bundle(tmp_path)))
