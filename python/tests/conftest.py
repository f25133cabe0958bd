"""Fixtures: a workspace, a private state dir and home, a registry of Toolyard's tools.

Run against the installed package (the wheel, in CI) or, in a checkout, with PYTHONPATH=python
and TOOLYARD_BIN pointing at a built binary.
"""

from __future__ import annotations

import asyncio
import struct
import zlib
from pathlib import Path

import pytest

import toolyard


def pytest_report_header(config):
    return [f"toolyard package: {Path(toolyard.__file__).parent}",
            f"toolyard binary: {toolyard.find_toolyard_bin()}"]


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty workspace; the engine's state dir and HOME in temp dirs, never the real ones."""
    state = tmp_path / "state"
    home = tmp_path / "home"
    state.mkdir()
    home.mkdir()
    monkeypatch.setenv("TOOLYARD_STATE_DIR", str(state))
    monkeypatch.setenv("HOME", str(home))
    w = tmp_path / "ws"
    w.mkdir()
    return w


@pytest.fixture
def registry(ws: Path):
    """Toolyard's built-in tools (dialect loom-py, seed 002's names)."""
    reg = toolyard.ToolRegistry.with_builtins()
    yield reg
    reg.close()


def run(coro):
    """Run one coroutine (each test its own event loop, as a script's asyncio.run would)."""
    return asyncio.run(coro)


def png(width: int, height: int) -> bytes:
    """A valid RGB PNG of one colour."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(
            ">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    raw = b"".join(b"\x00" + b"\x10\x80\xf0" * width for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
