"""Toolyard inside the real clients: Claude Code and Codex CLI.

Each client runs one scripted conversation per dialect against a local model
server (model_server.py).  The client starts Toolyard as an MCP server, calls the
tools the script names, and sends each tool result back to the "model"; the
tests read those results out of the logged requests, so they check exactly what
a model would have been shown.

The clients come from `npm ci --prefix tests/clients` (see run.sh).  The Toolyard
binary is TOOLYARD_BIN, default <repo>/target/debug/toolyard.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))

from model_server import ModelServer, call_id, tool_use_id  # noqa: E402

TOOLYARD_BIN = Path(os.environ.get("TOOLYARD_BIN") or REPO / "target" / "debug" / "toolyard")
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

# The default (loopr) dialect: one conversation exercising every file and shell tool.
LOOPR_SCRIPT = [
    {"tool": "read_file", "args": {"path": "notes.txt"}},
    {"tool": "read_file", "args": {"path": "rows.txt", "offset": 10, "limit": 5}},
    {"tool": "grep", "args": {"pattern": "MARKER_GAMMA"}},
    {"tool": "glob", "args": {"pattern": "**/*.rs"}},
    {"tool": "list_directory", "args": {"path": "."}},
    {
        "tool": "edit_file",
        "args": {
            "path": "notes.txt",
            "old_string": "ZEBRA_LINE_7 the quick zebra",
            "new_string": "ZEBRA_LINE_7 the slow zebra",
        },
    },
    {
        "tool": "edit_file",
        "args": {
            "path": "notes.txt",
            "old_string": "GIRAFFE_LINE_4 the tal giraffe\nfifth lin",
            "new_string": "nothing",
        },
    },
    {"tool": "run_command", "args": {"command": "seq 1 100000"}},
    {"tool": "run_command", "args": {"command": "echo FAILMARK_STDERR >&2; exit 7"}},
]
STEP = {
    name: i
    for i, name in enumerate(
        [
            "read",
            "read_window",
            "grep",
            "glob",
            "list_directory",
            "edit",
            "edit_wrong",
            "seq",
            "fail",
        ]
    )
}

LOOM_SCRIPT = [
    {"tool": "read_file", "args": {"path": "notes.txt"}},
    {"tool": "bash", "args": {"command": "echo LOOM_BASH_OK; exit 3"}},
]

LOOM_PY_SCRIPT = [
    {"tool": "read_file", "args": {"path": "notes.txt", "line_range": [4, 7]}},
    {"tool": "shell_execute", "args": {"command": "echo PY_SHELL_OK"}},
]

SCRIPTS = {"loopr": LOOPR_SCRIPT, "loom": LOOM_SCRIPT, "loom-py": LOOM_PY_SCRIPT}


# ---------------------------------------------------------------- helpers


class Transcript:
    """What one client run sent to the model, step by step."""

    def __init__(self, client: str, log: list[dict], script: list[dict], run_info: str):
        self.client = client
        self.log = log
        self.script = script
        self.run_info = run_info

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
                    }
    else:
        inp = body.get("input")
        for item in inp if isinstance(inp, list) else []:
            if item.get("type") == "function_call_output" and item.get("call_id") == want:
                return {"raw": _text_of(item.get("output")), "is_error": None}
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
    (ws / "rows.txt").write_text("".join(f"row {i:03d}\n" for i in range(1, 61)))
    (ws / "src" / "lib.rs").write_text("pub fn alpha() -> u32 {\n    7 // MARKER_GAMMA in lib\n}\n")
    (ws / "src" / "deep" / "unicorn_module.rs").write_text("pub fn unicorn() {}\n")


def _require(path: Path, what: str, fix: str) -> None:
    if not path.exists():
        pytest.fail(f"{what} not found at {path}: {fix}")


def run_client(client: str, dialect: str, root: Path) -> Transcript:
    """Run one scripted conversation of `client` with Toolyard serving `dialect`."""
    _require(
        TOOLYARD_BIN, "the Toolyard binary", "run `cargo build -p toolyard` or set TOOLYARD_BIN"
    )
    exe = CLIENT_BIN / client
    _require(
        exe, f"the {client} client", "run tests/clients/run.sh (npm ci --prefix tests/clients)"
    )
    script = SCRIPTS[dialect]
    home, ws, state = root / "home", root / "ws", root / "state"
    for d in (home, state):
        d.mkdir(parents=True)
    _make_workspace(ws)
    log_path = root / "model_requests.jsonl"
    serve = [str(TOOLYARD_BIN), "serve", "-w", str(ws)]
    if dialect != "loopr":
        serve += ["--dialect", dialect]
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
    return Transcript(client, log, script, info)


CLIENTS = ["claude", "codex"]


@pytest.fixture(scope="module", params=CLIENTS)
def loopr(request, tmp_path_factory) -> Transcript:
    return run_client(request.param, "loopr", tmp_path_factory.mktemp(f"{request.param}-loopr"))


@pytest.fixture(scope="module", params=CLIENTS)
def loom(request, tmp_path_factory) -> Transcript:
    return run_client(request.param, "loom", tmp_path_factory.mktemp(f"{request.param}-loom"))


@pytest.fixture(scope="module", params=CLIENTS)
def loom_py(request, tmp_path_factory) -> Transcript:
    return run_client(request.param, "loom-py", tmp_path_factory.mktemp(f"{request.param}-loompy"))


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
