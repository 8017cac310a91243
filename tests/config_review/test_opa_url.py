"""``policy.opa_url`` (engine: opa) is checked at load, and the message names every form the
client speaks: http://, https:// and unix:///absolute/path (the client's own message left https out)."""

from __future__ import annotations

import pytest

from gateway.config import ConfigError, load_config

FORMS = "give http://host[:port][/prefix], https://host[:port][/prefix] or unix:///absolute/path.sock"


def _opa(url: str):
    return lambda raw: raw["policy"].update({"engine": "opa", "opa_url": url})


@pytest.mark.parametrize("url,why", [
    ("ftp://opa:8181", "scheme 'ftp' is not one of http://, https:// and unix://"),
    ("127.0.0.1:8181", "is not one of http://, https:// and unix://"),
    ("unix://opa.sock", "a Unix socket URL is unix:///absolute/path"),
    ("https://", "an https:// URL needs a host"),
    ("https://opa:port", "its port is not a number from 0 to 65535"),
    ("http://opa.example:S3CRET", "its port is not a number from 0 to 65535"),  # the text is not echoed
    ("http://user:pw@opa:8181", "must not carry credentials, a query or a fragment"),
])
def test_an_opa_url_the_client_cannot_use_does_not_load(demo_with, url, why):
    path = demo_with(_opa(url))
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value).startswith(f"{path}: policy.opa_url: "), err.value
    assert why in str(err.value) and str(err.value).endswith(FORMS), err.value
    assert "pw@" not in str(err.value) and "S3CRET" not in str(err.value)


@pytest.mark.parametrize("url", ["http://127.0.0.1:8181", "http://opa:8181/prefix", "https://opa.internal:8443",
                                 "https://opa.internal/v1", "unix:///run/opa/opa.sock"])
def test_every_form_the_client_speaks_loads(demo_with, url):
    assert load_config(demo_with(_opa(url))).policy.opa_url == url


def test_the_url_is_not_checked_for_the_embedded_engine(demo_with):
    """It is not used then; a config that loaded before still does."""
    load_config(demo_with(lambda raw: raw["policy"].update({"opa_url": "ftp://unused"})))
