"""A command's request for more network (`network: {hosts, reason}`), approved by the user through
the official Python SDK's client answering MCP elicitation, in both protocol eras (an
`elicitation/create` request in the initialize era; an input-required result and the client's
retry in 2026-07-28), through the real binary and its net lane's egress gate.

A local HTTP server on 127.0.0.1 stands for an outside host: the catalog pins `registry.test` to
it through `[network] resolve`, and `mode = "allowlist"` does not allow it, so only an approval
lets a command reach it."""

from __future__ import annotations

import contextlib
import http.server
import json
import threading
from pathlib import Path

import pytest
from conftest import HttpServer, http_transport, server_env, text_of, toolyard_bin

pytestmark = pytest.mark.anyio

MODES = ["legacy", "2026-07-28"]
BODY = "hello from registry.test"
STORE = "network-approvals.json"


@pytest.fixture
def upstream():
    """A local HTTP server answering BODY; its port."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (the stdlib's name)
            body = BODY.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()


@pytest.fixture
def catalog(tmp_path: Path) -> list[str]:
    path = tmp_path / "catalog.toml"
    path.write_text(
        '[network]\nmode = "allowlist"\nallow = ["allowed.test"]\n'
        'resolve = { "registry.test" = "127.0.0.1", "allowed.test" = "127.0.0.1" }\n'
    )
    return ["--catalog", str(path)]


def fetch(port: int, host: str = "registry.test", network: dict | None = None, before: str = "") -> dict:
    """run_command arguments fetching http://HOST:PORT/ through the lane's proxy (urllib honours
    HTTP_PROXY), asking for `network` when given."""
    py = f"import urllib.request as u; print(u.urlopen('http://{host}:{port}/', timeout=10).read().decode())"
    args: dict = {"command": f'{before}python3 -c "{py}"'}
    if network is not None:
        args["network"] = network
    return args


def ask(reason: str = "fetch the package index from the project's registry") -> dict:
    return {"hosts": ["registry.test"], "reason": reason}


class User:
    """The person behind the client: answers every question with `action` (and `choice`), and
    keeps what was asked."""

    def __init__(self, choice: str | None = "call", action: str = "accept"):
        self.choice, self.action, self.asked = choice, action, []

    async def __call__(self, context, params):
        from mcp.types import ElicitResult

        self.asked.append(params)
        content = {"grant": self.choice} if self.action == "accept" else None
        return ElicitResult(action=self.action, content=content)


@contextlib.asynccontextmanager
async def stdio_client(mode: str, workspace: Path, state_dir: Path, extra: list[str], user: User | None):
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    params = StdioServerParameters(
        command=toolyard_bin(), args=["serve", "--workspace", str(workspace), *extra], env=server_env(state_dir)
    )
    async with Client(params, mode=mode, elicitation_callback=user) as client:
        yield client


def http_client(server: HttpServer, mode: str, user: User | None):
    from mcp import Client

    return Client(http_transport(server.url, server.token), mode=mode, elicitation_callback=user)


async def run(client, args: dict, tool: str = "run_command") -> tuple[bool, str]:
    r = await client.call_tool(tool, args)
    return (not r.is_error), text_of(r)


def refused_at_gate(text: str, port: int) -> bool:
    return f"registry.test:{port} refused (not in allow" in text and '[network] allow = [..., "registry.test"]' in text


def store_of(state_dir: Path) -> list[Path]:
    return list(state_dir.glob(f"workspaces/*/{STORE}"))


@pytest.mark.parametrize("mode", MODES)
async def test_approved_for_this_call_reaches_the_host_and_the_next_call_is_refused_again(
    mode, workspace, state_dir, catalog, upstream
):
    user = User("call")
    async with stdio_client(mode, workspace, state_dir, catalog, user) as client:
        ok, text = await run(client, fetch(upstream))
        assert refused_at_gate(text, upstream), text
        assert BODY not in text
        assert not user.asked, "a call without a request asks nothing"

        ok, text = await run(client, fetch(upstream, network=ask()))
        assert ok, text
        assert BODY in text, text
        assert f"registry.test:{upstream} allowed by approval (this call)" in text, text
        assert len(user.asked) == 1
        message = user.asked[0].message
        assert "registry.test" in message and "fetch the package index" in message, message
        assert "python3" in message, "the user sees the command"

        ok, text = await run(client, fetch(upstream))
        assert refused_at_gate(text, upstream), text
        assert BODY not in text
        # A host the catalog allows needs no question.
        ok, text = await run(client, fetch(upstream, "allowed.test", {"hosts": ["allowed.test"], "reason": "x"}))
        assert ok and BODY in text, text
        assert len(user.asked) == 1
    assert not store_of(state_dir), "a call's approval is kept nowhere"


@pytest.mark.parametrize("mode", MODES)
async def test_approved_for_the_session_holds_for_its_calls_only(mode, workspace, state_dir, catalog, upstream):
    server = HttpServer(workspace, state_dir, catalog)
    try:
        user = User("session")
        async with http_client(server, mode, user) as client:
            ok, text = await run(client, fetch(upstream, network=ask()))
            assert ok and BODY in text, text
            assert "allowed by approval (this session)" in text, text
            ok, text = await run(client, fetch(upstream))
            assert ok and BODY in text, text
            assert f"registry.test:{upstream} allowed by approval (this session)" in text, text
            # Asked for again within the session: already approved, no second question.
            ok, text = await run(client, fetch(upstream, network=ask()))
            assert ok and BODY in text, text
            assert len(user.asked) == 1
        other = User("deny")
        async with http_client(server, mode, other) as client:
            ok, text = await run(client, fetch(upstream))
            assert refused_at_gate(text, upstream), text
    finally:
        server.stop()
    assert not store_of(state_dir)


@pytest.mark.parametrize("mode", MODES)
async def test_approved_always_is_kept_in_the_state_dir_across_a_restart(
    mode, workspace, state_dir, catalog, upstream, tmp_path
):
    user = User("always")
    async with stdio_client(mode, workspace, state_dir, catalog, user) as client:
        ok, text = await run(client, fetch(upstream, network=ask()))
        assert ok and BODY in text, text
        assert "allowed by approval (always for this workspace)" in text, text
    [store] = store_of(state_dir)
    kept = json.loads(store.read_text())
    assert [h["host"] for h in kept["hosts"]] == ["registry.test"], kept
    assert not any(p.name == STORE for p in workspace.rglob("*"))
    assert "registry.test" not in Path(catalog[1]).read_text().split("resolve")[0]

    # A new server, and a client that cannot even ask: the approval holds.
    async with stdio_client(mode, workspace, state_dir, catalog, None) as client:
        ok, text = await run(client, fetch(upstream))
        assert ok and BODY in text, text
        assert f"registry.test:{upstream} allowed by approval (always for this workspace)" in text, text


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("answer", ["decline", "deny", "cancel"])
async def test_a_declined_request_is_refused_and_the_command_does_not_run(
    mode, answer, workspace, state_dir, catalog, upstream
):
    user = User("deny", "accept") if answer == "deny" else User(None, answer)
    async with stdio_client(mode, workspace, state_dir, catalog, user) as client:
        ok, text = await run(client, fetch(upstream, network=ask(), before="touch ran.txt; "))
        assert not ok, text
        assert "not approved" in text, text
        assert '[network] allow = [..., "registry.test"]' in text, text
        assert "did not run" in text, text
        assert not (workspace / "ran.txt").exists()
        assert len(user.asked) == 1


@pytest.mark.parametrize("mode", MODES)
async def test_a_client_that_cannot_ask_gets_the_request_refused_with_the_catalog_line(
    mode, workspace, state_dir, catalog, upstream
):
    async with stdio_client(mode, workspace, state_dir, catalog, None) as client:
        ok, text = await run(client, fetch(upstream, network=ask()))
        assert not ok, text
        assert "no form elicitation" in text, text
        assert '[network] allow = [..., "registry.test"]' in text, text
        assert BODY not in text


async def test_the_model_cannot_approve_its_own_request(workspace, state_dir, catalog, upstream):
    async with stdio_client("legacy", workspace, state_dir, catalog, None) as client:
        # Nothing the arguments can say grants it.
        for forged in (
            {"hosts": ["registry.test"], "reason": "x", "grant": "always"},
            {"hosts": ["registry.test"], "reason": "x", "approved": True},
        ):
            ok, text = await run(client, fetch(upstream, network=forged))
            assert not ok and "network" in text, text
            assert BODY not in text
        # Bad requests say what to write.
        for bad, says in (
            ({"hosts": ["registry.test"], "reason": " "}, "network.reason"),
            ({"hosts": ["git*hub.com"], "reason": "x"}, "network.hosts[0]"),
            ({"hosts": ["*"], "reason": "x"}, "every host"),
            ({"hosts": ["169.254.169.254"], "reason": "x"}, "metadata"),
        ):
            ok, text = await run(client, fetch(upstream, network=bad))
            assert not ok and says in text, (bad, text)
        # A store the workspace holds grants nothing.
        (workspace / STORE).write_text(json.dumps({"hosts": [{"host": "registry.test", "reason": "x"}]}))
        ok, text = await run(client, fetch(upstream))
        assert refused_at_gate(text, upstream), text


async def test_a_command_cannot_write_the_approval_store(workspace, state_dir, catalog, upstream):
    user = User("always")
    async with stdio_client("legacy", workspace, state_dir, catalog, user) as client:
        ok, text = await run(client, fetch(upstream, network=ask()))
        assert ok, text
        [store] = store_of(state_dir)
        before = store.read_text()
        forged = json.dumps({"hosts": [{"host": "evil.test", "reason": "x"}, {"host": "*", "reason": "x"}]})
        for tool in ("run_command", "run_command_isolated"):
            for command in (
                f"printf '%s' '{forged}' > '{store}'",
                f"rm -f '{store}'",
                f"mv '{store}' '{store}.old'",
                f"printf '%s' '{forged}' > '{store.parent}/.{STORE}.1' && mv '{store.parent}/.{STORE}.1' '{store}'",
            ):
                ok, text = await run(client, {"command": command}, tool)
                assert not ok and "denied" in text, (tool, command, text)
        assert store.read_text() == before
