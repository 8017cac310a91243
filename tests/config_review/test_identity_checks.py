"""Identities that could not work as written do not load.

- Two identities with one ``api_key_sha256``: the last one listed acted for the key (the key
  meant for tenant acme acted for globex). Refused, naming both.
- An identity with role ``approver`` and no ``approver`` id, or one the keyring
  (``approvals.approvers``) does not list, loaded and was then refused every vote with
  ``permission_denied`` "this API key lacks the role". Refused at load, saying what to fix.
"""

from __future__ import annotations

import pytest

from gateway.config import ConfigError, load_config
from gateway.testing import start_gateway
from tests.conftest import Client


def _identity(raw, name):
    return next(i for i in raw["identities"] if i["name"] == name)


def test_two_identities_with_one_key_do_not_load(demo_with):
    def share(raw):
        _identity(raw, "globex-agent")["api_key_sha256"] = _identity(raw, "demo-agent")["api_key_sha256"]

    path = demo_with(share)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value) == (f"{path}: identities.1.api_key_sha256: identities 'demo-agent' and 'globex-agent' "
                              "have the same key (it would act as the last one only); give each its own key")


def test_two_roles_need_two_identities_with_their_own_keys(demo_with):
    """The same person as an agent and an approver: one identity with both roles loads."""
    def both(raw):
        _identity(raw, "alice")["roles"] = ["agent", "approver"]

    load_config(demo_with(both))


@pytest.mark.parametrize("change,field,says", [
    (lambda i: i.pop("approver"), "approver",
     "identity 'alice' has role approver but no approver id; set approver: to its id in approvals.approvers "
     "(alice, bob, carol)"),
    (lambda i: i.__setitem__("approver", "alicia"), "approver",
     "identity 'alice': approver 'alicia' is not in approvals.approvers (alice, bob, carol); add it with its "
     "public keys, or fix the id"),
    (lambda i: i.__setitem__("user", "dana"), "user", "its votes would be taken as 'dana''s, not 'alice''s"),
], ids=["no_approver_id", "unknown_approver_id", "user_not_the_approver"])
def test_an_approver_that_could_never_approve_does_not_load(demo_with, change, field, says):
    path = demo_with(lambda raw: change(_identity(raw, "alice")))
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value).startswith(f"{path}: identities.2.{field}: "), err.value
    assert says in str(err.value)


def test_an_approver_needs_an_approvals_section_listing_it(demo_with):
    path = demo_with(lambda raw: raw.pop("approvals"))
    with pytest.raises(ConfigError) as err:
        load_config(path)
    lines = str(err.value).splitlines()
    assert len(lines) == 3 and all("approvals.approvers (it lists none)" in line for line in lines), lines


async def test_each_key_acts_for_its_own_tenant(demo_with):
    """With one key to one identity, a gateway from the demo config takes each agent's key for its
    own identity and tenant, and both may call."""
    running = await start_gateway(demo_with(lambda raw: None))
    try:
        for key in ("demo-agent-key", "other-tenant-key"):
            identity = running.app.authenticator.authenticate([("x-api-key", key)])
            assert identity is not None
            assert identity.tenant == {"demo-agent-key": "acme", "other-tenant-key": "globex"}[key]
            client = Client(running.address, api_key=key)
            try:
                assert (await client.call("lookup_policy", '{"topic": "refunds"}')).observation.status == "ok"
            finally:
                await client.close()
    finally:
        await running.stop()
