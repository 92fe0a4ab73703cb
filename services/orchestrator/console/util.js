// Small helpers shared by every module: building elements, formatting
// times, durations, numbers, statuses and gRPC codes.

/**
 * Builds an element. `attrs`: `class`, `text`, `data` (dataset), `on`
 * (listeners), `style` (object); any other key is set as an attribute
 * (`true` as an empty attribute, `false`/`null`/`undefined` skipped).
 * Children are nodes or strings (as text, never parsed as HTML).
 */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  if (attrs) {
    for (const k in attrs) {
      const v = attrs[k];
      if (v === undefined || v === null || v === false) continue;
      if (k === 'class') el.className = v;
      else if (k === 'text') el.textContent = v;
      else if (k === 'data') for (const d in v) el.dataset[d] = v[d];
      else if (k === 'on') for (const ev in v) el.addEventListener(ev, v[ev]);
      else if (k === 'style') Object.assign(el.style, v);
      else if (v === true) el.setAttribute(k, '');
      else el.setAttribute(k, String(v));
    }
  }
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

/** Appends the children that are not null, undefined or false. */
export function add(el, ...children) {
  for (const c of children) if (c !== null && c !== undefined && c !== false) el.append(c);
  return el;
}

/** Removes every child of `el`. */
export function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
  return el;
}

/** google.rpc.Code names, by number. */
const CODES = [
  'OK', 'CANCELLED', 'UNKNOWN', 'INVALID_ARGUMENT', 'DEADLINE_EXCEEDED',
  'NOT_FOUND', 'ALREADY_EXISTS', 'PERMISSION_DENIED', 'RESOURCE_EXHAUSTED',
  'FAILED_PRECONDITION', 'ABORTED', 'OUT_OF_RANGE', 'UNIMPLEMENTED',
  'INTERNAL', 'UNAVAILABLE', 'DATA_LOSS', 'UNAUTHENTICATED',
];

/** The name of a gRPC status code number (14 → UNAVAILABLE). */
export function codeName(code) {
  const n = Number(code);
  return CODES[n] || (Number.isFinite(n) ? `CODE_${n}` : String(code));
}

/** `RUN_STATUS_RUNNING` → `running`; anything else lowercased. */
export function statusWord(status) {
  if (!status) return 'unknown';
  return String(status).replace(/^RUN_STATUS_/, '').toLowerCase();
}

/** `RUN_KIND_PIPELINE` → `pipeline`. */
export function kindWord(kind) {
  if (!kind) return '';
  return String(kind).replace(/^RUN_KIND_/, '').toLowerCase();
}

/** An RFC 3339 time to milliseconds since the epoch (NaN when absent). */
export function parseTime(s) {
  if (!s) return NaN;
  // Some engines reject more than 3 fractional digits.
  const i = s.indexOf('.');
  if (i > 0) {
    let j = i + 1;
    while (j < s.length && s.charCodeAt(j) >= 48 && s.charCodeAt(j) <= 57) j++;
    if (j - i > 4) s = s.slice(0, i + 4) + s.slice(j);
  }
  return Date.parse(s);
}

/** A proto3 JSON Duration (`"1.500s"`) to seconds. */
export function parseDuration(s) {
  if (s === undefined || s === null || s === '') return NaN;
  if (typeof s === 'number') return s;
  return parseFloat(String(s).replace(/s$/, ''));
}

/** A number from a proto3 JSON (u)int64 string or number; 0 when absent. */
export function num(v) {
  if (v === undefined || v === null || v === '') return 0;
  const n = Number(v);
  return Number.isFinite(n) ? n : 0;
}

/** Milliseconds as a short duration: `850 ms`, `12.3 s`, `4 m 05 s`, `2 h 03 m`. */
export function fmtDuration(ms) {
  if (!Number.isFinite(ms) || ms < 0) return '—';
  if (ms < 1000) return `${Math.round(ms)} ms`;
  const s = ms / 1000;
  if (s < 60) return `${s < 10 ? s.toFixed(2) : s.toFixed(1)} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} m ${String(Math.floor(s % 60)).padStart(2, '0')} s`;
  const hr = Math.floor(m / 60);
  return `${hr} h ${String(m % 60).padStart(2, '0')} m`;
}

const pad2 = (n) => String(n).padStart(2, '0');

/** A local time of day, `HH:MM:SS`, with the date before it when not
 * today, `YYYY-MM-DD HH:MM:SS` (ISO order, whatever the browser's locale). */
export function fmtTime(ms, now = Date.now()) {
  if (!Number.isFinite(ms)) return '—';
  const d = new Date(ms);
  const time = `${pad2(d.getHours())}:${pad2(d.getMinutes())}:${pad2(d.getSeconds())}`;
  if (d.toDateString() === new Date(now).toDateString()) return time;
  return `${d.getFullYear()}-${pad2(d.getMonth() + 1)}-${pad2(d.getDate())} ${time}`;
}

/** How long ago, roughly: `5 s ago`, `3 m ago`, `2 h ago`, `4 d ago`. */
export function fmtAgo(ms, now = Date.now()) {
  if (!Number.isFinite(ms)) return '—';
  const s = Math.max(0, (now - ms) / 1000);
  if (s < 60) return `${Math.floor(s)} s ago`;
  if (s < 3600) return `${Math.floor(s / 60)} m ago`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
  return `${Math.floor(s / 86400)} d ago`;
}

/** How long until, roughly: `in 8 s`, `in 3 m 05 s`, `in 2 h 03 m`, `in 4 d`; `due now` once past. */
export function fmtIn(ms, now = Date.now()) {
  if (!Number.isFinite(ms)) return '—';
  const s = Math.ceil((ms - now) / 1000);
  if (s <= 0) return 'due now';
  if (s < 60) return `in ${s} s`;
  if (s < 3600) return `in ${Math.floor(s / 60)} m ${pad2(s % 60)} s`;
  if (s < 86400) return `in ${Math.floor(s / 3600)} h ${pad2(Math.floor(s / 60) % 60)} m`;
  return `in ${Math.floor(s / 86400)} d`;
}

const intFmt = new Intl.NumberFormat();
/** An integer with grouping: `12,345`. */
export function fmtInt(n) {
  return intFmt.format(n || 0);
}

/** Bytes as `512 B`, `1.5 KiB`, `3.2 MiB`. */
export function fmtBytes(n) {
  n = num(n);
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
  return `${(n / 1024 / 1024).toFixed(1)} MiB`;
}

/** Whitespace collapsed and cut to `max` characters. */
/**
 * A run id shortened to the part that tells runs apart: its random tail
 * (a UUIDv7 starts with its time, alike for every run of a minute), as the
 * CLI shows it and `baton runs get` takes it.
 */
export function shortId(id) {
  const s = String(id);
  return s.length > 12 ? `…${s.slice(-8)}` : s;
}

export function short(text, max = 160) {
  const flat = String(text || '').replace(/\s+/g, ' ').trim();
  return flat.length > max ? `${flat.slice(0, max - 1)}…` : flat;
}

/** JSON text pretty-printed when it parses, else as it is. */
export function pretty(text) {
  if (!text) return '';
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return String(text);
  }
}

/** Total tokens of a Usage message (0 when absent). */
export function tokens(usage) {
  if (!usage) return 0;
  return num(usage.inputTokens) + num(usage.outputTokens);
}

/**
 * A cost in billionths (`costNanos`) with its currency: `0.0091 USD`
 * (6 decimals below 0.0001, 2 from 100 up), or '' when no call was priced
 * (a model without a price shows tokens only).
 */
export function fmtCost(u) {
  if (!u || !u.currency) return '';
  const v = num(u.costNanos) / 1e9;
  const digits = v >= 100 ? 2 : v >= 0.0001 || v === 0 ? 4 : 6;
  return `${v.toFixed(digits)} ${u.currency}`;
}

/** `in 120 · out 30 tokens · 2 model calls · 1 tool call · 0.0091 USD · 1 call unpriced`, or ''. */
export function fmtUsage(u) {
  if (!u) return '';
  const parts = [];
  const i = num(u.inputTokens);
  const o = num(u.outputTokens);
  if (i || o) parts.push(`in ${fmtInt(i)} · out ${fmtInt(o)} tokens`);
  const m = num(u.modelCalls);
  if (m) parts.push(`${fmtInt(m)} model call${m === 1 ? '' : 's'}`);
  const t = num(u.toolCalls);
  if (t) parts.push(`${fmtInt(t)} tool call${t === 1 ? '' : 's'}`);
  const cost = fmtCost(u);
  if (cost) parts.push(cost);
  const unpriced = num(u.unpricedModelCalls);
  if (cost && unpriced) parts.push(`${fmtInt(unpriced)} call${unpriced === 1 ? '' : 's'} unpriced`);
  return parts.join(' · ');
}

/** Resolves after `ms`, or at once when `signal` aborts. */
export function sleep(ms, signal) {
  return new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    signal?.addEventListener('abort', () => {
      clearTimeout(t);
      resolve();
    }, { once: true });
  });
}

/** Calls `fn` at most once per animation frame however often it is asked. */
export function frameScheduler(fn) {
  let queued = false;
  return () => {
    if (queued) return;
    queued = true;
    requestAnimationFrame(() => {
      queued = false;
      fn();
    });
  };
}
