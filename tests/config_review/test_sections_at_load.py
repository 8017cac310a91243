"""The ``approvals``, ``observability`` and ``secrets`` sections are validated when the config
loads, so their errors name the file and the field (``config_invalid``), as the typed sections'
do, instead of surfacing when the gateway is built (``cannot_start``, no file). A ``file``
secret provider's folder must exist; the provider kinds are told apart by ``kind``.
"""

from __future__ import annotations

import subprocess
import sys
import traceback

import pytest

from gateway.config import ConfigError, load_config
from tests.conftest import ROOT


@pytest.mark.parametrize("change,expected", [
    (lambda raw: raw["approvals"].__setitem__("grant_ttl_seconds", 1),
     "approvals.grant_ttl_seconds: Input should be greater than or equal to 5"),
    (lambda raw: raw["approvals"].__setitem__("watch_queue_sise", 64),
     "approvals.watch_queue_sise: Extra inputs are not permitted"),
    (lambda raw: raw["approvals"]["approvers"][0]["keys"][0].__setitem__("public_key_pem", "x"),
     "approvals.approvers.0.keys.0: Value error, give exactly one of public_key (base64) or public_key_pem"),
    (lambda raw: raw.__setitem__("observability", {"metrics_port": 70000}),
     "observability.metrics_port: Input should be less than or equal to 65535"),
    (lambda raw: raw.__setitem__("observability", {"tracing": {"exporter": "otlp"}}),
     "observability.tracing.exporter: Input should be 'none' or 'console'"),
    (lambda raw: raw["secrets"]["providers"][0].__setitem__("prefx", "X_"),
     "secrets.providers.0.env.prefx: Extra inputs are not permitted"),
], ids=["approvals_bound", "approvals_typo", "approver_key", "metrics_port", "tracing", "secrets_typo"])
def test_a_bad_section_does_not_load_and_names_file_and_field(demo_with, change, expected):
    path = demo_with(change)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value) == f"{path}: {expected}"


def test_serve_says_config_invalid_with_the_file_for_a_bad_approvals_section(demo_with):
    path = demo_with(lambda raw: raw["approvals"].__setitem__("clock_skew_seconds", 3600))
    out = subprocess.run([sys.executable, "-m", "gateway.cli", "serve", "--config", str(path), "--port", "0"],
                         capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 2, out.stderr
    assert "config_invalid" in out.stderr and f"{path}: approvals.clock_skew_seconds" in out.stderr


def _file_provider(folder: str):
    return lambda raw: raw["secrets"]["providers"].append({"kind": "file", "dir": folder})


def test_a_file_provider_whose_folder_is_missing_does_not_load(demo_with):
    path = demo_with(_file_provider("/nonexistent/secrets"))
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value) == (f"{path}: secrets.providers.2.dir: the file secret provider's dir "
                              "/nonexistent/secrets: no such folder")


def test_a_file_provider_dir_that_is_a_file_does_not_load(demo_with, tmp_path):
    (tmp_path / "secrets").write_text("not a folder")
    with pytest.raises(ConfigError, match=r"secrets\.providers\.2\.dir: .*secrets: is not a folder"):
        load_config(demo_with(_file_provider(str(tmp_path / "secrets"))))


def test_a_file_provider_dir_is_relative_to_the_config_file(demo_with, tmp_path):
    (tmp_path / "mounted" / "acme").mkdir(parents=True)
    (tmp_path / "mounted" / "acme" / "github_token").write_text("from-a-file\n")
    config = load_config(demo_with(_file_provider("mounted")))
    from gateway.credentials import SecretKey, SecretResolver

    resolver = SecretResolver.from_config({"providers": config.secrets["providers"][2:]}, config.base_dir)
    assert resolver.lookup(SecretKey("acme", "github_token")) == "from-a-file"


def test_a_misspelt_provider_kind_is_one_error_not_one_per_kind(demo_with):
    path = demo_with(lambda raw: raw["secrets"]["providers"][1].__setitem__("kind", "statik"))
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value) == (f"{path}: secrets.providers.1: Input tag 'statik' found using 'kind' does not match "
                              "any of the expected tags: 'static', 'env', 'file'")
    assert "demo-acme-github-token-not-real" not in "".join(traceback.format_exception(err.value))
