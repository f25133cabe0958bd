"""What the model received as each scripted tool call's result, read from the requests the
framework sent the scripted model (Chat Completions or Responses), and what must be in it."""

from __future__ import annotations

import base64
import json
import re

#: The script every framework plays: a read, a grep, an edit, a failed edit, a command with
#: long output, a read of an image; `final_answer` only where the framework offers it.
SCRIPT = [
    {"tool": "read_file", "args": {"path": "notes.txt"}},
    {"tool": "grep", "args": {"pattern": "beta", "output_mode": "content"}},
    {"tool": "edit_file", "args": {"path": "notes.txt", "old_string": "beta",
                                   "new_string": "gamma"}},
    {"tool": "edit_file", "args": {"path": "notes.txt", "old_string": "delta",
                                   "new_string": "epsilon"}},
    {"tool": "run_command", "args": {"command": "seq 1 30000"}},
    {"tool": "read_file", "args": {"path": "dot.png"}},
    {"tool": "final_answer", "args": {"answer": "done"}},
]
STEPS = 6  # the Toolyard calls


class Received:
    """One tool result as the model got it: its text, its images, and the wire's error flag."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.images: list[bytes] = []
        self.is_error: bool | None = None  # None: the wire has no flag

    @property
    def text(self) -> str:
        joined = "\n".join(self.texts)
        # A framework that passes the content blocks as JSON escapes the newlines.
        return joined + "\n" + joined.replace("\\n", "\n").replace('\\"', '"')

    def __repr__(self) -> str:
        return f"Received(text={self.text[:300]!r}, images={len(self.images)})"


def _image_bytes(url_or_data: str) -> bytes | None:
    data = url_or_data.split("base64,", 1)[1] if "base64," in url_or_data else url_or_data
    try:
        return base64.b64decode(data, validate=True)
    except (ValueError, TypeError):
        return None


def _parts(content, got: Received) -> None:
    """Collect text and images from a message content (string, or a list of parts)."""
    if content is None:
        return
    if isinstance(content, str):
        got.texts.append(content)
        for m in re.finditer(r"data:image/[a-z]+;base64,([A-Za-z0-9+/=]+)", content):
            if (b := _image_bytes(m.group(1))) is not None:
                got.images.append(b)
        return
    for p in content if isinstance(content, list) else [content]:
        if not isinstance(p, dict):
            continue
        t = p.get("type")
        if t in ("text", "input_text", "output_text"):
            _parts(p.get("text"), got)
        elif t in ("image_url", "input_image", "image"):
            url = p.get("image_url")
            url = url.get("url") if isinstance(url, dict) else url
            url = url or p.get("data") or (p.get("source") or {}).get("data") or ""
            if (b := _image_bytes(url)) is not None:
                got.images.append(b)


def received(requests: list[dict], step: int) -> Received | None:
    """The result of scripted call `step` in the first request that carries it."""
    cid = f"call_ty{step:04d}"
    for req in requests:
        body = req["body"]
        got = Received()
        if isinstance(body.get("messages"), list):  # Chat Completions
            msgs = body["messages"]
            idx = next((i for i, m in enumerate(msgs)
                        if m.get("role") == "tool" and m.get("tool_call_id") == cid), None)
            if idx is None:
                # smolagents: the call as assistant text, its result the next user message.
                call = next((i for i, m in enumerate(msgs) if m.get("role") == "assistant"
                             and cid in json.dumps(m.get("content"))), None)
                if call is None or call + 1 >= len(msgs):
                    continue
                idx = call + 1
            _parts(msgs[idx].get("content"), got)
            # Images some frameworks send after the tool results, as a user message.
            for m in msgs[idx + 1:]:
                if m.get("role") == "assistant":
                    break
                if m.get("role") == "user":
                    _parts(m.get("content"), got)
            return got
        if isinstance(body.get("input"), list):  # Responses
            items = body["input"]
            idx = next((i for i, it in enumerate(items) if isinstance(it, dict)
                        and it.get("type") == "function_call_output"
                        and it.get("call_id") == cid), None)
            if idx is None:
                continue
            _parts(items[idx].get("output"), got)
            for it in items[idx + 1:]:
                if not isinstance(it, dict) or it.get("type") == "function_call" \
                        or it.get("role") == "assistant":
                    break
                if it.get("role") == "user":
                    _parts(it.get("content"), got)
            return got
    return None


def problems(requests: list[dict]) -> list[str]:
    """Everything the model should have received and did not, one line each."""
    out: list[str] = []

    def need(step: int, cond: bool, what: str, got: Received) -> None:
        if not cond:
            out.append(f"step {step} ({SCRIPT[step]['tool']}): {what}; got {got!r}")

    for step in range(STEPS):
        got = received(requests, step)
        if got is None:
            out.append(f"step {step} ({SCRIPT[step]['tool']}): no request carried its result")
            continue
        t = got.text
        if step == 0:
            need(step, "1|alpha" in t and "2|beta" in t, "the numbered lines of notes.txt", got)
        elif step == 1:
            need(step, "notes.txt:2:beta" in t, "the match `notes.txt:2:beta`", got)
        elif step == 2:
            need(step, "Edited notes.txt" in t and "gamma" in t,
                 "the edit's confirmation with the changed line", got)
        elif step == 3:
            need(step, "old_string was not found in notes.txt" in t,
                 "the failed edit's error text", got)
            # Chat Completions and Responses have no error flag: the text says it.
            need(step, "Error: old_string" in t, "the error marked as one in the text", got)
        elif step == 4:
            need(step, re.search(r"(^|\n)1\n2\n3\n", t) is not None, "the output's head", got)
            need(step, "29999\n30000" in t, "the output's tail", got)
            need(step, "cut from the middle" in t, "the note saying the middle was cut", got)
        elif step == 5:
            need(step, any(b.startswith(b"\x89PNG") for b in got.images),
                 "the PNG itself (an image part)", got)
    return out
