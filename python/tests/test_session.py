"""`Engine(session=...)` / `toolyard serve --session NAME`: separate server processes of one
named session share the read ledger (a client that reconnects per call can edit what it read);
unnamed ones do not."""

from __future__ import annotations

from pathlib import Path

from toolyard import ToolRegistry

from conftest import run


def read_then_edit(ws: Path, first: str | None, second: str | None) -> tuple[bool, str]:
    (ws / "f.txt").write_text("one\n")
    with ToolRegistry.with_builtins(session=first) as reg:
        assert run(reg.execute("read_file", {"path": "f.txt"}, workspace=ws)).success
    # A new registry: a new `toolyard serve` process.
    with ToolRegistry.with_builtins(session=second) as reg:
        r = run(reg.execute("edit_file", {"path": "f.txt", "old_str": "one", "new_str": "two"},
                            workspace=ws))
    return r.success, r.error or ""


def test_a_named_session_keeps_reads_across_server_processes(ws: Path):
    ok, error = read_then_edit(ws, "agent-1", "agent-1")
    assert ok, error
    assert (ws / "f.txt").read_text() == "two\n"


def test_without_a_session_name_each_process_is_its_own_session(ws: Path):
    ok, error = read_then_edit(ws, None, None)
    assert not ok and "read" in error, error
    assert (ws / "f.txt").read_text() == "one\n"


def test_another_session_name_cannot_use_the_reads(ws: Path):
    ok, error = read_then_edit(ws, "agent-1", "agent-2")
    assert not ok and "read" in error, error
