/**
 * Serve TypeScript functions as Baton tools (the `baton.v1.ToolHost`
 * service).
 *
 * ```ts
 * const tools = new ToolServer();
 * tools.tool("web_search", {
 *   description: "Searches the web.",
 *   parameters: { type: "object", properties: { query: { type: "string" } }, required: ["query"] },
 * }, async (ctx, args: { query: string }) => {
 *   await ctx.progress(50, "searching");
 *   return `results for ${args.query}`;
 * });
 * const port = await tools.start("127.0.0.1:50062");
 * ```
 *
 * TypeScript types do not exist at run time, so a tool states its argument
 * JSON schema. `ctx.ask()` ends the call with an input request; when the
 * person answers, the orchestrator calls the tool again and `ask` returns the
 * answer (earlier answers are replayed in order: keep what runs before an
 * `ask` idempotent). A returned string is the output, anything else is sent
 * as JSON; a thrown error is an error the model sees.
 */
import {
  Server,
  ServerCredentials,
  ServerUnaryCall,
  ServerWritableStream,
  sendUnaryData,
  status,
} from "@grpc/grpc-js";
import {
  ExecuteRequest,
  ExecuteResponse,
  ListToolsRequest,
  ListToolsResponse,
  ToolHostService,
} from "./gen/baton/v1/tool_host";

class NeedInput extends Error {
  constructor(
    readonly prompt: string,
    readonly options: string[],
    readonly token: string,
  ) {
    super(prompt);
  }
}

/** What a running tool knows of its call, and how it talks back. */
export class ToolContext {
  readonly callId: string;
  readonly tool: string;
  readonly traceId: string;
  readonly runId: string;
  readonly contextId: string;
  readonly depth: number;
  readonly agent: string;
  /**
   * `{runId}/{contextId}/{callId}`: the same for every execution of this
   * call, also when the run is resumed elsewhere and the call is done again
   * (calls are at least once): key effects that must happen once on it.
   */
  readonly idempotencyKey: string;
  private readonly answers: string[];
  private asked = 0;

  constructor(
    request: ExecuteRequest,
    private readonly send: (r: ExecuteResponse) => void,
    /** The caller's W3C trace context (the orchestrator's tool span). */
    readonly traceparent?: string,
  ) {
    const c = request.context;
    this.callId = request.callId;
    this.tool = request.tool;
    this.traceId = c?.traceId ?? "";
    this.runId = c?.runId ?? "";
    this.contextId = c?.contextId ?? "";
    this.depth = c?.depth ?? 0;
    this.agent = c?.agent ?? "";
    this.idempotencyKey = request.idempotencyKey;
    this.answers = request.resumeToken ? [...JSON.parse(request.resumeToken), request.input] : [];
  }

  /** Reports progress (0–100). */
  async progress(percent: number, message = ""): Promise<void> {
    this.send({ event: { $case: "progress", progress: { percent: Math.max(0, Math.min(100, percent)), message } } });
  }

  /** Offers options while the tool runs. */
  async options(question: string, options: string[]): Promise<void> {
    this.send({ event: { $case: "options", options: { question, options } } });
  }

  /** Asks the person and returns the answer. */
  async ask(prompt: string, options: string[] = []): Promise<string> {
    if (this.asked < this.answers.length) return this.answers[this.asked++];
    throw new NeedInput(prompt, options, JSON.stringify(this.answers));
  }
}

export type ToolFn<A = any> = (ctx: ToolContext, args: A) => Promise<unknown>;

export interface ToolSpec {
  description?: string;
  /** JSON schema of the arguments (default: any object). */
  parameters?: Record<string, unknown>;
}

/** A ToolHost server of registered async functions. */
export class ToolServer {
  private readonly tools = new Map<string, { spec: ToolSpec; fn: ToolFn }>();
  private server?: Server;

  tool<A>(name: string, spec: ToolSpec, fn: ToolFn<A>): this {
    this.tools.set(name, { spec, fn: fn as ToolFn });
    return this;
  }

  /** Serves on `address`; resolves to the bound port. */
  start(address = "127.0.0.1:0"): Promise<number> {
    const server = new Server();
    server.addService(ToolHostService, {
      listTools: (_: ServerUnaryCall<ListToolsRequest, ListToolsResponse>, cb: sendUnaryData<ListToolsResponse>) =>
        cb(null, {
          tools: [...this.tools].map(([name, t]) => ({
            name,
            description: t.spec.description ?? "",
            parametersJsonSchema: JSON.stringify(t.spec.parameters ?? { type: "object" }),
          })),
        }),
      execute: (call: ServerWritableStream<ExecuteRequest, ExecuteResponse>) => void this.execute(call),
    });
    this.server = server;
    return new Promise((resolve, reject) =>
      server.bindAsync(address, ServerCredentials.createInsecure(), (e, port) => (e ? reject(e) : resolve(port))),
    );
  }

  stop(): Promise<void> {
    return new Promise((resolve) => (this.server ? this.server.tryShutdown(() => resolve()) : resolve()));
  }

  private async execute(call: ServerWritableStream<ExecuteRequest, ExecuteResponse>): Promise<void> {
    const request = call.request;
    const tool = this.tools.get(request.tool);
    if (!tool) {
      call.destroy(Object.assign(new Error(`tool: no tool ${JSON.stringify(request.tool)} here`), { code: status.NOT_FOUND }));
      return;
    }
    let args: unknown;
    try {
      args = JSON.parse(request.argumentsJson || "{}");
    } catch (e) {
      call.destroy(Object.assign(new Error(`arguments_json: ${e}`), { code: status.INVALID_ARGUMENT }));
      return;
    }
    const tp = call.metadata.get("traceparent")[0];
    const ctx = new ToolContext(request, (r) => call.write(r), typeof tp === "string" ? tp : undefined);
    let last: ExecuteResponse;
    try {
      const out = await tool.fn(ctx, args);
      last = { event: { $case: "result", result: { output: typeof out === "string" ? out : JSON.stringify(out) } } };
    } catch (e) {
      last =
        e instanceof NeedInput
          ? { event: { $case: "inputRequired", inputRequired: { prompt: e.prompt, options: e.options, resumeToken: e.token } } }
          : { event: { $case: "error", error: { message: e instanceof Error ? e.message : String(e) } } };
    }
    if (!call.cancelled) {
      call.write(last);
      call.end();
    }
  }
}
