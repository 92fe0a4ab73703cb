// The chat page of a conversation (#/conversations/{id}), or of a new one
// (#/conversations/new, the agent chosen here): its newest messages, oldest
// first ("Show earlier" reads more), and a box to send the next message.
//
// A message is a detached run of the chosen agent with `conversationId`
// (the first with `newConversation`: its RunStarted says the id the server
// made). The run's events are followed as the run page follows them (from
// its last seq after a drop, each seq once) to stream the answer in; once
// the run ended the conversation is read again, and holds what it added.
// A run of the conversation already going when the page opens is followed
// the same way. What such a run waits for a person on is answered on the
// run's page, linked from here (to the approval or question itself); each
// answer links its run there too. Stop cancels the run answering now.

import { api, ApiError, streamSSE } from './api.js';
import { conversationName } from './conversations.js';
import { payloadKey, RunModel } from './model.js';
import {
  clear, codeName, fmtAgo, fmtBytes, fmtInt, fmtTime, h, num, parseTime, pretty, short, shortId, sleep, statusWord,
} from './util.js';

/** The newest messages shown first; "Show earlier" shows this many more. */
const PAGE = 100;
/** The most GetConversation returns in one page. */
const MAX_PAGE = 1000;
/** A stream this quiet is taken for dead (the server sends keep-alives). */
const IDLE_MS = 45000;
/** While nothing runs, how often to look whether a run of the conversation
 * started elsewhere (another tab, the CLI). */
const POLL_MS = 4000;
/** Errors that following the run again cannot mend. */
const FATAL = new Set(['NOT_FOUND', 'FAILED_PRECONDITION', 'UNAUTHENTICATED', 'PERMISSION_DENIED', 'INVALID_ARGUMENT', 'UNIMPLEMENTED', 'RESOURCE_EXHAUSTED']);

const ROLES = { ROLE_USER: 'user', ROLE_ASSISTANT: 'assistant', ROLE_TOOL: 'tool', ROLE_SYSTEM: 'system' };
const enc = encodeURIComponent;

/** The chat's title: the name the list gives it (its title, else its
 * first message), else "Conversation …" and the end of its id. */
function chatName(c) {
  return c.title || short(c.preview) ? conversationName(c) : `Conversation ${shortId(c.id)}`;
}

/**
 * Opens the chat of conversation `convId` ('' or 'new': a new one;
 * `query`: the hash's parameters, `agent` preselects one) in `main`;
 * returns `{destroy()}`.
 */
export function openChat(main, convId, app, query = new URLSearchParams()) {
  const stop = new AbortController();
  const st = {
    /** '' until the first run of a new conversation says its id. */
    id: convId === 'new' ? '' : convId,
    conv: null,
    /** How many of the newest messages to show. */
    want: PAGE,
    /** The run followed now: `{runId, model, input, drawn, ctrl, footer}`. */
    live: null,
    sending: false,
    /** The agent the next message goes to, once known. */
    agent: query.get('agent') || '',
    agentAsked: false,
    agents: null,
    /** How runs followed here ended, when not well: runId → text. */
    notes: new Map(),
    gone: false,
    /** The run Stop was pressed for, until it ends. */
    stopping: '',
    /** The message its first run was sent: its name until the server has
     * its preview (once that run ended). */
    firstInput: '',
  };
  /** For the tests: the conversation, the runs followed, whether the last one settled. */
  const stats = { conversationId: st.id, runs: [], done: true };
  window.batonConsole = stats;

  // ---- the page ----
  const title = h('span', { 'data-testid': 'chat-title', text: st.id ? '…' : 'New conversation' });
  const badge = h('span', { class: 'badge', 'data-testid': 'chat-state', hidden: true, 'aria-live': 'polite' });
  const idEl = h('code', { class: 'chat-id', 'data-testid': 'chat-id' });
  const facts = h('p', { class: 'muted small chat-facts', 'data-testid': 'chat-facts' });
  const renameBtn = h('button', { type: 'button', class: 'btn small', 'data-testid': 'chat-rename', hidden: true }, 'Rename');
  const deleteBtn = h('button', { type: 'button', class: 'btn small danger', 'data-testid': 'chat-delete', hidden: true }, 'Delete…');
  const renameIn = h('input', { type: 'text', id: 'chat-title-in', 'data-testid': 'chat-title-input', maxlength: '256', autocomplete: 'off' });
  const renameForm = h('form', { class: 'chat-rename row', hidden: true, 'data-testid': 'chat-rename-form' },
    h('label', { for: 'chat-title-in', text: 'Title' }), renameIn,
    h('button', { type: 'submit', class: 'btn primary small', 'data-testid': 'chat-rename-save' }, 'Save'),
    h('button', { type: 'button', class: 'btn small', on: { click: () => { renameForm.hidden = true; renameBtn.focus(); } } }, 'Cancel'));
  const deleteBox = h('div', { class: 'chat-delete-box', role: 'alertdialog', 'aria-label': 'Delete the conversation', hidden: true, 'data-testid': 'chat-delete-box' });
  const headErr = h('div', { class: 'error', role: 'alert', 'data-testid': 'chat-head-error', hidden: true });

  const earlier = h('button', { type: 'button', class: 'btn small', 'data-testid': 'chat-earlier', hidden: true }, 'Show earlier messages');
  const folded = h('p', { class: 'chat-folded muted small', 'data-testid': 'chat-folded', hidden: true });
  const empty = h('p', { class: 'chat-empty muted', 'data-testid': 'chat-empty', hidden: true });
  const list = h('ol', { class: 'chat-list', 'data-testid': 'chat-messages', 'aria-label': 'Messages' });
  const liveList = h('ol', { class: 'chat-list chat-live', 'data-testid': 'chat-live', hidden: true, 'aria-label': 'The answer coming in', 'aria-live': 'polite' });
  const pending = h('div', { class: 'pending', 'data-testid': 'chat-pending', hidden: true, role: 'region', 'aria-label': 'Waiting for you' });

  const agentSel = h('select', { id: 'chat-agent', 'data-testid': 'chat-agent' }, h('option', { value: '', text: 'loading…' }));
  const agentHelp = h('span', { class: 'muted small chat-agent-help', 'data-testid': 'chat-agent-help' });
  const input = h('textarea', {
    id: 'chat-input', rows: '2', 'data-testid': 'chat-input', 'aria-label': 'Message', 'aria-describedby': 'chat-hint',
    placeholder: 'Write a message…',
  });
  const sendBtn = h('button', { type: 'submit', class: 'btn primary', 'data-testid': 'chat-send' }, 'Send');
  // While an answer runs: cancels its run.
  const stopBtn = h('button', {
    type: 'button', class: 'btn danger', 'data-testid': 'chat-stop', hidden: true, title: 'Stop the answer: cancel the run answering the last message',
  }, 'Stop');
  const hint = h('span', { id: 'chat-hint', class: 'muted small chat-hint' }, 'Enter sends · Shift+Enter: a new line');
  const err = h('div', { class: 'error', role: 'alert', 'data-testid': 'chat-error', hidden: true });
  const form = h('form', { class: 'chat-send', 'data-testid': 'chat-form', 'aria-label': 'Send a message' },
    h('div', { class: 'chat-agent-row' }, h('label', { for: 'chat-agent', text: 'Agent' }), agentSel, agentHelp),
    h('div', { class: 'chat-input-row' }, input, sendBtn, stopBtn),
    hint, err);

  const pageEl = h('div', { class: 'chat-page', 'data-testid': 'chat-page', 'data-conversation-id': st.id, 'data-state': st.id ? 'loading' : 'new' },
    h('nav', { class: 'crumbs', 'aria-label': 'Breadcrumb' }, h('a', { href: '#/conversations' }, '← Conversations')),
    h('header', { class: 'chat-head' },
      h('div', { class: 'chat-title-row' }, h('h1', null, title, ' ', badge), h('div', { class: 'actions' }, renameBtn, deleteBtn)),
      h('div', { class: 'chat-head-row' }, idEl, facts),
      renameForm, deleteBox, headErr),
    h('section', { class: 'chat-log', 'data-testid': 'chat-log', 'aria-label': 'The conversation' }, earlier, folded, empty, list, liveList, pending),
    form);
  clear(main).append(pageEl);

  // ---- the conversation ----
  /** GetConversation (its newest `st.want` messages); draws it and follows a run of it going on. */
  async function load(followRunning = true) {
    if (!st.id) return null;
    const want = Math.min(st.want, MAX_PAGE);
    let c;
    try {
      c = await api.getConversation(st.id, { last: want, pageSize: want }, stop.signal);
    } catch (e) {
      if (e.name === 'AbortError') throw e;
      if (e.code === 'NOT_FOUND') {
        st.gone = true;
        setState('gone');
        empty.hidden = false;
        empty.textContent = 'There is no such conversation: it expired, was deleted, or belongs to another tenant.';
        drawForm();
      } else {
        app.alert(e, 'conversation');
      }
      throw e;
    }
    st.conv = c;
    st.gone = false;
    const stick = nearBottom();
    drawHead();
    drawMessages();
    if (stick) toBottom();
    askAgent();
    if (followRunning && c.runningRunId && (!st.live || st.live.runId !== c.runningRunId)) follow(c.runningRunId, '');
    drawForm();
    return c;
  }

  function setState(s) {
    pageEl.dataset.state = s;
  }

  function drawHead() {
    const c = st.conv;
    if (!c) return;
    const name = chatName(c.title || short(c.preview) ? c : { ...c, preview: st.firstInput });
    title.textContent = name;
    document.title = `${short(name, 60)} · Baton`;
    idEl.textContent = c.id;
    const count = num(c.messageCount);
    const parts = [`${fmtInt(count)} message${count === 1 ? '' : 's'} (${fmtBytes(c.bytes)})`];
    if (num(c.folded)) parts.push(`${fmtInt(num(c.folded))} folded`);
    if (c.agent) parts.push(`last answered by ${c.agent}`);
    const created = parseTime(c.createdAt);
    const used = parseTime(c.updatedAt);
    const expires = parseTime(c.expiresAt);
    if (Number.isFinite(created)) parts.push(`started ${fmtTime(created)}`);
    if (Number.isFinite(used)) parts.push(`used ${fmtAgo(used)}`);
    if (Number.isFinite(expires)) parts.push(`kept until ${fmtTime(expires)}`);
    const labels = Object.entries(c.labels || {}).map(([k, v]) => `${k}=${v}`);
    if (labels.length) parts.push(`labels ${labels.join(', ')}`);
    facts.textContent = parts.join(' · ');
    renameBtn.hidden = false;
    deleteBtn.hidden = false;
  }

  function drawMessages() {
    const c = st.conv;
    const msgs = c.messages || [];
    const runs = new Map((c.runs || []).map((r) => [r.runId, r]));
    // Each tool result shows inside the entry of the call it answers (call
    // ids repeat from run to run); one whose call is not shown (before the
    // first message shown, or folded away) keeps a row of its own.
    const called = new Set();
    for (const m of msgs) for (const tc of m.message?.toolCalls || []) called.add(`${m.runId} ${tc.callId}`);
    const results = new Map();
    for (const m of msgs) {
      const key = `${m.runId} ${m.message?.toolCallId}`;
      if (m.message?.role === 'ROLE_TOOL' && called.has(key)) results.set(key, m.message.content || '');
    }
    const frag = document.createDocumentFragment();
    msgs.forEach((m, i) => {
      if (!(m.message?.role === 'ROLE_TOOL' && results.has(`${m.runId} ${m.message.toolCallId}`))) frag.append(messageEl(m, results));
      // Under the last message of each run: that run, to open.
      if (m.runId && msgs[i + 1]?.runId !== m.runId) frag.append(runFooter(m.runId, runs.get(m.runId), st.notes.get(m.runId)));
    });
    list.replaceChildren(frag);
    const first = msgs.length ? num(msgs[0].index) : 0;
    earlier.hidden = first === 0 || st.want >= MAX_PAGE;
    earlier.textContent = `Show earlier messages (${fmtInt(first)} not shown)`;
    const f = num(c.folded);
    folded.hidden = !f || first > 0;
    folded.textContent = `${fmtInt(f)} earlier message${f === 1 ? ' was' : 's were'} folded away to keep the conversation short (compaction): the model no longer sees ${f === 1 ? 'it' : 'them'}.`;
    empty.hidden = msgs.length > 0 || !!st.live;
    empty.textContent = 'No messages yet: say something below.';
  }

  earlier.addEventListener('click', async () => {
    st.want = Math.min(MAX_PAGE, st.want + PAGE);
    // Keep what was on the screen where it was.
    const anchor = list.firstElementChild;
    const top = anchor ? anchor.getBoundingClientRect().top : 0;
    try {
      await load(false);
    } catch {
      return;
    }
    const same = anchor && [...list.children].find((el) => el.dataset.index === anchor.dataset.index && el.dataset.runId === anchor.dataset.runId);
    if (same) window.scrollBy(0, same.getBoundingClientRect().top - top);
  });

  // ---- following a run: its answer streams in ----
  async function follow(runId, text) {
    if (st.live && st.live.runId === runId) return;
    st.live?.ctrl.abort();
    const model = new RunModel(runId);
    const L = { runId, model, input: text, drawn: 0, ctrl: new AbortController(), footer: null, user: null };
    st.live = L;
    stats.runs.push(runId);
    stats.runId = runId;
    stats.done = false;
    clear(liveList);
    const signal = L.ctrl.signal;
    stop.signal.addEventListener('abort', () => L.ctrl.abort(), { once: true });
    schedule(true);
    let backoff = 250;
    while (!signal.aborted && !model.terminal) {
      const ctrl = new AbortController();
      const onAbort = () => ctrl.abort();
      signal.addEventListener('abort', onAbort, { once: true });
      let gap = false;
      const before = model.lastSeq;
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
            if (f.event === 'error') throw new ApiError(0, String(ev.code || 'UNKNOWN'), ev.message, ev.field);
            const seq = Number(ev.seq || f.id || 0);
            if (seq <= model.lastSeq) continue;
            if (seq !== model.lastSeq + 1) {
              // Never skip: start again right after the last seq we have.
              gap = true;
              ctrl.abort();
              break;
            }
            const key = payloadKey(ev, f.event);
            model.apply(ev, key, seq);
            if (key === 'runStarted') adopt(model.conversationId);
          }
          schedule();
        }, { signal: ctrl.signal, idleMs: IDLE_MS });
      } catch (e) {
        if (signal.aborted) return;
        if (!gap && e instanceof ApiError && FATAL.has(e.code)) {
          L.error = e.describe();
          app.alert(e, 'chat-stream');
          break;
        }
      } finally {
        signal.removeEventListener('abort', onAbort);
      }
      if (model.terminal || signal.aborted) break;
      if (model.lastSeq > before) backoff = 250;
      await sleep(gap && model.lastSeq > before ? 0 : backoff, signal);
      backoff = Math.min(backoff * 2, 5000);
    }
    if (signal.aborted) return;
    if (model.error) st.notes.set(runId, `failed: ${codeName(model.error.code)}: ${model.error.message}`);
    else if (model.status === 'RUN_STATUS_CANCELLED') st.notes.set(runId, `cancelled${model.cancelReason ? `: ${model.cancelReason}` : ''}`);
    schedule();
    if (!st.id) {
      // A new conversation whose stream never said its id: GetRun does.
      try {
        adopt((await api.getRun(runId, stop.signal)).conversationId || '');
      } catch {
        /* said below */
      }
    }
    await settle(runId);
    if (st.live !== L) return;
    const stick = nearBottom();
    st.live = null;
    clear(liveList);
    liveList.hidden = true;
    pending.hidden = true;
    if (st.conv) drawMessages();
    drawForm();
    if (stick) toBottom();
    stats.done = true;
  }

  /** Reads the conversation until it holds what run `runId` added. */
  async function settle(runId) {
    for (let i = 0; i < 30 && !stop.signal.aborted && st.id; i++) {
      try {
        const c = await load(false);
        const r = (c.runs || []).find((x) => x.runId === runId);
        if (c.runningRunId !== runId && (!r || r.status !== 'RUN_STATUS_RUNNING')) return;
      } catch (e) {
        if (e.name === 'AbortError' || st.gone) return;
      }
      await sleep(200 + i * 100, stop.signal);
    }
  }

  /** A new conversation's id, once its first run says it: the page's address becomes its own. */
  function adopt(id) {
    if (!id || st.id) return;
    st.id = id;
    stats.conversationId = id;
    pageEl.dataset.conversationId = id;
    history.replaceState(null, '', `#/conversations/${enc(id)}`);
    // Named, until it has a title, by its first message: the one just sent.
    st.firstInput = st.live?.input || '';
    const name = chatName({ id, preview: st.firstInput });
    title.textContent = name;
    idEl.textContent = id;
    document.title = `${short(name, 60)} · Baton`;
    // Its facts, and what can be done with it, while its first answer comes.
    load(false).catch(() => {});
  }

  let queued = false;
  let stickNext = false;
  function schedule(stick = false) {
    stickNext = stickNext || stick;
    if (queued) return;
    queued = true;
    requestAnimationFrame(() => {
      queued = false;
      const stickNow = stickNext || nearBottom();
      stickNext = false;
      drawLive();
      if (stickNow) toBottom();
    });
  }

  function drawLive() {
    const L = st.live;
    if (!L || stop.signal.aborted) return;
    const m = L.model;
    liveList.hidden = false;
    empty.hidden = true;
    const said = L.input || m.input;
    // The first run of the conversation (nothing in it yet): what it was
    // sent names it.
    if (said && !st.firstInput && st.conv && !num(st.conv.messageCount)) {
      st.firstInput = said;
      drawHead();
    }
    if (!L.user && (said || m.lastSeq)) {
      L.user = h('li', { class: 'chat-msg from-user', 'data-testid': 'chat-live-message', 'data-role': 'user' },
        h('div', { class: 'who sr-only', text: 'you' }),
        h('div', { class: 'bubble' }, h('div', { class: 'text', 'data-testid': 'chat-text', text: said })));
      liveList.prepend(L.user);
    }
    const items = m.root.items;
    for (let i = L.drawn; i < items.length; i++) {
      const el = liveItem(items[i], m);
      if (el) {
        if (L.footer) liveList.insertBefore(el, L.footer);
        else liveList.append(el);
      }
    }
    L.drawn = items.length;
    for (const it of items) if (it._chat) it._chat.update();
    // The run, to open: its whole tree, what it waits for.
    if (!L.footer) {
      L.footer = h('li', { class: 'chat-run', 'data-testid': 'chat-live-run', 'data-run-id': L.runId },
        h('a', { href: `#/runs/${enc(L.runId)}`, 'data-testid': 'chat-run-link', title: `Open run ${L.runId}` }, `run ${shortId(L.runId)}`),
        h('span', { class: 'badge' }));
      liveList.append(L.footer);
    }
    const waits = m.terminal ? [] : m.waitingFor();
    const word = waits.length ? 'waiting' : m.status ? statusWord(m.status) : 'starting';
    const b = L.footer.querySelector('.badge');
    b.textContent = waits.length ? 'waiting for you' : word;
    b.className = `badge st-${word}`;
    L.footer.dataset.status = m.status || '';
    drawPending(L);
    drawForm();
  }

  /** The element of one of the live run's root items (null: not shown in a chat). */
  function liveItem(item, model) {
    if (item.kind === 'message') {
      const text = document.createTextNode('');
      const calls = h('div');
      let ui = null;
      const li = h('li', { class: 'chat-msg from-assistant', 'data-testid': 'chat-live-message', 'data-role': 'assistant' },
        h('div', { class: 'who', text: item.agent || 'assistant' }),
        h('div', { class: 'bubble' }, h('div', { class: 'text', 'data-testid': 'chat-text' }, text), calls));
      let shown = '';
      item._chat = {
        update() {
          if (item.text !== shown) {
            if (item.text.startsWith(shown)) text.appendData(item.text.slice(shown.length));
            else text.data = item.text;
            shown = item.text;
          }
          li.classList.toggle('streaming', !item.final);
          li.classList.toggle('superseded', !!(item.discarded || item.superseded));
          if (item.final && item.toolCalls?.length && !ui) {
            ui = callsEl(item.toolCalls);
            calls.append(ui.el);
          }
          // Each call, as it goes: running, waiting for you, its result.
          if (ui) ui.live(item.toolCalls.map((c) => callState(model, item.ctx, c.callId, item.ctx.tools.get(c.callId))));
          li.classList.toggle('calls-only', !item.text && !!item.toolCalls?.length);
        },
      };
      return li;
    }
    if (item.kind === 'tool') {
      // Shown in the entry of the turn that called it; a call no turn here
      // asked for (none shown) has a row of its own.
      if (item.ctx.items.some((m) => m.kind === 'message' && m.toolCalls?.some((c) => c.callId === item.callId))) return null;
      const state = h('span', { class: 'badge' });
      const li = h('li', { class: 'chat-msg from-tool', 'data-testid': 'chat-live-tool', 'data-role': 'tool' },
        h('div', { class: 'chat-tool-line' }, h('span', { class: 'kind', text: 'tool' }), ' ', h('span', { class: 'tool-name', text: item.tool }), ' ', state));
      item._chat = {
        update() {
          const cs = callState(model, item.ctx, item.callId, item);
          state.textContent = cs.word;
          state.className = `badge st-${cs.state}`;
        },
      };
      return li;
    }
    const note = (testid, ...children) => h('li', { class: 'chat-note', 'data-testid': testid }, ...children);
    if (item.kind === 'handoff') return note('chat-handoff', `handoff ${item.from} → ${item.to}`);
    if (item.kind === 'compacted') {
      return note('chat-compacted', `⇤ folded ${fmtInt(item.folded)} earlier message${item.folded === 1 ? '' : 's'}${item.mode ? ` (${item.mode})` : ''}, kept ${fmtInt(item.kept)}`);
    }
    if (item.kind === 'wait') return note('chat-rate-limit', `◷ waiting for ${item.provider}'s rate limit`);
    if (item.kind === 'budget') return note('chat-budget', `⊘ ${item.message}`);
    if (item.kind === 'end' && item.outcome === 'failed') return note('chat-failed', `The run failed: ${codeName(item.code)}: ${item.message}`);
    if (item.kind === 'end' && item.outcome === 'cancelled') return note('chat-cancelled', `The run was cancelled${item.reason ? `: ${item.reason}` : ''}`);
    return null;
  }

  let pendingKey = '';
  function drawPending(L) {
    const items = L.model.terminal ? [] : [...L.model.pending.values()];
    const key = items.map((i) => `${i.kind}:${i.approvalId || i.inputId}`).join(',');
    if (key === pendingKey) return;
    pendingKey = key;
    clear(pending);
    pending.hidden = !items.length;
    if (!items.length) return;
    // The run's page opens on the approval or question itself.
    const where = (item) => `#/runs/${enc(L.runId)}?pending=${enc(item.approvalId || item.inputId)}`;
    pending.append(h('strong', { text: `Waiting for you (${items.length}): ` }),
      h('ul', null, ...items.slice(0, 8).map((item) => h('li', null,
        h('a', { href: where(item), 'data-testid': 'chat-pending-item' }, item.kind === 'approval'
          ? (item.tool === 'raise_budget' ? 'raise a budget' : `approve ${item.tool}`)
          : `answer ${item.tool}: ${item.prompt}`),
        ' in ', h('code', { text: item.ctx.id })))),
      h('a', { class: 'btn', href: where(items[0]), 'data-testid': 'chat-pending-link' }, 'Answer on the run\'s page'));
  }

  // ---- sending ----
  function busy() {
    return st.sending || !!(st.live && !st.live.model.terminal) || !!(st.conv && st.conv.runningRunId && !st.live);
  }

  /** The run answering now, that Stop cancels ('' when none). */
  function runningRun() {
    if (st.live) return st.live.model.terminal ? '' : st.live.runId;
    return st.conv?.runningRunId || '';
  }

  function drawForm() {
    const running = busy();
    sendBtn.disabled = running || st.gone;
    sendBtn.textContent = st.sending ? 'Sending…' : 'Send';
    sendBtn.title = running && !st.sending ? 'Waiting for the answer to the last message' : '';
    input.disabled = st.gone;
    agentSel.disabled = st.gone;
    const stopping = runningRun();
    const hide = !stopping || st.sending || st.gone;
    // Stop goes once the run ended: the focus it had goes to the box.
    if (hide && !stopBtn.hidden && document.activeElement === stopBtn) input.focus({ preventScroll: true });
    stopBtn.hidden = hide;
    stopBtn.disabled = !hide && st.stopping === stopping;
    stopBtn.textContent = !hide && st.stopping === stopping ? 'Stopping…' : 'Stop';
    if (st.gone) return;
    const L = st.live;
    const waiting = L && !L.model.terminal && L.model.waitingFor().length;
    setState(running ? (waiting ? 'waiting' : 'running') : st.id ? 'idle' : 'new');
    badge.hidden = !running;
    badge.textContent = waiting ? 'waiting for you' : 'answering';
    badge.className = `badge ${waiting ? 'st-waiting' : 'st-running'}`;
  }

  form.addEventListener('submit', (e) => {
    e.preventDefault();
    send();
  });
  stopBtn.addEventListener('click', async () => {
    const runId = runningRun();
    if (!runId) return;
    show(err, '');
    st.stopping = runId;
    drawForm();
    try {
      // The run's stream says when it ended; the page settles then.
      await api.cancel(runId, 'stopped from the chat');
    } catch (e) {
      st.stopping = '';
      show(err, `Cannot stop the answer: ${e.describe ? e.describe() : e.message}`);
    }
    drawForm();
  });
  input.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      form.requestSubmit();
    }
  });

  async function send() {
    show(err, '');
    const text = input.value.trim();
    if (!text) return show(err, 'Write a message first.');
    const agent = agentSel.value;
    if (!agent) {
      show(err, 'Choose the agent to talk to.');
      agentSel.focus();
      return;
    }
    if (busy()) return show(err, 'The last message is still being answered: wait for it, or stop it.');
    const body = { agent, input: text, approvalMode: 'APPROVAL_MODE_ASK', detach: true };
    if (st.id) body.conversationId = st.id;
    else body.newConversation = true;
    st.sending = true;
    drawForm();
    try {
      const r = await api.startRun(body);
      st.agent = agent;
      input.value = '';
      st.sending = false;
      follow(r.runId, text);
    } catch (e) {
      show(err, e.describe ? e.describe() : e.message);
      // Someone else's message may be going on: show it.
      if (e.code === 'ABORTED' && st.id) load().catch(() => {});
    } finally {
      st.sending = false;
      drawForm();
    }
  }

  // ---- the agent ----
  const about = new Map();
  function drawAgent() {
    if (!st.agents) return;
    if (st.agent && !about.has(st.agent)) {
      // An agent no longer served still shows as the conversation's.
      agentSel.append(h('option', { value: st.agent, text: `${st.agent} (not served now)` }));
      about.set(st.agent, 'not among the agents this orchestrator serves now');
    }
    if (st.agent) agentSel.value = st.agent;
    agentHelp.textContent = about.get(agentSel.value) || '';
  }
  agentSel.addEventListener('change', () => {
    agentHelp.textContent = about.get(agentSel.value) || '';
  });

  api.agents(stop.signal).then((r) => {
    agentSel.textContent = '';
    agentSel.append(h('option', { value: '', text: 'Choose…' }));
    const ga = h('optgroup', { label: 'Agents' });
    for (const a of r.agents || []) {
      about.set(a.name, a.description || '');
      ga.append(h('option', { value: a.name, text: a.name }));
    }
    agentSel.append(ga);
    if ((r.groups || []).length) {
      const gg = h('optgroup', { label: 'Groups' });
      for (const g of r.groups) {
        about.set(g.name, [g.description, `starts with ${g.root}`].filter(Boolean).join(' · '));
        gg.append(h('option', { value: g.name, text: `${g.name} (group)` }));
      }
      agentSel.append(gg);
    }
    st.agents = r;
    drawAgent();
  }).catch((e) => {
    if (e.name === 'AbortError') return;
    agentSel.textContent = '';
    agentSel.append(h('option', { value: '', text: 'cannot list agents' }));
    show(err, `Cannot list agents: ${e.describe ? e.describe() : e.message}`);
  });

  /** The next message goes where the last one went: the target of the
   * conversation's last run (a group stays a group), else the agent that
   * answered last. */
  async function askAgent() {
    if (st.agentAsked || st.agent || !st.conv) return;
    st.agentAsked = true;
    const runs = st.conv.runs || [];
    let target = '';
    if (runs.length) {
      try {
        target = (await api.getRun(runs[runs.length - 1].runId, stop.signal)).target || '';
      } catch {
        /* the agent that answered last, then */
      }
    }
    if (!st.agent) st.agent = target || st.conv.agent || '';
    drawAgent();
  }

  // ---- renaming, deleting ----
  renameBtn.addEventListener('click', () => {
    renameForm.hidden = false;
    renameIn.value = st.conv?.title || '';
    renameIn.focus();
  });
  renameForm.addEventListener('submit', async (e) => {
    e.preventDefault();
    show(headErr, '');
    try {
      const c = await api.updateConversation(st.id, { title: renameIn.value.trim() });
      if (st.conv) st.conv.title = c.title || '';
      renameForm.hidden = true;
      drawHead();
      renameBtn.focus();
    } catch (err2) {
      show(headErr, err2.describe ? err2.describe() : err2.message);
    }
  });
  deleteBtn.addEventListener('click', () => {
    clear(deleteBox);
    deleteBox.hidden = false;
    const yes = h('button', { type: 'button', class: 'btn danger', 'data-testid': 'chat-delete-confirm' }, 'Delete it');
    const no = h('button', { type: 'button', class: 'btn', on: { click: () => { deleteBox.hidden = true; deleteBtn.focus(); } } }, 'Keep it');
    yes.addEventListener('click', async () => {
      yes.disabled = true;
      show(headErr, '');
      try {
        await api.deleteConversation(st.id);
        location.hash = '#/conversations';
      } catch (err2) {
        yes.disabled = false;
        show(headErr, err2.describe ? err2.describe() : err2.message);
      }
    });
    deleteBox.append(h('p', null, 'Delete this conversation: its messages and its runs\' histories',
      st.conv?.runningRunId ? ' (the run going on is cancelled first)' : '', '? This cannot be undone.'),
    h('div', { class: 'actions' }, yes, no));
    no.focus();
  });

  // ---- scrolling ----
  function nearBottom() {
    const d = document.documentElement;
    return window.innerHeight + window.scrollY >= d.scrollHeight - 120;
  }
  function toBottom() {
    window.scrollTo(0, document.documentElement.scrollHeight);
  }

  // ---- start ----
  drawForm();
  if (st.id) {
    load().then(() => toBottom()).catch(() => {});
  } else {
    empty.hidden = false;
    empty.textContent = 'Choose an agent and say something: the conversation starts with your first message, and each next one continues it.';
    document.title = 'New conversation · Baton';
  }

  // While nothing runs: a run of it started elsewhere, or new messages.
  (async () => {
    while (!stop.signal.aborted) {
      await sleep(POLL_MS, stop.signal);
      if (stop.signal.aborted || document.hidden || !st.id || st.live || st.sending || st.gone || !st.conv) continue;
      try {
        const c = await api.getConversation(st.id, { last: 1, pageSize: 1 }, stop.signal);
        const was = st.conv;
        if (c.updatedAt !== was.updatedAt || (c.runningRunId || '') !== (was.runningRunId || '') || num(c.messageCount) !== num(was.messageCount)) {
          await load();
        }
      } catch {
        /* looked again at the next poll */
      }
    }
  })();

  return {
    destroy() {
      stop.abort();
    },
  };
}

/** A message of the conversation (`results`: see callsEl). */
function messageEl(m, results) {
  const msg = m.message || {};
  const role = ROLES[msg.role] || 'system';
  const li = h('li', {
    class: `chat-msg from-${role}`, 'data-testid': 'chat-message', 'data-role': role,
    'data-index': String(num(m.index)), 'data-run-id': m.runId || '',
  });
  const marks = [];
  if (m.summary) {
    li.classList.add('summary');
    li.dataset.summary = 'true';
    marks.push(h('span', { class: 'chat-mark', 'data-testid': 'chat-summary-mark', title: 'Written by the model in place of the earlier messages it folds (compaction)', text: 'summary of earlier messages' }));
  }
  if (m.interrupted) {
    li.classList.add('interrupted');
    li.dataset.interrupted = 'true';
    marks.push(h('span', { class: 'chat-mark warn', 'data-testid': 'chat-interrupted-mark', title: 'Added by a run that failed or was cancelled: what it completed', text: 'interrupted' }));
  }
  if (role === 'tool') {
    // Only a result whose call is not shown (drawMessages puts the others
    // in their call's entry): which tool it was is not known here.
    li.append(h('details', { class: 'chat-result' },
      h('summary', null, h('span', { class: 'kind', text: 'result' }), ' ',
        h('span', { class: 'meta', text: short(msg.content, 90) })),
      h('pre', { 'data-testid': 'chat-tool-result', text: msg.content || '' })), ...marks);
    return li;
  }
  const who = role === 'user' ? 'you' : role === 'assistant' ? m.agent || 'assistant' : role;
  const bubble = h('div', { class: 'bubble' });
  if (msg.content) bubble.append(h('div', { class: 'text', 'data-testid': 'chat-text', text: msg.content }));
  if (msg.toolCalls?.length) bubble.append(callsEl(msg.toolCalls, results, m.runId).el);
  if (!msg.content && !msg.toolCalls?.length) bubble.append(h('div', { class: 'text muted', 'data-testid': 'chat-text', text: '(empty)' }));
  // The person's own messages need no name on the screen (on the right);
  // a screen reader still says whose.
  li.append(h('div', { class: role === 'user' && !marks.length ? 'who sr-only' : 'who' }, h('span', { text: who }), ...marks), bubble);
  return li;
}

/**
 * A turn's tool calls, folded to one line ("called x, y"); inside, one
 * entry per call: its arguments, then its result. `results` (a stored
 * conversation's): `${runId} ${callId}` → the text of the call's result.
 * Returns `{el, live(states)}`: `live` (a run followed now) takes each
 * call's callState and says how the calls go in the folded line.
 */
function callsEl(calls, results = null, runId = '') {
  const badge = h('span', { class: 'badge', 'data-testid': 'chat-tool-state', hidden: true });
  const entries = calls.map((c) => {
    const result = h('div', { class: 'chat-result', hidden: true });
    const li = h('li', { 'data-testid': 'chat-tool-call', 'data-call-id': c.callId || '' },
      h('span', { class: 'tool-name', text: c.tool || 'a tool' }),
      c.argumentsJson ? h('pre', { class: 'chat-args', text: pretty(c.argumentsJson) }) : null,
      result);
    return { li, result, shown: null };
  });
  const setResult = (e, text, error) => {
    if (e.shown === text) return;
    e.shown = text;
    e.result.hidden = false;
    e.result.replaceChildren(h('span', { class: 'kind', text: error ? 'error' : 'result' }),
      h('pre', { 'data-testid': error ? 'chat-tool-error' : 'chat-tool-result', text: text || '(empty)' }));
  };
  if (results) {
    calls.forEach((c, i) => {
      const key = `${runId} ${c.callId}`;
      entries[i].li.dataset.state = results.has(key) ? 'ok' : 'none';
      if (results.has(key)) setResult(entries[i], results.get(key), false);
    });
  }
  const el = h('details', { class: 'chat-calls', 'data-testid': 'chat-tool-calls' },
    h('summary', null, `called ${calls.map((c) => c.tool || 'a tool').join(', ')}`, badge),
    h('ul', null, ...entries.map((e) => e.li)));
  /** Which call's state the folded line says: the one that needs you first. */
  const ORDER = ['waiting', 'running', 'error', 'none', 'ok'];
  return {
    el,
    live(states) {
      if (!states.length) return;
      states.forEach((cs, i) => {
        entries[i].li.dataset.state = cs.state;
        if (cs.result !== undefined) setResult(entries[i], cs.result, cs.error);
      });
      const top = states.reduce((a, cs) => (ORDER.indexOf(cs.state) < ORDER.indexOf(a.state) ? cs : a));
      badge.hidden = false;
      badge.textContent = top.word;
      badge.className = `badge st-${top.state}`;
    },
  };
}

/**
 * How tool call `callId` of context `ctx` goes in a run followed live
 * (`tool`: its tool item, once it started): `{state, word}`, with
 * `result` and `error` once it ended.
 */
function callState(model, ctx, callId, tool) {
  if (tool && tool.done) {
    return tool.error ? { state: 'error', word: 'failed', result: tool.error, error: true }
      : { state: 'ok', word: 'done', result: tool.result, error: false };
  }
  if (model.terminal) return { state: 'none', word: 'not done' };
  // A call waiting for a person's approval or answer says so.
  if ([...model.pending.values()].some((p) => p.callId === callId && p.ctx === ctx)) return { state: 'waiting', word: 'waiting for you' };
  return { state: 'running', word: tool && tool.progress ? `running · ${tool.progress.percent}%` : 'running' };
}

/** The run that added the messages above it, to open on its page. */
function runFooter(runId, run, note) {
  const status = run ? run.status || '' : '';
  const word = statusWord(status);
  const ended = run ? parseTime(run.endedAt) : NaN;
  return h('li', { class: 'chat-run', 'data-testid': 'chat-run', 'data-run-id': runId, 'data-status': status },
    h('a', { href: `#/runs/${enc(runId)}`, 'data-testid': 'chat-run-link', title: `Open run ${runId}: its events, tool calls and sub-agents` }, `run ${shortId(runId)}`),
    status && status !== 'RUN_STATUS_COMPLETED' ? h('span', { class: `badge st-${word}`, 'data-testid': 'chat-run-status', text: word }) : null,
    Number.isFinite(ended) ? h('span', { class: 'meta', text: fmtTime(ended) }) : null,
    note ? h('span', { class: 'chat-run-note', 'data-testid': 'chat-run-note', text: note }) : null);
}

function show(el, msg) {
  el.textContent = msg;
  el.hidden = !msg;
}
