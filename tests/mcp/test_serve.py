"""`toolyard serve` end to end, with the official MCP Python SDK as the client.

Each behaviour runs over stdio and streamable HTTP, in both protocol eras (legacy `initialize`
and 2026-07-28).
"""

from __future__ import annotations

import re
import time
import uuid

import anyio
import pytest

from conftest import MODES, TRANSPORTS, cli_tool_names, connect, pids_with_marker, text_of

pytestmark = pytest.mark.anyio

both = pytest.mark.parametrize("transport", TRANSPORTS)
eras = pytest.mark.parametrize("mode", MODES)


def tool_dicts(listing) -> list[dict]:
    return [t.model_dump(by_alias=True, exclude_none=True) for t in listing.tools]


@both
@eras
@pytest.mark.parametrize("dialect", ["loopr", "loom", "loom-py"])
async def test_tools_list_matches_the_dialect_and_carries_annotations(transport, mode, dialect, workspace, state_dir):
    # Data-driven: the expected tools are what `toolyard tools --dialect D` says, so new dialect
    # tools are picked up without touching this test.
    expected = sorted(cli_tool_names(dialect))
    async with connect(transport, mode, workspace, state_dir, ["--dialect", dialect]) as client:
        first = tool_dicts(await client.list_tools())
        second = tool_dicts(await client.list_tools())
    names = [t["name"] for t in first]
    assert names == expected
    assert first == second, "tools/list must be deterministic"
    for t in first:
        hints = t.get("annotations", {})
        for key in ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"):
            assert isinstance(hints.get(key), bool), f"{t['name']} lacks {key}"
        assert t["inputSchema"]["type"] == "object"
    if not expected:
        pytest.skip(f"dialect {dialect} has no tools yet (its adapter is still being written)")


@both
@eras
async def test_read_file_returns_numbered_text_and_structured_content(transport, mode, workspace, state_dir):
    async with connect(transport, mode, workspace, state_dir) as client:
        # The era really negotiated: 2025-11-25 over initialize, else the pinned modern version.
        assert client.protocol_version == ("2025-11-25" if mode == "legacy" else mode)
        result = await client.call_tool("read_file", {"path": "hello.txt"})
    assert not result.is_error
    assert "1|hello" in text_of(result)
    assert "2|world" in text_of(result)
    assert result.structured_content["success"] is True
    assert result.structured_content["data"]["path"] == "hello.txt"
    # Clients that show the model structuredContent instead of the text must see the same text.
    assert result.structured_content["output"] == text_of(result)


@both
@eras
async def test_edit_after_read_changes_the_file(transport, mode, workspace, state_dir):
    async with connect(transport, mode, workspace, state_dir) as client:
        read = await client.call_tool("read_file", {"path": "hello.txt"})
        assert not read.is_error
        edit = await client.call_tool(
            "edit_file", {"path": "hello.txt", "old_string": "world", "new_string": "there"}
        )
    assert not edit.is_error, text_of(edit)
    assert (workspace / "hello.txt").read_text() == "hello\nthere\n"
    assert edit.structured_content["files_changed"] == ["hello.txt"]


@both
async def test_a_read_in_one_connection_does_not_license_an_edit_in_another(transport, workspace, state_dir):
    # Each MCP connection is its own read-tracking session.
    async with connect(transport, "legacy", workspace, state_dir) as a:
        assert not (await a.call_tool("read_file", {"path": "hello.txt"})).is_error
    async with connect(transport, "legacy", workspace, state_dir) as b:
        edit = await b.call_tool("edit_file", {"path": "hello.txt", "old_string": "world", "new_string": "x"})
    assert edit.is_error
    assert (workspace / "hello.txt").read_text() == "hello\nworld\n"


@both
@eras
async def test_blocked_path_is_an_error_result_not_a_protocol_error(transport, mode, workspace, state_dir):
    async with connect(transport, mode, workspace, state_dir) as client:
        result = await client.call_tool("read_file", {"path": "../etc/passwd"})
    assert result.is_error
    assert "outside the workspace" in text_of(result)
    assert result.structured_content["error_kind"] == "path_outside_workspace"


@both
@eras
async def test_unknown_tool_is_an_error_result_listing_the_tools(transport, mode, workspace, state_dir):
    async with connect(transport, mode, workspace, state_dir) as client:
        result = await client.call_tool("no_such_tool", {})
    assert result.is_error
    assert "read_file" in text_of(result)


@both
@eras
async def test_sandboxed_command_runs_without_network(transport, mode, workspace, state_dir):
    async with connect(transport, mode, workspace, state_dir) as client:
        result = await client.call_tool(
            "run_command_isolated", {"command": "echo sandboxed-ok && cat /proc/net/dev"}
        )
    out = text_of(result)
    assert not result.is_error, out
    assert "sandboxed-ok" in out
    # The no-net lane has its own network namespace: loopback only.
    interfaces = re.findall(r"^\s*([\w.@-]+):\s+\d", out, flags=re.M)
    assert interfaces, out
    assert set(interfaces) <= {"lo"}, out


@both
@eras
async def test_progress_notifications_arrive_for_a_long_command(transport, mode, workspace, state_dir):
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    async with connect(transport, mode, workspace, state_dir) as client:
        result = await client.call_tool(
            "run_command_isolated",
            {"command": "for i in 1 2 3 4 5 6; do echo tick $i; sleep 0.5; done"},
            progress_callback=on_progress,
        )
    assert not result.is_error, text_of(result)
    assert "tick 6" in text_of(result)
    assert len(seen) >= 2, seen
    assert [p for p, _, _ in seen] == sorted(p for p, _, _ in seen)


@both
@eras
async def test_cancelling_a_call_kills_the_command_tree(transport, mode, workspace, state_dir):
    marker = f"toolyard-cancel-{uuid.uuid4().hex[:12]}"
    # `&&` keeps sh alive (no exec), so the marker stays in a live process's command line.
    command = f"sleep 300 && echo {marker}"
    async with connect(transport, mode, workspace, state_dir) as client:
        async with anyio.create_task_group() as tg:
            scope = anyio.CancelScope()

            async def call() -> None:
                with scope:
                    await client.call_tool("run_command_isolated", {"command": command, "timeout_ms": 600000})

            tg.start_soon(call)
            deadline = time.monotonic() + 20
            while not pids_with_marker(marker):
                assert time.monotonic() < deadline, "the command never started"
                await anyio.sleep(0.05)
            scope.cancel()
        # The process tree must be gone within a few seconds, while the server lives on.
        deadline = time.monotonic() + 5
        while pids_with_marker(marker):
            assert time.monotonic() < deadline, f"still running after cancel: {pids_with_marker(marker)}"
            await anyio.sleep(0.05)
        # The connection still works after the cancellation.
        again = await client.call_tool("read_file", {"path": "hello.txt"})
        assert not again.is_error
