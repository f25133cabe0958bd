"""Near-miss edits: the corpus tests (crates/toolyard-tools/tests/near_miss.rs) run through cargo,
their tables parsed.

- `rows`: per corpus and kind of slip, how many `edit_file` edits were applied correctly, refused,
  or applied wrongly (the test `corpus_slips_apply_and_forbidden_differences_refuse`);
- `dialects`: per case kind and per language, for each dialect's edit tool, the shares of attempts
  applied / guided / unguided, and any wrong edits or files changed by a refusal (the test
  `every_dialect_edit_tool_applies_guides_or_refuses_over_the_corpus`)."""

from __future__ import annotations

import re
import subprocess

from common import REPO, log, save, stamp, loadavg

TOTALS = re.compile(
    r"all tools: (?P<attempts>\d+) attempts; applied (?P<applied>\d+), guided (?P<guided>\d+), "
    r"unguided (?P<unguided>\d+), wrong (?P<wrong>\d+), changed on refusal (?P<changed>\d+)")
EXTRA = re.compile(r"\((\d+) (wrong|changed)\)")


def pct(s: str) -> float | None:
    s = s.strip()
    return None if s == "-" else float(s.rstrip("%"))


def parse_cell(cell: str) -> dict | None:
    """`55% / 45% / 0% (2 wrong)` -> shares in % and the counts of wrong and changed; `-` -> None."""
    cell = cell.strip()
    if cell == "-":
        return None
    extra = {kind: int(n) for n, kind in EXTRA.findall(cell)}
    shares = EXTRA.sub("", cell).split("/")
    if len(shares) != 3:
        raise ValueError(f"the near-miss test printed an unexpected cell {cell!r}")
    applied, guided, unguided = (pct(s) for s in shares)
    return {"applied": applied, "guided": guided, "unguided": unguided,
            "wrong": extra.get("wrong", 0), "changed": extra.get("changed", 0)}


def parse(out: str) -> dict:
    """Both tests' tables out of the test's stdout (run with one test thread, so they do not interleave)."""
    rows = []
    dialects: dict = {"tools": [], "case": [], "language": [], "totals": None}
    table = None  # "case" or "language" while inside a dialect table
    for line in out.splitlines():
        line = line.strip()
        if m := TOTALS.search(line):
            dialects["totals"] = {k: int(v) for k, v in m.groupdict().items()}
        if not line.startswith("|"):
            table = None
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) > 2 and cells[0] in ("case", "language") and cells[1] == "n":
            table = cells[0]
            dialects["tools"] = cells[2:]
            continue
        if table and len(cells) == 2 + len(dialects["tools"]) and cells[1].isdigit():
            dialects[table].append({
                "key": cells[0], "n": int(cells[1]),
                "cells": {tool: parse_cell(c) for tool, c in zip(dialects["tools"], cells[2:])},
            })
            continue
        if len(cells) == 6 and cells[2].isdigit():
            corpus, case, ok, ambiguous, refused, wrong = cells
            rows.append({"corpus": corpus, "case": case, "applied": int(ok), "ambiguous": int(ambiguous),
                         "refused": int(refused), "wrong": int(wrong)})
    if not rows:
        raise RuntimeError("the near-miss test printed no edit_file table")
    if not dialects["case"] or not dialects["language"] or not dialects["totals"]:
        raise RuntimeError("the near-miss test printed no per-dialect tables (or no 'all tools:' line)")
    return {"rows": rows, "dialects": dialects}


def run() -> dict:
    data = stamp()
    out = subprocess.run(
        ["cargo", "test", "-q", "--release", "-p", "toolyard-tools", "--test", "near_miss", "--",
         "--nocapture", "--test-threads=1"],
        cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout
    data.update(parse(out))
    data["load_end"] = loadavg()
    rows = data["rows"]
    slips = [r for r in rows if r["case"].startswith("slip")]
    forbidden = [r for r in rows if r["case"].startswith("forbidden")]
    t = data["dialects"]["totals"]
    log(f"edits: slips applied {sum(r['applied'] for r in slips)}/{sum(r['applied'] + r['refused'] + r['ambiguous'] + r['wrong'] for r in slips)}, "
        f"forbidden refused {sum(r['refused'] + r['ambiguous'] for r in forbidden)}/"
        f"{sum(r['applied'] + r['refused'] + r['ambiguous'] + r['wrong'] for r in forbidden)}; "
        f"dialect edit tools: {t['attempts']} attempts, applied {t['applied']}, guided {t['guided']}, "
        f"unguided {t['unguided']}, wrong {t['wrong']}, changed {t['changed']}")
    save("edits", data)
    return data
