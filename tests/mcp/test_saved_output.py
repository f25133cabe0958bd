"""The full output of a cut command, read back through the real binary: the note's path (and
`output:<id>`) works with read_file and grep in the default dialect and with Claude Code's Read
and Grep, both lanes; Toolyard's other state stays out of reach."""

from __future__ import annotations

import re

import anyio
import pytest
from conftest import connect, text_of

pytestmark = pytest.mark.anyio

NOTE = re.compile(r"full output in (\S+\.log)")


def saved_path(text: str) -> str:
    m = NOTE.search(text)
    assert m, f"no 'full output in PATH' note in: {text[-500:]}"
    return m.group(1)


@pytest.mark.parametrize("tool", ["run_command", "run_command_isolated"])
async def test_a_long_commands_saved_output_is_read_and_searched(workspace, state_dir, tool):
    async with connect("stdio", "legacy", workspace, state_dir) as client:
        with anyio.fail_after(120):
            r = await client.call_tool(tool, {"command": "seq 1 100000"})
            path = saved_path(text_of(r))
            assert path.startswith(str(state_dir)), path
            r = await client.call_tool("read_file", {"path": path, "offset": 77777, "limit": 2})
            assert not r.is_error, text_of(r)
            assert text_of(r).startswith(" 77777|77777\n 77778|77778\n"), text_of(r)
            assert "has 100000 lines" in text_of(r), text_of(r)
            r = await client.call_tool("grep", {"pattern": "^9999[89]$", "path": path})
            assert text_of(r) == f"{path}:99998:99998\n{path}:99999:99999\n", text_of(r)
            call_id = path.rsplit("/", 1)[1].removesuffix(".log")
            r = await client.call_tool("read_file", {"path": f"output:{call_id}", "offset": 100000})
            assert text_of(r) == "100000|100000\n", text_of(r)
            # The rest of the state directory is not reachable that way.
            state_db = path.rsplit("/outputs/", 1)[0] + "/state.db"
            for bad in [state_db, path.rsplit("/", 1)[0] + "/../state.db", "output:../state"]:
                r = await client.call_tool("read_file", {"path": bad})
                assert r.is_error, (bad, text_of(r))


async def test_claude_codes_read_and_grep_take_the_path_bash_gave(workspace, state_dir):
    async with connect("stdio", "legacy", workspace, state_dir, ["--dialect", "claude-code"]) as client:
        with anyio.fail_after(120):
            r = await client.call_tool("Bash", {"command": "seq 1 100000"})
            path = saved_path(text_of(r))
            r = await client.call_tool("Read", {"file_path": path, "offset": 50000, "limit": 1})
            assert not r.is_error, text_of(r)
            assert text_of(r).startswith(" 50000\t50000"), text_of(r)
            r = await client.call_tool("Grep", {"pattern": "^4242[01]$", "path": path, "output_mode": "content"})
            assert text_of(r) == f"{path}:42420:42420\n{path}:42421:42421\n", text_of(r)
