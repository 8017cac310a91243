"""The env secret provider never hands one tenant's secret to another.

Its variable names upper-case each part and turn every other character into ``_``, with
``__`` between the parts; two tenants whose names meet in that form would read the same
variable, so such a configuration is refused, and a part that would make the ``__``
separator ambiguous is never looked up.
"""

from __future__ import annotations

import pytest

from gateway.config import Config
from gateway.credentials import CredentialConfigError, EnvProvider, SecretKey, build_credentials

HASHES = iter(f"{i:064x}" for i in range(1, 100))


def config(*tenants: str, providers: list | None = None) -> Config:
    identities = [{"name": f"agent-{i}", "api_key_sha256": next(HASHES), "tenant": t} for i, t in enumerate(tenants)]
    return Config(identities=identities, secrets={"providers": providers or [{"kind": "env"}]})


@pytest.mark.parametrize("other", ["acme-corp", "acme.corp", "ACME_CORP"])
def test_tenants_that_share_env_variable_names_are_refused(other):
    with pytest.raises(CredentialConfigError, match="acme_corp"):
        build_credentials(config("acme_corp", other))


def test_distinct_tenants_and_other_providers_are_accepted(tmp_path):
    build_credentials(config("acme", "globex", "acme-corp"))
    build_credentials(config("acme_corp", "acme-corp", providers=[{"kind": "file", "dir": str(tmp_path)}]))


@pytest.mark.parametrize(
    "key",
    [SecretKey("a__b", "c"), SecretKey("a", "b__c"), SecretKey("a", "b", "c__d"), SecretKey("a_", "b"), SecretKey("a", "-b")],
    ids=["tenant", "reference", "variant", "trailing", "leading"],
)
def test_a_part_that_would_blur_the_separator_is_not_looked_up(key):
    environ = {EnvProvider().variable(key): "someone-elses-secret"}
    assert EnvProvider(environ=environ).get(key) is None


def test_plain_keys_are_found():
    environ = {"TOOLGATE_SECRET_ACME_CORP__GITHUB_TOKEN__READ_ONLY": "v"}
    assert EnvProvider(environ=environ).get(SecretKey("acme-corp", "github_token", "read_only")) == "v"
