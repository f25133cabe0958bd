"""Cancellation of calls the stdio front door answers itself (a read of a file): a
`notifications/cancelled` naming one stops its work, and it gets no response (MCP: the receiver
of a cancellation does not answer the request), while the server answers everything else. The
same calls through rmcp (a server with hooks, where nothing is answered by the front door) are
the reference.

The slow call is a read of a sparse 1 TiB text file, which read_file reads whole (for its hash):
far longer than any test waits. If its work did not stop, the front thread inside it would keep
the server from exiting once stdin closes."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from test_front_door import THROUGH_RMCP, call, initialize
from test_fuzz import ANSWER_WITHIN_S, RawServer

# What the server logs when every front thread has been inside a call for a while and another one
# takes over reading: here, the proof that the front door (not rmcp) was answering the read.
TAKE_OVER = "another one reads on"


def huge_sparse_text(path: Path) -> None:
    """Text lines, then a hole up to 1 TiB (or as much as the file system allows)."""
    with open(path, "wb") as f:
        f.write(b"".join(b"line %d\n" % i for i in range(2000)))
        for size in (1 << 40, 1 << 36):
            try:
                f.truncate(size)
                return
            except OSError:
                continue
    raise AssertionError(f"the file system of {path} holds no sparse file of 64 GiB")


@pytest.mark.parametrize("door", ["front", "rmcp"])
def test_a_cancelled_read_stops_and_gets_no_answer(tmp_path: Path, door: str):
    ws, state = tmp_path / "ws", tmp_path / "state"
    ws.mkdir()
    state.mkdir()
    (ws / "hello.txt").write_text("hello\nworld\n")
    huge_sparse_text(ws / "huge.txt")
    extra = []
    if door == "rmcp":
        (tmp_path / "catalog.toml").write_text(THROUGH_RMCP)
        extra = ["--catalog", str(tmp_path / "catalog.toml")]
    server = RawServer(ws, state, extra=extra)
    initialize(server)
    server.send(call("slow", "read_file", {"path": "huge.txt", "limit": 1}))
    # Alone when read, so the front thread answers it itself; the cancellation comes mid-call.
    time.sleep(0.3)
    server.send({"jsonrpc": "2.0", "method": "notifications/cancelled",
                 "params": {"requestId": "slow", "reason": "the user pressed Esc"}})
    # A cancellation of a request nobody holds any more is harmless.
    server.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "list"}})
    server.send(call("after", "read_file", {"path": "hello.txt"}))
    got = server.wait_for({"after"}, time.monotonic() + ANSWER_WITHIN_S)
    assert "hello" in got["after"]["result"]["content"][0]["text"], got
    server.send({"jsonrpc": "2.0", "id": "ping", "method": "ping"})
    got.update(server.wait_for({"ping"}, time.monotonic() + ANSWER_WITHIN_S))
    assert got["ping"]["result"] == {}
    # Once stdin closes the server exits, which it cannot while a call's work goes on.
    assert server.proc.stdin is not None and server.proc.stdout is not None
    server.proc.stdin.close()
    try:
        code = server.proc.wait(timeout=ANSWER_WITHIN_S)
    except subprocess.TimeoutExpired:
        server.proc.kill()
        raise AssertionError("the server did not exit: the cancelled read goes on") from None
    assert code == 0
    rest = server.buf + server.proc.stdout.read()
    stderr = server.proc.stderr.read().decode(errors="replace") if server.proc.stderr else ""
    answers = list(got.values()) + [json.loads(line) for line in rest.splitlines() if line.strip()]
    assert all(a.get("id") != "slow" for a in answers), answers
    if door == "front":
        assert TAKE_OVER in stderr, stderr[-2000:]
    else:
        assert TAKE_OVER not in stderr, stderr[-2000:]
