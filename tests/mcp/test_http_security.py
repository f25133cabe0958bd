"""The HTTP front door lets no one in: a token (printed, or configured), and one session per client in every era."""

from __future__ import annotations

import json
import os
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from conftest import HttpServer, server_env, text_of, toolyard_bin

TOKEN = "a-test-token-0123456789abcdef"

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}


def post(url: str, body: dict, headers: dict[str, str] | None = None) -> tuple[int, str]:
    req = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json", "accept": "application/json, text/event-stream", **(headers or {})},
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=20) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_a_non_loopback_address_without_a_token_is_refused(workspace: Path, state_dir: Path):
    env = server_env(state_dir)
    env.pop("TOOLYARD_HTTP_TOKEN", None)
    env.pop("TOOLYARD_HTTP_TOKEN_FILE", None)
    proc = subprocess.run(
        [toolyard_bin(), "serve", "--workspace", str(workspace), "--http", "0.0.0.0:0"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
    )
    assert proc.returncode != 0
    assert "without authentication" in proc.stderr
    assert "TOOLYARD_HTTP_TOKEN" in proc.stderr


def test_a_short_token_is_refused(workspace: Path, state_dir: Path):
    env = server_env(state_dir)
    env["TOOLYARD_HTTP_TOKEN"] = "short"
    proc = subprocess.run(
        [toolyard_bin(), "serve", "--workspace", str(workspace), "--http", "127.0.0.1:0"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
    )
    assert proc.returncode != 0
    assert "shorter than 16" in proc.stderr


def test_a_loopback_server_makes_and_prints_a_token_and_requires_it(workspace: Path, state_dir: Path, monkeypatch):
    """Loopback is reachable by every local process (sandboxed commands of the net lane too)."""
    monkeypatch.delenv("TOOLYARD_HTTP_TOKEN", raising=False)
    monkeypatch.delenv("TOOLYARD_HTTP_TOKEN_FILE", raising=False)
    server = HttpServer(workspace, state_dir, [])
    try:
        assert server.token and len(server.token) >= 32, "the token is printed on stderr"
        status, body = post(server.url, INITIALIZE)
        assert status == 401, body
        status, body = post(server.url, INITIALIZE, server.headers())
        assert status == 200, body
    finally:
        server.stop()


def test_a_loopback_server_without_a_token_only_when_told_to_trust_every_local_process(
    workspace: Path, state_dir: Path, monkeypatch
):
    monkeypatch.delenv("TOOLYARD_HTTP_TOKEN", raising=False)
    monkeypatch.delenv("TOOLYARD_HTTP_TOKEN_FILE", raising=False)
    server = HttpServer(workspace, state_dir, ["--trust-every-local-process"])
    try:
        assert server.token is None
        status, body = post(server.url, INITIALIZE)
        assert status == 200, body
    finally:
        server.stop()


@pytest.mark.parametrize("source", ["env", "file"])
def test_with_a_token_requests_need_it(workspace: Path, state_dir: Path, tmp_path: Path, monkeypatch, source):
    if source == "env":
        monkeypatch.setenv("TOOLYARD_HTTP_TOKEN", TOKEN)
    else:
        token_file = tmp_path / "token"
        token_file.write_text(TOKEN + "\n")
        monkeypatch.setenv("TOOLYARD_HTTP_TOKEN_FILE", str(token_file))
    # 0.0.0.0 is accepted once a token is set; the test reaches it over loopback.
    server = HttpServer(workspace, state_dir, [], addr="0.0.0.0:0")
    try:
        port = server.url.rsplit(":", 1)[1].split("/")[0]
        url = f"http://127.0.0.1:{port}/mcp"
        status, body = post(url, INITIALIZE)
        assert status == 401, body
        assert "Bearer" in body
        status, _ = post(url, INITIALIZE, {"authorization": "Bearer wrong-token-0123456789abcdef"})
        assert status == 401
        status, _ = post(url, INITIALIZE, {"authorization": f"Bearer {TOKEN}x"})
        assert status == 401
        status, body = post(url, INITIALIZE, {"authorization": f"Bearer {TOKEN}"})
        assert status == 200, body
        assert "protocolVersion" in body
    finally:
        server.stop()


@pytest.mark.anyio
async def test_two_modern_http_clients_never_share_a_session(workspace: Path, state_dir: Path):
    """2026-07-28 has no sessions: two clients must still keep their own reads and undo history."""
    (workspace / "a.txt").write_text("alpha\n")
    server = HttpServer(workspace, state_dir, [])
    try:
        async with server.client("2026-07-28") as a, server.client("2026-07-28") as b:
            assert not (await a.call_tool("read_file", {"path": "a.txt"})).is_error
            edit = await a.call_tool("edit_file", {"path": "a.txt", "old_string": "alpha", "new_string": "ALPHA"})
            assert not edit.is_error, text_of(edit)
            assert (workspace / "a.txt").read_text() == "ALPHA\n"

            # B never read a.txt: its edit is refused.
            stolen = await b.call_tool("edit_file", {"path": "a.txt", "old_string": "ALPHA", "new_string": "B"})
            assert stolen.is_error
            assert "read" in text_of(stolen)
            # B made no change: its undo does not revert A's.
            undo = await b.call_tool("undo", {})
            assert undo.is_error, text_of(undo)
            assert (workspace / "a.txt").read_text() == "ALPHA\n"

            # A's own undo still works: its session held across requests.
            mine = await a.call_tool("undo", {})
            assert not mine.is_error, text_of(mine)
            assert (workspace / "a.txt").read_text() == "alpha\n"
    finally:
        server.stop()


def test_an_oversized_body_is_refused_before_it_is_read(workspace: Path, state_dir: Path):
    import http.client

    server = HttpServer(workspace, state_dir, [])
    try:
        host, port = server.url.split("//")[1].split("/")[0].rsplit(":", 1)
        conn = http.client.HTTPConnection(host, int(port), timeout=20)
        # Declares 65 MiB and sends only a little: the server must answer from the header alone.
        conn.putrequest("POST", "/mcp")
        conn.putheader("content-type", "application/json")
        conn.putheader("accept", "application/json, text/event-stream")
        conn.putheader("content-length", str(65 * 1024 * 1024))
        for k, v in server.headers().items():
            conn.putheader(k, v)
        conn.endheaders()
        conn.send(b'{"jsonrpc":"2.0"')
        resp = conn.getresponse()
        assert resp.status == 413, resp.read()
        assert "at most" in resp.read().decode()
        # The server goes on serving.
        status, body = post(server.url, INITIALIZE, server.headers())
        assert status == 200, body
    finally:
        server.stop()
