"""A setting that cannot work is refused when the file is read, as ``config_invalid`` naming the
file and the setting's path, by ``toolgate serve`` and ``toolgate config check`` alike.

An operator review found these getting through: ``listen: 127.0.0.1:99999`` started and listened
on 34463 (the port wrapped); ``listen: 127.0.0.1`` failed as "cannot listen on :127.0.0.1"; an
approver key that was not one failed the start (``cannot_start``) with cryptography's or base64's
words; ``policy.query: toolgate.decision`` failed the start (OPA) or every call (embedded);
``store.kind: postgres`` without ``store.dsn`` failed the start; and the checks that look across
settings said ``(top level)`` instead of the setting to change.
"""

from __future__ import annotations

import base64
import copy
import select
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from gateway.cli._errors import EXIT
from gateway.config import ConfigError, load_config
from tests.conftest import DEMO_CONFIG, ROOT
from tests.config_review.conftest import tool_named

Raw = dict[str, Any]
ALICE_KID = "alice-demo-1"


def _alice_key(raw: Raw) -> dict[str, str]:
    return raw["approvals"]["approvers"][0]["keys"][0]


def _pem_instead(pem: str) -> Callable[[Raw], None]:
    def change(raw: Raw) -> None:
        _alice_key(raw).pop("public_key")
        _alice_key(raw)["public_key_pem"] = pem
    return change


def _ec_public_pem() -> str:
    key = ec.generate_private_key(ec.SECP256R1()).public_key()
    return key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()


def _key_of_16_bytes(raw: Raw) -> None:
    _alice_key(raw)["public_key"] = base64.b64encode(b"k" * 16).decode()


def _workers_and_metrics(raw: Raw) -> None:
    raw["workers"] = 2
    raw["observability"] = {"metrics_port": 9464}
    for tool in raw["tools"]:
        tool.pop("max_concurrency", None)  # the demo caps run_command, which several workers cannot enforce


ROWS = [
    ("listen_port_over_65535", lambda raw: raw.__setitem__("listen", "127.0.0.1:99999"),
     "listen", "port '99999' is not a number from 0 to 65535"),
    ("listen_without_port", lambda raw: raw.__setitem__("listen", "127.0.0.1"),
     "listen", "no port; give HOST:PORT, e.g. 127.0.0.1:50051"),
    ("public_key_not_base64", lambda raw: _alice_key(raw).__setitem__("public_key", "not base64!"),
     "approvals.approvers.0.keys.0.public_key", f"key '{ALICE_KID}': public_key is not base64"),
    ("public_key_not_32_bytes", _key_of_16_bytes,
     "approvals.approvers.0.keys.0.public_key", "decodes to 16 bytes, and a raw Ed25519 public key is 32"),
    ("public_key_pem_not_pem", _pem_instead("-----BEGIN PUBLIC KEY-----\nbm90IGEga2V5\n-----END PUBLIC KEY-----\n"),
     "approvals.approvers.0.keys.0.public_key_pem", "is not a public key in PEM"),
    ("public_key_pem_not_ed25519", _pem_instead(_ec_public_pem()),
     "approvals.approvers.0.keys.0.public_key_pem", "holds a public key of type EC, not Ed25519"),
    ("opa_ca_file_with_http_url", lambda raw: raw["policy"].__setitem__("opa_ca_file", "ca.pem"),
     "policy.opa_ca_file", "set, but policy.opa_url is not https://"),
    ("workers_with_metrics_port", _workers_and_metrics,
     "workers", "2 workers cannot share one observability.metrics_port"),
    ("query_not_a_data_path_embedded", lambda raw: raw["policy"].__setitem__("query", "toolgate.decision"),
     "policy.query", "'toolgate.decision' is not a rule path: give data.<package>.<rule>"),
    ("query_not_a_data_path_opa", lambda raw: raw["policy"].update(
        {"engine": "opa", "opa_url": "http://127.0.0.1:1", "query": "toolgate.decision"}),
     "policy.query", "'toolgate.decision' is not a rule path: give data.<package>.<rule>"),
    ("postgres_without_dsn", lambda raw: raw.__setitem__("store", {"kind": "postgres"}),
     "store.dsn", "store.kind postgres needs the PostgreSQL connection string"),
]


def _serve(config: Path, timeout: float = 60.0) -> tuple[int | None, str, str]:
    """``toolgate serve --config`` with the config's own ``listen``: (its exit code, or None when it
    listened and was killed; stdout; stderr). It writes to stdout only once it listens."""
    proc = subprocess.Popen([sys.executable, "-m", "gateway.cli", "serve", "--config", str(config)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    try:
        ready, _, _ = select.select([proc.stdout], [], [], timeout)
        assert ready, f"serve neither listened nor exited within {timeout} s"
        first = proc.stdout.readline()  # "toolgate listening on ...", or "" when it exited
        if first:
            proc.kill()
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    return (None if first else proc.returncode), first + out, err


def _check(config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gateway.cli", "config", "check", str(config)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def _on_port_0(change: Callable[[Raw], None]) -> Callable[[Raw], None]:
    """``change`` to the demo, which listens on a free port unless ``change`` sets ``listen``."""
    def both(raw: Raw) -> None:
        raw["listen"] = "127.0.0.1:0"
        change(raw)
    return both


@pytest.mark.parametrize("change,setting,says", [row[1:] for row in ROWS], ids=[row[0] for row in ROWS])
def test_serve_refuses_the_setting_by_its_path_and_does_not_start(demo_with, change, setting, says):
    path = demo_with(_on_port_0(change))
    code, out, err = _serve(path)
    assert "listening" not in out and code == EXIT["config_invalid"], (code, out, err)
    line = err.strip().splitlines()[-1]
    assert line.startswith(f"toolgate: config_invalid: {path}: {setting}: "), err
    assert says in line, line


@pytest.mark.parametrize("change,setting,says", [row[1:] for row in ROWS], ids=[row[0] for row in ROWS])
def test_config_check_refuses_the_setting_by_its_path(demo_with, change, setting, says):
    path = demo_with(_on_port_0(change))
    done = _check(path)
    assert done.returncode == EXIT["config_invalid"] and "config ok" not in done.stdout, done
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"toolgate: config_invalid: {path}: {setting}: ") and says in line, line


def _mcp_tool_of_unknown_server(raw: Raw) -> None:
    tool_named(raw, "read_file")["executor"] = {"kind": "mcp", "server": "notes"}


@pytest.mark.parametrize("change,setting,says", [
    (lambda raw: raw["tools"].append(copy.deepcopy(tool_named(raw, "read_file"))),
     "tools.8.name", "tool 'read_file' is also tools.0: tool names must be unique"),
    (lambda raw: raw.__setitem__("workers", 2),
     "workers", "2 workers cannot enforce max_concurrency (a per-process cap) of tools run_command"),
    (lambda raw: raw["policy"].update({"opa_url": "https://opa.internal", "opa_ca_file": "missing.pem"}),
     "policy.opa_ca_file", "missing.pem: no such file"),
    (lambda raw: tool_named(raw, "read_file")["executor"].__setitem__("allowed_hosts", ["example.com"]),
     "tools.0.executor.allowed_hosts", "tool 'read_file': executor.allowed_hosts is read by the http executor only"),
    (_mcp_tool_of_unknown_server,
     "tools.0.executor.server", "tool 'read_file': executor.server 'notes' names no entry of mcp_upstreams"),
    (lambda raw: tool_named(raw, "run_command").__setitem__("constraints", {"hosts": ["example.com"]}),
     "tools.6.constraints.hosts", "tool 'run_command': constraints.hosts cannot be enforced for a subprocess tool"),
    (lambda raw: raw.__setitem__("limits", {"python_threads": 2}),
     "limits.python_threads_per_tenant", "4 cannot exceed limits.python_threads (2)"),
    (lambda raw: raw["approvals"]["approvers"][1]["keys"][0].__setitem__("kid", ALICE_KID),
     "approvals.approvers.1.keys.0.kid", f"kid '{ALICE_KID}' is also approvers.0.keys.0"),
    (lambda raw: raw["approvals"]["approvers"][1].__setitem__("id", "alice"),
     "approvals.approvers.1.id", "approver 'alice' is also approvers.0"),
    (lambda raw: raw["approvals"].__setitem__("grant_keys", []),
     "approvals.grant_keys", "needs at least one file"),
], ids=["tool_name_repeated", "workers_with_max_concurrency", "opa_ca_file_missing", "allowed_hosts_unused",
        "mcp_server_unknown", "hosts_for_a_subprocess", "tenant_threads_over_pool", "kid_repeated",
        "approver_id_repeated", "no_grant_key"])
def test_a_check_across_settings_names_the_setting_to_blame(demo_with, change, setting, says):
    path = demo_with(change)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    message = str(err.value)
    assert message.startswith(f"{path}: {setting}: ") and says in message, message
    assert "(top level)" not in message and "Value error" not in message, message


@pytest.mark.parametrize("listen", ["127.0.0.1:0", "[::1]:0", "localhost:50051", "0.0.0.0:65535", "[::]:50051"])
def test_a_host_and_port_still_load(demo_with, listen):
    assert load_config(demo_with(lambda raw: raw.__setitem__("listen", listen))).listen == listen


def _ed25519_public_raw() -> bytes:
    """A fixed key whose standard base64 holds both '+' and '/', so the two alphabets differ."""
    key = Ed25519PrivateKey.from_private_bytes(bytes([2]) * 32).public_key()
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def _key_forms() -> dict[str, dict[str, str]]:
    raw = _ed25519_public_raw()
    standard, url_safe = base64.b64encode(raw).decode(), base64.urlsafe_b64encode(raw).decode()
    assert "+" in standard and "/" in standard and standard.endswith("=")
    pem = Ed25519PrivateKey.from_private_bytes(bytes([2]) * 32).public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    return {"standard_padded": {"public_key": standard}, "standard_unpadded": {"public_key": standard.rstrip("=")},
            "url_safe_padded": {"public_key": url_safe}, "url_safe_unpadded": {"public_key": url_safe.rstrip("=")},
            "pem": {"public_key_pem": pem}}


@pytest.mark.parametrize("form", list(_key_forms()))
def test_each_form_of_an_approver_key_still_loads_as_that_key(demo_with, form):
    from gateway.approvals.config import approvals_config
    from gateway.approvals.keyring import approver_keyring

    def give(raw: Raw) -> None:
        _alice_key(raw).pop("public_key")
        _alice_key(raw).update(_key_forms()[form])

    config = load_config(demo_with(give))
    verify = approver_keyring(approvals_config(config)).get(ALICE_KID)
    assert verify is not None and verify.owner == "alice"
    assert verify.key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw) == _ed25519_public_raw()


@pytest.mark.parametrize("stray", ["*", " ", "=#"], ids=["star", "space", "after_padding"])
def test_a_character_outside_base64_is_refused_not_dropped(demo_with, stray):
    """base64's lenient decoding dropped it and loaded whatever the rest decoded to."""
    standard = base64.b64encode(_ed25519_public_raw()).decode()
    key = standard + stray if stray.startswith("=") else standard[:20] + stray + standard[20:]
    path = demo_with(lambda raw: _alice_key(raw).__setitem__("public_key", key))
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value).startswith(f"{path}: approvals.approvers.0.keys.0.public_key: key '{ALICE_KID}': "
                                     "public_key is not base64; "), err.value


def test_the_demo_config_loads_with_its_keys():
    from gateway.approvals.config import approvals_config
    from gateway.approvals.keyring import approver_keyring

    config = load_config(DEMO_CONFIG)
    assert config.listen == "127.0.0.1:50051"
    assert approver_keyring(approvals_config(config)).owners == ["alice", "bob", "carol"]

