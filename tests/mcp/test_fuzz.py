"""Every input gets an answer: raw JSON-RPC lines and every tool's arguments, fuzzed, through the
real binary over stdio. The server never dies, never panics, and answers each request."""

from __future__ import annotations

import json
import os
import random
import select
import subprocess
import time
from pathlib import Path

from conftest import server_env, toolyard_bin

# Long enough for the slowest tool to hit its own time limit on a fuzzed input? No: fuzzed
# arguments are refused or finish fast; this only bounds a hang.
ANSWER_WITHIN_S = 60


class RawServer:
    """`toolyard serve --inline` (or, with `inline=False`, with its runner lanes) spoken to in raw lines."""

    def __init__(self, workspace: Path, state_dir: Path, extra: list[str] | None = None, inline: bool = True):
        self.proc = subprocess.Popen(
            [toolyard_bin(), "serve", *(["--inline"] if inline else []), "--workspace", str(workspace),
             *(extra or [])],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=server_env(state_dir),
        )
        self.buf = b""

    def send_raw(self, line: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + b"\n")
        self.proc.stdin.flush()

    def send(self, msg: dict) -> None:
        self.send_raw(json.dumps(msg).encode())

    def read_line(self, deadline: float) -> bytes:
        """The next line the server writes, as bytes."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            assert left > 0, "no answer in time"
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 1 << 20)
                assert chunk, f"server closed stdout; stderr: {self.stderr_tail()}"
                self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line

    def read_message(self, deadline: float) -> dict:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            assert left > 0, "no answer in time"
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 1 << 20)
                assert chunk, f"server closed stdout; stderr: {self.stderr_tail()}"
                self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def wait_for(self, ids: set, deadline: float) -> dict:
        """Read until every id in `ids` (and, for id None, one null-id error per entry) is answered."""
        got: dict = {}
        pending_null = sum(1 for i in ids if isinstance(i, tuple))
        want = {i for i in ids if not isinstance(i, tuple)}
        while want or pending_null > 0:
            msg = self.read_message(deadline)
            if "method" in msg:
                continue  # a notification
            if msg.get("id") is None:
                pending_null -= 1
                continue
            got[msg["id"]] = msg
            want.discard(msg["id"])
        return got

    def stderr_tail(self) -> str:
        self.proc.kill()
        assert self.proc.stderr is not None
        return self.proc.stderr.read().decode(errors="replace")[-2000:]

    def close(self) -> str:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        assert self.proc.stderr is not None
        return self.proc.stderr.read().decode(errors="replace")

    def initialize(self) -> list[dict]:
        self.send({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "fuzz", "version": "1"}}})
        self.wait_for({"init"}, time.monotonic() + ANSWER_WITHIN_S)
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        self.send({"jsonrpc": "2.0", "id": "list", "method": "tools/list"})
        return self.wait_for({"list"}, time.monotonic() + ANSWER_WITHIN_S)["list"]["result"]["tools"]


def nasty_values(rng: random.Random) -> list:
    deep: object = "x"
    for _ in range(rng.randint(20, 60)):
        deep = [deep]
    return [
        None, True, -1, 0, 2**63, -(2**63), 1e308, "", "\x00", "a\x00b", "\ud800", "../../etc/passwd",
        "/proc/self/environ", "x" * rng.randint(10_000, 200_000), [], [1, "a"], {}, {"k": "v"}, deep,
        "*" * 5000, "(" * 3000, "{" * 500, "\n" * 1000, "é" * 1000,
    ]


def fuzz_args(schema: dict, rng: random.Random) -> dict:
    props = list((schema.get("properties") or {}).keys())
    args: dict = {}
    for name in rng.sample(props, k=rng.randint(0, len(props))) if props else []:
        args[name] = rng.choice(nasty_values(rng))
    if rng.random() < 0.2:
        args["no_such_argument"] = 1
    return args


RAW_LINES = [
    b"garbage",
    b"{",
    b"[]",
    b"null",
    b'{"jsonrpc":"2.0"}',
    b'{"jsonrpc":"2.0","id":null,"method":"ping"}',
    b"\xff\xfe\x00",
    b'{"jsonrpc":"2.0","id":"s1","method":"tools/call","params":{"name":"read_file","arguments":{"path":"\\ud800"}}}',
    b'{"jsonrpc":"2.0","id":"s2","method":"tools/call","params":{"name":"read_file","arguments":{"path":"\\udc00\\ud800"}}}',
    b'{"jsonrpc":"2.0","id":"d1","method":"tools/call","params":{"name":"grep","arguments":{"pattern":' + b"[" * 300 + b"]" * 300 + b"}}}",
    b'{"jsonrpc":"2.0","id":"u1","method":"no/such/method","params":{}}',
    b'{"jsonrpc":"2.0","id":"p1","method":"tools/call","params":"not an object"}',
]


def test_raw_lines_are_all_answered_and_the_server_lives(workspace: Path, state_dir: Path):
    server = RawServer(workspace, state_dir)
    server.initialize()
    for line in RAW_LINES:
        server.send_raw(line)
    # Ids that must come back by id; the garbage lines come back with id null (at least 3 of them).
    ids = {"s1", "s2", "d1", "u1", "p1", ("null", 1), ("null", 2), ("null", 3)}
    server.wait_for(ids, time.monotonic() + ANSWER_WITHIN_S)
    server.send({"jsonrpc": "2.0", "id": "alive", "method": "ping"})
    assert server.wait_for({"alive"}, time.monotonic() + ANSWER_WITHIN_S)["alive"]["result"] == {}
    stderr = server.close()
    assert "panicked" not in stderr


def test_fuzzed_arguments_of_every_tool_are_answered(workspace: Path, state_dir: Path):
    rng = random.Random(int(os.environ.get("TOOLYARD_FUZZ_SEED", "20261124")))
    server = RawServer(workspace, state_dir)
    tools = server.initialize()
    assert tools, "no tools listed"
    # Commands would run fuzzed strings for real: keep them to harmless shapes.
    risky = {"run_command", "run_command_isolated", "build", "test", "validate", "web_fetch", "web_search", "oracle"}
    sent = 0
    for round_ in range(3):
        ids = set()
        for tool in tools:
            args = fuzz_args(tool["inputSchema"], rng)
            if tool["name"] in risky:
                for key in ("command", "url", "query", "question"):
                    if isinstance(args.get(key), str):
                        args[key] = "true" if key == "command" else "not a url"
            call_id = f"{tool['name']}-{round_}"
            server.send({"jsonrpc": "2.0", "id": call_id, "method": "tools/call",
                         "params": {"name": tool["name"], "arguments": args}})
            ids.add(call_id)
            sent += 1
        got = server.wait_for(ids, time.monotonic() + ANSWER_WITHIN_S)
        for call_id, msg in got.items():
            # A tool's failure is a result with isError, never a crash of the server.
            assert "result" in msg or msg["error"]["code"] in (-32602, -32600, -32603), (call_id, msg)
    server.send({"jsonrpc": "2.0", "id": "alive", "method": "ping"})
    server.wait_for({"alive"}, time.monotonic() + ANSWER_WITHIN_S)
    stderr = server.close()
    assert "panicked" not in stderr, stderr
    assert sent >= 3 * len(tools)


# Ids a client may send that rmcp holds only as i64 or a string: each must come back as sent.
ODD_IDS = [
    b"18446744073709551616",  # 2^64
    b"18446744073709551615",
    b"9223372036854775808",
    b"-9223372036854775809",
    b"123456789012345678901234567890",
    b"1.5",
    b"1.0",
    b"1e3",
    b"1e400",
    b"-0",
]


def test_huge_and_odd_ids_are_answered_with_the_id_as_sent(workspace: Path, state_dir: Path):
    """A request whose id is 2^64, a fraction or an exponent gets its proper answer (a ping's
    empty result, a read's text), with the id written back byte for byte; a null or boolean id
    gets an Invalid Request error with a null id. Through the real binary, with its lanes."""
    server = RawServer(workspace, state_dir, inline=False)
    server.initialize()
    deadline = time.monotonic() + ANSWER_WITHIN_S
    for raw in ODD_IDS:
        for method, params in [
            ("ping", None),
            ("tools/list", None),
            ("tools/call", {"name": "read_file", "arguments": {"path": "hello.txt"}}),
            ("tools/call", {"name": "run_command", "arguments": {"command": "echo ran"},
                            "_meta": {"progressToken": 18446744073709551617}}),
        ]:
            body = b'{"jsonrpc":"2.0","id":' + raw + b',"method":"' + method.encode() + b'"'
            if params is not None:
                body += b',"params":' + json.dumps(params).encode()
            server.send_raw(body + b"}")
            while True:
                line = server.read_line(deadline)
                if b'"method":"notifications/' in line:
                    continue
                break
            assert b'"id":' + raw + b"," in line or line.endswith(b'"id":' + raw + b"}"), (raw, method, line)
            reply = json.loads(line)
            assert "error" not in reply, (raw, method, line)
            if method == "ping":
                assert reply["result"] == {}
            elif method == "tools/list":
                assert any(t["name"] == "read_file" for t in reply["result"]["tools"])
            elif "read_file" in body.decode():
                assert "hello" in reply["result"]["content"][0]["text"], reply
            else:
                assert "ran" in reply["result"]["content"][0]["text"], reply
    for raw in [b"null", b"true"]:
        server.send_raw(b'{"jsonrpc":"2.0","id":' + raw + b',"method":"ping"}')
        reply = json.loads(server.read_line(deadline))
        assert reply["id"] is None and reply["error"]["code"] == -32600, (raw, reply)
    server.send({"jsonrpc": "2.0", "id": "alive", "method": "ping"})
    assert server.wait_for({"alive"}, time.monotonic() + ANSWER_WITHIN_S)["alive"]["result"] == {}
    stderr = server.close()
    assert "panicked" not in stderr
