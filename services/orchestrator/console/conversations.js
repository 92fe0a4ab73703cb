// The conversations page (#/conversations): the tenant's conversations,
// most recently used first, polled while shown, each opening its chat
// (#/conversations/{id}); "New conversation" opens an empty chat
// (#/conversations/new) where an agent is chosen.

import { api } from './api.js';
import { fmtAgo, fmtBytes, fmtInt, fmtTime, h, num, parseTime, short, shortId, sleep } from './util.js';

const POLL_MS = 3000;
const PAGE = 50;

/** How long a conversation's name from its first message may be. */
const PREVIEW_MAX = 120;

/**
 * The name of a conversation: its title, else the start of its first
 * message (`preview`), else the end of its id (a conversation from before
 * previews were kept).
 */
export function conversationName(c) {
  return c.title || short(c.preview, PREVIEW_MAX) || shortId(c.id);
}

export function openConversations(main, app) {
  const stop = new AbortController();
  const st = { tokens: [''], page: 0, list: [], next: '' };

  const listState = h('span', { class: 'muted', 'data-testid': 'conversations-state', 'aria-live': 'polite' });
  const tbody = h('tbody');
  const empty = h('p', { class: 'muted', 'data-testid': 'conversations-empty', hidden: true },
    'No conversations yet. Start one: its messages are kept, and each next message continues it.');
  const prev = h('button', { type: 'button', class: 'btn', 'data-testid': 'conversations-prev', disabled: true }, '← Newer');
  const next = h('button', { type: 'button', class: 'btn', 'data-testid': 'conversations-next', disabled: true }, 'Older →');
  const pageNo = h('span', { class: 'muted' });
  const newLink = h('a', { class: 'btn primary', href: '#/conversations/new', 'data-testid': 'new-conversation' }, 'New conversation');

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
  function draw() {
    const now = Date.now();
    let before = null;
    const keep = new Set();
    for (let i = st.list.length - 1; i >= 0; i--) {
      const c = st.list[i];
      keep.add(c.id);
      let row = rows.get(c.id);
      if (!row) {
        row = {
          tr: h('tr', { 'data-testid': 'conversation-row', 'data-conversation-id': c.id }),
          link: h('a', { href: `#/conversations/${encodeURIComponent(c.id)}`, 'data-testid': 'conversation-link' }),
          running: h('a', { class: 'badge st-running', 'data-testid': 'conversation-running', hidden: true }, 'running'),
          sub: h('div', { class: 'muted small', 'data-testid': 'conversation-sub' }),
          agent: h('td', { class: 'c1', 'data-testid': 'conversation-agent' }),
          count: h('td', { class: 'c2', 'data-testid': 'conversation-messages' }),
          used: h('td', { class: 'c3', 'data-testid': 'conversation-used' }),
        };
        row.tr.append(h('td', { class: 'c0' }, h('div', { class: 'conv-name' }, row.link, ' ', row.running), row.sub), row.agent, row.count, row.used);
        rows.set(c.id, row);
      }
      // Named by its id only when it has neither title nor preview; the
      // whole id is in the tooltip and, shortened, under the name.
      const named = !!(c.title || short(c.preview));
      row.link.textContent = conversationName(c);
      row.link.classList.toggle('untitled', !named);
      row.link.title = c.id;
      row.tr.dataset.running = c.runningRunId ? 'true' : 'false';
      row.running.hidden = !c.runningRunId;
      if (c.runningRunId) {
        row.running.href = `#/runs/${encodeURIComponent(c.runningRunId)}`;
        row.running.title = `A run of it is going on: ${c.runningRunId}`;
      }
      const count = num(c.messageCount);
      const used = parseTime(c.updatedAt || c.createdAt);
      row.agent.textContent = c.agent || '—';
      row.count.textContent = fmtInt(count);
      row.used.textContent = fmtAgo(used, now);
      row.used.title = fmtTime(used);
      // Under the name: what no column says, and (on a phone only) what
      // the hidden columns say; the count is in its column on a desktop.
      const parts = [];
      if (named) parts.push(shortId(c.id));
      if (num(c.folded)) parts.push(`${fmtInt(num(c.folded))} folded`);
      parts.push(fmtBytes(c.bytes));
      row.sub.textContent = parts.join(' · ');
      row.sub.append(h('span', { class: 'phone-only', 'data-testid': 'conversation-sub-phone' },
        `${fmtInt(count)} message${count === 1 ? '' : 's'} · ${c.agent || 'no agent yet'} · used ${fmtAgo(used, now)}`));
      if (row.tr.nextSibling !== before || row.tr.parentNode !== tbody) tbody.insertBefore(row.tr, before);
      before = row.tr;
    }
    for (const [id, row] of rows) {
      if (!keep.has(id)) {
        row.tr.remove();
        rows.delete(id);
      }
    }
    empty.hidden = st.list.length > 0;
    prev.disabled = st.page === 0;
    next.disabled = !st.next;
    pageNo.textContent = `page ${st.page + 1}`;
  }

  let polling = null;
  async function poll() {
    const mine = {};
    polling = mine;
    try {
      const r = await api.listConversations({ pageSize: PAGE, pageToken: st.tokens[st.page] || '' }, stop.signal);
      if (polling !== mine) return;
      st.list = r.conversations || [];
      st.next = r.nextPageToken || '';
      listState.textContent = `live · ${st.list.length} conversation${st.list.length === 1 ? '' : 's'} on this page`;
      listState.dataset.state = 'ok';
      draw();
    } catch (e) {
      if (e.name === 'AbortError' || polling !== mine) return;
      listState.textContent = `cannot list conversations: ${e.describe ? e.describe() : e.message}`;
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

  main.replaceChildren(h('section', { class: 'conversations-page', 'data-testid': 'conversations-page', 'aria-labelledby': 'conversations-h' },
    h('div', { class: 'list-head' },
      h('h1', { id: 'conversations-h', text: 'Conversations' }), newLink, listState),
    h('p', { class: 'muted small' }, 'Each message of a conversation is a run that begins with the conversation so far. Most recently used first.'),
    h('div', { class: 'table-scroll' },
      h('table', { class: 'conversations', 'data-testid': 'conversations-table' },
        h('caption', { class: 'sr-only', text: 'Conversations of this tenant, most recently used first' }),
        h('thead', null, h('tr', null,
          ...['Conversation', 'Agent', 'Messages', 'Last used'].map((t, i) => h('th', { scope: 'col', class: `c${i}`, text: t })))),
        tbody)),
    empty,
    h('div', { class: 'pager' }, prev, pageNo, next)));
  window.batonConsole = { seqs: [] };

  return {
    destroy() {
      stop.abort();
    },
  };
}
