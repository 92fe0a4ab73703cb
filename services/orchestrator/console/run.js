// The page of one run (#/runs/{runId}): its summary, then tabs for the
// conversation tree, the pipeline graph, the timeline, the trace's slots
// and the raw events. The run's events are followed from seq 1 and, after
// a drop, from the last seq seen; duplicates are dropped, a gap makes the
// stream start again from the last seq, so the model sees 1, 2, 3, ...
// exactly once (window.batonConsole.seqs lists them).

import { api, ApiError, streamSSE } from './api.js';
import { GraphView } from './graph.js';
import { payloadKey, RunModel } from './model.js';
import { recallSpec } from './pipeline.js';
import { TimelineView } from './timeline.js';
import { TreeView } from './tree.js';
import {
  add, clear, codeName, fmtAgo, fmtBytes, fmtDuration, fmtInt, fmtTime, fmtUsage, h,
  kindWord, parseTime, shortId, sleep, statusWord,
} from './util.js';

/** A stream this quiet is taken for dead (the server sends keep-alives). */
const IDLE_MS = 45000;
/** While replaying a long run, draw at most this often. */
const CATCHUP_DRAW_MS = 300;
/** Errors that retrying cannot mend (ABORTED, a watcher that fell too far
 * behind, and UNAVAILABLE, a replica draining, are asked again from the
 * last seq). */
const FATAL = new Set(['NOT_FOUND', 'FAILED_PRECONDITION', 'UNAUTHENTICATED', 'PERMISSION_DENIED', 'INVALID_ARGUMENT', 'UNIMPLEMENTED', 'RESOURCE_EXHAUSTED']);

/** A link to the page of run `id`, by the end of its id. */
function runLink(id) {
  return h('a', { href: `#/runs/${encodeURIComponent(id)}`, 'data-testid': 'lineage-link', title: id }, h('code', { text: shortId(id) }));
}

/**
 * Opens the page of `runId` in `main` (`query`: the hash's parameters;
 * `pending` names an approval or question to show once it is drawn);
 * returns `{destroy()}`.
 */
export function openRun(main, runId, app, query = new URLSearchParams()) {
  const model = new RunModel(runId);
  const stop = new AbortController();
  const stats = { runId, seqs: model.seqs, duplicates: 0, gaps: 0, reconnects: 0, status: '', done: false, model };
  window.batonConsole = stats;
  const spec = recallSpec(runId);
  if (spec) model.setPipelineSpec(spec);

  // ---- the page ----
  const el = {};
  el.target = h('span', { 'data-testid': 'run-target', text: '…' });
  el.status = h('span', { class: 'badge', 'data-testid': 'run-status', 'aria-live': 'polite' });
  el.kind = h('dd', { 'data-testid': 'run-kind' });
  el.trace = h('dd', { 'data-testid': 'run-trace' });
  el.started = h('dd', { 'data-testid': 'run-started' });
  el.duration = h('dd', { 'data-testid': 'run-duration' });
  el.usage = h('dd', { 'data-testid': 'run-usage' });
  el.events = h('dd', { 'data-testid': 'run-events' });
  el.stream = h('dd', { 'data-testid': 'stream-state' });
  el.origin = h('dd', { 'data-testid': 'run-origin' });
  el.originFact = h('div', { hidden: true }, h('dt', { text: 'Forked from' }), el.origin);
  el.forks = h('dd', { 'data-testid': 'run-forks' });
  el.forksFact = h('div', { hidden: true }, h('dt', { text: 'Forks' }), el.forks);
  el.replayOf = h('dd', { 'data-testid': 'run-replay-of' });
  el.replayOfFact = h('div', { hidden: true }, h('dt', { text: 'Replay of' }), el.replayOf);
  el.experiment = h('dd', { 'data-testid': 'run-experiment' });
  el.experimentFact = h('div', { hidden: true }, h('dt', { text: 'Experiment' }), el.experiment);
  el.schedule = h('dd', { 'data-testid': 'run-schedule' });
  el.scheduleFact = h('div', { hidden: true }, h('dt', { text: 'Schedule' }), el.schedule);
  el.scores = h('dd', { 'data-testid': 'run-scores', class: 'scores' });
  el.scoresFact = h('div', { hidden: true, class: 'wide' }, h('dt', { text: 'Live scores' }), el.scores);
  el.replays = h('dd', { 'data-testid': 'run-replays' });
  el.replaysFact = h('div', { hidden: true }, h('dt', { text: 'Replays' }), el.replays);
  el.conversation = h('dd', { 'data-testid': 'run-conversation' });
  el.conversationFact = h('div', { hidden: true }, h('dt', { text: 'Conversation' }), el.conversation);
  el.continue = h('a', { class: 'btn', 'data-testid': 'continue-conversation', hidden: true }, 'Continue the conversation');
  el.replayBtn = h('button', { type: 'button', class: 'btn', 'data-testid': 'replay-run', hidden: true }, 'Replay…');
  el.replayBox = h('div', { class: 'fork-box', 'data-testid': 'replay-box', hidden: true, role: 'region', 'aria-label': 'Replay the run' });
  el.saveCaseBtn = h('button', { type: 'button', class: 'btn', 'data-testid': 'save-case', hidden: true }, 'Save as a test case…');
  el.saveCaseBox = h('div', { class: 'fork-box save-case', 'data-testid': 'save-case-box', hidden: true, role: 'region', 'aria-label': 'Save the run as a test case' });
  el.gone = h('div', { class: 'outcome gone', 'data-testid': 'history-gone', hidden: true, role: 'status' });
  el.forkBox = h('div', { class: 'fork-box', 'data-testid': 'fork-box', hidden: true, role: 'region', 'aria-label': 'Fork the run' });
  el.cancel = h('button', { type: 'button', class: 'btn danger', 'data-testid': 'cancel-run', disabled: true }, 'Cancel run');
  el.outcome = h('div', { class: 'outcome', 'data-testid': 'run-outcome', hidden: true });
  el.pending = h('div', { class: 'pending', 'data-testid': 'pending', hidden: true, role: 'region', 'aria-label': 'Waiting for you' });
  el.replay = h('div', { class: 'replay muted', 'data-testid': 'replay-progress', hidden: true, 'aria-live': 'polite' });
  // A wide fact (an id, the usage) takes two columns: its id does not break.
  const fact = (label, dd, wide = false) => h('div', wide ? { class: 'wide' } : null, h('dt', { text: label }), dd);
  const expandAll = h('button', { type: 'button', class: 'btn', 'data-testid': 'expand-all' }, 'Expand all');
  const collapseAll = h('button', { type: 'button', class: 'btn', 'data-testid': 'collapse-all' }, 'Collapse all');

  const tabs = [
    ['conversation', 'Conversation'],
    ['graph', 'Pipeline graph'],
    ['timeline', 'Timeline'],
    ['slots', 'Slots'],
    ['events', 'Raw events'],
  ];
  const tabBtn = {};
  const panel = {};
  const tablist = h('div', { class: 'tabs', role: 'tablist', 'aria-label': 'Views of the run' });
  for (const [id, label] of tabs) {
    tabBtn[id] = h('button', {
      type: 'button', role: 'tab', id: `tab-${id}`, 'aria-controls': `panel-${id}`, 'aria-selected': 'false',
      tabindex: '-1', 'data-testid': `tab-${id}`, on: { click: () => select(id) },
    }, label);
    panel[id] = h('section', { role: 'tabpanel', id: `panel-${id}`, 'aria-labelledby': `tab-${id}`, class: 'panel', hidden: true });
    tablist.append(tabBtn[id]);
  }
  tabBtn.graph.hidden = true;
  tablist.addEventListener('keydown', (e) => {
    if (e.key !== 'ArrowRight' && e.key !== 'ArrowLeft') return;
    const shown = tabs.map(([id]) => id).filter((id) => !tabBtn[id].hidden);
    const i = shown.indexOf(active);
    const next = shown[(i + (e.key === 'ArrowRight' ? 1 : shown.length - 1)) % shown.length];
    select(next);
    tabBtn[next].focus();
  });
  panel.conversation.append(h('div', { class: 'tree-tools' }, expandAll, collapseAll));
  const treeBox = h('div', { class: 'tree', 'data-testid': 'tree' });
  panel.conversation.append(treeBox);
  const timelineBox = h('div');
  panel.timeline.append(timelineBox);
  const graphBox = h('div');
  panel.graph.append(graphBox);
  const eventsBox = h('pre', { class: 'raw', 'data-testid': 'raw-events' });
  panel.events.append(h('p', { class: 'muted', text: 'The last 200 events, as the API sent them.' }), eventsBox);
  const slots = new SlotsPanel(panel.slots, () => model.traceId, app);

  clear(main).append(h('div', { class: 'run-page', 'data-testid': 'run-page', 'data-run-id': runId },
    h('nav', { class: 'crumbs', 'aria-label': 'Breadcrumb' }, h('a', { href: '#/runs' }, '← Runs')),
    h('header', { class: 'run-head' },
      h('h1', null, el.target, ' ', el.status),
      h('dl', { class: 'facts' },
        fact('Run', h('dd', null, h('code', { 'data-testid': 'run-id', text: runId })), true),
        fact('Kind', el.kind), fact('Trace', el.trace, true), fact('Started', el.started),
        fact('Duration', el.duration), fact('Usage', el.usage, true), fact('Events', el.events), fact('Stream', el.stream),
        el.conversationFact, el.experimentFact, el.scheduleFact, el.scoresFact, el.originFact, el.forksFact, el.replayOfFact, el.replaysFact),
      h('div', { class: 'actions' }, el.continue, el.cancel, el.replayBtn, el.saveCaseBtn),
      el.gone, el.outcome, el.replay, el.forkBox, el.replayBox, el.saveCaseBox, el.pending),
    tablist, ...Object.values(panel)));

  // ---- views ----
  const tree = new TreeView(model, treeBox, {
    approve: (item, approved, reason) => api.resolveApproval(runId, item.approvalId, approved, reason),
    answer: (item, text) => api.submitInput(runId, item.inputId, text),
    fork: (item) => openFork(item),
  });
  const graph = new GraphView(model, graphBox, (step) => {
    const ctx = model.contexts.get(step.ctxId);
    if (!ctx) return;
    select('conversation');
    tree.reveal(ctx.parentItem, false);
    if (!ctx._r.body) tree.toggle(ctx);
    ctx._r.sec.scrollIntoView({ block: 'start' });
    ctx._r.toggle.focus({ preventScroll: true });
  });
  const timeline = new TimelineView(model, timelineBox);
  expandAll.addEventListener('click', () => tree.expandAll());
  collapseAll.addEventListener('click', () => tree.collapseAll());

  let active = '';
  function select(id) {
    if (active === id) return;
    if (active) {
      tabBtn[active].setAttribute('aria-selected', 'false');
      tabBtn[active].tabIndex = -1;
      panel[active].hidden = true;
      if (active === 'slots') slots.deactivate();
    }
    active = id;
    tabBtn[id].setAttribute('aria-selected', 'true');
    tabBtn[id].tabIndex = 0;
    panel[id].hidden = false;
    if (id === 'slots') slots.activate();
    if (id === 'timeline') timeline.flush(true);
    if (id === 'graph') {
      model.graphDirty = true;
      graph.flush();
    }
    if (id === 'events') drawRaw();
  }
  select('conversation');

  // ---- drawing ----
  let catchUpTo = 0;
  /** The approval or question id the page was opened for (`?pending=`), until shown. */
  let jumpTo = query.get('pending') || '';
  let streamState = 'loading';
  let rawAt = 0;
  const catchingUp = () => model.lastSeq < catchUpTo && !model.terminal;

  let frameQueued = false;
  let timerQueued = 0;
  function schedule() {
    if (catchingUp()) {
      if (!timerQueued) timerQueued = setTimeout(() => { timerQueued = 0; draw(); }, CATCHUP_DRAW_MS);
      return;
    }
    if (frameQueued) return;
    frameQueued = true;
    requestAnimationFrame(() => {
      frameQueued = false;
      draw();
    });
  }

  function draw() {
    if (stop.signal.aborted) return;
    const replaying = catchingUp();
    tree.flush(!replaying);
    if (model.summaryDirty) drawSummary();
    if (active === 'graph') graph.flush();
    if (active === 'timeline') timeline.flush(false);
    if (active === 'events' && Date.now() - rawAt > 1000) drawRaw();
    if (active === 'slots' && model.slotsDirty) {
      model.slotsDirty = false;
      slots.refreshSoon();
    }
    if ((model.pipelines.size || model.kind === 'RUN_KIND_PIPELINE') && tabBtn.graph.hidden) tabBtn.graph.hidden = false;
    el.events.textContent = fmtInt(model.lastSeq);
    el.replay.hidden = !replaying;
    if (replaying) el.replay.textContent = `Loading events: ${fmtInt(model.lastSeq)} of ${fmtInt(catchUpTo)}…`;
    drawPending();
    if (jumpTo && !replaying) jumpToPending();
    stats.status = model.status;
  }

  function drawSummary() {
    model.summaryDirty = false;
    el.target.textContent = model.target || '…';
    // A running run that waits for a person says so, and on what.
    const waits = model.status === 'RUN_STATUS_RUNNING' && !model.terminal ? model.waitingFor() : [];
    const word = waits.length ? 'waiting' : statusWord(model.status);
    el.status.textContent = waits.length ? `waiting for ${waits.join(' and ')}` : word;
    el.status.className = `badge st-${word}`;
    el.status.dataset.status = model.status || '';
    el.status.dataset.waiting = waits.join(',');
    el.kind.textContent = kindWord(model.kind) || '—';
    drawTrace();
    drawLineage();
    drawStarted();
    drawDuration();
    el.usage.textContent = fmtUsage(model.usage) || '—';
    // Only a run that can still be cancelled offers it.
    el.cancel.hidden = model.status !== 'RUN_STATUS_RUNNING' || model.terminal;
    el.cancel.disabled = el.cancel.hidden || cancelling;
    // An ended run whose history is kept can be replayed.
    el.replayBtn.hidden = !(model.terminal || (model.status && model.status !== 'RUN_STATUS_RUNNING')) || model.historyGone;
    el.saveCaseBtn.hidden = el.replayBtn.hidden || model.kind === 'RUN_KIND_PIPELINE';
    clear(el.outcome);
    el.outcome.hidden = true;
    if (model.error) {
      el.outcome.hidden = false;
      el.outcome.className = 'outcome failed';
      el.outcome.append(h('strong', { text: 'Failed: ' }),
        h('code', { 'data-testid': 'run-error-code', 'data-code': model.error.code, text: `${codeName(model.error.code)} (${model.error.code})` }),
        ' ', h('span', { 'data-testid': 'run-error-message', text: model.error.message }));
    } else if (model.status === 'RUN_STATUS_CANCELLED') {
      el.outcome.hidden = false;
      el.outcome.className = 'outcome cancelled';
      el.outcome.append(h('strong', { text: 'Cancelled' }), model.cancelReason ? `: ${model.cancelReason}` : '');
    } else if (model.status === 'RUN_STATUS_COMPLETED' && model.output) {
      el.outcome.hidden = false;
      el.outcome.className = 'outcome completed';
      add(el.outcome,
        h('details', { open: model.output.length < 400 },
          h('summary', null, h('strong', { text: 'Output' })),
          h('div', { class: 'output', 'data-testid': 'run-output', text: model.output })),
        model.runContextJson && model.runContextJson !== '{}'
          ? h('details', null, h('summary', { text: 'Run context' }), h('pre', { text: model.runContextJson }))
          : null);
    }
  }

  function drawLineage() {
    // Its live scores (the agent's scoring), once scored.
    el.scoresFact.hidden = !model.scores.length;
    if (model.scores.length && el.scores.childElementCount !== model.scores.length) {
      el.scores.replaceChildren(...model.scores.map((s) =>
        h('span', { class: `score ${s.passed ? 'ok' : 'bad'}`, title: s.reason, 'data-testid': 'run-score' },
          `${s.scorer} ${Number(s.score || 0).toFixed(2)}`)));
    }
    // A case of an experiment: the way to its scores.
    el.experimentFact.hidden = !model.experimentId;
    if (model.experimentId && el.experiment.dataset.id !== model.experimentId) {
      el.experiment.dataset.id = model.experimentId;
      el.experiment.replaceChildren(h('a', { href: `#/experiments/${encodeURIComponent(model.experimentId)}`, title: model.experimentId },
        h('code', { text: shortId(model.experimentId) })));
    }
    // A run a schedule started: the way to the schedule, and its tick.
    el.scheduleFact.hidden = !model.scheduleId;
    if (model.scheduleId && el.schedule.dataset.id !== model.scheduleId) {
      el.schedule.dataset.id = model.scheduleId;
      el.schedule.replaceChildren(h('a', { href: `#/schedules/${encodeURIComponent(model.scheduleId)}`, title: model.scheduleId, 'data-testid': 'run-schedule-link' },
        h('code', { text: shortId(model.scheduleId) })),
      Number.isFinite(model.scheduleTickAt) ? ` · tick ${fmtTime(model.scheduleTickAt)}` : '');
    }
    // A run of a conversation: the way back to it, to say the next thing.
    const conv = model.conversationId;
    el.conversationFact.hidden = !conv;
    el.continue.hidden = !conv;
    if (conv && el.continue.dataset.conversationId !== conv) {
      const href = `#/conversations/${encodeURIComponent(conv)}`;
      el.continue.dataset.conversationId = conv;
      el.continue.href = href;
      clear(el.conversation).append(h('a', { href, 'data-testid': 'run-conversation-id', title: conv }, h('code', { text: shortId(conv) })));
    }
    el.originFact.hidden = !model.forkedFrom;
    clear(el.origin);
    if (model.forkedFrom) {
      const o = model.forkedFrom;
      el.origin.append(runLink(o.runId), ` at seq ${o.seq}`,
        model.replayedCount ? h('span', { class: 'muted', text: ` · ${fmtInt(model.replayedCount)} events replayed` }) : '');
    }
    el.replayOfFact.hidden = !model.replayOf;
    clear(el.replayOf);
    if (model.replayOf) {
      const s = model.replayStats;
      const d = model.divergedAt;
      el.replayOf.append(runLink(model.replayOf), model.strict ? ' · strict' : '',
        s ? h('span', { 'data-testid': 'replay-stats', class: s.diverged ? 'replay-diverged' : 'replay-matched',
          text: ` · ${fmtInt(s.matchedCalls)} of ${fmtInt(s.calls)} calls matched the recording${s.diverged ? '; it diverged' : ''}` }) : '',
        d ? h('span', { class: 'muted', text: ` (in ${d.ctx} at ${d.at})` }) : '');
    }
    el.gone.hidden = !model.historyGone;
    if (model.historyGone) {
      el.gone.textContent = 'This run\'s history is no longer kept: it was evicted to make room for newer runs (runs.max_finished_bytes). Its result is below; it cannot be watched, forked or replayed.';
    }
  }

  async function loadForks() {
    try {
      const page = await api.listRuns({ pageSize: 200 }, stop.signal);
      const forks = (page.runs || []).filter((r) => r.forkedFrom && r.forkedFrom.runId === runId);
      el.forksFact.hidden = !forks.length;
      clear(el.forks);
      forks.forEach((r, i) => {
        if (i) el.forks.append(', ');
        el.forks.append(runLink(r.runId), ` at seq ${Number(r.forkedFrom.seq || 0)}`);
      });
      const replays = (page.runs || []).filter((r) => r.replayOf === runId);
      el.replaysFact.hidden = !replays.length;
      clear(el.replays);
      replays.forEach((r, i) => {
        if (i) el.replays.append(', ');
        // A replay that differed from its recording says so: "completed"
        // alone read as "reproduced".
        const word = r.replayDiverged ? `diverged, then ${statusWord(r.status)}` : statusWord(r.status);
        el.replays.append(runLink(r.runId), ` ${word}`);
      });
    } catch {
      /* the list is a convenience */
    }
  }

  // ---- saving as a test case (docs/evaluations.md) ----
  el.saveCaseBtn.addEventListener('click', () => {
    el.saveCaseBox.replaceChildren();
    el.saveCaseBox.hidden = false;
    const inline = h('input', { type: 'checkbox', id: 'case-inline', 'data-testid': 'case-inline', checked: true });
    const go = h('button', { type: 'submit', class: 'btn primary', 'data-testid': 'save-case-submit' }, 'Make the case');
    const close = h('button', { type: 'button', class: 'btn', on: { click: () => { el.saveCaseBox.hidden = true; } } }, 'Close');
    const out = h('div', { 'data-testid': 'save-case-out' });
    const form = h('form', { class: 'fork-form' },
      h('strong', { text: 'Save as a test case' }),
      h('p', { class: 'muted', text: 'A dataset line for baton eval: this run\'s input, its answer as expected, its tool calls as expected, and its recorded tool results, which answer the case\'s tool calls when it runs (tools: recorded).' }),
      h('label', { for: 'case-inline', class: 'fork-check' }, inline, 'Keep the recorded results in the case (it outlives the run\'s retention)'),
      h('div', { class: 'actions' }, go, close), out);
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      go.disabled = true;
      try {
        const r = await api.saveCase(runId, inline.checked);
        const line = r.caseJson + '\n';
        const url = URL.createObjectURL(new Blob([line], { type: 'application/jsonl' }));
        const copy = h('button', { type: 'button', class: 'btn', 'data-testid': 'save-case-copy' }, 'Copy');
        copy.addEventListener('click', () => navigator.clipboard?.writeText(line).then(() => { copy.textContent = 'Copied'; }, () => {}));
        out.replaceChildren(h('pre', { 'data-testid': 'save-case-json', text: r.caseJson }),
          h('div', { class: 'actions' }, copy,
            h('a', { class: 'btn', href: url, download: `case-${shortId(runId)}.jsonl`, 'data-testid': 'save-case-download' }, 'Download .jsonl')),
          h('p', { class: 'muted small', text: 'Append it to a dataset, then: baton eval cases.jsonl' }));
      } catch (err) {
        app.alert(err);
      } finally {
        go.disabled = false;
      }
    });
    el.saveCaseBox.append(form);
    go.focus();
  });

  // ---- replaying ----
  el.replayBtn.addEventListener('click', () => {
    clear(el.replayBox);
    el.replayBox.hidden = false;
    const strict = h('input', { type: 'checkbox', id: 'replay-strict', 'data-testid': 'replay-strict', checked: true });
    const go = h('button', { type: 'submit', class: 'btn primary', 'data-testid': 'replay-submit' }, 'Replay');
    const close = h('button', { type: 'button', class: 'btn', 'data-testid': 'replay-cancel', on: { click: () => { el.replayBox.hidden = true; } } }, 'Close');
    const form = h('form', { class: 'fork-form' },
      h('strong', { text: 'Replay against today\'s agents' }),
      h('p', { class: 'muted', text: 'The run\'s request runs again. Each model call and tool call that asks what this run asked is answered from its recording; people are not asked again. The first request that differs is shown where it happened.' }),
      h('label', { for: 'replay-strict', class: 'fork-check' }, strict, 'Strict: fail at the first difference (does the agent still do what it did?); otherwise go live from there'),
      h('div', { class: 'actions' }, go, close));
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      go.disabled = true;
      try {
        const r = await api.replay(runId, strict.checked);
        location.hash = `#/runs/${encodeURIComponent(r.runId)}`;
      } catch (err) {
        app.alert(err);
        go.disabled = false;
      }
    });
    el.replayBox.append(form);
    go.focus();
  });

  // ---- forking ----
  /** What each fork point's edit changes, as a person says it. */
  const EDIT_NOUN = {
    modelTurn: 'model\'s answer', toolResult: 'tool\'s result', approval: 'decision',
    input: 'person\'s answer', stepOutput: 'step\'s output',
  };
  /** What the fork point is, where: "summarizer's result in root". */
  function forkPointName(item) {
    const where = item.ctx && item.ctx.id ? ` in ${item.ctx.id}` : '';
    switch (item.forkKind) {
      case 'modelTurn': return `${item.agent || 'the model'}'s answer${where}`;
      case 'toolResult': return `${item.tool}'s result${where}`;
      case 'approval': return `the approval of ${item.tool || 'a tool'}${where}`;
      case 'input': return `the answer to ${item.tool || 'a tool'}'s question${where}`;
      default: return `step ${item.stepId || ''}'s output${where}`;
    }
  }
  /** The editable rows of a model turn's tool calls: kept unless removed. */
  function callRows(calls) {
    const rows = calls.map((c, i) => {
      const tool = h('input', { type: 'text', value: c.tool || '', 'data-testid': 'fork-call-tool', 'aria-label': `Tool of call ${i + 1}` });
      tool.value = c.tool || '';
      const args = h('textarea', { rows: '2', 'data-testid': 'fork-call-args', 'aria-label': `Arguments of call ${i + 1} (JSON)` });
      args.value = c.argumentsJson || '{}';
      const row = h('div', { class: 'fork-call', 'data-testid': 'fork-call' },
        h('div', { class: 'actions' }, h('strong', { text: `Tool call ${i + 1}` }), tool,
          h('button', { type: 'button', class: 'btn small', 'data-testid': 'fork-call-remove', on: { click: () => { row.remove(); row.removed = true; } } }, 'Remove')),
        args);
      row.read = () => ({ callId: c.callId || String(i + 1), tool: tool.value.trim(), argumentsJson: args.value });
      return row;
    });
    return rows;
  }
  function openFork(item) {
    clear(el.forkBox);
    el.forkBox.hidden = false;
    const kind = item.forkKind;
    const noun = EDIT_NOUN[kind];
    const current = kind === 'modelTurn' ? item.text : kind === 'toolResult' ? (item.error || item.result)
      : kind === 'input' ? item.answer : kind === 'stepOutput' ? (item.output || '') : '';
    const retry = h('input', { type: 'radio', name: 'fork-mode', value: 'retry', id: 'fork-retry', 'data-testid': 'fork-retry' });
    const edit = h('input', { type: 'radio', name: 'fork-mode', value: 'edit', id: 'fork-edit', checked: true, 'data-testid': 'fork-edit' });
    const text = h('textarea', { rows: '4', 'data-testid': 'fork-text', 'aria-label': `The ${noun}, edited` });
    text.value = current || '';
    const decision = h('select', { 'data-testid': 'fork-decision', 'aria-label': 'Decision' },
      h('option', { value: 'approve', text: 'Approve' }), h('option', { value: 'deny', text: 'Deny' }));
    if (item.resolved && item.resolved.approved) decision.value = 'deny';
    const reason = h('input', { type: 'text', 'data-testid': 'fork-reason', placeholder: 'reason (optional)', 'aria-label': 'Reason' });
    const isError = h('input', { type: 'checkbox', id: 'fork-error', 'data-testid': 'fork-is-error' });
    const calls = kind === 'modelTurn' ? callRows(item.toolCalls || []) : [];
    const callsBox = kind === 'modelTurn' && calls.length
      ? h('div', { class: 'fork-calls', 'data-testid': 'fork-calls' },
        h('p', { class: 'muted', text: 'The turn\'s tool calls are kept unless you remove them.' }), ...calls)
      : null;
    const go = h('button', { type: 'submit', class: 'btn primary', 'data-testid': 'fork-submit' }, 'Fork');
    const close = h('button', { type: 'button', class: 'btn', 'data-testid': 'fork-cancel', on: { click: () => { el.forkBox.hidden = true; } } }, 'Close');
    const problem = h('div', { class: 'error', role: 'alert', 'data-testid': 'fork-problem', hidden: true });
    const form = h('form', { class: 'fork-form' },
      h('strong', { 'data-testid': 'fork-title', text: `Fork at seq ${item.forkSeq}: ${forkPointName(item)}` }),
      h('p', { class: 'muted', text: 'Everything before this point is replayed from the recording: no model, tool or person is asked again. From here the fork runs live.' }),
      h('div', { class: 'fork-modes' },
        h('label', { for: 'fork-edit' }, edit, `Change the ${noun}`),
        h('label', { for: 'fork-retry' }, retry, 'Do it again, live (a retry)')),
      kind === 'approval' ? h('div', { class: 'actions' }, decision, reason) : text,
      callsBox,
      kind === 'toolResult' ? h('label', { for: 'fork-error', class: 'fork-check' }, isError, 'The result is an error') : null,
      problem,
      h('div', { class: 'actions' }, go, close));
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      problem.hidden = true;
      let body = null;
      if (edit.checked) {
        if (kind === 'modelTurn') {
          const toolCalls = calls.filter((r) => !r.removed).map((r) => r.read());
          if (!text.value.trim() && !toolCalls.length) {
            problem.textContent = 'Give the model\'s answer a text or keep one of its tool calls: a turn with neither says nothing.';
            problem.hidden = false;
            return;
          }
          body = { modelTurn: { text: text.value, toolCalls } };
        } else if (kind === 'toolResult') body = { toolResult: { result: text.value, isError: isError.checked } };
        else if (kind === 'approval') body = { approval: { approved: decision.value === 'approve', reason: reason.value } };
        else if (kind === 'input') body = { input: text.value };
        else body = { stepOutput: text.value };
      }
      go.disabled = true;
      try {
        const r = await api.fork(runId, item.forkSeq, body);
        location.hash = `#/runs/${encodeURIComponent(r.runId)}`;
      } catch (err) {
        app.alert(err);
        go.disabled = false;
      }
    });
    el.forkBox.append(form);
    // Beside the point it forks at, not at the top of the page.
    if (item._el && item._el.isConnected) item._el.after(el.forkBox);
    el.forkBox.scrollIntoView({ block: 'nearest' });
    (kind === 'approval' ? decision : text).focus({ preventScroll: true });
  }

  function drawTrace() {
    clear(el.trace);
    const id = model.traceId;
    if (!id) {
      el.trace.textContent = '—';
      return;
    }
    const tpl = app.config.traceUrl || '';
    const url = tpl ? tpl.replaceAll('{trace_id}', id) : '';
    if (/^https?:\/\//i.test(url)) {
      el.trace.append(h('a', { href: url, target: '_blank', rel: 'noopener noreferrer', 'data-testid': 'trace-id', 'data-trace-id': id }, h('code', { text: id })));
    } else {
      el.trace.append(h('code', { 'data-testid': 'trace-id', 'data-trace-id': id, text: id }));
    }
  }

  /** When it started, and how long ago (kept current by the tick). */
  function drawStarted() {
    const at = model.startedAt;
    el.started.textContent = Number.isFinite(at) ? `${fmtTime(at)} (${fmtAgo(at)})` : '—';
    el.started.title = Number.isFinite(at) ? new Date(at).toISOString() : '';
  }

  function drawDuration() {
    const start = Number.isFinite(model.startedAt) ? model.startedAt : model.firstMs;
    const end = Number.isFinite(model.endedAt) ? model.endedAt : model.terminal ? model.lastMs : Date.now();
    el.duration.textContent = Number.isFinite(start) ? fmtDuration(end - start) : '—';
  }

  function setStream(state, note = '') {
    streamState = state;
    el.stream.dataset.state = state;
    el.stream.textContent = note ? `${state}: ${note}` : state;
    el.stream.className = `stream-${state}`;
  }

  let pendingKey = '';
  function drawPending() {
    const items = [...model.pending.values()];
    const key = items.map((i) => `${i.kind}:${i.approvalId || i.inputId}`).join(',');
    if (key === pendingKey) return;
    pendingKey = key;
    clear(el.pending);
    el.pending.hidden = !items.length;
    if (!items.length) return;
    el.pending.append(h('strong', { text: `Waiting for you (${items.length}): ` }));
    const list = h('ul');
    for (const item of items.slice(0, 8)) {
      const what = item.kind === 'approval'
        ? (item.tool === 'raise_budget' ? 'raise a budget' : `approve ${item.tool}`)
        : `answer ${item.tool}: ${item.prompt}`;
      list.append(h('li', null,
        h('button', {
          type: 'button', class: 'link', 'data-testid': 'pending-jump',
          on: { click: () => { select('conversation'); tree.reveal(item, true); } },
        }, what), ' in ', h('code', { text: item.ctx.id })));
    }
    el.pending.append(list);
  }

  // Opened from a link to one approval or question (`?pending=<id>`, as the
  // chat links it): the first time it is drawn, the tree shows it, in view,
  // as its "Waiting for you" button does.
  function jumpToPending() {
    const item = [...model.pending.values()].find((i) => (i.approvalId || i.inputId) === jumpTo);
    if (!item) {
      // Answered already and the run ended: nothing to show any more.
      if (model.terminal) jumpTo = '';
      return;
    }
    select('conversation');
    tree.reveal(item, true);
    if (item._el) jumpTo = '';
  }

  function drawRaw() {
    rawAt = Date.now();
    eventsBox.textContent = model.recentEvents().map((e) => JSON.stringify(e)).join('\n') || 'No events yet.';
  }

  // ---- actions ----
  let cancelling = false;
  el.cancel.addEventListener('click', async () => {
    cancelling = true;
    el.cancel.disabled = true;
    el.cancel.textContent = 'Cancelling…';
    try {
      const r = await api.cancel(runId, 'cancelled from the console');
      if (r.status && !model.terminal) {
        model.status = r.status;
        model.summaryDirty = true;
      }
    } catch (e) {
      app.alert(e);
      cancelling = false;
    }
    el.cancel.textContent = 'Cancel run';
    model.summaryDirty = true;
    schedule();
  });

  // ---- following the events ----
  /** GetRun; the error when it failed (shown), else null. */
  async function loadRun() {
    try {
      const r = await api.getRun(runId, stop.signal);
      model.applyRun(r);
      catchUpTo = Math.max(catchUpTo, Number(r.lastSeq || 0));
      schedule();
      return null;
    } catch (e) {
      if (e.name === 'AbortError') return e;
      app.alert(e);
      return e;
    }
  }

  async function follow() {
    let backoff = 250;
    let streamCtrl = null;
    stop.signal.addEventListener('abort', () => streamCtrl?.abort());
    while (!stop.signal.aborted && !model.terminal) {
      streamCtrl = new AbortController();
      const ctrl = streamCtrl;
      let gap = false;
      const before = model.lastSeq;
      setStream(model.lastSeq ? 'reconnecting' : 'loading');
      try {
        await streamSSE(api.eventsPath(runId, model.lastSeq), (frames) => {
          if (gap) return;
          for (const f of frames) {
            let ev;
            try {
              ev = JSON.parse(f.data);
            } catch {
              continue;
            }
            if (f.event === 'error') {
              // The server ends a failing stream with `{code, message, field}`.
              schedule();
              throw new ApiError(0, String(ev.code || 'UNKNOWN'), ev.message, ev.field);
            }
            const seq = Number(ev.seq || f.id || 0);
            if (seq <= model.lastSeq) {
              stats.duplicates++;
              continue;
            }
            if (seq !== model.lastSeq + 1) {
              // Never skip: start again right after the last seq we have.
              stats.gaps++;
              gap = true;
              ctrl.abort();
              break;
            }
            model.apply(ev, payloadKey(ev, f.event), seq);
          }
          schedule();
        }, { signal: ctrl.signal, idleMs: IDLE_MS, onOpen: () => setStream('live') });
      } catch (e) {
        if (stop.signal.aborted) return;
        if (!gap && e instanceof ApiError && FATAL.has(e.code)) {
          setStream('error', e.describe());
          app.alert(e);
          await loadRun();
          schedule();
          pollWhileBroken();
          return;
        }
        if (!gap && !(e instanceof ApiError) && e.name !== 'AbortError') {
          setStream('reconnecting', String(e.message || e));
        } else if (e instanceof ApiError) {
          setStream('reconnecting', e.describe());
        }
      }
      if (model.terminal || stop.signal.aborted) break;
      stats.reconnects++;
      if (model.lastSeq > before) backoff = 250;
      if (gap) setStream('reconnecting', `seq ${model.lastSeq + 1} was skipped; asking again from there`);
      // A gap right after progress is retried at once; one that repeats backs off.
      await sleep(gap && model.lastSeq > before ? 0 : backoff, stop.signal);
      backoff = Math.min(backoff * 2, 5000);
    }
    if (model.terminal) {
      setStream('ended');
      stats.done = true;
      schedule();
      // GetRun has the final word on output and totals.
      await sleep(200, stop.signal);
      if (!stop.signal.aborted) await loadRun();
      schedule();
    }
  }

  async function pollWhileBroken() {
    while (!stop.signal.aborted && model.status === 'RUN_STATUS_RUNNING') {
      await sleep(5000, stop.signal);
      if (!stop.signal.aborted) await loadRun();
    }
  }

  const tick = setInterval(() => {
    if (document.hidden) return;
    drawStarted();
    if (!model.terminal && model.status === 'RUN_STATUS_RUNNING') {
      drawDuration();
      if (active === 'timeline') timeline.flush(true);
      if (active === 'graph') {
        model.graphDirty = true;
        graph.flush();
      }
    }
  }, 1000);

  (async () => {
    const err = await loadRun();
    if (stop.signal.aborted) return;
    loadForks();
    if (!err && model.historyGone) {
      // Nothing to follow: GetRun's result is what is left.
      setStream('history gone');
      schedule();
      return;
    }
    if (err && FATAL.has(err.code)) {
      setStream('error', err.describe ? err.describe() : String(err.message));
      schedule();
      return;
    }
    follow();
  })();

  return {
    destroy() {
      stop.abort();
      clearInterval(tick);
      slots.deactivate();
    },
  };
}

/** The slots of the run's trace in the context store, kept live while shown. */
class SlotsPanel {
  constructor(container, traceId, app) {
    this.container = container;
    this.traceId = traceId;
    this.app = app;
    this.ctrl = null;
    this.timer = 0;
    this.flash = new Map();
    this.note = h('p', { class: 'muted', 'data-testid': 'slots-state', 'aria-live': 'polite' });
    this.body = h('tbody');
    this.table = h('table', { class: 'slots', 'data-testid': 'slots', hidden: true },
      h('caption', { class: 'sr-only', text: 'Slots of the trace' }),
      h('thead', null, h('tr', null, ...['Key', 'Type', 'Version', 'Size', 'Expires'].map((t) => h('th', { scope: 'col', text: t })))),
      this.body);
    container.append(this.note, h('div', { class: 'table-scroll' }, this.table));
  }

  activate() {
    if (this.ctrl) return;
    this.ctrl = new AbortController();
    this.refresh();
    this.watch(this.ctrl.signal);
  }

  deactivate() {
    this.ctrl?.abort();
    this.ctrl = null;
    clearTimeout(this.timer);
    this.timer = 0;
  }

  refreshSoon() {
    if (!this.ctrl || this.timer) return;
    this.timer = setTimeout(() => {
      this.timer = 0;
      this.refresh();
    }, 300);
  }

  async refresh() {
    const trace = this.traceId();
    if (!trace) {
      this.note.textContent = 'No trace id yet.';
      return;
    }
    const signal = this.ctrl?.signal;
    try {
      const r = await api.slots(trace, signal);
      this.draw(r.slots || []);
    } catch (e) {
      if (e.name === 'AbortError') return;
      if (e.status === 404) this.unavailable();
      else this.note.textContent = `Cannot list slots: ${e.describe ? e.describe() : e.message}`;
    }
  }

  unavailable() {
    this.table.hidden = true;
    this.note.dataset.state = 'unavailable';
    this.note.setAttribute('data-testid', 'slots-unavailable');
    this.note.textContent = 'Slots unavailable: this orchestrator does not serve the context store\'s slots.';
    this.deactivate();
  }

  draw(slots) {
    this.note.setAttribute('data-testid', 'slots-state');
    this.note.dataset.state = 'ok';
    this.note.textContent = slots.length ? `${slots.length} slot${slots.length === 1 ? '' : 's'} in the trace.` : 'The trace has no slots (a pipeline deletes its own when it ends, unless keep_context).';
    this.table.hidden = !slots.length;
    clear(this.body);
    const now = Date.now();
    for (const s of slots.slice().sort((a, b) => String(a.key).localeCompare(String(b.key)))) {
      const exp = parseTime(s.expiresAt);
      const flash = this.flash.get(s.key);
      this.body.append(h('tr', { 'data-testid': 'slot-row', 'data-key': s.key, class: flash && now - flash < 2000 ? 'flash' : '' },
        h('th', { scope: 'row' }, h('code', { text: s.key })),
        h('td', { text: s.contentType || '' }),
        h('td', { text: String(s.version ?? '') }),
        h('td', { text: fmtBytes(s.sizeBytes) }),
        h('td', { text: Number.isFinite(exp) ? `${fmtTime(exp)} (in ${fmtDuration(exp - now)})` : '—' })));
    }
  }

  async watch(signal) {
    let backoff = 500;
    while (!signal.aborted) {
      const trace = this.traceId();
      if (!trace) {
        await sleep(1000, signal);
        continue;
      }
      try {
        await streamSSE(api.slotsWatchPath(trace), (frames) => {
          for (const f of frames) {
            try {
              const c = JSON.parse(f.data);
              if (c.key) this.flash.set(c.key, Date.now());
            } catch {
              /* a frame we do not read */
            }
          }
          this.refreshSoon();
          backoff = 500;
        }, { signal, idleMs: 0 });
      } catch (e) {
        if (signal.aborted) return;
        if (e instanceof ApiError && e.status === 404) {
          this.unavailable();
          return;
        }
        if (e instanceof ApiError && FATAL.has(e.code)) {
          this.note.textContent = `Slots are not followed live: ${e.describe()}`;
          return;
        }
      }
      await sleep(backoff, signal);
      backoff = Math.min(backoff * 2, 10000);
    }
  }
}
