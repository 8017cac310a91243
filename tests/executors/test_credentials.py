import os
import stat

import pytest

from gateway.credentials import (
    CredentialConfigError,
    SecretResolver,
    CredentialUnavailable,
    EnvProvider,
    FileProvider,
    ResolvedCredentials,
    SecretKey,
    StaticProvider,
    credential_files,
    validate_refs,
)

TOKEN_A = "tokA-9f8e7d6c5b4a"
TOKEN_B = "tokB-0a1b2c3d4e5f"


def _tool(make_tool, **cred):
    ref = {"secret": "api_token", "inject": "header", "name": "Authorization", "format": "Bearer {value}", **cred}
    return make_tool("api", credentials=[ref])


def _resolver():
    return SecretResolver([StaticProvider({
        "acme": {"api_token": TOKEN_A, "api_token@read_only": "tokA-ro-11223344"},
        "globex": {"api_token": TOKEN_B},
    })])


def test_resolution_is_scoped_to_the_tenant(make_tool):
    tool = _tool(make_tool)
    a = _resolver().resolve(tool, "acme", {})
    b = _resolver().resolve(tool, "globex", {})
    assert a.headers == {"Authorization": f"Bearer {TOKEN_A}"}
    assert b.headers == {"Authorization": f"Bearer {TOKEN_B}"}
    assert TOKEN_A not in b.secret_values and TOKEN_B not in a.secret_values


def test_unknown_tenant_gets_credential_unavailable_not_another_tenants_secret(make_tool):
    got = _resolver().resolve(_tool(make_tool), "initech", {})
    assert got == CredentialUnavailable("api_token", "")


def test_policy_variant_narrows_to_the_variant(make_tool):
    got = _resolver().resolve(_tool(make_tool), "acme", {"credential_variant": "read_only"})
    assert got.headers["Authorization"] == "Bearer tokA-ro-11223344"
    assert TOKEN_A not in got.secret_values


def test_missing_variant_fails_closed_instead_of_using_the_broader_secret(make_tool):
    got = _resolver().resolve(_tool(make_tool), "globex", {"credential_variant": "read_only"})
    assert isinstance(got, CredentialUnavailable) and got.variant == "read_only"


@pytest.mark.parametrize("variant", ["../acme", "a/b", 7, ""])
def test_hostile_or_odd_variant_never_reads_outside_the_tenant(make_tool, variant):
    got = _resolver().resolve(_tool(make_tool), "acme", {"credential_variant": variant})
    if variant == "":
        assert isinstance(got, ResolvedCredentials)
    else:
        assert isinstance(got, CredentialUnavailable)


def test_hosts_constraint_is_carried_for_the_executor(make_tool):
    got = _resolver().resolve(_tool(make_tool), "acme", {"hosts": ["api.example.com"]})
    assert got.hosts == ("api.example.com",)


def test_repr_never_shows_values(make_tool):
    got = _resolver().resolve(_tool(make_tool), "acme", {})
    assert TOKEN_A not in repr(got) and TOKEN_A not in str(got) and TOKEN_A not in f"{got}"


def test_env_provider_reads_tenant_qualified_variables():
    env = {"TOOLGATE_SECRET_ACME__API_TOKEN": "e1", "TOOLGATE_SECRET_ACME__API_TOKEN__READ_ONLY": "e2"}
    p = EnvProvider(environ=env)
    assert p.get(SecretKey("acme", "api_token")) == "e1"
    assert p.get(SecretKey("acme", "api_token", "read_only")) == "e2"
    assert p.get(SecretKey("globex", "api_token")) is None


def test_file_provider_reads_one_secret_per_file(tmp_path):
    (tmp_path / "acme").mkdir()
    (tmp_path / "acme" / "api_token").write_text("f-secret\n")
    (tmp_path / "acme" / "api_token@read_only").write_text("f-ro")
    p = FileProvider(tmp_path)
    assert p.get(SecretKey("acme", "api_token")) == "f-secret"
    assert p.get(SecretKey("acme", "api_token", "read_only")) == "f-ro"
    assert p.get(SecretKey("globex", "api_token")) is None


@pytest.mark.parametrize("tenant", ["..", "../acme", "acme/..", ""])
def test_secret_keys_reject_path_traversal(tenant):
    with pytest.raises(ValueError):
        SecretKey(tenant, "api_token")


def test_providers_are_tried_in_order(make_tool):
    r = SecretResolver([StaticProvider({"acme": {}}), StaticProvider({"acme": {"api_token": "second"}})])
    assert r.resolve(_tool(make_tool), "acme", {}).headers["Authorization"] == "Bearer second"


def test_from_config_builds_typed_providers(tmp_path, make_tool):
    (tmp_path / "s" / "acme").mkdir(parents=True)
    (tmp_path / "s" / "acme" / "api_token").write_text("from-file")
    r = SecretResolver.from_config({"providers": [{"kind": "file", "dir": "s"}]}, tmp_path)
    assert r.resolve(_tool(make_tool), "acme", {}).headers["Authorization"] == "Bearer from-file"
    with pytest.raises(CredentialConfigError):
        SecretResolver.from_config({"providers": [{"kind": "vault"}]}, tmp_path)


async def test_file_credentials_are_private_and_removed(make_tool):
    creds = ResolvedCredentials(files={"kubeconfig": "secret-body"}, secret_values=frozenset({"secret-body"}))
    async with credential_files(creds) as paths:
        path = paths["kubeconfig"]
        assert open(path).read() == "secret-body"
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
    assert not os.path.exists(path) and not os.path.exists(os.path.dirname(path))


def test_descriptor_injection_must_fit_the_executor(make_tool):
    bad = make_tool("h", executor={"kind": "http", "url": "https://x"},
                    credentials=[{"secret": "s", "inject": "env", "name": "S"}])
    with pytest.raises(CredentialConfigError):
        validate_refs(bad)
    bad_header = make_tool("h", executor={"kind": "http", "url": "https://x"},
                           credentials=[{"secret": "s", "inject": "header", "name": "X: y\r\nEvil"}])
    with pytest.raises(CredentialConfigError):
        validate_refs(bad_header)


@pytest.mark.parametrize("decided, token", [
    ({}, "tokA-ro-11223344"),
    ({"credential_variant": "read_only"}, "tokA-ro-11223344"),
    ({"credential_variant": ""}, "tokA-ro-11223344"),  # "" would be the broader default credential
    ({"credential_variant": None}, "tokA-ro-11223344"),
    ({"credential_variant": "admin"}, None),  # another variant: refused, neither is used
])
async def test_policy_cannot_change_a_variant_the_descriptor_pins(make_tool, decided, token):
    from policies import PolicyDecision

    from gateway.codes import Code
    from gateway.credentials import CredentialStage
    from gateway.models import CallContext, Identity, ToolCall
    from gateway.tools import ToolRegistry

    ref = {"secret": "api_token", "inject": "header", "name": "Authorization", "format": "Bearer {value}"}
    tool = make_tool("api", credentials=[ref], constraints={"credential_variant": "read_only"})
    ctx = CallContext("d-1", Identity("acme", "agent"), ToolCall("api", b"{}"), 0.0)
    ctx.tool = ToolRegistry([tool]).resolve("api")
    ctx.args = {}
    ctx.decision = PolicyDecision(decision="allow", constraints=decided)
    refused = await CredentialStage(_resolver()).resolve(ctx)
    if token is None:
        assert refused.code == Code.CREDENTIAL_UNAVAILABLE and "pins 'read_only'" in refused.reasons[0]
        assert ctx.credentials is None
    else:
        assert refused is None
        assert ctx.credentials.headers == {"Authorization": f"Bearer {token}"}


@pytest.mark.parametrize(("tenant", "reference", "variant"), [
    ("acme\n", "api_token", ""), ("acme", "api_token\n", ""), ("acme", "api_token", "read_only\n")])
def test_a_secret_key_component_with_a_final_newline_is_unsafe(tenant, reference, variant):
    with pytest.raises(ValueError, match="unsafe secret key component"):
        SecretKey(tenant, reference, variant)


def test_a_credential_variant_with_a_final_newline_is_refused_as_invalid(make_tool):
    got = _resolver().resolve(_tool(make_tool), "acme", {"credential_variant": "read_only\n"})
    assert isinstance(got, CredentialUnavailable) and got.reason == "invalid credential_variant constraint"


@pytest.mark.parametrize(("inject", "name"), [("header", "Authorization\n"), ("env", "API_TOKEN\n")])
def test_an_injected_name_with_a_final_newline_does_not_load(make_tool, inject, name):
    tool = make_tool("api", executor={"kind": "python", "callable": "x:y"},
                     credentials=[{"secret": "api_token", "inject": inject, "name": name}])
    with pytest.raises(CredentialConfigError, match=f"needs a valid {inject} name"):
        validate_refs(tool)


@pytest.mark.parametrize("secret", ["tökén-1234", "abc\r\nX-Injected: 1", "abc\ndef", "abc\0def", "abc ", "\tabc"])
def test_a_header_value_http_cannot_carry_is_unavailable_before_any_executor_sees_it(make_tool, secret):
    """Not ASCII, a line break, a NUL or a space at an end: refused at resolution with the header
    named and the value never shown, for every executor alike (the MCP executor's HTTP client
    raised UnicodeEncodeError, reported as a retryable upstream failure, and h11 a protocol error)."""
    tool = make_tool("api", credentials=[{"secret": "api_token", "inject": "header", "name": "X-Api-Key"}])
    got = SecretResolver([StaticProvider({"acme": {"api_token": secret}})]).resolve(tool, "acme", {})
    assert isinstance(got, CredentialUnavailable) and got.reference == "api_token", got
    assert "X-Api-Key" in got.reason and secret not in got.reason


@pytest.mark.parametrize("secret", ["tok a\tb", "tok-!~", "x"])
def test_a_header_value_with_inner_spaces_and_tabs_is_injected(make_tool, secret):
    tool = make_tool("api", credentials=[{"secret": "api_token", "inject": "header", "name": "X-Api-Key"}])
    got = SecretResolver([StaticProvider({"acme": {"api_token": secret}})]).resolve(tool, "acme", {})
    assert isinstance(got, ResolvedCredentials) and got.headers == {"X-Api-Key": secret}


def test_an_env_value_holding_a_nul_is_unavailable_not_a_failed_spawn(make_tool):
    tool = make_tool("api", executor={"kind": "subprocess", "argv": ["true"]},
                     credentials=[{"secret": "api_token", "inject": "env", "name": "API_TOKEN"}])
    got = SecretResolver([StaticProvider({"acme": {"api_token": "a\0b"}})]).resolve(tool, "acme", {})
    assert isinstance(got, CredentialUnavailable) and "API_TOKEN" in got.reason and "a\0b" not in got.reason
    fine = SecretResolver([StaticProvider({"acme": {"api_token": "a b\nc"}})]).resolve(tool, "acme", {})
    assert isinstance(fine, ResolvedCredentials) and fine.env == {"API_TOKEN": "a b\nc"}
