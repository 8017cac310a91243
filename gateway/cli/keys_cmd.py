"""``toolgate keys new``: make an approver's Ed25519 signing key and print its keyring entry."""

from __future__ import annotations

import argparse
import os
import re
import sys
from datetime import datetime, timezone
from pathlib import Path

import yaml
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from gateway.approvals.keyring import key_thumbprint, raw_public_b64, write_private_key
from gateway.cli._errors import fail

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,127}\Z")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("keys", help="manage approver signing keys",
                       description="Approver signing keys (Ed25519).")
    verbs = p.add_subparsers(dest="keys_verb", metavar="VERB")
    n = verbs.add_parser(
        "new", help="create an approver key",
        description="Write a new Ed25519 private key (PEM, mode 0600) to DIR/ID-KID.pem and print the "
        "keyring entry to paste under approvals.approvers in the gateway config.",
    )
    n.add_argument("--approver", required=True, help="the approver id (the iss of their approvals)")
    n.add_argument("--out", default=".", help="folder for the private key (default: .)")
    n.add_argument("--passphrase-env", default="", metavar="VAR",
                   help="encrypt the key with the passphrase in this environment variable")
    n.set_defaults(func=run_new)
    p.set_defaults(func=lambda ns: (p.print_help(), 2)[1])


def run_new(ns: argparse.Namespace) -> int:
    if not _ID.match(ns.approver):
        return fail("invalid_approver_id", "--approver must be 1-128 of A-Z a-z 0-9 _ . @ -")
    passphrase = None
    if ns.passphrase_env:
        value = os.environ.get(ns.passphrase_env, "")
        if not value:
            return fail("passphrase_env_unset", f"environment variable {ns.passphrase_env} (--passphrase-env) is "
                        "empty or unset: export the passphrase in it, or drop --passphrase-env")
        passphrase = value.encode()
    key = Ed25519PrivateKey.generate()
    kid = f"{ns.approver}-{datetime.now(timezone.utc):%Y%m%d}-{key_thumbprint(key.public_key())[:8]}"
    path = Path(ns.out) / f"{kid}.pem"
    if Path(ns.out).exists() and not Path(ns.out).is_dir():
        return fail("key_dir_unwritable", f"--out {ns.out} is a file, not a folder")
    try:
        write_private_key(path, key, passphrase, {"approver": ns.approver, "kid": kid})
    except FileExistsError:
        return fail("key_file_exists", f"{path} exists; not overwriting it (move it away, or pass another --out)")
    except OSError as exc:  # --out is a file, or a folder that cannot be made or written
        return fail("key_dir_unwritable", f"cannot write {path}: {exc.strerror or type(exc).__name__} "
                    "(give --out a folder you can write)")
    entry = {"id": ns.approver, "groups": ["CHANGE-ME"],
             "keys": [{"kid": kid, "public_key": raw_public_b64(key.public_key())}]}
    print(f"# private key written to {path} (keep it secret)", file=sys.stderr)
    print("# add under approvals.approvers (set the groups), or append the key to an existing approver:")
    print(yaml.safe_dump([entry], sort_keys=False), end="")
    return 0
