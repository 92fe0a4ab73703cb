/**
 * Clients of the orchestrator and the context store over @grpc/grpc-js.
 * Events and responses are the generated `baton.v1` types; `kind(event)`
 * names an event's payload. Every call takes `timeoutMs` (the gRPC deadline);
 * run calls take `traceparent` (W3C) so the run joins the caller's trace.
 */
import { readFileSync } from "node:fs";
import {
  CallOptions,
  ChannelCredentials,
  ClientReadableStream,
  credentials,
  Metadata,
  ServiceError,
  status,
} from "@grpc/grpc-js";
import {
  WatchResponse,
  ContextStoreClient,
  DeleteRequest,
  ClearResponse,
  DeleteManyRequest,
  DeleteManyResponse,
  DeleteResponse,
  GetResponse,
  ListResponse,
  PutManyRequest,
  PutManyResponse,
  PutRequest,
  PutResponse,
} from "./gen/baton/v1/context_store";
import { EventFilter, RunEvent } from "./gen/baton/v1/events";
import {
  CaseResult,
  Experiment,
  ExperimentComparison,
  ExperimentEvent,
  ListExperimentsResponse,
  RunExperimentRequest,
  SaveCaseResponse,
} from "./gen/baton/v1/evals";
import {
  ApprovalMode,
  CancelRunResponse,
  Conversation as ConversationInfo,
  ConversationBusy,
  ConversationMessage,
  DeleteConversationResponse,
  ForkEdit,
  FailurePolicy,
  GenerationSettings,
  GetRunResponse,
  ListAgentsResponse,
  ListConversationsResponse,
  ListRunsResponse,
  Message,
  OrchestratorClient,
  PipelineMode,
  PipelineStep,
  RunAgentRequest,
  RunStatus,
  Schedule,
  ScheduleMissed,
  ScheduleOverlap,
  UpdateConversationRequest,
} from "./gen/baton/v1/orchestrator";
import {
  CreateWebhookResponse,
  DeadLetter,
  RotateWebhookSecretResponse,
  Webhook,
} from "./gen/baton/v1/webhooks";
import { fromServiceError } from "./errors";

export type { RunEvent };
/** The name of an event's payload: `agentStarted`, `toolProgress`, `runCompleted`, … */
export type EventKind = NonNullable<RunEvent["payload"]>["$case"];

export function kind(event: RunEvent): EventKind | "" {
  return event.payload?.$case ?? "";
}

const TERMINAL = new Set(["runCompleted", "runFailed", "runCancelled"]);
export function isTerminal(event: RunEvent): boolean {
  return TERMINAL.has(kind(event));
}

export interface CallOpts {
  /** Deadline of the call, in milliseconds from now. */
  timeoutMs?: number;
}
/** The edit a fork puts at its fork point (ForkEdit): one of these. */
export type ForkEditSpec =
  | { modelTurn: { text: string; toolCalls?: { tool: string; arguments?: Record<string, unknown> }[] } }
  | { toolResult: string; isError?: boolean }
  | { approval: { approved: boolean; reason?: string } }
  | { input: string }
  | { stepOutput: string }
  | { runContext: Record<string, unknown> };
/** Options of {@link Orchestrator.forkRun}. */
export interface ForkOpts extends CallOpts {
  /** The edit at the fork point; none: the point is done again. */
  edit?: ForkEditSpec;
  /** The fork outlives this stream. */
  detach?: boolean;
  /** Which events the stream carries. */
  filter?: EventFilter;
}

/** Options of {@link Orchestrator.replayRun}. */
export interface ReplayOpts extends CallOpts {
  /** Fail at the first request that differs from the recording. */
  strict?: boolean;
  /** The replay outlives this stream. */
  detach?: boolean;
  /** Which events the stream carries. */
  filter?: EventFilter;
}

function forkEdit(e?: ForkEditSpec): ForkEdit | undefined {
  if (!e) return undefined;
  if ("modelTurn" in e) {
    const toolCalls = (e.modelTurn.toolCalls ?? []).map((c, i) => ({
      callId: String(i + 1),
      tool: c.tool,
      argumentsJson: JSON.stringify(c.arguments ?? {}),
    }));
    return { edit: { $case: "modelTurn", modelTurn: { text: e.modelTurn.text, toolCalls } } };
  }
  if ("toolResult" in e) {
    return { edit: { $case: "toolResult", toolResult: { result: e.toolResult, isError: e.isError ?? false } } };
  }
  if ("approval" in e) {
    return { edit: { $case: "approval", approval: { approved: e.approval.approved, reason: e.approval.reason ?? "" } } };
  }
  if ("input" in e) return { edit: { $case: "input", input: e.input } };
  if ("runContext" in e) return { edit: { $case: "runContextJson", runContextJson: JSON.stringify(e.runContext) } };
  return { edit: { $case: "stepOutput", stepOutput: e.stepOutput } };
}
/** Generation settings of a run, over every agent's and provider's own
 * (the server checks the values and names a bad one). */
export interface Settings {
  temperature?: number;
  topP?: number;
  maxTokens?: number;
  stop?: string[];
  seed?: number;
  /** `auto`, `none`, `required` or the name of a tool. */
  toolChoice?: string;
  parallelToolCalls?: boolean;
  /** The run's answer must be JSON matching `schema`. */
  responseFormat?: { schema: Record<string, unknown>; name?: string; strict?: boolean; retries?: number };
  /** Provider-specific body fields, sent as they are. */
  extra?: Record<string, unknown>;
}

/** `Settings` as the request's message. */
export function generationSettings(s: Settings | undefined): GenerationSettings | undefined {
  if (s === undefined) return undefined;
  return {
    temperature: s.temperature,
    topP: s.topP,
    maxTokens: s.maxTokens,
    stop: s.stop ?? [],
    seed: s.seed,
    toolChoice: s.toolChoice ?? "",
    parallelToolCalls: s.parallelToolCalls,
    responseFormat: s.responseFormat && {
      schemaJson: JSON.stringify(s.responseFormat.schema),
      name: s.responseFormat.name ?? "",
      strict: s.responseFormat.strict ?? false,
      retries: s.responseFormat.retries ?? 0,
    },
    extraBodyJson: s.extra ? JSON.stringify(s.extra) : "",
  };
}

export interface RunOpts extends CallOpts {
  maxDepth?: number;
  maxTurns?: number;
  /** Deadline of the whole run, in seconds. */
  runTimeout?: number;
  /** Most tokens the whole run may spend on models (`limits.budget.tokens`). */
  budgetTokens?: number;
  /** Most the whole run may spend on models, in the prices' currency. */
  budgetCost?: number;
  /** The model of agents that name none, `provider:model`. */
  defaultModel?: string;
  /** The run's generation settings. */
  settings?: Settings;
  approvalMode?: "ask" | "auto_approve" | "auto_deny";
  filter?: EventFilter;
  /** W3C trace context of the caller's span. */
  traceparent?: string;
  /** The run outlives this stream: leaving it does not cancel the run
   * (follow it with `watch`, find it with `listRuns`, end it with `cancel`). */
  detach?: boolean;
  /** Webhooks of this run alone (docs/webhooks.md): each a URL, the
   * events wanted (none: the five `run.` ones) and a `whsec_` secret. */
  webhooks?: RunWebhookOpts[];
}

/** A run's own webhook. */
export interface RunWebhookOpts {
  url: string;
  events?: string[];
  /** The signing secret, `whsec_…`. */
  secret: string;
}

function runWebhooks(o: RunOpts) {
  return (o.webhooks ?? []).map((w) => ({
    url: w.url,
    events: w.events ?? [],
    secret: w.secret,
    authorization: "",
    token: "",
    format: "",
    id: "",
  }));
}
/** What a run does when its conversation's last run is still going:
 * wait for it (the server's default) or fail `Aborted` at once. */
export type ConversationBusyMode = "wait" | "refuse";

/** A message of a request's `history`: `role` and `content` at least. */
export type HistoryMessage = Pick<Message, "role" | "content"> & Partial<Message>;

export interface AgentOpts extends RunOpts {
  runContext?: Record<string, unknown>;
  /** Earlier conversation; only the root agent sees it (not with
   * `conversationId`: the conversation holds the history). */
  history?: HistoryMessage[];
  /** The conversation the run continues: it begins with its messages,
   * then `input`, and appends what it added when it ends. */
  conversationId?: string;
  /** Start a conversation with this run: its id is `conversationId` or,
   * none, one Baton makes (the stream's `conversationId` says it once
   * `runStarted` was read). */
  newConversation?: boolean;
  /** While the conversation's last run goes on: wait for it, or refuse. */
  conversationBusy?: ConversationBusyMode;
  /** How long the conversation is kept after its last use, in seconds. */
  conversationTtl?: number;
}
/** Options of {@link Orchestrator.conversation}. */
export interface ConversationOpts {
  /** An existing conversation to continue; none: the first `send` starts
   * a new one, which Baton names. */
  id?: string;
  /** Start a new conversation of this `id` with the first `send`. */
  new?: boolean;
  /** Each send's `conversationBusy`. */
  busy?: ConversationBusyMode;
  /** Each send's `conversationTtl`, in seconds. */
  ttl?: number;
}
/** Options of {@link Conversation.send}: a run's (as `runAgent` takes
 * them), and the conversation's `busy` and `ttl` for this message. */
export interface SendOpts extends RunOpts {
  runContext?: Record<string, unknown>;
  history?: HistoryMessage[];
  busy?: ConversationBusyMode;
  ttl?: number;
}
export interface StepSpec {
  id: string;
  agent: string;
  task?: string;
  inputFrom?: string[];
  outputTo?: string;
  dependsOn?: string[];
  required?: boolean;
  /** Per-attempt timeout in seconds. */
  timeout?: number;
  retries?: number;
}
export interface PipelineOpts extends RunOpts {
  name?: string;
  mode?: "sequential" | "parallel" | "dag";
  policy?: "fail" | "continue" | "best_effort";
  maxConcurrency?: number;
  initialSlots?: Record<string, string>;
  keepContext?: boolean;
}

function limits(o: RunOpts) {
  return {
    maxDepth: o.maxDepth,
    maxTurns: o.maxTurns ?? 0,
    runTimeout: o.runTimeout === undefined ? undefined : duration(o.runTimeout),
    budget:
      o.budgetTokens === undefined && o.budgetCost === undefined
        ? undefined
        : { tokens: o.budgetTokens, cost: o.budgetCost },
  };
}

const busyModes = {
  wait: ConversationBusy.CONVERSATION_BUSY_WAIT,
  refuse: ConversationBusy.CONVERSATION_BUSY_REFUSE,
};
const approvalModes = {
  ask: ApprovalMode.APPROVAL_MODE_ASK,
  auto_approve: ApprovalMode.APPROVAL_MODE_AUTO_APPROVE,
  auto_deny: ApprovalMode.APPROVAL_MODE_AUTO_DENY,
};
const modes = {
  sequential: PipelineMode.PIPELINE_MODE_SEQUENTIAL,
  parallel: PipelineMode.PIPELINE_MODE_PARALLEL,
  dag: PipelineMode.PIPELINE_MODE_DAG,
};
const policies = {
  fail: FailurePolicy.FAILURE_POLICY_FAIL,
  continue: FailurePolicy.FAILURE_POLICY_CONTINUE,
  best_effort: FailurePolicy.FAILURE_POLICY_BEST_EFFORT,
};

function duration(seconds: number) {
  const whole = Math.floor(seconds);
  return { seconds: whole, nanos: Math.round((seconds - whole) * 1e9) };
}

function options(o: CallOpts): Partial<CallOptions> {
  return o.timeoutMs === undefined ? {} : { deadline: Date.now() + o.timeoutMs };
}

function metadata(traceparent?: string, apiKey?: string): Metadata {
  const md = new Metadata();
  if (traceparent) md.set("traceparent", traceparent);
  if (apiKey) md.set("authorization", `Bearer ${apiKey}`);
  return md;
}

function target(endpoint: string): string {
  return endpoint.replace(/^https?:\/\//, "");
}

/** TLS towards a server. An `https://` endpoint always speaks TLS; the
 * server's certificate is checked against `caFile` (PEM) or else the
 * system's roots; `certFile`/`keyFile` present a client certificate (mTLS). */
export interface Tls {
  /** TLS for an endpoint without `https://` too (a `dns:///` target). */
  enabled?: boolean;
  /** The CA (PEM file) the server's certificate is checked against. */
  caFile?: string;
  /** A client certificate chain (PEM file) to present. */
  certFile?: string;
  /** Its private key (PEM file). */
  keyFile?: string;
}

function channelCredentials(endpoint: string, tls: Tls = {}): ChannelCredentials {
  const secure = tls.enabled ?? (endpoint.startsWith("https://") || tls.caFile !== undefined || tls.certFile !== undefined);
  if (!secure) return credentials.createInsecure();
  if ((tls.certFile === undefined) !== (tls.keyFile === undefined)) {
    throw new Error("tls.certFile and tls.keyFile go together");
  }
  const read = (path?: string) => (path === undefined ? null : readFileSync(path));
  return credentials.createSsl(read(tls.caFile), read(tls.keyFile), read(tls.certFile));
}

/** Calls are spread over every address the target's name resolves to
 * (gRPC's round_robin; the default, pick_first, sends everything to one):
 * with `dns:///baton-orchestrator-headless:50051` in Kubernetes, every
 * replica gets calls. A single address behaves as before. */
const channelOptions = {
  "grpc.service_config": JSON.stringify({ loadBalancingConfig: [{ round_robin: {} }] }),
};

/** Opens a new WatchRun call of a run after a seq (how a broken stream
 * re-attaches). */
export type Reattach = (runId: string, afterSeq: number) => ClientReadableStream<RunEvent>;

/** How long a broken stream keeps trying to re-attach, in ms. */
export const REATTACH_FOR_MS = 30_000;

const TERMINAL_KINDS = new Set(["runCompleted", "runFailed", "runCancelled"]);

/** The events of one run. Leaving the loop early (or `cancel()`)
 * disconnects, which cancels the run on the server unless it was started
 * detached.
 *
 * When the stream breaks with UNAVAILABLE before the run's terminal event
 * (its replica is draining, or died and another resumed the run), it
 * re-attaches by itself with WatchRun(afterSeq) through the same target and
 * goes on where it was: the caller sees a pause, not an error. It gives up
 * after `REATTACH_FOR_MS`, throwing the last error. */
export class RunStream implements AsyncIterable<RunEvent> {
  runId?: string;
  traceId?: string;
  lastSeq = 0;
  /** The conversation the run is in, once its `runStarted` was read
   * (none for a run in no conversation). */
  conversationId?: string;
  /** The stream has ended: the run's terminal event was read, or it
   * failed, or it was left or cancelled. */
  finished = false;
  constructor(
    private call: ClientReadableStream<RunEvent>,
    private readonly reattach?: Reattach,
  ) {}

  async *[Symbol.asyncIterator](): AsyncIterator<RunEvent> {
    let done = false;
    // While re-attaching: when to give up, how long to wait next, and the
    // error that broke the stream.
    let deadline: number | undefined;
    let wait = 100;
    let broke: unknown;
    let terminal: RunEvent | undefined;
    try {
      for (;;) {
        try {
          // The terminal event is held until the stream's own end (its
          // status), which the server sends right after: a consumer that
          // stops at the terminal event would otherwise cancel the call,
          // resetting the stream, and a connection whose streams are reset
          // by the thousand is closed by the server's HTTP/2 reset-flood
          // guard.
          for await (const event of this.call as AsyncIterable<RunEvent>) {
            if (terminal) continue;
            deadline = undefined;
            wait = 100;
            this.runId ??= event.runId;
            this.traceId ??= event.traceId;
            this.lastSeq = event.seq;
            if (event.payload?.$case === "runStarted" && event.payload.runStarted.conversationId) {
              this.conversationId = event.payload.runStarted.conversationId;
            }
            if (event.payload && TERMINAL_KINDS.has(event.payload.$case)) {
              terminal = event;
              done = true;
              continue;
            }
            yield event;
          }
          done = true;
          if (terminal) yield terminal;
          return;
        } catch (e) {
          // The run had ended: its stream's end went missing, not the run.
          if (terminal) {
            yield terminal;
            return;
          }
          const code = (e as { code?: number }).code;
          const retrying = deadline !== undefined;
          const retryable = code === status.UNAVAILABLE || (retrying && code === status.NOT_FOUND);
          if (!this.reattach || this.runId === undefined || !retryable) throw retrying ? broke : e;
          if (!retrying) {
            broke = e;
            deadline = Date.now() + REATTACH_FOR_MS;
          } else if (Date.now() + wait > deadline!) {
            throw broke;
          }
          await new Promise((r) => setTimeout(r, retrying ? wait : 0));
          if (retrying) wait = Math.min(wait * 2, 1000);
          this.call = this.reattach(this.runId, this.lastSeq);
        }
      }
    } catch (e) {
      done = true;
      throw fromServiceError(e);
    } finally {
      this.finished = true;
      if (!done) this.call.cancel();
    }
  }

  /** Disconnects; the server cancels the run. */
  cancel(): void {
    this.finished = true;
    this.call.cancel();
  }

  /** Every remaining event, to the end of the run. */
  async collect(): Promise<RunEvent[]> {
    const out: RunEvent[] = [];
    for await (const e of this) out.push(e);
    return out;
  }
}

function unary<Req, Res>(
  fn: (req: Req, md: Metadata, opts: Partial<CallOptions>, cb: (e: ServiceError | null, r: Res) => void) => unknown,
  req: Req,
  o: CallOpts,
  md: Metadata = new Metadata(),
): Promise<Res> {
  return new Promise((resolve, reject) =>
    fn(req, md, options(o), (e, r) => (e ? reject(fromServiceError(e)) : resolve(r))),
  );
}

/** A client of `baton.v1.Orchestrator`. */
export class Orchestrator {
  private readonly client: OrchestratorClient;

  /** `apiKey` is sent as `authorization: Bearer <key>` with every call (an
   * orchestrator with `auth.api_keys_file` requires a known key); `tls`:
   * see {@link Tls}. */
  constructor(
    endpoint = "127.0.0.1:50051",
    private readonly apiKey?: string,
    tls?: Tls,
  ) {
    this.client = new OrchestratorClient(target(endpoint), channelCredentials(endpoint, tls), channelOptions);
  }

  private md(traceparent?: string): Metadata {
    return metadata(traceparent, this.apiKey);
  }

  close(): void {
    this.client.close();
  }

  /** Starts `agent` (or a group) on `input`; returns its events. */
  runAgent(agent: string, input: string, o: AgentOpts = {}): RunStream {
    const request = {
      agent,
      input,
      history: (o.history ?? []).map((m) => ({
        role: m.role,
        content: m.content,
        toolCalls: m.toolCalls ?? [],
        toolCallId: m.toolCallId ?? "",
      })),
      runContextJson: o.runContext ? JSON.stringify(o.runContext) : "",
      defaultModel: o.defaultModel ?? "",
      limits: limits(o),
      approvalMode: approvalModes[o.approvalMode ?? "ask"],
      filter: o.filter,
      detach: o.detach ?? false,
      settings: generationSettings(o.settings),
      conversationId: o.conversationId ?? "",
      newConversation: o.newConversation ?? false,
      conversationBusy:
        o.conversationBusy === undefined ? ConversationBusy.CONVERSATION_BUSY_UNSPECIFIED : busyModes[o.conversationBusy],
      conversationTtl: o.conversationTtl === undefined ? undefined : duration(o.conversationTtl),
      webhooks: runWebhooks(o),
    };
    return new RunStream(this.client.runAgent(request, this.md(o.traceparent), options(o)), this.watcher(o.filter));
  }

  /** Starts a pipeline of steps. */
  runPipeline(steps: StepSpec[], o: PipelineOpts = {}): RunStream {
    const request = {
      pipeline: {
        name: o.name ?? "",
        steps: steps.map(
          (s): PipelineStep => ({
            id: s.id,
            agent: s.agent,
            task: s.task ?? "",
            inputFrom: s.inputFrom ?? [],
            outputTo: s.outputTo ?? "",
            dependsOn: s.dependsOn ?? [],
            required: s.required,
            timeout: s.timeout === undefined ? undefined : duration(s.timeout),
            retries: s.retries ?? 0,
          }),
        ),
        mode: modes[o.mode ?? "sequential"],
        policy: policies[o.policy ?? "fail"],
        maxConcurrency: o.maxConcurrency,
      },
      initialSlots: o.initialSlots ?? {},
      keepContext: o.keepContext ?? false,
      runContextJson: "",
      defaultModel: o.defaultModel ?? "",
      limits: limits(o),
      approvalMode: approvalModes[o.approvalMode ?? "ask"],
      filter: o.filter,
      detach: o.detach ?? false,
      settings: generationSettings(o.settings),
      webhooks: runWebhooks(o),
    };
    return new RunStream(this.client.runPipeline(request, this.md(o.traceparent), options(o)), this.watcher(o.filter));
  }

  /** Forks run `runId` at seq `atSeq` (ForkRun): everything before it is
   * replayed from the run's recording (no model, tool or person is asked
   * again; those events come first, `replayed` set), the point takes
   * `o.edit` if given (else it is done again), then the fork runs live. */
  forkRun(runId: string, atSeq: number, o: ForkOpts = {}): RunStream {
    const request = { runId, atSeq, edit: forkEdit(o.edit), detach: o.detach ?? false, filter: o.filter };
    return new RunStream(this.client.forkRun(request, this.md(), options(o)), this.watcher(o.filter));
  }

  /** Replays the ended run `runId` against today's agents (ReplayRun):
   * model calls and calls of tools outside Baton whose request matches the
   * recording are answered from it, people's answers too. At the first
   * request that differs a `diverged` event says where and what; then a
   * `strict` replay fails, otherwise it goes live. The terminal event's
   * `replay` counts the calls that matched. */
  replayRun(runId: string, o: ReplayOpts = {}): RunStream {
    const request = { runId, strict: o.strict ?? false, detach: o.detach ?? false, filter: o.filter };
    return new RunStream(this.client.replayRun(request, this.md(), options(o)), this.watcher(o.filter));
  }

  /** Re-attaches to a run's events after `afterSeq` (WatchRun). */
  watch(runId: string, afterSeq = 0, o: CallOpts = {}): RunStream {
    const stream = new RunStream(this.client.watchRun({ runId, afterSeq }, this.md(), options(o)), this.watcher());
    stream.runId = runId;
    stream.lastSeq = afterSeq;
    return stream;
  }

  /** New WatchRun calls of a run after a seq, with `filter` (how a broken
   * stream re-attaches). */
  private watcher(filter?: EventFilter): Reattach {
    return (runId, afterSeq) => this.client.watchRun({ runId, afterSeq, filter }, this.md());
  }

  async resolveApproval(runId: string, approvalId: string, approved: boolean, reason = "", o: CallOpts = {}) {
    await unary(this.client.resolveApproval.bind(this.client), { runId, approvalId, approved, reason }, o, this.md());
  }

  async submitInput(runId: string, inputId: string, input: string, o: CallOpts = {}) {
    await unary(this.client.submitInput.bind(this.client), { runId, inputId, input }, o, this.md());
  }

  async cancel(runId: string, reason = "", o: CallOpts = {}): Promise<RunStatus> {
    const response: CancelRunResponse = await unary(this.client.cancelRun.bind(this.client), { runId, reason }, o, this.md());
    return response.status;
  }

  getRun(runId: string, o: CallOpts = {}): Promise<GetRunResponse> {
    return unary(this.client.getRun.bind(this.client), { runId }, o, this.md());
  }

  /** A page of the caller's runs, newest first (ListRuns); `status`
   * RUN_STATUS_UNSPECIFIED lists every status. Pass `nextPageToken` back as
   * `pageToken` until it is empty. */
  listRuns(
    status: RunStatus = RunStatus.RUN_STATUS_UNSPECIFIED,
    pageSize = 0,
    pageToken = "",
    o: CallOpts = {},
  ): Promise<ListRunsResponse> {
    return unary(this.client.listRuns.bind(this.client), { status, pageSize, pageToken, waiting: false, failingScores: false }, o, this.md());
  }

  /** A page of the caller's runs waiting for a person (an approval or an
   * input request), newest first: ListRuns with `waiting`; each says what
   * it waits for in `waitingFor`. */
  listWaitingRuns(pageSize = 0, pageToken = "", o: CallOpts = {}): Promise<ListRunsResponse> {
    const status = RunStatus.RUN_STATUS_UNSPECIFIED;
    return unary(this.client.listRuns.bind(this.client), { status, pageSize, pageToken, waiting: true, failingScores: false }, o, this.md());
  }

  listAgents(o: CallOpts = {}): Promise<ListAgentsResponse> {
    return unary(this.client.listAgents.bind(this.client), {}, o, this.md());
  }

  /** A conversation with `agent` (or a group): each `send` runs the agent
   * on the conversation so far and a new message. Without `id` the first
   * `send` starts a new conversation (Baton names it); with the `id` of an
   * existing one it continues that; `{ id, new: true }` starts one of that
   * id. */
  conversation(agent: string, o: ConversationOpts = {}): Conversation {
    return new Conversation(this, agent, o);
  }

  /** A conversation (GetConversation): its title, labels and counts, its
   * runs and a page of its messages, oldest first (`last`: the first page
   * starts that many messages from the end). Pass `nextPageToken` back as
   * `pageToken` until it is empty. */
  getConversation(
    conversationId: string,
    page: { pageSize?: number; pageToken?: string; last?: number } = {},
    o: CallOpts = {},
  ): Promise<ConversationInfo> {
    const request = {
      conversationId,
      pageSize: page.pageSize ?? 0,
      pageToken: page.pageToken ?? "",
      last: page.last ?? 0,
    };
    return unary(this.client.getConversation.bind(this.client), request, o, this.md());
  }

  /** A page of the caller's conversations, most recently used first
   * (without their messages). Pass `nextPageToken` back as `pageToken`
   * until it is empty. */
  listConversations(pageSize = 0, pageToken = "", o: CallOpts = {}): Promise<ListConversationsResponse> {
    return unary(this.client.listConversations.bind(this.client), { pageSize, pageToken }, o, this.md());
  }

  /** Sets a conversation's `title` (none keeps it) and `labels` (merged
   * into its labels; an empty value removes one). */
  updateConversation(
    conversationId: string,
    update: { title?: string; labels?: Record<string, string> },
    o: CallOpts = {},
  ): Promise<ConversationInfo> {
    const request: UpdateConversationRequest = { conversationId, title: update.title, labels: update.labels ?? {} };
    return unary(this.client.updateConversation.bind(this.client), request, o, this.md());
  }

  /** Runs a dataset file (JSON Lines, or YAML when it ends in `.yaml` or
   * `.yml`) as an experiment (RunExperiment) and resolves with its record
   * once it ends; `onCase` is called with each case as it is scored.
   * Aborting `o.signal` cancels the experiment's runs still going; the
   * experiment keeps the cases that finished. A bad dataset rejects with
   * InvalidArgument naming the file, line and field. */
  async runExperiment(
    dataset: string,
    e: {
      agent?: string;
      name?: string;
      repeat?: number;
      concurrency?: number;
      defaultModel?: string;
      budgetTokens?: number;
      budgetCost?: number;
      onCase?: (c: CaseResult) => void;
      signal?: AbortSignal;
    } = {},
    o: CallOpts = {},
  ): Promise<Experiment> {
    const request: RunExperimentRequest = {
      dataset: readFileSync(dataset, "utf8"),
      datasetName: dataset,
      agent: e.agent ?? "",
      name: e.name ?? "",
      repeat: e.repeat ?? 0,
      concurrency: e.concurrency ?? 0,
      defaultModel: e.defaultModel ?? "",
      budget:
        e.budgetTokens || e.budgetCost ? { tokens: e.budgetTokens ?? 0, cost: e.budgetCost ?? 0 } : undefined,
    };
    const call = this.client.runExperiment(request, this.md(), options(o));
    const abort = () => call.cancel();
    e.signal?.addEventListener("abort", abort);
    try {
      for await (const event of call as AsyncIterable<ExperimentEvent>) {
        const which = event.event;
        if (which?.$case === "caseScored") e.onCase?.(which.caseScored);
        if (which?.$case === "ended") return which.ended;
      }
    } catch (err) {
      throw fromServiceError(err);
    } finally {
      e.signal?.removeEventListener("abort", abort);
      call.cancel();
    }
    throw new Error("the experiment's stream ended before the experiment did");
  }

  /** An experiment (by id or name) with its cases, scores and reasons. */
  getExperiment(experiment: string, o: CallOpts = {}): Promise<Experiment> {
    return unary(this.client.getExperiment.bind(this.client), { experiment }, o, this.md());
  }

  /** Stops a running experiment (by id or name) on whichever replica runs
   * it (CancelExperiment): its runs still going are cancelled and the
   * cases that finished are kept; resolves with its record once it says
   * CANCELLED (as it stands after 10 s when its replica is slow to say so;
   * COMPLETED when it ended first). One
   * that is not running rejects with FailedPrecondition. */
  cancelExperiment(experiment: string, o: CallOpts = {}): Promise<Experiment> {
    return unary(this.client.cancelExperiment.bind(this.client), { experiment }, o, this.md());
  }

  /** Subscribes `url` to what happens to the caller's tenant's runs
   * (docs/webhooks.md); the answer holds its secret (`whsec_…`), shown
   * this once. */
  createWebhook(
    url: string,
    w: { events?: string[]; description?: string; secret?: string } = {},
    o: CallOpts = {},
  ): Promise<CreateWebhookResponse> {
    const request = { url, events: w.events ?? [], description: w.description ?? "", secret: w.secret ?? "" };
    return unary(this.client.createWebhook.bind(this.client), request, o, this.md());
  }

  /** The caller's tenant's webhooks (without their secrets). */
  async listWebhooks(o: CallOpts = {}): Promise<Webhook[]> {
    return (await unary(this.client.listWebhooks.bind(this.client), {}, o, this.md())).webhooks;
  }

  /** Deletes a webhook: nothing more is delivered to it. */
  async deleteWebhook(webhookId: string, o: CallOpts = {}): Promise<void> {
    await unary(this.client.deleteWebhook.bind(this.client), { webhookId }, o, this.md());
  }

  /** A new secret for a webhook; the previous one signs too for
   * `previousValidFor` seconds (unset: the server's overlap). */
  rotateWebhookSecret(webhookId: string, previousValidFor?: number, o: CallOpts = {}): Promise<RotateWebhookSecretResponse> {
    const request = {
      webhookId,
      previousValidFor: previousValidFor === undefined ? undefined : duration(previousValidFor),
    };
    return unary(this.client.rotateWebhookSecret.bind(this.client), request, o, this.md());
  }

  /** Deliveries of the caller's tenant that kept failing, newest first. */
  async listDeadLetters(pageSize = 0, o: CallOpts = {}): Promise<DeadLetter[]> {
    return (await unary(this.client.listDeadLetters.bind(this.client), { pageSize }, o, this.md())).deadLetters;
  }

  /** Makes a schedule (docs/schedules.md): a detached run of `agent` on
   * `input` at each tick of `cron` in `timeZone`, or every `every`
   * seconds, until `endAt`. */
  createSchedule(
    agent: string,
    input: string,
    s: {
      cron?: string;
      timeZone?: string;
      every?: number;
      endAt?: Date;
      overlap?: "skip" | "queue_one" | "allow";
      missed?: "skip" | "run_once";
      description?: string;
      paused?: boolean;
    },
    o: CallOpts = {},
  ): Promise<Schedule> {
    const overlaps = {
      skip: ScheduleOverlap.SCHEDULE_OVERLAP_SKIP,
      queue_one: ScheduleOverlap.SCHEDULE_OVERLAP_QUEUE_ONE,
      allow: ScheduleOverlap.SCHEDULE_OVERLAP_ALLOW,
    };
    const request = {
      description: s.description ?? "",
      agent: RunAgentRequest.fromPartial({ agent, input }),
      pipeline: undefined,
      cron: s.cron ?? "",
      timeZone: s.timeZone ?? "",
      interval: s.every === undefined ? undefined : duration(s.every),
      endAt: s.endAt === undefined ? undefined : { seconds: Math.floor(s.endAt.getTime() / 1000), nanos: (s.endAt.getTime() % 1000) * 1_000_000 },
      overlap: overlaps[s.overlap ?? "skip"],
      missed: s.missed === "run_once" ? ScheduleMissed.SCHEDULE_MISSED_RUN_ONCE : ScheduleMissed.SCHEDULE_MISSED_SKIP,
      paused: s.paused ?? false,
    };
    return unary(this.client.createSchedule.bind(this.client), request, o, this.md());
  }

  /** The caller's tenant's schedules, the agents file's first. */
  async listSchedules(o: CallOpts = {}): Promise<Schedule[]> {
    return (await unary(this.client.listSchedules.bind(this.client), {}, o, this.md())).schedules;
  }

  /** A schedule with its next fire times and recent ticks. */
  getSchedule(scheduleId: string, o: CallOpts = {}): Promise<Schedule> {
    return unary(this.client.getSchedule.bind(this.client), { scheduleId }, o, this.md());
  }

  /** Stops a schedule firing until it is resumed. */
  pauseSchedule(scheduleId: string, o: CallOpts = {}): Promise<Schedule> {
    return unary(this.client.pauseSchedule.bind(this.client), { scheduleId }, o, this.md());
  }

  /** Fires a paused schedule again, from its next tick. */
  resumeSchedule(scheduleId: string, o: CallOpts = {}): Promise<Schedule> {
    return unary(this.client.resumeSchedule.bind(this.client), { scheduleId }, o, this.md());
  }

  /** Deletes a schedule; the runs it started go on. */
  async deleteSchedule(scheduleId: string, o: CallOpts = {}): Promise<void> {
    await unary(this.client.deleteSchedule.bind(this.client), { scheduleId }, o, this.md());
  }

  /** Delivers a dead letter again, with the same `webhook-id`. */
  async redeliverDeadLetter(deliveryId: string, o: CallOpts = {}): Promise<void> {
    await unary(this.client.redeliverDeadLetter.bind(this.client), { deliveryId }, o, this.md());
  }

  /** A page of the caller's experiments, newest first, without their
   * cases. */
  listExperiments(pageSize = 0, pageToken = "", o: CallOpts = {}): Promise<ListExperimentsResponse> {
    return unary(this.client.listExperiments.bind(this.client), { pageSize, pageToken }, o, this.md());
  }

  /** Two experiments compared case by case; `regressed` says whether the
   * candidate regressed a case beyond noise. */
  compareExperiments(baseline: string, candidate: string, alpha = 0, o: CallOpts = {}): Promise<ExperimentComparison> {
    return unary(this.client.compareExperiments.bind(this.client), { baseline, candidate, alpha }, o, this.md());
  }

  /** A dataset case made of an ended run (SaveCase), parsed: write
   * `JSON.stringify(c)` as a line of a JSON Lines dataset. */
  async saveCase(runId: string, inlineRecording = false, o: CallOpts = {}): Promise<Record<string, unknown>> {
    const r: SaveCaseResponse = await unary(
      this.client.saveCase.bind(this.client),
      { runId, inlineRecording },
      o,
      this.md(),
    );
    return JSON.parse(r.caseJson);
  }

  /** Deletes a conversation (cancelling a run of it still going), its
   * messages and its runs' histories; how many runs' histories were
   * deleted. */
  async deleteConversation(conversationId: string, o: CallOpts = {}): Promise<number> {
    const response: DeleteConversationResponse = await unary(
      this.client.deleteConversation.bind(this.client),
      { conversationId },
      o,
      this.md(),
    );
    return response.runsDeleted;
  }
}

/** A conversation with an agent ({@link Orchestrator.conversation}).
 *
 * ```ts
 * const chat = baton.conversation("assistant");
 * await chat.send("hello").collect();      // starts it
 * await chat.send("and again").collect();  // continues it
 * (await chat.history()).map((m) => m.message?.content);
 * ```
 *
 * `id` is undefined until the first message's run has started (its
 * `runStarted` event was read), when Baton names the conversation. */
export class Conversation {
  private knownId?: string;
  /** Whether the next send starts the conversation. */
  private create: boolean;
  /** The stream of the send that starts it, until its run started. */
  private starting?: RunStream;

  constructor(
    private readonly orchestrator: Orchestrator,
    /** The agent (or group) each message is sent to. */
    public agent: string,
    private readonly o: ConversationOpts = {},
  ) {
    if (o.id === undefined && o.new === false) throw new Error("new: a conversation without an id is a new one");
    this.knownId = o.id;
    this.create = o.new ?? o.id === undefined;
  }

  /** The conversation's id; undefined until Baton named it. */
  get id(): string | undefined {
    this.settle();
    return this.knownId;
  }

  /** Takes the id from the starting send's stream once its run started;
   * forgets a starting send that ended before (the next send starts the
   * conversation). */
  private settle(): void {
    const s = this.starting;
    if (s === undefined) return;
    if (s.conversationId !== undefined) {
      this.knownId = s.conversationId;
      this.create = false;
      this.starting = undefined;
    } else if (s.finished) {
      this.starting = undefined;
    }
  }

  /** Runs the agent on the conversation so far and `text`; returns the
   * run's events (a `RunStream`, as `runAgent` does, with its options).
   * The run appends `text` and its answer to the conversation when it
   * ends. While another run of the conversation goes on, the message waits
   * for it or, with `busy: "refuse"`, fails `Aborted`.
   *
   * The first message of a new conversation starts it: read its stream
   * (at least to `runStarted`) before sending the next. */
  send(text: string, o: SendOpts = {}): RunStream {
    this.settle();
    if (this.create && this.starting !== undefined) {
      throw new Error(
        "the conversation's first message has not started its run yet: read its stream (to runStarted) before sending the next",
      );
    }
    const { busy, ttl, ...run } = o;
    const stream = this.orchestrator.runAgent(this.agent, text, {
      ...run,
      conversationId: this.knownId ?? "",
      newConversation: this.create,
      conversationBusy: busy ?? this.o.busy,
      conversationTtl: ttl ?? this.o.ttl,
    });
    if (this.create) this.starting = stream;
    return stream;
  }

  private needId(): string {
    const id = this.id;
    if (id === undefined) throw new Error("the conversation has no id yet: send its first message (and read to runStarted)");
    return id;
  }

  /** The conversation's messages, oldest first, every page followed
   * (`last`: only the newest `last`). Each has its `message` (`role`,
   * `content`), the `runId` that added it, its `index`, and `interrupted`
   * for a run that failed or was cancelled. A deadline bounds each page. */
  async history(page: { last?: number; pageSize?: number } = {}, o: CallOpts = {}): Promise<ConversationMessage[]> {
    const id = this.needId();
    let got = await this.orchestrator.getConversation(id, { pageSize: page.pageSize, last: page.last }, o);
    const messages = [...got.messages];
    while (got.nextPageToken) {
      got = await this.orchestrator.getConversation(id, { pageSize: page.pageSize, pageToken: got.nextPageToken }, o);
      messages.push(...got.messages);
    }
    return messages;
  }

  /** The conversation as GetConversation returns it: its title, labels,
   * counts, expiry and runs, and its first page of messages. */
  get(o: CallOpts = {}): Promise<ConversationInfo> {
    return this.orchestrator.getConversation(this.needId(), {}, o);
  }

  /** Sets its `title` and `labels` (see `Orchestrator.updateConversation`). */
  update(update: { title?: string; labels?: Record<string, string> }, o: CallOpts = {}): Promise<ConversationInfo> {
    return this.orchestrator.updateConversation(this.needId(), update, o);
  }

  /** Deletes it (see `Orchestrator.deleteConversation`). */
  delete(o: CallOpts = {}): Promise<number> {
    return this.orchestrator.deleteConversation(this.needId(), o);
  }
}

/** A client of `baton.v1.ContextStore`: trace-scoped slots. */
/** One slot of `Store.putMany`. */
export interface PutManyEntry {
  key: string;
  value: string | Uint8Array;
  contentType?: string;
  ttl?: number;
  expectedVersion?: number;
}

export class Store {
  private readonly client: ContextStoreClient;

  /** `apiKey` is sent as `authorization: Bearer <key>` with every call. A
   * store authenticates every call unless it runs with `auth.mode = "none"`
   * (`baton up`); a client API key reaches its own tenant's slots only.
   * `tls`: see {@link Tls}. */
  constructor(
    endpoint = "127.0.0.1:50052",
    private readonly apiKey?: string,
    tls?: Tls,
  ) {
    this.client = new ContextStoreClient(target(endpoint), channelCredentials(endpoint, tls), channelOptions);
  }

  private md(): Metadata {
    return metadata(undefined, this.apiKey);
  }

  close(): void {
    this.client.close();
  }

  /** Writes a slot (strings as UTF-8 text); `expectedVersion` makes it a
   * compare-and-swap (0: only if absent); `ttl` in seconds. */
  put(
    traceId: string,
    key: string,
    value: string | Uint8Array,
    o: CallOpts & { contentType?: string; ttl?: number; expectedVersion?: number } = {},
  ): Promise<PutResponse> {
    const text = typeof value === "string";
    const request: PutRequest = {
      traceId,
      key,
      value: Buffer.from(value),
      contentType: o.contentType ?? (text ? "text/plain; charset=utf-8" : ""),
      ttl: o.ttl === undefined ? undefined : duration(o.ttl),
      expectedVersion: o.expectedVersion,
    };
    return unary(this.client.put.bind(this.client), request, o, this.md());
  }

  /** Writes several slots of a trace in one call, all or none (up to 1000):
   * a `{key: value}` object or entries with `key`, `value` and optionally
   * `contentType`, `ttl` (seconds) and `expectedVersion`. Each entry's
   * version and expiry, in order; an error's `field` names the entry
   * (`entries[2].expectedVersion` is `entries[2].expected_version`). */
  async putMany(
    traceId: string,
    entries: Record<string, string | Uint8Array> | PutManyEntry[],
    o: CallOpts = {},
  ): Promise<PutResponse[]> {
    const list: PutManyEntry[] = Array.isArray(entries)
      ? entries
      : Object.entries(entries).map(([key, value]) => ({ key, value }));
    const request: PutManyRequest = {
      traceId,
      entries: list.map((e) => ({
        key: e.key,
        value: Buffer.from(e.value),
        contentType: e.contentType ?? (typeof e.value === "string" ? "text/plain; charset=utf-8" : ""),
        ttl: e.ttl === undefined ? undefined : duration(e.ttl),
        expectedVersion: e.expectedVersion,
      })),
    };
    const response: PutManyResponse = await unary(this.client.putMany.bind(this.client), request, o, this.md());
    return response.written;
  }

  /** Deletes the listed keys (absent ones are skipped; up to 1000), or
   * every slot under a non-empty `prefix`, in one call; the number of live
   * slots removed. */
  async deleteMany(traceId: string, what: { keys?: string[]; prefix?: string }, o: CallOpts = {}): Promise<number> {
    const request: DeleteManyRequest = { traceId, keys: what.keys ?? [], prefix: what.prefix ?? "" };
    const response: DeleteManyResponse = await unary(
      this.client.deleteMany.bind(this.client),
      request,
      o,
      this.md(),
    );
    return Number(response.deleted);
  }

  get(traceId: string, key: string, o: CallOpts = {}): Promise<GetResponse> {
    return unary(this.client.get.bind(this.client), { traceId, key }, o, this.md());
  }

  /** The trace's live slots under `prefix` (every page, followed), and its
   * usage as of the last page. A deadline in `o` bounds each page. */
  async list(traceId: string, prefix = "", o: CallOpts = {}): Promise<ListResponse> {
    const listing = await this.listPage(traceId, prefix, {}, o);
    let token = listing.nextPageToken;
    while (token) {
      const page = await this.listPage(traceId, prefix, { pageToken: token }, o);
      listing.slots.push(...page.slots);
      listing.usedBytes = page.usedBytes;
      listing.usedKeys = page.usedKeys;
      token = page.nextPageToken;
    }
    listing.nextPageToken = "";
    return listing;
  }

  /** One page of the trace's slots under `prefix`: at most `pageSize` (0: the
   * server's default), continuing the listing `pageToken` came from;
   * `nextPageToken` is empty on the last page. */
  listPage(
    traceId: string,
    prefix = "",
    page: { pageSize?: number; pageToken?: string } = {},
    o: CallOpts = {},
  ): Promise<ListResponse> {
    const request = { traceId, prefix, pageSize: page.pageSize ?? 0, pageToken: page.pageToken ?? "" };
    return unary(this.client.list.bind(this.client), request, o, this.md());
  }

  async delete(traceId: string, key: string, o: CallOpts & { expectedVersion?: number } = {}): Promise<number> {
    const request: DeleteRequest = { traceId, key, expectedVersion: o.expectedVersion };
    const response: DeleteResponse = await unary(this.client.delete.bind(this.client), request, o, this.md());
    return response.version;
  }

  /** Deletes every slot of the trace; the number of live slots removed. */
  async clear(traceId: string, o: CallOpts = {}): Promise<number> {
    const response: ClearResponse = await unary(this.client.clear.bind(this.client), { traceId }, o, this.md());
    return Number(response.deleted);
  }

  /** The trace's changes from now on. */
  async *watch(traceId: string, prefix = "", o: CallOpts = {}): AsyncGenerator<WatchResponse> {
    const call = this.client.watch({ traceId, prefix }, this.md(), options(o));
    try {
      for await (const change of call as AsyncIterable<WatchResponse>) yield change;
    } catch (e) {
      throw fromServiceError(e);
    } finally {
      call.cancel();
    }
  }
}
