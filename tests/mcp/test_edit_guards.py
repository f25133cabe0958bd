"""The guards every dialect's edit tools share, end to end over MCP through the real binary: an
omission placeholder that would delete code is refused naming its line, a patch already applied
says so, and the third identical failing call says it has failed before and what to try."""

from __future__ import annotations

import json
import subprocess

import pytest
from conftest import connect, server_env, text_of, toolyard_bin

pytestmark = pytest.mark.anyio

CODE = "def total(items):\n    s = 0\n    for i in items:\n        s += i\n    return s\n\n\ndef other():\n    return 1\n"
PLACEHOLDER_BODY = "def total(items):\n    # ... rest of code unchanged\n"
PATCH = (
    "*** Begin Patch\n*** Update File: calc.py\n@@\n def other():\n-    return 1\n+    return 2\n*** End Patch"
)


async def call(client, tool: str, args: dict):
    r = await client.call_tool(tool, args)
    return r, text_of(r)


async def test_loopr_edit_refuses_a_placeholder_and_names_its_line(workspace, state_dir):
    (workspace / "calc.py").write_text(CODE)
    async with connect("stdio", "legacy", workspace, state_dir, []) as client:
        await call(client, "read_file", {"path": "calc.py"})
        old = "def total(items):\n    s = 0\n    for i in items:\n        s += i\n    return s\n"
        r, out = await call(client, "edit_file", {"path": "calc.py", "old_string": old, "new_string": PLACEHOLDER_BODY})
        assert r.is_error, out
        assert "line 2 of the new content of calc.py is an omission placeholder" in out, out
        r, out = await call(client, "write_file", {"path": "calc.py", "content": "# ... existing code here\ndef other():\n    return 1\n"})
        assert r.is_error and "line 1 of the new content of calc.py" in out, out
    assert (workspace / "calc.py").read_text() == CODE


async def test_claude_code_edit_and_write_refuse_a_placeholder(workspace, state_dir):
    (workspace / "calc.py").write_text(CODE)
    py = str(workspace / "calc.py")
    async with connect("stdio", "legacy", workspace, state_dir, ["--dialect", "claude-code"]) as client:
        await call(client, "Read", {"file_path": py})
        r, out = await call(client, "Edit", {"file_path": py, "old_string": "    s = 0\n    for i in items:\n        s += i\n    return s\n", "new_string": "    ...\n"})
        assert r.is_error and "omission placeholder (`...`)" in out, out
        r, out = await call(client, "Write", {"file_path": py, "content": "// ... rest of the file unchanged\n"})
        assert r.is_error and "omission placeholder" in out, out
    assert (workspace / "calc.py").read_text() == CODE


async def test_a_patch_applied_twice_says_it_is_already_applied(workspace, state_dir):
    """apply_patch is the codex dialect's: over MCP, then through the CLI."""
    (workspace / "calc.py").write_text(CODE)
    async with connect("stdio", "legacy", workspace, state_dir, ["--dialect", "codex"]) as client:
        schema = next(t for t in (await client.list_tools()).tools if t.name == "apply_patch").input_schema
        key = "input" if "input" in schema["properties"] else next(iter(schema["required"]))
        r, out = await call(client, "apply_patch", {key: PATCH})
        assert not r.is_error, out
        r, out = await call(client, "apply_patch", {key: PATCH})
        assert r.is_error, out
        assert "already applied to calc.py" in out and "line 8" in out, out
        assert "Failed to find" not in out, out
    assert (workspace / "calc.py").read_text().endswith("return 2\n")
    cli = subprocess.run(
        [toolyard_bin(), "call", "--dialect", "codex", "apply_patch", json.dumps({key: PATCH})],
        cwd=workspace, env=server_env(state_dir), capture_output=True, text=True, timeout=120,
    )
    assert cli.returncode == 1 and "already applied to calc.py" in cli.stdout + cli.stderr, cli


@pytest.mark.parametrize("dialect", ["loopr", "claude-code", "gemini"])
async def test_an_edit_sent_twice_says_it_is_already_applied(dialect, workspace, state_dir):
    """The edit tools' counterpart of apply_patch's "already applied": the second of two
    identical edits finds its old text gone and its new text standing, and says so."""
    (workspace / "calc.py").write_text(CODE)
    py = str(workspace / "calc.py")
    tool, read, edit = {
        "loopr": ("edit_file", ("read_file", {"path": "calc.py"}), {"path": "calc.py"}),
        "claude-code": ("Edit", ("Read", {"file_path": py}), {"file_path": py}),
        "gemini": ("replace", ("read_file", {"absolute_path": py}), {"file_path": py}),
    }[dialect]
    edit |= {"old_string": "def other():\n    return 1", "new_string": "def other():\n    return 2"}
    args = [] if dialect == "loopr" else ["--dialect", dialect]
    async with connect("stdio", "legacy", workspace, state_dir, args) as client:
        await call(client, *read)
        r, out = await call(client, tool, edit)
        assert not r.is_error, out
        r, out = await call(client, tool, edit)
        assert r.is_error, out
        assert "already applied to" in out and "calc.py" in out and "line 8" in out, out
    assert (workspace / "calc.py").read_text() == CODE.replace("return 1", "return 2")


@pytest.mark.parametrize("dialect", ["loopr", "claude-code"])
async def test_the_third_identical_failure_says_so(dialect, workspace, state_dir):
    (workspace / "calc.py").write_text(CODE)
    args = [] if dialect == "loopr" else ["--dialect", "claude-code"]
    if dialect == "loopr":
        tool, read, edit = "edit_file", ("read_file", {"path": "calc.py"}), {"path": "calc.py", "old_string": "missing", "new_string": "x"}
    else:
        py = str(workspace / "calc.py")
        tool, read, edit = "Edit", ("Read", {"file_path": py}), {"file_path": py, "old_string": "missing", "new_string": "x"}
    async with connect("stdio", "legacy", workspace, state_dir, args) as client:
        await call(client, *read)
        outs = []
        for _ in range(3):
            r, out = await call(client, tool, edit)
            assert r.is_error, out
            outs.append(out)
    assert "has now failed" not in outs[0] and "has now failed" not in outs[1], outs
    assert "has now failed 3 times in this session" in outs[2], outs[2]
