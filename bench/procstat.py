"""CPU time and resident memory of a process from /proc (Linux only, no psutil)."""

from __future__ import annotations

import os

_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of all threads of ``pid`` so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # after the command name: state is field 3, utime 14 and stime 15 (1-based in proc(5))
    return (int(fields[11]) + int(fields[12])) / _TICKS


def rss_bytes(pid: int) -> int:
    """Resident set size of ``pid`` now."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def tree(pid: int) -> list[int]:
    """``pid`` and all its descendants (scans /proc: no children file on every kernel)."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue  # exited while we looked
        parents.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        todo.extend(parents.get(p, ()))
    return found


def tree_cpu_seconds(pid: int) -> float:
    """CPU time of ``pid`` and its descendants (the workers of a supervisor)."""
    return sum(_or_zero(cpu_seconds, p) for p in tree(pid))


def tree_rss_bytes(pid: int) -> int:
    """Resident memory of ``pid`` and its descendants."""
    return int(sum(_or_zero(rss_bytes, p) for p in tree(pid)))


def _or_zero(fn: object, pid: int) -> float:
    try:
        return fn(pid)  # type: ignore[operator]
    except (OSError, RuntimeError):
        return 0.0
