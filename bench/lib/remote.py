"""Benchmark 7: runners through a command link (`podman exec -i` into a pod) against the local link.

Two `toolyard serve` processes at once, each driven by the lean MCP client: one with local runners
(the default), one whose `[remote] command` is `podman exec -i POD-runner toolyard runner ...`
into a pod that `podman kube play --network none` made from a Kubernetes Pod manifest (the image
and the manifest of tests/containers/). Both see the same fixture file. Measured, the calls
alternating between the two servers:

- round trip of `read_file` (4 KB) and `run_command "true"`, one call at a time;
- calls per second with 8 requests pipelined on one connection;
- bring-up: N sessions (N = 1, 8) started at once, each a `toolyard call --session` whose
  template names `{session}`, so the link's wrapper plays one pod per session
  (`podman kube play`) and then execs `podman exec -i`: from the start to each first answer.
  The same N calls with local runners are the baseline.

Needs root and podman (bench/run installs it); everything it makes (pods, containers, images) is
removed at the end.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from common import REPO, TOOLYARD, Lean, loadavg, log, save, stamp, summary, toolyard_env

HERE = REPO / "tests" / "containers"
CONF = HERE / "containers.conf"
NOBODY = 65534
FIXTURE = "".join(f"line {i:04} of the fixture file, padded to sixty-four bytes.......\n" for i in range(64))


def podman(*args: str, check: bool = True) -> str:
    p = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=120)
    if check and p.returncode != 0:
        raise RuntimeError(f"podman {' '.join(args)}: {p.stderr.strip()[-500:]}")
    return p.stdout


def images() -> set[str]:
    return set(podman("images", "-q", "--no-trunc").split())


def play(name: str, image: str, ws: Path, tmp: Path) -> None:
    """Start pod `name` (container `name-runner`) from tests/containers/pod.sh's manifest."""
    manifest = tmp / f"{name}.yaml"
    manifest.write_text(subprocess.run(["bash", str(HERE / "pod.sh"), name, image, str(ws)],
                                       capture_output=True, text=True, check=True).stdout)
    podman("kube", "play", "--network", "none", str(manifest))


def pod_ws(path: Path) -> Path:
    """A directory the pod's nobody owns, holding the fixture."""
    path.mkdir(parents=True)
    (path / "file.txt").write_text(FIXTURE)
    for p in [path, path / "file.txt"]:
        os.chown(p, NOBODY, NOBODY)
    return path


def catalog(path: Path, command: list[str]) -> Path:
    quoted = ", ".join(f'"{a}"' for a in command)
    path.write_text(f"[remote]\ncommand = [{quoted}]\n")
    return path


def round_trips(clients: dict[str, Lean], ops: dict[str, tuple[str, dict]], calls: int, warmup: int) -> dict:
    samples: dict[str, dict[str, list[float]]] = {k: {op: [] for op in ops} for k in clients}
    for i in range(warmup + calls):
        for op, (tool, args) in ops.items():
            order = list(clients.items())
            if i % 2:
                order.reverse()
            for name, c in order:
                t0 = time.perf_counter_ns()
                c.call(tool, args)
                if i >= warmup:
                    samples[name][op].append((time.perf_counter_ns() - t0) / 1e6)
    return {k: {op: summary(v) for op, v in per.items()} for k, per in samples.items()}


def per_second(clients: dict[str, Lean], ops: dict[str, tuple[str, dict]], inflight: int, seconds: float,
               rounds: int) -> dict:
    from mcp_bench import pipelined

    out: dict[str, dict[str, list[float]]] = {k: {op: [] for op in ops} for k in clients}
    for r in range(rounds):
        for op, call in ops.items():
            order = list(clients.items())
            if r % 2:
                order.reverse()
            for name, c in order:
                out[name][op].append(pipelined(c, [call], inflight, seconds))
    return {k: {op: sorted(v)[len(v) // 2] for op, v in per.items()} for k, per in out.items()}


def bring_up(n: int, env: dict, server_ws: Path, tmp: Path, tag: str) -> list[float]:
    """Start n sessions at once (`toolyard call --session`): ms from the start to each answer."""
    procs = []
    t0 = time.perf_counter()
    for i in range(n):
        procs.append(subprocess.Popen(
            [str(TOOLYARD), "call", "run_command", '{"command": "true"}', "--json", "--session", f"{tag}{i}",
             "-w", str(server_ws)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=tmp))
    done = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        done.append((time.perf_counter() - t0) * 1000)
        if p.returncode != 0:
            raise RuntimeError(f"bring-up call failed: {out.decode()[-300:]} {err.decode()[-300:]}")
    return done


SESSION_POD = """#!/bin/sh
# The [remote] command of the bring-up benchmark: one pod per session ({session} is $1), played
# on the session's first runner, then the runner through podman exec -i.
set -e
pod=tyb-$(echo "$1" | tr 'A-Z_' 'a-z-')
if ! podman pod exists "$pod"; then
  mkdir -p "$WS_ROOT/$pod"
  cp "$WS_ROOT/file.txt" "$WS_ROOT/$pod/"
  chown -R 65534:65534 "$WS_ROOT/$pod"
  bash "$POD_SH" "$pod" "$IMAGE" "$WS_ROOT/$pod" > "$WS_ROOT/$pod.yaml"
  podman kube play --network none "$WS_ROOT/$pod.yaml" >/dev/null
fi
exec podman exec -i "$pod-runner" toolyard runner --lane "$2" --workspace /workspace
"""


def run(calls: int = 300, warmup: int = 20, seconds: float = 1.0, rounds: int = 3, bringup_rounds: int = 3) -> dict:
    if os.geteuid() != 0:
        raise RuntimeError("the remote benchmark needs root (rootful podman pods)")
    if not shutil.which("podman"):
        raise RuntimeError("podman is not installed (bench/run installs it as root)")
    os.environ["CONTAINERS_CONF"] = str(CONF)
    data = stamp()
    data["podman"] = podman("--version").strip().removeprefix("podman version ")
    before = images()
    tag = f"localhost/toolyard-runner:bench-{os.getpid()}"
    pod = f"toolyard-bench-{os.getpid()}"
    tmp = Path(tempfile.mkdtemp(prefix="toolyard-bench-remote-"))
    os.chmod(tmp, 0o755)
    try:
        log(f"remote: image FROM scratch with {TOOLYARD}")
        subprocess.run(["bash", str(HERE / "image.sh"), str(TOOLYARD), tag], check=True, capture_output=True)
        t0 = time.perf_counter()
        play(pod, tag, pod_ws(tmp / "pod-ws"), tmp)
        data["pod_start_ms"] = (time.perf_counter() - t0) * 1000

        local_ws = tmp / "local-ws"
        local_ws.mkdir()
        (local_ws / "file.txt").write_text(FIXTURE)
        server_ws = tmp / "server-ws"  # the remote server's -w: only names its state
        server_ws.mkdir()
        remote_cat = catalog(tmp / "remote.toml", ["podman", "exec", "-i", f"{pod}-runner", "toolyard", "runner",
                                                   "--lane", "{lane}", "--workspace", "/workspace"])
        servers = {
            "local": (local_ws, toolyard_env(tmp / "state-local")),
            "podman": (server_ws, dict(toolyard_env(tmp / "state-podman"), TOOLYARD_CATALOG=str(remote_cat))),
        }
        clients = {}
        for name, (ws, env) in servers.items():
            c = Lean([str(TOOLYARD), "serve", "--workspace", str(ws)], env)
            c.handshake()
            clients[name] = c
        ops = {"read_file": ("read_file", {"path": "file.txt"}),
               "run_command": ("run_command", {"command": "true"})}
        log(f"remote: round trips, {calls} calls per op and link, alternating")
        data["round_trip"] = round_trips(clients, ops, calls, warmup)
        for op in ops:
            log(f"remote: {op} " + ", ".join(f"{k} {v[op]['median']:.2f} ms" for k, v in data["round_trip"].items()))
        log("remote: calls per second, 8 in flight")
        data["per_second_8"] = per_second(clients, ops, 8, seconds, rounds)
        for c in clients.values():
            c.close()

        # Bring-up: one pod per session, played by the link's wrapper on the first call.
        ws_root = tmp / "sessions"
        ws_root.mkdir()
        (ws_root / "file.txt").write_text(FIXTURE)
        wrapper = tmp / "session-pod.sh"
        wrapper.write_text(SESSION_POD)
        wrapper.chmod(0o755)
        session_cat = catalog(tmp / "sessions.toml", [str(wrapper), "{session}", "{lane}"])
        env_remote = dict(toolyard_env(tmp / "state-sessions"), TOOLYARD_CATALOG=str(session_cat),
                          WS_ROOT=str(ws_root), POD_SH=str(HERE / "pod.sh"), IMAGE=tag, HOME=str(tmp))
        env_local = dict(toolyard_env(tmp / "state-sessions-local"), HOME=str(tmp))
        data["bring_up"] = {}
        for n in (1, 8):
            pods_ms, local_ms = [], []
            for r in range(bringup_rounds):
                local_ms.append(max(bring_up(n, env_local, local_ws, tmp, f"l{n}r{r}s")))
                pods_ms.append(max(bring_up(n, env_remote, server_ws, tmp, f"p{n}r{r}s")))
                remove_pods("tyb-")
            data["bring_up"][str(n)] = {"pods": summary(pods_ms), "local": summary(local_ms)}
            log(f"remote: bring-up of {n}: pods {summary(pods_ms)['median']:.0f} ms, "
                f"local {summary(local_ms)['median']:.0f} ms")
    finally:
        remove_pods("tyb-")
        podman("pod", "rm", "-f", "-t", "0", pod, check=False)
        podman("rmi", "-f", tag, check=False)
        for image in images() - before:
            podman("rmi", "-f", image, check=False)
        shutil.rmtree(tmp, ignore_errors=True)
    data["load_end"] = loadavg()
    save("remote", data)
    return data


def remove_pods(prefix: str) -> None:
    names = [n for n in podman("pod", "ls", "--format", "{{.Name}}").split() if n.startswith(prefix)]
    if names:
        podman("pod", "rm", "-f", "-t", "0", *names, check=False)
