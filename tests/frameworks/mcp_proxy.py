#!/usr/bin/env python3
"""A deliberately broken MCP stdio proxy: it passes everything through, except that tool
results lose their text (text blocks dropped, `structuredContent.output` emptied). The
framework tests must fail through it: they check what the model received, not that a call ran.

Usage: mcp_proxy.py -- COMMAND ARGS...
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading


def scrub(line: bytes) -> bytes:
    try:
        msg = json.loads(line)
    except ValueError:
        return line
    result = msg.get("result") if isinstance(msg, dict) else None
    if not isinstance(result, dict) or "content" not in result:
        return line
    result["content"] = [b for b in result["content"] if b.get("type") != "text"]
    sc = result.get("structuredContent")
    if isinstance(sc, dict) and "output" in sc:
        sc["output"] = ""
    return (json.dumps(msg) + "\n").encode()


def main() -> int:
    argv = sys.argv[1:]
    if argv[:1] == ["--"]:
        argv = argv[1:]
    argv[0] = shutil.which(argv[0]) or argv[0]
    child = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert child.stdin and child.stdout

    def pump_in() -> None:
        for line in sys.stdin.buffer:
            child.stdin.write(line)
            child.stdin.flush()
        child.stdin.close()

    threading.Thread(target=pump_in, daemon=True).start()
    for line in child.stdout:
        sys.stdout.buffer.write(scrub(line))
        sys.stdout.buffer.flush()
    return child.wait()


if __name__ == "__main__":
    sys.exit(main())
