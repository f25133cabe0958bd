"""Toolyard for Python: seed 002's tool system (ToolRegistry, Tool, ToolResult, ToolContext)
on Toolyard's engine, plus the `toolyard` binary this wheel carries (`find_toolyard_bin`).

    from toolyard import ToolRegistry
    async with ToolRegistry.with_builtins() as reg:
        result = await reg.execute("read_file", {"path": "README.md"}, workspace=Path("."))

The built-in tools run in a `toolyard serve` child process (MCP over stdio), one per
workspace: sandboxed commands, journaled changes, the read ledger and the command policy are
the engine's. Your own `Tool` subclasses run in this Python process, outside the sandbox.
"""

from toolyard._api import (
    BUILTIN_TIMEOUTS,
    OUTPUT_LIMIT,
    BuiltinTool,
    Engine,
    Subtask,
    Tool,
    ToolContext,
    ToolRegistry,
    ToolResult,
    ToolSafetyViolation,
    builtin_tools,
    from_mcp,
)
from toolyard._bin import find_toolyard_bin
from toolyard._client import McpClient, ServerError

__version__ = "0.1.0"

__all__ = [
    "BUILTIN_TIMEOUTS", "OUTPUT_LIMIT", "BuiltinTool", "Engine", "McpClient", "ServerError",
    "Subtask", "Tool", "ToolContext", "ToolRegistry", "ToolResult", "ToolSafetyViolation",
    "builtin_tools", "find_toolyard_bin", "from_mcp",
]
