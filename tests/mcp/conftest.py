"""End-to-end tests of `toolyard serve` with the official MCP Python SDK (`mcp` on PyPI) as the client.

Every test starts the real binary itself (over stdio, or over streamable HTTP on 127.0.0.1 with a
free port) with its own workspace and its own TOOLYARD_STATE_DIR, and stops it afterwards.

The binary is $TOOLYARD_BIN, else target/debug/toolyard (build it first: cargo build -p toolyard).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# Both protocol eras: the initialize handshake (2025-11-25 and before) and 2026-07-28
# (per-request metadata, no initialize).
MODES = ["legacy", "2026-07-28"]
TRANSPORTS = ["stdio", "http"]


def toolyard_bin() -> str:
    path = os.environ.get("TOOLYARD_BIN") or str(REPO / "target" / "debug" / "toolyard")
    if not Path(path).exists():
        pytest.exit(f"no toolyard binary at {path}; run `cargo build -p toolyard` or set TOOLYARD_BIN", 2)
    return path


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "hello.txt").write_text("hello\nworld\n")
    return ws


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    st = tmp_path / "state"
    st.mkdir()
    return st


def server_env(state_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["TOOLYARD_STATE_DIR"] = str(state_dir)
    env.setdefault("TOOLYARD_LOG", "warn")
    return env


def http_transport(url: str, token: str | None):
    """A streamable HTTP transport to `url` that sends the server's bearer token (and keeps
    cookies, as the SDK's own client does)."""
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    headers = {"authorization": f"Bearer {token}"} if token else None
    return streamable_http_client(url, http_client=create_mcp_http_client(headers=headers))


class HttpServer:
    """`toolyard serve --http 127.0.0.1:0`, its chosen port and its token read from stderr.

    Without `token` the server makes one and prints it (the default); with one, it is passed in
    TOOLYARD_HTTP_TOKEN."""

    def __init__(
        self, workspace: Path, state_dir: Path, extra: list[str], addr: str = "127.0.0.1:0", token: str | None = None
    ):
        env = server_env(state_dir)
        if token:
            env["TOOLYARD_HTTP_TOKEN"] = token
        self.token = token or env.get("TOOLYARD_HTTP_TOKEN")
        self.proc = subprocess.Popen(
            [toolyard_bin(), "serve", "--workspace", str(workspace), "--http", addr, *extra],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=env,
            text=True,
        )
        self.url = self._wait_for_url()

    def _wait_for_url(self) -> str:
        deadline = time.monotonic() + 20
        assert self.proc.stderr is not None
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            m = re.search(r"HTTP bearer token: (\S+)", line)
            if m:
                self.token = m.group(1)
            m = re.search(r"serving MCP on (http://\S+)", line)
            if m:
                return m.group(1)
        self.stop()
        raise RuntimeError("toolyard serve --http did not report its address")

    def headers(self) -> dict[str, str]:
        """The header that carries this server's token."""
        return {"authorization": f"Bearer {self.token}"} if self.token else {}

    def client(self, mode: str):
        """An `mcp.Client` of this server, sending its token."""
        from mcp import Client

        return Client(http_transport(self.url, self.token), mode=mode)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@contextlib.asynccontextmanager
async def connect(transport: str, mode: str, workspace: Path, state_dir: Path, extra: list[str] | None = None):
    """An `mcp.Client` connected to a fresh `toolyard serve` over `transport` in protocol `mode`."""
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    extra = extra or []
    if transport == "stdio":
        params = StdioServerParameters(
            command=toolyard_bin(),
            args=["serve", "--workspace", str(workspace), *extra],
            env=server_env(state_dir),
        )
        async with Client(params, mode=mode) as client:
            yield client
    else:
        server = HttpServer(workspace, state_dir, extra)
        try:
            async with server.client(mode) as client:
                yield client
        finally:
            server.stop()


def cli_tool_names(dialect: str) -> list[str]:
    """The tool names `toolyard tools --dialect D --format mcp` prints: the expected tools/list."""
    out = subprocess.run(
        [toolyard_bin(), "tools", "--dialect", dialect, "--format", "mcp"],
        check=True,
        capture_output=True,
        text=True,
        cwd=REPO,
    ).stdout
    return [t["name"] for t in json.loads(out)]


def text_of(result) -> str:
    return "".join(getattr(c, "text", "") for c in result.content)


def pids_with_marker(marker: str) -> list[int]:
    """Live processes whose command line contains `marker` (zombies excluded), via /proc."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        state = stat.rsplit(")", 1)[-1].split()[0] if ")" in stat else "?"
        if marker in cmdline and state != "Z" and int(entry) != os.getpid():
            pids.append(int(entry))
    return pids


def pytest_configure(config):
    # anyio's pytest plugin runs the async tests; asyncio backend only.
    config.addinivalue_line("markers", "anyio: async test")


@pytest.fixture
def anyio_backend():
    return "asyncio"


sys.path.insert(0, str(Path(__file__).parent))
