"""Special files inside the workspace are refused at once, and the lane stays usable."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import anyio
import pytest

from conftest import connect, text_of

pytestmark = pytest.mark.anyio


def make_specials(ws: Path) -> list[str]:
    os.mkfifo(ws / "pipe.fifo")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(ws / "server.sock"))
    names = ["pipe.fifo", "server.sock"]
    # A /dev/zero-like device needs CAP_MKNOD (root, as in CI).
    try:
        os.mknod(ws / "zero.dev", 0o644 | stat.S_IFCHR, os.makedev(1, 5))
        names.append("zero.dev")
    except PermissionError:
        print("not root: no character device made; FIFO and socket still tested")
    return names


@pytest.mark.parametrize("inline", [False, True])
async def test_special_files_are_refused_and_the_lane_stays_usable(workspace, state_dir, inline):
    names = make_specials(workspace)
    extra = ["--inline"] if inline else []
    async with connect("stdio", "legacy", workspace, state_dir, extra) as client:
        with anyio.fail_after(60):
            # Twice each: two stuck FIFO opens used to take both runner threads for good.
            for name in names + names:
                r = await client.call_tool("read_file", {"path": name})
                assert r.is_error, text_of(r)
                assert "not a regular file" in text_of(r), text_of(r)
            for name in names:
                r = await client.call_tool("write_file", {"path": name, "content": "x"})
                assert r.is_error, text_of(r)
            g = await client.call_tool("grep", {"pattern": "hello"})
            assert not g.is_error, text_of(g)
            assert "hello.txt" in text_of(g)
            ok = await client.call_tool("read_file", {"path": "hello.txt"})
            assert not ok.is_error and "1|hello" in text_of(ok)
