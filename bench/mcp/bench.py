#!/usr/bin/env python3
"""Tool-call round trips over stdio: `toolyard serve` vs the reference filesystem MCP server.

Both servers run in the same run on the same fixture tree:

- toolyard:  `toolyard serve --workspace FIXTURE` (dialect loopr; sandboxed runner lanes)
- reference: `node .../@modelcontextprotocol/server-filesystem/dist/index.js FIXTURE`
             (installed with npm into bench/.work, run with node directly, not through npx)

Operations (the reference's tool names differ; the closest equivalent is used):

| op     | toolyard                               | reference                              |
|--------|----------------------------------------|----------------------------------------|
| read   | read_file {path} (4 KB file)           | read_text_file {path}                  |
| list   | list_directory {path} (50 entries)     | list_directory {path}                  |
| search | glob {pattern, path} (~500 files)      | search_files {path, pattern}           |
| edit   | edit_file {path, old_string, new_string} (read once at setup) | edit_file {path, edits} |

Measured with a lean client: JSON-RPC lines written to the server's stdin, the answer read from
its stdout, per-call wall time; then the same calls through the official MCP Python SDK client.
Also the start-up time: process spawn to the answer of the first tools/list.

Writes its section of bench/RESULTS.md between `<!-- mcp:start -->` and `<!-- mcp:end -->`.

    python3 bench/mcp/bench.py [--iterations 300] [--sdk-iterations 100] [--no-write]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
WORK = REPO / "bench" / ".work"
RESULTS = REPO / "bench" / "RESULTS.md"
START, END = "<!-- mcp:start -->", "<!-- mcp:end -->"
REF_PKG = "@modelcontextprotocol/server-filesystem"
OPS = ["read", "list", "search", "edit"]


# ----------------------------------------------------------------------------------------------
# Fixture


def make_fixture(root: Path) -> None:
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    line = "The quick brown fox jumps over the lazy dog; 0123456789 abcdefghij.\n"  # 68 bytes
    (root / "file4k.txt").write_text((line * 61)[:4096])
    d50 = root / "dir50"
    d50.mkdir()
    for i in range(40):
        (d50 / f"file_{i:02}.txt").write_text(f"file {i}\n")
    for i in range(10):
        (d50 / f"sub_{i:02}").mkdir()
    search = root / "search"
    for d in range(25):
        sub = search / f"pkg_{d:02}"
        sub.mkdir(parents=True)
        for f in range(20):
            (sub / f"module_{f:02}.rs").write_text(f"// module {d}/{f}\nfn f() {{}}\n")
    (root / "edit.txt").write_text("header\nvalue = alpha\nfooter\n")


# ----------------------------------------------------------------------------------------------
# Servers


def toolyard_bin() -> str:
    if os.environ.get("TOOLYARD_BIN"):
        return os.environ["TOOLYARD_BIN"]
    for profile in ("release", "debug"):
        p = REPO / "target" / profile / "toolyard"
        if p.exists():
            return str(p)
    sys.exit("no toolyard binary: cargo build --release -p toolyard (or set TOOLYARD_BIN)")


def reference_entry() -> Path:
    entry = WORK / "node_modules" / REF_PKG / "dist" / "index.js"
    if not entry.exists():
        WORK.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["npm", "install", "--silent", "--no-audit", "--no-fund", "--prefix", str(WORK), REF_PKG],
            check=True,
        )
    return entry


def reference_version() -> str:
    try:
        pkg = WORK / "node_modules" / REF_PKG / "package.json"
        return json.loads(pkg.read_text())["version"]
    except (OSError, KeyError, ValueError):
        return "?"


class Server:
    """One server under test: how to start it and how to phrase each operation."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], calls: dict[str, object]):
        self.name, self.argv, self.env, self.calls = name, argv, env, calls


def servers(fixture: Path, state: Path) -> list[Server]:
    env = dict(os.environ, TOOLYARD_STATE_DIR=str(state), TOOLYARD_LOG="error")
    ours = Server(
        "toolyard",
        [toolyard_bin(), "serve", "--workspace", str(fixture)],
        env,
        {
            "setup": [("read_file", {"path": "edit.txt"})],
            "read": ("read_file", {"path": "file4k.txt"}),
            "list": ("list_directory", {"path": "dir50"}),
            "search": ("glob", {"pattern": "**/module_07.rs", "path": "search"}),
            "edit": [
                ("edit_file", {"path": "edit.txt", "old_string": "alpha", "new_string": "beta"}),
                ("edit_file", {"path": "edit.txt", "old_string": "beta", "new_string": "alpha"}),
            ],
        },
    )
    f = str(fixture)
    ref = Server(
        "reference",
        ["node", str(reference_entry()), f],
        dict(os.environ),
        {
            "setup": [],
            "read": ("read_text_file", {"path": f"{f}/file4k.txt"}),
            "list": ("list_directory", {"path": f"{f}/dir50"}),
            "search": ("search_files", {"path": f"{f}/search", "pattern": "**/module_07.rs"}),
            "edit": [
                ("edit_file", {"path": f"{f}/edit.txt", "edits": [{"oldText": "alpha", "newText": "beta"}]}),
                ("edit_file", {"path": f"{f}/edit.txt", "edits": [{"oldText": "beta", "newText": "alpha"}]}),
            ],
        },
    )
    return [ours, ref]


# ----------------------------------------------------------------------------------------------
# Lean client: JSON-RPC lines on stdin/stdout


class Lean:
    def __init__(self, server: Server):
        self.proc = subprocess.Popen(
            server.argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=server.env,
        )
        self.next_id = 0

    def send(self, msg: dict) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(msg, separators=(",", ":")).encode() + b"\n")
        self.proc.stdin.flush()

    def request(self, method: str, params: dict | None = None) -> dict:
        self.next_id += 1
        msg = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
        if params is not None:
            msg["params"] = params
        self.send(msg)
        assert self.proc.stdout is not None
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"server closed stdout during {method}")
            reply = json.loads(line)
            if reply.get("id") == self.next_id and "method" not in reply:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]

    def handshake(self) -> None:
        self.request(
            "initialize",
            {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "lean-bench", "version": "1"}},
        )
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def call(self, tool: str, args: dict) -> dict:
        result = self.request("tools/call", {"name": tool, "arguments": args})
        if result.get("isError"):
            text = "".join(c.get("text", "") for c in result.get("content", []))
            raise RuntimeError(f"{tool} failed: {text[:300]}")
        return result

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def startup_ms(server: Server, runs: int) -> float:
    """Median time from spawn to the answer of the first tools/list."""
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        c = Lean(server)
        c.handshake()
        tools = c.request("tools/list")
        times.append((time.perf_counter() - t0) * 1000)
        assert tools.get("tools"), f"{server.name}: empty tools/list"
        c.close()
    return statistics.median(times)


def op_calls(server: Server, op: str) -> list[tuple[str, dict]]:
    spec = server.calls[op]
    return spec if isinstance(spec, list) else [spec]  # type: ignore[return-value]


def lean_round_trips(server: Server, iterations: int, warmup: int) -> dict[str, float]:
    c = Lean(server)
    c.handshake()
    for tool, args in server.calls["setup"]:  # type: ignore[union-attr]
        c.call(tool, args)
    out = {}
    for op in OPS:
        calls = op_calls(server, op)
        for i in range(warmup):
            c.call(*calls[i % len(calls)])
        samples = []
        for i in range(iterations):
            tool, args = calls[i % len(calls)]
            t0 = time.perf_counter_ns()
            c.call(tool, args)
            samples.append((time.perf_counter_ns() - t0) / 1e6)
        out[op] = statistics.median(samples)
    c.close()
    return out


def breakdown(server: Server, iterations: int, warmup: int) -> dict[str, float]:
    """Where toolyard's time goes: the bare MCP layer, and each op without the runner hop."""
    out: dict[str, float] = {}
    c = Lean(server)
    c.handshake()
    for name, method, params in [
        ("ping", "ping", None),
        ("unknown_tool", "tools/call", {"name": "no_such_tool", "arguments": {}}),
    ]:
        for _ in range(warmup):
            c.request(method, params)
        samples = []
        for _ in range(iterations):
            t0 = time.perf_counter_ns()
            c.request(method, params)
            samples.append((time.perf_counter_ns() - t0) / 1e6)
        out[name] = statistics.median(samples)
    c.close()
    inline = Server(server.name, server.argv + ["--inline"], server.env, server.calls)
    for op, v in lean_round_trips(inline, iterations, warmup).items():
        out[f"inline_{op}"] = v
    return out


# ----------------------------------------------------------------------------------------------
# The official SDK client, for comparison


def sdk_round_trips(server: Server, iterations: int, warmup: int) -> dict[str, float] | None:
    try:
        import anyio
        from mcp import Client
        from mcp.client.stdio import StdioServerParameters
    except ImportError:
        return None

    async def run() -> dict[str, float]:
        params = StdioServerParameters(command=server.argv[0], args=server.argv[1:], env=server.env)
        out = {}
        async with Client(params, mode="legacy") as client:
            for tool, args in server.calls["setup"]:  # type: ignore[union-attr]
                await client.call_tool(tool, args)
            for op in OPS:
                calls = op_calls(server, op)
                for i in range(warmup):
                    await client.call_tool(*calls[i % len(calls)])
                samples = []
                for i in range(iterations):
                    tool, args = calls[i % len(calls)]
                    t0 = time.perf_counter_ns()
                    r = await client.call_tool(tool, args)
                    samples.append((time.perf_counter_ns() - t0) / 1e6)
                    if r.is_error:
                        raise RuntimeError(f"{server.name} {tool} failed via SDK")
                out[op] = statistics.median(samples)
        return out

    return anyio.run(run)


# ----------------------------------------------------------------------------------------------
# Report


def fmt_ms(v: float) -> str:
    return f"{v:.3f}" if v < 10 else f"{v:.1f}"


def report(args, lean: dict, sdk: dict, start: dict, parts: dict) -> str:
    ours, ref = lean["toolyard"], lean["reference"]
    targets = {"read": 5.0, "list": 5.0, "search": 10.0, "edit": 1.0}
    lines = [
        START,
        "## MCP tool-call round trips (stdio): toolyard serve vs the reference filesystem server",
        "",
        f"Measured by `python3 bench/mcp/bench.py` on {time.strftime('%Y-%m-%d')}; "
        f"{platform.machine()}, {os.cpu_count()} CPUs, Linux {platform.release()}, load average "
        f"{os.getloadavg()[0]:.1f} at the end (other work on the machine makes these figures noisy); "
        f"toolyard `{Path(toolyard_bin()).relative_to(REPO) if Path(toolyard_bin()).is_relative_to(REPO) else toolyard_bin()}`, "
        f"reference `{REF_PKG}` {reference_version()} run with `node` directly. "
        f"Medians of {args.iterations} calls (after {args.warmup} warm-up calls) per operation, both servers in the same run, "
        "same fixture (a 4 KB file, a directory of 50 entries, 500 files in 25 directories).",
        "",
        "Lean client (JSON-RPC lines on stdin/stdout, per-call wall time):",
        "",
        "| operation | toolyard (ms) | reference (ms) | reference / toolyard | target | met |",
        "|---|---:|---:|---:|---|---|",
    ]
    names = {
        "read": "read 4 KB (`read_file` / `read_text_file`)",
        "list": "list 50 entries (`list_directory`)",
        "search": "file search over 500 files (`glob` / `search_files`)",
        "edit": "edit (`edit_file`; ours journaled + fsynced)",
    }
    for op in OPS:
        ratio = ref[op] / ours[op] if ours[op] else float("inf")
        t = targets[op]
        target = "no slower" if op == "edit" else f">= {t:.0f}x"
        lines.append(
            f"| {names[op]} | {fmt_ms(ours[op])} | {fmt_ms(ref[op])} | {ratio:.1f}x | {target} | {'yes' if ratio >= t else 'NO'} |"
        )
    lines += [
        "",
        "Start-up, process spawn to the answer of the first `tools/list` (median of "
        f"{args.startup_runs} starts):",
        "",
        "| server | ms | target |",
        "|---|---:|---|",
        f"| toolyard | {start['toolyard']:.1f} | < 20 ms: {'met' if start['toolyard'] < 20 else 'NOT met'} |",
        f"| reference (node, direct) | {start['reference']:.1f} | |",
        "",
    ]
    if parts:
        lines += [
            "Where toolyard's time goes (lean client, medians): the MCP layer alone is a `ping` "
            f"({fmt_ms(parts['ping'])} ms) or a `tools/call` the dispatcher answers at once, an unknown tool "
            f"({fmt_ms(parts['unknown_tool'])} ms). The same operations with `--inline` (in process, no runner "
            "hop, no sandbox), against the default sandboxed lanes:",
            "",
            "| operation | lanes (ms) | inline (ms) | runner hop (ms) |",
            "|---|---:|---:|---:|",
        ]
        for op in OPS:
            lanes, inl = ours[op], parts[f"inline_{op}"]
            lines.append(f"| {op} | {fmt_ms(lanes)} | {fmt_ms(inl)} | {fmt_ms(lanes - inl)} |")
        lines.append("")
    if sdk:
        lines += [
            f"Official MCP Python SDK client (`mcp` {sdk_version()}), the same calls, medians of {args.sdk_iterations}:",
            "",
            "| operation | toolyard (ms) | reference (ms) | reference / toolyard |",
            "|---|---:|---:|---:|",
        ]
        for op in OPS:
            o, r = sdk["toolyard"][op], sdk["reference"][op]
            lines.append(f"| {op} | {fmt_ms(o)} | {fmt_ms(r)} | {r / o:.1f}x |")
        lines.append("")
    lines.append(END)
    return "\n".join(lines)


def sdk_version() -> str:
    try:
        from importlib.metadata import version

        return version("mcp")
    except Exception:
        return "?"


def write_section(section: str) -> None:
    text = RESULTS.read_text() if RESULTS.exists() else "# Benchmark results\n"
    if START in text and END in text:
        head, rest = text.split(START, 1)
        _, tail = rest.split(END, 1)
        text = head + section + tail
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    RESULTS.write_text(text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iterations", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--sdk-iterations", type=int, default=100)
    ap.add_argument("--startup-runs", type=int, default=15)
    ap.add_argument("--no-sdk", action="store_true")
    ap.add_argument("--no-write", action="store_true", help="print the section instead of writing RESULTS.md")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="toolyard-bench-") as tmp:
        fixture = Path(tmp) / "fixture"
        state = Path(tmp) / "state"
        state.mkdir()
        make_fixture(fixture)
        srv = servers(fixture, state)
        start = {s.name: startup_ms(s, args.startup_runs) for s in srv}
        lean = {s.name: lean_round_trips(s, args.iterations, args.warmup) for s in srv}
        parts = breakdown(srv[0], args.iterations, args.warmup)
        sdk = {}
        if not args.no_sdk:
            for s in srv:
                r = sdk_round_trips(s, args.sdk_iterations, args.warmup)
                if r is None:
                    sdk = {}
                    break
                sdk[s.name] = r
    section = report(args, lean, sdk, start, parts)
    print(section)
    if not args.no_write:
        write_section(section)
        print(f"\nwrote {RESULTS.relative_to(REPO)}", file=sys.stderr)


if __name__ == "__main__":
    main()
