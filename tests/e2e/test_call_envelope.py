"""The call's own labels (run_id, idempotency_key, approval_id) are shown to approvers and kept
in the audit, so only plain text passes; an approval_id follows the one rule the Approvals
service applies to ids (1 to 128 printable ASCII characters, no spaces). A refused label is
an ``invalid_arguments`` field error naming it, the tool never runs, and the label never
reaches the log as sent. Over a real server on 127.0.0.1 (port 0)."""

from __future__ import annotations

import pytest

from gateway.testing import calls_recorded
from tests.conftest import audit_records

ARGS = '{"n": 1}'


def _calls_made(gateway) -> int:
    return calls_recorded(gateway.app.config.data_path / "sandbox", "count_call")


@pytest.mark.parametrize(("field", "value"), [
    ("run_id", "run\x1b[2J"),
    ("run_id", "r" * 257),
    ("idempotency_key", "key\nsecond line"),
    ("idempotency_key", "k\u202e"),
    ("approval_id", "a b"),  # a space: no id the service makes or accepts has one
    ("approval_id", "a" * 129),
    ("approval_id", "id\x00"),
])
async def test_a_label_that_is_not_plain_text_is_refused_as_a_field_error(gateway, client, field, value):
    resp = await client.call("count_call", ARGS, **{field: value})
    assert resp.refused.code == "invalid_arguments", resp
    assert [e.path for e in resp.refused.field_errors] == [field]
    assert _calls_made(gateway) == 0
    text = gateway.app.config.audit_path.read_text()
    assert value not in text


async def test_plain_labels_pass(gateway, client):
    resp = await client.call("count_call", ARGS, run_id="my run 7", idempotency_key="order-42 retry 1")
    assert resp.code == "ok", resp
    assert _calls_made(gateway) == 1
    [result] = [r for r in audit_records(gateway.app.config.audit_path)
                if r.get("decision_id") == resp.decision_id and r.get("stage") == "result"]
    assert result["code"] == "ok"
