"""``Scrubber.data`` takes JSON data only, as ``gateway.jsonable`` makes of a tool's result.

Its one caller (``normalize.scrub_result``) never gives it a tuple, bytes or a key that is not text,
so the branches that read those are gone. Anything else now raises ``TypeError`` instead of passing
through: a value the scrubber does not read is a value it cannot scrub.
"""

from __future__ import annotations

import pytest

from gateway.executors.base import ExecResult
from gateway.jsonable import jsonable
from gateway.normalize import scrub_result
from gateway.scrub import REDACTED, Scrubber

SECRET = "s3cr3t-value-42"


@pytest.mark.parametrize("value", [
    (SECRET,),
    SECRET.encode(),
    bytearray(SECRET.encode()),
    {"k": (SECRET,)},
    [{"k": SECRET.encode()}],
    {SECRET.encode(): 1},
    {1: SECRET},
    {("t", 1): SECRET},
    {SECRET},
    object(),
], ids=["tuple", "bytes", "bytearray", "nested_tuple", "nested_bytes", "bytes_key", "int_key", "tuple_key", "set",
        "object"])
def test_anything_but_json_data_is_refused_not_passed_through(value):
    with pytest.raises(TypeError):
        Scrubber([SECRET]).data(value)


@pytest.mark.parametrize("value", [
    (SECRET,), SECRET.encode(), {"k": (SECRET,)}, {SECRET.encode(): 1}, {1: SECRET}, {("t", 1): SECRET}, {SECRET},
    object(),
], ids=["tuple", "bytes", "nested_tuple", "bytes_key", "int_key", "tuple_key", "set", "object"])
def test_the_observation_path_gives_the_scrubber_json_data_it_takes(value):
    Scrubber([SECRET]).data(jsonable(value))  # no TypeError
    clean = scrub_result(ExecResult(ok=True, data=value), {SECRET})
    assert SECRET not in repr(clean.data)


def test_json_data_is_scrubbed_as_before():
    data = {"a": [SECRET, 1, 2.5, True, None], SECRET: {"n": 7}}
    assert Scrubber([SECRET]).data(data) == ({"a": [REDACTED, 1, 2.5, True, None], REDACTED: {"n": 7}}, 2)
