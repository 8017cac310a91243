"""Exceptions of the runtime client. Outcomes of a tool call are results, not exceptions.

Tree (with each class's ``code``, a stable snake_case name to branch on or show)::

    ToolgateClientError                 root: catch this to catch everything below (client_error)
    ├── TransportError                  the gateway could not be reached or broke the stream
    │   │                               (the gRPC status in snake_case: unavailable, internal, ...;
    │   │                               malformed_response; transport_error when there is none)
    │   └── GatewayTimeoutError         a call exceeded its deadline (deadline_exceeded)
    ├── AuthenticationError             the gateway rejected the API key (unauthenticated,
    │                                   or permission_denied for PERMISSION_DENIED)
    ├── MalformedRequestError           the gateway rejected the request shape (malformed_request)
    ├── ClientClosedError               a call on a client after ``close()`` (client_closed)
    ├── ApprovalError                   waiting for or redeeming an approval failed (approval_error)
    │   ├── ApprovalTimeoutError        no final approval event within the timeout (approval_timeout)
    │   ├── ApprovalNotFoundError       the gateway has no approval by that id that this caller
    │   │                               may see (approval_not_found; not retryable)
    │   └── GrantUnavailableError       the approval has no grant for this agent (grant_unavailable)
    ├── CheckpointError                 the checkpoint store failed (checkpoint_error)
    │   └── CheckpointNotFoundError     no checkpoint for a run id (checkpoint_not_found)
    └── ModelOutputError                a model returned output that is not a valid decision
                                        (invalid_model_output)

``code`` is a class attribute, and an instance attribute where one class covers several causes
(``TransportError``, ``AuthenticationError``). ``TransportError.status`` (the gRPC status name)
is kept as it was.

Misuse by the caller (wrong types, bad arguments) raises ``TypeError`` / ``ValueError``.
Errors of dependencies (grpc, sqlite3) are translated at one boundary with ``raise … from``.
"""

from __future__ import annotations


class ToolgateClientError(Exception):
    """Root of every exception raised by ``runtime_client``."""

    code: str = "client_error"
    """A stable snake_case name of the failure (see the module docstring for each class's)."""


class TransportError(ToolgateClientError):
    """The gateway could not be reached, or the connection failed mid-call.

    ``status`` is the gRPC status name (``UNAVAILABLE``), "" when there is none; ``code`` is it
    in snake_case (``unavailable``), else the class's (``transport_error``) unless given."""

    code = "transport_error"

    def __init__(self, message: str, *, status: str = "", code: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.code = code or status.lower() or type(self).code


class GatewayTimeoutError(TransportError):
    """A gateway call exceeded its deadline."""

    code = "deadline_exceeded"

    def __init__(self, message: str, *, status: str = "", code: str = "") -> None:
        super().__init__(message, status=status, code=code or type(self).code)


class AuthenticationError(ToolgateClientError):
    """The gateway rejected the caller's credentials: ``unauthenticated`` (no valid API key) or
    ``permission_denied`` (the key lacks the role); ``status`` is the gRPC status name."""

    code = "unauthenticated"

    def __init__(self, message: str, *, status: str = "UNAUTHENTICATED") -> None:
        super().__init__(message)
        self.status = status
        self.code = status.lower() if status else type(self).code


class MalformedRequestError(ToolgateClientError):
    """The gateway rejected the request as malformed (not a policy outcome)."""

    code = "malformed_request"


class ClientClosedError(ToolgateClientError):
    """A call was made on a client (or transport) after ``close()``, or the client was closed
    while the call was in flight. Not retryable on that client: make a new one."""

    code = "client_closed"

    def __init__(self, message: str = "the client is closed (close() was called or its with-block "
                 "ended): create a new client to call the gateway again") -> None:
        super().__init__(message)


class ApprovalError(ToolgateClientError):
    """Waiting for, or redeeming, an approval failed."""

    code = "approval_error"

    def __init__(self, message: str, *, approval_id: str) -> None:
        super().__init__(message)
        self.approval_id = approval_id


class ApprovalTimeoutError(ApprovalError):
    """No final event (approved/granted/rejected/expired) arrived within the timeout."""

    code = "approval_timeout"


class ApprovalNotFoundError(ApprovalError):
    """The gateway has no approval by that id that this caller may see (gRPC ``NOT_FOUND``: the
    gateway answers the same whether the id exists for another tenant or not at all). Asking
    again will not find it: not a ``TransportError``, so a retrying caller does not loop."""

    code = "approval_not_found"


class GrantUnavailableError(ApprovalError):
    """The approval carries no grant for this agent, e.g. it is still pending or was rejected."""

    code = "grant_unavailable"

    def __init__(self, message: str, *, approval_id: str, status: str) -> None:
        super().__init__(message, approval_id=approval_id)
        self.status = status


class CheckpointError(ToolgateClientError):
    """Reading or writing a checkpoint failed."""

    code = "checkpoint_error"


class CheckpointNotFoundError(CheckpointError):
    """There is no checkpoint for the run id."""

    code = "checkpoint_not_found"

    def __init__(self, run_id: str) -> None:
        super().__init__(f"no checkpoint for run {run_id!r}")
        self.run_id = run_id


class ModelOutputError(ToolgateClientError):
    """A model's output could not be read strictly as one decision."""

    code = "invalid_model_output"
