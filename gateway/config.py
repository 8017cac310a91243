"""The gateway's configuration: one YAML file, validated by pydantic.

Errors name the file and the field (``toolgate.yaml: tools.2.risk.side_effect: ...``).
Relative paths in the file are resolved against the file's folder. The data directory
can be overridden with ``TOOLGATE_DATA_DIR``.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError

from gateway.config_checks import listen_problem, problem, query_problem, refuse, settings_problems

SideEffect = Literal["none", "read", "write", "external_write", "destructive"]
Reversibility = Literal["reversible", "irreversible"]
Sensitivity = Literal["public", "internal", "confidential", "restricted"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ConfigError(Exception):
    """The configuration file is missing, not YAML, or does not validate."""


class RiskConfig(_Strict):
    side_effect: SideEffect
    """What the tool does to the world; drives the default policy."""
    reversibility: Reversibility = "reversible"
    """Whether its effect can be undone."""
    data_sensitivity: Sensitivity = "internal"
    """How sensitive the data it touches is."""


class ExecutorConfig(_Strict):
    kind: Literal["python", "subprocess", "http", "mcp"]
    """Which executor runs the tool."""
    callable: str = ""
    """python: ``module:function``; the function takes (args, context) and may be async."""
    argv: list[str] = Field(default_factory=list)
    """subprocess: argv template, ``{name}`` placeholders filled from args; never a shell."""
    cwd: str = ""
    """subprocess: working directory, relative to the calling tenant's sandbox folder
    ``<data dir>/sandbox/<tool>/<tenant>`` (its default, and HOME), which it may not leave."""
    env: dict[str, str] = Field(default_factory=dict)
    """subprocess: fixed environment entries for the child (its environment is otherwise clean)."""
    method: str = "GET"
    """http: request method."""
    url: str = ""
    """http: URL template, ``{name}`` placeholders filled from args (URL-encoded)."""
    allowed_hosts: list[str] = Field(default_factory=list)
    """http: egress allow-list; the effective list is this ∩ the policy's ``constraints.hosts``."""
    body_arg: str = ""
    """http: the argument sent as the JSON body."""
    server: str = ""
    """mcp: name of an upstream in ``mcp_upstreams``."""
    remote_tool: str = ""
    """mcp: the upstream tool's name (default: this tool's name)."""
    options: Any = Field(default=None, validate_default=True)
    """The kind's own settings, typed per kind (``gateway.executors.options``): an unknown option
    or a value of the wrong type does not load."""

    @field_validator("options", mode="before")
    @classmethod
    def _options_of_kind(cls, value: Any, info: ValidationInfo) -> Any:
        from gateway.executors.options import parse_options

        return parse_options(info.data.get("kind"), value)


class CredentialRef(_Strict):
    secret: str
    """The secret's reference name, resolved per tenant by the secret providers."""
    inject: Literal["header", "env", "file"] = "header"
    """How the executor receives it."""
    name: str = ""
    """Header name, env var name, or (for file) the argument-free label of the file."""
    format: str = "{value}"
    """Template for the injected value, e.g. ``Bearer {value}``."""


class ToolConfig(_Strict):
    name: str = Field(pattern=r"^[a-zA-Z][a-zA-Z0-9_.-]{0,63}$")
    """Unique tool name the agent calls."""
    version: str = "1"
    """Tool version, recorded in provenance and the audit log."""
    description: str = ""
    """What the tool does, for the LLM."""
    input_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})
    """JSON Schema (2020-12) for the arguments object."""
    risk: RiskConfig
    """Risk labels given to policy."""
    labels: list[str] = Field(default_factory=list)
    """Free-form labels given to policy."""
    constraints: dict[str, Any] = Field(default_factory=dict)
    """Static constraints given to policy and the executor (e.g. sandbox root, hosts)."""
    executor: ExecutorConfig
    """How the tool runs."""
    timeout_seconds: float = Field(default=10.0, gt=0, le=3600)
    """Wall-clock limit of one execution attempt."""
    idempotent: bool = False
    """Safe to retry (read-only tools are always retry-safe)."""
    idempotency_key_fields: list[str] = Field(default_factory=list)
    """Argument fields that form the idempotency key, in place of any key the caller gives when the
    arguments hold all of them: calls with equal values in them are one operation (a second is
    replayed, or refused if its other arguments differ)."""
    credentials: list[CredentialRef] = Field(default_factory=list)
    """Secrets injected into the executor, never seen by the model."""
    max_attempts: int = Field(default=1, ge=1, le=10)
    """Attempts for retry-safe tools (1 = no retries)."""
    rate_limit_per_minute: int = Field(default=0, ge=0)
    """Calls per minute per (tenant, tool); 0 = unlimited."""
    max_concurrency: int = Field(default=0, ge=0)
    """Concurrent executions of this tool in this process; 0 = unlimited."""

    @model_validator(mode="after")
    def _hosts_are_enforceable(self) -> "ToolConfig":
        """A subprocess cannot be held to hosts: a descriptor narrowing one's egress is refused here,
        not ignored at every call (``gateway.executors.base.unconfined_egress``)."""
        if self.executor.kind == "subprocess" and self.constraints.get("hosts") is not None:
            refuse("ToolConfig", [problem(
                ("constraints", "hosts"), "hosts_unenforceable",
                "tool '{name}': constraints.hosts cannot be enforced for a subprocess tool (a process "
                "cannot be confined to hosts); remove it, or run the tool with the http executor", name=self.name)])
        return self

    @field_validator("constraints")
    @classmethod
    def _constraints_are_json(cls, value: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        from gateway.json_values import json_problem

        if (problem := json_problem(value, "constraints")) is not None:
            raise PydanticCustomError("constraints_not_json", "tool '{name}': {problem}",
                                      {"name": info.data.get("name", "?"), "problem": problem})
        return value

    @field_validator("input_schema")
    @classmethod
    def _schema_is_enforceable(cls, value: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        from gateway.ecma_regex import schema_problems  # valid 2020-12, ECMA-262 patterns, checked formats

        problems = schema_problems(value)
        if problems:
            raise ValueError(f"tool {info.data.get('name', '?')!r}: " + "; ".join(problems))
        return value


_LABEL = r"^[^\x00-\x1f\x7f-\x9f]{1,128}$"
"""An identity's names: they key stored rows, fill audit records and policy input and are
printed by the CLI, so no control characters (PostgreSQL text cannot even hold NUL)."""


class IdentityConfig(_Strict):
    name: str = Field(pattern=_LABEL)
    """A label for humans (shown in logs)."""
    api_key_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    """sha256 hex of the API key; the key itself is never stored."""
    tenant: str = Field(pattern=_LABEL)
    """Tenant this identity acts for."""
    agent: str = Field(default="", pattern=_LABEL.replace("{1,", "{0,"))
    """Agent id (for agent identities)."""
    user: str = Field(default="", pattern=_LABEL.replace("{1,", "{0,"))
    """The human user on whose behalf the agent acts, if any."""
    roles: list[Literal["agent", "approver", "admin"]] = Field(default_factory=lambda: ["agent"])
    """agent: may list and call tools (no other role may: ``permission_denied``); approver: may
    list, get, approve, reject approval requests; admin: reserved, grants nothing yet."""
    approver: str = ""
    """For approver identities: the approver id in the keyring."""


class PolicyConfig(_Strict):
    engine: Literal["embedded", "opa"] = "embedded"
    """embedded: in-process Rego (regorus); opa: an OPA server's REST Data API."""
    bundle: str = "rego"
    """Folder of .rego files (and data.json) for the embedded engine."""
    query: str = "data.toolgate.decision"
    """The rule whose value is the decision document: ``data.<package>.<rule>``."""
    timeout_ms: int = Field(default=500, gt=0)
    """Evaluation timeout; a timeout denies with policy_unavailable."""
    opa_url: str = "http://127.0.0.1:8181"
    """OPA server (engine: opa): http://host:port[/prefix], unix:///path/opa.sock, or https://..."""
    opa_ca_file: str = ""
    """CA bundle (PEM) an ``https://`` opa_url's certificate must chain to, used instead of
    SSL_CERT_FILE, SSL_CERT_DIR and certifi; relative to the config file, loaded at start."""
    shadow_bundle: str = ""
    """A candidate policy folder evaluated beside the enforced one; differences are logged only."""
    reload_on_change: bool = False
    """Poll the bundle folder and reload when it changes (SIGHUP always reloads)."""
    dry_run: bool = False
    """Compute and audit the real decision but let every validated call through. Never in production."""

    @field_validator("opa_url")
    @classmethod
    def _opa_url_is_usable(cls, value: str, info: ValidationInfo) -> str:
        """An OPA URL the client cannot use is refused at load (engine: opa), naming the forms it can."""
        if info.data.get("engine") != "opa":
            return value
        from policies._http import opa_url_problem

        if problem := opa_url_problem(value):
            raise PydanticCustomError("opa_url_invalid", "{problem}; give http://host[:port][/prefix], "
                                      "https://host[:port][/prefix] or unix:///absolute/path.sock",
                                      {"problem": problem})
        return value

    @field_validator("query")
    @classmethod
    def _query_is_a_rule_path(cls, value: str) -> str:
        if why := query_problem(value):
            raise PydanticCustomError("policy_query_invalid", "{problem}", {"problem": why})
        return value


class StoreConfig(_Strict):
    kind: Literal["sqlite", "postgres"] = "sqlite"
    """Where approvals, consumed grants, idempotency records and rate limits live."""
    path: str = ""
    """SQLite file (default <data dir>/toolgate.db)."""
    dsn: str = ""
    """PostgreSQL connection string (kind: postgres)."""
    claim_retention_hours: float = Field(default=24.0, ge=2.0)
    """How long a finished call's outcome is kept under its idempotency key (and a consumed
    grant's claim). Older ones are deleted; a retry with such a key runs again. At least 2 h:
    longer than any grant lives (``grant_ttl_seconds`` ≤ 1 h, plus clock skew)."""

    @model_validator(mode="after")
    def _postgres_has_a_dsn(self) -> "StoreConfig":
        if self.kind == "postgres" and not self.dsn:
            refuse("StoreConfig", [problem(
                ("dsn",), "store_dsn_missing", "store.kind postgres needs the PostgreSQL connection string, "
                "e.g. postgresql://toolgate@db.internal:5432/toolgate (a password is better kept in PGPASSWORD "
                "or a .pgpass file than in this file)")])
        return self


class AuditConfig(_Strict):
    path: str = ""
    """Audit log file (default <data dir>/audit.jsonl)."""
    fsync: bool = False
    """fsync after every call's records (slower, survives power loss)."""
    rotate_bytes: int = Field(default=0, ge=0)
    """Start a new file once the log reaches this size (0: never). The full file is renamed
    ``<path>.<last seq, 12 digits>`` and the chain goes on in a fresh ``<path>`` (see
    gateway.audit); deleting old files is the operator's retention."""
    signing_key: str = ""
    """Ed25519 private key (PEM) that signs checkpoints of the chain (gateway.audit_sign), so a log
    rewritten whole by someone without the key fails ``toolgate audit verify --public-key``. Relative
    to the data dir; generated (0600, its public half as ``<file>.pub``) when missing. "": none."""
    checkpoint_seconds: float = Field(default=60.0, gt=0, le=86400)
    """How often a checkpoint is signed while records are written (also before a rotation and at stop)."""


class TLSConfig(_Strict):
    cert_file: str
    """Server certificate (PEM)."""
    key_file: str
    """Server private key (PEM)."""
    client_ca_file: str = ""
    """If set, clients must present a certificate signed by this CA (mTLS)."""


DEFAULT_MAX_THREADS = 16
"""Worker threads for sync ``python`` tools per process (``gateway.executors.python``)."""
DEFAULT_THREADS_PER_TENANT = 4
"""The most of those threads one tenant's calls hold at once."""


class LimitsConfig(_Strict):
    max_args_bytes: int = Field(default=256 * 1024, gt=0)
    """Largest accepted args_json."""
    max_observation_bytes: int = Field(default=64 * 1024, gt=0)
    """Observation data above this is truncated (``truncated: true``)."""
    max_concurrent_calls: int = Field(default=4096, gt=0)
    """In-flight ExecuteTool calls per process; past it a call is refused ``concurrency_limited``."""
    max_watch_streams: int = Field(default=1024, gt=0)
    """Open Approvals.Watch streams per process; past it a new one is refused (RESOURCE_EXHAUSTED)."""
    max_watch_streams_per_tenant: int = Field(default=256, gt=0)
    """Of those, the most one tenant's approvers hold open, and the most its other callers (agents
    watching their own requests) do (at most ``max_watch_streams``)."""
    max_public_streams: int = Field(default=64, gt=0)
    """Open streams of each service anyone may call without a key (health Watch, reflection),
    per process; past it a new one is refused. They never count against the limits above."""
    tenant_calls_per_minute: int = Field(default=0, ge=0)
    """Executions per tenant per minute over all its tools, across replicas (0: no tenant
    limit; tools keep their own ``rate_limit_per_minute``). Over it: ``rate_limited``."""
    python_threads: int = Field(default=DEFAULT_MAX_THREADS, gt=0, le=1024)
    """Worker threads for sync ``python`` tools, per process."""
    python_threads_per_tenant: int = Field(default=DEFAULT_THREADS_PER_TENANT, gt=0)
    """The most of those one tenant's calls hold at once (running, waiting for a thread, or left
    running past a timeout); its further sync calls wait for one of its own to end. Tenants whose
    tools hang leave the others no thread only when ``python_threads / python_threads_per_tenant``
    of them (4 with the defaults) hang at once."""

    @model_validator(mode="after")
    def _tenant_share_fits(self) -> "LimitsConfig":
        if self.python_threads_per_tenant > self.python_threads:
            refuse("LimitsConfig", [problem(
                ("python_threads_per_tenant",), "python_threads_per_tenant_too_large",
                "{share} cannot exceed limits.python_threads ({threads})",
                share=self.python_threads_per_tenant, threads=self.python_threads)])
        return self


class Config(_Strict):
    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)  # inputs may be secrets
    gateway_id: str = "toolgate"
    """This gateway's id: the ``aud`` of approvals and grants."""
    data_dir: str = "data"
    """Folder for the SQLite store, audit log and sandboxes (env TOOLGATE_DATA_DIR overrides)."""
    listen: str = "127.0.0.1:50051"
    """Address to listen on: ``HOST:PORT``, an IPv6 address in brackets (``[::1]:50051``); port 0
    picks a free one."""
    tls: TLSConfig | None = None
    """TLS (and mTLS) for the gRPC port; plaintext when absent (loopback sidecar)."""
    identities: list[IdentityConfig] = Field(default_factory=list)
    """API-key identities of agents and approvers."""
    tools: list[ToolConfig] = Field(default_factory=list)
    """Registered tools; anything else is unknown_tool."""
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    """Policy engine settings."""
    store: StoreConfig = Field(default_factory=StoreConfig)
    """State store settings."""
    audit: AuditConfig = Field(default_factory=AuditConfig)
    """Audit log settings."""
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    """Size and concurrency limits."""
    approvals: dict[str, Any] = Field(default_factory=dict)
    """Approver keyring and grant settings (see gateway.approvals.config)."""
    secrets: dict[str, Any] = Field(default_factory=dict)
    """Secret providers (see gateway.credentials)."""
    mcp_upstreams: dict[str, Any] = Field(default_factory=dict)
    """Upstream MCP servers fronted as executors."""
    observability: dict[str, Any] = Field(default_factory=dict)
    """Metrics and tracing settings."""
    workers: int = Field(default=1, ge=1, le=64)
    """Gateway processes sharing the listen port (see gateway.workers); 1 = this process only."""
    base_dir: str = Field(default=".", exclude=True)
    """Folder of the config file; relative paths resolve against it (set by the loader)."""

    @field_validator("approvals", "secrets", "observability")
    @classmethod
    def _section_validates(cls, value: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        """The sections other modules type are validated by their models here too, so that their
        errors name the file and the field like the rest, before anything starts."""
        from gateway.approvals.config import ApprovalsConfig
        from gateway.credentials import SecretsConfig
        from gateway.metrics import ObservabilityConfig

        model = {"approvals": ApprovalsConfig, "secrets": SecretsConfig, "observability": ObservabilityConfig}
        model[str(info.field_name)].model_validate(value)
        return value

    @field_validator("listen")
    @classmethod
    def _listen_is_host_and_port(cls, value: str) -> str:
        if why := listen_problem(value):
            raise PydanticCustomError("listen_invalid", "{problem}", {"problem": why})
        return value

    @model_validator(mode="after")
    def _settings_agree(self) -> "Config":
        """What lies between settings is checked at load, each problem at the setting to blame
        (``gateway.config_checks``): one key is one identity, an approver's id is in the keyring, a
        file secret provider's folder is there, tool names are unique, several workers enforce no
        per-process cap, each executor can do what its tools ask, ``policy.opa_ca_file`` loads."""
        refuse("Config", settings_problems(self))
        return self

    def resolve(self, path: str) -> Path:
        """A path from the config, relative to the config file's folder."""
        p = Path(os.path.expanduser(path))
        return p if p.is_absolute() else (Path(self.base_dir) / p).resolve()

    @property
    def data_path(self) -> Path:
        env = os.environ.get("TOOLGATE_DATA_DIR")
        return Path(env).resolve() if env else self.resolve(self.data_dir)

    @property
    def store_path(self) -> Path:
        return self.resolve(self.store.path) if self.store.path else self.data_path / "toolgate.db"

    @property
    def audit_path(self) -> Path:
        return self.resolve(self.audit.path) if self.audit.path else self.data_path / "audit.jsonl"

    @property
    def audit_signing_key_path(self) -> Path | None:
        if not self.audit.signing_key:
            return None
        return in_data_dir(self.data_path, self.audit.signing_key)

    @property
    def policy_bundle_path(self) -> Path:
        return self.resolve(self.policy.bundle)


def in_data_dir(data_dir: Path, path: str) -> Path:
    """A key file the config names (``approvals.grant_keys``, ``audit.signing_key``): ``~``
    expanded, a relative path taken from the data dir."""
    p = Path(os.path.expanduser(path))
    return p if p.is_absolute() else data_dir / p


def hash_api_key(key: str) -> str:
    """The form in which API keys are stored in the config."""
    return hashlib.sha256(key.encode()).hexdigest()


def load_config(path: str | os.PathLike[str], overrides: dict[str, Any] | None = None) -> Config:
    """Read, validate and return the config; raise ConfigError naming file and field."""
    file = Path(path)
    try:
        raw = yaml.safe_load(file.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ConfigError(f"{file}: no such file") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{file}: not UTF-8 text (byte {exc.start})") from exc
    except OSError as exc:  # a folder, no permission
        raise ConfigError(f"{file}: cannot be read: {exc.strerror or type(exc).__name__}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{file}: not valid YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise ConfigError(f"{file}: the top level must be a mapping")
    raw = {**raw, **(overrides or {}), "base_dir": str(file.resolve().parent)}
    try:
        return Config.model_validate(raw)
    except ValidationError as exc:
        lines = [f"{file}: {'.'.join(str(p) for p in err['loc']) or '(top level)'}: {_tool_named(err, raw)}{err['msg']}"
                 for err in exc.errors()]
        raise ConfigError("\n".join(lines)) from exc


def _tool_named(err: Any, raw: dict[str, Any]) -> str:
    """``tool 'name': `` for an error in a tool (``tools.3...``) whose message does not name it yet, else ""."""
    loc = err["loc"]
    if len(loc) < 2 or loc[0] != "tools" or not isinstance(loc[1], int):
        return ""
    tools = raw.get("tools")
    tool = tools[loc[1]] if isinstance(tools, list) and loc[1] < len(tools) else None
    name = tool.get("name") if isinstance(tool, dict) else None
    if not isinstance(name, str) or f"'{name}'" in err["msg"]:
        return ""
    return f"tool {name[:64]!r}: "
