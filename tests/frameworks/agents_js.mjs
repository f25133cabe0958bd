// One real agent per TypeScript framework, with Toolyard as its tools (stdio MCP) and the
// scripted model: node agents_js.mjs FRAMEWORK BASE_URL SERVER_ARGV_JSON
//   vercel-ai         AI SDK generateText, @ai-sdk/openai (Responses API), @ai-sdk/mcp client
//   openai-agents-js  @openai/agents Agent + run, OpenAIResponsesModel, MCPServerStdio
const [framework, baseURL, argvJson] = process.argv.slice(2);
const [command, ...args] = JSON.parse(argvJson);
const MODEL = "scripted-model";
const PROMPT = "Work through the task with the tools.";
const env = { ...process.env };

async function vercelAi() {
  const { generateText, stepCountIs } = await import("ai");
  const { createOpenAI } = await import("@ai-sdk/openai");
  const { experimental_createMCPClient: createMCPClient } = await import("@ai-sdk/mcp");
  const { Experimental_StdioMCPTransport } = await import("@ai-sdk/mcp/mcp-stdio");
  const client = await createMCPClient({
    transport: new Experimental_StdioMCPTransport({ command, args, env }),
  });
  try {
    const tools = await client.tools();
    const openai = createOpenAI({ baseURL, apiKey: "sk-scripted" });
    await generateText({ model: openai(MODEL), tools, prompt: PROMPT, stopWhen: stepCountIs(20) });
  } finally {
    await client.close();
  }
}

async function openaiAgentsJs() {
  const { Agent, run, MCPServerStdio, OpenAIResponsesModel, setTracingDisabled } = await import(
    "@openai/agents"
  );
  const { default: OpenAI } = await import("openai");
  setTracingDisabled(true);
  const server = new MCPServerStdio({ command, args, env });
  await server.connect();
  try {
    const client = new OpenAI({ baseURL, apiKey: "sk-scripted" });
    const agent = new Agent({
      name: "coder",
      instructions: PROMPT,
      mcpServers: [server],
      model: new OpenAIResponsesModel(client, MODEL),
    });
    await run(agent, PROMPT, { maxTurns: 20 });
  } finally {
    await server.close();
  }
}

const runners = { "vercel-ai": vercelAi, "openai-agents-js": openaiAgentsJs };
if (!runners[framework]) {
  console.error(`unknown framework ${framework}; known: ${Object.keys(runners).join(", ")}`);
  process.exit(2);
}
try {
  await runners[framework]();
  process.exit(0);
} catch (e) {
  console.error(e);
  process.exit(1);
}
