"""The gemini dialect end to end over MCP (stdio, both protocol eras), through the real binary
and its lanes: the tools/list, old and new parameter names, `replace` refusing a differing count
in Gemini's words, read-before-write, `run_shell_command` in a directory, and `read_many_files`
with its separators."""

from __future__ import annotations

import pytest
from conftest import MODES, cli_tool_names, connect, text_of

pytestmark = pytest.mark.anyio

ARGS = ["--dialect", "gemini"]
NAMES = [
    "diagnostics",
    "glob",
    "grep_search",
    "list_directory",
    "lsp",
    "outline",
    "process_kill",
    "process_list",
    "process_output",
    "read_file",
    "read_many_files",
    "rename_symbol",
    "replace",
    "run_shell_command",
    "search_file_content",
    "undo",
    "write_file",
]


async def call(client, tool: str, args: dict):
    r = await client.call_tool(tool, args)
    return r, text_of(r)


@pytest.mark.parametrize("mode", MODES)
async def test_tools_list_is_geminis(mode, workspace, state_dir):
    async with connect("stdio", mode, workspace, state_dir, ARGS) as client:
        names = sorted(t.name for t in (await client.list_tools()).tools)
    assert names == NAMES
    assert names == sorted(cli_tool_names("gemini"))


@pytest.mark.parametrize("mode", MODES)
async def test_read_replace_write_shell_and_read_many(mode, workspace, state_dir):
    (workspace / "src").mkdir()
    (workspace / "src" / "a.py").write_text("x = 1\nx = 1\ny = 2\n")
    a = str(workspace / "src" / "a.py")
    async with connect("stdio", mode, workspace, state_dir, ARGS) as client:
        # Editing before reading is refused; nothing changes.
        r, out = await call(client, "replace", {"file_path": a, "old_string": "y = 2", "new_string": "y = 3"})
        assert r.is_error, out
        assert (workspace / "src" / "a.py").read_text() == "x = 1\nx = 1\ny = 2\n"

        r, out = await call(client, "read_file", {"absolute_path": a})
        assert not r.is_error and "y = 2" in out, out

        r, out = await call(client, "replace", {"file_path": a, "old_string": "x = 1", "new_string": "x = 5"})
        assert r.is_error
        assert f"Failed to edit, Expected 1 occurrence but found 2 for old_string in file: {a}." in out, out
        r, out = await call(
            client,
            "replace",
            {"file_path": a, "old_string": "x = 1", "new_string": "x = 5", "expected_replacements": 2},
        )
        assert not r.is_error, out
        assert (workspace / "src" / "a.py").read_text() == "x = 5\nx = 5\ny = 2\n"
        r, out = await call(client, "replace", {"file_path": a, "old_string": "nope", "new_string": "z"})
        assert r.is_error
        assert f"Failed to edit, 0 occurrences found for old_string in {a}." in out, out

        r, out = await call(client, "write_file", {"file_path": str(workspace / "new" / "b.txt"), "content": "bee\n"})
        assert not r.is_error, out
        assert (workspace / "new" / "b.txt").read_text() == "bee\n"

        r, out = await call(client, "run_shell_command", {"command": "pwd", "description": "where", "directory": "src"})
        assert not r.is_error and "/src" in out, out

        r, out = await call(client, "search_file_content", {"pattern": "X = 5", "path": "src", "include": "*.py"})
        assert not r.is_error and "a.py" in out, out

        r, out = await call(client, "list_directory", {"dir_path": str(workspace), "ignore": ["new"]})
        assert not r.is_error and "[DIR] src" in out and "new" not in out.split(":", 1)[1], out

        r, out = await call(client, "read_many_files", {"paths": ["src/*.py", "new/b.txt"]})
        assert not r.is_error, out
        assert "--- src/a.py ---" in out and "--- new/b.txt ---" in out and "bee" in out, out
        assert out.rstrip().endswith("--- End of content ---"), out
