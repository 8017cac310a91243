"""Regenerate the Python stubs for proto/toolgate/v1/gateway.proto.

    python proto/generate.py            # write gateway/_proto/
    python proto/generate.py --check    # exit 1 if the committed stubs differ

The stubs (with .pyi) are committed. Imports in the generated files are rewritten so the
package lives at ``gateway._proto`` rather than a top-level ``toolgate`` package.
"""

from __future__ import annotations

import argparse
import filecmp
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO = "toolgate/v1/gateway.proto"
OUT = ROOT / "gateway" / "_proto"
GENERATED = ("gateway_pb2.py", "gateway_pb2.pyi", "gateway_pb2_grpc.py")


def generate(out: Path) -> None:
    from grpc_tools import protoc  # pinned in the dev extra
    import grpc_tools

    include = str(Path(grpc_tools.__file__).parent / "_proto")
    args = [
        "protoc",
        f"-I{ROOT / 'proto'}",
        f"-I{include}",
        f"--python_out={out}",
        f"--pyi_out={out}",
        f"--grpc_python_out={out}",
        str(ROOT / "proto" / PROTO),
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    target = out / "toolgate" / "v1"
    for name in GENERATED:
        path = target / name
        text = path.read_text()
        text = text.replace("from toolgate.v1 import", "from gateway._proto.toolgate.v1 import")
        path.write_text(text)
    for pkg in (out / "toolgate", target):
        (pkg / "__init__.py").write_text("")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="compare with the committed stubs")
    ns = parser.parse_args()
    if not ns.check:
        generate(OUT)
        print(f"wrote {OUT.relative_to(ROOT)}")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        generate(Path(tmp))
        differ = [
            name
            for name in GENERATED
            if not (OUT / "toolgate/v1" / name).exists()
            or not filecmp.cmp(Path(tmp) / "toolgate/v1" / name, OUT / "toolgate/v1" / name, shallow=False)
        ]
    if differ:
        print("stubs out of date, run: python proto/generate.py:", ", ".join(differ))
        return 1
    print("stubs up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
