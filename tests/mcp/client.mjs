// An MCP client on the official TypeScript SDK (@modelcontextprotocol/sdk:
// Client + StreamableHTTPClientTransport), for the tests of Baton's MCP
// server (tests/tests/mcp_server.rs). The same command line and output as
// client.py:
//
//   node client.mjs URL [--key KEY] list
//   node client.mjs URL [--key KEY] call TOOL INPUT [--context JSON] [--progress]
//        [--answer TEXT | --approve | --deny | --decline] [--cancel-after SECONDS]
//
// One JSON object a line: {"initialized"}, {"tools"}, {"progress", "message"},
// {"elicit", "action"}, {"result"}, {"cancelled": true}; an error prints
// {"error": {"type", "message"}} and exits 3. The SDK is found through
// NODE_PATH (.tools/node_modules, which ./tests/run installs it into).

import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";
import path from "node:path";

// Resolve the SDK from NODE_PATH (ES modules do not read it themselves).
const require = createRequire(import.meta.url);
const sdk = (p) => {
  for (const dir of (process.env.NODE_PATH || "").split(path.delimiter).filter(Boolean)) {
    try {
      return pathToFileURL(require.resolve(`@modelcontextprotocol/sdk/${p}`, { paths: [dir] })).href;
    } catch {}
  }
  return `@modelcontextprotocol/sdk/${p}`;
};
const { Client } = await import(sdk("client/index.js"));
const { StreamableHTTPClientTransport } = await import(sdk("client/streamableHttp.js"));
const { ElicitRequestSchema } = await import(sdk("types.js"));

const emit = (obj) => process.stdout.write(JSON.stringify(obj) + "\n");

function parse(argv) {
  const args = { url: argv[0], flags: {} };
  const rest = [];
  for (let i = 1; i < argv.length; i++) {
    const a = argv[i];
    if (["--key", "--context", "--answer", "--cancel-after"].includes(a)) {
      args.flags[a.slice(2)] = argv[++i];
    } else if (a.startsWith("--")) {
      args.flags[a.slice(2)] = true;
    } else {
      rest.push(a);
    }
  }
  [args.command, args.tool, args.input] = rest;
  return args;
}

async function main() {
  const { url, command, tool, input, flags } = parse(process.argv.slice(2));
  const headers = flags.key ? { Authorization: `Bearer ${flags.key}` } : {};
  const elicits = flags.answer !== undefined || flags.approve || flags.deny || flags.decline;
  const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } });
  const client = new Client(
    { name: "baton-test-ts", version: "0.1.0" },
    { capabilities: elicits ? { elicitation: {} } : {} },
  );
  if (elicits) {
    client.setRequestHandler(ElicitRequestSchema, async (request) => {
      const asked = request.params;
      if (flags.decline) {
        emit({ elicit: asked, action: "decline" });
        return { action: "decline" };
      }
      const props = asked.requestedSchema?.properties || {};
      const content = "approve" in props ? { approve: !!flags.approve } : { answer: flags.answer };
      emit({ elicit: asked, action: "accept", content });
      return { action: "accept", content };
    });
  }
  await client.connect(transport);
  emit({
    initialized: {
      protocolVersion: transport.protocolVersion,
      serverInfo: client.getServerVersion(),
      capabilities: client.getServerCapabilities(),
    },
  });
  try {
    if (command === "list") {
      const tools = await client.listTools();
      emit({ tools: tools.tools });
      return;
    }
    const arguments_ = { input };
    if (flags.context) arguments_.context = JSON.parse(flags.context);
    const controller = new AbortController();
    const options = { signal: controller.signal, timeout: 60_000 };
    if (flags.progress) {
      options.onprogress = (p) => emit({ progress: p.progress, message: p.message });
    }
    const call = client.callTool({ name: tool, arguments: arguments_ }, undefined, options);
    if (flags["cancel-after"] === undefined) {
      emit({ result: await call });
      return;
    }
    const timer = setTimeout(() => controller.abort("cancelled by the test"), Number(flags["cancel-after"]) * 1000);
    try {
      emit({ result: await call });
    } catch (e) {
      if (!controller.signal.aborted) throw e;
      emit({ cancelled: true });
      // Give the notification time to leave before the session closes.
      await new Promise((r) => setTimeout(r, 500));
    } finally {
      clearTimeout(timer);
    }
  } finally {
    await transport.terminateSession().catch(() => {});
    await client.close();
  }
}

try {
  await main();
} catch (e) {
  emit({ error: { type: e?.constructor?.name || typeof e, message: String(e?.message ?? e) } });
  process.exit(3);
}
