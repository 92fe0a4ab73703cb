// The schedules pages: the tenant's schedules (#/schedules), polled while
// shown — what each runs and when, whether it is active, paused or ended,
// when it fires next and what its latest tick did (with that tick's run) —
// and one schedule (#/schedules/{id}), polled too: its definition, its next
// fire times, its recent ticks and their runs, and Pause / Resume and
// Delete. Schedules are made with `baton schedules create`, the API (POST
// /v1/schedules) or the agents file (`schedules:`; those change with the
// file, so they have no buttons here); the console makes none.

import { api } from './api.js';
import { fmtAgo, fmtIn, fmtTime, h, num, parseDuration, parseTime, pretty, short, shortId, sleep, statusWord } from './util.js';

const POLL_MS = 2000;

/** What the empty list says: how a schedule is made (the CLI, the API). */
const HOW_CLI = "baton schedules create --agent assistant --input 'the news' --cron '0 9 * * MON-FRI' --tz Europe/Paris";
const HOW_API = 'POST /v1/schedules {"agent": {"agent": "assistant", "input": "the news"}, "cron": "0 9 * * MON-FRI", "timeZone": "Europe/Paris"}';

/** `SCHEDULE_TICK_OUTCOME_FIRED` → `fired`. */
function outcomeWord(o) {
  return String(o || '').replace(/^SCHEDULE_TICK_OUTCOME_/, '').toLowerCase() || 'unknown';
}

/** The badge class of a tick's outcome (a fired tick is the usual: its
 * run's status, beside it, is what tells). */
const OUTCOME_CLASS = { queued: 'st-waiting', missed: 'st-waiting', refused: 'st-error' };

/** What each policy is called here and what it does (its tooltip). */
const OVERLAP = {
  SCHEDULE_OVERLAP_SKIP: ['skip', 'A tick while the previous run still runs is skipped.'],
  SCHEDULE_OVERLAP_QUEUE_ONE: ['queue one', 'A tick while the previous run still runs waits for it to end (one tick at most waits).'],
  SCHEDULE_OVERLAP_ALLOW: ['allow', 'A tick fires even while the previous run still runs: runs may overlap.'],
};
const MISSED = {
  SCHEDULE_MISSED_SKIP: ['skip', 'Ticks that came due while no replica could fire them are skipped (recorded as missed).'],
  SCHEDULE_MISSED_RUN_ONCE: ['run once', 'After downtime, one run fires for the latest missed tick.'],
};
/** A policy's `[word, what]`; unset is the default, SKIP. */
const policy = (table, v, unset) => table[v] || table[unset];

/** `active`, `paused`, or `ended` (not paused, and no tick to come). */
function scheduleState(s) {
  if (s.paused) return 'paused';
  return (s.nextFireTimes || []).length ? 'active' : 'ended';
}

/** Seconds as `10 s`, `1.5 s`, `15 m`, `1 h 30 m`, `2 d`. */
function fmtEvery(secs) {
  if (!Number.isFinite(secs) || secs <= 0) return '—';
  if (secs < 60) return `${Math.round(secs * 1000) / 1000} s`;
  const parts = [];
  let rest = Math.round(secs);
  for (const [n, unit] of [[86400, 'd'], [3600, 'h'], [60, 'm'], [1, 's']]) {
    if (rest >= n) {
      parts.push(`${Math.floor(rest / n)} ${unit}`);
      rest %= n;
    }
  }
  return parts.join(' ');
}

/** When it fires: `0 9 * * * (Europe/Paris)` or `every 10 s`. */
function whenOf(s) {
  if (s.cron) return `${s.cron} (${s.timeZone || 'UTC'})`;
  return `every ${fmtEvery(parseDuration(s.interval))}`;
}

/** `['pipeline', 'research-report']`, `['group', 'support']` or `['agent', 'researcher']`. */
function targetOf(s, groups) {
  if (s.pipeline) return ['pipeline', s.target || s.pipeline.pipeline?.name || '(unnamed)'];
  const name = s.target || s.agent?.agent || '';
  return [groups.has(name) ? 'group' : 'agent', name];
}

/** The names of the tenant's groups (to tell a group from an agent), once. */
function loadGroups(signal) {
  const groups = new Set();
  api.agents(signal).then((r) => {
    for (const g of r.groups || []) groups.add(g.name);
  }).catch(() => { /* then every target reads "agent" */ });
  return groups;
}

/** A run id as a link to its page (`…9f3a6c21`). */
function runLink(runId, testid) {
  return h('a', { class: 'tick-run', href: `#/runs/${encodeURIComponent(runId)}`, title: runId, 'data-testid': testid, text: shortId(runId) });
}

function badge(cls, text, testid) {
  return h('span', { class: `badge ${cls}`, 'data-testid': testid, text });
}

/** The list of the tenant's schedules. */
export function openSchedules(main, app) {
  const stop = new AbortController();
  const groups = loadGroups(stop.signal);
  let list = [];

  const listState = h('span', { class: 'muted', 'data-testid': 'schedules-state', 'aria-live': 'polite' });
  const tbody = h('tbody');
  const empty = h('div', { class: 'muted', 'data-testid': 'schedules-empty', hidden: true },
    h('p', null, 'No schedules yet. A schedule starts a run at each tick of a cron expression or every interval. Make one with the CLI or the API:'),
    h('pre', { 'data-testid': 'schedules-how-cli', text: HOW_CLI }),
    h('pre', { 'data-testid': 'schedules-how-api', text: HOW_API }),
    h('p', null, 'or declare it under ', h('code', { text: 'schedules:' }), ' in the agents file.'));

  const table = h('div', { class: 'table-scroll' },
    h('table', { class: 'schedules fold-cards', 'data-testid': 'schedules-table' },
      h('caption', { class: 'sr-only', text: 'Schedules of this tenant' }),
      h('thead', null, h('tr', null,
        ...['Schedule', 'Target', 'When', 'State', 'Next', 'Latest tick'].map((t, i) => h('th', { scope: 'col', class: `c${i}`, text: t })))),
      tbody));

  const rows = new Map();
  /** A cell: `data-label` names it when the table folds into cards (phone). */
  const cell = (i, label, testid) => {
    const v = h('div', { class: 'v', 'data-testid': testid });
    return [h('td', { class: `c${i}`, 'data-label': label }, v), v];
  };
  function newRow(s) {
    const r = { tr: h('tr', { 'data-testid': 'schedule-row', 'data-schedule-id': s.scheduleId }) };
    r.link = h('a', { href: `#/schedules/${encodeURIComponent(s.scheduleId)}`, 'data-testid': 'schedule-link' });
    r.sub = h('div', { class: 'muted small', 'data-testid': 'schedule-sub' });
    r.file = h('span', { class: 'file-badge', 'data-testid': 'schedule-file', title: 'Declared in the agents file: change the file to change it' }, 'agents file');
    const [c1, target] = cell(1, 'Target', 'schedule-target');
    const [c2, when] = cell(2, 'When', 'schedule-when');
    const [c3, state] = cell(3, 'State', 'schedule-state-cell');
    const [c4, next] = cell(4, 'Next', 'schedule-next');
    const [c5, last] = cell(5, 'Latest tick', 'schedule-last');
    r.target = target;
    r.when = when;
    r.state = h('span', { class: 'badge', 'data-testid': 'schedule-state' });
    state.append(r.state);
    r.next = next;
    // The latest tick: its outcome, its run (a link) and the run's status,
    // and when it was; elements kept across polls (a click is never lost).
    r.outcome = h('span', { class: 'badge', 'data-testid': 'schedule-last-outcome' });
    r.run = h('a', { class: 'tick-run', 'data-testid': 'schedule-last-run' });
    r.runStatus = h('span', { class: 'badge', 'data-testid': 'schedule-last-run-status' });
    r.lastWhen = h('div', { class: 'muted small', 'data-testid': 'schedule-last-when' });
    r.lastNone = h('span', { class: 'muted', text: 'no tick yet' });
    last.append(h('div', { class: 'tick-line' }, r.outcome, r.run, r.runStatus, r.lastNone), r.lastWhen);
    r.tr.append(h('td', { class: 'c0', 'data-label': 'Schedule' }, h('div', { class: 'v' }, r.link, r.sub)), c1, c2, c3, c4, c5);
    return r;
  }

  function draw() {
    const now = Date.now();
    let before = null;
    const keep = new Set();
    // In the server's order: the agents file's first, then oldest first.
    for (let i = list.length - 1; i >= 0; i--) {
      const s = list[i];
      keep.add(s.scheduleId);
      let r = rows.get(s.scheduleId);
      if (!r) {
        r = newRow(s);
        rows.set(s.scheduleId, r);
      }
      const st = scheduleState(s);
      r.tr.dataset.state = st;
      r.link.textContent = s.description ? short(s.description, 120) : s.scheduleId;
      r.link.title = s.scheduleId;
      r.sub.replaceChildren(s.description ? s.scheduleId : `made ${fmtTime(parseTime(s.createdAt), now)}`);
      if (s.fromAgentsFile) r.sub.append(' ', r.file);
      const [kind, name] = targetOf(s, groups);
      r.target.replaceChildren(h('span', { class: 'kind-word', text: kind }), ' ', h('strong', { text: name }));
      r.when.replaceChildren(s.cron ? h('code', { text: s.cron }) : `every ${fmtEvery(parseDuration(s.interval))}`,
        s.cron ? h('span', { class: 'muted small', text: ` ${s.timeZone || 'UTC'}` }) : '');
      r.state.textContent = st;
      r.state.className = `badge st-${st}`;
      const next = parseTime((s.nextFireTimes || [])[0]);
      r.next.dataset.at = (s.nextFireTimes || [])[0] || '';
      r.next.textContent = Number.isFinite(next) ? fmtIn(next, now) : '—';
      r.next.title = Number.isFinite(next) ? `${fmtTime(next, now)} (${new Date(next).toISOString()})` : (st === 'paused' ? 'paused: nothing fires' : 'ended: no tick to come');
      drawLast(r, (s.recent || [])[0], now);
      if (r.tr.nextSibling !== before || r.tr.parentNode !== tbody) tbody.insertBefore(r.tr, before);
      before = r.tr;
    }
    for (const [id, r] of rows) {
      if (!keep.has(id)) {
        r.tr.remove();
        rows.delete(id);
      }
    }
    empty.hidden = list.length > 0;
    table.hidden = !list.length;
  }

  function drawLast(r, t, now) {
    r.lastNone.hidden = !!t;
    r.outcome.hidden = !t;
    r.lastWhen.hidden = !t;
    const runId = t?.runId || '';
    r.run.hidden = !runId;
    r.runStatus.hidden = !(runId && t.runStatus);
    r.tr.dataset.outcome = t ? outcomeWord(t.outcome) : '';
    r.tr.dataset.runId = runId;
    if (!t) return;
    const word = outcomeWord(t.outcome);
    r.outcome.textContent = word;
    r.outcome.className = `badge ${OUTCOME_CLASS[word] || ''}`;
    if (runId) {
      r.run.href = `#/runs/${encodeURIComponent(runId)}`;
      r.run.title = runId;
      r.run.textContent = shortId(runId);
    }
    if (runId && t.runStatus) {
      const sw = statusWord(t.runStatus);
      r.runStatus.textContent = sw;
      r.runStatus.className = `badge st-${sw}`;
      r.runStatus.dataset.status = t.runStatus;
    }
    const at = parseTime(t.tickAt);
    const extra = word === 'missed' && num(t.missed) ? ` · ${num(t.missed)} missed` : word === 'refused' && t.message ? ` · ${short(t.message, 100)}` : '';
    r.lastWhen.textContent = `${fmtAgo(at, now)}${extra}`;
    r.lastWhen.title = fmtTime(at, now);
  }

  let polling = null;
  async function poll() {
    const mine = {};
    polling = mine;
    try {
      const r = await api.listSchedules(stop.signal);
      if (polling !== mine) return;
      list = r.schedules || [];
      listState.textContent = `live · ${list.length} schedule${list.length === 1 ? '' : 's'}`;
      listState.dataset.state = 'ok';
      draw();
    } catch (e) {
      if (e.name === 'AbortError' || polling !== mine) return;
      listState.textContent = `cannot list schedules: ${e.describe ? e.describe() : e.message}`;
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

  main.replaceChildren(h('section', { class: 'schedules-page', 'data-testid': 'schedules-page', 'aria-labelledby': 'schedules-h' },
    h('div', { class: 'list-head' }, h('h1', { id: 'schedules-h', text: 'Schedules' }), listState),
    h('p', { class: 'muted small' }, 'Runs started at each tick of a cron expression or every interval. The agents file\'s first, then oldest first.'),
    table, empty));
  window.batonConsole = { seqs: [] };
  return { destroy() { stop.abort(); } };
}

/** One schedule: its definition, next fire times and recent ticks. */
export function openSchedule(main, id, app) {
  const stop = new AbortController();
  const groups = loadGroups(stop.signal);
  let record = null;
  /** Bumped by each action: a poll begun before it draws nothing. */
  let generation = 0;

  const title = h('span', { 'data-testid': 'schedule-title', text: id });
  const state = h('span', { class: 'badge', 'data-testid': 'schedule-state', 'aria-live': 'polite' });
  const facts = h('dl', { class: 'facts', 'data-testid': 'schedule-facts' });
  const request = h('pre', { 'data-testid': 'schedule-request' });
  const fileNote = h('p', { class: 'muted', 'data-testid': 'schedule-file-note', hidden: true });
  const pause = h('button', { type: 'button', class: 'btn', 'data-testid': 'schedule-pause', hidden: true }, 'Pause');
  const resume = h('button', { type: 'button', class: 'btn primary', 'data-testid': 'schedule-resume', hidden: true }, 'Resume');
  const del = h('button', { type: 'button', class: 'btn danger', 'data-testid': 'schedule-delete', hidden: true }, 'Delete…');
  const deleteBox = h('div', { class: 'delete-box', role: 'alertdialog', 'aria-label': 'Delete the schedule', 'data-testid': 'schedule-delete-box', hidden: true });
  const err = h('div', { class: 'error', role: 'alert', 'data-testid': 'schedule-error', hidden: true });
  const gone = h('p', { class: 'outcome gone', 'data-testid': 'schedule-gone', hidden: true, role: 'status' },
    'There is no such schedule: it was deleted, or belongs to another tenant.');
  const nextList = h('ol', { class: 'next-times', 'data-testid': 'schedule-next-times' });
  const noNext = h('p', { class: 'muted', 'data-testid': 'schedule-no-next', hidden: true });
  const tbody = h('tbody');
  const noTicks = h('p', { class: 'muted', 'data-testid': 'ticks-empty', hidden: true }, 'No tick yet.');
  const ticksTable = h('div', { class: 'table-scroll', hidden: true },
    h('table', { class: 'ticks fold-cards', 'data-testid': 'ticks-table' },
      h('caption', { class: 'sr-only', text: 'The schedule\'s recent ticks, newest first' }),
      h('thead', null, h('tr', null, ...['Tick', 'Outcome', 'Run', 'Note'].map((t, i) => h('th', { scope: 'col', class: `c${i}`, text: t })))),
      tbody));
  const body = h('div', { class: 'schedule-body', hidden: true },
    h('section', { 'aria-labelledby': 'next-h' },
      h('h2', { id: 'next-h', text: 'Next fire times' }), nextList, noNext),
    h('section', { 'aria-labelledby': 'ticks-h' },
      h('h2', { id: 'ticks-h', text: 'Recent ticks' }),
      h('p', { class: 'muted small' }, 'Newest first, the last 20: what each tick did, and the run it started (or the one still running when it was skipped or queued).'),
      ticksTable, noTicks));

  const pageEl = h('section', { class: 'schedule-page', 'data-testid': 'schedule-page', 'data-schedule-id': id, 'data-state': 'loading' },
    h('nav', { class: 'crumbs', 'aria-label': 'Breadcrumb' }, h('a', { href: '#/schedules' }, '← Schedules')),
    h('header', { class: 'run-head' },
      h('h1', null, title, ' ', state),
      facts,
      h('details', { class: 'schedule-request' }, h('summary', { text: 'The run it starts (the request)' }), request),
      fileNote,
      h('div', { class: 'actions' }, pause, resume, del),
      deleteBox, err, gone),
    body);
  main.replaceChildren(pageEl);
  window.batonConsole = { seqs: [] };

  /** A fact of the definition; `value`: a node, a text, or a list of them. */
  function fact(label, value, testid, wide = false) {
    return h('div', wide ? { class: 'wide' } : null, h('dt', { text: label }), h('dd', { 'data-testid': testid }, ...[].concat(value)));
  }
  function show(text) {
    err.textContent = text;
    err.hidden = !text;
  }

  let ticksKey = '';
  function draw(s) {
    record = s;
    const now = Date.now();
    const st = scheduleState(s);
    pageEl.dataset.state = st;
    title.textContent = s.description || s.scheduleId;
    document.title = `${short(s.description || shortId(s.scheduleId), 60)} · Schedule · Baton`;
    state.textContent = st;
    state.className = `badge st-${st}`;
    const [kind, name] = targetOf(s, groups);
    const [ow, ot] = policy(OVERLAP, s.overlap, 'SCHEDULE_OVERLAP_SKIP');
    const [mw, mt] = policy(MISSED, s.missed, 'SCHEDULE_MISSED_SKIP');
    const end = parseTime(s.endAt);
    const steps = s.pipeline?.pipeline?.steps || [];
    const input = s.pipeline
      ? `${steps.length} step${steps.length === 1 ? '' : 's'}: ${steps.map((x) => `${x.id} (${x.agent})`).join(' → ')}`
      : s.agent?.input || '(empty)';
    // In rows of four on a desktop: id, target, when / input, end, made /
    // the two policies, where it was declared.
    facts.replaceChildren(
      fact('Schedule', h('code', { text: s.scheduleId }), 'schedule-id', true),
      fact('Target', [kind, ' ', h('strong', { text: name })], 'schedule-target'),
      fact('When', s.cron ? [h('code', { text: s.cron }), ` in ${s.timeZone || 'UTC'}`] : `every ${fmtEvery(parseDuration(s.interval))}`, 'schedule-when'),
      fact(s.pipeline ? 'Steps' : 'Input', h('span', { class: 'input-text', text: input }), 'schedule-input', true),
      fact('Ends', Number.isFinite(end) ? h('span', { title: new Date(end).toISOString(), text: fmtTime(end, now) }) : 'never', 'schedule-end'),
      fact('Made', h('span', { title: s.createdAt || '', text: `${fmtTime(parseTime(s.createdAt), now)}` }), 'schedule-created'),
      fact('If still running', h('span', { title: ot, text: ow }), 'schedule-overlap'),
      fact('After downtime', h('span', { title: mt, text: mw }), 'schedule-missed'),
      fact('Declared', s.fromAgentsFile ? 'in the agents file' : 'through the API', 'schedule-origin'));
    request.textContent = pretty(JSON.stringify(s.pipeline ? { pipeline: s.pipeline } : { agent: s.agent || {} }));
    // The agents file's schedules change with the file: no buttons.
    const own = !s.fromAgentsFile;
    fileNote.hidden = own;
    if (!own) {
      const file = s.scheduleId.replace(/^file:/, '');
      fileNote.replaceChildren('Declared in the agents file, as ', h('code', { text: `schedules.${file}` }),
        ': it is paused, resumed or removed by changing the file, not from here.');
    }
    pause.hidden = !own || st !== 'active';
    resume.hidden = !own || st !== 'paused';
    del.hidden = !own;
    if (!own) deleteBox.hidden = true;
    gone.hidden = true;
    body.hidden = false;

    const next = (s.nextFireTimes || []).map(parseTime).filter(Number.isFinite);
    nextList.replaceChildren(...next.map((t) => h('li', { 'data-testid': 'schedule-next-time', 'data-at': new Date(t).toISOString() },
      h('span', { class: 'when', title: new Date(t).toISOString(), text: fmtTime(t, now) }), ' ', h('span', { class: 'muted', text: fmtIn(t, now) }))));
    noNext.hidden = next.length > 0;
    noNext.textContent = st === 'paused' ? 'None while it is paused: Resume fires it again from its next tick.' : 'None: it has ended.';

    // The ticks are drawn again only when they change (a focused link stays).
    const ticks = s.recent || [];
    const key = JSON.stringify(ticks);
    if (key !== ticksKey) {
      ticksKey = key;
      tbody.replaceChildren(...ticks.map((t) => tickRow(t, now)));
    }
    noTicks.hidden = ticks.length > 0;
    ticksTable.hidden = !ticks.length;
  }

  function tickRow(t, now) {
    const word = outcomeWord(t.outcome);
    const at = parseTime(t.tickAt);
    const handled = parseTime(t.handledAt);
    const late = handled - at;
    const notes = [];
    if (num(t.missed)) notes.push(h('span', { 'data-testid': 'tick-missed', text: `${num(t.missed)} tick${num(t.missed) === 1 ? '' : 's'} missed` }));
    if (t.message) notes.push(h('span', { class: 'reason', 'data-testid': 'tick-message', text: t.message }));
    if (word === 'skipped') notes.push(h('span', { class: 'muted', text: 'the run before it was still running' }));
    if (word === 'queued') notes.push(h('span', { class: 'muted', text: 'waits for the run before it to end' }));
    return h('tr', { 'data-testid': 'tick-row', 'data-outcome': word, 'data-run-id': t.runId || '', 'data-tick-at': t.tickAt || '' },
      h('td', { class: 'c0', 'data-label': 'Tick' }, h('div', { class: 'v' },
        h('span', { 'data-testid': 'tick-at', title: Number.isFinite(at) ? new Date(at).toISOString() : '', text: fmtTime(at, now) }),
        Number.isFinite(late) && late >= 1000 ? h('div', { class: 'muted small', text: `handled ${fmtTime(handled, now)}` }) : null)),
      h('td', { class: 'c1', 'data-label': 'Outcome' }, h('div', { class: 'v' }, badge(OUTCOME_CLASS[word] || '', word, 'tick-outcome'))),
      h('td', { class: 'c2', 'data-label': 'Run' }, h('div', { class: 'v tick-line' },
        t.runId ? runLink(t.runId, 'tick-run') : h('span', { class: 'muted', text: '—' }),
        t.runId && t.runStatus ? h('span', { class: `badge st-${statusWord(t.runStatus)}`, 'data-testid': 'tick-run-status', 'data-status': t.runStatus, text: statusWord(t.runStatus) }) : null)),
      h('td', { class: 'c3', 'data-label': 'Note' }, h('div', { class: 'v tick-notes' }, ...notes)));
  }

  let polling = null;
  async function poll() {
    const mine = { generation };
    polling = mine;
    try {
      const s = await api.getSchedule(id, stop.signal);
      if (polling !== mine || mine.generation !== generation) return true;
      draw(s);
    } catch (e) {
      if (e.name === 'AbortError' || polling !== mine) return true;
      if (e.code === 'NOT_FOUND') {
        pageEl.dataset.state = 'gone';
        gone.hidden = false;
        body.hidden = true;
        for (const b of [pause, resume, del]) b.hidden = true;
        deleteBox.hidden = true;
        return false;
      }
      pageEl.dataset.state = record ? pageEl.dataset.state : 'error';
      app.alert(e, 'schedule');
    }
    return true;
  }
  (async () => {
    while (!stop.signal.aborted) {
      if (!document.hidden && !(await poll())) return;
      await sleep(POLL_MS, stop.signal);
    }
  })();

  /** Runs an action of the buttons; draws the schedule it answers. */
  async function act(button, call, focusAfter) {
    generation++;
    button.disabled = true;
    show('');
    try {
      const s = await call();
      generation++;
      draw(s);
      if (focusAfter && !focusAfter.hidden) focusAfter.focus();
    } catch (e) {
      show(e.describe ? e.describe() : e.message);
    } finally {
      button.disabled = false;
    }
  }
  pause.addEventListener('click', () => act(pause, () => api.pauseSchedule(record ? record.scheduleId : id), resume));
  resume.addEventListener('click', () => act(resume, () => api.resumeSchedule(record ? record.scheduleId : id), pause));
  del.addEventListener('click', () => {
    deleteBox.hidden = false;
    const yes = h('button', { type: 'button', class: 'btn danger', 'data-testid': 'schedule-delete-confirm' }, 'Delete it');
    const no = h('button', { type: 'button', class: 'btn', 'data-testid': 'schedule-delete-cancel', on: { click: () => { deleteBox.hidden = true; del.focus(); } } }, 'Keep it');
    yes.addEventListener('click', async () => {
      yes.disabled = true;
      show('');
      try {
        await api.deleteSchedule(record ? record.scheduleId : id);
        location.hash = '#/schedules';
      } catch (e) {
        yes.disabled = false;
        show(e.describe ? e.describe() : e.message);
      }
    });
    deleteBox.replaceChildren(h('p', null, 'Delete this schedule? No tick fires after it; the runs it started are kept. This cannot be undone.'),
      h('div', { class: 'actions' }, yes, no));
    no.focus();
  });

  return { destroy() { stop.abort(); } };
}
