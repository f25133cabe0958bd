"""Shared helpers of the benchmark harness: paths, timing, memory, the lean MCP client, results."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench"
WORK = BENCH / ".work"
RESULTS_DIR = BENCH / "results"
PLOTS_DIR = BENCH / "plots"
RESULTS_MD = BENCH / "RESULTS.md"
TARGET = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target")) / "release"

TOOLYARD = Path(os.environ.get("TOOLYARD_BIN", TARGET / "toolyard"))
SEARCH_BENCH = TARGET / "examples" / "search_bench"
LANE_BENCH = TARGET / "examples" / "lane_bench"
RG = Path(os.environ.get("RG", WORK / "bin" / "rg"))
FD = Path(os.environ.get("FD", WORK / "bin" / "fd"))
REF_PKG = "@modelcontextprotocol/server-filesystem"
REF_ENTRY = WORK / "node_modules" / REF_PKG / "dist" / "index.js"
TREE = Path(os.environ.get("BENCH_TREE", WORK / "tree"))

_T0 = time.monotonic()


def log(msg: str) -> None:
    """Progress on stderr, with the time since the harness started."""
    t = time.monotonic() - _T0
    print(f"[bench {int(t) // 60:02}:{int(t) % 60:02}] {msg}", file=sys.stderr, flush=True)


def median(v: list[float]) -> float:
    return statistics.median(v) if v else float("nan")


def quantile(v: list[float], q: float) -> float:
    if not v:
        return float("nan")
    s = sorted(v)
    return s[round((len(s) - 1) * q)]


def summary(v: list[float]) -> dict:
    """Median, 10th and 90th percentile and count of samples (milliseconds in, out)."""
    return {"median": median(v), "p10": quantile(v, 0.1), "p90": quantile(v, 0.9), "n": len(v)}


def loadavg() -> float:
    return os.getloadavg()[0]


def vm_kib(pid: int, field: str = "VmHWM") -> int | None:
    """A memory figure of a live process from /proc (VmHWM: peak resident set), in KiB."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def descendants(pid: int) -> list[int]:
    """Every live descendant of a process (through /proc/PID/task/*/children)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tasks:
            try:
                kids = Path(f"/proc/{p}/task/{t}/children").read_text().split()
            except OSError:
                continue
            for k in kids:
                out.append(int(k))
                todo.append(int(k))
    return out


def cmdline(pid: int) -> list[str]:
    try:
        return [a.decode(errors="replace") for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]
    except OSError:
        return []


def run_measured(argv: list[str], cwd: Path | None = None, stdout=None, env=None, stdin=None,
                 rss: bool = False) -> tuple[float, int | None, int]:
    """Run a process to its end: (wall milliseconds, peak RSS in KiB or None, exit status).

    With rss=True the process runs under GNU time (`/usr/bin/time -f %M`), which reports the peak
    resident set of the command alone (wait4()'s ru_maxrss seen from here would include this
    Python process, whose memory the child had until its exec)."""
    rss_file = None
    if rss:
        fd, rss_file = tempfile.mkstemp(prefix="toolyard-bench-rss-")
        os.close(fd)
        argv = ["/usr/bin/time", "-f", "%M", "-o", rss_file, *argv]
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, cwd=cwd, stdout=stdout if stdout is not None else subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, stdin=stdin if stdin is not None else subprocess.DEVNULL, env=env)
    p.wait()
    ms = (time.perf_counter() - t0) * 1000
    peak = None
    if rss_file:
        try:
            peak = int(Path(rss_file).read_text().split()[-1])
        except (OSError, ValueError, IndexError):
            peak = None
        os.unlink(rss_file)
    return ms, peak, p.returncode


def drop_caches() -> bool:
    try:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def toolyard_env(state: Path) -> dict:
    return dict(os.environ, TOOLYARD_STATE_DIR=str(state), TOOLYARD_LOG="error")


def save(part: str, data: dict) -> Path:
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{part}.json"
    path.write_text(json.dumps(data, indent=1, sort_keys=False) + "\n")
    return path


def load(part: str) -> dict | None:
    path = RESULTS_DIR / f"{part}.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def uncommitted() -> list[str]:
    """Files of the build (crates/, Cargo.*) that differ from the commit, benchmark examples aside."""
    try:
        out = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--", "crates", "Cargo.lock", "Cargo.toml"],
                             capture_output=True, text=True).stdout
    except OSError:
        return []
    files = [line[3:].strip() for line in out.splitlines() if line.strip()]
    return [f for f in files if "/examples/" not in f]


def git_commit() -> str:
    try:
        c = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return "unknown"
    return c + (" + uncommitted changes" if uncommitted() else "")


def stamp() -> dict:
    """When and at what commit a part was measured, and the load at its start."""
    return {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "commit": git_commit(), "load_start": loadavg()}


# ----------------------------------------------------------------------------------------------
# Lean MCP client: JSON-RPC lines on a server's stdin/stdout.


class Lean:
    def __init__(self, argv: list[str], env: dict | None = None, cwd: Path | None = None):
        self.t_spawn = time.perf_counter()
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     env=env, cwd=cwd, bufsize=0)
        self.out = self.proc.stdout
        self.rfile = open(self.out.fileno(), "rb", buffering=1 << 16, closefd=False)  # noqa: SIM115
        self.next_id = 0

    @property
    def pid(self) -> int:
        return self.proc.pid

    def send(self, msg: dict) -> None:
        self.proc.stdin.write(json.dumps(msg, separators=(",", ":")).encode() + b"\n")

    def send_request(self, method: str, params: dict | None = None) -> int:
        self.next_id += 1
        msg = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
        if params is not None:
            msg["params"] = params
        self.send(msg)
        return self.next_id

    def read_reply(self) -> dict:
        """The next JSON-RPC response (server requests and notifications are skipped)."""
        while True:
            line = self.rfile.readline()
            if not line:
                raise RuntimeError("the server closed its stdout")
            reply = json.loads(line)
            if "id" in reply and "method" not in reply:
                return reply

    def request(self, method: str, params: dict | None = None) -> dict:
        rid = self.send_request(method, params)
        while True:
            reply = self.read_reply()
            if reply.get("id") == rid:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]

    def handshake(self) -> None:
        self.request("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                    "clientInfo": {"name": "toolyard-bench", "version": "1"}})
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def call(self, tool: str, args: dict) -> dict:
        result = self.request("tools/call", {"name": tool, "arguments": args})
        if result.get("isError"):
            raise RuntimeError(f"{tool} failed: {result_text(result)[:300]}")
        return result

    def close(self) -> None:
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.rfile.close()


def result_text(result: dict) -> str:
    return "".join(c.get("text", "") for c in result.get("content", []))


def toolyard_serve(workspace: Path, state: Path, inline: bool = False) -> list[str]:
    argv = [str(TOOLYARD), "serve", "--workspace", str(workspace)]
    return argv + (["--inline"] if inline else [])


def reference_serve(root: Path) -> list[str]:
    return ["node", str(REF_ENTRY), str(root)]


def toolyard_processes(server_pid: int) -> dict[str, int]:
    """The server's runner processes by lane ({"no-net": pid, ...}), from their command lines."""
    out = {}
    for pid in descendants(server_pid):
        argv = cmdline(pid)
        if len(argv) > 1 and argv[1] == "runner":
            lane = "?"
            for i, a in enumerate(argv):
                if a == "--lane" and i + 1 < len(argv):
                    lane = argv[i + 1]
                elif a.startswith("--lane="):
                    lane = a.split("=", 1)[1]
            out[lane] = pid
    return out
