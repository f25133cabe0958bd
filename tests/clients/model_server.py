#!/usr/bin/env python3
"""A scripted model server for driving real coding clients against Toolyard.

It speaks just enough of the Anthropic Messages API (POST /v1/messages, streamed
and not) and the OpenAI Responses API (POST /v1/responses, streamed) for Claude
Code and Codex CLI to run an agent loop.  It is given a script: a list of tool
calls, each a tool-name suffix and its arguments.  The step to play is the number
of tool calls already in the conversation the client sends, so the server keeps
no per-conversation state and side calls (titles, quota checks) cannot shift it.
When the script is used up it answers with the plain text "done".

Every request is appended to a JSON-lines log (method, path, body, what was
answered) so tests can assert on what the client sent back as each tool result.

Run by hand:  python3 model_server.py SCRIPT.json LOG.jsonl  (prints the port)
"""

from __future__ import annotations

import gzip
import json
import re
import sys
import threading
import uuid
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DONE_TEXT = "done"


def tool_use_id(step: int) -> str:
    """The id of the Anthropic tool_use block the server issues at `step`."""
    return f"toolu_ty{step:04d}"


def call_id(step: int) -> str:
    """The call_id of the Responses function_call the server issues at `step`."""
    return f"call_ty{step:04d}"


def pick_tool(names: list[str], suffix: str) -> str | None:
    """The offered tool named `suffix`, or ending in `__suffix` (MCP prefixes)."""
    for name in names:
        if name == suffix:
            return name
    for name in names:
        if name.endswith("__" + suffix):
            return name
    return None


def _sse(events: list[dict]) -> bytes:
    """Server-sent events, each named by its `type` field."""
    out = []
    for ev in events:
        out.append(f"event: {ev['type']}\ndata: {json.dumps(ev)}\n\n")
    return "".join(out).encode()


# ---------------------------------------------------------------- Anthropic


def _anthropic_tool_names(body: dict) -> list[str]:
    return [t.get("name", "") for t in body.get("tools") or [] if isinstance(t, dict)]


def _deferred_tool(body: dict, suffix: str) -> str | None:
    """The deferred tool named `suffix` (or `...__suffix`) announced in the prompt."""
    # No leading \b: in the JSON text a name may follow an escaped newline ("\\nmcp__").
    pattern = r"(mcp__[A-Za-z0-9_-]+?__" + re.escape(suffix) + r")(?![A-Za-z0-9_])"
    found = re.findall(pattern, json.dumps(body))
    return found[0] if found else None


def _anthropic_steps_done(body: dict) -> int:
    """How many of our tool_use blocks the conversation already holds."""
    n = 0
    for msg in body.get("messages") or []:
        if msg.get("role") != "assistant" or not isinstance(msg.get("content"), list):
            continue
        for block in msg["content"]:
            if block.get("type") == "tool_use" and str(block.get("id", "")).startswith("toolu_ty"):
                n += 1
    return n


def anthropic_reply(body: dict, script: list[dict]) -> tuple[list[dict], str, dict]:
    """Content blocks, stop reason, and a summary for the log."""
    names = _anthropic_tool_names(body)
    step = _anthropic_steps_done(body)
    if step < len(script):
        item = script[step]
        name = pick_tool(names, item["tool"])
        if name is not None:
            block = {
                "type": "tool_use",
                "id": tool_use_id(step),
                "name": name,
                "input": item.get("args", {}),
            }
            return [block], "tool_use", {"step": step, "tool": name, "id": block["id"]}
        # Claude Code 2.1 defers MCP tools: load the schema with ToolSearch first,
        # once per step (a second miss means the tool is really not there).
        deferred = _deferred_tool(body, item["tool"])
        search_id = f"toolu_search{step:04d}"
        if "ToolSearch" in names and deferred and search_id not in json.dumps(body["messages"]):
            block = {
                "type": "tool_use",
                "id": search_id,
                "name": "ToolSearch",
                "input": {"query": "select:" + deferred, "max_results": 5},
            }
            return [block], "tool_use", {"step": step, "tool_search": deferred}
    # A side call (no Toolyard tools offered), or the script is done.
    main = bool(names) and step >= len(script)
    text = DONE_TEXT if main or not names else "ok"
    return [{"type": "text", "text": text}], "end_turn", {"step": step, "text": text}


def anthropic_message(body: dict, script: list[dict]) -> tuple[dict, dict]:
    blocks, stop, summary = anthropic_reply(body, script)
    msg = {
        "id": "msg_" + uuid.uuid4().hex[:24],
        "type": "message",
        "role": "assistant",
        "model": body.get("model", "scripted"),
        "content": blocks,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }
    return msg, summary


def anthropic_stream(body: dict, script: list[dict]) -> tuple[bytes, dict]:
    msg, summary = anthropic_message(body, script)
    start = dict(msg, content=[], stop_reason=None)
    start["usage"] = {"input_tokens": 10, "output_tokens": 1}
    events: list[dict] = [{"type": "message_start", "message": start}]
    for i, block in enumerate(msg["content"]):
        if block["type"] == "tool_use":
            events.append(
                {
                    "type": "content_block_start",
                    "index": i,
                    "content_block": dict(block, input={}),
                }
            )
            raw = json.dumps(block["input"])
            # Two deltas, as a real model streams partial JSON.
            half = len(raw) // 2
            for part in (raw[:half], raw[half:]):
                events.append(
                    {
                        "type": "content_block_delta",
                        "index": i,
                        "delta": {"type": "input_json_delta", "partial_json": part},
                    }
                )
        else:
            events.append(
                {
                    "type": "content_block_start",
                    "index": i,
                    "content_block": {"type": "text", "text": ""},
                }
            )
            events.append(
                {
                    "type": "content_block_delta",
                    "index": i,
                    "delta": {"type": "text_delta", "text": block["text"]},
                }
            )
        events.append({"type": "content_block_stop", "index": i})
    events.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": msg["stop_reason"], "stop_sequence": None},
            "usage": {"output_tokens": 5},
        }
    )
    events.append({"type": "message_stop"})
    return _sse(events), summary


# ---------------------------------------------------------------- Responses


def _responses_tools(body: dict) -> list[tuple[str | None, str]]:
    """(namespace, name) of each offered function tool; Codex 0.169 puts each MCP
    server's tools in a `namespace` group named `mcp__<server>`."""
    found: list[tuple[str | None, str]] = []
    for t in body.get("tools") or []:
        if not isinstance(t, dict):
            continue
        if t.get("type") == "namespace" and isinstance(t.get("tools"), list):
            for inner in t["tools"]:
                if isinstance(inner, dict) and inner.get("name"):
                    found.append((str(t.get("name", "")), str(inner["name"])))
        elif t.get("name"):
            found.append((None, str(t["name"])))
    return found


def pick_responses_tool(body: dict, suffix: str) -> tuple[str | None, str] | None:
    """The (namespace, name) to call for `suffix`: a namespaced MCP tool first,
    then a flat `mcp__server__suffix` name, as older clients sent it."""
    tools = _responses_tools(body)
    for ns, name in tools:
        if ns and ns.startswith("mcp__") and name == suffix:
            return ns, name
    flat = pick_tool([name for ns, name in tools if ns is None], suffix)
    return (None, flat) if flat else None


def _responses_steps_done(body: dict) -> int:
    inp = body.get("input")
    if not isinstance(inp, list):
        return 0
    return sum(
        1
        for item in inp
        if isinstance(item, dict)
        and item.get("type") == "function_call"
        and str(item.get("call_id", "")).startswith("call_ty")
    )


def responses_stream(body: dict, script: list[dict]) -> tuple[bytes, dict]:
    has_tools = bool(body.get("tools"))
    step = _responses_steps_done(body)
    resp_id = "resp_" + uuid.uuid4().hex[:24]
    item = None
    summary: dict = {"step": step}
    if step < len(script):
        want = script[step]
        picked = pick_responses_tool(body, want["tool"])
        if picked is not None:
            ns, name = picked
            item = {
                "type": "function_call",
                "id": "fc_" + uuid.uuid4().hex[:24],
                "call_id": call_id(step),
                "name": name,
                "arguments": json.dumps(want.get("args", {})),
                "status": "completed",
            }
            if ns:
                item["namespace"] = ns
            summary.update(tool=name, namespace=ns, id=item["call_id"])
    if item is None:
        text = DONE_TEXT if has_tools else "ok"
        item = {
            "type": "message",
            "id": "msg_" + uuid.uuid4().hex[:24],
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }
        summary["text"] = text
    base = {
        "id": resp_id,
        "object": "response",
        "model": body.get("model", "scripted"),
        "status": "in_progress",
        "output": [],
    }
    usage = {
        "input_tokens": 10,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 5,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 15,
    }
    added = dict(item, status="in_progress")
    if item["type"] == "function_call":
        added["arguments"] = ""
    else:
        added["content"] = []
    events: list[dict] = [
        {"type": "response.created", "response": base},
        {"type": "response.in_progress", "response": base},
        {"type": "response.output_item.added", "output_index": 0, "item": added},
    ]
    if item["type"] == "function_call":
        events.append(
            {
                "type": "response.function_call_arguments.delta",
                "item_id": item["id"],
                "output_index": 0,
                "delta": item["arguments"],
            }
        )
        events.append(
            {
                "type": "response.function_call_arguments.done",
                "item_id": item["id"],
                "output_index": 0,
                "arguments": item["arguments"],
            }
        )
    else:
        events.append(
            {
                "type": "response.output_text.delta",
                "item_id": item["id"],
                "output_index": 0,
                "content_index": 0,
                "delta": item["content"][0]["text"],
            }
        )
    events.append({"type": "response.output_item.done", "output_index": 0, "item": item})
    done = dict(base, status="completed", output=[item], usage=usage)
    events.append({"type": "response.completed", "response": done})
    return _sse(events), summary


# ---------------------------------------------------------------- HTTP


class ModelServer:
    """A scripted model server on 127.0.0.1, on a free port, in a daemon thread."""

    def __init__(self, script: list[dict], log_path: str):
        self.script = script
        self.log_path = log_path
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, fmt, *args):  # keep stderr quiet
                pass

            def _read_body(self) -> bytes:
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                enc = (self.headers.get("Content-Encoding") or "").lower()
                if enc == "gzip":
                    raw = gzip.decompress(raw)
                elif enc == "deflate":
                    raw = zlib.decompress(raw)
                elif enc == "zstd":
                    import zstandard  # only if a client compresses with zstd

                    raw = zstandard.ZstdDecompressor().decompress(raw, max_output_size=1 << 28)
                return raw

            def _send(self, code: int, ctype: str, payload: bytes):
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(payload)))
                self.send_header("request-id", "req_" + uuid.uuid4().hex[:12])
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(payload)

            def _json(self, code: int, obj):
                self._send(code, "application/json", json.dumps(obj).encode())

            def do_HEAD(self):
                server.record(self.command, self.path, None, {"status": 200})
                self._send(200, "text/plain", b"")

            def do_GET(self):
                path = self.path.split("?", 1)[0]
                server.record(self.command, self.path, None, {"status": 200})
                if path.endswith("/models"):
                    self._json(200, {"object": "list", "data": [], "models": []})
                else:
                    self._json(200, {})

            def do_POST(self):
                raw = self._read_body()
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {"_unparsed": raw[:2000].decode("utf-8", "replace")}
                path = self.path.split("?", 1)[0]
                try:
                    self._post(path, body)
                except Exception as e:  # log it: a silent 500 is hard to debug
                    server.record("POST", self.path, body, {"status": 500, "error": repr(e)})
                    self._json(500, {"error": {"type": "api_error", "message": repr(e)}})

            def _post(self, path: str, body):
                if not isinstance(body, dict):
                    body = {"_body": body}
                if path.endswith("/messages/count_tokens"):
                    server.record("POST", self.path, body, {"status": 200})
                    self._json(200, {"input_tokens": 10})
                elif path.endswith("/messages"):
                    if body.get("stream"):
                        payload, summary = anthropic_stream(body, server.script)
                        server.record("POST", self.path, body, summary)
                        self._send(200, "text/event-stream", payload)
                    else:
                        msg, summary = anthropic_message(body, server.script)
                        server.record("POST", self.path, body, summary)
                        self._json(200, msg)
                elif path.endswith("/responses"):
                    payload, summary = responses_stream(body, server.script)
                    server.record("POST", self.path, body, summary)
                    self._send(200, "text/event-stream", payload)
                else:
                    server.record("POST", self.path, body, {"status": 200})
                    self._json(200, {})

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def record(self, method: str, path: str, body, reply: dict):
        """Append one request and what was answered to the log."""
        line = json.dumps({"method": method, "path": path, "body": body, "reply": reply})
        with self._lock, open(self.log_path, "a", encoding="utf-8") as f:
            f.write(line + "\n")

    def start(self) -> "ModelServer":
        self.thread.start()
        return self

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: model_server.py SCRIPT.json LOG.jsonl", file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8") as f:
        script = json.load(f)
    srv = ModelServer(script, argv[2])
    print(srv.port, flush=True)
    try:
        srv.httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
