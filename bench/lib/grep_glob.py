"""Benchmark 1: grep and glob over a large real source tree, Toolyard's engines vs rg and fd.

Toolyard runs its engines uncapped through crates/toolyard-tools/examples/search_bench.rs and
prints every result (`path:line:text`, one path per line); rg runs with `--no-heading -n`, fd
plainly; every output goes to a file (not /dev/null, which some tools special-case). Each case
alternates the two tools every run (warm), and drops the page cache before every run (cold,
root only). Process start-up is included on both sides.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

from common import FD, RG, SEARCH_BENCH, TREE, drop_caches, loadavg, log, median, run_measured, save, stamp, summary

RG_FLAGS = ["--no-heading", "-n", "-S", "--color", "never", "--no-require-git"]
FD_FLAGS = ["-t", "f", "--color", "never", "--no-require-git"]

CASES = [
    # key, label, kind, pattern (toolyard), reference argv tail, target ratio
    ("grep_literal", "grep literal", "grep", "impl Drop for", ["rg", *RG_FLAGS, "impl Drop for"], 1.3),
    ("grep_regex", "grep regex", "grep", r"pub fn \w+_mut\(", ["rg", *RG_FLAGS, r"pub fn \w+_mut\("], 1.3),
    ("grep_word", "grep word", "grep", r"\bmutex\b", ["rg", *RG_FLAGS, r"\bmutex\b"], 1.3),
    ("grep_many", "grep many matches", "grep", "unsafe", ["rg", *RG_FLAGS, "unsafe"], 1.3),
    ("glob_ext", "glob all .rs", "glob", "**/*.rs", ["fd", *FD_FLAGS, "-g", "*.rs"], 1.5),
    ("glob_name", "glob by name", "glob", "**/Cargo.toml", ["fd", *FD_FLAGS, "-g", "Cargo.toml"], 1.5),
    ("glob_dir", "glob anchored dir", "glob", "**/tests/*.rs", ["fd", *FD_FLAGS, "-p", "-g", "**/tests/*.rs"], 1.5),
]


def tree_stats(tree: Path) -> dict:
    files = 0
    size = 0
    for dirpath, _dirs, names in os.walk(tree):
        for n in names:
            files += 1
            try:
                size += os.lstat(os.path.join(dirpath, n)).st_size
            except OSError:
                pass
    return {"path": str(tree), "files": files, "bytes": size}


def run(runs: int = 9, cold_runs: int = 3) -> dict:
    data = stamp()
    tree = TREE.resolve()
    if not tree.is_dir():
        raise SystemExit(f"no tree at {tree} (bench/run makes it with cargo vendor)")
    data["tree"] = tree_stats(tree)
    data["runs"], data["cold_runs"] = runs, cold_runs
    data["rg_flags"], data["fd_flags"] = RG_FLAGS, FD_FLAGS
    can_cold = cold_runs > 0 and drop_caches()
    data["cold"] = can_cold
    cases = []
    with tempfile.TemporaryDirectory(prefix="toolyard-bench-") as tmp:
        out_ours, out_ref = Path(tmp) / "ours", Path(tmp) / "ref"

        def timed(argv: list[str], out: Path) -> float:
            with open(out, "wb") as f:
                return run_measured(argv, cwd=tree, stdout=f)[0]

        for key, label, kind, pattern, ref_tail, target in CASES:
            ours = [str(SEARCH_BENCH), kind, pattern, str(tree)]
            ref = [str(RG if ref_tail[0] == "rg" else FD), *ref_tail[1:]]
            # Warm-up (fills the page cache) and the result counts.
            timed(ours, out_ours)
            timed(ref, out_ref)
            n_ours = sum(1 for _ in open(out_ours, "rb"))
            n_ref = sum(1 for _ in open(out_ref, "rb"))
            t_ours, t_ref = [], []
            for i in range(runs):
                order = [(ours, out_ours, t_ours), (ref, out_ref, t_ref)]
                for argv, out, ts in order if i % 2 == 0 else reversed(order):
                    ts.append(timed(argv, out))
            c_ours, c_ref = [], []
            if can_cold:
                for i in range(cold_runs):
                    order = [(ours, out_ours, c_ours), (ref, out_ref, c_ref)]
                    for argv, out, ts in order if i % 2 == 0 else reversed(order):
                        drop_caches()
                        ts.append(timed(argv, out))
            case = {
                "key": key, "label": label, "kind": kind, "pattern": pattern, "target": target,
                "reference_argv": [Path(ref[0]).name, *ref[1:]],
                "results_toolyard": n_ours, "results_reference": n_ref,
                "warm_toolyard": summary(t_ours), "warm_reference": summary(t_ref),
                "warm_ratio": median(t_ours) / median(t_ref),
            }
            if can_cold:
                case["cold_toolyard"] = summary(c_ours)
                case["cold_reference"] = summary(c_ref)
                case["cold_ratio"] = median(c_ours) / median(c_ref)
            cases.append(case)
            cold = f", cold {case['cold_ratio']:.2f}x" if can_cold else ""
            log(f"grep/glob {label}: toolyard {median(t_ours):.1f} ms, reference {median(t_ref):.1f} ms, "
                f"warm {case['warm_ratio']:.2f}x{cold} (results {n_ours} / {n_ref})")
    data["cases"] = cases
    data["load_end"] = loadavg()
    save("grep", data)
    return data


def versions() -> dict:
    def first_line(argv):
        try:
            return subprocess.run(argv, capture_output=True, text=True).stdout.splitlines()[0]
        except (OSError, IndexError):
            return "?"

    return {"rg": first_line([str(RG), "--version"]), "fd": first_line([str(FD), "--version"])}
