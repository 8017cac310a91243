"""A configuration error never repeats a secret from the config it refuses.

``toolgate serve`` prints start-up errors to stderr (the container's log): a typo next to a
static secret must name the field, not echo the value.
"""

from __future__ import annotations

import traceback

import pytest

from gateway.credentials import CredentialConfigError, SecretResolver, parse_secrets_config

SECRET = "ghp_s3cretvalue42"


@pytest.mark.parametrize(
    "provider",
    [
        {"kind": "static", "values": {"acme": {"github_token": SECRET}}, "vaules": {}},  # a typo beside it
        {"kind": "static", "values": {"acme": {"github_token": SECRET, "n": 5}}},  # one bad value
        {"kind": "statik", "values": {"acme": {"github_token": SECRET}}},  # an unknown kind
    ],
    ids=["unknown_field", "bad_sibling_value", "unknown_kind"],
)
def test_an_invalid_secrets_section_names_the_field_not_the_secret(provider):
    with pytest.raises(CredentialConfigError) as info:
        parse_secrets_config({"providers": [provider]})
    assert SECRET not in "".join(traceback.format_exception(info.value))  # chained causes included
    assert "providers.0" in str(info.value)


def test_the_resolver_refuses_the_same_section_without_the_secret(tmp_path):
    with pytest.raises(CredentialConfigError) as info:
        SecretResolver.from_config({"providers": [{"kind": "static", "values": {"t": {"k": SECRET}}, "x": 1}]}, tmp_path)
    assert SECRET not in str(info.value)
