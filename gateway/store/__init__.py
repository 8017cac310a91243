"""The state store: one protocol, SQLite (embedded default) and PostgreSQL (several replicas).

It holds execution claims (idempotency keys and consumed grant ids), approval requests and
rate-limit buckets. The gateway process is stateless apart from it.
"""

from gateway.store.base import Claim, ClaimStatus, Store, open_store

__all__ = ["Claim", "ClaimStatus", "Store", "open_store"]
