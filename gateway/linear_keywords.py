"""``uniqueItems`` and ``unevaluatedItems`` in time linear in the array, for the gateway's validator.

jsonschema 4.26 compares the items of an array of objects pairwise for ``uniqueItems`` (2,000
objects took 3.4 s, holding the event loop and the GIL), and looks each index up in a list for
``unevaluatedItems`` (quadratic: 8,000 items, 0.3 s). The agent chooses the array, so these
replace jsonschema's in ``ecma_regex.Validator``, with the same verdicts and messages.
"""

from __future__ import annotations

from typing import Any, Hashable, Iterator

from jsonschema import ValidationError
from jsonschema._utils import extras_msg, find_evaluated_item_indexes_by_schema


def json_key(value: Any) -> Hashable:
    """A hashable form of a JSON value, equal for values JSON Schema calls equal: numbers by
    mathematical value (``1`` and ``1.0``), never a boolean and a number (``true`` and ``1``),
    object members in any order. Arguments are at most ``arguments.MAX_DEPTH`` deep."""
    if value is True or value is False or value is None:
        return ("literal", value)
    if isinstance(value, (int, float)):
        return ("number", value)  # 1 == 1.0 and hash(1) == hash(1.0)
    if isinstance(value, str):
        return ("string", value)
    if isinstance(value, (list, tuple)):
        return ("array", tuple(json_key(item) for item in value))
    if isinstance(value, dict):
        return ("object", frozenset((key, json_key(item)) for key, item in value.items()))
    return ("other", repr(value))  # not JSON; the strict parse lets none through


def unique_items(validator: Any, unique: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if unique and validator.is_type(instance, "array") and len({json_key(item) for item in instance}) < len(instance):
        yield ValidationError(f"{instance!r} has non-unique elements")


def unevaluated_items(validator: Any, uneval: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "array"):
        return
    evaluated = set(find_evaluated_item_indexes_by_schema(validator, instance, schema))
    left = [item for index, item in enumerate(instance) if index not in evaluated]
    if left:
        yield ValidationError("Unevaluated items are not allowed (%s %s unexpected)" % extras_msg(left))
