"""Benchmark 5: read_file / edit_file on a 100 MiB file: time and peak memory.

The file has 1,048,576 lines of 100 bytes with one marker line in the middle. Operations:

- read head: the first page (toolyard `read_file {path}`: 2000 lines by default; the reference
  `read_text_file {path, head: 2000}`; `head -n 2000`);
- read tail: the last 100 lines (toolyard `read_file {path, offset, limit: 100}`; the reference
  `read_text_file {path, tail: 100}`; `tail -n 100`);
- edit: replace the marker (toolyard `edit_file`, after a one-line read_file at setup since an
  edit needs a read first; the reference `edit_file {edits}`; `sed -i`).

Each run starts a fresh server (VmHWM only grows), so a peak belongs to its operation (the
edit's includes the one-line read of its setup). Times are the tool call's round trip through
the lean MCP client; for the command-line tools, the process's wall time; peak RSS from /proc
VmHWM (servers, runners) or wait4() (command-line tools).
"""

from __future__ import annotations

import tempfile
import threading
import time
from pathlib import Path

from common import (Lean, loadavg, log, median, reference_serve, result_text, run_measured, save, stamp,
                    toolyard_env, toolyard_processes, toolyard_serve, vm_kib)

LINES = 1 << 20
LINE_BYTES = 100
MARK_A, MARK_B = "MARKER_ALPHA_UNIQUE", "MARKER_BRAVO_UNIQUE"
TIMEOUT_S = 120.0


def make_file(path: Path) -> None:
    filler = "abcdefghijklmnopqrstuvwxyz" * 4
    with open(path, "w") as f:
        chunk = []
        for i in range(LINES):
            body = f"{i:08d} line of the big file " + (MARK_A if i == LINES // 2 else "")
            chunk.append((body + " " + filler)[: LINE_BYTES - 1] + "\n")
            if len(chunk) == 8192:
                f.write("".join(chunk))
                chunk = []
        f.write("".join(chunk))


def server_op(argv: list[str], env: dict | None, setup: list[tuple[str, dict]], tool: str, args: dict) -> dict:
    c = Lean(argv, env)
    c.handshake()
    for t, a in setup:
        c.call(t, a)
    timer = threading.Timer(TIMEOUT_S, c.proc.kill)
    timer.start()
    t0 = time.perf_counter()
    try:
        result = c.request("tools/call", {"name": tool, "arguments": args})
    except RuntimeError as e:
        timer.cancel()
        timed_out = time.perf_counter() - t0 >= TIMEOUT_S - 0.5
        c.close()
        return {"failed": f"no answer within {TIMEOUT_S:.0f} s" if timed_out else str(e)[:200]}
    ms = (time.perf_counter() - t0) * 1000
    timer.cancel()
    text = result_text(result)
    server = vm_kib(c.pid)
    runners = {lane: vm_kib(pid) for lane, pid in toolyard_processes(c.pid).items()}
    c.close()
    out = {"ms": ms, "server_peak_kib": server, "runner_peak_kib": runners, "output_bytes": len(text.encode())}
    if result.get("isError"):
        out["failed"] = text[:300]
    return out


def summarize(runs: list[dict]) -> dict:
    ok = [r for r in runs if "failed" not in r]
    if not ok:
        return {"failed": runs[0]["failed"], "runs": len(runs)}
    runners: dict[str, int] = {}
    for r in ok:
        for lane, k in r["runner_peak_kib"].items():
            if k is not None:
                runners[lane] = max(runners.get(lane, 0), k)
    return {"ms": median([r["ms"] for r in ok]), "server_peak_kib": max(r["server_peak_kib"] or 0 for r in ok),
            "runner_peak_kib": runners, "output_bytes": ok[-1]["output_bytes"], "runs": len(ok),
            **({"failed": f"{len(runs) - len(ok)} of {len(runs)} runs failed: {runs[0].get('failed', '')}"}
               if len(ok) < len(runs) else {})}


def run(runs: int = 3) -> dict:
    data = stamp()
    data.update(lines=LINES, line_bytes=LINE_BYTES, runs=runs, timeout_s=TIMEOUT_S)
    with tempfile.TemporaryDirectory(prefix="toolyard-bench-") as tmp:
        ws, state = Path(tmp) / "ws", Path(tmp) / "state"
        ws.mkdir()
        state.mkdir()
        big = ws / "big.txt"
        log("bigfile: writing the 100 MiB file")
        make_file(big)
        data["file_bytes"] = big.stat().st_size
        marks = [MARK_A, MARK_B]  # the marker now in the file is marks[0]

        def flip() -> tuple[str, str]:
            old, new = marks
            marks.reverse()
            return old, new

        results: dict[str, dict] = {}
        envs = toolyard_env(state)
        # toolyard, lanes and inline
        for name, inline in [("toolyard", False), ("toolyard_inline", True)]:
            argv = toolyard_serve(ws, state, inline)
            r = {}
            r["read_head"] = summarize([server_op(argv, envs, [], "read_file", {"path": "big.txt"}) for _ in range(runs)])
            r["read_tail"] = summarize([server_op(argv, envs, [], "read_file",
                                                  {"path": "big.txt", "offset": LINES - 99, "limit": 100})
                                        for _ in range(runs)])
            edits = []
            for _ in range(runs):
                old, new = flip()
                edits.append(server_op(argv, envs, [("read_file", {"path": "big.txt", "limit": 1})], "edit_file",
                                       {"path": "big.txt", "old_string": old, "new_string": new}))
                if "failed" in edits[-1]:
                    flip()
            r["edit"] = summarize(edits)
            results[name] = r
            log(f"bigfile {name}: " + ", ".join(f"{op} {v.get('ms', float('nan')):.0f} ms" for op, v in r.items()))
        # the reference server
        argv = reference_serve(ws)
        p = str(big)
        r = {}
        r["read_head"] = summarize([server_op(argv, None, [], "read_text_file", {"path": p, "head": 2000})
                                    for _ in range(runs)])
        r["read_tail"] = summarize([server_op(argv, None, [], "read_text_file", {"path": p, "tail": 100})
                                    for _ in range(runs)])
        edits = []
        for _ in range(runs):
            old, new = flip()
            edits.append(server_op(argv, None, [], "edit_file", {"path": p, "edits": [{"oldText": old, "newText": new}]}))
            if "failed" in edits[-1]:
                flip()
                break  # a timeout would only repeat
        r["edit"] = summarize(edits)
        results["reference"] = r
        log("bigfile reference: " + ", ".join(f"{op} {v.get('ms', float('nan')):.0f} ms" for op, v in r.items()))
        # plain command-line tools
        r = {}
        for op, argv_ in [("read_head", ["head", "-n", "2000", p]), ("read_tail", ["tail", "-n", "100", p])]:
            with open(Path(tmp) / "out", "wb") as out:
                m = [run_measured(argv_, stdout=out, rss=True) for _ in range(runs)]
            r[op] = {"ms": median([x[0] for x in m]), "server_peak_kib": max(x[1] or 0 for x in m), "runner_peak_kib": {},
                     "runs": runs}
        m = []
        for _ in range(runs):
            old, new = flip()
            m.append(run_measured(["sed", "-i", f"s/{old}/{new}/", p], rss=True))
        r["edit"] = {"ms": median([x[0] for x in m]), "server_peak_kib": max(x[1] or 0 for x in m), "runner_peak_kib": {},
                     "runs": runs}
        results["coreutils"] = r
        log("bigfile coreutils: " + ", ".join(f"{op} {v['ms']:.0f} ms" for op, v in r.items()))
        content = big.read_bytes()
        data["edits_consistent"] = content.count(marks[0].encode()) == 1 and big.stat().st_size == data["file_bytes"]
    data["results"] = results
    data["load_end"] = loadavg()
    save("bigfile", data)
    return data
