"""Benchmark 8: the net lane's egress gate. Command start-up in the net lane (its commands enter
the lane's network namespace; the gate is not involved in a command that connects nowhere) vs
the no-net lane, and a 100 MiB download from a local server through the gate (curl in the net
lane, via HTTP_PROXY) vs the same curl run directly on the host, alternating run by run.
"""

from __future__ import annotations

import http.server
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from common import Lean, loadavg, log, result_text, save, stamp, summary, toolyard_env, toolyard_serve

SIZE_MIB = 100


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # noqa: D102
        pass


def _server(root: Path) -> tuple[http.server.ThreadingHTTPServer, int]:
    handler = lambda *a, **k: _Quiet(*a, directory=str(root), **k)  # noqa: E731
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, srv.server_address[1]


def _curl(url: str) -> str:
    return f"curl -sSf -o /dev/null -w '%{{size_download}} %{{time_total}}' {url}"


def _parse(text: str) -> float:
    """Seconds of a `_curl` run, checking the whole file came."""
    line = [ln for ln in text.splitlines() if ln and ln[0].isdigit()][-1]
    size, secs = line.split()[:2]
    if int(float(size)) != SIZE_MIB << 20:
        raise RuntimeError(f"short download: {text[:300]}")
    return float(secs)


def run(rounds: int = 100, downloads: int = 7) -> dict:
    data = stamp()
    with tempfile.TemporaryDirectory(prefix="toolyard-bench-egress-") as tmp:
        root, ws, state = Path(tmp) / "srv", Path(tmp) / "ws", Path(tmp) / "state"
        for d in (root, ws, state):
            d.mkdir()
        (root / "big").write_bytes(b"\0" * (SIZE_MIB << 20))
        srv, port = _server(root)
        catalog = Path(tmp) / "catalog.toml"
        catalog.write_text('[network]\nmode = "allowlist"\nallow = ["bench.test"]\n'
                           'resolve = { "bench.test" = "127.0.0.1" }\n')
        env = dict(toolyard_env(state), TOOLYARD_CATALOG=str(catalog))
        c = Lean(toolyard_serve(ws, state), env)
        c.handshake()

        log(f"egress: command start-up, {rounds} rounds (net vs no-net, alternating)")
        samples = {"net": [], "no_net": []}
        tools = {"net": "run_command", "no_net": "run_command_isolated"}
        for i in range(10 + rounds):
            for lane in (["net", "no_net"] if i % 2 == 0 else ["no_net", "net"]):
                t0 = time.perf_counter_ns()
                c.call(tools[lane], {"command": "true"})
                if i >= 10:
                    samples[lane].append((time.perf_counter_ns() - t0) / 1e6)

        log(f"egress: {SIZE_MIB} MiB download, {downloads} runs each (gate vs direct, alternating)")
        url_gate = f"http://bench.test:{port}/big"
        url_direct = f"http://127.0.0.1:{port}/big"
        secs = {"gate": [], "direct": []}
        for i in range(1 + downloads):
            for how in (["gate", "direct"] if i % 2 == 0 else ["direct", "gate"]):
                if how == "gate":
                    out = result_text(c.call("run_command", {"command": _curl(url_gate)}))
                else:
                    out = subprocess.run(["sh", "-c", _curl(url_direct)], capture_output=True, text=True,
                                         check=True).stdout
                if i >= 1:
                    secs[how].append(_parse(out))
        c.close()
        srv.shutdown()

    res = {}
    for lane, label in [("net", "`run_command \"true\"` (net lane: enters the namespace, gate unused)"),
                        ("no_net", "`run_command_isolated \"true\"` (no-net lane)")]:
        s = summary(samples[lane])
        res[f"start_{lane}"] = {"median_ms": s["median"], "p10_ms": s["p10"], "p90_ms": s["p90"], "n": s["n"],
                                "label": label}
    for how, label in [("gate", "curl in the net lane, through the gate (HTTP_PROXY, forwarder, gate)"),
                       ("direct", "curl on the host, straight to the server")]:
        s = summary(secs[how])
        res[f"download_{how}"] = {"median_s": s["median"], "p10_s": s["p10"], "p90_s": s["p90"], "n": s["n"],
                                  "mib_per_s": SIZE_MIB / s["median"], "label": label}
    data.update({"rounds": rounds, "downloads": downloads, "size_mib": SIZE_MIB, "results": res,
                 "load_end": loadavg()})
    log("egress: start-up net {:.2f} ms vs no-net {:.2f} ms; download gate {:.0f} MiB/s vs direct {:.0f} MiB/s".format(
        res["start_net"]["median_ms"], res["start_no_net"]["median_ms"],
        res["download_gate"]["mib_per_s"], res["download_direct"]["mib_per_s"]))
    save("egress", data)
    return data
