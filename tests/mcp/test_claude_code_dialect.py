"""The claude-code dialect end to end over MCP (stdio, both protocol eras), through the real
binary and its lanes: tools/list is Claude Code's tool set, Read's `cat -n`, read-before-write
in Claude Code's words, Edit's error texts, atomic MultiEdit, Glob and Grep with Claude Code's
parameters, and background Bash read with BashOutput's filter and stopped with KillShell."""

from __future__ import annotations

import anyio
import pytest
from conftest import MODES, cli_tool_names, connect, text_of

pytestmark = pytest.mark.anyio

ARGS = ["--dialect", "claude-code"]
TOOLS = ["Bash", "BashOutput", "Edit", "Glob", "Grep", "KillShell", "LSP", "MultiEdit", "NotebookEdit", "Read", "Write"]


async def call(client, tool: str, args: dict):
    r = await client.call_tool(tool, args)
    return r, text_of(r)


@pytest.mark.parametrize("mode", MODES)
async def test_tools_list_is_claude_codes(mode, workspace, state_dir):
    async with connect("stdio", mode, workspace, state_dir, ARGS) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert sorted(tools) == TOOLS
    assert sorted(cli_tool_names("claude-code")) == TOOLS
    grep = tools["Grep"].input_schema["properties"]
    for p in ["pattern", "path", "glob", "type", "output_mode", "-A", "-B", "-C", "-n", "-i", "head_limit", "multiline"]:
        assert p in grep, p
    assert set(tools["MultiEdit"].input_schema["required"]) == {"file_path", "edits"}


@pytest.mark.parametrize("mode", MODES)
async def test_read_write_edit_multiedit(mode, workspace, state_dir):
    (workspace / "m.py").write_text("def f():\n\tx = 1\n\treturn x\n")
    py = str(workspace / "m.py")
    async with connect("stdio", mode, workspace, state_dir, ARGS) as client:
        r, out = await call(client, "Edit", {"file_path": py, "old_string": "x = 1", "new_string": "x = 2"})
        assert r.is_error and "File has not been read yet. Read it first before writing to it." in out, out

        r, out = await call(client, "Read", {"file_path": py})
        assert not r.is_error
        assert out == "     1\tdef f():\n     2\t\tx = 1\n     3\t\treturn x"

        r, out = await call(client, "Edit", {"file_path": py, "old_string": "x", "new_string": "y"})
        assert r.is_error and "Found 2 matches of the string to replace, but replace_all is false." in out, out
        r, out = await call(client, "Edit", {"file_path": py, "old_string": "nope", "new_string": "y"})
        assert r.is_error and "String to replace not found in file.\nString: nope" in out, out

        r, out = await call(client, "Edit", {"file_path": py, "old_string": "x", "new_string": "y", "replace_all": True})
        assert not r.is_error, out
        assert (workspace / "m.py").read_text() == "def f():\n\ty = 1\n\treturn y\n"

        # Atomic: the second edit fails, so the first is not applied either.
        r, out = await call(client, "MultiEdit", {"file_path": py, "edits": [
            {"old_string": "def f", "new_string": "def g"},
            {"old_string": "missing", "new_string": "z"},
        ]})
        assert r.is_error, out
        assert (workspace / "m.py").read_text() == "def f():\n\ty = 1\n\treturn y\n"
        r, out = await call(client, "MultiEdit", {"file_path": py, "edits": [
            {"old_string": "def f", "new_string": "def g"},
            {"old_string": "y = 1", "new_string": "y = 3"},
        ]})
        assert not r.is_error, out
        assert (workspace / "m.py").read_text() == "def g():\n\ty = 3\n\treturn y\n"

        r, out = await call(client, "Write", {"file_path": str(workspace / "new.txt"), "content": "hi\n"})
        assert not r.is_error, out
        assert (workspace / "new.txt").read_text() == "hi\n"

        # Outside the workspace: refused.
        r, out = await call(client, "Write", {"file_path": "/tmp/claude-code-outside.txt", "content": "x"})
        assert r.is_error, out


@pytest.mark.parametrize("mode", MODES)
async def test_glob_grep_and_background_bash(mode, workspace, state_dir):
    (workspace / "src").mkdir()
    (workspace / "src" / "a.rs").write_text("fn main() {}\n// TODO one\n")
    (workspace / "src" / "b.py").write_text("# todo two\n")
    async with connect("stdio", mode, workspace, state_dir, ARGS) as client:
        r, out = await call(client, "Glob", {"pattern": "**/*.rs"})
        assert not r.is_error and "src/a.rs" in out and "b.py" not in out, out
        r, out = await call(client, "Grep", {"pattern": "todo", "-i": True})
        assert not r.is_error and "src/a.rs" in out and "src/b.py" in out and "TODO one" not in out, out
        r, out = await call(client, "Grep", {"pattern": "TODO", "output_mode": "content", "-n": True, "type": "rust"})
        assert not r.is_error and "TODO one" in out, out

        r, out = await call(client, "Bash", {"command": "echo hello", "description": "Say hello"})
        assert not r.is_error and "hello" in out, out

        r, out = await call(client, "Bash", {
            "command": "echo keep-1; echo drop; echo keep-2; sleep 30",
            "run_in_background": True,
        })
        assert not r.is_error and out.startswith("Command running in background with ID: "), out
        assert "process_output" not in out, out
        bash_id = out.removeprefix("Command running in background with ID: ").split(".")[0]
        seen = ""
        for _ in range(50):
            r, out = await call(client, "BashOutput", {"bash_id": bash_id, "filter": "^keep"})
            assert not r.is_error, out
            seen += out
            if "keep-2" in seen:
                break
            await anyio.sleep(0.1)
        assert "keep-1" in seen and "keep-2" in seen and "drop" not in seen, seen
        r, out = await call(client, "KillShell", {"shell_id": bash_id})
        assert not r.is_error and out.startswith("Successfully killed shell"), out
