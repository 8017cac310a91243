"""An OPA URL never carries a secret into the engine's version (which every response and
audit record shows as ``policy_version``) or into the error that refuses it."""

from __future__ import annotations

import pytest

from policies import OPAEngine

SECRET = "s3cret-pw-7f1c"


@pytest.mark.parametrize(
    "url",
    [
        f"https://toolgate:{SECRET}@opa.example:8443",
        f"https://opa.example:8443/?token={SECRET}",
        f"https://opa.example:8443/#{SECRET}",
        f"http://toolgate:{SECRET}@127.0.0.1:8181",
    ],
    ids=["https_userinfo", "https_query", "https_fragment", "http_userinfo"],
)
def test_a_url_with_credentials_is_refused_without_echoing_them(url):
    with pytest.raises(ValueError) as info:
        OPAEngine(url)
    assert SECRET not in str(info.value)


def test_the_version_of_a_plain_https_engine_names_its_url():
    assert OPAEngine("https://opa.example:8443/").version == "opa:https://opa.example:8443"
