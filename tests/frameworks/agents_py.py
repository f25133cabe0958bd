"""One real agent per Python framework, with Toolyard (`toolyard serve` over stdio MCP) as its
tools and the scripted model at `base_url`: each runs until the model says it is done.

`server` is the argv of the MCP server (Toolyard, or a proxy in front of it).
"""

from __future__ import annotations

import asyncio
import os

PROMPT = "Work through the task with the tools."
MODEL = "scripted-model"


def _env() -> dict[str, str]:
    return dict(os.environ)


async def openai_agents(base_url: str, server: list[str]) -> None:
    """OpenAI Agents SDK: Responses API model, MCPServerStdio."""
    from agents import Agent, OpenAIResponsesModel, Runner, set_tracing_disabled
    from agents.mcp import MCPServerStdio
    from openai import AsyncOpenAI

    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=base_url, api_key="sk-scripted")
    async with MCPServerStdio(params={"command": server[0], "args": server[1:], "env": _env()},
                              client_session_timeout_seconds=60) as mcp:
        agent = Agent(name="coder", instructions=PROMPT, mcp_servers=[mcp],
                      model=OpenAIResponsesModel(model=MODEL, openai_client=client))
        await Runner.run(agent, PROMPT, max_turns=20)


async def langgraph(base_url: str, server: list[str]) -> None:
    """LangGraph's prebuilt ReAct agent, ChatOpenAI (Chat Completions), tools from
    langchain-mcp-adapters in its quick-start form: `get_tools()` without a session, so every
    tool call starts a new server (hence `serve --session NAME`, in `server`)."""
    from langchain_mcp_adapters.client import MultiServerMCPClient
    from langchain_openai import ChatOpenAI
    from langgraph.prebuilt import create_react_agent

    client = MultiServerMCPClient({"toolyard": {"command": server[0], "args": server[1:],
                                                "transport": "stdio", "env": _env()}})
    tools = await client.get_tools()
    model = ChatOpenAI(model=MODEL, base_url=base_url, api_key="sk-scripted")
    agent = create_react_agent(model, tools)
    await agent.ainvoke({"messages": [("user", PROMPT)]}, {"recursion_limit": 40})


async def pydantic_ai(base_url: str, server: list[str]) -> None:
    """pydantic-ai: OpenAIChatModel (Chat Completions), MCPToolset over stdio."""
    from pydantic_ai import Agent
    from pydantic_ai.mcp import MCPToolset, StdioTransport
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    toolset = MCPToolset(StdioTransport(server[0], server[1:], env=_env()))
    model = OpenAIChatModel(MODEL, provider=OpenAIProvider(base_url=base_url,
                                                           api_key="sk-scripted"))
    agent = Agent(model, toolsets=[toolset])
    async with agent:
        await agent.run(PROMPT)


async def smolagents(base_url: str, server: list[str]) -> None:
    """smolagents: ToolCallingAgent, OpenAIServerModel (Chat Completions), MCPClient."""
    from mcp import StdioServerParameters
    from smolagents import MCPClient, OpenAIServerModel, ToolCallingAgent

    from smolagents import ActionStep

    def show_images(step, agent) -> None:
        # smolagents keeps a tool's image in agent.state and tells the model only "Stored
        # 'image.png' in memory."; its documented way to let the model see an image is a step
        # callback that attaches it to the step (as its web-browsing example does).
        image = agent.state.pop("image.png", None)
        if isinstance(step, ActionStep) and image is not None:
            raw = image.to_raw() if hasattr(image, "to_raw") else image  # the PIL image
            step.observations_images = [*(step.observations_images or []), raw]

    def run() -> None:
        params = StdioServerParameters(command=server[0], args=server[1:], env=_env())
        with MCPClient(params, structured_output=False) as tools:
            model = OpenAIServerModel(model_id=MODEL, api_base=base_url, api_key="sk-scripted")
            agent = ToolCallingAgent(tools=tools, model=model, max_steps=12,
                                     step_callbacks=[show_images])
            agent.run(PROMPT)

    await asyncio.to_thread(run)


PYTHON = {"openai-agents": openai_agents, "langgraph": langgraph,
          "pydantic-ai": pydantic_ai, "smolagents": smolagents}
