"""Toolyard inside the real clients: Claude Code and Codex CLI.

Each client runs one scripted conversation per dialect against a local model
server (model_server.py).  The client starts Toolyard as an MCP server, calls the
tools the script names, and sends each tool result back to the "model"; the
tests read those results out of the logged requests, so they check exactly what
a model would have been shown.  The default dialect's conversation calls every
tool `toolyard tools` lists, with a catalog giving `validate` its command and
letting web_fetch reach one of two pages the tests serve on loopback.

The clients come from `npm ci --prefix tests/clients` (see run.sh).  The Toolyard
binary is TOOLYARD_BIN, default <repo>/target/debug/toolyard.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))

from model_server import ModelServer, call_id, tool_use_id  # noqa: E402

TOOLYARD_BIN = Path(os.environ.get("TOOLYARD_BIN") or REPO / "target" / "debug" / "toolyard")
# The embedder's example (examples/embedded-tool), built by `cargo build --workspace --bins`.
EMBEDDED_BIN = Path(
    os.environ.get("TOOLYARD_EMBEDDED_BIN") or TOOLYARD_BIN.parent / "embedded-tool"
)
CLIENT_BIN = HERE / "node_modules" / ".bin"
CLIENT_TIMEOUT = 180  # seconds for one whole scripted conversation

NOTES = (
    "alpha line one\n"
    "second line\n"
    "third line\n"
    "GIRAFFE_LINE_4 the tall giraffe\n"
    "fifth line\n"
    "sixth line\n"
    "ZEBRA_LINE_7 the quick zebra\n"
    "eighth line\n"
)

# Markers of the two pages the test serves on loopback for web_fetch: the catalog
# lifts the SSRF guard for the first server's host:port only.
PAGE_MARKER = "Kestrelpage"
FORBIDDEN_MARKER = "Forbiddenpage"
# The name the catalog's [network] resolve pins to 127.0.0.1, for the command's network probe.
PINNED_PAGE_HOST = "page.test"
# The command `validate` runs when called with no `command`: [project] in the catalog.
VALIDATE_MARKER = "VALIDATE_FROM_CATALOG"
# A shell command that fetches the URL after it and says whether it could; with no
# python3 it prints neither marker, so a missing probe cannot pass for "blocked".
NET_PROBE = (
    "python3 -c 'import sys, urllib.request\n"
    'try:\n urllib.request.urlopen(sys.argv[1], timeout=5); print("NET_REACHED")\n'
    'except OSError as e:\n print("NET_BLOCKED", e)\''
)


# A 1x1 red PNG.
PIXEL_PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010802000000907753de"
    "0000000c49444154789c63f8cfc0000003010100c9fe92ef0000000049454e44ae426082"
)


def loopr_script(page_url: str, forbidden_url: str) -> list[dict]:
    """The default (loopr) dialect: one conversation exercising every tool, each step
    named (`name`, which the model server ignores) so tests can find its result."""
    # By a name the catalog pins to the page's address: the net lane reaches the network only
    # through its egress gate, which resolves names (and refuses the host's loopback unless the
    # catalog names it).
    net_probe = f"{NET_PROBE} {page_url.replace('127.0.0.1', PINNED_PAGE_HOST)}"
    return [
        {"name": "read", "tool": "read_file", "args": {"path": "notes.txt"}},
        {"name": "image", "tool": "read_file", "args": {"path": "pixel.png"}},
        {
            "name": "read_window",
            "tool": "read_file",
            "args": {"path": "rows.txt", "offset": 10, "limit": 5},
        },
        {"name": "grep", "tool": "grep", "args": {"pattern": "MARKER_GAMMA"}},
        {"name": "glob", "tool": "glob", "args": {"pattern": "**/*.rs"}},
        {"name": "list_directory", "tool": "list_directory", "args": {"path": "."}},
        {
            "name": "edit",
            "tool": "edit_file",
            "args": {
                "path": "notes.txt",
                "old_string": "ZEBRA_LINE_7 the quick zebra",
                "new_string": "ZEBRA_LINE_7 the slow zebra",
            },
        },
        {
            "name": "edit_wrong",
            "tool": "edit_file",
            "args": {
                "path": "notes.txt",
                "old_string": "GIRAFFE_LINE_4 the tal giraffe\nfifth lin",
                "new_string": "nothing",
            },
        },
        {"name": "seq", "tool": "run_command", "args": {"command": "seq 1 100000"}},
        {
            "name": "fail",
            "tool": "run_command",
            "args": {"command": "echo FAILMARK_STDERR >&2; exit 7"},
        },
        {
            "name": "write",
            "tool": "write_file",
            "args": {"path": "fresh_puffin.txt", "content": "PUFFIN_CONTENT\n"},
        },
        # No change_id: undo takes this session's last change, the write just above.
        {"name": "undo", "tool": "undo", "args": {}},
        {"name": "read_gone", "tool": "read_file", "args": {"path": "fresh_puffin.txt"}},
        # The same probe of the loopback page server, first where the network is
        # allowed (so the probe itself is shown to work), then isolated.
        {"name": "net_control", "tool": "run_command", "args": {"command": net_probe}},
        {
            "name": "isolated",
            "tool": "run_command_isolated",
            "args": {"command": "echo ISOLATED_OSPREY; " + net_probe},
        },
        # A background process (the first of this fresh server's net runner: net-1),
        # driven through the process tools, then the persistent shell.
        {
            "name": "bg",
            "tool": "run_command",
            "args": {
                "command": "echo BG_HERON_START; read l; echo GOT_$l; sleep 60",
                "background": True,
            },
        },
        {"name": "plist", "tool": "process_list", "args": {}},
        {
            "name": "pinput",
            "tool": "process_input",
            "args": {"process_id": "net-1", "text": "KITE\n", "wait_ms": 3000},
        },
        {"name": "poutput", "tool": "process_output", "args": {"process_id": "net-1"}},
        {"name": "pkill", "tool": "process_kill", "args": {"process_id": "net-1"}},
        {"name": "shell1", "tool": "shell", "args": {"command": "export SHELL_MARK=PELICAN; cd src"}},
        {"name": "shell2", "tool": "shell", "args": {"command": "echo $SHELL_MARK in $(basename $PWD)"}},
        {"name": "build", "tool": "build", "args": {"command": "echo BUILD_HERON"}},
        {"name": "test", "tool": "test", "args": {"command": "echo TEST_EGRET; exit 3"}},
        {"name": "validate", "tool": "validate", "args": {}},
        {"name": "fetch", "tool": "web_fetch", "args": {"url": page_url}},
        {"name": "fetch_blocked", "tool": "web_fetch", "args": {"url": forbidden_url}},
        {
            "name": "plan",
            "tool": "create_plan",
            "args": {
                "title": "Heron Plan",
                "overview": "PLAN_OVERVIEW_HERON: build a bird feeder",
                "specs": [{"name": "feeder", "title": "Feeder", "description": "the feeder"}],
            },
        },
        {
            "name": "spec",
            "tool": "create_spec",
            "args": {
                "name": "feeder",
                "title": "Feeder Spec",
                "overview": "SPEC_OVERVIEW_WREN",
                "phases": [
                    {"name": "frame", "title": "Frame", "description": "the frame"},
                    {"name": "roof", "title": "Roof", "description": "the roof"},
                    {
                        "name": "seed",
                        "title": "Seed",
                        "description": "the seed tray",
                        "validation": "make check",
                    },
                ],
            },
        },
        {
            "name": "phase",
            "tool": "create_phase",
            "args": {
                "name": "frame",
                "title": "Frame",
                "objective": "PHASE_OBJECTIVE_ROBIN",
                "tasks": [
                    {"description": "add the frame", "file": "src/frame.rs", "action": "create"}
                ],
                "validation_command": "cargo test -p feeder",
            },
        },
        # The language-server tools (issue 23): no server here, so each says what covers what.
        {"name": "diagnostics", "tool": "diagnostics", "args": {"path": "notes.txt"}},
        {"name": "outline", "tool": "outline", "args": {"path": "notes.txt"}},
        {
            "name": "lsp",
            "tool": "lsp",
            "args": {"operation": "hover", "path": "notes.txt", "line": 1, "character": 1},
        },
        {
            "name": "rename_symbol",
            "tool": "rename_symbol",
            "args": {"path": "notes.txt", "line": 1, "character": 1, "new_name": "x"},
        },
        # Last: a model calls it when it is done.
        {
            "name": "complete",
            "tool": "complete_task",
            "args": {"summary": "COMPLETE_SUMMARY_SWIFT all steps played"},
        },
    ]


def step_index(script: list[dict]) -> dict[str, int]:
    """Each named step's index in `script`."""
    return {item["name"]: i for i, item in enumerate(script) if "name" in item}


# Only the names matter here; the URLs are filled in per run.
STEP = step_index(loopr_script("", ""))

LOOM_SCRIPT = [
    {"tool": "read_file", "args": {"path": "notes.txt"}},
    {"tool": "bash", "args": {"command": "echo LOOM_BASH_OK; exit 3"}},
]

LOOM_PY_SCRIPT = [
    {"tool": "read_file", "args": {"path": "notes.txt", "line_range": [4, 7]}},
    {"tool": "shell_execute", "args": {"command": "echo PY_SHELL_OK"}},
]

# ---------------------------------------------------------------- helpers


class Transcript:
    """What one client run sent to the model, step by step."""

    def __init__(self, client: str, log: list[dict], script: list[dict], run_info: str, ws: Path):
        self.client = client
        self.log = log
        self.script = script
        self.run_info = run_info
        self.ws = ws  # the workspace the client's Toolyard served, as the run left it

    def result(self, step: int) -> dict:
        """The tool result for `step`: {"raw": text the model read, "is_error": ...}."""
        want = tool_use_id(step) if self.client == "claude" else call_id(step)
        for rec in self.log:
            found = _find_result(self.client, rec.get("body"), want)
            if found is not None:
                return found
        issued = [rec["reply"] for rec in self.log if rec.get("reply", {}).get("id")]
        pytest.fail(
            f"{self.client}: no tool result for step {step} ({self.script[step]}) reached "
            f"the model. Calls issued: {issued}\n{self.run_info}"
        )


def _text_of(content) -> str:
    """Join a tool result's content (a string, or a list of text blocks)."""
    if isinstance(content, str):
        return content
    parts = []
    for block in content or []:
        if isinstance(block, dict) and isinstance(block.get("text"), str):
            parts.append(block["text"])
    return "\n".join(parts)


def _kinds(content) -> list[str]:
    """The types of a tool result's content blocks (`text`, `image`, `input_image`, ...)."""
    if isinstance(content, str):
        return ["text"]
    return [b.get("type", "?") for b in content or [] if isinstance(b, dict)]


def _find_result(client: str, body, want: str) -> dict | None:
    if not isinstance(body, dict):
        return None
    if client == "claude":
        for msg in body.get("messages") or []:
            if msg.get("role") != "user" or not isinstance(msg.get("content"), list):
                continue
            for block in msg["content"]:
                if block.get("type") == "tool_result" and block.get("tool_use_id") == want:
                    return {
                        "raw": _text_of(block.get("content")),
                        "is_error": bool(block.get("is_error")),
                        "kinds": _kinds(block.get("content")),
                    }
    else:
        inp = body.get("input")
        for item in inp if isinstance(inp, list) else []:
            if item.get("type") == "function_call_output" and item.get("call_id") == want:
                return {
                    "raw": _text_of(item.get("output")),
                    "is_error": None,
                    "kinds": _kinds(item.get("output")),
                }
    return None


def structured(raw: str) -> dict | None:
    """The structuredContent object the client passed on as JSON text, if it did.

    Codex prefixes MCP results with "Wall time: ...\\nOutput:\\n"; Claude Code
    passes the JSON as it is.
    """
    text = raw
    marker = "Output:\n"
    if text.startswith("Wall time:") and marker in text:
        text = text.split(marker, 1)[1]
    text = text.strip()
    if not text.startswith("{"):
        return None
    try:
        obj = json.loads(text)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


def output(res: dict) -> str:
    """The model-facing tool output: `output` of the structuredContent envelope when
    the client handed the model that envelope, else the text as the model got it."""
    obj = structured(res["raw"])
    if obj is not None and isinstance(obj.get("output"), str):
        return obj["output"]
    return res["raw"]


def _base_env(home: Path, state: Path) -> dict:
    """A minimal environment: nothing of the caller's clients, keys or config."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LANG": os.environ.get("LANG", "C.UTF-8"),
        "HOME": str(home),
        "TMPDIR": os.environ.get("TMPDIR", "/tmp"),
        "TOOLYARD_STATE_DIR": str(state),
        "NO_COLOR": "1",
    }
    for key in ("SSL_CERT_FILE", "SSL_CERT_DIR", "NODE_EXTRA_CA_CERTS"):
        if key in os.environ:
            env[key] = os.environ[key]
    return env


def _run(cmd: list[str], env: dict, cwd: Path, timeout: int = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        cmd,
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _make_workspace(ws: Path) -> None:
    (ws / "src" / "deep").mkdir(parents=True)
    (ws / "notes.txt").write_text(NOTES)
    (ws / "pixel.png").write_bytes(PIXEL_PNG)
    (ws / "rows.txt").write_text("".join(f"row {i:03d}\n" for i in range(1, 61)))
    (ws / "src" / "lib.rs").write_text("pub fn alpha() -> u32 {\n    7 // MARKER_GAMMA in lib\n}\n")
    (ws / "src" / "deep" / "unicorn_module.rs").write_text("pub fn unicorn() {}\n")


def _require(path: Path, what: str, fix: str) -> None:
    if not path.exists():
        pytest.fail(f"{what} not found at {path}: {fix}")


def run_client(
    client: str,
    dialect: str,
    root: Path,
    script: list[dict],
    catalog: str | None = None,
    embedded: bool = False,
) -> Transcript:
    """Run one scripted conversation of `client` with Toolyard serving `dialect`,
    with `catalog` (TOML text) laid over the built-in catalog if given; with `embedded`,
    the server is the embedder's example binary instead of `toolyard serve`."""
    _require(
        TOOLYARD_BIN, "the Toolyard binary", "run `cargo build -p toolyard` or set TOOLYARD_BIN"
    )
    if embedded:
        _require(
            EMBEDDED_BIN,
            "the embedded-tool example",
            "run `cargo build --workspace --bins` or set TOOLYARD_EMBEDDED_BIN",
        )
    exe = CLIENT_BIN / client
    _require(
        exe, f"the {client} client", "run tests/clients/run.sh (npm ci --prefix tests/clients)"
    )
    home, ws, state = root / "home", root / "ws", root / "state"
    for d in (home, state):
        d.mkdir(parents=True)
    _make_workspace(ws)
    log_path = root / "model_requests.jsonl"
    serve = [str(TOOLYARD_BIN), "serve", "-w", str(ws)]
    if dialect != "loopr":
        serve += ["--dialect", dialect]
    if catalog is not None:
        catalog_path = root / "catalog.toml"
        catalog_path.write_text(catalog)
        serve += ["--catalog", str(catalog_path)]
    if embedded:
        # Its workspace is its current directory, whatever directory the client starts it in.
        serve = ["sh", "-c", 'cd "$1" && exec "$2" serve', "sh", str(ws), str(EMBEDDED_BIN)]
    env = _base_env(home, state)

    with ModelServer(script, str(log_path)) as srv:
        base = f"http://127.0.0.1:{srv.port}"
        if client == "claude":
            env.update(
                ANTHROPIC_BASE_URL=base,
                ANTHROPIC_API_KEY="dummy-key",
                DISABLE_AUTOUPDATER="1",
                CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
                DISABLE_TELEMETRY="1",
                DISABLE_ERROR_REPORTING="1",
                # Generous limits (ms): a busy CI machine must not time out the server.
                MCP_TIMEOUT="120000",
                MCP_TOOL_TIMEOUT="120000",
            )
            add = _run(
                [str(exe), "mcp", "add", "--scope", "user", "toolyard", "--", *serve], env, ws
            )
            assert add.returncode == 0, f"claude mcp add failed: {add.stdout}{add.stderr}"
            cmd = [
                str(exe),
                "-p",
                "go",
                "--allowedTools",
                "mcp__toolyard__*",
                "--output-format",
                "json",
            ]
        else:
            codex_home = home / ".codex"
            codex_home.mkdir()
            env.update(CODEX_HOME=str(codex_home), SCRIPTED_MODEL_KEY="dummy-key")
            (codex_home / "config.toml").write_text(
                "\n".join(
                    [
                        'model = "scripted-model"',
                        'model_provider = "scripted"',
                        'approval_policy = "never"',
                        "check_for_update_on_startup = false",
                        # Off: each would reach past loopback (plugin marketplace
                        # sync by git, ChatGPT apps) and only fail here.
                        "[features]",
                        "plugins = false",
                        "remote_plugin = false",
                        "apps = false",
                        "[analytics]",
                        "enabled = false",
                        "[model_providers.scripted]",
                        'name = "scripted"',
                        f'base_url = "{base}/v1"',
                        'wire_api = "responses"',
                        'env_key = "SCRIPTED_MODEL_KEY"',
                        "",
                    ]
                )
            )
            add = _run([str(exe), "mcp", "add", "toolyard", "--", *serve], env, ws)
            assert add.returncode == 0, f"codex mcp add failed: {add.stdout}{add.stderr}"
            cmd = [
                str(exe),
                "exec",
                "--skip-git-repo-check",
                # With approval_policy "never" Codex refuses MCP calls that are not
                # pre-approved; `codex mcp add` cannot set this, so say it here.
                "-c",
                'mcp_servers.toolyard.default_tools_approval_mode="approve"',
                # Generous limits: a busy CI machine must not time out the server.
                "-c",
                "mcp_servers.toolyard.startup_timeout_sec=120",
                "-c",
                "mcp_servers.toolyard.tool_timeout_sec=120",
                "go",
            ]
        proc = _run(cmd, env, ws, timeout=CLIENT_TIMEOUT)

    log = []
    if log_path.exists():
        log = [json.loads(line) for line in log_path.read_text().splitlines() if line.strip()]
    info = (
        f"--- {client} exit {proc.returncode}\n--- stdout\n{proc.stdout[-3000:]}\n"
        f"--- stderr\n{proc.stderr[-3000:]}"
    )
    assert proc.returncode == 0, f"{client} failed\n{info}"
    return Transcript(client, log, script, info, ws)


CLIENTS = ["claude", "codex"]


class Page:
    """A one-page HTTP server on 127.0.0.1 that counts the requests it answers."""

    def __init__(self, marker: str):
        self.hits = 0
        html = (
            f"<html><head><title>{marker}</title></head><body>"
            f"<h1>{marker} heading</h1><p>The {marker} paragraph.</p></body></html>"
        ).encode()
        page = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, fmt, *args):  # keep stderr quiet
                pass

            def do_GET(self):
                page.hits += 1
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(html)))
                self.end_headers()
                self.wfile.write(html)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/"
        self.host_port = f"127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def pages():
    """The page web_fetch may fetch, and one on another loopback port it may not."""
    allowed, forbidden = Page(PAGE_MARKER), Page(FORBIDDEN_MARKER)
    yield allowed, forbidden
    allowed.stop()
    forbidden.stop()


@pytest.fixture(scope="module", params=CLIENTS)
def loopr(request, tmp_path_factory, pages) -> Transcript:
    allowed, forbidden = pages
    # [web] lifts the SSRF guard for the allowed page's host:port only; [project]
    # gives `validate` its command when called without one.
    catalog = (
        f'[project]\nvalidate = "echo {VALIDATE_MARKER}"\n\n'
        f'[web]\nallowed_hosts = ["{allowed.host_port}"]\n\n'
        f'[network]\nresolve = {{ "{PINNED_PAGE_HOST}" = "127.0.0.1" }}\n'
    )
    return run_client(
        request.param,
        "loopr",
        tmp_path_factory.mktemp(f"{request.param}-loopr"),
        loopr_script(allowed.url, forbidden.url),
        catalog,
    )


@pytest.fixture(scope="module", params=CLIENTS)
def loom(request, tmp_path_factory) -> Transcript:
    root = tmp_path_factory.mktemp(f"{request.param}-loom")
    return run_client(request.param, "loom", root, LOOM_SCRIPT)


@pytest.fixture(scope="module", params=CLIENTS)
def loom_py(request, tmp_path_factory) -> Transcript:
    root = tmp_path_factory.mktemp(f"{request.param}-loompy")
    return run_client(request.param, "loom-py", root, LOOM_PY_SCRIPT)


def assert_error_marked(t: Transcript, res: dict, error_kind: str) -> None:
    """Claude marks a failed call is_error; Codex has no such flag in a
    function_call_output, so the mark the model sees is the envelope's success/error."""
    if t.client == "claude":
        assert res["is_error"] is True, f"not marked is_error: {res}"
    else:
        env = structured(res["raw"])
        assert env is not None, f"no structured envelope reached the model: {res['raw']!r}"
        assert env.get("success") is False and env.get("error_kind") == error_kind, env


# ---------------------------------------------------------------- loopr (default)


def test_envelope_reaches_model(loopr: Transcript):
    # Both clients prefer structuredContent: the envelope itself is what the model reads.
    env = structured(loopr.result(STEP["read"])["raw"])
    assert env is not None, "the structuredContent envelope did not reach the model"
    assert env["success"] is True and env["files_changed"] == []
    assert "ZEBRA_LINE_7 the quick zebra" in env["output"]


def test_read_file_line_reaches_model(loopr: Transcript):
    out = output(loopr.result(STEP["read"]))
    assert "     7|ZEBRA_LINE_7 the quick zebra" in out
    assert "     4|GIRAFFE_LINE_4 the tall giraffe" in out


def test_read_file_window_and_continue_hint(loopr: Transcript):
    out = output(loopr.result(STEP["read_window"]))
    lines = [ln for ln in out.splitlines() if "|row " in ln]
    assert lines == [f"    {i}|row {i:03d}" for i in range(10, 15)], out
    assert "showing lines 10-14" in out and "continue with offset=15" in out


def test_grep_path_line_text(loopr: Transcript):
    out = output(loopr.result(STEP["grep"]))
    assert "src/lib.rs:2:    7 // MARKER_GAMMA in lib" in out.splitlines()


def test_glob_paths(loopr: Transcript):
    out = output(loopr.result(STEP["glob"]))
    assert set(out.split()) >= {"src/deep/unicorn_module.rs", "src/lib.rs"}, out


def test_list_directory_tree(loopr: Transcript):
    out = output(loopr.result(STEP["list_directory"]))
    for entry in ("src/", "deep/", "lib.rs (55 B)", "notes.txt", "rows.txt"):
        assert entry in out, f"{entry!r} missing from {out!r}"


def test_edit_file_success_shows_changed_lines(loopr: Transcript):
    res = loopr.result(STEP["edit"])
    out = output(res)
    assert res["is_error"] in (False, None)
    assert "Edited notes.txt: 1 replacement." in out
    assert "     7|ZEBRA_LINE_7 the slow zebra" in out
    env = structured(res["raw"])
    if env is not None:
        assert env["success"] is True
        assert any("notes.txt" in f for f in env["files_changed"]), env


def test_edit_file_wrong_old_string_is_error_with_nearest_lines(loopr: Transcript):
    res = loopr.result(STEP["edit_wrong"])
    out = output(res)
    assert_error_marked(loopr, res, "not_found")
    assert "old_string was not found in notes.txt" in out
    assert "     4|GIRAFFE_LINE_4 the tall giraffe" in out
    assert "     5|fifth line" in out


def test_long_command_output_keeps_both_ends_and_says_cut(loopr: Transcript):
    out = output(loopr.result(STEP["seq"]))
    lines = out.splitlines()
    assert "1" in lines and "100000" in lines, out[:400]
    assert "50000" not in lines  # the middle was cut ...
    assert "cut from the middle" in out and "output truncated" in out  # ... and it says so


def test_failing_command_exit_status(loopr: Transcript):
    res = loopr.result(STEP["fail"])
    out = output(res)
    assert "exit code: 7" in out and "FAILMARK_STDERR" in out
    assert_error_marked(loopr, res, "command_failed")


def assert_ok(t: Transcript, res: dict) -> None:
    """Not marked as an error, by whichever mark the client passes on."""
    assert res["is_error"] in (False, None), res
    env = structured(res["raw"])
    if env is not None:
        assert env.get("success") is True, env


def test_write_file_creates_then_undo_removes(loopr: Transcript):
    res = loopr.result(STEP["write"])
    assert_ok(loopr, res)
    assert "Created fresh_puffin.txt (15 bytes written)" in output(res)

    res = loopr.result(STEP["undo"])
    assert_ok(loopr, res)
    out = output(res)
    assert "(write_file on fresh_puffin.txt)" in out, out  # what was undone ...
    assert "removed fresh_puffin.txt" in out, out  # ... and what that did

    res = loopr.result(STEP["read_gone"])
    assert_error_marked(loopr, res, "file_not_found")
    assert "file not found: fresh_puffin.txt" in output(res)
    assert not (loopr.ws / "fresh_puffin.txt").exists()


def test_run_command_isolated_output_and_no_network(loopr: Transcript):
    control = output(loopr.result(STEP["net_control"])).splitlines()
    assert "NET_REACHED" in control, f"the probe fails even with the network: {control}"
    res = loopr.result(STEP["isolated"])
    assert_ok(loopr, res)
    lines = output(res).splitlines()
    assert "ISOLATED_OSPREY" in lines, lines
    # The page server on loopback answers run_command; the isolated one cannot reach it.
    assert any(ln.startswith("NET_BLOCKED") for ln in lines), lines
    assert "NET_REACHED" not in lines, lines


def test_a_png_reaches_the_model_as_an_image(loopr: Transcript):
    res = loopr.result(STEP["image"])
    # Claude Code sends an `image` block, Codex an `input_image` item, beside the text.
    assert any("image" in k for k in res["kinds"]), res
    assert "returned as an image" in output(res), res


def test_background_process_through_the_process_tools(loopr: Transcript):
    started = output(loopr.result(STEP["bg"]))
    assert "net-1" in started and "BG_HERON_START" in started, started
    listed = output(loopr.result(STEP["plist"]))
    assert "net-1" in listed and "BG_HERON_START" in listed or "net-1" in listed, listed
    answered = output(loopr.result(STEP["pinput"]))
    assert "GOT_KITE" in answered, answered
    polled = output(loopr.result(STEP["poutput"]))
    assert "net-1" in polled and "running" in polled, polled
    killed = output(loopr.result(STEP["pkill"]))
    assert "net-1" in killed, killed


def test_the_shell_keeps_its_state_between_calls(loopr: Transcript):
    res = loopr.result(STEP["shell2"])
    assert_ok(loopr, res)
    assert "PELICAN in src" in output(res), output(res)


def test_build_with_explicit_command(loopr: Transcript):
    res = loopr.result(STEP["build"])
    assert_ok(loopr, res)
    out = output(res)
    assert "exit code: 0" in out and "BUILD_HERON" in out.splitlines(), out


def test_failing_test_command_is_error_with_output(loopr: Transcript):
    res = loopr.result(STEP["test"])
    out = output(res)
    assert "exit code: 3" in out and "TEST_EGRET" in out.splitlines(), out
    assert_error_marked(loopr, res, "command_failed")


def test_validate_runs_the_catalog_project_command(loopr: Transcript):
    res = loopr.result(STEP["validate"])
    assert_ok(loopr, res)
    assert VALIDATE_MARKER in output(res).splitlines(), output(res)


def test_web_fetch_allowed_loopback_page_as_markdown(loopr: Transcript):
    res = loopr.result(STEP["fetch"])
    assert_ok(loopr, res)
    out = output(res)
    assert f"# {PAGE_MARKER} heading" in out.splitlines(), out
    assert f"The {PAGE_MARKER} paragraph." in out and "<h1>" not in out, out


def test_web_fetch_other_loopback_port_refused_by_ssrf_guard(loopr: Transcript, pages):
    res = loopr.result(STEP["fetch_blocked"])
    out = output(res)
    assert_error_marked(loopr, res, "blocked")
    assert "blocked by the SSRF guard" in out and "allowed_hosts" in out, out
    assert FORBIDDEN_MARKER not in out
    assert pages[1].hits == 0, "web_fetch connected to a host the guard should block"


def _artifact_confirmed(t: Transcript, step: str, text: str, kind: str, name: str, marker: str):
    res = t.result(STEP[step])
    assert_ok(t, res)
    out = output(res)
    stored = f".toolyard/artifacts/{kind}/{name}.json"
    assert out.startswith(text) and stored in out, out
    assert f".toolyard/artifacts/{kind}/{name}.md" in out, out
    # The path the model was given holds what it sent.
    assert marker in (t.ws / stored).read_text()


def test_create_plan_confirms_stored_path(loopr: Transcript):
    _artifact_confirmed(
        loopr,
        "plan",
        "Created plan `heron-plan` (1 spec)",
        "plans",
        "heron-plan",
        "PLAN_OVERVIEW_HERON",
    )


def test_create_spec_confirms_stored_path(loopr: Transcript):
    _artifact_confirmed(
        loopr, "spec", "Created spec `feeder` (3 phases)", "specs", "feeder", "SPEC_OVERVIEW_WREN"
    )


def test_create_phase_confirms_stored_path(loopr: Transcript):
    _artifact_confirmed(
        loopr,
        "phase",
        "Created phase `frame` (1 task)",
        "phases",
        "frame",
        "PHASE_OBJECTIVE_ROBIN",
    )


def test_complete_task_echoes_summary(loopr: Transcript):
    res = loopr.result(STEP["complete"])
    assert_ok(loopr, res)
    assert "Task complete: COMPLETE_SUMMARY_SWIFT all steps played" in output(res)


def test_every_default_dialect_tool_is_played(tmp_path: Path):
    # Whatever `toolyard tools` lists must be in the loopr conversation, so a new
    # tool cannot slip past these tests.
    _require(
        TOOLYARD_BIN, "the Toolyard binary", "run `cargo build -p toolyard` or set TOOLYARD_BIN"
    )
    home, state = tmp_path / "home", tmp_path / "state"
    home.mkdir()
    state.mkdir()
    listed = _run(
        [str(TOOLYARD_BIN), "tools", "--format", "mcp", "-w", str(tmp_path)],
        _base_env(home, state),
        tmp_path,
    )
    assert listed.returncode == 0, listed.stderr
    tools = {t["name"] for t in json.loads(listed.stdout)}
    assert "read_file" in tools, listed.stdout[:500]
    played = {item["tool"] for item in loopr_script("", "")}
    assert tools - played == set(), f"tools never called by the loopr script: {tools - played}"


# ---------------------------------------------------------------- tools of one's own

# A catalog tool that runs a command with typed parameters (issue 22): each {name} is one whole
# argv element, so the word below reaches printf as one argument and no shell ever sees it.
CUSTOM_CATALOG = """
[tools.shout]
lane = "no-net"
description = "Say a word back, loudly"
command = ["printf", "SHOUT[%s]", "{word}"]
timeout_ms = 30000
parameters = { type = "object", properties = { word = { type = "string" } }, required = ["word"] }
"""
CUSTOM_WORD = "hello; touch PWNED $(id)"
CUSTOM_SCRIPT = [
    {"name": "shout", "tool": "shout", "args": {"word": CUSTOM_WORD}},
    {"name": "shout_bad", "tool": "shout", "args": {"word": 7}},
]

EMBEDDED_SCRIPT = [
    {"name": "append", "tool": "append_line", "args": {"path": "notes.txt", "line": "EMBED_LINE"}},
    {"name": "read", "tool": "read_file", "args": {"path": "notes.txt"}},
    {"name": "blocked", "tool": "check_command", "args": {"command": "rm -rf /"}},
    {"name": "undo", "tool": "undo", "args": {}},
]


@pytest.fixture(scope="module", params=CLIENTS)
def custom(request, tmp_path_factory) -> Transcript:
    root = tmp_path_factory.mktemp(f"{request.param}-custom")
    return run_client(request.param, "loopr", root, CUSTOM_SCRIPT, CUSTOM_CATALOG)


@pytest.fixture(scope="module", params=CLIENTS)
def embedded(request, tmp_path_factory) -> Transcript:
    root = tmp_path_factory.mktemp(f"{request.param}-embedded")
    return run_client(request.param, "loopr", root, EMBEDDED_SCRIPT, embedded=True)


def test_catalog_command_tool_gets_its_argument_as_one_argv_element(custom: Transcript):
    out = output(custom.result(0))
    assert f"SHOUT[{CUSTOM_WORD}]" in out, out
    assert not (custom.ws / "PWNED").exists(), "a placeholder's value reached a shell"


def test_catalog_command_tool_arguments_are_validated_before_it_runs(custom: Transcript):
    res = custom.result(1)
    out = output(res)
    assert "SHOUT[" not in out, out
    assert "word" in out, f"the error does not name the argument: {out}"
    assert_error_marked(custom, res, "invalid_arguments")


def test_embedded_rust_tool_writes_through_the_journal(embedded: Transcript):
    out = output(embedded.result(0))
    assert "appended a line to notes.txt" in out, out
    assert "EMBED_LINE" in output(embedded.result(1))


def test_embedded_tool_with_a_command_shape_meets_the_command_policy(embedded: Transcript):
    res = embedded.result(2)
    out = output(res)
    assert "rm -rf /" in out or "block" in out.lower(), out
    assert_error_marked(embedded, res, "blocked")


def test_undo_takes_back_the_embedded_tools_write(embedded: Transcript):
    output(embedded.result(3))
    assert "EMBED_LINE" not in (embedded.ws / "notes.txt").read_text()
    assert (embedded.ws / "notes.txt").read_text() == NOTES


# ---------------------------------------------------------------- loom / loom-py


def test_loom_read_file(loom: Transcript):
    # loom's structuredContent is its own data object, not the envelope.
    data = structured(loom.result(0)["raw"])
    assert data is not None, loom.result(0)
    assert data["contents"] == NOTES and data["truncated"] is False
    assert data["path"].endswith("notes.txt")


def test_loom_bash(loom: Transcript):
    data = structured(loom.result(1)["raw"])
    assert data is not None, loom.result(1)
    assert data["stdout"] == "LOOM_BASH_OK\n" and data["exit_code"] == 3


def test_loom_py_read_file_range(loom_py: Transcript):
    out = output(loom_py.result(0))
    assert out == "".join(NOTES.splitlines(keepends=True)[3:7]), out  # lines 4..7


def test_loom_py_shell_execute(loom_py: Transcript):
    out = output(loom_py.result(1))
    assert "exit code: 0" in out and "PY_SHELL_OK" in out.splitlines()
