/** Starts the real `baton up` binary with a test agents file whose remote
 * tools are served by a TypeScript ToolServer in this process. BATON_BIN
 * names the binary (default: the workspace's target/debug/baton). */
import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { Orchestrator, Store, ToolServer } from "../src";

/** The repository (this file runs from clients/typescript/dist/test). */
export const REPO = resolve(__dirname, "../../../..");
const BIN = process.env.BATON_BIN ?? join(REPO, "target/debug/baton");

const agents = (port: number) => `
scripts:
  outer:
    - calls: [{tool: inner, args: {task: "find {{input}}"}}]
    - text: "outer: {{results}}"
  inner:
    - calls: [{tool: ts_search, args: {query: "{{input}}", limit: 2}}]
    - text: "inner: {{results}}"
  picker:
    - calls: [{tool: ts_pick, args: {}}]
    - text: "picked {{results}}"
  payer:
    - calls: [{tool: write_context, args: {key: paid, value: "yes"}}]
    - text: "paid: {{results}}"
  slow: [{delay: 30s, text: never}]
  echo: [{text: "{{input}}"}]
agents:
  outer: {model: "scripted:outer", tools: [inner]}
  inner: {model: "scripted:inner", tools: [ts_search]}
  picker: {model: "scripted:picker", tools: [ts_pick]}
  payer: {model: "scripted:payer", tools: [write_context], approvals: {write_context: always}}
  slow: {model: "scripted:slow"}
  echo: {model: "scripted:echo"}
tool_servers:
  ts:
    endpoint: http://127.0.0.1:${port}
    tools: [ts_search, ts_pick]
`;

export function freePort(): Promise<number> {
  return new Promise((ok, fail) => {
    const s = createServer();
    s.listen(0, "127.0.0.1", () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => ok(port));
    });
    s.on("error", fail);
  });
}

export function makeTools(): ToolServer {
  return new ToolServer()
    .tool(
      "ts_search",
      {
        description: "Searches (in TypeScript).",
        parameters: {
          type: "object",
          properties: { query: { type: "string" }, limit: { type: "integer" } },
          required: ["query"],
        },
      },
      async (ctx, args: { query: string; limit?: number }) => {
        for (const i of [1, 2]) await ctx.progress(50 * i, `step ${i}`);
        return `${args.limit ?? 3} results for ${args.query} at depth ${ctx.depth}`;
      },
    )
    .tool("ts_pick", { description: "Asks the person to pick a plan." }, async (ctx) => {
      await ctx.options("Plans on offer", ["basic", "gold"]);
      return ctx.ask("Which plan?", ["basic", "gold"]);
    });
}

export interface Running {
  orchestrator: Orchestrator;
  /** The orchestrator's address, for more clients. */
  orchestratorTarget: string;
  store: Store;
  stop(): Promise<void>;
}

/** `baton up` with the test agents and a TypeScript tool server. With
 * `auth.apiKeys` (the text of a keys file) it requires API keys, and the
 * returned orchestrator client sends `auth.apiKey`. With
 * `auth.exampleAgents` it serves the repository's example agents
 * (deploy/config/agents.yaml, what `baton up` serves in the repository)
 * instead of the test agents. */
export async function startBaton(
  auth: { apiKeys?: string; apiKey?: string; exampleAgents?: boolean } = {},
): Promise<Running> {
  const tools = makeTools();
  const toolPort = await tools.start("127.0.0.1:0");
  const [orch, store] = [await freePort(), await freePort()];
  const dir = mkdtempSync(join(tmpdir(), "baton-ts-"));
  const file = join(dir, "agents.yaml");
  writeFileSync(file, agents(toolPort));
  const extra: string[] = [];
  if (auth.apiKeys !== undefined) {
    writeFileSync(join(dir, "api-keys"), auth.apiKeys);
    extra.push("--api-keys-file", join(dir, "api-keys"));
  }
  const args = ["up", "--listen", `127.0.0.1:${orch}`, "--store-listen", `127.0.0.1:${store}`];
  if (!auth.exampleAgents) args.push("--agents", file);
  const proc = spawn(BIN, [...args, ...extra], {
    stdio: ["ignore", "pipe", "inherit"],
    // In the repository `baton up` serves its example agents.
    cwd: auth.exampleAgents ? REPO : undefined,
  });
  await new Promise<void>((ok, fail) => {
    const timer = setTimeout(() => fail(new Error("baton up did not come up")), 30_000);
    proc.on("exit", (code) => fail(new Error(`baton up exited (${code})`)));
    createInterface({ input: proc.stdout! }).on("line", (line) => {
      if (line.includes("Baton is up")) {
        clearTimeout(timer);
        ok();
      }
    });
  });
  // A gRPC name target (what in-cluster clients use with a headless Service).
  const o = new Orchestrator(`dns:///localhost:${orch}`, auth.apiKey);
  const s = new Store(`127.0.0.1:${store}`);
  return {
    orchestrator: o,
    orchestratorTarget: `127.0.0.1:${orch}`,
    store: s,
    async stop() {
      o.close();
      s.close();
      const exited = new Promise((ok) => proc.once("exit", ok));
      proc.kill("SIGTERM");
      await exited;
      await tools.stop();
    },
  };
}

/** A CA and the certificates it issued, made at test time with the
 * `openssl` command: a server certificate for `localhost` and `127.0.0.1`,
 * and a client certificate. */
export interface Pki {
  ca: string;
  serverCert: string;
  serverKey: string;
  clientCert: string;
  clientKey: string;
}

export function makePki(): Pki {
  const dir = mkdtempSync(join(tmpdir(), "baton-ts-pki-"));
  const openssl = (...args: string[]) => execFileSync("openssl", args, { cwd: dir, stdio: "pipe" });
  const ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"];
  openssl("req", "-x509", ...ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "1", "-subj", "/CN=baton-test-ca",
    "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign");
  for (const [name, usage] of [["server", "serverAuth"], ["client", "clientAuth"]]) {
    writeFileSync(join(dir, `${name}.ext`),
      `basicConstraints=CA:FALSE\nextendedKeyUsage=${usage}\nsubjectAltName=DNS:localhost,IP:127.0.0.1\n`);
    openssl("req", ...ec, "-keyout", `${name}.key`, "-out", `${name}.csr`, "-subj", `/CN=${name}`);
    openssl("x509", "-req", "-in", `${name}.csr`, "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-days", "1",
      "-extfile", `${name}.ext`, "-out", `${name}.pem`);
  }
  return {
    ca: join(dir, "ca.pem"),
    serverCert: join(dir, "server.pem"),
    serverKey: join(dir, "server.key"),
    clientCert: join(dir, "client.pem"),
    clientKey: join(dir, "client.key"),
  };
}

/** The real `baton-context-store` binary (memory backend) authenticating
 * every call with clients' `apiKeys` (a keys file's text) and a service
 * `token`; with `pki` it speaks TLS only (and with `mtls` requires
 * client certificates of its CA). */
export async function startStore(
  apiKeys: string,
  token: string,
  pki?: Pki,
  mtls = false,
): Promise<{ target: string; stop(): Promise<void> }> {
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), "baton-ts-store-"));
  writeFileSync(join(dir, "keys"), apiKeys);
  writeFileSync(join(dir, "token"), token);
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith("BATON_") && v !== undefined) env[k] = v;
  Object.assign(env, {
    BATON_STORE_LISTEN: `127.0.0.1:${port}`,
    BATON_STORE_BACKEND: "memory",
    BATON_STORE_TELEMETRY__METRICS_LISTEN: "",
    BATON_STORE_AUTH__API_KEYS_FILE: join(dir, "keys"),
    BATON_STORE_AUTH__SERVICE_TOKEN_FILE: join(dir, "token"),
  });
  if (pki !== undefined) {
    env.BATON_STORE_TLS__CERT_FILE = pki.serverCert;
    env.BATON_STORE_TLS__KEY_FILE = pki.serverKey;
    if (mtls) env.BATON_STORE_TLS__CLIENT_CA_FILE = pki.ca;
  }
  const proc = spawn(join(dirname(BIN), "baton-context-store"), [], { env, stdio: ["ignore", "pipe", "inherit"] });
  await new Promise<void>((ok, fail) => {
    const timer = setTimeout(() => fail(new Error("baton-context-store did not listen")), 30_000);
    proc.on("exit", (code) => fail(new Error(`baton-context-store exited (${code})`)));
    createInterface({ input: proc.stdout! }).on("line", (line) => {
      if (line.includes("context store listening")) {
        clearTimeout(timer);
        ok();
      }
    });
  });
  return {
    target: `127.0.0.1:${port}`,
    async stop() {
      const exited = new Promise((ok) => proc.once("exit", ok));
      proc.kill("SIGTERM");
      await exited;
    },
  };
}
