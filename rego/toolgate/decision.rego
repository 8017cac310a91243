# toolgate's default policy bundle. The gateway queries data.toolgate.decision
# (and data.toolgate.visible when listing tools). Input and decision documents are
# specified in DESIGN.md, "Policy contract".
#
# Order of precedence, first match wins:
#   1. any deny reason                 => deny (deny beats everything, approvals included)
#   2. missing evidence                => require_more_evidence
#   3. an approval rule not yet met    => require_approval
#   4. a permit (read, small refund, approval met) => allow
#   5. otherwise                       => deny ("no rule permits this call")
#
# At most one approval rule applies to a call; when several could, the first in
# approval_rule's else-chain wins (refund tiers, then sensitive paths, then writes).
#
# Cost: the gateway evaluates this on every call, and each rule the evaluation touches
# costs a few microseconds in the embedded engine. Facts are written so that a call
# which is not a refund never evaluates the refund rules, and a plain read (the most
# common call) is decided by the first branch of `decision`; `full_decision` is the
# complete chain; decision_test.rego and a generated-input test in
# tests/policies/test_policy_default_bundle.py check that both always agree.
package toolgate

import rego.v1

# ---------------------------------------------------------------- tool listing

default visible := true

visible := false if "hidden" in input.tool.labels

# ---------------------------------------------------------------- facts

side_effect := input.tool.risk.side_effect

is_refund if input.tool.name == "refund"

refund_amount := input.args.amount if {
	is_refund
	is_number(input.args.amount)
}

refund_tier := "auto" if refund_amount <= 100
else := "single" if refund_amount <= 1000
else := "dual" if refund_amount <= 10000

ticket_present if {
	ticket := input.run.evidence.ticket_id
	is_string(ticket)
	ticket != ""
}

ticket_present if is_number(input.run.evidence.ticket_id)

# A path is sensitive if it has a "secrets" segment anywhere (so "secrets/x",
# "./secrets/x" and "a/../secrets/x" all match) or mentions ssh keys or env files.
sensitive_path if {
	path := input.args.path
	is_string(path)
	sensitive(path)
}

sensitive(path) if "secrets" in split(path, "/")

sensitive(path) if contains(path, ".ssh")

sensitive(path) if contains(path, ".env")

sensitive(path) if contains(path, "id_rsa")

# ---------------------------------------------------------------- deny

# Both deny rules read the input directly rather than through `side_effect` and `is_refund`:
# every call's fast path evaluates the whole deny set, and each helper rule it touches costs
# (~20 % of a plain read's evaluation, measured in instructions).
deny contains "destructive tools are denied by default" if input.tool.risk.side_effect == "destructive"

deny contains reason if {
	input.tool.name == "refund"
	some reason in refund_denials
}

# A helper rule, not `not is_number(input.args.amount)`: with the amount missing, OPA
# leaves that negated call undefined while regorus makes it true.
refund_denials contains "refund amount must be a number" if not amount_is_number

amount_is_number if is_number(input.args.amount)

refund_denials contains "refund amount must not be negative" if refund_amount < 0

refund_denials contains "refunds above 10000 are denied" if refund_amount > 10000

# ---------------------------------------------------------------- evidence

missing_evidence contains "ticket_id" if {
	refund_tier == "dual"
	not ticket_present
}

# ---------------------------------------------------------------- approval

approval_rule := {
	"reason": "refunds above 1000 need two finance approvers",
	"requirement": {"groups_any": ["finance"], "quorum": 2, "ttl_seconds": 900},
} if {
	refund_tier == "dual"
	ticket_present
} else := {
	"reason": "refunds above 100 need finance approval",
	"requirement": {"groups_any": ["finance"], "quorum": 1, "ttl_seconds": 900},
} if {
	refund_tier == "single"
} else := {
	"reason": "sensitive path needs security approval",
	"requirement": {"groups_any": ["security"], "quorum": 1, "ttl_seconds": 900},
} if {
	sensitive_path
} else := {
	"reason": "write tools need ops approval",
	"requirement": {"groups_any": ["ops"], "quorum": 1, "ttl_seconds": 900},
} if {
	not is_refund
	side_effect in {"write", "external_write"}
}

approvers := {a | some a in input.approval.approvers; is_string(a); a != ""}

approval_satisfied if {
	requirement := approval_rule.requirement
	count(approvers) >= requirement.quorum
	some group in input.approval.groups
	group in requirement.groups_any
}

# ---------------------------------------------------------------- permit

permit contains "read-only tool" if {
	not is_refund
	side_effect in {"none", "read"}
}

permit contains "refund within the automatic limit (100)" if refund_tier == "auto"

permit contains sprintf("approved by %s (quorum %d met)", [concat(", ", approval_rule.requirement.groups_any), approval_rule.requirement.quorum]) if {
	approval_satisfied
}

# ---------------------------------------------------------------- decision

audit_level := "full" if side_effect in {"write", "external_write", "destructive"}
else := "full" if is_refund
else := "minimal"

tool_constraints := input.tool.constraints if is_object(input.tool.constraints)
else := {}

result(kind, reasons) := {"decision": kind, "reasons": reasons, "constraints": tool_constraints, "audit": audit_level}

default decision := {"decision": "deny", "reasons": ["no rule permits this call"], "constraints": {}, "audit": "full"}

# The fast path: a plain read, which no refund, path, evidence or approval rule applies to.
# Its conditions are written out here rather than in helper rules, and it takes the
# constraints straight from the input when they are an object (else full_decision answers):
# each rule an evaluation touches costs ~2.5 µs in the embedded engine. A plain read is
# audited "minimal" (audit_level), so the fast path need not ask. The whole deny set is
# evaluated, so a deny rule added in another file of the package applies to reads too; it is
# compared with the empty set rather than counted (a builtin call fewer, ~4 % of a decision).
decision := {"decision": "allow", "reasons": ["read-only tool"], "constraints": input.tool.constraints, "audit": "minimal"} if {
	input.tool.risk.side_effect in {"none", "read"}
	input.tool.name != "refund"
	not sensitive_path
	is_object(input.tool.constraints)
	deny == set()
} else := full_decision

full_decision := result("deny", sort(deny)) if {
	count(deny) > 0
} else := object.union(result("require_more_evidence", reasons), {"evidence": sort(missing_evidence)}) if {
	count(missing_evidence) > 0
	reasons := [sprintf("missing evidence: %s", [concat(", ", sort(missing_evidence))])]
} else := object.union(result("require_approval", [approval_rule.reason]), {"approval": approval_rule.requirement}) if {
	approval_rule
	not approval_satisfied
} else := result("allow", sort(permit)) if {
	count(permit) > 0
} else := result("deny", ["no rule permits this call"])
