"""An approval record is stored as the same JSON whether its fields are copied shallowly
(``record_fields``, the store's way) or recursively (``dataclasses.asdict``, the way rows
already on disk were written), so old and new rows read back alike."""

from __future__ import annotations

import dataclasses
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.store.base import ApprovalRecord, ApprovalStatus
from gateway.store._records import load_row
from gateway.store.sqlite import _dump

text = st.text(max_size=12)
json_leaf = st.none() | st.booleans() | st.integers(-2**40, 2**40) | text
records = st.builds(
    ApprovalRecord,
    approval_id=text, status=st.sampled_from(list(ApprovalStatus)), tenant=text, agent=text, user=text,
    run_id=text, step=st.integers(0, 10**6), tool=text, tool_version=text, args_json=text, args_hash=text,
    reasons=st.tuples(text) | st.tuples(), groups_any=st.tuples(text, text), quorum=st.integers(1, 10),
    risk=st.dictionaries(text, json_leaf | st.lists(json_leaf, max_size=3), max_size=4),
    created_at=st.floats(0, 2e9), expires_at=st.floats(0, 2e9), decision_id=text, audience=text,
    approvers=st.tuples(text) | st.tuples(), rejection_reason=text, grant=text, grant_jti=text,
    updated_at=st.floats(0, 2e9),
)


@settings(max_examples=300, deadline=None)
@given(records)
def test_stored_json_is_what_asdict_gave_and_reads_back_equal(rec: ApprovalRecord) -> None:
    stored = {k: v for k, v in dataclasses.asdict(rec).items() if k != "load_problems"}  # never stored
    assert _dump(rec) == json.dumps(stored, separators=(",", ":"), ensure_ascii=False)
    assert load_row(_dump(rec), rec.approval_id, str(rec.status), rec.tenant, rec.created_at) == rec

