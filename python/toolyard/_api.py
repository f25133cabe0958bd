"""Seed 002's tool system (ToolRegistry, Tool, ToolResult, ToolContext) on Toolyard's engine."""

from __future__ import annotations

import asyncio
import json
import subprocess
import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolyard._bin import find_toolyard_bin
from toolyard._client import McpClient, ServerError
from toolyard._schema import validate

#: Seed 002's cap on `ToolResult.output`.
OUTPUT_LIMIT = 10 * 1024

#: Seed 002's timeouts for its built-in tools, in seconds (others: `Tool.timeout_seconds`, 30).
BUILTIN_TIMEOUTS = {
    "read_file": 10,
    "write_file": 10,
    "edit_file": 10,
    "shell_execute": 60,
    "search_files": 30,
    "list_directory": 10,
}


class ToolSafetyViolation(Exception):
    """A tool was asked to reach outside its workspace (or another safety rule said no)."""


@dataclass
class ToolResult:
    """What a tool returns; `to_json()` is what a model reads."""

    success: bool
    output: str  # Human-readable output (truncated to 10KB)
    data: dict | None = None  # Structured data (optional)
    files_changed: list[str] = field(default_factory=list)
    error: str | None = None
    #: Images the tool returned (a read of a PNG): `{"mime_type", "data"}` with base64 data.
    #: Not part of `to_json()`: send them to the model as image parts.
    images: list[dict] = field(default_factory=list)

    def to_json(self) -> str:
        """The result as one JSON object: success, output, data, files_changed, error."""
        return json.dumps({
            "success": self.success,
            "output": self.output,
            "data": self.data,
            "files_changed": list(self.files_changed),
            "error": self.error,
        }, ensure_ascii=False)

    @classmethod
    def failure(cls, error: str) -> "ToolResult":
        """A failed result whose output is the error (what the model reads)."""
        return cls(success=False, output=error, error=error)


@dataclass
class ToolContext:
    """Where a tool runs: the workspace (None when the caller gave none) and a scratch dir."""

    workspace: Path | None
    scratch_dir: Path | None = None


class Tool(ABC):
    """A tool. Subclass it for your own tool and `ToolRegistry.register` it.

    A Python tool's `execute` runs in your Python process, **outside Toolyard's sandbox**:
    it has your process's full access to files and network. The registry validates its
    arguments against `parameters`, times it out after `timeout_seconds` (by cancelling the
    coroutine: a tool that blocks without awaiting cannot be interrupted; run blocking work
    with `asyncio.to_thread`), catches its exceptions as failed results and cuts its output to
    10KB, as for the built-in tools. Use `verify_within_workspace` for paths you are given.
    """

    @property
    @abstractmethod
    def name(self) -> str: ...

    @property
    @abstractmethod
    def description(self) -> str: ...

    @property
    @abstractmethod
    def parameters(self) -> dict:
        """JSON Schema for parameters."""

    @property
    def timeout_seconds(self) -> int:
        return 30

    @abstractmethod
    async def execute(self, args: dict, ctx: ToolContext) -> ToolResult: ...

    def schema(self) -> dict:
        """Return OpenAI-format function definition."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }

    def verify_within_workspace(self, path: str | Path, ctx: ToolContext) -> Path:
        """`path` (relative to the workspace, or absolute) resolved, symlinks followed; raises
        ToolSafetyViolation when it leaves the workspace or there is no workspace."""
        if ctx.workspace is None:
            raise ToolSafetyViolation(f"no workspace to resolve '{path}' in")
        root = Path(ctx.workspace).resolve()
        resolved = (root / path).resolve()
        try:
            resolved.relative_to(root)
        except ValueError:
            raise ToolSafetyViolation(f"Path '{path}' escapes workspace") from None
        return resolved


@dataclass
class Subtask:
    """What `tools_for_subtask` needs of a subtask: a loop type (seed 000: plan, spec, phase,
    code; Toolyard's profiles) and/or the tool names it may use."""

    description: str = ""
    loop_type: str | None = None
    tools: list[str] | None = None


class Engine:
    """Toolyard's engine: one `toolyard serve` child (MCP over stdio) per workspace.

    Each child is one session: its read ledger lets an edit follow a read of the same file,
    its journal records every change before it is made (`toolyard log`, the `undo` tool).
    With `session` set, the children are started with `--session NAME`, so a later process
    of the same name keeps the same read ledger.
    """

    def __init__(self, dialect: str = "loom-py", *, session: str | None = None,
                 binary: str | None = None, extra_args: list[str] | None = None,
                 env: dict[str, str] | None = None) -> None:
        self.dialect = dialect
        self.session = session
        self.binary = binary or find_toolyard_bin()
        self.extra_args = list(extra_args or [])
        self.env = env
        self._clients: dict[Path, McpClient] = {}
        self._definitions: dict[str | None, list[dict]] = {}
        self._lock = threading.Lock()

    def definitions(self, profile: str | None = None) -> list[dict]:
        """The dialect's tools in OpenAI format (`toolyard tools --format openai`), asked of
        the binary once per profile."""
        if profile not in self._definitions:
            self._definitions[profile] = self._ask_definitions(profile)
        return self._definitions[profile]

    def _ask_definitions(self, profile: str | None) -> list[dict]:
        argv = [self.binary, "tools", "--dialect", self.dialect, "--format", "openai"]
        if profile:
            argv += ["--profile", profile]
        out = subprocess.run(argv, capture_output=True, text=True, env=self.env)
        if out.returncode != 0:
            raise ValueError(out.stderr.strip() or f"{' '.join(argv)} failed")
        return json.loads(out.stdout)

    def client(self, workspace: Path) -> McpClient:
        """The child serving `workspace`, started on first use (again if it died)."""
        key = Path(workspace).resolve()
        with self._lock:
            c = self._clients.get(key)
            if c is None or not c.alive:
                c = McpClient(key, dialect=self.dialect, session=self.session,
                              extra_args=self.extra_args, binary=self.binary, env=self.env)
                self._clients[key] = c
            return c

    async def call(self, name: str, arguments: dict, workspace: Path) -> ToolResult:
        """Call a built-in tool in `workspace` and map its MCP result to a ToolResult."""
        key = Path(workspace).resolve()
        with self._lock:
            c = self._clients.get(key)
        if c is None or not c.alive:
            c = await asyncio.to_thread(self.client, key)
        return from_mcp(await c.call(name, arguments))

    def close(self) -> None:
        """Stop every child."""
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
        for c in clients:
            c.close()


def from_mcp(result: dict) -> ToolResult:
    """A ToolResult from an MCP CallToolResult: the envelope in `structuredContent` when
    there is one, else the text blocks; image blocks become `images`."""
    blocks = result.get("content") or []
    text = "\n".join(b.get("text", "") for b in blocks if b.get("type") == "text")
    images = [{"mime_type": b.get("mimeType"), "data": b.get("data")}
              for b in blocks if b.get("type") == "image"]
    sc = result.get("structuredContent")
    failed = bool(result.get("isError"))
    if isinstance(sc, dict) and "output" in sc and "success" in sc:
        return ToolResult(
            success=bool(sc["success"]),
            output=sc["output"],
            data=sc.get("data"),
            files_changed=list(sc.get("files_changed") or []),
            error=sc.get("error") or (sc["output"] if not sc["success"] else None),
            images=images,
        )
    return ToolResult(success=not failed, output=text, data=sc if isinstance(sc, dict) else None,
                      error=text if failed else None, images=images)


class BuiltinTool(Tool):
    """One of Toolyard's tools, run by the engine: paths confined to the workspace, commands
    in sandboxed runner lanes through the command policy, every change journaled first."""

    def __init__(self, definition: dict, engine: Engine, timeout: int | None = None) -> None:
        fn = definition["function"]
        self._name = fn["name"]
        self._description = fn.get("description", "")
        self._parameters = fn.get("parameters") or {"type": "object", "properties": {}}
        self.engine = engine
        self._timeout = timeout if timeout is not None else BUILTIN_TIMEOUTS.get(self._name, 30)

    @property
    def name(self) -> str:
        return self._name

    @property
    def description(self) -> str:
        return self._description

    @property
    def parameters(self) -> dict:
        return self._parameters

    @property
    def timeout_seconds(self) -> int:
        return self._timeout

    async def execute(self, args: dict, ctx: ToolContext) -> ToolResult:
        if ctx.workspace is None:
            return ToolResult.failure(
                f"{self._name} needs a workspace: pass workspace=Path(...) to execute()")
        if not Path(ctx.workspace).is_dir():
            return ToolResult.failure(f"the workspace {ctx.workspace} is not a directory")
        try:
            return await self.engine.call(self._name, args, Path(ctx.workspace))
        except ServerError as e:
            return ToolResult.failure(str(e))


def builtin_tools(dialect: str = "loom-py", *, engine: Engine | None = None,
                  timeouts: dict[str, int] | None = None, **engine_args: Any) -> list[Tool]:
    """Toolyard's tools in `dialect` (default `loom-py`: seed 002's read_file, write_file,
    edit_file, shell_execute, search_files, list_directory, plus undo), each timed out after
    `timeouts[name]` seconds (default: seed 002's table, `BUILTIN_TIMEOUTS`)."""
    engine = engine or Engine(dialect, **engine_args)
    timeouts = timeouts or {}
    return [BuiltinTool(d, engine, timeouts.get(d["function"]["name"]))
            for d in engine.definitions()]


def _cut(text: str, limit: int = OUTPUT_LIMIT) -> str:
    """`text` within `limit` bytes, head and tail kept, saying how much was left out."""
    raw = text.encode("utf-8")
    if len(raw) <= limit:
        return text
    half = (limit - 100) // 2
    head = raw[:half].decode("utf-8", "ignore")
    tail = raw[-half:].decode("utf-8", "ignore")
    return f"{head}\n[... {len(raw) - 2 * half} bytes cut ...]\n{tail}"


class ToolRegistry:
    """Seed 002's registry: register tools, execute them with validation and a timeout."""

    def __init__(self):
        self._tools: dict[str, Tool] = {}
        self._engines: list[Engine] = []

    @classmethod
    def with_builtins(cls, dialect: str = "loom-py", *, timeouts: dict[str, int] | None = None,
                      **engine_args: Any) -> "ToolRegistry":
        """A registry holding Toolyard's built-in tools (see `builtin_tools`; `engine_args`
        go to `Engine`: session, binary, extra_args, env)."""
        reg = cls()
        engine = Engine(dialect, **engine_args)
        reg._engines.append(engine)
        for t in builtin_tools(engine=engine, timeouts=timeouts):
            reg.register(t)
        return reg

    def register(self, tool: Tool) -> None:
        """Register a tool. Raises if name conflicts."""
        if not isinstance(tool, Tool):
            raise TypeError(f"register() takes a Tool, not {type(tool).__name__}")
        if tool.name in self._tools:
            raise ValueError(f"a tool named '{tool.name}' is already registered; "
                             "give this one another name")
        self._tools[tool.name] = tool
        if isinstance(tool, BuiltinTool) and tool.engine not in self._engines:
            self._engines.append(tool.engine)

    async def execute(self, name: str, arguments: dict, workspace: Path | None = None) -> ToolResult:
        """Execute a tool with argument validation, workspace context, and timeout."""
        tool = self._tools.get(name)
        if tool is None:
            known = ", ".join(sorted(self._tools)) or "none"
            return ToolResult.failure(f"unknown tool '{name}' (registered: {known})")
        if not isinstance(arguments, dict):
            return ToolResult.failure(
                f"arguments of {name} must be a JSON object, got {type(arguments).__name__}")
        problems = validate(arguments, tool.parameters)
        if problems:
            return ToolResult.failure(f"invalid arguments for {name}: " + "; ".join(problems))
        ctx = ToolContext(workspace=Path(workspace) if workspace is not None else None)
        try:
            result = await _within(tool.execute(arguments, ctx), tool.timeout_seconds)
        except (asyncio.TimeoutError, TimeoutError):
            return ToolResult.failure(f"{name} timed out after {tool.timeout_seconds}s")
        except ToolSafetyViolation as e:
            return ToolResult.failure(f"{name} refused: {e}")
        except Exception as e:  # a tool's bug is the model's error message, not a crash
            return ToolResult.failure(f"{name} failed: {type(e).__name__}: {e}")
        if not isinstance(result, ToolResult):
            return ToolResult.failure(
                f"{name} returned {type(result).__name__}, not a ToolResult")
        result.output = _cut(result.output)
        return result

    def tools_for_subtask(self, subtask: Subtask) -> list[dict]:
        """Return OpenAI-format tool schemas relevant to a subtask."""
        names = _get(subtask, "tools")
        if names is not None:
            unknown = [n for n in names if n not in self._tools]
            if unknown:
                raise ValueError(f"the subtask names unknown tools: {', '.join(unknown)}")
            return [self._tools[n].schema() for n in names]
        loop = _get(subtask, "loop_type") or _get(subtask, "type")
        if not loop:
            return self.all_schemas()
        allowed: set[str] = set()
        for engine in self._engines:
            allowed |= {d["function"]["name"] for d in engine.definitions(profile=loop)}
        # A profile filters Toolyard's tools; your own Python tools stay offered.
        return [t.schema() for t in self._tools.values()
                if not isinstance(t, BuiltinTool) or t.name in allowed]

    def all_schemas(self) -> list[dict]:
        """Return all tool schemas for model consumption."""
        return [t.schema() for t in self._tools.values()]

    def get(self, name: str) -> Tool | None:
        """The tool registered as `name`, or None."""
        return self._tools.get(name)

    def close(self) -> None:
        """Stop the engine processes the built-in tools started."""
        for e in self._engines:
            e.close()

    def __enter__(self) -> "ToolRegistry":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> "ToolRegistry":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.close)


async def _within(coro: Any, seconds: float) -> Any:
    """`await coro`, cancelled after `seconds` (asyncio.timeout where there is one: unlike
    wait_for before Python 3.12 it runs the coroutine in this task, without a new one)."""
    timeout = getattr(asyncio, "timeout", None)
    if timeout is None:
        return await asyncio.wait_for(coro, seconds)
    async with timeout(seconds):
        return await coro


def _get(obj: Any, key: str) -> Any:
    if isinstance(obj, dict):
        return obj.get(key)
    return getattr(obj, key, None)
