"""Real agents of each framework, with Toolyard as their tools (`toolyard serve`, stdio MCP) and
a scripted model on 127.0.0.1: what the model received for a read, a grep, an edit, a failed
edit, a command's head and tail, and an image. Each also runs through a proxy that drops the
results' text, and must then fail (the checks see what the model got, not that a call ran)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import struct
import subprocess
import sys
import uuid
import zlib
from pathlib import Path

import pytest

from agents_py import PYTHON
from model_server import ModelServer
from received import SCRIPT, problems

HERE = Path(__file__).resolve().parent
JS = ["vercel-ai", "openai-agents-js"]


def toolyard_bin() -> str:
    if os.environ.get("TOOLYARD_BIN"):
        return os.environ["TOOLYARD_BIN"]
    import toolyard

    return toolyard.find_toolyard_bin()


def png(width: int, height: int) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(
            ">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    raw = b"".join(b"\x00" + b"\xff\x00\x00" * width for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for d in ("state", "home", "ws"):
        (tmp_path / d).mkdir()
    monkeypatch.setenv("TOOLYARD_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("OPENAI_AGENTS_DISABLE_TRACING", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    w = tmp_path / "ws"
    (w / "notes.txt").write_text("alpha\nbeta\n")
    (w / "dot.png").write_bytes(png(3, 2))
    return w


def server_argv(framework: str, ws: Path, broken: bool) -> list[str]:
    argv = [toolyard_bin(), "serve", "-w", str(ws)]
    if framework == "langgraph":
        # Its quick-start form starts a server per tool call: one named session keeps the
        # read ledger from the read to the edit.
        argv += ["--session", f"langgraph-{uuid.uuid4().hex[:8]}"]
    if broken:
        argv = [sys.executable, str(HERE / "mcp_proxy.py"), "--", *argv]
    return argv


def run_framework(framework: str, base_url: str, argv: list[str]) -> None:
    if framework in PYTHON:
        asyncio.run(asyncio.wait_for(PYTHON[framework](base_url, argv), 300))
        return
    node = shutil.which("node")
    assert node, "node is needed for the TypeScript frameworks"
    out = subprocess.run([node, str(HERE / "agents_js.mjs"), framework, base_url, json.dumps(argv)],
                         capture_output=True, text=True, timeout=300, cwd=HERE)
    assert out.returncode == 0, f"{framework} failed:\n{out.stdout}\n{out.stderr}"


@pytest.mark.parametrize("framework", [*PYTHON, *JS])
def test_model_receives_what_toolyard_returned(framework: str, ws: Path):
    model = ModelServer(SCRIPT, str(ws.parent / "requests.jsonl"))
    try:
        run_framework(framework, model.base_url, server_argv(framework, ws, broken=False))
    finally:
        model.close()
    found = problems(model.requests)
    assert not found, f"{framework}: the model did not receive:\n" + "\n".join(found)
    assert (ws / "notes.txt").read_text() == "alpha\ngamma\n"


@pytest.mark.parametrize("framework", [*PYTHON, *JS])
def test_a_proxy_dropping_the_text_fails_the_checks(framework: str, ws: Path):
    model = ModelServer(SCRIPT)
    try:
        try:
            run_framework(framework, model.base_url, server_argv(framework, ws, broken=True))
        except Exception as e:  # noqa: BLE001 - a framework may also give up: that is a failure too
            print(f"{framework} through the broken proxy raised {e!r}")
    finally:
        model.close()
    found = problems(model.requests)
    # The read's lines and the grep's match are missing, whether the framework passed the
    # empty result on or refused it.
    assert any(p.startswith("step 0 ") for p in found), found
    assert any(p.startswith("step 1 ") for p in found), found


def test_langgraph_quick_start_needs_a_session_name(ws: Path):
    """Without `serve --session`, the adapter's server per call makes every call a new session:
    the read licenses nothing and the edit is refused as unread (why the README says to name
    one)."""
    model = ModelServer(SCRIPT)
    try:
        argv = [toolyard_bin(), "serve", "-w", str(ws)]
        run_framework("langgraph", model.base_url, argv)
    finally:
        model.close()
    found = problems(model.requests)
    assert any(p.startswith("step 2 ") and "has not been read" in p for p in found), found
    assert (ws / "notes.txt").read_text() == "alpha\nbeta\n"
