"""``toolgate keys new``: make an approver's Ed25519 signing key and print its keyring entry;
``toolgate keys grant``: make a gateway grant signing key (one file for every replica);
``toolgate keys audit``: make an audit checkpoint signing key and its ``.pub``."""

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
from gateway.audit_sign import public_path, write_public_key
from gateway.cli._errors import fail

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,127}\Z")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("keys", help="manage approver, grant and audit signing keys",
                       description="Approver, grant and audit checkpoint signing keys (Ed25519).")
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
    g = verbs.add_parser(
        "grant", help="create a grant signing key for the gateway",
        description="Write a new Ed25519 private key (PEM, mode 0600) for the gateway to sign grants with. "
        "A single gateway makes its own when approvals.grant_keys names a missing file; replicas sharing a "
        "PostgreSQL store must all list one such file first in approvals.grant_keys, and do not make one.",
    )
    g.add_argument("--out", required=True, metavar="FILE", help="the key file to create (never overwritten)")
    g.set_defaults(func=run_grant)
    a = verbs.add_parser(
        "audit", help="create an audit checkpoint signing key",
        description="Write a new Ed25519 private key (PEM, mode 0600) for the gateway to sign audit log "
        "checkpoints with (audit.signing_key), and its public half to FILE.pub, which 'toolgate audit verify "
        "--public-key' takes. A gateway makes its own when audit.signing_key names a missing file; make one "
        "here to keep the .pub off the gateway's host from the start.",
    )
    a.add_argument("--out", required=True, metavar="FILE", help="the key file to create (never overwritten)")
    a.set_defaults(func=run_audit)
    p.set_defaults(func=lambda ns: (p.print_help(), 2)[1])


def run_grant(ns: argparse.Namespace) -> int:
    path = Path(ns.out)
    problem = _write(path, Ed25519PrivateKey.generate(), None, None)
    if problem is not None:
        return problem
    print(f"# grant key written to {path} (keep it secret: whoever reads it can sign grants)", file=sys.stderr)
    print(f"# list it first in approvals.grant_keys on every replica (a relative entry is taken from the data "
          f"dir): grant_keys: [{path.resolve()}]", file=sys.stderr)
    return 0


def run_audit(ns: argparse.Namespace) -> int:
    path = Path(ns.out)
    public = public_path(path)
    if public.exists():  # checked first: no private key is left without its public half
        return fail("key_file_exists", f"{public} exists; not overwriting it (move it away, or name another file)")
    key = Ed25519PrivateKey.generate()
    problem = _write(path, key, None, None)
    if problem is not None:
        return problem
    try:
        write_public_key(public, key.public_key())
    except OSError as exc:
        return fail("key_dir_unwritable", f"cannot write {public}: {exc.strerror or type(exc).__name__}")
    print(f"# audit signing key written to {path} (keep it secret: whoever reads it can sign a rewritten log)",
          file=sys.stderr)
    print(f"# its public half: {public} (copy it off the gateway's host; 'toolgate audit verify --public-key "
          f"{public.name} ...' checks the log with it)", file=sys.stderr)
    print(f"# in the gateway config (a relative path is taken from the data dir): audit: {{signing_key: {path.resolve()}}}",
          file=sys.stderr)
    return 0


def _write(path: Path, key: Ed25519PrivateKey, passphrase: bytes | None, labels: dict[str, str] | None) -> int | None:
    """Create the key file; None when written, else the CLI's exit status after saying why."""
    if path.parent.exists() and not path.parent.is_dir():
        return fail("key_dir_unwritable", f"{path.parent} is a file, not a folder")
    try:
        write_private_key(path, key, passphrase, labels)
    except FileExistsError:
        return fail("key_file_exists", f"{path} exists; not overwriting it (move it away, or name another file)")
    except OSError as exc:  # a folder that cannot be made or written
        return fail("key_dir_unwritable", f"cannot write {path}: {exc.strerror or type(exc).__name__} "
                    "(name a file in a folder you can write)")
    return None


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
    problem = _write(path, key, passphrase, {"approver": ns.approver, "kid": kid})
    if problem is not None:
        return problem
    entry = {"id": ns.approver, "groups": ["CHANGE-ME"],
             "keys": [{"kid": kid, "public_key": raw_public_b64(key.public_key())}]}
    print(f"# private key written to {path} (keep it secret)", file=sys.stderr)
    print("# add under approvals.approvers (set the groups), or append the key to an existing approver:")
    print(yaml.safe_dump([entry], sort_keys=False), end="")
    return 0
