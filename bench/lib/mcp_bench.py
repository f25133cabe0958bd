"""Benchmark 2: MCP tool calls over stdio, `toolyard serve` vs the reference filesystem server.

- toolyard:  `toolyard serve --workspace FIXTURE` (dialect loopr; sandboxed runner lanes)
- reference: `node .../@modelcontextprotocol/server-filesystem/dist/index.js FIXTURE`
             (installed with npm into bench/.work, run with node directly, not through npx)

| op     | toolyard                               | reference                              |
|--------|----------------------------------------|----------------------------------------|
| read   | read_file {path} (4 KB file)           | read_text_file {path}                  |
| list   | list_directory {path} (50 entries)     | list_directory {path}                  |
| search | glob {pattern, path} (500 files)       | search_files {path, pattern}           |
| edit   | edit_file {path, old_string, new_string} (read once at setup) | edit_file {path, edits} |

Both servers run at the same time and the calls alternate between them (pair by pair), so load
from elsewhere on the machine hits both alike. Figures:

- per call: the lean client (JSON-RPC lines on stdin/stdout, one call at a time) and the official
  MCP Python SDK client;
- calls per second with 1, 8 and 64 requests in flight: the lean client keeps N requests with
  distinct ids pipelined over the one stdio connection (a new one is sent as each answer comes
  back); the SDK client runs N concurrent tasks on one session;
- start-up: process spawn to the answer of the first tools/list (initialize handshake included);
- where toolyard's time goes: a bare `ping`, an unknown tool, and each op with `--inline`;
- with `TOOLYARD_OLD_BIN` set (bench/run sets it from `BENCH_OLD_COMMIT`): that binary too, served
  the same way and taking its turn in the same rotation, per call and in flight, as a new / old ratio.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from common import (REF_ENTRY, REF_PKG, Lean, loadavg, log, median, reference_serve, save, stamp, summary,
                    toolyard_env, toolyard_serve)
import os
import json

OPS = ["read", "list", "search", "edit"]
THROUGHPUT_OPS = ["read", "list", "search", "edit"]
INFLIGHT = [1, 8, 64]
# Edits in flight each change a file of their own (two edits of one file at once would race).
EDIT_FILES = max(INFLIGHT)
# An earlier binary to compare with, when set: served beside the others in the same run.
OLD_BIN = os.environ.get("TOOLYARD_OLD_BIN")


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
    # One file per server: both run at the same time.
    for name in ("edit_toolyard.txt", "edit_inline.txt", "edit_reference.txt", "edit_old.txt"):
        (root / name).write_text("header\nvalue = alpha\nfooter\n")
    for server in ("toolyard", "reference", "old"):
        d = root / f"pedit_{server}"
        d.mkdir()
        for k in range(EDIT_FILES):
            (d / f"e_{k:02}.txt").write_text("header\nvalue = alpha\nfooter\n")


def edit_call(server: str, prefix: str, k: int, n: int) -> tuple[str, dict]:
    """The n-th edit of in-flight slot k's own file: alpha -> beta, then back."""
    old, new = ("alpha", "beta") if n % 2 == 0 else ("beta", "alpha")
    path = f"{prefix}pedit_{server}/e_{k:02}.txt"
    if server == "reference":
        return "edit_file", {"path": path, "edits": [{"oldText": old, "newText": new}]}
    return "edit_file", {"path": path, "old_string": old, "new_string": new}


class Server:
    def __init__(self, name: str, argv: list[str], env: dict | None, calls: dict):
        self.name, self.argv, self.env, self.calls = name, argv, env, calls

    def op_calls(self, op: str) -> list[tuple[str, dict]]:
        spec = self.calls[op]
        return spec if isinstance(spec, list) else [spec]

    def start(self) -> Lean:
        c = Lean(self.argv, self.env)
        c.handshake()
        for tool, args in self.calls["setup"]:
            c.call(tool, args)
        return c


def servers(fixture: Path, state: Path, inline: bool = False, old: bool = False) -> tuple[Server, Server]:
    name = "inline" if inline else "old" if old else "toolyard"
    edit = f"edit_{name}.txt"
    argv = toolyard_serve(fixture, state, inline)
    if old:
        argv[0] = str(OLD_BIN)
    ours = Server(name, argv, toolyard_env(state), {
        # Read before edit: every file this session edits.
        "setup": [("read_file", {"path": edit})] + [
            ("read_file", {"path": f"pedit_{name}/e_{k:02}.txt"}) for k in range(0 if inline else EDIT_FILES)],
        "read": ("read_file", {"path": "file4k.txt"}),
        "list": ("list_directory", {"path": "dir50"}),
        "search": ("glob", {"pattern": "**/module_07.rs", "path": "search"}),
        "edit": [
            ("edit_file", {"path": edit, "old_string": "alpha", "new_string": "beta"}),
            ("edit_file", {"path": edit, "old_string": "beta", "new_string": "alpha"}),
        ],
    })
    f = str(fixture)
    ref = Server("reference", reference_serve(fixture), None, {
        "setup": [],
        "read": ("read_text_file", {"path": f"{f}/file4k.txt"}),
        "list": ("list_directory", {"path": f"{f}/dir50"}),
        "search": ("search_files", {"path": f"{f}/search", "pattern": "**/module_07.rs"}),
        "edit": [
            ("edit_file", {"path": f"{f}/edit_reference.txt", "edits": [{"oldText": "alpha", "newText": "beta"}]}),
            ("edit_file", {"path": f"{f}/edit_reference.txt", "edits": [{"oldText": "beta", "newText": "alpha"}]}),
        ],
    })
    return ours, ref


# ----------------------------------------------------------------------------------------------


def startup(srv: list[Server], runs: int) -> dict[str, dict]:
    times: dict[str, list[float]] = {s.name: [] for s in srv}
    for i in range(runs):
        for s in srv if i % 2 == 0 else reversed(srv):
            t0 = time.perf_counter()
            c = Lean(s.argv, s.env)
            c.handshake()
            tools = c.request("tools/list")
            times[s.name].append((time.perf_counter() - t0) * 1000)
            assert tools.get("tools"), f"{s.name}: empty tools/list"
            c.close()
    return {k: summary(v) for k, v in times.items()}


def per_call(srv: list[Server], iterations: int, warmup: int, tag: str = "lean") -> dict[str, dict[str, dict]]:
    """Per-call wall time of each op, the servers taking turns call by call (in rotating order)."""
    clients = {s.name: s.start() for s in srv}
    out: dict[str, dict[str, dict]] = {s.name: {} for s in srv}
    for op in OPS:
        samples: dict[str, list[float]] = {s.name: [] for s in srv}
        for i in range(warmup + iterations):
            k = i % len(srv)
            for s in srv[k:] + srv[:k]:
                calls = s.op_calls(op)
                tool, args = calls[i % len(calls)]
                t0 = time.perf_counter_ns()
                clients[s.name].call(tool, args)
                if i >= warmup:
                    samples[s.name].append((time.perf_counter_ns() - t0) / 1e6)
        for s in srv:
            out[s.name][op] = summary(samples[s.name])
        log(f"mcp {tag} {op}: " + ", ".join(f"{s.name} {median(samples[s.name]):.3f} ms" for s in srv))
    for c in clients.values():
        c.close()
    return out


def pipelined(c: Lean, calls: list[tuple[str, dict]] | None, inflight: int, seconds: float) -> float:
    """Calls per second with `inflight` requests pipelined on one connection (`None`: pings,
    which a server answers at once: the most this client and transport carry)."""
    pending: set[int] = set()
    sent = 0

    def send_one() -> None:
        nonlocal sent
        if calls is None:
            pending.add(c.send_request("ping"))
        else:
            tool, args = calls[sent % len(calls)]
            pending.add(c.send_request("tools/call", {"name": tool, "arguments": args}))
        sent += 1

    done = 0
    t0 = time.perf_counter()
    deadline = t0 + seconds
    for _ in range(inflight):
        send_one()
    while pending:
        reply = c.read_reply()
        rid = reply.get("id")
        if rid not in pending:
            continue
        pending.discard(rid)
        if "error" in reply or (calls is not None and reply["result"].get("isError")):
            raise RuntimeError(f"pipelined call failed: {json.dumps(reply)[:300]}")
        done += 1
        if time.perf_counter() < deadline:
            send_one()
    return done / (time.perf_counter() - t0)


def pipelined_edits(c: Lean, server: str, prefix: str, done: list[int], inflight: int, seconds: float) -> float:
    """Edits per second with `inflight` edits pipelined, each slot editing its own file and
    sending its next edit only when its last one answered; `done` counts each slot's edits
    across calls, so every edit finds the text the previous one left."""
    slot_of: dict[int, int] = {}

    def send(k: int) -> None:
        tool, args = edit_call(server, prefix, k, done[k])
        slot_of[c.send_request("tools/call", {"name": tool, "arguments": args})] = k

    count = 0
    t0 = time.perf_counter()
    deadline = t0 + seconds
    for k in range(inflight):
        send(k)
    while slot_of:
        reply = c.read_reply()
        k = slot_of.pop(reply.get("id"), None)
        if k is None:
            continue
        if "error" in reply or reply["result"].get("isError"):
            raise RuntimeError(f"pipelined edit failed: {json.dumps(reply)[:300]}")
        done[k] += 1
        count += 1
        if time.perf_counter() < deadline:
            send(k)
    return count / (time.perf_counter() - t0)


def throughput(srv: list[Server], seconds: float, fixture: Path) -> dict[str, dict[str, dict[str, float]]]:
    clients = {s.name: s.start() for s in srv}
    out: dict[str, dict[str, dict[str, float]]] = {s.name: {} for s in srv}
    edits = {s.name: [0] * EDIT_FILES for s in srv}
    for op in THROUGHPUT_OPS:
        for s in srv:
            out[s.name][op] = {}
        for n in INFLIGHT:
            for s in srv:
                c = clients[s.name]
                if op == "edit":
                    prefix = f"{fixture}/" if s.name == "reference" else ""
                    run = lambda t: pipelined_edits(c, s.name, prefix, edits[s.name], n, t)  # noqa: E731
                else:
                    run = lambda t: pipelined(c, s.op_calls(op), n, t)  # noqa: E731
                run(min(0.2, seconds))  # warm-up
                out[s.name][op][str(n)] = run(seconds)
            log(f"mcp pipelined {op} x{n}: " + ", ".join(f"{s.name} {out[s.name][op][str(n)]:.0f}/s" for s in srv))
    # The ceiling: pings answered at once, as many in flight as the most above.
    n = max(INFLIGHT)
    for s in srv:
        pipelined(clients[s.name], None, n, min(0.2, seconds))
        out[s.name]["ping"] = {str(n): pipelined(clients[s.name], None, n, seconds)}
    log(f"mcp pipelined ping x{n}: " + ", ".join(f"{s.name} {out[s.name]['ping'][str(n)]:.0f}/s" for s in srv))
    for c in clients.values():
        c.close()
    return out


def layer(ours: Server, iterations: int, warmup: int) -> dict[str, dict]:
    """The MCP layer alone: a ping, and a tools/call the dispatcher refuses at once."""
    out: dict[str, dict] = {}
    c = ours.start()
    for name, method, params in [
        ("ping", "ping", None),
        ("unknown_tool", "tools/call", {"name": "no_such_tool", "arguments": {}}),
    ]:
        samples = []
        for i in range(warmup + iterations):
            t0 = time.perf_counter_ns()
            c.request(method, params)
            if i >= warmup:
                samples.append((time.perf_counter_ns() - t0) / 1e6)
        out[name] = summary(samples)
    c.close()
    return out


# ----------------------------------------------------------------------------------------------
# The official Python SDK client


def busy_read(ours: Server, iterations: int, warmup: int, commands: int = 8) -> dict[str, dict]:
    """A read's latency idle, then while `commands` long commands run on the same connection."""
    c = ours.start()
    tool, args = ours.op_calls("read")[0]

    def reads() -> list[float]:
        out = []
        for i in range(warmup + iterations):
            t0 = time.perf_counter_ns()
            rid = c.send_request("tools/call", {"name": tool, "arguments": args})
            while c.read_reply().get("id") != rid:
                pass
            if i >= warmup:
                out.append((time.perf_counter_ns() - t0) / 1e6)
        return out

    idle = reads()
    for _ in range(commands):
        c.send_request("tools/call", {"name": "run_command", "arguments": {"command": "sleep 60"}})
    time.sleep(1.0)  # let every command start in its runner
    busy = reads()
    c.close()
    log(f"mcp read while {commands} commands run: idle {median(idle):.3f} ms, busy {median(busy):.3f} ms")
    return {"idle": summary(idle), "busy": summary(busy), "commands": commands}


def sdk_available() -> bool:
    try:
        import anyio  # noqa: F401
        from mcp import Client  # noqa: F401
        from mcp.client.stdio import StdioServerParameters  # noqa: F401
    except ImportError:
        return False
    return True


def sdk_version() -> str:
    try:
        from importlib.metadata import version

        return version("mcp")
    except Exception:
        return "?"


def sdk_bench(srv: list[Server], iterations: int, warmup: int, seconds: float) -> dict:
    import anyio
    from contextlib import AsyncExitStack

    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    async def call(client, server: Server, tool: str, args: dict) -> None:
        r = await client.call_tool(tool, args)
        if r.is_error:
            raise RuntimeError(f"{server.name} {tool} failed via the SDK")

    async def run() -> dict:
        out: dict = {"per_call": {s.name: {} for s in srv}, "throughput": {s.name: {} for s in srv}}
        async with AsyncExitStack() as stack:
            clients = {}
            for s in srv:
                params = StdioServerParameters(command=s.argv[0], args=s.argv[1:], env=s.env or dict(os.environ))
                client = await stack.enter_async_context(Client(params, mode="legacy"))
                for tool, args in s.calls["setup"]:
                    await call(client, s, tool, args)
                clients[s.name] = client
            for op in OPS:
                samples: dict[str, list[float]] = {s.name: [] for s in srv}
                for i in range(warmup + iterations):
                    for s in srv if i % 2 == 0 else list(reversed(srv)):
                        calls = s.op_calls(op)
                        tool, args = calls[i % len(calls)]
                        t0 = time.perf_counter_ns()
                        await call(clients[s.name], s, tool, args)
                        if i >= warmup:
                            samples[s.name].append((time.perf_counter_ns() - t0) / 1e6)
                for s in srv:
                    out["per_call"][s.name][op] = summary(samples[s.name])
                log(f"mcp sdk {op}: " + ", ".join(f"{s.name} {median(samples[s.name]):.3f} ms" for s in srv))
            # Concurrent calls on one session: N tasks, each calling in a loop until the deadline.
            for n in INFLIGHT:
                for s in srv:
                    tool, args = s.op_calls("read")[0]
                    done = 0
                    deadline = time.perf_counter() + seconds
                    t0 = time.perf_counter()

                    async def worker() -> None:
                        nonlocal done
                        while time.perf_counter() < deadline:
                            await call(clients[s.name], s, tool, args)
                            done += 1

                    async with anyio.create_task_group() as tg:
                        for _ in range(n):
                            tg.start_soon(worker)
                    out["throughput"][s.name][str(n)] = done / (time.perf_counter() - t0)
                log(f"mcp sdk read x{n}: " + ", ".join(f"{s.name} {out['throughput'][s.name][str(n)]:.0f}/s" for s in srv))
        return out

    return anyio.run(run)


def reference_version() -> str:
    try:
        pkg = REF_ENTRY.parents[1] / "package.json"
        return json.loads(pkg.read_text())["version"]
    except (OSError, KeyError, ValueError):
        return "?"


def run(iterations: int = 300, warmup: int = 20, sdk_iterations: int = 100, startup_runs: int = 21,
        seconds: float = 1.5) -> dict:
    data = stamp()
    data.update(iterations=iterations, warmup=warmup, sdk_iterations=sdk_iterations, startup_runs=startup_runs,
                throughput_seconds=seconds, reference_version=reference_version(), reference_package=REF_PKG)
    with tempfile.TemporaryDirectory(prefix="toolyard-bench-") as tmp:
        fixture, state = Path(tmp) / "fixture", Path(tmp) / "state"
        state.mkdir()
        make_fixture(fixture)
        ours, ref = servers(fixture, state)
        ours_inline, _ = servers(fixture, state, inline=True)
        srv = [ours, ref]
        old = None
        if OLD_BIN:
            (Path(tmp) / "state-old").mkdir()
            old, _ = servers(fixture, Path(tmp) / "state-old", old=True)
            data["old_binary"] = OLD_BIN
            data["old_commit"] = os.environ.get("BENCH_OLD_COMMIT", "?")
        log("mcp: start-up")
        data["startup"] = startup(srv, startup_runs)
        log(f"mcp start-up: toolyard {data['startup']['toolyard']['median']:.1f} ms, "
            f"reference {data['startup']['reference']['median']:.1f} ms")
        exe = []
        for _ in range(startup_runs):
            t0 = time.perf_counter()
            subprocess.run([ours.argv[0], "--version"], stdout=subprocess.DEVNULL, check=True)
            exe.append((time.perf_counter() - t0) * 1000)
        data["exec_only"] = summary(exe)
        # toolyard --inline takes its turn too: where toolyard's time goes, pair by pair.
        lean = per_call([ours, ref, ours_inline] + ([old] if old else []), iterations, warmup)
        data["lean"] = {"toolyard": lean["toolyard"], "reference": lean["reference"]}
        data["pipelined"] = throughput(srv + ([old] if old else []), seconds, fixture)
        if old:
            data["old"] = {"lean": lean.pop("old"), "pipelined": data["pipelined"].pop("old")}
            log("mcp new / old: " + ", ".join(
                f"{op} {lean['toolyard'][op]['median'] / data['old']['lean'][op]['median']:.2f}x per call, "
                f"{data['pipelined']['toolyard'][op]['64'] / data['old']['pipelined'][op]['64']:.2f}x at 64"
                for op in THROUGHPUT_OPS))
        data["busy_read"] = busy_read(ours, iterations, warmup)
        log("mcp: the MCP layer alone (ping, unknown tool)")
        data["breakdown"] = layer(ours, iterations, warmup)
        for op, v in lean["inline"].items():
            data["breakdown"][f"inline_{op}"] = v
        if sdk_available():
            data["sdk_version"] = sdk_version()
            sdk = sdk_bench(srv, sdk_iterations, warmup, seconds)
            data["sdk"] = sdk["per_call"]
            data["sdk_throughput"] = sdk["throughput"]
        else:
            data["sdk"] = None
            log("mcp: the Python MCP SDK is not installed; SDK figures skipped")
    data["load_end"] = loadavg()
    save("mcp", data)
    return data
