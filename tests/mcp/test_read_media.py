"""read_file of an image through a real MCP client: an ImageContent beside a short text line."""

from __future__ import annotations

import base64

import anyio
import pytest
from mcp.types import ImageContent, TextContent

from conftest import MODES, connect, text_of

pytestmark = pytest.mark.anyio

# A 1x1 PNG.
PNG_1X1 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_an_image_comes_back_as_image_content(workspace, state_dir, transport, mode):
    (workspace / "dot.png").write_bytes(base64.b64decode(PNG_1X1))
    async with connect(transport, mode, workspace, state_dir) as client:
        with anyio.fail_after(60):
            r = await client.call_tool("read_file", {"path": "dot.png"})
    assert not r.is_error, text_of(r)
    texts = [c for c in r.content if isinstance(c, TextContent)]
    images = [c for c in r.content if isinstance(c, ImageContent)]
    assert len(texts) == 1 and "PNG, 1x1 pixels" in texts[0].text, r.content
    assert len(images) == 1, r.content
    assert images[0].mime_type == "image/png"
    assert images[0].data == PNG_1X1
    # No structuredContent: a client that prefers it (Codex) would show it instead of the image;
    # the text block says what came back.
    assert r.structured_content is None, r.structured_content
    assert "returned as an image" in text_of(r)


async def test_grep_modes_reach_the_client(workspace, state_dir):
    (workspace / "b.py").write_text("hello there\n")
    async with connect("stdio", "legacy", workspace, state_dir) as client:
        with anyio.fail_after(60):
            r = await client.call_tool(
                "grep", {"pattern": "HELLO", "-i": True, "output_mode": "files_with_matches"}
            )
    assert not r.is_error, text_of(r)
    assert text_of(r) == "b.py\nhello.txt\n"


# The tool of each dialect that reads a file, and its arguments for `dot.png`. Codex has no
# tool that reads a file (its models read with commands).
READERS = [
    ("loopr", "read_file", {"path": "dot.png"}),
    ("loom", "read_file", {"path": "dot.png"}),
    ("loom-py", "read_file", {"path": "dot.png"}),
    ("gemini", "read_file", {"file_path": "dot.png"}),
    ("claude-code", "Read", {"file_path": "dot.png"}),
    ("anthropic", "str_replace_based_edit_tool", {"command": "view", "path": "dot.png"}),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dialect,tool,args", READERS)
async def test_every_dialect_reads_a_png_as_an_image_the_sdk_accepts(workspace, state_dir, mode, dialect, tool, args):
    # The SDK checks a result against the tool's outputSchema: a tool that may answer with an
    # image must not declare one (it answers without structuredContent), or the client raises
    # "has an output schema but did not return structured content".
    (workspace / "dot.png").write_bytes(base64.b64decode(PNG_1X1))
    async with connect("stdio", mode, workspace, state_dir, ["--dialect", dialect]) as client:
        with anyio.fail_after(60):
            listed = {t.name: t for t in (await client.list_tools()).tools}
            assert listed[tool].output_schema is None, listed[tool].output_schema
            r = await client.call_tool(tool, args)
    assert not r.is_error, text_of(r)
    images = [c for c in r.content if isinstance(c, ImageContent)]
    assert len(images) == 1, r.content
    assert images[0].mime_type == "image/png"
    assert images[0].data == PNG_1X1
