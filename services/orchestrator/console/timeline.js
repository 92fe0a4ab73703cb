// Where the time of a run went: one row per context (its whole life), and
// under it its model turns, tool calls, waits for people and pipeline
// step attempts as horizontal bars by start and end time, packed into as
// few lanes as overlap allows. At most MAX_BARS bars are drawn: every
// context first, then the longest of the rest.

import { clear, fmtDuration, h } from './util.js';

const MAX_BARS = 1200;
const MAX_CONTEXT_BARS = 400;
const KINDS = [
  ['context', 'context'],
  ['model', 'model turn'],
  ['tool', 'tool call'],
  ['wait', 'waiting for a person'],
  ['step', 'pipeline step attempt'],
];

export class TimelineView {
  constructor(model, container) {
    this.model = model;
    this.container = container;
    this.last = 0;
  }

  /** Redraws when the run changed (at most once a second while it runs, unless `force`). */
  flush(force) {
    const m = this.model;
    const live = !m.terminal;
    if (!m.timelineDirty && !(live && force)) return;
    const now = Date.now();
    if (!force && live && now - this.last < 1000) return;
    this.last = now;
    m.timelineDirty = false;
    this.draw();
  }

  draw() {
    const m = this.model;
    const c = this.container;
    clear(c);
    const t0 = Number.isFinite(m.firstMs) ? m.firstMs : m.startedAt;
    const end = m.now();
    if (!Number.isFinite(t0) || !Number.isFinite(end)) {
      c.append(h('p', { class: 'muted', text: 'No events yet.' }));
      return;
    }
    const span = Math.max(1, end - t0);
    const close = (x) => (Number.isFinite(x) ? x : end);

    // The bars to draw.
    const ctxs = [];
    const walk = (ctx) => {
      if (ctxs.length >= MAX_CONTEXT_BARS) return;
      if (Number.isFinite(ctx.startMs)) ctxs.push(ctx);
      for (const k of ctx.children) walk(k);
    };
    walk(m.root);
    const room = MAX_BARS - ctxs.length;
    let spans = m.spans;
    let hidden = 0;
    if (spans.length > room) {
      spans = spans.slice().sort((a, b) => (close(b.end) - b.start) - (close(a.end) - a.start)).slice(0, room);
      hidden = m.spans.length - room;
    }
    const byCtx = new Map();
    const totals = { model: 0, tool: 0, wait: 0, step: 0 };
    for (const s of m.spans) totals[s.kind] += Math.max(0, close(s.end) - s.start);
    for (const s of spans) {
      if (!Number.isFinite(s.start)) continue;
      let list = byCtx.get(s.ctx);
      if (!list) byCtx.set(s.ctx, (list = []));
      list.push(s);
    }

    const summary = [`${fmtDuration(span)} in all`];
    if (totals.model) summary.push(`model turns ${fmtDuration(totals.model)}`);
    if (totals.tool) summary.push(`tool calls ${fmtDuration(totals.tool)}`);
    if (totals.wait) summary.push(`waiting for people ${fmtDuration(totals.wait)}`);
    if (totals.step) summary.push(`step attempts ${fmtDuration(totals.step)}`);
    c.append(h('p', { class: 'tl-summary', 'data-testid': 'timeline-summary' },
      summary.join(' · '), h('span', { class: 'muted', text: ' (summed; concurrent work overlaps)' })));
    c.append(h('ul', { class: 'legend', 'aria-label': 'Legend' },
      ...KINDS.map(([k, label]) => h('li', null, h('span', { class: `swatch tl-${k}`, 'aria-hidden': 'true' }), label))));
    if (hidden > 0) {
      c.append(h('p', { class: 'muted', 'data-testid': 'timeline-capped', text: `${hidden.toLocaleString()} shorter bars not drawn (at most ${MAX_BARS}).` }));
    }

    const pct = (x) => `${(((x - t0) / span) * 100).toFixed(3)}%`;
    const width = (a, b) => `${((Math.max(0, b - a) / span) * 100).toFixed(3)}%`;
    const grid = h('div', { class: 'tl', role: 'list', 'data-testid': 'timeline' });
    grid.append(axis(span));
    const frag = document.createDocumentFragment();
    for (const ctx of ctxs) {
      const label = `${ctx.agent || (ctx.step ? `step ${ctx.step.id}` : ctx.depth === 0 ? m.target : '')}`;
      const cEnd = Number.isFinite(ctx.endMs) ? ctx.endMs : m.terminal ? close(ctx.lastMs) : end;
      frag.append(row(
        h('span', { class: 'tl-label', style: { paddingLeft: `${Math.min(ctx.depth, 8) * 0.6}rem` }, title: ctx.id },
          h('code', { text: ctx.id }), label ? ` ${label}` : ''),
        [bar('context', ctx.status, pct(ctx.startMs), width(ctx.startMs, cEnd),
          `${ctx.id}${label ? ` (${label})` : ''}: ${fmtDuration(cEnd - ctx.startMs)}, ${ctx.status}`)]));
      const list = byCtx.get(ctx);
      if (!list) continue;
      list.sort((a, b) => a.start - b.start);
      const lanes = [];
      for (const s of list) {
        const e = close(s.end);
        let lane = lanes.findIndex((l) => l.end <= s.start);
        if (lane < 0) {
          lane = lanes.length;
          lanes.push({ end: e, bars: [] });
        }
        lanes[lane].end = e;
        lanes[lane].bars.push(bar(s.kind, s.state, pct(s.start), width(s.start, e),
          `${s.label}: ${fmtDuration(e - s.start)}${Number.isFinite(s.end) ? '' : ' (still going)'}${s.detail ? ` — ${s.detail}` : ''}`));
      }
      for (const l of lanes) frag.append(row(h('span', { class: 'tl-label sub', 'aria-hidden': 'true' }), l.bars));
    }
    grid.append(frag);
    c.append(h('div', { class: 'tl-scroll' }, grid));
  }
}

function row(label, bars) {
  return h('div', { class: 'tl-row', role: 'listitem' }, label, h('div', { class: 'tl-track' }, ...bars));
}

function bar(kind, state, left, width, title) {
  return h('div', {
    class: `tl-bar tl-${kind} st-${state}`, 'data-testid': 'timeline-bar', 'data-kind': kind,
    style: { left, width }, title, 'aria-label': title, role: 'img',
  });
}

/** Tick marks at a round interval, about six across. */
function axis(span) {
  const steps = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1e3, 2e3, 5e3, 1e4, 15e3, 3e4, 6e4, 12e4, 3e5, 6e5, 9e5, 18e5, 36e5, 72e5, 144e5];
  const step = steps.find((s) => span / s <= 7) || steps[steps.length - 1];
  const track = h('div', { class: 'tl-track tl-axis' });
  for (let t = 0; t <= span; t += step) {
    // A label near the right end is drawn to the left of its mark, so the
    // track does not clip it.
    const at = (t / span) * 100;
    track.append(h('span', { class: at > 85 ? 'tick end' : 'tick', 'data-testid': 'timeline-tick', style: { left: `${at}%` }, text: t === 0 ? '0' : fmtDuration(t) }));
  }
  return h('div', { class: 'tl-row axis', 'aria-hidden': 'true' }, h('span', { class: 'tl-label' }), track);
}
