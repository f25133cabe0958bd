"""A tool the catalog declares (`[tools.NAME]` with `command`) over MCP, with the official SDK as
the client: listed with its schema like a built-in tool, in every transport and protocol era,
its arguments validated before anything runs, each placeholder one argv element."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import MODES, TRANSPORTS, connect, text_of

pytestmark = pytest.mark.anyio

CATALOG = r"""
[tools.shout]
lane = "no-net"
description = "Print the text between brackets"
command = ["printf", "[%s]\n", "{text}"]
timeout_ms = 20000
parameters = { type = "object", properties = { text = { type = "string", description = "What to print" } }, required = ["text"] }
"""


def catalog(tmp: Path) -> list[str]:
    path = tmp / "catalog.toml"
    path.write_text(CATALOG)
    return ["--catalog", str(path)]


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("mode", MODES)
async def test_a_catalog_tool_is_listed_and_runs_its_argv(transport, mode, workspace, state_dir, tmp_path):
    async with connect(transport, mode, workspace, state_dir, catalog(tmp_path)) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert "shout" in tools and "read_file" in tools
        shout = tools["shout"]
        assert shout.description.startswith("Print the text between brackets")
        assert shout.input_schema["required"] == ["text"]
        assert shout.input_schema["additionalProperties"] is False

        hostile = "a  b $(touch pwned) `touch pwned2`; touch pwned3"
        r = await client.call_tool("shout", {"text": hostile})
        assert not r.is_error, text_of(r)
        assert f"[{hostile}]" in text_of(r)
        assert not any((workspace / f).exists() for f in ["pwned", "pwned2", "pwned3"])

        r = await client.call_tool("shout", {"text": 5})
        assert r.is_error and "invalid arguments" in text_of(r), text_of(r)


async def test_a_catalog_tool_is_served_in_another_dialect(workspace, state_dir, tmp_path):
    async with connect("stdio", "legacy", workspace, state_dir, [*catalog(tmp_path), "--dialect", "claude-code"]) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert {"shout", "Bash", "Read"} <= names
        r = await client.call_tool("shout", {"text": "hi there"})
        assert not r.is_error and "[hi there]" in text_of(r), text_of(r)
