"""Benchmark 8: what journaling a command's changes costs (issue 24), against the binary before it.

Two `toolyard serve` processes, the binary under test and the one built from the commit before
command undo (`TOOLYARD_OLD_BIN`, which bench/run builds in bench/.work/old), each on its own copy
of the bench tree (18,000 files), driven by the lean MCP client in the same rounds, call by call
alternating. Per round each server runs:

- `run_command "true"`: a command that changes nothing (the capture's two stat walks, no reads);
- a command that rewrites 100 files of the tree (the walks, reading and hashing the 100, and
  journaling them as one group with their previous contents).

The first call of each server is left out: the new binary reads every file in scope once then,
into its store (its time is reported apart).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

from common import TOOLYARD, TREE, WORK, Lean, loadavg, log, save, stamp, summary, toolyard_env, toolyard_serve

OLD = Path(os.environ.get("TOOLYARD_OLD_BIN", WORK / "old" / "toolyard"))


def hundred_files(root: Path) -> list[str]:
    """100 files of the tree, spread over it, by path relative to `root`."""
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*.rs") if p.is_file() and " " not in str(p))
    step = max(1, len(files) // 100)
    return files[::step][:100]


def serve(binary: Path, ws: Path, state: Path) -> Lean:
    argv = toolyard_serve(ws, state)
    argv[0] = str(binary)
    c = Lean(argv, toolyard_env(state))
    c.handshake()
    return c


def timed(c: Lean, tool: str, args: dict) -> float:
    t0 = time.perf_counter_ns()
    c.call(tool, args)  # raises on an error result
    return (time.perf_counter_ns() - t0) / 1e6


def run(rounds: int = 60) -> dict:
    data = stamp()
    if not OLD.exists():
        raise RuntimeError(f"no binary to compare with at {OLD} (set TOOLYARD_OLD_BIN)")
    data["old_binary"] = str(OLD)
    with tempfile.TemporaryDirectory(prefix="toolyard-cmdundo-") as tmp:
        sides = {}
        for name, binary in [("old", OLD), ("new", TOOLYARD)]:
            ws, state = Path(tmp) / name / "ws", Path(tmp) / name / "state"
            log(f"cmdundo: copying the tree for the {name} binary")
            shutil.copytree(TREE, ws, symlinks=True)
            state.mkdir(parents=True)
            sides[name] = serve(binary, ws, state)
        files = hundred_files(Path(tmp) / "new" / "ws")
        data["tree_files"] = sum(1 for p in (Path(tmp) / "new" / "ws").rglob("*") if p.is_file())
        change = "for f in " + " ".join(f"'{x}'" for x in files) + "; do echo \"// $R\" >> \"$f\"; done"
        first = {}
        for name, c in sides.items():
            first[name] = timed(c, "run_command", {"command": "true"})
        samples = {f"{k}_{n}": [] for k in ["nothing", "hundred"] for n in sides}
        log(f"cmdundo: {rounds} rounds, {len(files)} files changed per changing command")
        for r in range(rounds):
            order = list(sides.items()) if r % 2 == 0 else list(reversed(sides.items()))
            for name, c in order:
                samples[f"nothing_{name}"].append(timed(c, "run_command", {"command": "true"}))
            for name, c in order:
                samples[f"hundred_{name}"].append(
                    timed(c, "run_command", {"command": f"R={r}; {change}"}))
        for c in sides.values():
            c.close()
    res = {k: summary(v) for k, v in samples.items()}
    data["results"] = res
    data["first_call_ms"] = first
    data["changed_files"] = len(files)
    data["added_nothing_ms"] = res["nothing_new"]["median"] - res["nothing_old"]["median"]
    data["added_hundred_ms"] = res["hundred_new"]["median"] - res["hundred_old"]["median"]
    data["load_end"] = loadavg()
    log(f"cmdundo: nothing +{data['added_nothing_ms']:.1f} ms, 100 files +{data['added_hundred_ms']:.1f} ms")
    save("cmdundo", data)
    return data
