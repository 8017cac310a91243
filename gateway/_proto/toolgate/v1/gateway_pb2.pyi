import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Risk(_message.Message):
    __slots__ = ("side_effect", "reversibility", "data_sensitivity")
    SIDE_EFFECT_FIELD_NUMBER: _ClassVar[int]
    REVERSIBILITY_FIELD_NUMBER: _ClassVar[int]
    DATA_SENSITIVITY_FIELD_NUMBER: _ClassVar[int]
    side_effect: str
    reversibility: str
    data_sensitivity: str
    def __init__(self, side_effect: _Optional[str] = ..., reversibility: _Optional[str] = ..., data_sensitivity: _Optional[str] = ...) -> None: ...

class ToolInfo(_message.Message):
    __slots__ = ("name", "version", "description", "input_schema_json", "risk", "labels", "longest_call_seconds")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    INPUT_SCHEMA_JSON_FIELD_NUMBER: _ClassVar[int]
    RISK_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    LONGEST_CALL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: str
    description: str
    input_schema_json: str
    risk: Risk
    labels: _containers.RepeatedScalarFieldContainer[str]
    longest_call_seconds: float
    def __init__(self, name: _Optional[str] = ..., version: _Optional[str] = ..., description: _Optional[str] = ..., input_schema_json: _Optional[str] = ..., risk: _Optional[_Union[Risk, _Mapping]] = ..., labels: _Optional[_Iterable[str]] = ..., longest_call_seconds: _Optional[float] = ...) -> None: ...

class ListToolsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListToolsResponse(_message.Message):
    __slots__ = ("tools",)
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    tools: _containers.RepeatedCompositeFieldContainer[ToolInfo]
    def __init__(self, tools: _Optional[_Iterable[_Union[ToolInfo, _Mapping]]] = ...) -> None: ...

class ToolCallRequest(_message.Message):
    __slots__ = ("tool", "args_json", "run_id", "step", "idempotency_key", "evidence_json", "approval_grant", "approval_id")
    TOOL_FIELD_NUMBER: _ClassVar[int]
    ARGS_JSON_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    EVIDENCE_JSON_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_GRANT_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_ID_FIELD_NUMBER: _ClassVar[int]
    tool: str
    args_json: bytes
    run_id: str
    step: int
    idempotency_key: str
    evidence_json: bytes
    approval_grant: str
    approval_id: str
    def __init__(self, tool: _Optional[str] = ..., args_json: _Optional[bytes] = ..., run_id: _Optional[str] = ..., step: _Optional[int] = ..., idempotency_key: _Optional[str] = ..., evidence_json: _Optional[bytes] = ..., approval_grant: _Optional[str] = ..., approval_id: _Optional[str] = ...) -> None: ...

class FieldError(_message.Message):
    __slots__ = ("path", "message")
    PATH_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    path: str
    message: str
    def __init__(self, path: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class ErrorInfo(_message.Message):
    __slots__ = ("type", "message", "retryable")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    type: str
    message: str
    retryable: bool
    def __init__(self, type: _Optional[str] = ..., message: _Optional[str] = ..., retryable: _Optional[bool] = ...) -> None: ...

class Provenance(_message.Message):
    __slots__ = ("tool", "tool_version", "args_hash", "decision_id", "approval_id")
    TOOL_FIELD_NUMBER: _ClassVar[int]
    TOOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    ARGS_HASH_FIELD_NUMBER: _ClassVar[int]
    DECISION_ID_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_ID_FIELD_NUMBER: _ClassVar[int]
    tool: str
    tool_version: str
    args_hash: str
    decision_id: str
    approval_id: str
    def __init__(self, tool: _Optional[str] = ..., tool_version: _Optional[str] = ..., args_hash: _Optional[str] = ..., decision_id: _Optional[str] = ..., approval_id: _Optional[str] = ...) -> None: ...

class Observation(_message.Message):
    __slots__ = ("status", "summary", "data_json", "truncated", "error", "duration_ms", "attempts", "redactions", "trust", "flags", "provenance")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    DATA_JSON_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    REDACTIONS_FIELD_NUMBER: _ClassVar[int]
    TRUST_FIELD_NUMBER: _ClassVar[int]
    FLAGS_FIELD_NUMBER: _ClassVar[int]
    PROVENANCE_FIELD_NUMBER: _ClassVar[int]
    status: str
    summary: str
    data_json: bytes
    truncated: bool
    error: ErrorInfo
    duration_ms: int
    attempts: int
    redactions: int
    trust: str
    flags: _containers.RepeatedScalarFieldContainer[str]
    provenance: Provenance
    def __init__(self, status: _Optional[str] = ..., summary: _Optional[str] = ..., data_json: _Optional[bytes] = ..., truncated: _Optional[bool] = ..., error: _Optional[_Union[ErrorInfo, _Mapping]] = ..., duration_ms: _Optional[int] = ..., attempts: _Optional[int] = ..., redactions: _Optional[int] = ..., trust: _Optional[str] = ..., flags: _Optional[_Iterable[str]] = ..., provenance: _Optional[_Union[Provenance, _Mapping]] = ...) -> None: ...

class Refused(_message.Message):
    __slots__ = ("code", "reasons", "field_errors", "retry_after_seconds")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REASONS_FIELD_NUMBER: _ClassVar[int]
    FIELD_ERRORS_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_SECONDS_FIELD_NUMBER: _ClassVar[int]
    code: str
    reasons: _containers.RepeatedScalarFieldContainer[str]
    field_errors: _containers.RepeatedCompositeFieldContainer[FieldError]
    retry_after_seconds: float
    def __init__(self, code: _Optional[str] = ..., reasons: _Optional[_Iterable[str]] = ..., field_errors: _Optional[_Iterable[_Union[FieldError, _Mapping]]] = ..., retry_after_seconds: _Optional[float] = ...) -> None: ...

class ApprovalRequired(_message.Message):
    __slots__ = ("approval_id", "expires_at", "reasons", "approver_groups", "quorum", "approvers")
    APPROVAL_ID_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    REASONS_FIELD_NUMBER: _ClassVar[int]
    APPROVER_GROUPS_FIELD_NUMBER: _ClassVar[int]
    QUORUM_FIELD_NUMBER: _ClassVar[int]
    APPROVERS_FIELD_NUMBER: _ClassVar[int]
    approval_id: str
    expires_at: _timestamp_pb2.Timestamp
    reasons: _containers.RepeatedScalarFieldContainer[str]
    approver_groups: _containers.RepeatedScalarFieldContainer[str]
    quorum: int
    approvers: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, approval_id: _Optional[str] = ..., expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., reasons: _Optional[_Iterable[str]] = ..., approver_groups: _Optional[_Iterable[str]] = ..., quorum: _Optional[int] = ..., approvers: _Optional[_Iterable[str]] = ...) -> None: ...

class EvidenceRequired(_message.Message):
    __slots__ = ("missing", "reasons")
    MISSING_FIELD_NUMBER: _ClassVar[int]
    REASONS_FIELD_NUMBER: _ClassVar[int]
    missing: _containers.RepeatedScalarFieldContainer[str]
    reasons: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, missing: _Optional[_Iterable[str]] = ..., reasons: _Optional[_Iterable[str]] = ...) -> None: ...

class ToolCallResponse(_message.Message):
    __slots__ = ("decision_id", "args_hash", "policy_version", "replayed", "code", "observation", "refused", "approval_required", "evidence_required")
    DECISION_ID_FIELD_NUMBER: _ClassVar[int]
    ARGS_HASH_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    REPLAYED_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    OBSERVATION_FIELD_NUMBER: _ClassVar[int]
    REFUSED_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_REQUIRED_FIELD_NUMBER: _ClassVar[int]
    EVIDENCE_REQUIRED_FIELD_NUMBER: _ClassVar[int]
    decision_id: str
    args_hash: str
    policy_version: str
    replayed: bool
    code: str
    observation: Observation
    refused: Refused
    approval_required: ApprovalRequired
    evidence_required: EvidenceRequired
    def __init__(self, decision_id: _Optional[str] = ..., args_hash: _Optional[str] = ..., policy_version: _Optional[str] = ..., replayed: _Optional[bool] = ..., code: _Optional[str] = ..., observation: _Optional[_Union[Observation, _Mapping]] = ..., refused: _Optional[_Union[Refused, _Mapping]] = ..., approval_required: _Optional[_Union[ApprovalRequired, _Mapping]] = ..., evidence_required: _Optional[_Union[EvidenceRequired, _Mapping]] = ...) -> None: ...

class Approval(_message.Message):
    __slots__ = ("approval_id", "status", "tenant", "agent", "user", "run_id", "step", "tool", "tool_version", "args_json", "args_hash", "reasons", "groups_any", "quorum", "created_at", "expires_at", "approvers", "rejection_reason", "risk", "grant", "decision_id", "audience", "damage")
    APPROVAL_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    TOOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    ARGS_JSON_FIELD_NUMBER: _ClassVar[int]
    ARGS_HASH_FIELD_NUMBER: _ClassVar[int]
    REASONS_FIELD_NUMBER: _ClassVar[int]
    GROUPS_ANY_FIELD_NUMBER: _ClassVar[int]
    QUORUM_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    APPROVERS_FIELD_NUMBER: _ClassVar[int]
    REJECTION_REASON_FIELD_NUMBER: _ClassVar[int]
    RISK_FIELD_NUMBER: _ClassVar[int]
    GRANT_FIELD_NUMBER: _ClassVar[int]
    DECISION_ID_FIELD_NUMBER: _ClassVar[int]
    AUDIENCE_FIELD_NUMBER: _ClassVar[int]
    DAMAGE_FIELD_NUMBER: _ClassVar[int]
    approval_id: str
    status: str
    tenant: str
    agent: str
    user: str
    run_id: str
    step: int
    tool: str
    tool_version: str
    args_json: bytes
    args_hash: str
    reasons: _containers.RepeatedScalarFieldContainer[str]
    groups_any: _containers.RepeatedScalarFieldContainer[str]
    quorum: int
    created_at: _timestamp_pb2.Timestamp
    expires_at: _timestamp_pb2.Timestamp
    approvers: _containers.RepeatedScalarFieldContainer[str]
    rejection_reason: str
    risk: Risk
    grant: str
    decision_id: str
    audience: str
    damage: str
    def __init__(self, approval_id: _Optional[str] = ..., status: _Optional[str] = ..., tenant: _Optional[str] = ..., agent: _Optional[str] = ..., user: _Optional[str] = ..., run_id: _Optional[str] = ..., step: _Optional[int] = ..., tool: _Optional[str] = ..., tool_version: _Optional[str] = ..., args_json: _Optional[bytes] = ..., args_hash: _Optional[str] = ..., reasons: _Optional[_Iterable[str]] = ..., groups_any: _Optional[_Iterable[str]] = ..., quorum: _Optional[int] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., approvers: _Optional[_Iterable[str]] = ..., rejection_reason: _Optional[str] = ..., risk: _Optional[_Union[Risk, _Mapping]] = ..., grant: _Optional[str] = ..., decision_id: _Optional[str] = ..., audience: _Optional[str] = ..., damage: _Optional[str] = ...) -> None: ...

class ListApprovalsRequest(_message.Message):
    __slots__ = ("status", "tenant", "page_size", "page_token")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    status: str
    tenant: str
    page_size: int
    page_token: str
    def __init__(self, status: _Optional[str] = ..., tenant: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListApprovalsResponse(_message.Message):
    __slots__ = ("approvals", "next_page_token")
    APPROVALS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    approvals: _containers.RepeatedCompositeFieldContainer[Approval]
    next_page_token: str
    def __init__(self, approvals: _Optional[_Iterable[_Union[Approval, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class GetApprovalRequest(_message.Message):
    __slots__ = ("approval_id",)
    APPROVAL_ID_FIELD_NUMBER: _ClassVar[int]
    approval_id: str
    def __init__(self, approval_id: _Optional[str] = ...) -> None: ...

class SubmitApprovalRequest(_message.Message):
    __slots__ = ("approval_id", "token")
    APPROVAL_ID_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    approval_id: str
    token: str
    def __init__(self, approval_id: _Optional[str] = ..., token: _Optional[str] = ...) -> None: ...

class RejectApprovalRequest(_message.Message):
    __slots__ = ("approval_id", "token")
    APPROVAL_ID_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    approval_id: str
    token: str
    def __init__(self, approval_id: _Optional[str] = ..., token: _Optional[str] = ...) -> None: ...

class WatchApprovalsRequest(_message.Message):
    __slots__ = ("approval_id", "include_current")
    APPROVAL_ID_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_CURRENT_FIELD_NUMBER: _ClassVar[int]
    approval_id: str
    include_current: bool
    def __init__(self, approval_id: _Optional[str] = ..., include_current: _Optional[bool] = ...) -> None: ...

class ApprovalEvent(_message.Message):
    __slots__ = ("type", "approval")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_FIELD_NUMBER: _ClassVar[int]
    type: str
    approval: Approval
    def __init__(self, type: _Optional[str] = ..., approval: _Optional[_Union[Approval, _Mapping]] = ...) -> None: ...
