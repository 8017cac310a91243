"""Exceptions of the runtime client. Outcomes of a tool call are results, not exceptions.

Tree::

    ToolgateClientError                 root: catch this to catch everything below
    ├── TransportError                  the gateway could not be reached or broke the stream
    │   └── GatewayTimeoutError         a call exceeded its deadline
    ├── AuthenticationError             the gateway rejected the API key (UNAUTHENTICATED/PERMISSION_DENIED)
    ├── MalformedRequestError           the gateway rejected the request shape (INVALID_ARGUMENT)
    ├── ClientClosedError               a call on a client after ``close()`` (code ``client_closed``)
    ├── ApprovalError                   waiting for or redeeming an approval failed
    │   ├── ApprovalTimeoutError        no final approval event within the timeout
    │   └── GrantUnavailableError       the approval has no grant for this agent (not approved)
    ├── CheckpointError                 the checkpoint store failed
    │   └── CheckpointNotFoundError     no checkpoint for a run id
    └── ModelOutputError                a model returned output that is not a valid decision

Misuse by the caller (wrong types, bad arguments) raises ``TypeError`` / ``ValueError``.
Errors of dependencies (grpc, sqlite3) are translated at one boundary with ``raise … from``.
"""

from __future__ import annotations


class ToolgateClientError(Exception):
    """Root of every exception raised by ``runtime_client``."""


class TransportError(ToolgateClientError):
    """The gateway could not be reached, or the connection failed mid-call."""

    def __init__(self, message: str, *, status: str = "") -> None:
        super().__init__(message)
        self.status = status


class GatewayTimeoutError(TransportError):
    """A gateway call exceeded its deadline."""


class AuthenticationError(ToolgateClientError):
    """The gateway rejected the caller's credentials."""


class MalformedRequestError(ToolgateClientError):
    """The gateway rejected the request as malformed (not a policy outcome)."""


class ClientClosedError(ToolgateClientError):
    """A call was made on a client (or transport) after ``close()``, or the client was closed
    while the call was in flight. Not retryable on that client: make a new one."""

    code = "client_closed"

    def __init__(self, message: str = "the client is closed (close() was called or its with-block "
                 "ended): create a new client to call the gateway again") -> None:
        super().__init__(message)


class ApprovalError(ToolgateClientError):
    """Waiting for, or redeeming, an approval failed."""

    def __init__(self, message: str, *, approval_id: str) -> None:
        super().__init__(message)
        self.approval_id = approval_id


class ApprovalTimeoutError(ApprovalError):
    """No final event (approved/granted/rejected/expired) arrived within the timeout."""


class GrantUnavailableError(ApprovalError):
    """The approval carries no grant for this agent, e.g. it is still pending or was rejected."""

    def __init__(self, message: str, *, approval_id: str, status: str) -> None:
        super().__init__(message, approval_id=approval_id)
        self.status = status


class CheckpointError(ToolgateClientError):
    """Reading or writing a checkpoint failed."""


class CheckpointNotFoundError(CheckpointError):
    """There is no checkpoint for the run id."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"no checkpoint for run {run_id!r}")
        self.run_id = run_id


class ModelOutputError(ToolgateClientError):
    """A model's output could not be read strictly as one decision."""
