// The steps of a run's pipelines as a graph: boxes in columns by dependency
// depth, edges behind them in SVG, live states from the Step* events.
// With the pipeline's spec (known when this console started the run) the
// edges are its dependencies (depends_on, and data flow: input_from and
// {{key}} reading a slot another step writes; list order in sequential
// mode); without it each step hangs off the step that completed last
// before it started (drawn dashed), which is what started a DAG step.

import { clear, fmtDuration, h, short } from './util.js';

/** The steps table's columns. */
const COLUMNS = ['Step', 'Agent', 'State', 'Attempts', 'Duration', 'Detail'];

const W = 210;
const H = 68;
const GX = 56;
const GY = 16;
const SVG = 'http://www.w3.org/2000/svg';

export class GraphView {
  /** `onSelect(step)`: a step's box was chosen. */
  constructor(model, container, onSelect) {
    this.model = model;
    this.container = container;
    this.onSelect = onSelect;
    this.groups = new Map();
  }

  flush() {
    if (!this.model.graphDirty) return;
    this.model.graphDirty = false;
    if (!this.model.pipelines.size) {
      if (!this.empty) {
        this.empty = h('p', { class: 'muted', text: 'This run has no pipeline steps.' });
        this.container.append(this.empty);
      }
      return;
    }
    this.empty?.remove();
    this.empty = null;
    for (const group of this.model.pipelines.values()) this.drawGroup(group);
  }

  drawGroup(group) {
    let g = this.groups.get(group.id);
    if (!g) {
      g = {
        note: h('p', { class: 'muted graph-note' }),
        canvas: h('div', { class: 'graph-canvas' }),
        svg: document.createElementNS(SVG, 'svg'),
        table: h('tbody'),
        boxes: new Map(),
        rows: new Map(),
      };
      g.svg.setAttribute('class', 'edges');
      g.svg.setAttribute('aria-hidden', 'true');
      g.canvas.append(g.svg);
      const title = group.id === 'root' ? 'Pipeline' : `Pipeline under ${group.id}`;
      this.container.append(h('section', { class: 'graph', 'data-testid': 'pipeline-graph', 'data-pipeline': group.id },
        h('h3', { text: title }), g.note,
        g.scroll = h('div', { class: 'graph-scroll' }, g.canvas),
        g.hint = h('p', { class: 'muted small graph-hint', 'data-testid': 'graph-hint', hidden: true,
          text: 'The graph is wider than the page: scroll it sideways for the other steps →' }),
        h('table', { class: 'steps-table' },
          h('caption', { class: 'sr-only', text: `${title}: steps` }),
          h('thead', null, h('tr', null, ...COLUMNS.map((t) => h('th', { scope: 'col', text: t })))),
          g.table)));
      this.groups.set(group.id, g);
    }
    const { cols, edges, inferred } = layout(group);
    const spec = group.spec;
    g.note.textContent = spec
      ? `${String(spec.mode || 'PIPELINE_MODE_SEQUENTIAL').replace(/^PIPELINE_MODE_/, '').toLowerCase()} mode: columns by dependency depth.`
      : group.order.some((s) => Array.isArray(s.dependsOn))
      ? 'Columns by dependency depth, from the steps the events say each waited for.'
      : 'Columns inferred from the order the steps ran (this browser did not start the run, so it does not know the spec): each step follows the step that completed last before it started.';

    const pos = new Map();
    let maxRow = 0;
    cols.forEach((steps, c) => {
      steps.forEach((s, r) => {
        pos.set(s, { x: c * (W + GX), y: r * (H + GY) });
        maxRow = Math.max(maxRow, r);
      });
    });
    const width = Math.max(1, cols.length) * (W + GX) - GX;
    const height = (maxRow + 1) * (H + GY) - GY;
    g.canvas.style.width = `${width}px`;
    g.canvas.style.height = `${height}px`;
    // Steps past the right edge are said to be there.
    g.width = width;
    if (!g.wider) {
      g.wider = () => { g.hint.hidden = !(g.scroll.clientWidth && g.width > g.scroll.clientWidth + 1); };
      window.addEventListener('resize', g.wider);
    }
    requestAnimationFrame(g.wider);
    g.svg.setAttribute('width', String(width));
    g.svg.setAttribute('height', String(height));
    g.svg.setAttribute('viewBox', `0 0 ${width} ${height}`);
    while (g.svg.firstChild) g.svg.firstChild.remove();
    for (const [a, b] of edges) {
      const pa = pos.get(a);
      const pb = pos.get(b);
      if (!pa || !pb) continue;
      const x1 = pa.x + W;
      const y1 = pa.y + H / 2;
      const x2 = pb.x;
      const y2 = pb.y + H / 2;
      const mx = (x1 + x2) / 2;
      const path = document.createElementNS(SVG, 'path');
      path.setAttribute('d', `M${x1},${y1} C${mx},${y1} ${mx},${y2} ${x2},${y2}`);
      path.setAttribute('class', `edge${inferred ? ' inferred' : ''} st-${b.state}`);
      g.svg.append(path);
    }

    for (const s of group.order) {
      let box = g.boxes.get(s);
      if (!box) {
        box = {
          el: h('button', {
            type: 'button', class: 'step', 'data-testid': 'step', 'data-step-id': s.id,
            on: { click: () => this.onSelect(s) },
          }),
          id: h('span', { class: 'step-id', text: s.id }),
          agent: h('span', { class: 'step-agent' }),
          state: h('span', { class: 'step-state' }),
        };
        box.el.append(box.id, box.agent, box.state);
        g.canvas.append(box.el);
        g.boxes.set(s, box);
        const row = { tr: h('tr', { 'data-testid': 'step-row', 'data-step-id': s.id }), cells: [] };
        for (let i = 0; i < 6; i++) {
          // data-label: a narrow screen folds each row into a card whose
          // cells say what they are (app.css).
          const td = h(i === 0 ? 'th' : 'td', i === 0 ? { scope: 'row' } : { 'data-label': COLUMNS[i] });
          row.cells.push(td);
          row.tr.append(td);
        }
        g.rows.set(s, row);
        g.table.append(row.tr);
      }
      const p = pos.get(s) || { x: 0, y: 0 };
      box.el.style.left = `${p.x}px`;
      box.el.style.top = `${p.y}px`;
      box.el.className = `step st-${s.state}`;
      box.el.dataset.state = s.state;
      box.el.dataset.attempt = String(s.attempt);
      const agent = s.agent || specAgent(group, s.id);
      box.agent.textContent = agent;
      const dur = stepDuration(s, this.model);
      box.state.textContent = [s.state, s.attempt > 1 ? `attempt ${s.attempt}` : '', dur].filter(Boolean).join(' · ');
      const detail = s.state === 'completed' ? short(s.output, 200) : s.state === 'skipped' ? s.reason : s.error;
      box.el.title = detail;
      box.el.setAttribute('aria-label', `step ${s.id}, ${agent}, ${box.state.textContent}${detail ? `: ${detail}` : ''}. Show in the conversation`);
      const row = g.rows.get(s);
      const cells = [s.id, agent, s.state, String(s.attempts.length || s.attempt), dur, detail];
      cells.forEach((t, i) => {
        if (row.cells[i].textContent !== t) row.cells[i].textContent = t;
      });
      row.tr.dataset.state = s.state;
    }
  }

  destroy() {
    clear(this.container);
  }
}

function specAgent(group, id) {
  return group.spec?.steps.find((x) => x.id === id)?.agent || '';
}

function stepDuration(s, model) {
  if (Number.isFinite(s.durationS) && s.state === 'completed') return fmtDuration(s.durationS * 1000);
  if (!Number.isFinite(s.startMs)) return '';
  const end = Number.isFinite(s.endMs) ? s.endMs : s.state === 'running' || s.state === 'retrying' ? model.now() : NaN;
  return Number.isFinite(end) ? fmtDuration(end - s.startMs) : '';
}

/** Columns of steps (by dependency depth) and the edges between them. */
export function layout(group) {
  const steps = group.order;
  const deps = new Map(steps.map((s) => [s, []]));
  const spec = group.spec;
  let inferred = false;
  if (spec) {
    const byId = new Map(steps.map((s) => [s.id, s]));
    const writer = new Map();
    for (const st of spec.steps) if (st.outputTo) writer.set(st.outputTo, st.id);
    const mode = spec.mode || 'PIPELINE_MODE_SEQUENTIAL';
    spec.steps.forEach((st, i) => {
      const s = byId.get(st.id);
      if (!s) return;
      const ids = new Set(st.dependsOn || []);
      const reads = [...(st.inputFrom || [])];
      for (const m of String(st.task || '').matchAll(/\{\{\s*([^}\s]+)\s*\}\}/g)) reads.push(m[1]);
      for (const key of reads) {
        const w = writer.get(key);
        if (w && w !== st.id) ids.add(w);
      }
      if ((mode === 'PIPELINE_MODE_SEQUENTIAL' || mode === 'PIPELINE_MODE_UNSPECIFIED') && i > 0) ids.add(spec.steps[i - 1].id);
      for (const id of ids) if (byId.has(id)) deps.get(s).push(byId.get(id));
    });
  } else if (steps.some((s) => Array.isArray(s.dependsOn))) {
    // From the events: each started step names the steps it waited for.
    const byId = new Map(steps.map((s) => [s.id, s]));
    for (const s of steps) for (const id of s.dependsOn || []) if (byId.has(id)) deps.get(s).push(byId.get(id));
  } else {
    inferred = true;
    for (const s of steps) if (s.trigger && s.trigger !== s) deps.get(s).push(s.trigger);
  }
  const depth = new Map();
  const visiting = new Set();
  const depthOf = (s) => {
    if (depth.has(s)) return depth.get(s);
    if (visiting.has(s)) return 0;
    visiting.add(s);
    let d = 0;
    for (const p of deps.get(s) || []) d = Math.max(d, depthOf(p) + 1);
    visiting.delete(s);
    depth.set(s, d);
    return d;
  };
  const cols = [];
  for (const s of steps) {
    const d = depthOf(s);
    (cols[d] ||= []).push(s);
  }
  for (let i = 0; i < cols.length; i++) cols[i] ||= [];
  const edges = [];
  for (const s of steps) for (const p of deps.get(s)) edges.push([p, s]);
  return { cols, edges, inferred };
}
