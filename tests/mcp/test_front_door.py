"""The stdio front door: the transport's own threads answer pings and the prompt file tools
(read_file, list_directory) without rmcp's tasks; everything else goes through rmcp. These tests
start the real binary and check, from the client's side, that the two paths give the same
answers, that a burst of pipelined calls of every kind gets exactly one answer each, and that a
client handing over non-blocking pipes is served like any other."""

from __future__ import annotations

import json
import os
import re
import select
import subprocess
import time
from pathlib import Path

import pytest

from conftest import server_env, toolyard_bin
from test_fuzz import ANSWER_WITHIN_S, RawServer


def initialize(server: RawServer) -> None:
    server.send({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "front", "version": "1"}}})
    server.wait_for({"init"}, time.monotonic() + ANSWER_WITHIN_S)
    server.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    # A round trip through rmcp: `initialized` has been handled when tools/list is answered.
    server.send({"jsonrpc": "2.0", "id": "list", "method": "tools/list"})
    server.wait_for({"list"}, time.monotonic() + ANSWER_WITHIN_S)


def call(rid, tool: str, args: dict, meta: dict | None = None) -> dict:
    params: dict = {"name": tool, "arguments": args}
    if meta is not None:
        params["_meta"] = meta
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params}


# A hook that matches no tool: with hooks configured nothing is prompt, so that server answers
# every call through rmcp, the reference the front thread must match.
THROUGH_RMCP = '[[hooks.pre_tool]]\nmatcher = "^no_such_tool$"\ncommand = "true"\n'

INLINE_META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
               "io.modelcontextprotocol/clientCapabilities": {},
               "io.modelcontextprotocol/clientInfo": {"name": "front", "version": "1"}}

# How real clients call: the initialize era with no _meta (the MCP Python SDK), with a progress
# token on every call (Codex), and 2026-07-28 metadata on every request, no initialize (Claude
# Code 2.1).
ERAS = {
    "initialize": (True, None),
    "initialize+progress": (True, lambda k: {"progressToken": f"p{k}"}),
    "2026-07-28": (False, lambda k: dict(INLINE_META)),
}


def fill(ws: Path) -> None:
    (ws / "sub").mkdir()
    (ws / "sub" / "x.txt").write_text("x\n")
    (ws / "long.txt").write_text("".join(f"line {i}\n" for i in range(3000)))
    (ws / "e.txt").write_text("alpha\n")


@pytest.mark.parametrize("era", list(ERAS))
@pytest.mark.parametrize("lanes", [False, True], ids=["inline", "lanes"])
def test_the_front_thread_answers_what_rmcp_would(tmp_path: Path, era: str, lanes: bool):
    """The same calls, in the same order, to a server whose front thread answers them and to
    one where rmcp answers everything: the answers must be the same, success and failure."""
    handshake, meta = ERAS[era]
    servers = []
    for name, extra in [("front", []), ("rmcp", ["--catalog", str(tmp_path / "catalog.toml")])]:
        ws, state = tmp_path / name / "ws", tmp_path / name / "state"
        ws.mkdir(parents=True)
        state.mkdir()
        (ws / "hello.txt").write_text("hello\nworld\n")
        fill(ws)
        servers.append((ws, RawServer(ws, state, extra=extra, inline=not lanes)))
    (tmp_path / "catalog.toml").write_text(THROUGH_RMCP)
    cases = [
        ("read_file", {"path": "hello.txt"}),
        ("read_file", {"path": "long.txt", "offset": 2990}),
        ("read_file", {"path": "long.txt"}),
        ("read_file", {"path": "missing.txt"}),
        ("read_file", {"path": "../outside"}),
        ("read_file", {"path": "hello.txt", "no_such_argument": 1}),
        ("read_file", {"path": 7}),
        ("list_directory", {"path": "."}),
        ("list_directory", {"path": "sub"}),
        ("list_directory", {"path": "hello.txt"}),
        ("read_file", {"path": "e.txt"}),
        ("edit_file", {"path": "e.txt", "old_string": "alpha", "new_string": "beta"}),
        ("edit_file", {"path": "e.txt", "old_string": "alpha", "new_string": "beta"}),
        ("write_file", {"path": "new.txt", "content": "x\n"}),
        ("edit_file", {"path": "nope.txt", "old_string": "a", "new_string": "b"}),
    ]
    answers: list[list[str]] = []
    for ws, server in servers:
        if handshake:
            initialize(server)
        got = []
        for k, (tool, args) in enumerate(cases):
            server.send(call(f"c{k}", tool, args, meta(k) if meta else None))
            result = server.wait_for({f"c{k}"}, time.monotonic() + ANSWER_WITHIN_S)[f"c{k}"]
            assert "result" in result, result
            got.append(json.dumps(result["result"], sort_keys=True).replace(str(ws), "WS"))
        if handshake:
            server.send({"jsonrpc": "2.0", "id": "ping", "method": "ping"})
            got.append(json.dumps(server.wait_for({"ping"}, time.monotonic() + ANSWER_WITHIN_S)["ping"]))
        server.close()
        answers.append(got)
        assert (ws / "e.txt").read_text() == "beta\n" and (ws / "new.txt").read_text() == "x\n"
    for k, (front, via_rmcp) in enumerate(zip(*answers)):
        assert front == via_rmcp, (k, cases[k] if k < len(cases) else "ping")


def test_a_burst_of_pipelined_calls_gets_one_answer_each(workspace: Path, state_dir: Path):
    """Hundreds of lines written at once, every kind mixed (front-thread calls, rmcp calls, edits,
    garbage), then stdin closed: each request is answered exactly once, before the server exits."""
    for k in range(20):
        (workspace / f"e{k}.txt").write_text(f"value {k}\n")
    server = RawServer(workspace, state_dir)
    initialize(server)
    for k in range(20):  # edits need a read first
        server.send(call(f"pre{k}", "read_file", {"path": f"e{k}.txt"}))
    server.wait_for({f"pre{k}" for k in range(20)}, time.monotonic() + ANSWER_WITHIN_S)
    lines: list[bytes] = []
    expected: dict[str, str] = {}
    for k in range(400):
        kind = k % 8
        rid = f"b{k}"
        if kind in (0, 1, 2):
            lines.append(json.dumps(call(rid, "read_file", {"path": "hello.txt"})).encode())
            expected[rid] = "read"
        elif kind == 3:
            lines.append(json.dumps(call(rid, "list_directory", {"path": "."})).encode())
            expected[rid] = "list"
        elif kind == 4:
            lines.append(json.dumps({"jsonrpc": "2.0", "id": rid, "method": "ping"}).encode())
            expected[rid] = "ping"
        elif kind == 5 and k // 8 < 20:
            n = k // 8
            lines.append(json.dumps(call(rid, "edit_file", {
                "path": f"e{n}.txt", "old_string": f"value {n}", "new_string": f"edited {n}"})).encode())
            expected[rid] = "edit"
        elif kind == 6:
            lines.append(json.dumps(call(rid, "grep", {"pattern": "world"})).encode())
            expected[rid] = "grep"
        else:
            lines.append(b"not json at all")
            expected[rid] = "garbage"
    assert server.proc.stdin is not None
    server.proc.stdin.write(b"\n".join(lines) + b"\n")
    server.proc.stdin.close()
    # Read everything the server writes until it exits.
    assert server.proc.stdout is not None
    out = server.buf + server.proc.stdout.read()
    assert server.proc.wait(timeout=ANSWER_WITHIN_S) == 0
    answers = [json.loads(line) for line in out.splitlines() if line.strip()]
    by_id: dict[str, list[dict]] = {}
    nulls = 0
    for a in answers:
        if "method" in a:
            continue
        if a.get("id") is None:
            nulls += 1
            assert a["error"]["code"] == -32700
            continue
        by_id.setdefault(a["id"], []).append(a)
    want = {rid for rid, kind in expected.items() if kind != "garbage"}
    assert set(by_id) == want, f"missing {sorted(want - set(by_id))[:5]}, unexpected {sorted(set(by_id) - want)[:5]}"
    assert all(len(v) == 1 for v in by_id.values()), "a request answered twice"
    assert nulls == sum(1 for kind in expected.values() if kind == "garbage")
    for rid, kind in expected.items():
        if kind == "garbage":
            continue
        answer = by_id[rid][0]
        if kind == "ping":
            assert answer["result"] == {}
            continue
        result = answer["result"]
        assert not result.get("isError"), (rid, kind, result)
        text = result["content"][0]["text"]
        if kind == "read":
            assert "hello" in text and "world" in text
        elif kind == "list":
            assert "hello.txt" in text
    for n in range(20):
        assert (workspace / f"e{n}.txt").read_text() == f"edited {n}\n"


def test_non_blocking_pipes_are_served_like_any_other(workspace: Path, state_dir: Path):
    """A client may hand over its pipes in non-blocking mode (the flag is shared with the server's
    end). The server must wait for them rather than fail: here its replies fill the pipe while
    the client does not read yet."""
    (workspace / "big.txt").write_text("".join(f"{i:05} {'x' * 60}\n" for i in range(1000)))
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    os.set_blocking(in_r, False)
    os.set_blocking(out_w, False)
    proc = subprocess.Popen([toolyard_bin(), "serve", "--inline", "--workspace", str(workspace)],
                            stdin=in_r, stdout=out_w, stderr=subprocess.DEVNULL, env=server_env(state_dir))
    os.close(in_r)
    os.close(out_w)
    try:
        def send(msg: dict) -> None:
            os.write(in_w, json.dumps(msg).encode() + b"\n")

        buf = b""
        answers: dict = {}  # by id: calls in flight together may be answered in any order

        def until(rid: str) -> dict:
            nonlocal buf
            deadline = time.monotonic() + ANSWER_WITHIN_S
            while True:
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    msg = json.loads(line)
                    answers[msg.get("id")] = msg
                if rid in answers:
                    return answers.pop(rid)
                left = deadline - time.monotonic()
                assert left > 0, f"no answer to {rid}"
                if select.select([out_r], [], [], left)[0]:
                    chunk = os.read(out_r, 1 << 20)
                    assert chunk, "the server closed stdout"
                    buf += chunk

        send({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "nb", "version": "1"}}})
        until("init")
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        send({"jsonrpc": "2.0", "id": "list", "method": "tools/list"})
        until("list")
        # About 1.2 MB of answers (30 KB of text each, twice: content and structuredContent), far
        # more than a pipe holds, before the client reads any.
        for k in range(20):
            send(call(f"r{k}", "read_file", {"path": "big.txt"}))
        time.sleep(1.0)
        for k in range(20):
            answer = until(f"r{k}")
            text = answer["result"]["content"][0]["text"]
            assert text.startswith("     1|00000 ") and "continue with offset=" in text
        send({"jsonrpc": "2.0", "id": "ping", "method": "ping"})
        assert until("ping")["result"] == {}
    finally:
        os.close(in_w)
        assert proc.wait(timeout=ANSWER_WITHIN_S) == 0
        os.close(out_r)
