"""The benchmark harness behind bench/run: runs the parts asked for, saves each part's figures in
bench/results/PART.json, then regenerates bench/RESULTS.md and bench/plots/ from those files.

    python3 bench/lib/main.py [--only grep,mcp,lanes,memory,bigfile,edits,remote,cmdundo,egress,lsp] [--quick]

(bench/run installs the references, builds and then calls this; see bench/README.md.)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402
import report  # noqa: E402
from common import FD, RESULTS_DIR, RG, TOOLYARD, git_commit, loadavg, log  # noqa: E402

PARTS = ["grep", "mcp", "lanes", "memory", "bigfile", "edits", "remote", "cmdundo", "egress", "lsp"]


def sh(argv: list[str]) -> str:
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        out = (p.stdout or p.stderr).strip().splitlines()
        return out[0].strip() if out else "?"
    except (OSError, subprocess.TimeoutExpired):
        return "not installed"


def machine() -> dict:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = 0.0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem = int(line.split()[1]) / 1024 / 1024
    except OSError:
        pass
    osname = "?"
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                osname = line.split("=", 1)[1].strip('"')
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": mem, "kernel": platform.release(), "os": osname}


def versions() -> dict:
    import mcp_bench as mcp_part

    def pyver(pkg: str) -> str:
        try:
            from importlib.metadata import version

            return version(pkg)
        except Exception:
            return "not installed"

    return {
        "toolyard": sh([str(TOOLYARD), "--version"]).removeprefix("toolyard ") + f" (`{git_commit()}`, release build)",
        "rustc": sh(["rustc", "--version"]).removeprefix("rustc "),
        "ripgrep": sh([str(RG), "--version"]).removeprefix("ripgrep "),
        "fd": sh([str(FD), "--version"]).removeprefix("fd "),
        "bubblewrap": sh(["bwrap", "--version"]).removeprefix("bubblewrap "),
        "node": sh(["node", "--version"]),
        "server-filesystem": mcp_part.reference_version(),
        "Python": platform.python_version(),
        "mcp (Python SDK)": pyver("mcp"),
        "matplotlib": pyver("matplotlib"),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="", help="comma-separated parts: " + ", ".join(PARTS))
    ap.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run; noisier figures)")
    ap.add_argument("--report-only", action="store_true", help="regenerate RESULTS.md and plots from bench/results")
    args = ap.parse_args()
    only = [p for p in args.only.split(",") if p] or PARTS
    for p in only:
        if p not in PARTS:
            ap.error(f"unknown part {p!r}; parts: {', '.join(PARTS)}")
    full = not args.only and not args.report_only
    meta_path = RESULTS_DIR / "run.json"
    if args.report_only:
        # Re-render only: the page keeps the facts of the run that measured the figures.
        try:
            meta = json.loads(meta_path.read_text())
        except (OSError, ValueError):
            sys.exit("no bench/results/run.json yet: run bench/run first")
        out = report.write(meta)
        log(f"wrote {out.relative_to(report.RESULTS_MD.parents[1])} and bench/plots/ from bench/results/")
        return 0
    t0 = float(os.environ.get("BENCH_T0", time.time()))
    load_start = float(os.environ.get("BENCH_LOAD_START", loadavg()))
    notes: list[str] = []
    phases: dict[str, float] = {}
    try:
        phases.update(json.loads(os.environ.get("BENCH_SETUP_TIMES", "{}")))
    except ValueError:
        pass
    if os.environ.get("BENCH_SETUP_NOTES"):
        notes += [n for n in os.environ["BENCH_SETUP_NOTES"].split("\n") if n]

    if full:
        # A full run regenerates everything: no figure of an earlier run may survive on the page.
        for p in PARTS:
            (RESULTS_DIR / f"{p}.json").unlink(missing_ok=True)
            (report.PLOTS_DIR / f"{p}.png").unlink(missing_ok=True)

    q = args.quick
    runners = {
        "grep": lambda: __import__("grep_glob").run(runs=5 if q else 9, cold_runs=1 if q else 3),
        "mcp": lambda: __import__("mcp_bench").run(iterations=60 if q else 300, warmup=10 if q else 20,
                                             sdk_iterations=30 if q else 100, startup_runs=7 if q else 21,
                                             seconds=0.5 if q else 1.5),
        "lanes": lambda: __import__("lanes").run(rounds=40 if q else 300),
        "memory": lambda: __import__("memory").run(big_runs=1 if q else 2, grep_runs=1 if q else 3),
        "bigfile": lambda: __import__("bigfile").run(runs=1 if q else 3),
        "edits": lambda: __import__("edits").run(),
        "egress": lambda: __import__("egress").run(rounds=30 if q else 100, downloads=3 if q else 7),
        "remote": lambda: __import__("remote").run(calls=60 if q else 300, seconds=0.5 if q else 1.0,
                                                   bringup_rounds=1 if q else 3),
        "cmdundo": lambda: __import__("cmdundo").run(rounds=15 if q else 60),
        "lsp": lambda: __import__("lsp").run(rounds=20 if q else 100),
    }
    if not args.report_only:
        for p in only:
            log(f"=== {p} ===")
            s = time.monotonic()
            try:
                runners[p]()
            except Exception as e:  # one broken part must not lose the others
                traceback.print_exc()
                notes.append(f"The `{p}` benchmark failed in this run ({type(e).__name__}: {str(e)[:300]}); "
                             "its section is missing or from an earlier run (see its date).")
                log(f"{p} FAILED: {e}")
            phases[p] = time.monotonic() - s
            log(f"{p} took {phases[p]:.0f} s")
    load_end = loadavg()
    wall = time.time() - t0
    order = ["install", "build", "tree", "old", *PARTS]
    detail = ", ".join(f"{k} {phases[k]:.0f} s" for k in order if k in phases)
    if full:
        wall_text = f"{wall / 60:.1f} min for the whole `bench/run` ({detail})."
    else:
        prev = {}
        try:
            prev = json.loads(meta_path.read_text())
        except (OSError, ValueError):
            pass
        wall_text = f"{wall / 60:.1f} min for this partial run ({detail})."
        if prev.get("full_wall_text"):
            wall_text += f" The last full run: {prev['full_wall_text']}"
    dirty = common.uncommitted()
    if dirty:
        notes.append("Toolyard was built from the working tree, which differs from the commit named above in: "
                     + ", ".join(f"`{x}`" for x in dirty) + " (work in progress elsewhere).")
    if q:
        notes.append("This was a `--quick` run: fewer rounds than usual, so the figures are noisier.")
    meta = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "commit": git_commit(),
        "only": args.only,
        "load_start": load_start,
        "load_end": load_end,
        "wall_s": wall,
        "wall_text": wall_text,
        "phases": phases,
        "machine": machine(),
        "versions": versions(),
        "notes": notes,
    }
    if full:
        meta["full_wall_text"] = wall_text
    else:
        try:
            prev = json.loads(meta_path.read_text())
            if prev.get("full_wall_text"):
                meta["full_wall_text"] = prev["full_wall_text"]
            # A partial run may not install every reference (--only remote needs none): keep the
            # versions the other parts' figures were measured with.
            for k, was in (prev.get("versions") or {}).items():
                if meta["versions"].get(k) in ("not installed", "?"):
                    meta["versions"][k] = was
        except (OSError, ValueError):
            pass
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    meta_path.write_text(json.dumps(meta, indent=1) + "\n")
    out = report.write(meta)
    log(f"wrote {out.relative_to(report.RESULTS_MD.parents[1])} and bench/plots/ ({wall / 60:.1f} min in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
