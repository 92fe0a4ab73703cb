// The runs page (#/runs): the tenant's runs, newest first, polled while
// shown, filtered by status (on the server) and by text (here); and the
// forms that start an agent run or a pipeline (detached), which then open
// the new run's page.

import { api } from './api.js';
import { EXAMPLE, graphSpec, parseDoc, rememberSpec, toRequest } from './pipeline.js';
import { clear, shortId, fmtAgo, fmtCost, fmtDuration, fmtInt, fmtTime, h, kindWord, num, parseTime, sleep, statusWord, tokens } from './util.js';

const POLL_MS = 1500;
const PAGE = 50;
/** Usage of running runs is looked up again after this long. */
const USAGE_STALE_MS = 10000;
const USAGE_PARALLEL = 4;
/** Where the start form folds (as app.css's phone width). */
const PHONE = '(max-width: 640px)';

// WAITING is no status of the API's: the runs waiting for a person
// (`waiting=true`).
const STATUSES = [
  ['', 'All'],
  ['WAITING', 'Waiting for me'],
  ['RUN_STATUS_RUNNING', 'Running'],
  ['RUN_STATUS_COMPLETED', 'Completed'],
  ['RUN_STATUS_FAILED', 'Failed'],
  ['RUN_STATUS_CANCELLED', 'Cancelled'],
];
const MODES = [
  ['APPROVAL_MODE_ASK', 'Ask me'],
  ['APPROVAL_MODE_AUTO_APPROVE', 'Approve everything'],
  ['APPROVAL_MODE_AUTO_DENY', 'Deny everything'],
];

/** What GetRun said of each run's usage: runId → {tokens, final, at}. Kept across visits. */
const usageCache = new Map();

export function openRuns(main, app) {
  const stop = new AbortController();
  const st = { status: '', text: '', tokens: [''], page: 0, runs: [], next: '', updated: 0 };

  // ---- the list ----
  const statusSel = h('select', { id: 'f-status', 'data-testid': 'filter-status' },
    ...STATUSES.map(([v, l]) => h('option', { value: v, text: l })));
  const textIn = h('input', { id: 'f-text', type: 'search', 'data-testid': 'filter-text', placeholder: 'name, run or chat id', autocomplete: 'off' });
  const listState = h('span', { class: 'muted', 'data-testid': 'list-state', 'aria-live': 'polite' });
  const tbody = h('tbody');
  const empty = h('p', { class: 'muted', 'data-testid': 'runs-empty', hidden: true });
  const prev = h('button', { type: 'button', class: 'btn', 'data-testid': 'page-prev', disabled: true }, '← Newer');
  const next = h('button', { type: 'button', class: 'btn', 'data-testid': 'page-next', disabled: true }, 'Older →');
  const pageNo = h('span', { class: 'muted' });

  const list = h('section', { class: 'runs-list', 'aria-labelledby': 'runs-h' },
    h('div', { class: 'list-head' },
      h('h1', { id: 'runs-h', text: 'Runs' }),
      h('form', { class: 'filters', role: 'search', on: { submit: (e) => e.preventDefault() } },
        h('label', { for: 'f-status', text: 'Status' }), statusSel,
        h('label', { for: 'f-text', text: 'Filter' }), textIn),
      listState),
    h('div', { class: 'table-scroll' },
      h('table', { class: 'runs', 'data-testid': 'runs-table' },
        h('caption', { class: 'sr-only', text: 'Runs of this tenant, newest first' }),
        h('thead', null, h('tr', null,
          ...['Status', 'Agent or pipeline', 'Started', 'Duration', 'Tokens · cost', 'Events'].map((t, i) =>
            h('th', { scope: 'col', class: `c${i}`, text: t })))),
        tbody)),
    empty,
    h('div', { class: 'pager' }, prev, pageNo, next));

  statusSel.addEventListener('change', () => {
    st.status = statusSel.value;
    st.tokens = [''];
    st.page = 0;
    poll();
  });
  textIn.addEventListener('input', () => {
    st.text = textIn.value.trim().toLowerCase();
    drawRows();
  });
  prev.addEventListener('click', () => {
    if (st.page > 0) {
      st.page--;
      poll();
    }
  });
  next.addEventListener('click', () => {
    if (st.next) {
      st.tokens[st.page + 1] = st.next;
      st.page++;
      poll();
    }
  });

  const rows = new Map();
  function drawRows() {
    const now = Date.now();
    const shown = st.runs.filter((r) => !st.text || String(r.target || '').toLowerCase().includes(st.text) || String(r.runId).startsWith(st.text)
      || String(r.conversationId || '').toLowerCase().includes(st.text));
    const keep = new Set();
    let before = null;
    for (let i = shown.length - 1; i >= 0; i--) {
      const r = shown[i];
      keep.add(r.runId);
      let row = rows.get(r.runId);
      if (!row) {
        row = {
          tr: h('tr', { 'data-testid': 'run-row', 'data-run-id': r.runId }),
          status: h('span', { class: 'badge' }),
          link: h('a', { href: `#/runs/${encodeURIComponent(r.runId)}`, 'data-testid': 'run-link' }),
          sub: h('div', { class: 'muted small' }),
          subText: h('span'),
          // The conversation the run is a message of, when it is.
          conv: h('a', { class: 'conv-badge', 'data-testid': 'run-conversation', hidden: true }),
          // At phone width the duration, tokens and events columns fold in here.
          folded: h('div', { class: 'muted small phone-only', 'data-testid': 'run-folded' }),
          started: h('td', { class: 'c2' }),
          duration: h('td', { class: 'c3' }),
          tokens: h('td', { class: 'c4', 'data-testid': 'run-tokens' }),
          cost: h('span', { class: 'cost', 'data-testid': 'run-cost' }),
          events: h('td', { class: 'c5' }),
        };
        // The space lets the badge go to a line of its own on a phone.
        row.sub.append(row.subText, ' ', row.conv);
        row.tr.append(h('td', { class: 'c0' }, row.status), h('td', { class: 'c1' }, row.link, row.sub, row.folded), row.started, row.duration, row.tokens, row.events);
        rows.set(r.runId, row);
      }
      // A running run waiting for a person says so, and on what.
      const waits = r.status === 'RUN_STATUS_RUNNING' ? r.waitingFor || [] : [];
      const word = waits.length ? 'waiting' : statusWord(r.status);
      row.tr.dataset.status = r.status || '';
      row.tr.dataset.waiting = waits.join(',');
      row.status.textContent = waits.length ? `waiting · ${waits.join(', ')}` : word;
      row.status.className = `badge st-${word}`;
      row.link.textContent = r.target || '(unnamed)';
      // The random tail of the id (UUIDv7 starts with the time, the same
      // on every run of a minute): it tells runs apart, and `baton runs get`
      // takes it.
      row.subText.textContent = `${kindWord(r.kind)} · ${shortId(r.runId)}${r.detached ? ' · detached' : ''}`
        + `${r.forkedFrom && r.forkedFrom.runId ? ` · fork of ${shortId(r.forkedFrom.runId)}` : ''}`
        + `${r.replayOf ? ` · replay of ${shortId(r.replayOf)}` : ''}`
        + `${r.historyGone ? ' · history gone' : ''}`;
      const conv = r.conversationId || '';
      row.conv.hidden = !conv;
      if (conv && row.conv.dataset.conversationId !== conv) {
        row.conv.dataset.conversationId = conv;
        row.conv.href = `#/conversations/${encodeURIComponent(conv)}`;
        row.conv.title = `A message of conversation ${conv}: open it`;
        row.conv.textContent = `chat ${shortId(conv)}`;
      }
      const s = parseTime(r.startedAt);
      const e = parseTime(r.endedAt);
      row.started.textContent = fmtAgo(s, now);
      row.started.title = fmtTime(s);
      row.duration.textContent = Number.isFinite(s) ? fmtDuration((Number.isFinite(e) ? e : now) - s) : '—';
      // ListRuns says what each run spent (a server before it did not:
      // then GetRun's, asked a few at a time).
      const u = r.usage ? { tokens: tokens(r.usage), cost: fmtCost(r.usage) } : usageCache.get(r.runId);
      row.tokens.textContent = u && u.tokens !== null ? fmtInt(u.tokens) : '…';
      row.cost.textContent = (u && u.cost) || '';
      row.tokens.append(row.cost);
      row.events.textContent = fmtInt(num(r.lastSeq));
      // At phone width the duration, tokens and events columns fold here.
      const spent = u && u.tokens !== null ? ` · ${fmtInt(u.tokens)} tokens${u.cost ? ` · ${u.cost}` : ''}` : '';
      row.folded.textContent = `${row.duration.textContent} · ${row.events.textContent} events${spent}`;
      // Put the row in its place (newest first) without rebuilding the table.
      if (row.tr.nextSibling !== before || row.tr.parentNode !== tbody) tbody.insertBefore(row.tr, before);
      before = row.tr;
    }
    for (const [id, row] of rows) {
      if (!keep.has(id)) {
        row.tr.remove();
        rows.delete(id);
      }
    }
    empty.hidden = shown.length > 0;
    empty.textContent = st.runs.length ? 'No run matches the filter.' : 'No runs yet: start one with the form.';
    prev.disabled = st.page === 0;
    next.disabled = !st.next;
    pageNo.textContent = `page ${st.page + 1}`;
    fetchUsage(shown);
  }

  let inflight = 0;
  function fetchUsage(shown) {
    const now = Date.now();
    for (const r of shown) {
      if (inflight >= USAGE_PARALLEL) return;
      const u = usageCache.get(r.runId);
      if (r.usage || (u && (u.final || u.pending || now - u.at < USAGE_STALE_MS))) continue;
      inflight++;
      usageCache.set(r.runId, { ...(u || { tokens: null }), pending: true, at: now });
      api.getRun(r.runId, stop.signal).then((g) => {
        usageCache.set(r.runId, { tokens: tokens(g.usage), cost: fmtCost(g.usage), final: g.status !== 'RUN_STATUS_RUNNING', at: Date.now() });
      }).catch(() => {
        usageCache.set(r.runId, { tokens: u ? u.tokens : null, final: false, at: Date.now() });
      }).finally(() => {
        inflight--;
        if (!stop.signal.aborted) drawRows();
      });
    }
  }

  let polling = null;
  async function poll() {
    const token = st.tokens[st.page] || '';
    const status = st.status;
    const mine = {};
    polling = mine;
    try {
      const waiting = status === 'WAITING';
      const r = await api.listRuns({ status: waiting ? '' : status, waiting, pageSize: PAGE, pageToken: token }, stop.signal);
      if (polling !== mine) return;
      st.runs = r.runs || [];
      st.next = r.nextPageToken || '';
      st.updated = Date.now();
      listState.textContent = `live · ${st.runs.length} run${st.runs.length === 1 ? '' : 's'} on this page`;
      listState.dataset.state = 'ok';
      drawRows();
    } catch (e) {
      if (e.name === 'AbortError' || polling !== mine) return;
      listState.textContent = `cannot list runs: ${e.describe ? e.describe() : e.message}`;
      listState.dataset.state = 'error';
      if (e.code === 'UNAUTHENTICATED' || e.code === 'PERMISSION_DENIED') app.alert(e, 'list');
    }
  }

  (async () => {
    while (!stop.signal.aborted) {
      if (!document.hidden) await poll();
      await sleep(POLL_MS, stop.signal);
    }
  })();

  // ---- starting runs ----
  const start = startForms(app, stop.signal);
  clear(main).append(h('div', { class: 'runs-page', 'data-testid': 'runs-page' }, list, start));
  window.batonConsole = { seqs: [] };

  return {
    destroy() {
      stop.abort();
    },
  };
}

function startForms(app, signal) {
  const tabAgent = h('button', { type: 'button', role: 'tab', id: 'st-agent', 'aria-controls': 'sp-agent', 'aria-selected': 'true', 'data-testid': 'start-tab-agent' }, 'Agent');
  const tabPipe = h('button', { type: 'button', role: 'tab', id: 'st-pipe', 'aria-controls': 'sp-pipe', 'aria-selected': 'false', tabindex: '-1', 'data-testid': 'start-tab-pipeline' }, 'Pipeline');

  // Agent run.
  const agentSel = h('select', { id: 'sa-agent', 'data-testid': 'start-agent', required: true }, h('option', { value: '', text: 'loading…' }));
  const agentHelp = h('p', { class: 'muted small', id: 'sa-agent-help', 'aria-live': 'polite' });
  agentSel.setAttribute('aria-describedby', agentHelp.id);
  const input = h('textarea', { id: 'sa-input', rows: '4', 'data-testid': 'start-input', placeholder: 'What should it do?' });
  const modeSel = (id, testid) => h('select', { id, 'data-testid': testid }, ...MODES.map(([v, l]) => h('option', { value: v, text: l })));
  const modeA = modeSel('sa-mode', 'start-approval-mode');
  const ctxJson = h('textarea', { id: 'sa-ctx', rows: '3', 'data-testid': 'start-run-context', placeholder: '{"user": "ada"}' });
  const model = h('input', { id: 'sa-model', type: 'text', 'data-testid': 'start-default-model', placeholder: 'provider:model', autocomplete: 'off' });
  const errA = h('div', { class: 'error', role: 'alert', 'data-testid': 'form-error', hidden: true });
  const submitA = h('button', { type: 'submit', class: 'btn primary', 'data-testid': 'start-run' }, 'Start run');
  const agents = new Map();
  const formA = h('form', { id: 'sp-agent', role: 'tabpanel', 'aria-labelledby': 'st-agent', class: 'stack', 'data-testid': 'start-agent-form' },
    h('label', { for: 'sa-agent', text: 'Agent or group' }), agentSel, agentHelp,
    h('label', { for: 'sa-input', text: 'Input' }), input,
    h('label', { for: 'sa-mode', text: 'Approvals' }), modeA,
    h('details', null, h('summary', { text: 'More options' }),
      h('div', { class: 'stack' },
        h('label', { for: 'sa-ctx', text: 'Run context (a JSON object)' }), ctxJson,
        h('label', { for: 'sa-model', text: 'Default model' }), model)),
    submitA, errA);

  agentSel.addEventListener('change', () => {
    const a = agents.get(agentSel.value);
    agentHelp.textContent = a ? a.text : '';
  });

  api.agents(signal).then((r) => {
    agentSel.textContent = '';
    agentSel.append(h('option', { value: '', text: 'Choose…' }));
    const ga = h('optgroup', { label: 'Agents' });
    for (const a of r.agents || []) {
      agents.set(a.name, { text: [a.description, a.model && `model ${a.model}`, a.tools?.length && `tools: ${a.tools.join(', ')}`, a.handoffs?.length && `hands off to ${a.handoffs.join(', ')}`].filter(Boolean).join(' · ') });
      ga.append(h('option', { value: a.name, text: a.name }));
    }
    agentSel.append(ga);
    if ((r.groups || []).length) {
      const gg = h('optgroup', { label: 'Groups' });
      for (const g of r.groups) {
        agents.set(g.name, { text: [g.description, `starts with ${g.root}`, `members: ${(g.members || []).join(', ')}`].filter(Boolean).join(' · ') });
        gg.append(h('option', { value: g.name, text: `${g.name} (group)` }));
      }
      agentSel.append(gg);
    }
  }).catch((e) => {
    if (e.name === 'AbortError') return;
    agentSel.textContent = '';
    agentSel.append(h('option', { value: '', text: 'cannot list agents' }));
    show(errA, `Cannot list agents: ${e.describe ? e.describe() : e.message}`);
  });

  formA.addEventListener('submit', async (e) => {
    e.preventDefault();
    show(errA, '');
    if (!agentSel.value) return show(errA, 'Choose an agent.');
    const body = { agent: agentSel.value, input: input.value, approvalMode: modeA.value, detach: true };
    if (ctxJson.value.trim()) {
      try {
        const v = JSON.parse(ctxJson.value);
        if (!v || typeof v !== 'object' || Array.isArray(v)) throw new Error('not an object');
      } catch (err) {
        return show(errA, `Run context: ${err.message}`);
      }
      body.runContextJson = ctxJson.value.trim();
    }
    if (model.value.trim()) body.defaultModel = model.value.trim();
    submitA.disabled = true;
    try {
      const r = await api.startRun(body);
      location.hash = `#/runs/${encodeURIComponent(r.runId)}`;
    } catch (err) {
      show(errA, err.describe ? err.describe() : err.message);
    } finally {
      submitA.disabled = false;
    }
  });

  // Pipeline run.
  const text = h('textarea', { id: 'sp-text', rows: '14', class: 'code', spellcheck: 'false', 'data-testid': 'pipeline-text', placeholder: 'name: …\nmode: dag\nsteps:\n  - id: …' });
  const modeP = modeSel('sp-mode', 'pipeline-approval-mode');
  const errP = h('div', { class: 'error', role: 'alert', 'data-testid': 'pipeline-error', hidden: true });
  const submitP = h('button', { type: 'submit', class: 'btn primary', 'data-testid': 'start-pipeline' }, 'Start pipeline');
  const example = h('button', { type: 'button', class: 'btn', 'data-testid': 'pipeline-example', on: { click: () => { text.value = EXAMPLE; text.focus(); } } }, 'Load the example');
  const formP = h('form', { id: 'sp-pipe', role: 'tabpanel', 'aria-labelledby': 'st-pipe', class: 'stack', hidden: true, 'data-testid': 'start-pipeline-form' },
    h('label', { for: 'sp-text', text: 'Pipeline (YAML as for baton pipeline, or JSON)' }), text,
    h('div', { class: 'row' }, example),
    h('label', { for: 'sp-mode', text: 'Approvals' }), modeP,
    submitP, errP);
  formP.addEventListener('submit', async (e) => {
    e.preventDefault();
    show(errP, '');
    let req;
    try {
      req = toRequest(parseDoc(text.value));
    } catch (err) {
      return show(errP, err.message);
    }
    req.approvalMode = modeP.value;
    req.detach = true;
    submitP.disabled = true;
    try {
      const r = await api.startPipeline(req);
      rememberSpec(r.runId, graphSpec(req));
      location.hash = `#/runs/${encodeURIComponent(r.runId)}`;
    } catch (err) {
      show(errP, err.describe ? err.describe() : err.message);
    } finally {
      submitP.disabled = false;
    }
  });

  const pick = (agent) => {
    tabAgent.setAttribute('aria-selected', String(agent));
    tabPipe.setAttribute('aria-selected', String(!agent));
    tabAgent.tabIndex = agent ? 0 : -1;
    tabPipe.tabIndex = agent ? -1 : 0;
    formA.hidden = !agent;
    formP.hidden = agent;
  };
  tabAgent.addEventListener('click', () => pick(true));
  tabPipe.addEventListener('click', () => pick(false));
  const tabs = h('div', { class: 'tabs', role: 'tablist', 'aria-label': 'What to start' }, tabAgent, tabPipe);
  tabs.addEventListener('keydown', (e) => {
    if (e.key !== 'ArrowRight' && e.key !== 'ArrowLeft') return;
    const agent = tabPipe.getAttribute('aria-selected') === 'true';
    pick(agent);
    (agent ? tabAgent : tabPipe).focus();
  });

  // Above the list on a narrow screen; folded on a phone, so the list shows
  // under it (a desktop keeps it open: its heading does not fold it).
  const phone = matchMedia(PHONE);
  const fold = h('details', { class: 'start-fold', 'data-testid': 'start-fold', open: !phone.matches },
    h('summary', { 'data-testid': 'start-fold-toggle' }, h('h2', { id: 'start-h', text: 'Start a run' })),
    tabs, formA, formP);
  const head = fold.querySelector('summary');
  head.addEventListener('click', (e) => {
    if (!phone.matches) e.preventDefault();
  });
  const widen = () => {
    head.tabIndex = phone.matches ? 0 : -1;
    if (!phone.matches) fold.open = true;
  };
  widen();
  phone.addEventListener('change', widen);
  signal.addEventListener('abort', () => phone.removeEventListener('change', widen), { once: true });
  return h('aside', { class: 'start', 'aria-labelledby': 'start-h' }, fold);
}

function show(el, msg) {
  el.textContent = msg;
  el.hidden = !msg;
}
