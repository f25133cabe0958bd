"""Near-miss edits: the corpus test (crates/toolyard-tools/tests/near_miss.rs) run through cargo,
its table parsed: per corpus and kind of slip, how many edits were applied correctly, refused,
or applied wrongly."""

from __future__ import annotations

import subprocess

from common import REPO, log, save, stamp, loadavg


def run() -> dict:
    data = stamp()
    out = subprocess.run(
        ["cargo", "test", "-q", "--release", "-p", "toolyard-tools", "--test", "near_miss", "--", "--nocapture"],
        cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout
    rows = []
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 6 or not cells[2].isdigit():
            continue
        corpus, case, ok, ambiguous, refused, wrong = cells
        rows.append({"corpus": corpus, "case": case, "applied": int(ok), "ambiguous": int(ambiguous),
                     "refused": int(refused), "wrong": int(wrong)})
    if not rows:
        raise RuntimeError("the near-miss test printed no table")
    data["rows"] = rows
    data["load_end"] = loadavg()
    slips = [r for r in rows if r["case"].startswith("slip")]
    forbidden = [r for r in rows if r["case"].startswith("forbidden")]
    log(f"edits: slips applied {sum(r['applied'] for r in slips)}/{sum(r['applied'] + r['refused'] + r['ambiguous'] + r['wrong'] for r in slips)}, "
        f"forbidden refused {sum(r['refused'] + r['ambiguous'] for r in forbidden)}/"
        f"{sum(r['applied'] + r['refused'] + r['ambiguous'] + r['wrong'] for r in forbidden)}")
    save("edits", data)
    return data
