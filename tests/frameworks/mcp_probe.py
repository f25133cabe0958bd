#!/usr/bin/env python3
"""Start an MCP server command over stdio, ask tools/list, print the tool names; exit 1 if none.

Usage: mcp_probe.py [--expect NAME]... -- COMMAND ARGS...   (stdlib only)
"""

from __future__ import annotations

import json
import subprocess
import sys


def main() -> int:
    argv = sys.argv[1:]
    expect = []
    while argv and argv[0] == "--expect":
        expect.append(argv[1])
        argv = argv[2:]
    if argv[:1] == ["--"]:
        argv = argv[1:]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdin and proc.stdout

    def ask(rid: int, method: str, params: dict) -> dict:
        proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": rid, "method": method,
                                     "params": params}) + "\n")
        proc.stdin.flush()
        for line in proc.stdout:
            msg = json.loads(line)
            if msg.get("id") == rid:
                return msg
        raise SystemExit(f"{argv[0]}: the server closed stdout before answering {method}")

    ask(1, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                          "clientInfo": {"name": "probe", "version": "0"}})
    proc.stdin.write(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}) + "\n")
    tools = [t["name"] for t in ask(2, "tools/list", {})["result"]["tools"]]
    proc.stdin.close()
    proc.wait(timeout=30)
    print(f"{' '.join(argv)}: {len(tools)} tools: {', '.join(tools)}")
    missing = [n for n in expect if n not in tools]
    if not tools or missing:
        print(f"missing tools: {missing or 'all'}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
