// The experiments pages: the list (#/experiments; two ticked compare), an
// experiment's cases with their scores, reasons and runs
// (#/experiments/{id}, polled while it runs), and the comparison of two
// (#/experiments/compare?baseline={a}&candidate={b}), regressions first.

import { api } from './api.js';
import { fmtAgo, fmtDuration, fmtInt, fmtTime, fmtUsage, h, num, parseDuration, parseTime, shortId, sleep } from './util.js';

const POLL_MS = 2000;

/** `EXPERIMENT_STATUS_COMPLETED` → `completed`. */
function statusOf(s) {
  return String(s || '').replace('EXPERIMENT_STATUS_', '').toLowerCase() || 'unknown';
}

const pct = (x) => `${Math.round(num(x) * 100)}%`;

/** The first reason a case failed for. */
function reasonOf(c) {
  if (c.error) return c.error;
  for (const t of c.tries || []) {
    const s = (t.scores || []).find((x) => !x.passed);
    if (s) return `${s.scorer}: ${s.reason}`;
    if (t.error) return `the run ${t.status}: ${t.error}`;
  }
  return '';
}

function statusBadge(status) {
  const word = statusOf(status);
  const cls = word === 'completed' ? 'st-completed' : word === 'running' ? 'st-running' : 'st-cancelled';
  return h('span', { class: `badge ${cls}`, 'data-testid': 'experiment-status', text: word });
}

/** The list of the tenant's experiments. */
export function openExperiments(main, app) {
  const stop = new AbortController();
  const st = { tokens: [''], page: 0, list: [], next: '', picked: [] };
  const listState = h('span', { class: 'muted', 'data-testid': 'experiments-state', 'aria-live': 'polite' });
  const tbody = h('tbody');
  const empty = h('p', { class: 'muted', 'data-testid': 'experiments-empty', hidden: true },
    'No experiments yet. Run one: baton eval deploy/config/evals/examples.jsonl');
  const compare = h('a', { class: 'btn primary', 'data-testid': 'compare-picked', 'aria-disabled': 'true' }, 'Compare the two ticked');
  const prev = h('button', { type: 'button', class: 'btn', 'data-testid': 'experiments-prev', disabled: true }, '← Newer');
  const next = h('button', { type: 'button', class: 'btn', 'data-testid': 'experiments-next', disabled: true }, 'Older →');
  prev.addEventListener('click', () => { if (st.page > 0) { st.page--; poll(); } });
  next.addEventListener('click', () => { if (st.next) { st.tokens[st.page + 1] = st.next; st.page++; poll(); } });

  function drawCompare() {
    const [a, b] = st.picked;
    const ready = st.picked.length === 2;
    compare.setAttribute('aria-disabled', ready ? 'false' : 'true');
    if (ready) {
      // The older is the baseline.
      compare.href = `#/experiments/compare?baseline=${encodeURIComponent(b)}&candidate=${encodeURIComponent(a)}`;
    } else compare.removeAttribute('href');
  }

  function draw() {
    const now = Date.now();
    tbody.replaceChildren(...st.list.map((e) => {
      const t = e.totals || {};
      const started = parseTime(e.startedAt);
      const tick = h('input', {
        type: 'checkbox', 'data-testid': 'experiment-pick', 'aria-label': `Compare ${e.name}`,
        checked: st.picked.includes(e.id),
      });
      tick.addEventListener('change', () => {
        st.picked = st.picked.filter((x) => x !== e.id);
        if (tick.checked) st.picked.push(e.id);
        while (st.picked.length > 2) st.picked.shift();
        // Keep the list order: newest first.
        st.picked.sort((x, y) => st.list.findIndex((l) => l.id === x) - st.list.findIndex((l) => l.id === y));
        draw();
      });
      const cases = num(t.cases);
      return h('tr', { 'data-testid': 'experiment-row', 'data-experiment-id': e.id },
        h('td', { class: 'c0' }, tick),
        h('td', { class: 'c1' },
          h('a', { href: `#/experiments/${encodeURIComponent(e.id)}`, 'data-testid': 'experiment-link', text: e.name, title: e.id }),
          h('div', { class: 'muted small' }, `${e.target || 'per case'} · ${e.datasetName}`,
            h('span', { class: 'phone-only' }, `${fmtInt(num(t.passed))} of ${fmtInt(cases)} passed · ${fmtAgo(started, now)}`))),
        h('td', { class: 'c2' }, statusBadge(e.status)),
        h('td', { class: 'c3', 'data-testid': 'experiment-passed' }, `${fmtInt(num(t.passed))} / ${fmtInt(cases)}`),
        h('td', { class: 'c4' }, pct(t.passRate)),
        h('td', { class: 'c5', title: fmtTime(started) }, fmtAgo(started, now)));
    }));
    empty.hidden = st.list.length > 0;
    prev.disabled = st.page === 0;
    next.disabled = !st.next;
    drawCompare();
  }

  async function poll() {
    try {
      const r = await api.listExperiments({ pageSize: 50, pageToken: st.tokens[st.page] || '' }, stop.signal);
      st.list = r.experiments || [];
      st.next = r.nextPageToken || '';
      listState.textContent = `live · ${st.list.length} experiment${st.list.length === 1 ? '' : 's'} on this page`;
      draw();
    } catch (e) {
      if (e.name === 'AbortError') return;
      listState.textContent = `cannot list experiments: ${e.describe ? e.describe() : e.message}`;
      if (e.code === 'UNAUTHENTICATED' || e.code === 'PERMISSION_DENIED') app.alert(e, 'list');
    }
  }
  (async () => {
    while (!stop.signal.aborted) {
      if (!document.hidden) await poll();
      await sleep(POLL_MS * 2, stop.signal);
    }
  })();

  main.replaceChildren(h('section', { class: 'experiments-page', 'data-testid': 'experiments-page', 'aria-labelledby': 'experiments-h' },
    h('div', { class: 'list-head' }, h('h1', { id: 'experiments-h', text: 'Experiments' }), compare, listState),
    h('p', { class: 'muted small' }, 'A dataset\'s cases run against an agent and scored (baton eval). Tick two to compare them: the older is the baseline.'),
    h('div', { class: 'table-scroll' },
      h('table', { class: 'experiments', 'data-testid': 'experiments-table' },
        h('caption', { class: 'sr-only', text: 'Experiments of this tenant, newest first' }),
        h('thead', null, h('tr', null,
          ...['', 'Experiment', 'Status', 'Passed', 'Pass rate', 'Started'].map((t, i) => h('th', { scope: 'col', class: `c${i}`, text: t })))),
        tbody)),
    empty,
    h('div', { class: 'pager' }, prev, next)));
  return { destroy() { stop.abort(); } };
}

/** One experiment: its facts, then its cases. */
export function openExperiment(main, id, app) {
  const stop = new AbortController();
  const title = h('h1', { 'data-testid': 'experiment-name' });
  const facts = h('dl', { class: 'facts', 'data-testid': 'experiment-facts' });
  const tbody = h('tbody');
  const filter = h('input', { type: 'checkbox', id: 'failing-only', 'data-testid': 'failing-only' });
  let record = null;
  filter.addEventListener('change', () => record && draw(record));
  // Shown while it runs: stops its runs still going, keeps what finished.
  const cancel = h('button', { type: 'button', class: 'btn danger', 'data-testid': 'cancel-experiment', hidden: true }, 'Cancel experiment');
  cancel.addEventListener('click', async () => {
    cancel.disabled = true;
    cancel.textContent = 'Cancelling…';
    try {
      draw(await api.cancelExperiment(record ? record.id : id));
    } catch (err) {
      app.alert(err, 'experiment');
    }
    cancel.textContent = 'Cancel experiment';
    cancel.disabled = false;
  });

  function fact(label, value, wide = false) {
    return h('div', wide ? { class: 'wide' } : null, h('dt', { text: label }), h('dd', null, value));
  }

  function draw(e) {
    record = e;
    const t = e.totals || {};
    title.replaceChildren(e.name, ' ', statusBadge(e.status));
    cancel.hidden = statusOf(e.status) !== 'running';
    const secs = parseDuration(t.duration);
    const repeat = num(e.repeat) || 1;
    facts.replaceChildren(...[
      fact('Experiment', h('code', { text: e.id }), true),
      fact('Target', e.target || 'per case'),
      fact('Dataset', e.datasetName),
      fact('Passed', h('span', { 'data-testid': 'experiment-totals' },
        `${fmtInt(num(t.passed))} of ${fmtInt(num(t.cases))} cases · ${fmtInt(num(t.failed))} failed · ${fmtInt(num(t.errored))} errors`
        + (statusOf(e.status) !== 'running' && num(e.caseCount) > num(t.cases) ? ` · ${fmtInt(num(e.caseCount) - num(t.cases))} not run` : '')), true),
      fact('Pass rate', `${pct(t.passRate)} [${pct(t.passRateLow)}–${pct(t.passRateHigh)}]`),
      repeat > 1 ? fact(`pass@${repeat} · pass^${repeat}`, `${pct(t.passAtK)} · ${pct(t.passHatK)}`) : null,
      fact('Usage', fmtUsage(e.usage) || '—', true),
      fact('Took', Number.isFinite(secs) ? fmtDuration(secs * 1000) : '—'),
      fact('Agents file', h('code', { title: e.agentsDigest, text: (e.agentsDigest || '').slice(0, 12) || '—' })),
      fact('Models', (e.models || []).join(', ') || '—', true)].filter(Boolean));
    const cases = (e.cases || []).filter((c) => !filter.checked || !c.passed);
    tbody.replaceChildren(...cases.map((c) => {
      const tries = c.tries || [];
      const passed = tries.filter((x) => x.passed).length;
      const runs = h('div', { class: 'runs-links' }, ...tries.map((x, i) =>
        h('a', { href: `#/runs/${encodeURIComponent(x.runId)}`, 'data-testid': 'case-run', title: x.runId, text: tries.length > 1 ? `#${i + 1}` : shortId(x.runId) })));
      const scores = tries[0] ? (tries[0].scores || []).map((s) =>
        h('span', { class: `score ${s.passed ? 'ok' : 'bad'}`, title: s.reason }, `${s.scorer} ${num(s.score).toFixed(2)}`)) : [];
      return h('tr', { 'data-testid': 'case-row', 'data-case-id': c.caseId, 'data-passed': c.passed ? 'true' : 'false' },
        h('td', { class: 'c0' }, h('span', { class: c.passed ? 'pass' : 'fail', 'aria-label': c.passed ? 'passed' : 'failed', text: c.passed ? '✓' : '✗' })),
        h('td', { class: 'c1' }, h('strong', { text: c.caseId }), h('div', { class: 'muted small', text: c.input }),
          h('div', { class: 'reason small', 'data-testid': 'case-reason', text: c.passed ? '' : reasonOf(c) })),
        h('td', { class: 'c2' }, tries.length > 1 ? `${passed}/${tries.length}` : (c.passed ? 'pass' : 'fail'), h('div', { class: 'scores' }, ...scores)),
        h('td', { class: 'c3' }, runs));
    }));
  }

  (async () => {
    while (!stop.signal.aborted) {
      try {
        const e = await api.getExperiment(id, stop.signal);
        draw(e);
        if (statusOf(e.status) !== 'running') return;
      } catch (err) {
        if (err.name === 'AbortError') return;
        app.alert(err, 'experiment');
        return;
      }
      await sleep(POLL_MS, stop.signal);
    }
  })();

  main.replaceChildren(h('section', { class: 'experiment-page', 'data-testid': 'experiment-page' },
    h('nav', { class: 'crumbs', 'aria-label': 'Breadcrumb' }, h('a', { href: '#/experiments' }, '← Experiments')),
    h('header', { class: 'run-head' }, title, facts, h('div', { class: 'actions' }, cancel)),
    h('label', { for: 'failing-only', class: 'fork-check' }, filter, 'Only the cases that did not pass'),
    h('div', { class: 'table-scroll' },
      h('table', { class: 'cases', 'data-testid': 'cases-table' },
        h('caption', { class: 'sr-only', text: 'The experiment\'s cases in the dataset\'s order' }),
        h('thead', null, h('tr', null, ...['', 'Case', 'Score', 'Runs'].map((t, i) => h('th', { scope: 'col', class: `c${i}`, text: t })))),
        tbody))));
  return { destroy() { stop.abort(); } };
}

const CHANGE = {
  CASE_CHANGE_KIND_REGRESSED: ['regressed', 'fail'],
  CASE_CHANGE_KIND_WORSE_WITHIN_NOISE: ['worse (noise)', 'muted'],
  CASE_CHANGE_KIND_SAME: ['same', 'muted'],
  CASE_CHANGE_KIND_BETTER_WITHIN_NOISE: ['better (noise)', 'muted'],
  CASE_CHANGE_KIND_IMPROVED: ['improved', 'pass'],
  CASE_CHANGE_KIND_ADDED: ['added', 'muted'],
  CASE_CHANGE_KIND_REMOVED: ['removed', 'muted'],
};

/** Two experiments compared, regressions first. */
export function openComparison(main, params, app) {
  const stop = new AbortController();
  const baseline = params.get('baseline') || '';
  const candidate = params.get('candidate') || '';
  const head = h('h1', { 'data-testid': 'comparison-title', text: 'Comparing…' });
  const verdict = h('p', { 'data-testid': 'comparison-verdict', role: 'status' });
  const tbody = h('tbody');
  api.compareExperiments(baseline, candidate, stop.signal).then((c) => {
    const name = (e) => (e ? e.name : '');
    head.textContent = `${name(c.baseline)} → ${name(c.candidate)}`;
    const regressed = (c.cases || []).filter((x) => x.kind === 'CASE_CHANGE_KIND_REGRESSED').length;
    verdict.textContent = regressed
      ? `${regressed} case${regressed === 1 ? '' : 's'} regressed beyond noise (α = ${num(c.alpha)}).`
      : `No case regressed beyond noise (α = ${num(c.alpha)}).`;
    verdict.className = regressed ? 'outcome failed' : 'outcome completed';
    tbody.replaceChildren(...(c.cases || []).map((x) => {
      const [word, cls] = CHANGE[x.kind] || ['?', 'muted'];
      const deltas = Object.entries(x.scoreDeltas || {}).filter(([, v]) => Math.abs(v) > 1e-9)
        .map(([k, v]) => `${k} ${v > 0 ? '+' : ''}${v.toFixed(2)}`).join(' · ');
      return h('tr', { 'data-testid': 'change-row', 'data-kind': word },
        h('td', { class: 'c0' }, h('span', { class: cls, text: word })),
        h('td', { class: 'c1' }, h('strong', { text: x.caseId }), x.reason ? h('div', { class: 'reason small', text: x.reason }) : null),
        h('td', { class: 'c2' }, x.tries, h('div', { class: 'muted small', text: deltas })),
        h('td', { class: 'c3' }, num(x.pValue) < 1 ? num(x.pValue).toFixed(3) : '—'));
    }));
  }).catch((e) => {
    if (e.name !== 'AbortError') app.alert(e, 'compare');
  });
  main.replaceChildren(h('section', { class: 'experiment-page', 'data-testid': 'comparison-page' },
    h('nav', { class: 'crumbs', 'aria-label': 'Breadcrumb' }, h('a', { href: '#/experiments' }, '← Experiments')),
    h('header', { class: 'run-head' }, head, verdict),
    h('div', { class: 'table-scroll' },
      h('table', { class: 'cases', 'data-testid': 'comparison-table' },
        h('caption', { class: 'sr-only', text: 'Each case, regressions first' }),
        h('thead', null, h('tr', null, ...['Change', 'Case', 'Tries', 'p'].map((t, i) => h('th', { scope: 'col', class: `c${i}`, text: t })))),
        tbody))));
  return { destroy() { stop.abort(); } };
}
