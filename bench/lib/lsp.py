"""Benchmark 10: what a warm language server adds to an edit, and that a read does not wait (issue 23).

Two `toolyard serve` processes of the binary under test, each on its own copy of a small Python
project (40 modules), driven by the lean MCP client in the same rounds, call by call alternating:

- `with`: pyright-langserver found on PATH (the detected default), `[lsp] wait_ms = 60000`, so an
  edit's result waits for pyright's diagnostics of the new version; the server is warmed first
  (the edited file read and checked once);
- `without`: `[lsp] enabled = false`.

Per round each server runs `edit_file` (one line of one module toggled between two valid values)
and `read_file` of the same module. The figures are medians of the rounds and their ratios
(with / without).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

from common import TOOLYARD, Lean, loadavg, log, result_text, save, stamp, summary, toolyard_env, toolyard_serve

MODULES = 40


def project(root: Path) -> None:
    """A small typed Python project: modules that import the one before them."""
    root.mkdir(parents=True)
    for i in range(MODULES):
        prev = f"from m{i - 1} import f{i - 1}\n\n\n" if i else ""
        body = f"f{i - 1}(n) + " if i else ""
        (root / f"m{i}.py").write_text(
            f"{prev}LIMIT = 1\n\n\ndef f{i}(n: int) -> int:\n    return {body}n * LIMIT\n")


def serve(ws: Path, state: Path, catalog: str) -> Lean:
    cat = state / "catalog.toml"
    cat.write_text(catalog)
    argv = toolyard_serve(ws, state) + ["--catalog", str(cat)]
    c = Lean(argv, toolyard_env(state))
    c.handshake()
    return c


def timed(c: Lean, tool: str, args: dict) -> tuple[float, str]:
    t0 = time.perf_counter_ns()
    r = c.call(tool, args)  # raises on an error result
    return (time.perf_counter_ns() - t0) / 1e6, result_text(r)


def run(rounds: int = 100) -> dict:
    if not shutil.which("pyright-langserver"):
        raise RuntimeError("pyright-langserver is not on PATH (npm install pyright@1.1.414, as scripts/test.sh does)")
    data = stamp()
    data["binary"] = str(TOOLYARD)
    data["modules"] = MODULES
    target = f"m{MODULES // 2}.py"
    with tempfile.TemporaryDirectory(prefix="toolyard-lsp-") as tmp:
        sides = {}
        for name, catalog in [("with", "[lsp]\nwait_ms = 60000\n"), ("without", "[lsp]\nenabled = false\n")]:
            ws, state = Path(tmp) / name / "ws", Path(tmp) / name / "state"
            project(ws)
            state.mkdir(parents=True)
            sides[name] = serve(ws, state, catalog)
        # Both read the file first (an edit needs it); then the server has checked it once.
        sides["without"].call("read_file", {"path": target})
        t0 = time.perf_counter()
        sides["with"].call("read_file", {"path": target})
        sides["with"].call("diagnostics", {"path": target})
        data["warmup_s"] = time.perf_counter() - t0
        samples = {f"{k}_{n}": [] for k in ["edit", "read"] for n in sides}
        log(f"lsp: {rounds} rounds of edit_file and read_file, with and without a warm pyright")
        checked = 0
        for r in range(rounds):
            old, new = ("LIMIT = 1", "LIMIT = 2") if r % 2 == 0 else ("LIMIT = 2", "LIMIT = 1")
            order = list(sides.items()) if r % 2 == 0 else list(reversed(sides.items()))
            for name, c in order:
                ms, text = timed(c, "edit_file", {"path": target, "old_string": old, "new_string": new})
                samples[f"edit_{name}"].append(ms)
                if name == "with" and "checked this version" in text:
                    checked += 1
            for name, c in order:
                ms, _ = timed(c, "read_file", {"path": target})
                samples[f"read_{name}"].append(ms)
        for c in sides.values():
            c.close()
    res = {k: summary(v) for k, v in samples.items()}
    data["results"] = res
    data["rounds"] = rounds
    # Edits whose result carried pyright's diagnostics of the new version (not "still checking").
    data["edits_checked"] = checked
    data["edit_added_ms"] = res["edit_with"]["median"] - res["edit_without"]["median"]
    data["edit_ratio"] = res["edit_with"]["median"] / res["edit_without"]["median"]
    data["read_ratio"] = res["read_with"]["median"] / res["read_without"]["median"]
    data["load_end"] = loadavg()
    log(f"lsp: edit +{data['edit_added_ms']:.1f} ms (x{data['edit_ratio']:.2f}), read x{data['read_ratio']:.2f}")
    save("lsp", data)
    return data
