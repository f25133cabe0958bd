"""A small MCP client of a `toolyard serve` child process (stdio, JSON-RPC lines).

One child per workspace. A reader thread matches answers to requests, so the client works from
any asyncio event loop (and from several in turn, as repeated `asyncio.run` calls make) and
from plain threads.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import itertools
import json
import os
import subprocess
import threading
from pathlib import Path
from typing import Any

from toolyard._bin import find_toolyard_bin

PROTOCOL_VERSION = "2025-06-18"


class ServerError(RuntimeError):
    """The toolyard child failed: it did not start, died, or answered a JSON-RPC error."""


class McpClient:
    """One `toolyard serve` child: `call(name, arguments)` returns the MCP CallToolResult."""

    def __init__(
        self,
        workspace: Path,
        *,
        dialect: str = "loom-py",
        session: str | None = None,
        extra_args: list[str] | None = None,
        binary: str | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.workspace = Path(workspace)
        argv = [binary or find_toolyard_bin(), "serve", "--workspace", str(workspace),
                "--dialect", dialect]
        if session:
            argv += ["--session", session]
        argv += extra_args or []
        self._ids = itertools.count(1)
        self._pending: dict[int, concurrent.futures.Future] = {}
        self._lock = threading.Lock()
        self._stderr: collections.deque[str] = collections.deque(maxlen=40)
        self._closed = False
        try:
            self._proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env if env is not None else os.environ.copy(),
                cwd=str(workspace),
            )
        except OSError as e:
            raise ServerError(f"cannot start {argv[0]}: {e}") from e
        threading.Thread(target=self._read, daemon=True, name="toolyard-mcp-reader").start()
        threading.Thread(target=self._drain_stderr, daemon=True, name="toolyard-mcp-stderr").start()
        self.server_info = self.request_sync("initialize", {
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "toolyard-python", "version": "0"},
        })
        self._send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    # ---------------------------------------------------------------- wire

    def _send(self, message: dict) -> None:
        line = (json.dumps(message, separators=(",", ":")) + "\n").encode()
        with self._lock:
            if self._closed or self._proc.stdin is None:
                raise ServerError(self._why_gone())
            try:
                self._proc.stdin.write(line)
                self._proc.stdin.flush()
            except (BrokenPipeError, OSError) as e:
                raise ServerError(self._why_gone()) from e

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for raw in self._proc.stdout:
            try:
                msg = json.loads(raw)
            except ValueError:
                continue
            if "method" in msg:
                if "id" in msg:  # a request of the server's (ping, roots): answer it
                    reply: dict[str, Any] = {"jsonrpc": "2.0", "id": msg["id"]}
                    if msg["method"] == "ping":
                        reply["result"] = {}
                    else:
                        reply["error"] = {"code": -32601, "message": "not supported"}
                    try:
                        self._send(reply)
                    except ServerError:
                        pass
                continue
            with self._lock:
                fut = self._pending.pop(msg.get("id"), None)
            if fut is None or fut.done():
                continue
            if "error" in msg:
                err = msg["error"]
                fut.set_exception(ServerError(f"{err.get('message')} (code {err.get('code')})"))
            else:
                fut.set_result(msg.get("result"))
        # The child's stdout closed: everything in flight fails.
        with self._lock:
            pending, self._pending = self._pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(ServerError(self._why_gone()))

    def _drain_stderr(self) -> None:
        assert self._proc.stderr is not None
        for raw in self._proc.stderr:
            self._stderr.append(raw.decode("utf-8", "replace").rstrip())

    def _why_gone(self) -> str:
        code = self._proc.poll()
        tail = "\n".join(self._stderr)
        state = "was closed" if self._closed else f"exited with {code}" if code is not None \
            else "stopped answering"
        return f"the toolyard server for {self.workspace} {state}" + (f":\n{tail}" if tail else "")

    def _start(self, method: str, params: dict) -> tuple[int, concurrent.futures.Future]:
        rid = next(self._ids)
        fut: concurrent.futures.Future = concurrent.futures.Future()
        with self._lock:
            self._pending[rid] = fut
        self._send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        return rid, fut

    def request_sync(self, method: str, params: dict, timeout: float | None = None) -> Any:
        """Send one request and wait for its answer (blocking)."""
        rid, fut = self._start(method, params)
        try:
            return fut.result(timeout)
        except concurrent.futures.TimeoutError:
            self.cancel(rid, "timed out")
            raise

    async def request(self, method: str, params: dict) -> Any:
        """Send one request and await its answer; cancelling the await cancels it on the server."""
        rid, fut = self._start(method, params)
        try:
            return await asyncio.wrap_future(fut)
        except asyncio.CancelledError:
            # A timeout (asyncio.wait_for) lands here: the server kills the command's tree.
            self.cancel(rid, "cancelled by the caller (timeout)")
            raise

    def cancel(self, rid: int, reason: str) -> None:
        """Tell the server to stop request `rid`."""
        with self._lock:
            self._pending.pop(rid, None)
        try:
            self._send({"jsonrpc": "2.0", "method": "notifications/cancelled",
                        "params": {"requestId": rid, "reason": reason}})
        except ServerError:
            pass

    # ---------------------------------------------------------------- API

    def list_tools(self) -> list[dict]:
        """The server's tools/list (MCP tool definitions)."""
        return self.request_sync("tools/list", {})["tools"]

    async def call(self, name: str, arguments: dict) -> dict:
        """tools/call: the MCP CallToolResult."""
        return await self.request("tools/call", {"name": name, "arguments": arguments})

    def call_sync(self, name: str, arguments: dict) -> dict:
        """tools/call, blocking."""
        return self.request_sync("tools/call", {"name": name, "arguments": arguments})

    @property
    def alive(self) -> bool:
        """True while the child runs and was not closed."""
        return not self._closed and self._proc.poll() is None

    def close(self) -> None:
        """End the child: close its stdin (the MCP way), then terminate it if it lingers."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                if self._proc.stdin:
                    self._proc.stdin.close()
            except OSError:
                pass
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
