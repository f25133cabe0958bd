#!/usr/bin/env python3
"""A scripted model on 127.0.0.1 for agent frameworks: OpenAI Chat Completions and Responses,
streamed or not (what the frameworks' model clients call).

It plays a script, one tool call per step: the step is the number of tool results (ours, by
call id) already in the conversation, so it keeps no state per conversation. The tool is the
offered one named `tool` or ending in `_tool`/`__tool`/`-tool` (frameworks prefix MCP tools).
When the script is done it answers "done". Every request is kept (and appended to a JSON-lines
log when given), so a test can read exactly what the framework sent the model as each result.

By hand: python3 model_server.py SCRIPT.json [LOG.jsonl]   (prints the base URL)
"""

from __future__ import annotations

import json
import re
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DONE = "done"


def call_id(step: int) -> str:
    return f"call_ty{step:04d}"


def pick(names: list[str], want: str) -> str | None:
    """The offered tool `want`, or one ending in a separator and `want` (an MCP prefix)."""
    if want in names:
        return want
    for n in names:
        for sep in ("__", "_", "-", "."):
            if n.endswith(sep + want):
                return n
    return None


def _ours(cid: object) -> bool:
    return str(cid or "").startswith("call_ty")


# ----------------------------------------------------------------- Chat Completions


def _text(content) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def chat_step(body: dict) -> int:
    msgs = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    n = sum(1 for m in msgs if m.get("role") == "tool" and _ours(m.get("tool_call_id")))
    if n:
        return n
    # smolagents sends no tool messages: the call is assistant text ("Calling tools: [{'id':
    # 'call_ty0000', ...}]") and its result the next user message ("Observation: ...").
    for i, m in enumerate(msgs[:-1]):
        if m.get("role") == "assistant" and msgs[i + 1].get("role") == "user":
            n += len(set(re.findall(r"call_ty\d{4}", _text(m.get("content")))))
    return n


def chat_names(body: dict) -> list[str]:
    return [t.get("function", {}).get("name", "") for t in body.get("tools") or []]


def chat_reply(body: dict, script: list[dict]) -> tuple[dict, dict]:
    step = chat_step(body)
    names = chat_names(body)
    base = {"id": "chatcmpl-" + uuid.uuid4().hex[:20], "object": "chat.completion",
            "created": int(time.time()), "model": body.get("model", "scripted")}
    usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    if step < len(script) and (name := pick(names, script[step]["tool"])):
        call = {"id": call_id(step), "type": "function",
                "function": {"name": name, "arguments": json.dumps(script[step]["args"])}}
        msg = {"role": "assistant", "content": None, "tool_calls": [call]}
        finish = "tool_calls"
        summary = {"step": step, "tool": name}
    else:
        msg = {"role": "assistant", "content": DONE}
        finish = "stop"
        summary = {"step": step, "text": DONE}
    return dict(base, choices=[{"index": 0, "message": msg, "finish_reason": finish,
                                "logprobs": None}], usage=usage), summary


def chat_stream(reply: dict) -> bytes:
    base = {k: reply[k] for k in ("id", "created", "model")}
    base["object"] = "chat.completion.chunk"
    msg = reply["choices"][0]["message"]
    chunks = [dict(base, choices=[{"index": 0, "delta": {"role": "assistant", "content": ""},
                                   "finish_reason": None}])]
    if msg.get("tool_calls"):
        c = msg["tool_calls"][0]
        args = c["function"]["arguments"]
        half = len(args) // 2
        chunks.append(dict(base, choices=[{"index": 0, "delta": {"tool_calls": [{
            "index": 0, "id": c["id"], "type": "function",
            "function": {"name": c["function"]["name"], "arguments": args[:half]}}]},
            "finish_reason": None}]))
        chunks.append(dict(base, choices=[{"index": 0, "delta": {"tool_calls": [{
            "index": 0, "function": {"arguments": args[half:]}}]}, "finish_reason": None}]))
    else:
        chunks.append(dict(base, choices=[{"index": 0, "delta": {"content": msg["content"]},
                                           "finish_reason": None}]))
    chunks.append(dict(base, choices=[{"index": 0, "delta": {},
                                       "finish_reason": reply["choices"][0]["finish_reason"]}]))
    chunks.append(dict(base, choices=[], usage=reply["usage"]))
    return "".join(f"data: {json.dumps(c)}\n\n" for c in chunks).encode() + b"data: [DONE]\n\n"


# ----------------------------------------------------------------- Responses


def responses_step(body: dict) -> int:
    inp = body.get("input")
    if not isinstance(inp, list):
        return 0
    return sum(1 for i in inp if isinstance(i, dict) and i.get("type") == "function_call_output"
               and _ours(i.get("call_id")))


def responses_reply(body: dict, script: list[dict]) -> tuple[dict, dict]:
    step = responses_step(body)
    names = [t.get("name", "") for t in body.get("tools") or [] if isinstance(t, dict)]
    if step < len(script) and (name := pick(names, script[step]["tool"])):
        item = {"type": "function_call", "id": "fc_" + uuid.uuid4().hex[:24],
                "call_id": call_id(step), "name": name,
                "arguments": json.dumps(script[step]["args"]), "status": "completed"}
        summary = {"step": step, "tool": name}
    else:
        item = {"type": "message", "id": "msg_" + uuid.uuid4().hex[:24], "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": DONE, "annotations": []}]}
        summary = {"step": step, "text": DONE}
    resp = {"id": "resp_" + uuid.uuid4().hex[:24], "object": "response",
            "created_at": int(time.time()), "model": body.get("model", "scripted"),
            "status": "completed", "output": [item], "parallel_tool_calls": True,
            "tool_choice": "auto", "tools": [], "error": None, "incomplete_details": None,
            "usage": {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 0},
                      "total_tokens": 15}}
    return resp, summary


def responses_stream(resp: dict) -> bytes:
    item = resp["output"][0]
    base = dict(resp, status="in_progress", output=[])
    added = dict(item, status="in_progress")
    seq = iter(range(1000))
    events = [{"type": "response.created", "response": base},
              {"type": "response.in_progress", "response": base},
              {"type": "response.output_item.added", "output_index": 0, "item": dict(
                  added, arguments="") if item["type"] == "function_call" else dict(
                  added, content=[])}]
    if item["type"] == "function_call":
        events += [{"type": "response.function_call_arguments.delta", "item_id": item["id"],
                    "output_index": 0, "delta": item["arguments"]},
                   {"type": "response.function_call_arguments.done", "item_id": item["id"],
                    "output_index": 0, "arguments": item["arguments"]}]
    else:
        text = item["content"][0]["text"]
        part = {"type": "output_text", "text": "", "annotations": []}
        events += [{"type": "response.content_part.added", "item_id": item["id"],
                    "output_index": 0, "content_index": 0, "part": part},
                   {"type": "response.output_text.delta", "item_id": item["id"],
                    "output_index": 0, "content_index": 0, "delta": text, "logprobs": []},
                   {"type": "response.output_text.done", "item_id": item["id"],
                    "output_index": 0, "content_index": 0, "text": text, "logprobs": []},
                   {"type": "response.content_part.done", "item_id": item["id"],
                    "output_index": 0, "content_index": 0, "part": dict(part, text=text)}]
    events += [{"type": "response.output_item.done", "output_index": 0, "item": item},
               {"type": "response.completed", "response": resp}]
    out = []
    for ev in events:
        ev["sequence_number"] = next(seq)
        out.append(f"event: {ev['type']}\ndata: {json.dumps(ev)}\n\n")
    return "".join(out).encode()


# ----------------------------------------------------------------- HTTP


class ModelServer:
    """The scripted model on 127.0.0.1 (a free port), in a daemon thread; `requests` holds
    every request body with the path and what was answered."""

    def __init__(self, script: list[dict], log_path: str | None = None):
        self.script = script
        self.log_path = log_path
        self.requests: list[dict] = []
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _send(self, code: int, ctype: str, payload: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_GET(self):
                self._send(200, "application/json", b'{"object":"list","data":[]}')

            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b"{}"
                path = self.path.split("?", 1)[0]
                try:
                    body = json.loads(raw)
                    if path.endswith("/chat/completions"):
                        reply, summary = chat_reply(body, outer.script)
                        stream = body.get("stream")
                        payload = chat_stream(reply) if stream else json.dumps(reply).encode()
                    elif path.endswith("/responses"):
                        reply, summary = responses_reply(body, outer.script)
                        stream = body.get("stream")
                        payload = responses_stream(reply) if stream else json.dumps(reply).encode()
                    else:
                        outer.record(path, body, {"status": 404})
                        self._send(404, "application/json", b'{"error":{"message":"no such API"}}')
                        return
                except Exception as e:  # noqa: BLE001 - logged, answered 500
                    outer.record(path, {"_raw": raw[:2000].decode("utf-8", "replace")},
                                 {"status": 500, "error": repr(e)})
                    self._send(500, "application/json",
                               json.dumps({"error": {"message": repr(e)}}).encode())
                    return
                outer.record(path, body, summary)
                self._send(200, "text/event-stream" if stream else "application/json", payload)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def record(self, path: str, body: dict, answered: dict) -> None:
        entry = {"path": path, "body": body, "answered": answered}
        with self._lock:
            self.requests.append(entry)
            if self.log_path:
                with open(self.log_path, "a") as f:
                    f.write(json.dumps(entry) + "\n")

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


if __name__ == "__main__":
    srv = ModelServer(json.load(open(sys.argv[1])), sys.argv[2] if len(sys.argv) > 2 else None)
    print(srv.base_url, flush=True)
    threading.Event().wait()
