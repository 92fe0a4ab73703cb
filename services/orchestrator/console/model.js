// The state of one run, built from its events with no DOM work: the tree of
// contexts and the items of each (messages, tool calls, approvals, ...),
// pipeline steps, timeline spans and totals. Every change marks what it
// touched dirty; the views (tree.js, graph.js, timeline.js) redraw only
// that, once per animation frame.

import { num, parseDuration, parseTime } from './util.js';

/** Every payload key of RunEvent, in the proto's order. */
export const PAYLOADS = [
  'runStarted', 'runCompleted', 'runFailed', 'runCancelled', 'runResumed',
  'agentStarted', 'textDelta', 'messageCompleted', 'agentCompleted', 'handoff',
  'modelFallback', 'budgetExhausted', 'rateLimitWait', 'historyCompacted', 'toolCallStarted', 'toolProgress', 'toolOptions', 'toolCallCompleted',
  'toolBatchCompleted', 'approvalRequested', 'approvalResolved',
  'inputRequested', 'inputReceived', 'inputTimedOut', 'contextWritten', 'stepStarted',
  'stepCompleted', 'stepFailed', 'stepSkipped', 'pipelineCompleted', 'diverged',
];
const KNOWN = new Set(PAYLOADS);

/** The payload key of an event (`hint`: the SSE `event:` name). */
export function payloadKey(ev, hint) {
  if (hint && KNOWN.has(hint) && ev[hint] !== undefined) return hint;
  for (const k of PAYLOADS) if (ev[k] !== undefined) return k;
  return '';
}

/** One context: an agent at work, or a pipeline step. */
export class Ctx {
  constructor(id, parent, depth) {
    this.id = id;
    this.parent = parent;
    this.depth = depth;
    this.agent = '';
    this.model = '';
    /** running | completed | failed | skipped | cancelled | ended */
    this.status = 'running';
    this.startMs = NaN;
    this.endMs = NaN;
    this.lastMs = NaN;
    this.output = '';
    this.usage = null;
    this.items = [];
    this.children = [];
    /** Shown open: the root by default, every other context on demand. */
    this.expanded = depth === 0;
    this.openMessage = null;
    this.tools = new Map();
    this.turnStart = NaN;
    this.lastText = '';
    /** The step record when this is a pipeline step's context. */
    this.step = null;
    /** Items changed since the last redraw. */
    this.dirty = new Set();
    this.headDirty = true;
    /** Render state, owned by tree.js (null while not on the page). */
    this._r = null;
  }
}

const RECENT = 200;

/** The events a run can be forked at, and the edit each takes
 * (ForkEdit's field). */
const FORK_POINTS = {
  messageCompleted: 'modelTurn',
  toolCallCompleted: 'toolResult',
  approvalResolved: 'approval',
  inputReceived: 'input',
  stepCompleted: 'stepOutput',
  stepFailed: 'stepOutput',
};

/** A fork's origin as the API says it (`forkedFrom`). */
function origin(o) {
  return { runId: o.runId, seq: Number(o.seq || 0), edited: !!o.edited };
}

/** The state of one run. */
export class RunModel {
  constructor(runId) {
    this.runId = runId;
    this.traceId = '';
    this.kind = '';
    this.target = '';
    this.status = '';
    this.startedAt = NaN;
    this.endedAt = NaN;
    this.output = '';
    this.runContextJson = '';
    this.error = null; // {code, message}
    this.cancelReason = '';
    this.usage = { inputTokens: 0, outputTokens: 0, modelCalls: 0, toolCalls: 0, costNanos: 0, currency: '', unpricedModelCalls: 0 };
    this.usageFinal = false;
    this.lastSeq = 0;
    this.seqs = [];
    this.count = 0;
    /** Events taken from the original's recording (a fork's first). */
    this.replayedCount = 0;
    /** Whether the event being applied is replayed (its items are). */
    this.applyingReplayed = false;
    /** Whether a fork's first live event came (said once). */
    this.wentLive = false;
    /** For a fork: `{runId, seq, edited}` of its origin (GetRun's or
     * RunStarted's forkedFrom). */
    this.forkedFrom = null;
    /** For a replay: the run it replays (GetRun's replayOf). */
    this.replayOf = '';
    /** For a case of an experiment: the experiment (GetRun's experimentId). */
    this.experimentId = '';
    /** For a run a schedule started: the schedule (GetRun's scheduleId)
     * and the tick it was started for (ms; NaN when not said). */
    this.scheduleId = '';
    this.scheduleTickAt = NaN;
    /** Its live scores (GetRun's scores), once scored. */
    this.scores = [];
    /** For a replay: whether it is strict; its stats once it ended
     * (`{matchedCalls, calls, diverged}`); where it diverged. */
    this.strict = false;
    this.replayStats = null;
    this.divergedAt = null;
    /** GetRun said the run's history is no longer kept. */
    this.historyGone = false;
    /** The conversation the run continues (GetRun's or RunStarted's
     * conversationId); '' when none. */
    this.conversationId = '';
    /** The run's input (RunStarted's). */
    this.input = '';
    this.touched = null;
    this.terminal = false;
    this.firstMs = NaN;
    this.lastMs = NaN;
    this.lastWall = 0;
    this.contexts = new Map();
    this.root = new Ctx('root', null, 0);
    this.contexts.set('root', this.root);
    this.approvals = new Map();
    this.inputs = new Map();
    /** Open approvals and questions, by id. */
    this.pending = new Map();
    /** Pipelines (the steps under one context), by that context's id. */
    this.pipelines = new Map();
    /** Timeline spans: {kind, ctx, label, start, end, state}. */
    this.spans = [];
    this.resumes = 0;
    this.writes = 0;
    this.recent = [];
    this.recentAt = 0;
    // What changed since the views last looked.
    this.dirtyCtx = new Set([this.root]);
    this.summaryDirty = true;
    this.graphDirty = true;
    this.timelineDirty = true;
    this.slotsDirty = false;
  }

  /** The last `RECENT` raw events, oldest first. */
  recentEvents() {
    if (this.recent.length < RECENT) return this.recent.slice();
    return this.recent.slice(this.recentAt).concat(this.recent.slice(0, this.recentAt));
  }

  /** Takes what GetRun answered. */
  applyRun(r) {
    this.traceId = r.traceId || this.traceId;
    this.kind = r.kind || this.kind;
    this.target = r.target || this.target;
    if (!this.terminal || (r.status && r.status !== 'RUN_STATUS_RUNNING')) this.status = r.status || this.status;
    const s = parseTime(r.startedAt);
    if (Number.isFinite(s)) this.startedAt = s;
    const e = parseTime(r.endedAt);
    if (Number.isFinite(e)) this.endedAt = e;
    if (r.output) this.output = r.output;
    if (r.forkedFrom && r.forkedFrom.runId) this.forkedFrom = origin(r.forkedFrom);
    this.historyGone = !!r.historyGone;
    if (r.replayOf) this.replayOf = r.replayOf;
    if (r.experimentId) this.experimentId = r.experimentId;
    if (r.scheduleId) this.scheduleId = r.scheduleId;
    if (r.scheduleTickAt) this.scheduleTickAt = parseTime(r.scheduleTickAt);
    if (r.scores && r.scores.length) this.scores = r.scores;
    if (r.conversationId) this.conversationId = r.conversationId;
    if (r.runContextJson) this.runContextJson = r.runContextJson;
    // While it runs, the totals are summed from the events (replayed from
    // seq 1); once it ended, GetRun's are the run's.
    if (r.usage && r.status && r.status !== 'RUN_STATUS_RUNNING') {
      this.usage = {
        inputTokens: num(r.usage.inputTokens),
        outputTokens: num(r.usage.outputTokens),
        modelCalls: num(r.usage.modelCalls),
        toolCalls: num(r.usage.toolCalls),
        costNanos: num(r.usage.costNanos),
        currency: r.usage.currency || '',
        unpricedModelCalls: num(r.usage.unpricedModelCalls),
      };
      this.usageFinal = true;
    }
    if (r.errorCode || r.errorMessage) {
      if (r.status === 'RUN_STATUS_CANCELLED') this.cancelReason = this.cancelReason || r.errorMessage || '';
      else this.error = this.error || { code: r.errorCode || 0, message: r.errorMessage || '' };
    }
    this.summaryDirty = true;
  }

  /** The context `id`, made (with its parent chain) when first seen. */
  context(id, parentId, depth) {
    let c = this.contexts.get(id);
    if (c) return c;
    let parent = this.root;
    if (parentId && parentId !== id) {
      parent = this.contexts.get(parentId) || this.context(parentId, '', Math.max(0, depth - 1));
    }
    c = new Ctx(id, parent, depth);
    this.contexts.set(id, c);
    parent.children.push(c);
    c.parentItem = this.push(parent, { kind: 'child', child: c });
    return c;
  }

  push(ctx, item) {
    item.ctx = ctx;
    if (this.applyingReplayed) item.replayed = true;
    item.index = ctx.items.length;
    ctx.items.push(item);
    this.dirtyCtx.add(ctx);
    return item;
  }

  touch(item) {
    item.ctx.dirty.add(item);
    this.dirtyCtx.add(item.ctx);
  }

  head(ctx) {
    ctx.headDirty = true;
    this.dirtyCtx.add(ctx);
  }

  pipeline(groupId) {
    let p = this.pipelines.get(groupId);
    if (!p) {
      p = { id: groupId, steps: new Map(), order: [], spec: null, lastCompleted: null, lastSettled: null };
      this.pipelines.set(groupId, p);
    }
    return p;
  }

  stepOf(group, stepId, ctxId) {
    let s = group.steps.get(stepId);
    if (!s) {
      s = {
        id: stepId, ctxId, group, agent: '', state: 'pending', attempt: 0, attempts: [],
        output: '', error: '', reason: '', durationS: NaN, trigger: null,
        startMs: NaN, endMs: NaN, deps: [],
      };
      group.steps.set(stepId, s);
      group.order.push(s);
    }
    if (ctxId) s.ctxId = ctxId;
    return s;
  }

  /** Knows the steps of the run's pipeline before they run (its spec). */
  setPipelineSpec(spec) {
    if (!spec || !Array.isArray(spec.steps)) return;
    const group = this.pipeline('root');
    group.spec = spec;
    for (const st of spec.steps) this.stepOf(group, st.id, `root.${st.id}`);
    this.graphDirty = true;
  }

  /** Applies one event (already checked to be the next seq). */
  apply(ev, key, seq) {
    this.lastSeq = seq;
    this.seqs.push(seq);
    this.count++;
    if (this.recent.length < RECENT) this.recent.push(ev);
    else {
      this.recent[this.recentAt] = ev;
      this.recentAt = (this.recentAt + 1) % RECENT;
    }
    if (ev.traceId && !this.traceId) {
      this.traceId = ev.traceId;
      this.summaryDirty = true;
    }
    const ctx = this.context(ev.contextId || 'root', ev.parentContextId, ev.depth | 0);
    const p = ev[key] || {};
    let t = NaN;
    // Deltas and progress are the bulk of a big run: their time is not
    // needed.
    if (key !== 'textDelta' && key !== 'toolProgress') {
      t = parseTime(ev.time);
      // A fork's replayed events keep their origin's times: they count at
      // the fork's start (GetRun's), so its durations and timeline are its
      // own, not minutes from its origin's start.
      if (ev.replayed && this.forkedFrom && Number.isFinite(this.startedAt)) t = this.startedAt;
      if (Number.isFinite(t)) {
        if (!(this.firstMs <= t)) this.firstMs = t;
        if (!(this.lastMs >= t)) this.lastMs = t;
        ctx.lastMs = t;
        if (!Number.isFinite(ctx.startMs)) ctx.startMs = t;
        this.lastWall = Date.now();
        this.timelineDirty = true;
      }
    }
    if (ev.replayed) this.replayedCount++;
    // Items a replayed event makes are marked so; where a fork goes live
    // is said once, in the root context.
    this.applyingReplayed = !!ev.replayed;
    // A fork whose point's outcome was edited goes live with that point's
    // event: what it touches is marked edited.
    let edited = false;
    if (!ev.replayed && this.replayedCount > 0 && !this.wentLive) {
      this.wentLive = true;
      edited = !!this.forkedFrom?.edited;
      this.push(this.context('root', '', 0), { kind: 'live', seq, afterEdit: edited });
    }
    // The item a fork point's event touched gets its seq: "Fork from here".
    this.touched = null;
    const handler = this[`on_${key}`];
    if (handler) handler.call(this, ctx, p, t, ev, seq);
    if (edited && this.touched) {
      this.touched.edited = true;
      this.touch(this.touched);
    }
    if (this.touched && FORK_POINTS[key]) {
      this.touched.forkSeq = seq;
      this.touched.forkKind = FORK_POINTS[key];
      this.touch(this.touched);
    }
  }

  on_runStarted(ctx, p, t) {
    if (p.forkedFrom && p.forkedFrom.runId && !this.forkedFrom) this.forkedFrom = origin(p.forkedFrom);
    this.kind = p.kind || this.kind;
    this.target = p.target || this.target;
    if (!Number.isFinite(this.startedAt)) this.startedAt = t;
    if (!this.status) this.status = 'RUN_STATUS_RUNNING';
    if (p.replayOf) {
      this.replayOf = p.replayOf;
      this.strict = !!p.strict;
    }
    this.input = p.input || this.input;
    if (p.conversationId) {
      this.conversationId = p.conversationId;
      // What the model saw before the input: the conversation so far.
      this.push(ctx, { kind: 'conversation', conversationId: p.conversationId, messages: num(p.conversationMessages) });
    }
    this.summaryDirty = true;
  }

  on_diverged(ctx, p) {
    const at = p.point === 'model_turn' ? `model turn ${num(p.turn)}` : `${(p.point || '').replace('_', ' ')} ${p.callId || ''}`;
    this.divergedAt = { ctx: ctx.id, at, diff: p.diff || '', strict: !!p.strict };
    this.push(ctx, { kind: 'diverged', at, diff: p.diff || '', strict: !!p.strict });
    this.summaryDirty = true;
  }

  /** A replay's stats, from its terminal event. */
  replayEnded(p) {
    if (!p.replay) return;
    this.replayStats = {
      matchedCalls: num(p.replay.matchedCalls), calls: num(p.replay.calls), diverged: !!p.replay.diverged,
    };
    this.replayOf = this.replayOf || p.replay.runId || '';
  }

  on_agentStarted(ctx, p, t) {
    if (ctx.agent && ctx.agent !== p.agent) this.push(ctx, { kind: 'agent', agent: p.agent, model: p.model });
    ctx.agent = p.agent || ctx.agent;
    ctx.model = p.model || ctx.model;
    if (ctx.status !== 'running') ctx.status = 'running';
    ctx.turnStart = t;
    this.head(ctx);
  }

  on_textDelta(ctx, p, t, ev) {
    let m = ctx.openMessage;
    if (!m) {
      m = this.push(ctx, { kind: 'message', agent: ev.agent || ctx.agent, text: '', final: false });
      ctx.openMessage = m;
    }
    m.text += p.text || '';
    this.touch(m);
  }

  on_messageCompleted(ctx, p, t, ev) {
    const text = p.text || '';
    const m = ctx.openMessage;
    if (m) {
      if (text && m.text !== text) {
        m.text = text;
        m.replaced = true;
      }
      m.final = true;
      m.usage = p.usage;
      m.finishReason = p.finishReason;
      m.toolCalls = p.toolCalls || [];
      m.model = p.model || '';
      m.skipped = p.skipped || [];
      this.touch(m);
      ctx.openMessage = null;
    } else if (text || p.toolCalls?.length) {
      // A turn of tool calls alone is an item too: it is a fork point.
      this.push(ctx, {
        kind: 'message', agent: ev.agent || ctx.agent, text, final: true,
        usage: p.usage, finishReason: p.finishReason, toolCalls: p.toolCalls || [],
        model: p.model || '', skipped: p.skipped || [],
      });
    }
    this.touched = m || (text || p.toolCalls?.length ? ctx.items[ctx.items.length - 1] : null);
    if (text) ctx.lastText = text;
    const u = p.usage;
    if (!this.usageFinal) {
      this.usage.inputTokens += num(u?.inputTokens);
      this.usage.outputTokens += num(u?.outputTokens);
      this.usage.modelCalls += u ? num(u.modelCalls) : 1;
      this.usage.costNanos += num(u?.costNanos);
      this.usage.unpricedModelCalls += num(u?.unpricedModelCalls);
      if (u?.currency) this.usage.currency = u.currency;
      this.summaryDirty = true;
    }
    this.spans.push({
      kind: 'model', ctx, label: `${ev.agent || ctx.agent || 'model'} turn`,
      start: Number.isFinite(ctx.turnStart) ? ctx.turnStart : t, end: t, state: 'ok',
      detail: `${num(u?.inputTokens)} in / ${num(u?.outputTokens)} out tokens${p.finishReason ? `, ${p.finishReason}` : ''}`,
    });
    ctx.turnStart = t;
  }

  on_agentCompleted(ctx, p, t) {
    ctx.status = 'completed';
    ctx.output = p.output || '';
    ctx.usage = p.usage || null;
    ctx.endMs = t;
    this.push(ctx, { kind: 'done', agent: ctx.agent, output: ctx.output, usage: ctx.usage, shown: ctx.output === ctx.lastText });
    this.head(ctx);
  }

  on_modelFallback(ctx, p) {
    // The failed model's streamed text is dropped: the next model starts
    // the turn again in a message of its own.
    const m = ctx.openMessage;
    if (p.discardedText && m) {
      m.discarded = true;
      m.final = true;
      ctx.openMessage = null;
      this.touch(m);
    }
    this.push(ctx, {
      kind: 'fallback', from: p.fromModel || '', to: p.toModel || '', reason: p.reason || '',
      error: p.error || '', discarded: !!p.discardedText,
    });
  }

  on_rateLimitWait(ctx, p) {
    this.push(ctx, {
      kind: 'wait', provider: p.provider || '', model: p.model || '',
      waitS: parseDuration(p.wait), ahead: num(p.ahead),
    });
  }

  on_historyCompacted(ctx, p) {
    this.push(ctx, {
      kind: 'compacted', mode: p.mode || '', folded: num(p.folded), kept: num(p.kept), summary: p.summary || '',
      reason: p.reason || '', tokensBefore: num(p.tokensBefore), tokensAfter: num(p.tokensAfter),
    });
  }

  on_budgetExhausted(ctx, p) {
    this.push(ctx, { kind: 'budget', budget: p.budget || '', message: p.message || '', action: p.action || 'fail' });
  }

  on_handoff(ctx, p, t) {
    this.push(ctx, { kind: 'handoff', from: p.fromAgent || '', to: p.toAgent || '' });
    ctx.agent = p.toAgent || ctx.agent;
    ctx.turnStart = t;
    this.head(ctx);
  }

  toolItem(ctx, callId, tool) {
    let item = ctx.tools.get(callId);
    if (!item) {
      item = this.push(ctx, {
        kind: 'tool', callId, tool, args: '', done: false, result: '', error: '',
        progress: null, options: null, durationS: NaN, policies: null, restarts: 0, span: null,
      });
      ctx.tools.set(callId, item);
    }
    return item;
  }

  on_toolCallStarted(ctx, p, t) {
    const known = ctx.tools.has(p.callId);
    const item = this.toolItem(ctx, p.callId, p.tool);
    if (known) {
      // Started again after a resume: the same call, done again.
      if (item.span && !Number.isFinite(item.span.end)) {
        item.span.end = t;
        item.span.state = 'superseded';
      }
      item.restarts++;
      item.done = false;
      item.result = '';
      item.error = '';
      item.progress = null;
    }
    item.tool = p.tool || item.tool;
    item.args = p.argumentsJson || '';
    item.span = { kind: 'tool', ctx, label: item.tool, start: t, end: NaN, state: 'running', detail: '' };
    this.spans.push(item.span);
    this.touch(item);
  }

  on_toolProgress(ctx, p) {
    const item = this.toolItem(ctx, p.callId, p.tool);
    item.progress = { percent: Math.max(0, Math.min(100, p.percent | 0)), message: p.message || '' };
    this.touch(item);
  }

  on_toolOptions(ctx, p) {
    const item = this.toolItem(ctx, p.callId, p.tool);
    item.options = { question: p.question || '', options: p.options || [] };
    this.touch(item);
  }

  on_toolCallCompleted(ctx, p, t) {
    const item = this.toolItem(ctx, p.callId, p.tool);
    item.done = true;
    item.result = p.result || '';
    item.error = p.error || '';
    item.durationS = parseDuration(p.duration);
    item.policies = p.policies || null;
    this.touched = item;
    if (item.span) {
      item.span.end = t;
      item.span.state = item.error ? 'error' : 'ok';
      if (item.error) item.span.detail = item.error;
    }
    if (!this.usageFinal) {
      this.usage.toolCalls++;
      this.summaryDirty = true;
    }
    ctx.turnStart = t;
    this.touch(item);
  }

  on_toolBatchCompleted(ctx, p, t) {
    ctx.turnStart = t;
  }

  on_approvalRequested(ctx, p, t) {
    let item = this.approvals.get(p.approvalId);
    if (!item) {
      item = this.push(ctx, {
        kind: 'approval', approvalId: p.approvalId, callId: p.callId, tool: p.tool,
        args: p.argumentsJson || '', resolved: null, closed: false, sending: false,
      });
      this.approvals.set(p.approvalId, item);
      item.span = { kind: 'wait', ctx, label: p.tool === 'raise_budget' ? 'raise a budget' : `approve ${p.tool}`, start: t, end: NaN, state: 'running', detail: '' };
      this.spans.push(item.span);
    }
    item.deadline = parseTime(p.deadline);
    if (!item.resolved) {
      item.closed = false;
      this.pending.set(`a:${p.approvalId}`, item);
    }
    this.touch(item);
  }

  on_approvalResolved(ctx, p, t) {
    const item = this.approvals.get(p.approvalId);
    const resolved = { approved: !!p.approved, reason: p.reason || '', source: p.source || '' };
    if (!item) {
      this.push(ctx, { kind: 'note', text: `approval ${p.approvalId} ${resolved.approved ? 'approved' : 'denied'}` });
      return;
    }
    item.resolved = resolved;
    this.touched = item;
    item.sending = false;
    item.span.end = t;
    item.span.state = resolved.approved ? 'ok' : 'error';
    this.pending.delete(`a:${p.approvalId}`);
    this.touch(item);
  }

  on_inputRequested(ctx, p, t) {
    let item = this.inputs.get(p.inputId);
    if (!item) {
      item = this.push(ctx, {
        kind: 'input', inputId: p.inputId, callId: p.callId, tool: p.tool,
        prompt: p.prompt || '', options: p.options || [], answer: null, closed: false, sending: false,
      });
      this.inputs.set(p.inputId, item);
      item.span = { kind: 'wait', ctx, label: `answer ${p.tool}`, start: t, end: NaN, state: 'running', detail: '' };
      this.spans.push(item.span);
    }
    item.deadline = parseTime(p.deadline);
    if (item.answer === null) {
      item.closed = false;
      this.pending.set(`i:${p.inputId}`, item);
    }
    this.touch(item);
  }

  on_inputReceived(ctx, p, t) {
    const item = this.inputs.get(p.inputId);
    if (!item) {
      this.push(ctx, { kind: 'note', text: `answered ${p.input}` });
      return;
    }
    item.answer = p.input || '';
    this.touched = item;
    item.sending = false;
    item.span.end = t;
    item.span.state = 'ok';
    this.pending.delete(`i:${p.inputId}`);
    this.touch(item);
  }

  on_inputTimedOut(ctx, p, t) {
    const item = this.inputs.get(p.inputId);
    if (!item) {
      this.push(ctx, { kind: 'note', text: `nobody answered ${p.inputId} in time` });
      return;
    }
    item.timedOut = true;
    item.closed = true;
    item.sending = false;
    item.span.end = t;
    item.span.state = 'error';
    item.span.detail = 'nobody answered in time';
    this.pending.delete(`i:${p.inputId}`);
    this.touch(item);
  }

  /** What the run waits for a person on now: 'approval' and/or 'input'. */
  waitingFor() {
    const kinds = new Set([...this.pending.keys()].map((k) => (k.startsWith('a:') ? 'approval' : 'input')));
    return ['approval', 'input'].filter((k) => kinds.has(k));
  }

  on_contextWritten(ctx, p) {
    this.push(ctx, { kind: 'write', key: p.key, version: num(p.version), sizeBytes: num(p.sizeBytes) });
    this.writes++;
    this.slotsDirty = true;
  }

  stepCtx(ctx, stepId) {
    const group = this.pipeline(ctx.parent ? ctx.parent.id : 'root');
    const step = this.stepOf(group, stepId, ctx.id);
    ctx.step = step;
    this.graphDirty = true;
    this.head(ctx);
    return step;
  }

  on_stepStarted(ctx, p, t, ev, seq) {
    const step = this.stepCtx(ctx, p.stepId);
    step.agent = p.agent || step.agent;
    step.attempt = p.attempt || step.attempt + 1;
    step.state = 'running';
    // The server says what the step waited for (StepStarted.dependsOn):
    // the graph's edges, whoever started the run.
    step.dependsOn = Array.isArray(p.dependsOn) ? p.dependsOn : [];
    if (!Number.isFinite(step.startMs)) {
      step.startMs = t;
      // What started it, for a graph without a spec: the step that
      // completed last before it.
      step.trigger = step.group.lastCompleted;
      step.startSeq = seq;
    }
    step.span = { kind: 'step', ctx, label: `${p.stepId} #${step.attempt}`, start: t, end: NaN, state: 'running', detail: p.agent };
    step.attempts.push(step.span);
    this.spans.push(step.span);
    ctx.status = 'running';
    this.push(ctx, { kind: 'step', text: `step ${p.stepId}: attempt ${step.attempt} started on ${p.agent}`, cls: '' });
  }

  on_stepCompleted(ctx, p, t) {
    const step = this.stepCtx(ctx, p.stepId);
    step.state = 'completed';
    step.output = p.output || '';
    step.durationS = parseDuration(p.duration);
    step.endMs = t;
    if (step.span) {
      step.span.end = t;
      step.span.state = 'ok';
    }
    step.group.lastCompleted = step;
    step.group.lastSettled = step;
    ctx.status = 'completed';
    ctx.endMs = t;
    this.touched = this.push(ctx, { kind: 'step', stepId: p.stepId, text: `step ${p.stepId} completed (attempt ${p.attempt})`, cls: 'ok', output: step.output });
  }

  on_stepFailed(ctx, p, t) {
    const step = this.stepCtx(ctx, p.stepId);
    step.error = p.error || '';
    step.state = p.willRetry ? 'retrying' : 'failed';
    if (step.span) {
      step.span.end = t;
      step.span.state = 'error';
      step.span.detail = step.error;
    }
    if (!p.willRetry) {
      step.endMs = t;
      step.group.lastSettled = step;
      ctx.status = 'failed';
      ctx.endMs = t;
    }
    this.touched = this.push(ctx, {
      kind: 'step', stepId: p.stepId, cls: 'error', output: '',
      text: `step ${p.stepId} attempt ${p.attempt} failed: ${step.error}${p.willRetry ? ' (retrying)' : ''}`,
    });
  }

  on_stepSkipped(ctx, p, t) {
    const step = this.stepCtx(ctx, p.stepId);
    step.state = 'skipped';
    step.reason = p.reason || '';
    if (!step.trigger) step.trigger = step.group.lastSettled;
    step.endMs = t;
    step.group.lastSettled = step;
    ctx.status = 'skipped';
    this.push(ctx, { kind: 'step', cls: 'muted', text: `step ${p.stepId} skipped: ${step.reason}` });
  }

  on_pipelineCompleted(ctx, p) {
    const list = (a) => (a && a.length ? a.join(', ') : '—');
    this.push(ctx, {
      kind: 'step', cls: p.success ? 'ok' : 'error',
      text: `pipeline ${p.success ? 'succeeded' : 'failed'}: succeeded ${list(p.succeeded)} · failed ${list(p.failed)} · skipped ${list(p.skipped)}`,
    });
    this.graphDirty = true;
  }

  on_runResumed(ctx, p, t) {
    this.resumes++;
    // Text that was streaming is superseded by what the new owner sends.
    for (const c of this.contexts.values()) {
      const m = c.openMessage;
      if (m) {
        m.superseded = true;
        m.final = true;
        c.openMessage = null;
        this.touch(m);
      }
      if (c.status === 'running') c.turnStart = t;
    }
    this.push(ctx, { kind: 'resumed', replica: p.replica || '', checkpointSeq: num(p.checkpointSeq) });
    this.summaryDirty = true;
  }

  end(ctx, t, status, item) {
    this.terminal = true;
    this.status = status;
    if (Number.isFinite(t)) this.endedAt = t;
    this.push(ctx, item);
    const word = status === 'RUN_STATUS_COMPLETED' ? 'completed' : 'ended';
    for (const c of this.contexts.values()) {
      if (c.status === 'running') {
        c.status = word;
        c.endMs = c.lastMs;
        this.head(c);
      }
      if (c.openMessage) {
        c.openMessage.final = true;
        this.touch(c.openMessage);
        c.openMessage = null;
      }
    }
    for (const item of this.pending.values()) {
      item.closed = true;
      this.touch(item);
    }
    this.pending.clear();
    for (const g of this.pipelines.values()) {
      for (const s of g.steps.values()) if (s.state === 'running' || s.state === 'retrying') s.state = 'cancelled';
    }
    this.graphDirty = true;
    this.summaryDirty = true;
  }

  finalUsage(u) {
    if (!u) return;
    this.usage = {
      inputTokens: num(u.inputTokens), outputTokens: num(u.outputTokens),
      modelCalls: num(u.modelCalls), toolCalls: num(u.toolCalls),
      costNanos: num(u.costNanos), currency: u.currency || '', unpricedModelCalls: num(u.unpricedModelCalls),
    };
    this.usageFinal = true;
  }

  on_runCompleted(ctx, p, t) {
    this.replayEnded(p);
    this.output = p.output || '';
    this.runContextJson = p.runContextJson || '';
    this.finalUsage(p.usage);
    this.end(ctx, t, 'RUN_STATUS_COMPLETED', {
      kind: 'end', outcome: 'completed', output: this.output, shown: this.output === ctx.lastText,
    });
  }

  on_runFailed(ctx, p, t) {
    this.replayEnded(p);
    this.error = { code: p.code || 0, message: p.message || '' };
    this.finalUsage(p.usage);
    this.end(ctx, t, 'RUN_STATUS_FAILED', { kind: 'end', outcome: 'failed', code: p.code || 0, message: p.message || '' });
  }

  on_runCancelled(ctx, p, t) {
    this.replayEnded(p);
    this.cancelReason = p.reason || '';
    this.finalUsage(p.usage);
    this.end(ctx, t, 'RUN_STATUS_CANCELLED', { kind: 'end', outcome: 'cancelled', reason: this.cancelReason });
  }

  /** The time "now" in the run's clock: its last event, moved on by the wall clock while it runs. */
  now() {
    if (this.terminal || (this.status && this.status !== 'RUN_STATUS_RUNNING')) {
      return Number.isFinite(this.endedAt) ? this.endedAt : this.lastMs;
    }
    if (!Number.isFinite(this.lastMs)) return Date.now();
    return this.lastMs + Math.max(0, Date.now() - this.lastWall);
  }
}
