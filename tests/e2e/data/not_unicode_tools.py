"""Python tools whose text is no Unicode: lone surrogates in an error type, an error message,
and in the keys and values of their data."""

from gateway.executors.python import ToolFailure


def bad_error_type(args, ctx):
    raise ToolFailure("Bad\ud800Type", "message")


def bad_error_message(args, ctx):
    raise ValueError("bad \ud800 text")


def bad_data(args, ctx):
    return {"text \udfff": "value \ud800", "text \\udfff": "literal", "list": ["\udc80"]}
