"""The anthropic dialect end to end over MCP (stdio, both protocol eras), through the real binary
and its lanes: every command of `str_replace_based_edit_tool` and of `str_replace_editor`
(undo_edit through the journal), `bash` on the persistent shell, Anthropic's exact texts, create
never overwriting, insert at the top and the end, view_range with -1, tabs kept, and the
`toolyard tools --dialect anthropic` exports."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from conftest import MODES, REPO, cli_tool_names, connect, text_of, toolyard_bin

pytestmark = pytest.mark.anyio

EDITOR = "str_replace_based_edit_tool"
OLD_EDITOR = "str_replace_editor"
ARGS = ["--dialect", "anthropic"]



def own_text(out: str) -> str:
    """Anthropic's text of a change's result, without the `diagnostics:` block Toolyard appends
    after it (issue 23; here it says no language server covers the file's language)."""
    return out.split("\n\ndiagnostics:\n")[0]

async def edit(client, args: dict, tool: str = EDITOR):
    r = await client.call_tool(tool, args)
    return r, text_of(r)


@pytest.mark.parametrize("mode", MODES)
async def test_tools_list_is_both_editors_and_bash(mode, workspace, state_dir):
    async with connect("stdio", mode, workspace, state_dir, ARGS) as client:
        names = sorted(t.name for t in (await client.list_tools()).tools)
    assert names == ["bash", EDITOR, OLD_EDITOR]
    assert names == sorted(cli_tool_names("anthropic"))


@pytest.mark.parametrize("mode", MODES)
async def test_every_editor_command_with_anthropics_texts(mode, workspace, state_dir):
    (workspace / "m.go").write_text("package m\n\nfunc f() int {\n\tx := 1\n\treturn x\n}\n")
    go = str(workspace / "m.go")
    async with connect("stdio", mode, workspace, state_dir, ARGS) as client:
        # An edit before a view is refused, in this dialect's words.
        r, out = await edit(client, {"command": "str_replace", "path": go, "old_str": "x := 1", "new_str": "x := 2"})
        assert r.is_error and "has not been viewed" in out, out

        # view: cat -n, tabs kept.
        r, out = await edit(client, {"command": "view", "path": go})
        assert not r.is_error
        assert out == (
            f"Here's the result of running `cat -n` on {go}:\n"
            "     1\tpackage m\n     2\t\n     3\tfunc f() int {\n     4\t\tx := 1\n     5\t\treturn x\n     6\t}\n"
        )

        # view_range with -1.
        r, out = await edit(client, {"command": "view", "path": go, "view_range": [5, -1]})
        assert out == f"Here's the result of running `cat -n` on {go}:\n     5\t\treturn x\n     6\t}}\n"
        r, out = await edit(client, {"command": "view", "path": go, "view_range": [7, -1]})
        assert r.is_error
        assert out == (
            "Error: Invalid `view_range`: [7, -1]. Its first element `7` should be within the range "
            "of lines of the file: [1, 6]"
        )

        # str_replace, the tab kept on both sides.
        r, out = await edit(client, {"command": "str_replace", "path": go, "old_str": "\tx := 1", "new_str": "\tx := 2"})
        assert not r.is_error, out
        assert out.startswith(f"The file {go} has been edited. Here's the result of running `cat -n` on a snippet of {go}:\n")
        assert "     4\t\tx := 2\n" in out
        assert own_text(out).endswith("Review the changes and make sure they are as expected. Edit the file again if necessary.")
        assert (workspace / "m.go").read_text() == "package m\n\nfunc f() int {\n\tx := 2\n\treturn x\n}\n"

        # The documented failure texts, with Toolyard's nearest lines.
        r, out = await edit(client, {"command": "str_replace", "path": go, "old_str": "return y", "new_str": "z"})
        assert r.is_error
        assert out.startswith("Error: No match found for replacement. Please check your text and try again."), out
        assert "     5|\treturn x" in out, out
        r, out = await edit(client, {"command": "str_replace", "path": go, "old_str": "x", "new_str": "y"})
        assert r.is_error
        assert out.startswith(
            "Error: Found 2 matches for replacement text. Please provide more context to make a unique match."
        ), out

        # insert at the top (insert_text) and at the end (new_str, the older name).
        r, out = await edit(client, {"command": "insert", "path": go, "insert_line": 0, "insert_text": "// top"})
        assert not r.is_error, out
        assert "snippet of the edited file:\n     1\t// top\n" in out
        r, out = await edit(client, {"command": "insert", "path": go, "insert_line": 7, "new_str": "// end"})
        assert not r.is_error, out
        assert (workspace / "m.go").read_text() == (
            "// top\npackage m\n\nfunc f() int {\n\tx := 2\n\treturn x\n}\n// end\n"
        )
        r, out = await edit(client, {"command": "insert", "path": go, "insert_line": 99, "insert_text": "x"})
        assert out == (
            "Error: Invalid `insert_line` parameter: 99. It should be within the range of lines of the file: [0, 8]"
        )

        # create, relative path, never over an existing file.
        r, out = await edit(client, {"command": "create", "path": "pkg/new.py", "file_text": "def f():\n\treturn 1\n"})
        assert own_text(out) == "File created successfully at: pkg/new.py"
        assert (workspace / "pkg/new.py").read_text() == "def f():\n\treturn 1\n"
        r, out = await edit(client, {"command": "create", "path": go, "file_text": "clobbered"})
        assert r.is_error
        assert out == f"Error: File already exists at: {go}. Cannot overwrite files using command `create`."
        assert (workspace / "m.go").read_text().startswith("// top\n")

        # view of a directory: two levels, find-style.
        r, out = await edit(client, {"command": "view", "path": str(workspace)})
        assert out.startswith(
            f"Here's the files and directories up to 2 levels deep in {workspace}, excluding hidden items:\n"
        )
        assert f"{workspace}/pkg/new.py\n" in out and f"{workspace}/m.go\n" in out

        # Unknown commands, and undo_edit only in the older editor.
        r, out = await edit(client, {"command": "undo_edit", "path": go})
        assert out == (
            "Error: Unrecognized command undo_edit. The allowed commands for the str_replace_based_edit_tool "
            "tool are: view, create, str_replace, insert"
        )

        # Outside the workspace: refused, nothing written.
        r, out = await edit(client, {"command": "create", "path": "/tmp/../tmp/anthropic-escape-x.txt", "file_text": "x"})
        assert r.is_error and out.startswith("Error: Permission denied. Cannot write to file."), out
        assert not Path("/tmp/anthropic-escape-x.txt").exists()


@pytest.mark.parametrize("mode", MODES)
async def test_undo_edit_walks_back_this_sessions_edits(mode, workspace, state_dir):
    (workspace / "u.txt").write_text("one\n")
    async with connect("stdio", mode, workspace, state_dir, ARGS) as client:
        r, out = await edit(client, {"command": "undo_edit", "path": "u.txt"}, OLD_EDITOR)
        assert out == "Error: No edit history found for u.txt."
        await edit(client, {"command": "view", "path": "u.txt"}, OLD_EDITOR)
        r, out = await edit(client, {"command": "str_replace", "path": "u.txt", "old_str": "one", "new_str": "two"}, OLD_EDITOR)
        assert not r.is_error, out
        r, out = await edit(client, {"command": "insert", "path": "u.txt", "insert_line": 1, "new_str": "three"}, OLD_EDITOR)
        assert not r.is_error, out
        assert (workspace / "u.txt").read_text() == "two\nthree\n"
        r, out = await edit(client, {"command": "undo_edit", "path": "u.txt"}, OLD_EDITOR)
        assert out == "Last edit to u.txt undone successfully. Here's the result of running `cat -n` on u.txt:\n     1\ttwo\n"
        r, out = await edit(client, {"command": "undo_edit", "path": "u.txt"}, OLD_EDITOR)
        assert not r.is_error, out
        assert (workspace / "u.txt").read_text() == "one\n"
        # The undo updated this session's view: the next edit needs no new view.
        r, out = await edit(client, {"command": "str_replace", "path": "u.txt", "old_str": "one", "new_str": "uno"}, OLD_EDITOR)
        assert not r.is_error, out
        assert (workspace / "u.txt").read_text() == "uno\n"


@pytest.mark.parametrize("mode", MODES)
async def test_bash_is_one_persistent_session_and_restart_starts_clean(mode, workspace, state_dir):
    (workspace / "sub").mkdir()
    (workspace / "sub" / "f.txt").write_text("inside\n")
    async with connect("stdio", mode, workspace, state_dir, ARGS) as client:
        r = await client.call_tool("bash", {"command": "cd sub && export MARK=kept"})
        assert not r.is_error, text_of(r)
        r = await client.call_tool("bash", {"command": "pwd; echo \"[$MARK]\"; cat f.txt"})
        out = text_of(r)
        assert not r.is_error, out
        assert "/sub\n" in out and "[kept]\ninside\n" in out, out
        r = await client.call_tool("bash", {"restart": True})
        assert text_of(r) == "tool has been restarted."
        r = await client.call_tool("bash", {"command": "echo \"[$MARK]\"; ls"})
        out = text_of(r)
        assert "[]\n" in out and "sub" in out, out
        r = await client.call_tool("bash", {})
        assert r.is_error and text_of(r).startswith("Error: no command provided."), text_of(r)
        r = await client.call_tool("bash", {"command": "exit_code_test() { return 3; }; exit_code_test"})
        assert r.is_error and "exit code: 3" in text_of(r), text_of(r)


@pytest.mark.parametrize("fmt", ["anthropic", "openai", "mcp"])
def test_tools_export_in_every_format(fmt):
    out = subprocess.run(
        [toolyard_bin(), "tools", "--dialect", "anthropic", "--format", fmt],
        check=True,
        capture_output=True,
        text=True,
        cwd=REPO,
    ).stdout
    tools = json.loads(out)
    assert len(tools) == 3
    if fmt == "anthropic":
        by_name = {t["name"]: t for t in tools}
        assert by_name[EDITOR] == {"type": "text_editor_20250728", "name": EDITOR}
        assert by_name[OLD_EDITOR] == {"type": "text_editor_20250124", "name": OLD_EDITOR}
        assert by_name["bash"] == {"type": "bash_20250124", "name": "bash"}
    elif fmt == "openai":
        names = sorted(t["function"]["name"] for t in tools)
        assert names == ["bash", EDITOR, OLD_EDITOR]
        editor = next(t for t in tools if t["function"]["name"] == EDITOR)
        props = editor["function"]["parameters"]["properties"]
        assert {"command", "path", "view_range", "old_str", "new_str", "insert_line", "insert_text", "file_text"} <= set(props)
    else:
        assert sorted(t["name"] for t in tools) == ["bash", EDITOR, OLD_EDITOR]
