"""Benchmark 4: peak memory of `toolyard serve` while a command prints 1 GiB, and while grep runs
over the large tree.

Every measurement starts a fresh server (peak RSS, VmHWM, only grows), makes the one call, and
then reads VmHWM from /proc of the server process and of each of its runner processes (in lanes
mode a command's output is captured by the runner of its lane; with --inline by the server
itself). The baseline is the server's VmHWM right after the MCP handshake.

References: the command alone (`sh -c CMD > /dev/null`), and for grep, rg over the same tree
and Toolyard's engine uncapped (search_bench), their peak RSS from wait4().
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from common import (RG, SEARCH_BENCH, TREE, Lean, loadavg, log, median, result_text, run_measured, save, stamp,
                    toolyard_env, toolyard_processes, toolyard_serve, vm_kib)
from grep_glob import RG_FLAGS

GIB_CMD = "head -c 1073741824 /dev/zero | tr '\\0' 'a'"
GREP_CASES = [("rare", "ZQX_NO_SUCH_TOKEN_QXZ"), ("many", "unsafe")]


def measure_call(workspace: Path, state: Path, inline: bool, tool: str, args: dict) -> dict:
    c = Lean(toolyard_serve(workspace, state, inline), toolyard_env(state))
    c.handshake()
    base = vm_kib(c.pid)
    t0 = time.perf_counter()
    result = c.request("tools/call", {"name": tool, "arguments": args})
    ms = (time.perf_counter() - t0) * 1000
    text = result_text(result)
    server = vm_kib(c.pid)
    runners = {lane: vm_kib(pid) for lane, pid in toolyard_processes(c.pid).items()}
    c.close()
    return {"ms": ms, "server_baseline_kib": base, "server_peak_kib": server, "runner_peak_kib": runners,
            "is_error": bool(result.get("isError")), "output_bytes": len(text.encode()), "output_tail": text[-200:]}


def summarize(runs: list[dict]) -> dict:
    runners: dict[str, int] = {}
    for r in runs:
        for lane, k in r["runner_peak_kib"].items():
            if k is not None:
                runners[lane] = max(runners.get(lane, 0), k)
    return {
        "ms": median([r["ms"] for r in runs]),
        "server_baseline_kib": max(r["server_baseline_kib"] or 0 for r in runs),
        "server_peak_kib": max(r["server_peak_kib"] or 0 for r in runs),
        "runner_peak_kib": runners,
        "is_error": any(r["is_error"] for r in runs),
        "output_bytes": runs[-1]["output_bytes"],
        "output_tail": runs[-1]["output_tail"],
        "runs": len(runs),
    }


def run(big_runs: int = 2, grep_runs: int = 3) -> dict:
    data = stamp()
    data["command"] = GIB_CMD
    with tempfile.TemporaryDirectory(prefix="toolyard-bench-") as tmp:
        ws, state = Path(tmp) / "ws", Path(tmp) / "state"
        ws.mkdir()
        state.mkdir()
        ms, _, _ = run_measured(["sh", "-c", GIB_CMD])
        data["command_alone_ms"] = ms
        big = {}
        for mode in ["lanes", "inline"]:
            runs = [measure_call(ws, state, mode == "inline", "run_command",
                                 {"command": GIB_CMD, "timeout_ms": 600000}) for _ in range(big_runs)]
            big[mode] = summarize(runs)
            s = big[mode]
            log(f"memory 1 GiB ({mode}): {s['ms']:.0f} ms, server peak {s['server_peak_kib'] / 1024:.1f} MiB, "
                f"runners {({k: round(v / 1024, 1) for k, v in s['runner_peak_kib'].items()})} MiB")
        data["print_1gib"] = big

        tree = TREE.resolve()
        data["tree"] = str(tree)
        grep = {}
        for key, pattern in GREP_CASES:
            # Warm the page cache; the references' peak RSS.
            # Output to a file: rg stops at the first match when its stdout is /dev/null.
            with open(Path(tmp) / "out", "wb") as out:
                rg_argv = [str(RG), *RG_FLAGS, pattern]
                run_measured(rg_argv, cwd=tree, stdout=out)  # warm the page cache
                rg = [run_measured(rg_argv, cwd=tree, stdout=out, rss=True) for _ in range(grep_runs)]
                engine = [run_measured([str(SEARCH_BENCH), "grep", pattern, str(tree)], cwd=tree, stdout=out, rss=True)
                          for _ in range(grep_runs)]
            entry = {"pattern": pattern,
                     "rg": {"ms": median([r[0] for r in rg]), "peak_kib": max(r[1] or 0 for r in rg)},
                     "engine_uncapped": {"ms": median([r[0] for r in engine]),
                                         "peak_kib": max(r[1] or 0 for r in engine)}}
            for mode in ["lanes", "inline"]:
                runs = [measure_call(tree, state, mode == "inline", "grep", {"pattern": pattern})
                        for _ in range(grep_runs)]
                entry[mode] = summarize(runs)
            grep[key] = entry
            log(f"memory grep {pattern!r}: server {entry['lanes']['server_peak_kib'] / 1024:.1f} MiB, runner "
                f"{max(entry['lanes']['runner_peak_kib'].values(), default=0) / 1024:.1f} MiB, inline "
                f"{entry['inline']['server_peak_kib'] / 1024:.1f} MiB, rg {entry['rg']['peak_kib'] / 1024:.1f} MiB")
        data["grep"] = grep
    data["load_end"] = loadavg()
    save("memory", data)
    return data
