"""Scoped credentials: secrets resolved per tenant, injected into executors, never seen by the model.

A tool descriptor names secrets by reference (``CredentialRef``). Resolution is keyed by
``(tenant, reference, variant)``: a tenant's call can only ever read that tenant's secrets.
Policy constraints narrow the scope: ``constraints.credential_variant`` selects a variant
(e.g. ``read_only``) and a missing variant fails closed rather than falling back to the
broader default; ``constraints.hosts`` is carried along so the HTTP executor only sends
headers to hosts policy allowed.

Providers (tried in the configured order; the first that knows the key wins):

- ``static``: values declared in the config (the demo only);
- ``env``: ``<prefix><TENANT>__<REF>[__<VARIANT>]`` environment variables, upper-cased,
  non-alphanumerics as ``_`` (tenants that meet in that form are refused at start-up, and a
  part with ``_`` next to a ``__`` separator is never looked up);
- ``file``: one secret per file, as Kubernetes mounts them:
  ``<dir>/<tenant>/<ref>`` or ``<dir>/<tenant>/<ref>@<variant>``;
- anything implementing ``SecretProvider`` (a vault client) passed to ``SecretResolver``.

The resolved values live only in ``ResolvedCredentials`` (whose ``repr`` hides them) and in
the child process / request they are injected into. ``ResolvedCredentials.secret_values``
feeds the scrubber, which removes them from the tool's output before normalization.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import stat
import sys
import tempfile
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, AsyncIterator, Literal, Mapping, Protocol, Sequence

import structlog
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gateway.config import CredentialRef, ToolConfig

log = structlog.get_logger("toolgate.credentials")

_SAFE_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,128}\Z")  # \Z: "$" would also match before a final "\n"
_HEADER_NAME = re.compile(r"^[A-Za-z0-9-]{1,128}\Z")
_HEADER_VALUE = re.compile(r"^(?:[!-~](?:[ \t!-~]*[!-~])?)?\Z")  # RFC 9110 field-value in ASCII
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}\Z")


# --- configuration (the typed form of ``Config.secrets``) -----------------------------------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)  # inputs may be secrets


class StaticProviderConfig(_Strict):
    kind: Literal["static"]
    values: dict[str, dict[str, str]] = Field(default_factory=dict)
    """tenant → {reference or ``reference@variant`` → value}. For demos and tests only."""


class EnvProviderConfig(_Strict):
    kind: Literal["env"]
    prefix: str = "TOOLGATE_SECRET_"
    """Variable name prefix; the name is ``<prefix><TENANT>__<REF>[__<VARIANT>]``."""


class FileProviderConfig(_Strict):
    kind: Literal["file"]
    dir: str
    """Folder with one sub-folder per tenant, one file per secret (``<ref>`` or ``<ref>@<variant>``)."""


ProviderConfig = Annotated[StaticProviderConfig | EnvProviderConfig | FileProviderConfig, Field(discriminator="kind")]
"""Chosen by ``kind``: a mistake is one error of that kind's fields (or of ``kind``), not one per kind."""


class SecretsConfig(_Strict):
    providers: list[ProviderConfig] = Field(default_factory=list)
    """Providers in lookup order."""


class CredentialConfigError(ValueError):
    """``Config.secrets`` does not validate, or a descriptor asks for an impossible injection."""


def parse_secrets_config(raw: Mapping[str, Any]) -> SecretsConfig:
    """The typed ``Config.secrets``; raises ``CredentialConfigError`` naming each bad field.

    The message holds field paths and pydantic's messages only, never the input values
    (``str(ValidationError)`` quotes them, and here they are secrets); no cause is chained.
    """
    try:
        return SecretsConfig.model_validate(dict(raw))
    except ValidationError as exc:
        problems = [f"secrets.{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()]
    raise CredentialConfigError("\n".join(problems))


def missing_secret_dirs(raw: Mapping[str, Any], base_dir: Path) -> list[tuple[tuple[str | int, ...], str]]:
    """Each ``file`` provider whose ``dir`` is not a folder, as (field, message), for ``gateway.config``
    to refuse at load: a missing mount would answer every call ``credential_unavailable``. ``raw``
    must already validate."""
    problems: list[tuple[tuple[str | int, ...], str]] = []
    for i, spec in enumerate(parse_secrets_config(raw).providers):
        if isinstance(spec, FileProviderConfig) and not (folder := _provider_dir(spec, base_dir)).is_dir():
            why = "is not a folder" if folder.exists() else "no such folder"
            problems.append((("secrets", "providers", i, "dir"), f"the file secret provider's dir {folder}: {why}"))
    return problems


def _provider_dir(spec: FileProviderConfig, base_dir: Path) -> Path:
    d = Path(os.path.expanduser(spec.dir))
    return d if d.is_absolute() else base_dir / d


# --- providers --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SecretKey:
    tenant: str
    reference: str
    variant: str = ""

    def __post_init__(self) -> None:
        for part in (self.tenant, self.reference) + ((self.variant,) if self.variant else ()):
            if not _SAFE_NAME.match(part) or part in (".", ".."):
                raise ValueError(f"unsafe secret key component {part!r}")

    @property
    def qualified(self) -> str:
        return f"{self.reference}@{self.variant}" if self.variant else self.reference


class SecretProvider(Protocol):
    def get(self, key: SecretKey) -> str | None:
        """The secret's value, or None if this provider does not hold it."""
        ...


class StaticProvider:
    def __init__(self, values: Mapping[str, Mapping[str, str]]) -> None:
        self._values = {t: dict(v) for t, v in values.items()}

    def get(self, key: SecretKey) -> str | None:
        return self._values.get(key.tenant, {}).get(key.qualified)


class EnvProvider:
    def __init__(self, prefix: str = "TOOLGATE_SECRET_", environ: Mapping[str, str] | None = None) -> None:
        self._prefix = prefix
        self._environ = os.environ if environ is None else environ

    def variable(self, key: SecretKey) -> str:
        return self._prefix + "__".join(env_part(p) for p in _parts(key))

    def get(self, key: SecretKey) -> str | None:
        """None as well for a key with a part whose ``_`` would run into the ``__`` separator:
        its variable name could be another tenant's (``a__b``+``c`` vs ``a``+``b__c``)."""
        if any("__" in part or part.startswith("_") or part.endswith("_") for part in map(env_part, _parts(key))):
            return None
        return self._environ.get(self.variable(key))


def env_part(name: str) -> str:
    """A key part as the env provider spells it: upper-cased, every non-alphanumeric as ``_``."""
    return re.sub(r"[^A-Za-z0-9]", "_", name).upper()


def _parts(key: SecretKey) -> list[str]:
    return [key.tenant, key.reference] + ([key.variant] if key.variant else [])


class FileProvider:
    """One secret per file; a trailing newline (as ``kubectl create secret`` leaves none, editors add one) is dropped."""

    def __init__(self, root: str | Path) -> None:
        self._root = Path(root)

    def get(self, key: SecretKey) -> str | None:
        path = self._root / key.tenant / key.qualified
        try:
            raw = path.read_text(encoding="utf-8")
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None
        return raw[:-1] if raw.endswith("\n") else raw


def build_providers(raw: Mapping[str, Any], base_dir: Path) -> list[SecretProvider]:
    """Providers from ``Config.secrets``; relative ``dir`` paths resolve against ``base_dir``."""
    providers: list[SecretProvider] = []
    for spec in parse_secrets_config(raw).providers:
        if isinstance(spec, StaticProviderConfig):
            providers.append(StaticProvider(spec.values))
        elif isinstance(spec, EnvProviderConfig):
            providers.append(EnvProvider(spec.prefix))
        else:
            providers.append(FileProvider(_provider_dir(spec, base_dir)))
    return providers


# --- resolution -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CredentialUnavailable:
    """Outcome: a referenced secret is missing for this tenant (code ``credential_unavailable``).

    ``reference`` names the secret (never its value) for the audit log; callers get the code only.
    """

    reference: str
    variant: str = ""
    reason: str = "not found"


@dataclass(frozen=True, slots=True, repr=False)
class ResolvedCredentials:
    """What to inject, per channel, for one call. ``repr`` never shows values."""

    headers: Mapping[str, str] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    files: Mapping[str, str] = field(default_factory=dict)
    """label → file content; materialize with ``credential_files``."""
    hosts: tuple[str, ...] | None = None
    """Hosts the policy narrowed this call to (None: not narrowed)."""
    secret_values: frozenset[str] = frozenset()
    """Every raw and formatted value injected; the scrubber removes them from output."""
    references: tuple[str, ...] = ()
    """The references resolved (names only, safe to audit)."""

    def __repr__(self) -> str:
        return f"ResolvedCredentials(references={self.references!r}, values=<{len(self.secret_values)} hidden>)"

    __str__ = __repr__

    @property
    def empty(self) -> bool:
        return not self.secret_values


NO_CREDENTIALS = ResolvedCredentials()


class SecretResolver:
    """Resolves a tool's ``CredentialRef`` list for one tenant, narrowed by policy constraints."""

    def __init__(self, providers: Sequence[SecretProvider]) -> None:
        self._providers = list(providers)

    @classmethod
    def from_config(cls, secrets: Mapping[str, Any], base_dir: str | Path) -> "SecretResolver":
        return cls(build_providers(secrets, Path(base_dir)))

    def lookup(self, key: SecretKey) -> str | None:
        for provider in self._providers:
            value = provider.get(key)
            if value is not None:
                return value
        return None

    def resolve(
        self, tool: ToolConfig, tenant: str, constraints: Mapping[str, Any]
    ) -> ResolvedCredentials | CredentialUnavailable:
        variant = _variant(constraints)
        if isinstance(variant, CredentialUnavailable):
            return variant
        hosts = constraints.get("hosts")
        if not tool.credentials:
            return ResolvedCredentials(hosts=_hosts(hosts))
        headers: dict[str, str] = {}
        env: dict[str, str] = {}
        files: dict[str, str] = {}
        values: set[str] = set()
        for ref in tool.credentials:
            try:
                raw = self.lookup(SecretKey(tenant, ref.secret, variant))
            except ValueError:
                return CredentialUnavailable(ref.secret, variant, "invalid reference")
            if raw is None or raw == "":
                return CredentialUnavailable(ref.secret, variant)
            formatted = format_value(ref, raw)
            unfit = _unfit(ref, formatted)
            if unfit is not None:
                return CredentialUnavailable(ref.secret, variant, unfit)
            _place(ref, formatted, headers, env, files)
            values.update({raw, formatted})
        return ResolvedCredentials(
            headers=headers,
            env=env,
            files=files,
            hosts=_hosts(hosts),
            secret_values=frozenset(values),
            references=tuple(r.secret for r in tool.credentials),
        )


class CredentialStage:
    """The pipeline's credentials stage (``gateway.hooks.CredentialResolver``).

    Resolves into ``ctx.credentials``; a missing secret refuses with ``credential_unavailable``.
    The reason names the reference, never a value. Constraints are the effective ones
    (descriptor narrowed by policy), the same the executor receives.
    """

    def __init__(self, resolver: SecretResolver) -> None:
        self._resolver = resolver

    async def resolve(self, ctx: Any) -> Any:
        from gateway.codes import Code
        from gateway.execute import effective_constraints, variant_conflict
        from gateway.models import Refused

        conflict = variant_conflict(ctx)
        if conflict is not None:
            return Refused(Code.CREDENTIAL_UNAVAILABLE, (conflict,))
        got = self._resolver.resolve(ctx.tool.config, ctx.identity.tenant, effective_constraints(ctx))
        if isinstance(got, CredentialUnavailable):
            what = f"{got.reference}@{got.variant}" if got.variant else got.reference
            return Refused(Code.CREDENTIAL_UNAVAILABLE, (f"credential {what} is not available: {got.reason}",))
        ctx.credentials = got
        return None


def build_credentials(config: Any) -> Any:
    """The credentials stage for a Config: validates every descriptor's credential refs first.

    Without ``secrets`` a tool that needs credentials is refused (``credential_unavailable``).
    """
    from gateway.hooks import NoCredentials

    for tool in config.tools:
        validate_refs(tool)
    if not config.secrets:
        return NoCredentials()
    if any(isinstance(spec, EnvProviderConfig) for spec in parse_secrets_config(config.secrets).providers):
        _refuse_shared_env_names({identity.tenant for identity in config.identities})
    return CredentialStage(SecretResolver.from_config(config.secrets, config.base_dir))


def _refuse_shared_env_names(tenants: set[str]) -> None:
    """Raise CredentialConfigError when two tenants would read the same env variables."""
    spelled: dict[str, set[str]] = {}
    for tenant in tenants:
        spelled.setdefault(env_part(tenant), set()).add(tenant)
    shared = sorted(", ".join(sorted(names)) for names in spelled.values() if len(names) > 1)
    if shared:
        raise CredentialConfigError(
            f"secrets: the env provider cannot tell tenants {'; '.join(shared)} apart (their variable names "
            "are the same once upper-cased with non-alphanumerics as _); rename a tenant or use the file provider"
        )


def format_value(ref: CredentialRef, raw: str) -> str:
    """Apply the descriptor's template (``Bearer {value}``); only ``{value}`` is substituted."""
    if ref.format.count("{value}") != 1:
        raise CredentialConfigError(f"credential {ref.secret}: format must contain {{value}} exactly once")
    return ref.format.replace("{value}", raw)


def validate_refs(tool: ToolConfig) -> None:
    """Raise CredentialConfigError if a descriptor's credentials cannot be injected by its executor."""
    allowed = {"http": {"header"}, "subprocess": {"env", "file"}, "python": {"env", "file", "header"},
               "mcp": {"header", "env"}}[tool.executor.kind]
    for ref in tool.credentials:
        if ref.inject not in allowed:
            raise CredentialConfigError(f"tool {tool.name}: {tool.executor.kind} cannot inject {ref.inject}")
        pattern = {"header": _HEADER_NAME, "env": _ENV_NAME, "file": _SAFE_NAME}[ref.inject]
        if not pattern.match(ref.name or ""):
            raise CredentialConfigError(f"tool {tool.name}: credential {ref.secret} needs a valid {ref.inject} name")
        format_value(ref, "x")


def _place(ref: CredentialRef, value: str, headers: dict[str, str], env: dict[str, str], files: dict[str, str]) -> None:
    target = {"header": headers, "env": env, "file": files}[ref.inject]
    target[ref.name] = value


def _unfit(ref: CredentialRef, value: str) -> str | None:
    """Why a value cannot be injected where its reference puts it, naming the place and never the
    value; None when it can. Found here, every executor refuses it the same way before anything
    runs, instead of an HTTP client's encoding error (a retryable upstream failure) or a spawn's."""
    if ref.inject == "header" and not _HEADER_VALUE.match(value):
        return (f"its value holds characters an HTTP header ({ref.name}) cannot carry: printable ASCII, inner spaces "
                "and tabs only, no line breaks and no space at either end")
    if ref.inject == "env" and "\0" in value:
        return f"its value holds a NUL character, which an environment variable ({ref.name}) cannot carry"
    return None


def _variant(constraints: Mapping[str, Any]) -> str | CredentialUnavailable:
    variant = constraints.get("credential_variant", "")
    if not isinstance(variant, str) or (variant and not _SAFE_NAME.match(variant)):
        return CredentialUnavailable("*", str(variant), "invalid credential_variant constraint")
    return variant


def _hosts(hosts: Any) -> tuple[str, ...] | None:
    if hosts is None:
        return None
    if isinstance(hosts, str):
        return (hosts,)
    return tuple(str(h) for h in hosts)


@asynccontextmanager
async def credential_files(creds: ResolvedCredentials | None, parent: Path | None = None) -> AsyncIterator[dict[str, str]]:
    """Write each file credential to a 0600 file in a private 0700 folder; remove them on exit,
    in a thread: the tool may have left any number of files there, and their removal would hold
    the event loop (and every other call on it) meanwhile.

    Yields label → path. The folder is outside the tool's sandbox unless ``parent`` says otherwise.
    """
    if creds is None or not creds.files:
        yield {}
        return
    folder = Path(tempfile.mkdtemp(prefix="toolgate-cred-", dir=parent))
    top = os.path.realpath(folder)  # now, while it is surely the folder made here
    try:
        paths: dict[str, str] = {}
        for label, value in creds.files.items():
            path = folder / label
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(value)
            paths[label] = str(path)
        yield paths
    finally:  # a cancelled call stops waiting here; the thread removes the folder all the same
        await asyncio.shield(asyncio.to_thread(_remove, folder, top))


def _remove(folder: Path, top: str) -> None:
    """Remove ``folder`` and whatever the tool put in it (folders too, read-only ones included).
    What cannot be removed is logged, never raised: the call's result stands, and a secret left on
    disk is for the operator to know of (``credential_files_not_removed``). ``top``: the folder's
    real path when it was made (the tool may have put a link in its place since)."""

    def again(function: Any, path: str, *_: Any) -> None:
        """Make room and remove ``path`` once more: its folder (never above ``folder``) and, for a
        folder, itself writable and searchable (the tool may have made them read-only, even 000)."""
        if function not in (os.unlink, os.remove, os.rmdir):  # a listing or an open: make it readable first
            _writable(path, top)
            return
        parent = os.path.dirname(path)
        if os.path.commonpath([top, os.path.realpath(parent)]) == top:
            _writable(parent, top)
        with suppress(OSError):
            function(path)

    if not os.path.islink(folder):
        _open_up(str(folder), top)
    if sys.version_info >= (3, 12):
        shutil.rmtree(folder, onexc=again)  # never follows a link: one put in the folder's place is refused
    else:
        shutil.rmtree(folder, onerror=again)
    if os.path.lexists(folder):
        shutil.rmtree(folder, ignore_errors=True)  # once more: folders made readable on the first pass
    if os.path.lexists(folder):
        log.error("credential_files_not_removed", folder=str(folder))


def _open_up(folder: str, top: str) -> None:
    """Every folder at or below ``folder`` made 0700, each before it is listed, so a folder the tool
    sealed (000) inside another sealed one is reached too: rmtree alone opened one level per pass."""
    pending = [folder]
    while pending:
        path = pending.pop()
        _writable(path, top)
        with suppress(OSError), os.scandir(path) as entries:
            pending.extend(entry.path for entry in entries if entry.is_dir(follow_symlinks=False))


def _writable(path: str, top: str) -> None:
    """``path`` made 0700 when it is a folder at or below ``top`` (not a link: a link's target may
    be anywhere); nothing else is touched."""
    with suppress(OSError):
        info = os.lstat(path)
        if stat.S_ISDIR(info.st_mode) and os.path.commonpath([top, os.path.realpath(path)]) == top:
            os.chmod(path, 0o700)
