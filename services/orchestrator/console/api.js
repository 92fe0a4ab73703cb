// The orchestrator's HTTP/JSON API, same origin. Every request carries
// `Authorization: Bearer <key>` when a key was typed; the key lives in
// sessionStorage (this tab only). Errors come back as `{code, message,
// field}` and are thrown as ApiError. Event streams are read with fetch()
// (EventSource cannot send the header) and parsed here.

const KEY = 'baton.apiKey';

/** The API key of this tab, or ''. */
export function getKey() {
  try {
    return sessionStorage.getItem(KEY) || '';
  } catch {
    return '';
  }
}

/** Keeps `key` for this tab ('' forgets it). */
export function setKey(key) {
  try {
    if (key) sessionStorage.setItem(KEY, key);
    else sessionStorage.removeItem(KEY);
  } catch {
    /* storage disabled: the key lasts until reload */
  }
}

/** An error answer of the API (or a network failure: status 0). */
export class ApiError extends Error {
  constructor(status, code, message, field) {
    super(message || code || `HTTP ${status}`);
    this.status = status;
    this.code = code || (status ? `HTTP_${status}` : 'NETWORK');
    this.field = field || '';
  }

  /** `NOT_FOUND: run 123 … (field run_id)`. */
  describe() {
    const field = this.field ? ` (field ${this.field})` : '';
    return `${this.code}: ${this.message}${field}`;
  }
}

function headers(extra) {
  const h = { ...extra };
  const key = getKey();
  if (key) h.Authorization = `Bearer ${key}`;
  return h;
}

/** The ApiError an unsuccessful response stands for. */
async function errorOf(res) {
  let text = '';
  try {
    text = await res.text();
  } catch {
    /* no body */
  }
  try {
    const j = JSON.parse(text);
    if (j && (j.code || j.message)) return new ApiError(res.status, String(j.code || ''), j.message, j.field);
  } catch {
    /* not JSON */
  }
  return new ApiError(res.status, '', text.trim().slice(0, 300) || res.statusText, '');
}

async function request(method, path, body, signal) {
  const init = {
    method,
    headers: headers({ Accept: 'application/json' }),
    signal,
    cache: 'no-store',
  };
  if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let res;
  try {
    res = await fetch(path, init);
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    throw new ApiError(0, 'NETWORK', `cannot reach the orchestrator: ${e.message}`);
  }
  if (!res.ok) throw await errorOf(res);
  const text = await res.text();
  if (!text) return {};
  try {
    return JSON.parse(text);
  } catch {
    throw new ApiError(res.status, 'BAD_RESPONSE', `not JSON: ${text.slice(0, 200)}`);
  }
}

const enc = encodeURIComponent;

/** Every call of the API the console makes. */
export const api = {
  agents: (signal) => request('GET', '/v1/agents', undefined, signal),
  config: (signal) => request('GET', '/v1/console/config', undefined, signal),
  listRuns({ status, waiting = false, pageSize = 50, pageToken } = {}, signal) {
    const q = new URLSearchParams();
    if (status) q.set('status', status);
    if (waiting) q.set('waiting', 'true');
    q.set('pageSize', String(pageSize));
    if (pageToken) q.set('pageToken', pageToken);
    return request('GET', `/v1/runs?${q}`, undefined, signal);
  },
  getRun: (runId, signal) => request('GET', `/v1/runs/${enc(runId)}`, undefined, signal),
  /** A page of the tenant's conversations, most recently used first (without their messages). */
  listConversations({ pageSize = 50, pageToken } = {}, signal) {
    const q = new URLSearchParams();
    q.set('pageSize', String(pageSize));
    if (pageToken) q.set('pageToken', pageToken);
    return request('GET', `/v1/conversations?${q}`, undefined, signal);
  },
  /** A conversation with a page of its messages (`last`: the newest that many) and its runs. */
  getConversation(id, { pageSize, pageToken, last } = {}, signal) {
    const q = new URLSearchParams();
    if (pageSize) q.set('pageSize', String(pageSize));
    if (pageToken) q.set('pageToken', pageToken);
    if (last) q.set('last', String(last));
    const qs = q.toString();
    return request('GET', `/v1/conversations/${enc(id)}${qs ? `?${qs}` : ''}`, undefined, signal);
  },
  /** Sets a conversation's `title` and/or `labels`. */
  updateConversation: (id, body) => request('PATCH', `/v1/conversations/${enc(id)}`, body),
  /** Deletes a conversation (its messages and its runs' histories): `{runsDeleted}`. */
  deleteConversation: (id) => request('DELETE', `/v1/conversations/${enc(id)}`),
  /** Starts a detached agent run: `{runId, traceId}` (with `conversationId`
   * or `newConversation`, a message of a conversation). */
  startRun: (body) => request('POST', '/v1/runs', body),
  /** Starts a detached pipeline run: `{runId, traceId}`. */
  startPipeline: (body) => request('POST', '/v1/pipelines:run', body),
  /** Replays an ended run against today's agents, detached (`strict`:
   * fail at the first difference): `{runId, traceId}` of the replay. */
  replay: (runId, strict) => request('POST', `/v1/runs/${enc(runId)}:replay`, { strict: !!strict }),
  /** Forks a run at `atSeq` with an optional `edit` (ForkEdit), detached:
   * `{runId, traceId}` of the fork. */
  fork: (runId, atSeq, edit) =>
    request('POST', `/v1/runs/${enc(runId)}:fork`, edit ? { atSeq: String(atSeq), edit } : { atSeq: String(atSeq) }),
  cancel: (runId, reason) => request('POST', `/v1/runs/${enc(runId)}:cancel`, { reason }),
  resolveApproval: (runId, approvalId, approved, reason) =>
    request('POST', `/v1/runs/${enc(runId)}/approvals/${enc(approvalId)}`, { approved, reason }),
  submitInput: (runId, inputId, text) =>
    request('POST', `/v1/runs/${enc(runId)}/inputs/${enc(inputId)}`, { text }),
  /** A page of the tenant's experiments, newest first (without their cases). */
  listExperiments({ pageSize = 50, pageToken } = {}, signal) {
    const q = new URLSearchParams();
    q.set('pageSize', String(pageSize));
    if (pageToken) q.set('pageToken', pageToken);
    return request('GET', `/v1/experiments?${q}`, undefined, signal);
  },
  /** An experiment (by id or name) with its cases. */
  getExperiment: (id, signal) => request('GET', `/v1/experiments/${enc(id)}`, undefined, signal),
  /** Stops a running experiment; its record once cancelled. */
  cancelExperiment: (id) => request('POST', `/v1/experiments/${enc(id)}:cancel`),
  /** Two experiments compared, regressions first. */
  compareExperiments: (baseline, candidate, signal) =>
    request('GET', `/v1/experiments/${enc(baseline)}:compare?candidate=${enc(candidate)}`, undefined, signal),
  /** A dataset case made of an ended run: `{caseJson}`. */
  saveCase: (runId, inlineRecording) => request('POST', `/v1/runs/${enc(runId)}:saveCase`, { inlineRecording: !!inlineRecording }),
  /** The tenant's schedules, the agents file's first, then oldest first;
   * each with its next fire times and recent ticks (the latest's run status). */
  listSchedules: (signal) => request('GET', '/v1/schedules', undefined, signal),
  /** A schedule with its next fire times and recent ticks (each run's status). */
  getSchedule: (id, signal) => request('GET', `/v1/schedules/${enc(id)}`, undefined, signal),
  /** Stops a schedule firing; the schedule as it now is. */
  pauseSchedule: (id) => request('POST', `/v1/schedules/${enc(id)}:pause`),
  /** Fires a paused schedule again from its next tick; the schedule as it now is. */
  resumeSchedule: (id) => request('POST', `/v1/schedules/${enc(id)}:resume`),
  /** Deletes a schedule (the runs it started go on). */
  deleteSchedule: (id) => request('DELETE', `/v1/schedules/${enc(id)}`),
  slots: (traceId, signal) => request('GET', `/v1/traces/${enc(traceId)}/slots`, undefined, signal),
  eventsPath: (runId, afterSeq) => `/v1/runs/${enc(runId)}/events?after_seq=${afterSeq}`,
  slotsWatchPath: (traceId) => `/v1/traces/${enc(traceId)}/slots:watch`,
};

/**
 * Reads the server-sent events at `path` until the stream ends, calling
 * `onFrames([{id, event, data}])` once per chunk read (so a burst is handled
 * in one go); `onOpen()` once the server answered with the stream. Comment lines (`: keep-alive`) only count as activity. With
 * `idleMs`, a stream silent that long is aborted (an ApiError 'IDLE').
 * Rejects with ApiError when the answer is not a stream.
 */
export async function streamSSE(path, onFrames, { signal, idleMs, onOpen } = {}) {
  const ctrl = new AbortController();
  const onAbort = () => ctrl.abort();
  signal?.addEventListener('abort', onAbort, { once: true });
  let idle = false;
  let timer = 0;
  const arm = () => {
    if (!idleMs) return;
    clearTimeout(timer);
    timer = setTimeout(() => {
      idle = true;
      ctrl.abort();
    }, idleMs);
  };
  try {
    let res;
    try {
      arm();
      res = await fetch(path, {
        headers: headers({ Accept: 'text/event-stream' }),
        signal: ctrl.signal,
        cache: 'no-store',
      });
    } catch (e) {
      if (idle) throw new ApiError(0, 'IDLE', 'the stream stayed silent');
      if (e.name === 'AbortError') throw e;
      throw new ApiError(0, 'NETWORK', `cannot reach the orchestrator: ${e.message}`);
    }
    if (!res.ok) throw await errorOf(res);
    onOpen?.();
    const reader = res.body.getReader();
    const dec = new TextDecoder();
    let buf = '';
    let frame = { id: null, event: null, data: null };
    for (;;) {
      arm();
      let chunk;
      try {
        chunk = await reader.read();
      } catch (e) {
        if (idle) throw new ApiError(0, 'IDLE', 'the stream stayed silent');
        if (e.name === 'AbortError') throw e;
        throw new ApiError(0, 'NETWORK', `the stream broke: ${e.message}`);
      }
      if (chunk.done) break;
      buf += dec.decode(chunk.value, { stream: true });
      const frames = [];
      let pos = 0;
      for (;;) {
        const nl = buf.indexOf('\n', pos);
        if (nl < 0) break;
        let line = buf.slice(pos, nl);
        pos = nl + 1;
        if (line.endsWith('\r')) line = line.slice(0, -1);
        if (line === '') {
          if (frame.data !== null) frames.push(frame);
          frame = { id: null, event: null, data: null };
          continue;
        }
        if (line.charCodeAt(0) === 58 /* ':' */) continue;
        const c = line.indexOf(':');
        const field = c < 0 ? line : line.slice(0, c);
        let value = c < 0 ? '' : line.slice(c + 1);
        if (value.charCodeAt(0) === 32) value = value.slice(1);
        if (field === 'data') frame.data = frame.data === null ? value : `${frame.data}\n${value}`;
        else if (field === 'id') frame.id = value;
        else if (field === 'event') frame.event = value;
      }
      buf = pos ? buf.slice(pos) : buf;
      if (frames.length) onFrames(frames);
    }
  } finally {
    clearTimeout(timer);
    signal?.removeEventListener('abort', onAbort);
    ctrl.abort();
  }
}
