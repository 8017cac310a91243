"""SQLite checkpoints of a long run: the loop saves after every step, and each save wrote the
whole state and the whole event log again, so a run's saves wrote an amount growing with the
square of its length (a 1,000-step run: hundreds of MB for a log of a few hundred KB). A save
now writes the events the file lacks and, now and then, a snapshot of the state; a load applies
the events after the snapshot. What a load gives is what was saved, at every point of the run,
and a file written in the older layout (the whole log in each row) is read and carried on."""

from __future__ import annotations

import json
import sqlite3

import pytest

from runtime_client import AgentState, CheckpointError, SQLiteCheckpoints, StopReason
from runtime_client._events import EventLog, replay


def _step(log: EventLog, n: int) -> None:
    log.record("step_started", step=n)
    log.record("message_added", role="assistant", content=f"step {n}: " + "thinking " * 20)
    log.record("observation_recorded", step=n, kind="tool", summary=f"result {n}", tool="lookup",
               data={"rows": [n] * 10}, trust="untrusted")
    log.record("tool_called", tool="lookup")


def _written(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Bytes of text each statement the store runs carries (bound values written out)."""
    sizes: list[int] = []
    connect = sqlite3.connect

    def counting(*args, **kwargs):
        db = connect(*args, **kwargs)
        db.set_trace_callback(lambda sql: sizes.append(len(sql.encode())))
        return db

    monkeypatch.setattr(sqlite3, "connect", counting)
    return sizes


def test_a_long_runs_saves_write_about_what_the_run_holds(tmp_path, monkeypatch):
    store = SQLiteCheckpoints(tmp_path / "c.sqlite3")
    sizes = _written(monkeypatch)
    log = EventLog.start(AgentState(run_id="long", goal="count", max_steps=1000))
    for n in range(1, 401):
        _step(log, n)
        store.save(log.state, log.events)
    held = len(log.state.to_json()) + len(json.dumps([e.to_dict() for e in log.events]))
    assert sum(sizes) < 4 * held, (sum(sizes), held)  # whole state and log each time: ~200x
    state, events = store.load("long")
    assert state == log.state and events == log.events and replay(events) == state


def test_each_save_loads_back_as_saved(tmp_path):
    store = SQLiteCheckpoints(tmp_path / "c.sqlite3")
    log = EventLog.start(AgentState(run_id="r", goal="g", max_steps=500))
    for n in range(1, 120):
        _step(log, n)
        if n % 7 == 0:
            log.record("stopped", reason=StopReason.AWAITING_APPROVAL.value)
            log.record("resumed")
        store.save(log.state, log.events)
        assert store.load("r") == (log.state, log.events), n


def test_a_file_of_the_older_layout_is_read_and_carried_on(tmp_path):
    path = tmp_path / "c.sqlite3"
    log = EventLog.start(AgentState(run_id="old", goal="g"))
    for n in range(1, 6):
        _step(log, n)
    with sqlite3.connect(path) as db:  # as an older version wrote it
        db.execute("CREATE TABLE checkpoints (run_id TEXT PRIMARY KEY, state TEXT NOT NULL, events TEXT NOT NULL,"
                   " updated_at REAL DEFAULT (unixepoch('subsec')))")
        db.execute("INSERT INTO checkpoints (run_id, state, events) VALUES (?, ?, ?)",
                   ("old", log.state.to_json(), json.dumps([e.to_dict() for e in log.events])))
    store = SQLiteCheckpoints(path)
    state, events = store.load("old")
    assert (state, events) == (log.state, log.events)
    carried = EventLog(state, events)
    for n in range(6, 60):
        _step(carried, n)
        store.save(carried.state, carried.events)
    assert store.load("old") == (carried.state, carried.events)
    assert replay(carried.events) == carried.state


def test_a_shorter_log_of_a_run_the_file_holds_is_refused(tmp_path):
    store = SQLiteCheckpoints(tmp_path / "c.sqlite3")
    log = EventLog.start(AgentState(run_id="r", goal="g"))
    for n in range(1, 4):
        _step(log, n)
    store.save(log.state, log.events)
    other = EventLog.start(AgentState(run_id="r", goal="another"))
    with pytest.raises(CheckpointError, match="more than"):
        store.save(other.state, other.events)
    assert store.load("r") == (log.state, log.events)


def test_a_longer_log_that_parted_from_the_one_the_file_holds_is_refused(tmp_path):
    """Two loops of one run id (two workers resuming one pause) each save their own log: the
    longer one's tail was appended to the other's beginning, a history that never happened."""
    store = SQLiteCheckpoints(tmp_path / "c.sqlite3")
    log = EventLog.start(AgentState(run_id="r", goal="g"))
    _step(log, 1)
    store.save(log.state, log.events)
    a, b = EventLog(*store.load("r")), EventLog(*store.load("r"))
    a.record("answered", text="A's answer")
    b.record("step_started", step=2)
    b.record("answered", text="B's answer")
    store.save(a.state, a.events)
    with pytest.raises(CheckpointError, match="differs from the one the file holds"):
        store.save(b.state, b.events)
    assert store.load("r") == (a.state, a.events)
    a.record("step_started", step=3)  # the log the file holds goes on saving
    store.save(a.state, a.events)
    assert store.load("r") == (a.state, a.events)
