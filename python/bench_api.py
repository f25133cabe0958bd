#!/usr/bin/env python3
"""Per-call cost of a 4 KB `read_file` through seed 002's Python API (`ToolRegistry.execute`)
against the MCP path it rides on (JSON-RPC lines to the same `toolyard serve`), and through the
official MCP Python SDK when it is installed. Median of N calls after warm-up, in ms.

Usage: python bench_api.py [N]   (TOOLYARD_BIN or the installed wheel's binary; prints Markdown)
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import toolyard  # noqa: E402
from toolyard._client import McpClient  # noqa: E402

N = int(sys.argv[1]) if len(sys.argv) > 1 else 300
WARM = 20


def stats(samples: list[float]) -> str:
    q = statistics.quantiles(samples, n=10)
    return f"{statistics.median(samples) * 1000:.3f} ({q[0] * 1000:.3f}–{q[-1] * 1000:.3f})"


def main() -> None:
    tmp = Path(tempfile.mkdtemp())
    os.environ["TOOLYARD_STATE_DIR"] = str(tmp / "state")
    ws = tmp / "ws"
    ws.mkdir()
    (ws / "f.txt").write_text("".join(f"line {i:03d} " + "x" * 56 + "\n" for i in range(61)))
    args = {"path": "f.txt"}
    rows = []

    # The MCP path: JSON-RPC lines on the child's stdin/stdout, blocking, no asyncio.
    c = McpClient(ws, dialect="loom-py")
    for _ in range(WARM):
        c.call_sync("read_file", args)
    t = []
    for _ in range(N):
        s = time.perf_counter()
        c.call_sync("read_file", args)
        t.append(time.perf_counter() - s)
    rows.append(("MCP, lean JSON-RPC client (blocking)", t))
    t = []
    for _ in range(N):
        s = time.perf_counter()
        c.request_sync("ping", {})
        t.append(time.perf_counter() - s)
    rows.append(("MCP `ping` on the same pipe (transport only)", t))
    c.close()

    # Seed 002's API: validation, timeout (asyncio.wait_for), the ToolResult mapping.
    reg = toolyard.ToolRegistry.with_builtins()

    async def api() -> list[float]:
        for _ in range(WARM):
            await reg.execute("read_file", args, workspace=ws)
        out = []
        for _ in range(N):
            s = time.perf_counter()
            r = await reg.execute("read_file", args, workspace=ws)
            out.append(time.perf_counter() - s)
            assert r.success
        return out

    rows.append(("`ToolRegistry.execute` (seed 002 API)", asyncio.run(api())))
    reg.close()

    try:
        from mcp import ClientSession, StdioServerParameters
        from mcp.client.stdio import stdio_client
    except ImportError:
        ClientSession = None
    if ClientSession is not None:
        async def sdk() -> list[float]:
            params = StdioServerParameters(command=toolyard.find_toolyard_bin(),
                                           args=["serve", "-w", str(ws), "--dialect", "loom-py"],
                                           env=dict(os.environ))
            async with stdio_client(params) as (r, w), ClientSession(r, w) as session:
                await session.initialize()
                for _ in range(WARM):
                    await session.call_tool("read_file", args)
                out = []
                for _ in range(N):
                    s = time.perf_counter()
                    await session.call_tool("read_file", args)
                    out.append(time.perf_counter() - s)
                return out
        from importlib.metadata import version

        rows.append((f"official MCP Python SDK `ClientSession.call_tool` (mcp {version('mcp')})",
                     asyncio.run(sdk())))

    print(f"| path | ms per call, median (p10–p90), {N} calls |")
    print("|---|---|")
    for name, samples in rows:
        print(f"| {name} | {stats(samples)} |")


if __name__ == "__main__":
    main()
