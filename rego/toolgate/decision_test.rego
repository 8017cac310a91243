# Tests of the default bundle. Run with `toolgate policy test rego/` or `opa test rego/`.
package toolgate_test

import rego.v1

import data.toolgate

# ---------------------------------------------------------------- helpers

tool(name, side_effect) := {
	"name": name,
	"version": "1",
	"risk": {"side_effect": side_effect, "reversibility": "reversible", "data_sensitivity": "internal"},
	"labels": [],
	"constraints": {},
}

call(name, side_effect, args) := {
	"caller": {"tenant": "acme", "agent": "support-bot", "user": "alice"},
	"tool": tool(name, side_effect),
	"args": args,
	"args_hash": "sha256:00",
	"run": {"id": "run-1", "step": 1, "evidence": {}},
	"environment": {"gateway_id": "toolgate", "time": "2025-01-01T00:00:00Z"},
}

with_evidence(inp, evidence) := object.union(inp, {"run": {"id": "run-1", "step": 1, "evidence": evidence}})

with_approval(inp, approvers, groups) := object.union(inp, {"approval": {"approvers": approvers, "groups": groups}})

refund(amount) := call("refund", "external_write", {"amount": amount, "order_id": "o-1", "currency": "EUR"})

decide(inp) := d if {
	d := toolgate.decision with input as inp
}

# ---------------------------------------------------------------- side effects

test_read_tools_allowed if {
	every name in ["read_file", "list_dir", "lookup_policy", "run_command", "http_get"] {
		d := decide(call(name, "read", {"path": "docs/readme.md"}))
		d.decision == "allow"
		d.audit == "minimal"
	}
}

test_none_side_effect_allowed if {
	decide(call("now", "none", {})).decision == "allow"
}

test_write_requires_ops_approval if {
	d := decide(call("write_file", "write", {"path": "notes/a.txt", "content": "x"}))
	d.decision == "require_approval"
	d.approval == {"groups_any": ["ops"], "quorum": 1, "ttl_seconds": 900}
	d.audit == "full"
}

test_external_write_requires_ops_approval if {
	d := decide(call("post_message", "external_write", {"text": "hi"}))
	d.decision == "require_approval"
	d.approval.groups_any == ["ops"]
	d.audit == "full"
}

test_destructive_denied if {
	d := decide(call("delete_file", "destructive", {"path": "notes/a.txt"}))
	d.decision == "deny"
	d.reasons == ["destructive tools are denied by default"]
	d.audit == "full"
}

test_unknown_side_effect_denied if {
	d := decide(call("mystery", "teleport", {}))
	d.decision == "deny"
	d.reasons == ["no rule permits this call"]
}

test_missing_risk_denied if {
	decide({"tool": {"name": "read_file"}, "args": {}}).decision == "deny"
}

test_tool_constraints_passed_through if {
	inp := object.union(call("http_get", "read", {"url": "https://example.com"}), {"tool": {"constraints": {"hosts": ["example.com"]}}})
	decide(inp).constraints == {"hosts": ["example.com"]}
}

# ---------------------------------------------------------------- refunds

test_refund_small_allowed if {
	d := decide(refund(100))
	d.decision == "allow"
	d.audit == "full"
}

test_refund_zero_allowed if {
	decide(refund(0)).decision == "allow"
}

test_refund_medium_requires_finance if {
	every amount in [100.01, 500, 1000] {
		d := decide(refund(amount))
		d.decision == "require_approval"
		d.approval == {"groups_any": ["finance"], "quorum": 1, "ttl_seconds": 900}
	}
}

test_refund_large_requires_ticket if {
	every amount in [1000.5, 5000, 10000] {
		d := decide(refund(amount))
		d.decision == "require_more_evidence"
		d.evidence == ["ticket_id"]
	}
}

test_refund_large_empty_ticket_still_missing if {
	decide(with_evidence(refund(5000), {"ticket_id": ""})).decision == "require_more_evidence"
}

test_refund_large_with_ticket_requires_two_finance if {
	d := decide(with_evidence(refund(5000), {"ticket_id": "T-1"}))
	d.decision == "require_approval"
	d.approval == {"groups_any": ["finance"], "quorum": 2, "ttl_seconds": 900}
}

test_refund_huge_denied if {
	d := decide(with_evidence(refund(10000.01), {"ticket_id": "T-1"}))
	d.decision == "deny"
	d.reasons == ["refunds above 10000 are denied"]
}

test_refund_non_number_denied if {
	decide(refund("50")).reasons == ["refund amount must be a number"]
	decide(refund(null)).reasons == ["refund amount must be a number"]
}

test_refund_without_amount_denied if {
	d := decide(call("refund", "external_write", {"order_id": "o-1"}))
	d.decision == "deny"
	d.reasons == ["refund amount must be a number"]
}

test_refund_negative_denied if {
	decide(refund(-5)).decision == "deny"
}

# ---------------------------------------------------------------- sensitive paths

test_sensitive_paths_need_security_even_for_reads if {
	every path in ["secrets/db.txt", "./secrets/db.txt", "a/../secrets/x", "home/.ssh/config", "app/.env", "keys/id_rsa.pub"] {
		d := decide(call("read_file", "read", {"path": path}))
		d.decision == "require_approval"
		d.approval.groups_any == ["security"]
	}
}

test_ordinary_paths_not_sensitive if {
	every path in ["docs/secrets.md", "src/environment.py", "notes/ssh.txt"] {
		decide(call("read_file", "read", {"path": path})).decision == "allow"
	}
}

test_sensitive_write_needs_security if {
	decide(call("write_file", "write", {"path": "secrets/x"})).approval.groups_any == ["security"]
}

test_non_string_path_ignored if {
	decide(call("read_file", "read", {"path": ["secrets/x"]})).decision == "allow"
}

# ---------------------------------------------------------------- approvals satisfied

test_approval_satisfies_write if {
	d := decide(with_approval(call("write_file", "write", {"path": "notes/a.txt"}), ["bob"], ["ops"]))
	d.decision == "allow"
	d.reasons == ["approved by ops (quorum 1 met)"]
}

test_approval_from_wrong_group_does_not_satisfy if {
	decide(with_approval(call("write_file", "write", {"path": "notes/a.txt"}), ["bob"], ["finance"])).decision == "require_approval"
}

test_approval_satisfies_medium_refund if {
	decide(with_approval(refund(500), ["carol"], ["finance"])).decision == "allow"
}

test_quorum_two_with_one_approver_still_requires_approval if {
	inp := with_approval(with_evidence(refund(5000), {"ticket_id": "T-1"}), ["carol"], ["finance"])
	d := decide(inp)
	d.decision == "require_approval"
	d.approval.quorum == 2
}

test_quorum_two_same_approver_twice_still_requires_approval if {
	inp := with_approval(with_evidence(refund(5000), {"ticket_id": "T-1"}), ["carol", "carol"], ["finance"])
	decide(inp).decision == "require_approval"
}

test_quorum_two_with_two_approvers_allowed if {
	inp := with_approval(with_evidence(refund(5000), {"ticket_id": "T-1"}), ["carol", "dave"], ["finance"])
	decide(inp).decision == "allow"
}

test_approval_satisfies_sensitive_read if {
	decide(with_approval(call("read_file", "read", {"path": "secrets/db.txt"}), ["erin"], ["security"])).decision == "allow"
}

test_approval_does_not_skip_evidence if {
	decide(with_approval(refund(5000), ["carol", "dave"], ["finance"])).decision == "require_more_evidence"
}

# ---------------------------------------------------------------- deny wins

test_deny_wins_over_approval_for_destructive if {
	d := decide(with_approval(call("delete_file", "destructive", {"path": "notes/a.txt"}), ["bob", "carol"], ["ops", "security"]))
	d.decision == "deny"
}

test_deny_wins_over_approval_for_huge_refund if {
	inp := with_approval(with_evidence(refund(20000), {"ticket_id": "T-1"}), ["carol", "dave"], ["finance"])
	decide(inp).decision == "deny"
}

test_deny_wins_over_sensitive_path if {
	decide(call("delete_file", "destructive", {"path": "secrets/x"})).decision == "deny"
}

# ---------------------------------------------------------------- visibility

test_tools_visible_by_default if {
	toolgate.visible with input as {"tool": tool("read_file", "read")}
}

test_hidden_tools_not_visible if {
	not toolgate.visible with input as {"tool": object.union(tool("debug", "read"), {"labels": ["hidden"]})}
}

# ---------------------------------------------------------------- the read fast path

# `decision` decides plain reads in its first branch; it must say what the full chain says.
test_read_fast_path_agrees_with_full_decision if {
	every inp in [
		call("read_file", "read", {"path": "docs/readme.md"}),
		call("now", "none", {}),
		call("read_file", "read", {"path": "secrets/db.txt"}),
		with_approval(call("read_file", "read", {"path": "app/.env"}), ["bob"], ["security"]),
		call("refund", "read", {"amount": 5}),
		call("list_dir", "read", {"path": 7}),
		object.union(call("read_file", "read", {}), {"tool": object.union(tool("read_file", "read"), {"constraints": {"max_bytes": 10}})}),
	] {
		d := decide(inp)
		d == toolgate.full_decision with input as inp
	}
}
