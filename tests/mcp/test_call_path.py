"""The call path under load, through the real binary: parallel calls, no lost update, nothing waits.

Every server and CLI process here runs with its own TOOLYARD_STATE_DIR and HOME (temp dirs), and
the last test checks that the real user state dir gained nothing. Bounds are orders of events
recorded by this process (which call completed first), never wall-clock thresholds.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import statistics
import subprocess
import time
import uuid
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest

from conftest import http_transport, pids_with_marker, text_of, toolyard_bin

pytestmark = pytest.mark.anyio

# Timings observed by the tests, printed at the end of the module (`pytest -s` shows them).
TIMINGS: dict[str, str] = {}


def _real_state_dirs() -> list[Path]:
    """Where Toolyard would keep state for the user running the tests, were nothing isolated."""
    home = Path(os.path.expanduser("~"))
    dirs = [home / ".local" / "state" / "toolyard"]
    if os.environ.get("XDG_STATE_HOME"):
        dirs.append(Path(os.environ["XDG_STATE_HOME"]) / "toolyard")
    return dirs


def _snapshot(dirs: list[Path]) -> set[str]:
    """Every path under `dirs` (two levels below each workspace dir is enough to see new state)."""
    seen: set[str] = set()
    for d in dirs:
        if not d.exists():
            continue
        seen.add(str(d))
        for root, subdirs, files in os.walk(d):
            depth = Path(root).relative_to(d).parts
            if len(depth) >= 3:
                subdirs[:] = []
            for name in subdirs + files:
                seen.add(str(Path(root) / name))
    return seen


# Taken at import, before any test starts a process.
REAL_STATE_DIRS = _real_state_dirs()
REAL_STATE_BEFORE = _snapshot(REAL_STATE_DIRS)


@pytest.fixture
def box(tmp_path: Path):
    """A workspace with a distinctive name, and an isolated state dir and HOME for the processes."""
    ws = tmp_path / f"cptest-{uuid.uuid4().hex[:8]}"
    ws.mkdir()
    state = tmp_path / "state"
    state.mkdir()
    home = tmp_path / "home"
    home.mkdir()
    env = dict(os.environ)
    env["TOOLYARD_STATE_DIR"] = str(state)
    env["HOME"] = str(home)
    env.pop("XDG_STATE_HOME", None)
    env.setdefault("TOOLYARD_LOG", "warn")
    return ws, env


class Http:
    """`toolyard serve --http 127.0.0.1:0` on `ws`, its address read from stderr."""

    def __init__(self, ws: Path, env: dict[str, str], extra: list[str] | None = None):
        self.proc = subprocess.Popen(
            [toolyard_bin(), "serve", "--workspace", str(ws), "--http", "127.0.0.1:0", *(extra or [])],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=env,
            text=True,
        )
        assert self.proc.stderr is not None
        self.url = None
        self.token = None
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            m = re.search(r"HTTP bearer token: (\S+)", line)
            if m:
                self.token = m.group(1)
            m = re.search(r"serving MCP on (http://\S+)", line)
            if m:
                self.url = m.group(1)
                break
        if self.url is None:
            self.stop()
            raise RuntimeError("toolyard serve --http did not report its address")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


    def client(self, mode: str):
        """An `mcp.Client` of this server, sending the token it printed."""
        from mcp import Client

        return Client(http_transport(self.url, self.token), mode=mode)


@contextlib.contextmanager
def http_server(ws: Path, env: dict[str, str], extra: list[str] | None = None):
    server = Http(ws, env, extra)
    try:
        yield server
    finally:
        server.stop()


@contextlib.asynccontextmanager
async def stdio_client(ws: Path, env: dict[str, str], extra: list[str] | None = None, mode: str = "legacy"):
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    params = StdioServerParameters(
        command=toolyard_bin(), args=["serve", "--workspace", str(ws), *(extra or [])], env=env
    )
    async with Client(params, mode=mode) as client:
        yield client


def kind(result) -> str | None:
    return (result.structured_content or {}).get("error_kind")


async def call_ok(client, tool: str, args: dict):
    result = await client.call_tool(tool, args)
    assert not result.is_error, f"{tool} {args.get('path', '')}: {text_of(result)[:500]}"
    return result


# One edit's outcome: (succeeded, error_kind, the text the model reads).
Outcome = tuple[bool, "str | None", str]


async def contend(markers: list[str], read, edit) -> list[dict[str, Outcome]]:
    """Rounds until every writer landed: all pending writers read, then all edit at once."""
    rounds: list[dict[str, Outcome]] = []
    pending = list(markers)
    while pending:
        async with anyio.create_task_group() as tg:
            for m in pending:
                tg.start_soon(read, m)
        outcomes: dict[str, Outcome] = {}

        async def one(m: str, outcomes: dict[str, Outcome] = outcomes) -> None:
            outcomes[m] = await edit(m)

        async with anyio.create_task_group() as tg:
            for m in pending:
                tg.start_soon(one, m)
        rounds.append(outcomes)
        pending = [m for m, (ok, _, _) in outcomes.items() if not ok]
        # Each round must land one edit, so this many rounds means none landed in some round.
        assert len(rounds) <= len(markers), f"no progress: {rounds[-1]}"
    return rounds


def check_rounds(ws: Path, name: str, original: str, markers: list[str], rounds: list[dict[str, Outcome]]):
    """The outcome of read-all-then-edit-all rounds on one file: one winner a round, no loss.

    Each round, every pending writer read the file before any of them edited it, so exactly one
    edit may succeed (the file changed under the others) and the others must be refused as stale
    with a message telling the model how to go on.
    """
    won: list[str] = []
    for i, outcomes in enumerate(rounds):
        winners = [m for m, (ok, _, _) in outcomes.items() if ok]
        assert len(winners) == 1, f"round {i}: {len(winners)} edits succeeded after the same read: {winners}"
        won += winners
        for m, (ok, k, text) in outcomes.items():
            if not ok:
                assert k == "stale_read", f"round {i}: {m} refused as {k!r}, not stale_read: {text[:300]}"
                # It says how to go on: read again, or (edit_file) it showed the current lines
                # and counts as the read itself.
                assert "read_file again" in text or "counts as reading it" in text, text
    assert sorted(won) == sorted(markers), "every writer must land exactly once"
    final = (ws / name).read_text()
    for m in markers:
        assert final.count(m + "\n") == 1, f"{m} lost or duplicated in the final file:\n{final}"
    # Nothing else changed: the original lines are all there, in order, around the inserted ones.
    kept = [line for line in final.splitlines(keepends=True) if not line.startswith("marker-")]
    assert "".join(kept) == original


SHARED = "shared.txt"
SHARED_TEXT = "".join(f"line {i}\n" for i in range(1, 21)) + "END\n"


def edit_args(marker: str) -> dict:
    return {"path": SHARED, "old_string": "END\n", "new_string": f"{marker}\nEND\n"}


# 1. Many sessions read then edit one file at once: one wins each round, the rest are stale.


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_eight_http_sessions_editing_one_file_lose_no_update(mode, box):
    ws, env = box
    (ws / SHARED).write_text(SHARED_TEXT)
    markers = [f"marker-http-{i}" for i in range(8)]
    with http_server(ws, env) as server:
        async with contextlib.AsyncExitStack() as stack:
            clients = {m: await stack.enter_async_context(server.client(mode)) for m in markers}

            async def read(m: str) -> None:
                await call_ok(clients[m], "read_file", {"path": SHARED})

            async def edit(m: str) -> Outcome:
                r = await clients[m].call_tool("edit_file", edit_args(m))
                return (not r.is_error, kind(r), text_of(r))

            rounds = await contend(markers, read, edit)
    check_rounds(ws, SHARED, SHARED_TEXT, markers, rounds)


async def cli(ws: Path, env: dict[str, str], session: str, tool: str, args: dict) -> dict:
    """`toolyard call --json` in its own process; the ToolResult it printed."""
    proc = await anyio.run_process(
        [toolyard_bin(), "call", "-w", str(ws), "--session", session, "--json", tool, json.dumps(args)],
        env=env,
        check=False,
    )
    try:
        return json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"toolyard call {tool} printed no JSON (exit {proc.returncode}): {proc.stderr.decode()[-800:]}")


async def test_four_cli_processes_editing_one_file_lose_no_update(box):
    ws, env = box
    (ws / SHARED).write_text(SHARED_TEXT)
    markers = [f"marker-cli-{i}" for i in range(4)]

    async def read(m: str) -> None:
        r = await cli(ws, env, f"s-{m}", "read_file", {"path": SHARED})
        assert r["success"], r["output"]

    async def edit(m: str) -> Outcome:
        r = await cli(ws, env, f"s-{m}", "edit_file", edit_args(m))
        return (bool(r["success"]), r.get("error_kind"), r["output"])

    rounds = await contend(markers, read, edit)
    check_rounds(ws, SHARED, SHARED_TEXT, markers, rounds)


# 2. 32 concurrent edits of 32 different files all land.


@pytest.mark.parametrize("layout", ["one-stdio-session", "four-http-sessions"])
async def test_thirty_two_concurrent_edits_of_different_files_all_land(layout, box):
    ws, env = box
    names = [f"f{i:02d}.txt" for i in range(32)]
    for n in names:
        (ws / n).write_text(f"{n} head\nOLD\n{n} tail\n")
    results: dict[str, object] = {}

    async def read_then_edit_all(client, mine: list[str]) -> None:
        async with anyio.create_task_group() as tg:
            for n in mine:
                tg.start_soon(call_ok, client, "read_file", {"path": n})

        async def edit(n: str) -> None:
            results[n] = await client.call_tool("edit_file", {"path": n, "old_string": "OLD", "new_string": f"NEW {n}"})

        async with anyio.create_task_group() as tg:
            for n in mine:
                tg.start_soon(edit, n)

    if layout == "one-stdio-session":
        async with stdio_client(ws, env) as client:
            await read_then_edit_all(client, names)
    else:
        with http_server(ws, env) as server:
            async with contextlib.AsyncExitStack() as stack:
                clients = [await stack.enter_async_context(server.client("legacy")) for _ in range(4)]
                async with anyio.create_task_group() as tg:
                    for k, c in enumerate(clients):
                        tg.start_soon(read_then_edit_all, c, names[k::4])

    failed = {n: text_of(r) for n, r in results.items() if r.is_error}
    assert not failed, failed
    assert sorted(results) == names
    for n in names:
        assert (ws / n).read_text() == f"{n} head\nNEW {n}\n{n} tail\n"
    # The journal has one done change per file.
    log = await anyio.run_process([toolyard_bin(), "log", "-w", str(ws), "--json"], env=env)
    changes = [c for c in json.loads(log.stdout) if c["tool"] == "edit_file"]
    assert sorted(c["path"] for c in changes) == names
    assert {c["status"] for c in changes} == {"done"}


# 3. Reads during writes never see a torn file.


def version(tag: str) -> str:
    """1 MiB of 64-byte lines, every byte position differing between tags A and B."""
    return "".join(f"{tag}{i:08d} ".ljust(63, tag.lower()) + "\n" for i in range(16384))


async def test_reads_during_writes_see_one_whole_version(box):
    ws, env = box
    a, b = version("A"), version("B")
    assert len(a) == len(b) == 1 << 20
    hashes = {hashlib.sha256(a.encode()).hexdigest(): "A", hashlib.sha256(b.encode()).hexdigest(): "B"}
    (ws / "big.txt").write_text(a)
    reads: list[str] = []
    bad: list[str] = []
    writes = 0
    writing = True

    async def writer(client) -> None:
        nonlocal writes, writing
        await call_ok(client, "read_file", {"path": "big.txt", "limit": 1})
        try:
            # Keep writing until the reader has seen both versions many times (capped).
            while writes < 300 and (writes < 10 or len(reads) < 40 or len(set(reads)) < 2):
                await call_ok(client, "write_file", {"path": "big.txt", "content": b if writes % 2 == 0 else a})
                writes += 1
        finally:
            writing = False

    async def reader(client) -> None:
        while writing:
            r = await call_ok(client, "read_file", {"path": "big.txt", "max_bytes": 4 << 20})
            data = r.structured_content
            assert data["truncated"] is False
            got = hashes.get(hashlib.sha256(data["contents"].encode()).hexdigest())
            if got is None:
                bad.append(f"{len(data['contents'])} bytes, starts {data['contents'][:20]!r}")
            elif writing:
                reads.append(got)

    # The writer speaks loopr over HTTP; the reader is a loom-dialect server on the same
    # workspace, whose read_file returns the contents raw.
    with http_server(ws, env) as server:
        async with (
            server.client("legacy") as w,
            stdio_client(ws, env, ["--dialect", "loom"]) as r,
            anyio.create_task_group() as tg,
        ):
            tg.start_soon(writer, w)
            tg.start_soon(reader, r)
    assert not bad, f"torn reads: {bad[:5]}"
    assert set(reads) == {"A", "B"}, f"the reader saw {set(reads)} over {len(reads)} reads during {writes} writes"
    TIMINGS["torn-reads"] = f"{len(reads)} reads during {writes} 1 MiB writes, all whole"


# 4. Long commands do not hold up a read.

# Both ways calls run: in sandboxed runner processes, and in the server's process (--inline).
INLINE = {"runners": [], "inline": ["--inline"]}


@pytest.mark.parametrize("where", ["runners", "inline"])
async def test_a_read_completes_while_eight_long_commands_run(where, box):
    ws, env = box
    (ws / "hello.txt").write_text("hello\nworld\n")
    marker = f"cp-sleep-{uuid.uuid4().hex[:10]}"
    done: dict[str, float] = {}
    outputs: dict[str, object] = {}

    async def timed_read(client) -> float:
        t0 = time.monotonic()
        await call_ok(client, "read_file", {"path": "hello.txt"})
        return time.monotonic() - t0

    async with stdio_client(ws, env, INLINE[where]) as client:
        await timed_read(client)  # starts the no-net runner
        idle = [await timed_read(client) for _ in range(5)]

        async def command(i: int) -> None:
            r = await client.call_tool(
                "run_command", {"command": f"sleep 5 && echo {marker}-{i}-end", "timeout_ms": 60000}
            )
            done[f"cmd{i}"] = time.monotonic()
            outputs[f"cmd{i}"] = r

        async with anyio.create_task_group() as tg:
            for i in range(8):
                tg.start_soon(command, i)
            # Only read once all eight commands are really running.
            deadline = time.monotonic() + 30
            while not all(pids_with_marker(f"{marker}-{i}-end") for i in range(8)):
                assert not done, f"a command ended before all had started: {outputs}"
                assert time.monotonic() < deadline, "the eight commands never all ran at once"
                await anyio.sleep(0.05)
            busy = []
            for k in range(3):
                busy.append(await timed_read(client))
                done[f"read{k}"] = time.monotonic()

    for i in range(8):
        r = outputs[f"cmd{i}"]
        assert not r.is_error, text_of(r)
        assert f"{marker}-{i}-end" in text_of(r)
    first_command = min(t for k, t in done.items() if k.startswith("cmd"))
    order = sorted(done, key=done.get)
    assert all(done[f"read{k}"] < first_command for k in range(3)), f"completion order: {order}"
    TIMINGS[f"read during 8 commands ({where})"] = (
        f"idle read median {statistics.median(idle) * 1000:.1f} ms, "
        f"during 8 sleeps median {statistics.median(busy) * 1000:.1f} ms (max {max(busy) * 1000:.1f} ms)"
    )


# 5. A ping (and a small read) answers while two 50 MB edits run.


def write_big(path: Path, needle: str) -> None:
    """50 MB of 100-byte lines with `needle` on its own line in the middle."""
    line = ("y" * 99 + "\n").encode()
    block = line * 10_000  # 1 MB
    with path.open("wb") as f:
        for _ in range(25):
            f.write(block)
        f.write(f"{needle}\n".encode())
        for _ in range(25):
            f.write(block)


def edits_for(where: str) -> int:
    """How many 50 MB edits run at once: two, as many as the server has runtime workers inline.

    A runner has two runtime workers whatever the machine; `--inline`, the server's runtime has
    one per core, so it takes that many blocking edits to show that blocking work starves it.
    """
    if where == "runners":
        return 2
    cores = len(os.sched_getaffinity(0))
    if cores > 8:
        pytest.skip(f"{cores} cores: too many 50 MB files to occupy every runtime worker")
    return max(2, cores)


async def probe_during_big_edits(where: str, box, probe: str) -> tuple[list[str], float, float, list[float]]:
    """Start the big edits, then `probe` (ping or a small read_file) on the same stdio connection.

    Returns the completion order, the probe's latency idle (median) and during the edits, and
    how long each edit took.
    """
    ws, env = box
    names = [f"big{i}.txt" for i in range(edits_for(where))]
    for n in names:
        write_big(ws / n, f"NEEDLE-{n}")
    (ws / "hello.txt").write_text("hello\nworld\n")
    done: dict[str, float] = {}
    edits: dict[str, object] = {}

    async with stdio_client(ws, env, INLINE[where], mode="legacy") as client:

        async def run_probe() -> None:
            if probe == "ping":
                await client.send_ping()
            else:
                await call_ok(client, "read_file", {"path": "hello.txt"})

        for n in names:
            await call_ok(client, "read_file", {"path": n, "limit": 1})
        idle = []
        for _ in range(5):
            t0 = time.monotonic()
            await run_probe()
            idle.append(time.monotonic() - t0)

        async def edit(n: str) -> None:
            edits[n] = await client.call_tool(
                "edit_file", {"path": n, "old_string": f"NEEDLE-{n}\n", "new_string": f"DONE-{n}\n"}
            )
            done[n] = time.monotonic()

        async with anyio.create_task_group() as tg:
            started = time.monotonic()
            for n in names:
                tg.start_soon(edit, n)
            # Let the edit requests go out on the pipe ahead of the probe.
            for _ in range(10):
                await anyio.lowlevel.checkpoint()
            await anyio.sleep(0.05)
            assert not done, "an edit finished before the probe was sent; nothing was measured"
            t0 = time.monotonic()
            await run_probe()
            done[probe] = time.monotonic()
            during = done[probe] - t0

    for n in names:
        assert not edits[n].is_error, text_of(edits[n])
        with (ws / n).open("rb") as f:
            f.seek(25 * 1_000_000)
            assert f.read(len(n) + 6) == f"DONE-{n}\n".encode()
    order = sorted(done, key=done.get)
    TIMINGS[f"{probe} during {len(names)} 50 MB edits ({where})"] = (
        f"idle median {statistics.median(idle) * 1000:.1f} ms; during the edits {during * 1000:.1f} ms; "
        f"edits took {', '.join(f'{done[n] - started:.2f} s' for n in names)}; order {order}"
    )
    return order, during, statistics.median(idle), [done[n] - started for n in names]




@pytest.mark.parametrize("where", ["runners", "inline"])
async def test_a_ping_answers_while_two_fifty_megabyte_edits_run(where, box):
    order, *_ = await probe_during_big_edits(where, box, "ping")
    assert order[0] == "ping", f"the ping waited for an edit; completion order: {order}"


@pytest.mark.parametrize("where", ["runners", "inline"])
async def test_a_small_read_answers_while_two_fifty_megabyte_edits_run(where, box):
    order, *_ = await probe_during_big_edits(where, box, "read")
    assert order[0] == "read", f"the read waited for an edit; completion order: {order}"


# 6. Last: the real user state dir gained nothing.


def test_zz_the_real_user_state_dir_is_untouched():
    after = _snapshot(REAL_STATE_DIRS)
    new = sorted(after - REAL_STATE_BEFORE)
    ours = [p for p in new if "cptest-" in p]
    assert not new, f"new in the real state dir ({len(ours)} from this module's workspaces): {new[:10]}"
    for k, v in TIMINGS.items():
        print(f"[timing] {k}: {v}")
