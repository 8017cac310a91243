"""The demo's file tools (``gateway.builtin_tools``) on a real workspace folder."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest

from gateway import builtin_tools
from gateway.executors.python import ToolFailure


@pytest.fixture
def ctx(make_tool, make_request, tmp_path: Path):
    tool = make_tool("read_file", executor={"kind": "python", "callable": "gateway.builtin_tools:read_file"})
    request = make_request(tool)  # its sandbox is <tmp>/sandbox/read_file: the data dir is tmp_path
    (tmp_path / "workspace").mkdir()
    return request


def test_a_large_file_is_read_only_as_far_as_returned(ctx, tmp_path: Path) -> None:
    big = tmp_path / "workspace" / "big.bin"
    with open(big, "wb") as f:
        f.write(b"a" * 10)
        f.truncate(64 * 1024 * 1024)  # sparse: 64 MiB the tool must not read into memory
    tracemalloc.start()
    try:
        out = builtin_tools.read_file({"path": "big.bin"}, ctx)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert out["bytes"] == 64 * 1024 * 1024 and len(out["content"]) == builtin_tools.MAX_READ
    assert out["content"].startswith("a" * 10)
    assert peak < 8 * builtin_tools.MAX_READ, f"peak {peak} bytes for a {builtin_tools.MAX_READ}-byte read"


def test_a_listing_is_the_first_names_in_order(ctx, tmp_path: Path) -> None:
    folder = tmp_path / "workspace" / "many"
    folder.mkdir()
    for i in range(builtin_tools.MAX_ENTRIES + 50):
        (folder / f"f{i:05d}").touch()
    (folder / "a-dir").mkdir()
    out = builtin_tools.list_dir({"path": "many"}, ctx)
    assert out["entries"][:2] == ["a-dir/", "f00000"]
    assert len(out["entries"]) == builtin_tools.MAX_ENTRIES and out["entries"] == sorted(out["entries"])


def test_a_path_outside_the_workspace_is_refused(ctx, tmp_path: Path) -> None:
    (tmp_path / "secret.txt").write_text("s")
    (tmp_path / "workspace" / "link").symlink_to(tmp_path / "secret.txt")
    for path in ("../secret.txt", str(tmp_path / "secret.txt"), "link"):
        with pytest.raises(ToolFailure) as err:
            builtin_tools.read_file({"path": path}, ctx)
        assert err.value.type == "path_outside_workspace"
