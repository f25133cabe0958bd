"""The codex dialect's unified exec end to end over MCP (stdio, both protocol eras), through the
real binary and its lanes: exec_command returns a quick command's exit code and output, a long
one yields a session id, and write_stdin (routed to the lane by its session_id) polls it to its
end and talks to a tty REPL."""

from __future__ import annotations

import re

import pytest
from conftest import MODES, cli_tool_names, connect, text_of

pytestmark = pytest.mark.anyio

ARGS = ["--dialect", "codex"]


async def call(client, tool: str, args: dict):
    r = await client.call_tool(tool, args)
    return r, text_of(r)


def session_of(out: str) -> str:
    m = re.search(r"Process running with session ID (\S+)", out)
    assert m, out
    return m.group(1)


@pytest.mark.parametrize("mode", MODES)
async def test_exec_command_and_write_stdin(mode, workspace, state_dir):
    assert {"exec_command", "write_stdin"} <= set(cli_tool_names("codex"))
    async with connect("stdio", mode, workspace, state_dir, ARGS) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert tools["exec_command"].input_schema["required"] == ["cmd"]
        assert tools["write_stdin"].input_schema["required"] == ["session_id"]

        r, out = await call(client, "exec_command", {"cmd": "cat hello.txt; exit 2"})
        assert not r.is_error and out.startswith("Wall time: "), out
        assert "Process exited with code 2" in out and "hello\nworld\n" in out, out

        r, out = await call(client, "exec_command", {"cmd": "echo alpha; sleep 2; echo omega", "yield_time_ms": 250})
        assert not r.is_error and "alpha" in out and "omega" not in out, out
        sid = session_of(out)
        r, out = await call(client, "write_stdin", {"session_id": sid})
        assert not r.is_error and "Process exited with code 0" in out and "omega" in out, out

        r, out = await call(client, "exec_command", {"cmd": "python3 -i -q", "tty": True, "yield_time_ms": 1000})
        assert not r.is_error, out
        sid = session_of(out)
        r, out = await call(client, "write_stdin", {"session_id": sid, "chars": "print(6*7)\n", "yield_time_ms": 1500})
        assert not r.is_error and "42" in out and f"session ID {sid}" in out, out
        r, out = await call(client, "write_stdin", {"session_id": sid, "chars": "exit()\n", "yield_time_ms": 3000})
        assert not r.is_error and "Process exited with code 0" in out, out
