"""Long-running and interactive commands over MCP (stdio), through the real binary and its lanes:
run_command background / yield_ms / tty, process_output / process_input / process_kill /
process_list, the persistent shell, and the end of a session."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest
from conftest import connect, pids_with_marker, text_of

pytestmark = pytest.mark.anyio

# Each lane: the run_command tool that runs there, and a catalog putting `shell` there too.
LANES = {
    "net": ("run_command", ""),
    "no-net": ("run_command_isolated", '[tools.shell]\nlane = "no-net"\n'),
}


def catalog(tmp: Path, lane: str, extra: str = "") -> list[str]:
    path = tmp / f"catalog-{lane}.toml"
    path.write_text(LANES[lane][1] + extra)
    return ["--catalog", str(path)]


async def call(client, tool: str, args: dict):
    r = await client.call_tool(tool, args)
    data = r.structured_content or {}
    return r, text_of(r), data.get("data", data) if isinstance(data, dict) else {}


def data_of(r) -> dict:
    sc = r.structured_content or {}
    return sc.get("data") or sc


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def read_until(client, pid: str, needle: str, seconds: float = 15) -> str:
    seen = ""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        r = await client.call_tool("process_output", {"process_id": pid, "wait_ms": 1000})
        seen += text_of(r)
        if needle in seen:
            return seen
    return seen


@pytest.mark.parametrize("lane", ["net", "no-net"])
async def test_a_dev_server_in_the_background_answers_logs_and_dies_whole(lane, workspace, state_dir, tmp_path):
    run = LANES[lane][0]
    port = free_port()
    marker = f"http.server {port}"
    (workspace / "index.html").write_text("hello from the dev server\n")
    async with connect("stdio", "legacy", workspace, state_dir, catalog(tmp_path, lane)) as client:
        cmd = f"python3 -u -m http.server {port} --bind 127.0.0.1"
        r = await client.call_tool(run, {"command": cmd, "background": True, "yield_ms": 1500})
        assert not r.is_error, text_of(r)
        pid = data_of(r)["process_id"]
        assert pid.startswith(lane + "-"), pid
        assert pids_with_marker(marker), "the server runs after the call returned"
        # A later command in the same lane reaches it.
        fetch = f"python3 -c \"import urllib.request as u; print(u.urlopen('http://127.0.0.1:{port}/index.html').read().decode())\""
        r2 = await client.call_tool(run, {"command": fetch})
        assert "hello from the dev server" in text_of(r2), text_of(r2)
        log = await read_until(client, pid, "GET /index.html")
        assert "GET /index.html" in log, log
        listed = await client.call_tool("process_list", {})
        assert pid in text_of(listed), text_of(listed)
        killed = await client.call_tool("process_kill", {"process_id": pid})
        assert not killed.is_error, text_of(killed)
        assert data_of(killed)["running"] is False, text_of(killed)
        assert not pids_with_marker(marker), "nothing of it is left"


@pytest.mark.parametrize("lane", ["net", "no-net"])
async def test_a_command_outliving_yield_ms_keeps_running_and_its_output_arrives_later(lane, workspace, state_dir, tmp_path):
    run = LANES[lane][0]
    async with connect("stdio", "legacy", workspace, state_dir, catalog(tmp_path, lane)) as client:
        r = await client.call_tool(run, {"command": "echo early; sleep 2; echo late-line", "yield_ms": 300})
        assert not r.is_error, text_of(r)
        pid = data_of(r)["process_id"]
        assert "early" in text_of(r)
        out = await read_until(client, pid, "late-line")
        assert "late-line" in out, out
        # Once ended and read, it ends with its exit status.
        final = await client.call_tool("process_output", {"process_id": pid, "wait_ms": 3000})
        text = text_of(final)
        assert "exited with code 0" in text or "no process" in text, text
        # Without background or yield_ms, a quick command is as before: no process id.
        plain = await client.call_tool(run, {"command": "echo plain"})
        assert "process_id" not in (data_of(plain) or {}), data_of(plain)


@pytest.mark.parametrize("lane", ["net", "no-net"])
async def test_python_repl_on_a_tty_answers_and_is_interrupted_by_ctrl_c(lane, workspace, state_dir, tmp_path):
    run = LANES[lane][0]
    async with connect("stdio", "legacy", workspace, state_dir, catalog(tmp_path, lane)) as client:
        r = await client.call_tool(run, {"command": "python3 -i -q", "tty": True, "yield_ms": 1500})
        assert not r.is_error, text_of(r)
        pid = data_of(r)["process_id"]
        a = await client.call_tool("process_input", {"process_id": pid, "text": "1+1\n", "wait_ms": 3000})
        assert "2" in text_of(a).split("1+1", 1)[-1], text_of(a)
        await client.call_tool("process_input", {"process_id": pid, "text": "while True: pass\n", "wait_ms": 300})
        await client.call_tool("process_input", {"process_id": pid, "text": "\n", "wait_ms": 500})
        c = await client.call_tool("process_input", {"process_id": pid, "text": "\u0003", "wait_ms": 3000})
        assert "KeyboardInterrupt" in text_of(c), text_of(c)
        d = await client.call_tool("process_input", {"process_id": pid, "text": "6*7\n", "wait_ms": 3000})
        assert "42" in text_of(d), text_of(d)
        await client.call_tool("process_kill", {"process_id": pid})


@pytest.mark.parametrize("lane", ["net", "no-net"])
async def test_input_on_pipes_and_a_closed_input_says_so(lane, workspace, state_dir, tmp_path):
    run = LANES[lane][0]
    async with connect("stdio", "legacy", workspace, state_dir, catalog(tmp_path, lane)) as client:
        r = await client.call_tool(run, {"command": "while read l; do echo got:$l; done; echo done-reading", "background": True, "yield_ms": 200})
        pid = data_of(r)["process_id"]
        a = await client.call_tool("process_input", {"process_id": pid, "text": "abc\n"})
        assert "got:abc" in text_of(a), text_of(a)
        b = await client.call_tool("process_input", {"process_id": pid, "text": "", "eof": True, "wait_ms": 2000})
        assert "done-reading" in text_of(b), text_of(b)
        c = await client.call_tool("process_input", {"process_id": pid, "text": "more\n"})
        assert c.is_error, text_of(c)


@pytest.mark.parametrize("lane", ["net", "no-net"])
async def test_the_shell_keeps_its_state_survives_a_timeout_and_forgets_on_restart(lane, workspace, state_dir, tmp_path):
    (workspace / "sub").mkdir()
    async with connect("stdio", "legacy", workspace, state_dir, catalog(tmp_path, lane)) as client:
        assert not (await client.call_tool("shell", {"command": "cd sub && export X=1 && f() { echo fn-$1; }"})).is_error
        r = await client.call_tool("shell", {"command": "pwd; echo x=$X; f ok"})
        t = text_of(r)
        assert t.count("/sub") >= 1 and "x=1" in t and "fn-ok" in t, t
        slow = await client.call_tool("shell", {"command": "sleep 100", "timeout_ms": 1000})
        assert slow.is_error and "interrupted" in text_of(slow), text_of(slow)
        again = await client.call_tool("shell", {"command": "echo x=$X; f still"})
        assert "x=1" in text_of(again) and "fn-still" in text_of(again), text_of(again)
        blocked = await client.call_tool("shell", {"command": "rm -rf /"})
        assert blocked.is_error, text_of(blocked)
        fresh = await client.call_tool("shell", {"command": "pwd; echo x=$X; type f || echo no-f", "restart": True})
        t = text_of(fresh)
        assert "x=\n" in t or t.rstrip().endswith("x=") or "x=\r" in t or "\nx=\n" in t + "\n", t
        assert "no-f" in t and "/sub" not in t, t


async def test_closing_the_connection_kills_every_process_it_started(workspace, state_dir, tmp_path):
    n = int(time.time() * 1000) % 1000000
    marker = f"299.{n}"
    async with connect("stdio", "legacy", workspace, state_dir, catalog(tmp_path, "no-net")) as client:
        script = (
            f"(setsid sleep {marker}1 &) ; "
            f"sh -c '(sleep {marker}2 &) ; exit 0'; "
            f"exec sleep {marker}3"
        )
        r = await client.call_tool("run_command_isolated", {"command": script, "background": True, "yield_ms": 500})
        assert not r.is_error, text_of(r)
        await client.call_tool("run_command_isolated", {"command": "sleep 0.3"})
        assert len(pids_with_marker(marker)) >= 3, pids_with_marker(marker)
    deadline = time.monotonic() + 10
    while pids_with_marker(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not pids_with_marker(marker), "every process, setsid'd and double-forked included, is gone"


async def test_an_unknown_or_another_sessions_process_id_is_a_clear_error(workspace, state_dir, tmp_path):
    extra = catalog(tmp_path, "no-net")
    async with connect("stdio", "legacy", workspace, state_dir, extra) as a:
        r = await a.call_tool("run_command_isolated", {"command": "sleep 30", "background": True, "yield_ms": 100})
        pid = data_of(r)["process_id"]
        bad = await a.call_tool("process_output", {"process_id": "no-net-999"})
        assert bad.is_error and "no process `no-net-999`" in text_of(bad), text_of(bad)
        junk = await a.call_tool("process_kill", {"process_id": "banana"})
        assert junk.is_error and "process_list" in text_of(junk), text_of(junk)
        async with connect("stdio", "legacy", workspace, state_dir, extra) as b:
            # Another connection is another server and session: it cannot reach a's process.
            other = await b.call_tool("process_kill", {"process_id": pid})
            assert other.is_error, text_of(other)
        still = await a.call_tool("process_output", {"process_id": pid})
        assert data_of(still)["running"] is True, text_of(still)


@pytest.mark.parametrize("lane", ["net", "no-net"])
async def test_a_process_that_ended_and_was_read_says_so(lane, workspace, state_dir, tmp_path):
    tool = LANES[lane][0]
    async with connect("stdio", "legacy", workspace, state_dir, catalog(tmp_path, lane)) as client:
        r = await client.call_tool(tool, {"command": "sleep 0.5; echo done-now", "background": True, "yield_ms": 0})
        pid = data_of(r)["process_id"]
        out = await read_until(client, pid, "exited with code 0")
        assert "done-now" in out, out
        # Its end and last output were returned: the id is free, and a read says what became of it.
        for t, args in [("process_output", {}), ("process_input", {"text": "x"}), ("process_kill", {})]:
            again = await client.call_tool(t, {"process_id": pid, **args})
            text = text_of(again)
            assert again.is_error, text
            assert f"{pid} exited with code 0; its output was already returned" in text, text
            assert "never existed" not in text, text
        # An id this session never had still gets the other answer.
        bad = await client.call_tool("process_output", {"process_id": f"{lane}-999"})
        assert "its output was already returned" not in text_of(bad), text_of(bad)


async def test_the_limit_refuses_the_next_process_with_a_clear_error(workspace, state_dir, tmp_path):
    extra = catalog(tmp_path, "no-net", "[processes]\nmax_per_session = 2\n")
    async with connect("stdio", "legacy", workspace, state_dir, extra) as client:
        for _ in range(2):
            r = await client.call_tool("run_command_isolated", {"command": "sleep 30", "background": True, "yield_ms": 100})
            assert not r.is_error, text_of(r)
        r = await client.call_tool("run_command_isolated", {"command": "sleep 30", "background": True, "yield_ms": 100})
        assert r.is_error and "max_per_session" in text_of(r), text_of(r)


async def test_the_sandbox_holds_for_background_processes(workspace, state_dir, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    async with connect("stdio", "legacy", workspace, state_dir, catalog(tmp_path, "no-net")) as client:
        cmd = (
            f"echo x > {outside}/planted && echo wrote-outside; "
            "python3 -c \"import socket; socket.create_connection(('1.1.1.1', 53), 2)\" && echo net-ok || echo net-refused"
        )
        r = await client.call_tool("run_command_isolated", {"command": cmd, "background": True, "yield_ms": 5000})
        t = text_of(r)
        assert "net-refused" in t and "net-ok" not in t, t
        assert not (outside / "planted").exists(), t


async def test_ending_an_http_session_kills_its_processes_and_spares_another_sessions(workspace, state_dir, tmp_path):
    from conftest import HttpServer

    n = int(time.time() * 1000) % 1000000
    mine, theirs = f"298.{n}1", f"298.{n}2"
    server = HttpServer(workspace, state_dir, [])
    try:
        async with server.client("legacy") as other:
            r = await other.call_tool("run_command", {"command": f"exec sleep {theirs}", "background": True})
            assert not r.is_error, text_of(r)
            async with server.client("legacy") as client:
                r = await client.call_tool("run_command", {"command": f"exec sleep {mine}", "background": True})
                assert not r.is_error, text_of(r)
                assert pids_with_marker(mine), "the process runs"
            # The client closed its session (DELETE): its process goes, the other session's stays.
            deadline = time.monotonic() + 10
            while pids_with_marker(mine) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert not pids_with_marker(mine), "the ended session's process is gone"
            assert pids_with_marker(theirs), "another session's process is left alone"
    finally:
        server.stop()


async def test_an_idle_cookie_session_loses_its_processes(workspace, state_dir, tmp_path):
    """Protocol 2026-07-28 has no session end: an HTTP client's cookie session ends after
    [processes] idle_timeout_s without a request, and its processes with it."""
    from conftest import HttpServer

    n = int(time.time() * 1000) % 1000000
    idle, busy = f"297.{n}1", f"297.{n}2"
    path = tmp_path / "idle.toml"
    path.write_text("[processes]\nidle_timeout_s = 3\n")
    server = HttpServer(workspace, state_dir, ["--catalog", str(path)])
    try:
        async with server.client("2026-07-28") as quiet, server.client("2026-07-28") as active:
            r = await quiet.call_tool("run_command", {"command": f"exec sleep {idle}", "background": True})
            assert not r.is_error, text_of(r)
            r = await active.call_tool("run_command", {"command": f"exec sleep {busy}", "background": True})
            assert not r.is_error, text_of(r)
            pid = data_of(r)["process_id"]
            assert pids_with_marker(idle) and pids_with_marker(busy), "both run"
            deadline = time.monotonic() + 30
            while pids_with_marker(idle) and time.monotonic() < deadline:
                # The active client keeps calling: its session never idles.
                r = await active.call_tool("process_output", {"process_id": pid, "wait_ms": 500})
                assert not r.is_error, text_of(r)
            assert not pids_with_marker(idle), "the idle session's process is killed"
            assert pids_with_marker(busy), "the active session's process is left alone"
    finally:
        server.stop()
