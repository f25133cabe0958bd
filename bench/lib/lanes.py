"""Benchmark 3: command overhead per lane vs a plain spawn, and vs bwrap doing the same isolation.

The core figures come from crates/toolyard/examples/lane_bench.rs (the dispatcher in process, its
runners sandboxed once at start; every round runs every variant once, in rotating order). Added
here: the same `run_command_isolated "true"` through `toolyard serve` with the lean MCP client,
so the MCP layer's share is visible too.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from pathlib import Path

from common import LANE_BENCH, Lean, loadavg, log, save, stamp, summary, toolyard_env, toolyard_serve


def run(rounds: int = 200) -> dict:
    data = stamp()
    log(f"lanes: lane_bench, {rounds} rounds")
    p = subprocess.run([str(LANE_BENCH), str(rounds)], capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"lane_bench failed: {p.stderr[-2000:]}")
    data.update(json.loads(p.stdout))
    r = data["results"]
    log("lanes: " + ", ".join(f"{k} {v['median_ms']:.2f} ms" for k, v in r.items()))

    log("lanes: run_command_isolated through toolyard serve")
    with tempfile.TemporaryDirectory(prefix="toolyard-bench-") as tmp:
        ws, state = Path(tmp) / "ws", Path(tmp) / "state"
        ws.mkdir()
        c = Lean(toolyard_serve(ws, state), toolyard_env(state))
        c.handshake()
        samples = []
        for i in range(20 + rounds):
            t0 = time.perf_counter_ns()
            c.call("run_command_isolated", {"command": "true"})
            if i >= 20:
                samples.append((time.perf_counter_ns() - t0) / 1e6)
        c.close()
    s = summary(samples)
    data["results"]["mcp_no_net"] = {"median_ms": s["median"], "p10_ms": s["p10"], "p90_ms": s["p90"], "n": s["n"],
                                     "label": "toolyard `run_command_isolated \"true\"` through `toolyard serve` (lean MCP client)"}
    data["load_end"] = loadavg()
    save("lanes", data)
    return data


def bwrap_version() -> str:
    try:
        return subprocess.run(["bwrap", "--version"], capture_output=True, text=True).stdout.strip() or "?"
    except OSError:
        return "not installed"
