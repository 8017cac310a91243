"""Each key once per JSON object: the ``object_pairs_hook`` every strict reader here uses.

``json.loads`` keeps the last value of a key given twice; another reader may keep the first, so
the same text would mean two things (``{"decision": "deny", "decision": "allow"}``). A leaf module:
the arguments, the audit log's verifier and the policy engines' answers all read with it.
"""

from __future__ import annotations

from typing import Any


class DuplicateKey(ValueError):
    """A key appears twice in one JSON object (``key`` is it)."""

    def __init__(self, key: str) -> None:
        super().__init__(f"key {key[:64]!r} appears twice in one object")
        self.key = key


def unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """The object of ``pairs``; raises ``DuplicateKey`` when a key comes twice."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKey(key)
            seen.add(key)
    return obj
