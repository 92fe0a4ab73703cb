// The conversation tree of a run: one section per context, the root open,
// every sub-agent collapsed until opened (its body is built only then).
// Each open context draws at most its last WINDOW items ("Show earlier"
// draws more); streamed text is appended to a text node; everything else
// is patched in place from the model, once per animation frame (flush).

import { add, clear, codeName, fmtBytes, fmtDuration, fmtInt, fmtTime, fmtUsage, h, pretty, short, shortId, tokens } from './util.js';

const WINDOW = 300;
const EARLIER = 300;
// What "Expand all" draws of each context it opens: a whole tree of a
// hundred busy sub-agents at WINDOW each was ~83,000 elements (~390 MB in
// the tab); "Show earlier" still draws the rest of any one of them.
const WINDOW_EXPAND_ALL = 8;
const ARGS_INLINE = 160;

export class TreeView {
  /**
   * `actions`: `{approve(item, approved, reason), answer(item, text)}`,
   * each a promise that rejects with an ApiError.
   */
  constructor(model, container, actions) {
    this.model = model;
    this.actions = actions;
    this.container = container;
    container.append(this.renderCtx(model.root));
  }

  /** Draws whatever changed in the model. `reveal`: open the way to new open questions. */
  flush(reveal) {
    const dirty = this.model.dirtyCtx;
    if (dirty.size) {
      this.model.dirtyCtx = new Set();
      for (const ctx of dirty) this.flushCtx(ctx);
    }
    if (reveal) {
      for (const item of this.model.pending.values()) {
        if (!item.revealed) {
          item.revealed = true;
          this.reveal(item, false);
        }
      }
    }
  }

  // ---- contexts -------------------------------------------------------

  renderCtx(ctx) {
    const chevron = h('span', { class: 'chevron', 'aria-hidden': 'true' });
    const agentEl = h('span', { class: 'ctx-agent', 'data-testid': 'context-agent' });
    const toggle = h('button', {
      type: 'button', class: 'ctx-toggle', 'data-testid': 'context-toggle', 'aria-expanded': 'false',
      on: { click: () => this.toggle(ctx) },
    }, chevron, agentEl);
    const idEl = h('code', { class: 'ctx-id', 'data-testid': 'context-id', text: ctx.id });
    const modelEl = h('span', { class: 'ctx-model', 'data-testid': 'context-model' });
    const depthEl = h('span', { class: 'ctx-depth', 'data-testid': 'context-depth', text: `depth ${ctx.depth}` });
    const statusEl = h('span', { class: 'badge', 'data-testid': 'context-status' });
    const metaEl = h('span', { class: 'ctx-meta' });
    const head = h('div', { class: 'ctx-head' }, toggle, idEl, modelEl, depthEl, statusEl, metaEl);
    const sec = h('section', {
      class: `ctx${ctx.depth === 0 ? ' ctx-root' : ''}`, 'data-testid': 'context',
      'data-context-id': ctx.id, 'data-depth': ctx.depth,
    }, head);
    ctx._r = {
      sec, toggle, chevron, agentEl, modelEl, statusEl, metaEl,
      body: null, list: null, more: null, from: 0, to: 0, cap: WINDOW,
    };
    this.updateHead(ctx);
    if (ctx.expanded) this.buildBody(ctx);
    return sec;
  }

  updateHead(ctx) {
    const r = ctx._r;
    ctx.headDirty = false;
    const step = ctx.step;
    let name = ctx.agent;
    if (step) name = `step ${step.id}${ctx.agent ? ` · ${ctx.agent}` : step.agent ? ` · ${step.agent}` : ''}`;
    if (!name) name = ctx.depth === 0 ? this.model.target || 'run' : '…';
    r.agentEl.textContent = name;
    r.modelEl.textContent = ctx.model || '';
    r.modelEl.hidden = !ctx.model;
    const status = step && step.state !== 'pending' ? step.state : ctx.status;
    r.statusEl.textContent = step && step.attempt > 1 ? `${status} · attempt ${step.attempt}` : status;
    r.statusEl.className = `badge st-${status}`;
    r.sec.dataset.status = status;
    if (ctx.agent) r.sec.dataset.agent = ctx.agent;
    const parts = [];
    const subs = ctx.children.length;
    if (subs) parts.push(`${subs} sub-context${subs === 1 ? '' : 's'}`);
    parts.push(`${ctx.items.length - subs} item${ctx.items.length - subs === 1 ? '' : 's'}`);
    const t = tokens(ctx.usage);
    if (t) parts.push(`${t} tokens`);
    if (Number.isFinite(ctx.startMs) && Number.isFinite(ctx.endMs)) parts.push(fmtDuration(ctx.endMs - ctx.startMs));
    r.metaEl.textContent = parts.join(' · ');
    r.toggle.setAttribute('aria-expanded', String(!!r.body));
    r.toggle.setAttribute('aria-label', `${r.body ? 'Collapse' : 'Expand'} ${ctx.id} (${name})`);
  }

  buildBody(ctx) {
    const r = ctx._r;
    if (r.body) return;
    if (ctx.brief) {
      r.cap = Math.min(r.cap, WINDOW_EXPAND_ALL);
      ctx.brief = false;
    }
    r.list = h('ol', { class: 'items' });
    r.more = h('button', {
      type: 'button', class: 'btn small more', 'data-testid': 'show-earlier', hidden: true,
      on: { click: () => this.showEarlier(ctx, EARLIER) },
    });
    r.body = h('div', { class: 'ctx-body' }, r.more, r.list);
    r.sec.append(r.body);
    const n = ctx.items.length;
    r.from = Math.max(0, n - r.cap);
    r.to = r.from;
    this.flushCtx(ctx);
    this.updateHead(ctx);
  }

  collapse(ctx) {
    const r = ctx._r;
    if (!r || !r.body) return;
    for (let i = r.from; i < r.to; i++) this.dropItem(ctx.items[i]);
    r.body.remove();
    r.body = r.list = r.more = null;
    r.cap = WINDOW;
    this.updateHead(ctx);
  }

  toggle(ctx) {
    ctx.expanded = !ctx._r.body;
    if (ctx.expanded) this.buildBody(ctx);
    else this.collapse(ctx);
  }

  /** Forgets the elements of a context no longer on the page. */
  dropCtx(ctx) {
    const r = ctx._r;
    if (!r) return;
    if (r.body) for (let i = r.from; i < r.to; i++) this.dropItem(ctx.items[i]);
    ctx._r = null;
  }

  dropItem(item) {
    if (!item) return;
    if (item.kind === 'child') this.dropCtx(item.child);
    item._el = null;
    item._p = null;
  }

  /** Draws the context's new items (dropping the oldest past its window) and patches changed ones. */
  flushCtx(ctx) {
    const r = ctx._r;
    if (!r) {
      ctx.dirty.clear();
      return;
    }
    if (!r.body) {
      ctx.dirty.clear();
      this.updateHead(ctx);
      return;
    }
    const items = ctx.items;
    const n = items.length;
    let from = r.from;
    if (n - from > r.cap) {
      const cut = n - r.cap;
      for (let i = from; i < Math.min(cut, r.to); i++) {
        const it = items[i];
        if (it._el) it._el.remove();
        this.dropItem(it);
      }
      from = cut;
    }
    const start = Math.max(r.to, from);
    if (start < n) {
      const frag = document.createDocumentFragment();
      for (let i = start; i < n; i++) frag.append(this.renderItem(items[i]));
      r.list.append(frag);
    }
    r.from = from;
    r.to = n;
    for (const it of ctx.dirty) if (it._el) this.updateItem(it);
    ctx.dirty.clear();
    r.more.hidden = from === 0;
    r.more.textContent = `Show ${Math.min(EARLIER, from)} earlier (${from} not shown)`;
    this.updateHead(ctx);
  }

  showEarlier(ctx, count) {
    const r = ctx._r;
    if (!r || !r.body || r.from === 0) return;
    const from = Math.max(0, r.from - count);
    const frag = document.createDocumentFragment();
    for (let i = from; i < r.from; i++) frag.append(this.renderItem(ctx.items[i]));
    r.list.prepend(frag);
    r.from = from;
    r.cap = Math.max(r.cap, ctx.items.length - from + WINDOW);
    r.more.hidden = from === 0;
    r.more.textContent = `Show ${Math.min(EARLIER, from)} earlier (${from} not shown)`;
  }

  /** Opens every context on the way to `item` and draws it; `focus`: scroll there and focus it. */
  reveal(item, focus) {
    const chain = [];
    for (let c = item.ctx; c; c = c.parent) chain.unshift(c);
    for (let i = 0; i < chain.length; i++) {
      const c = chain[i];
      if (!c._r) return;
      c.expanded = true;
      if (!c._r.body) this.buildBody(c);
      const target = i + 1 < chain.length ? chain[i + 1].parentItem : item;
      if (!target._el) {
        if (target.index < c._r.from) this.showEarlier(c, c._r.from - target.index);
        else this.flushCtx(c);
      }
    }
    if (focus && item._el) {
      item._el.scrollIntoView({ block: 'center' });
      const control = item._el.querySelector('button:not([disabled]), input');
      (control || item._el).focus({ preventScroll: true });
    }
  }

  expandAll() {
    for (const c of this.model.contexts.values()) {
      c.expanded = true;
      // Opened by "Expand all", not by a person: a short window each.
      if (c.depth > 0 && !(c._r && c._r.body)) c.brief = true;
    }
    const open = (c) => {
      if (!c._r) return;
      if (!c._r.body) this.buildBody(c);
      else for (const k of c.children) open(k);
    };
    open(this.model.root);
  }

  collapseAll() {
    for (const c of this.model.contexts.values()) {
      if (c.depth === 0) continue;
      if (c._r && c._r.body) this.collapse(c);
      c.expanded = false;
    }
  }

  // ---- items ----------------------------------------------------------

  renderItem(item) {
    const fn = this[`render_${item.kind}`] || this.render_note;
    item._p = {};
    const el = fn.call(this, item, item._p);
    item._el = el;
    if (item.replayed) {
      el.classList.add('replayed');
      el.dataset.replayed = 'true';
      el.prepend(h('span', { class: 'replayed-mark', title: 'Taken from the recording of the run this one was forked from: nothing was asked again', text: 'replayed' }));
    }
    this.updateItem(item);
    return el;
  }

  render_live(item) {
    return h('li', { class: 'item note live', 'data-testid': 'fork-live' }, item.afterEdit
      ? `▶ edited here, then live (this fork's seq ${item.seq}): the fork point's outcome as it was edited, then what ran for this fork`
      : `▶ live from here (this fork's seq ${item.seq}): what follows ran for this fork`);
  }

  updateItem(item) {
    const fn = this[`update_${item.kind}`];
    if (fn) fn.call(this, item, item._p, item._el);
    if (item.edited && !item._p.edited) {
      // Its start may have been replayed; its outcome was not.
      item._el.classList.remove('replayed');
      delete item._el.dataset.replayed;
      item._el.querySelector(':scope > .replayed-mark')?.remove();
      item._el.classList.add('edited');
      item._el.dataset.edited = 'true';
      item._p.edited = h('span', { class: 'replayed-mark edited-mark', 'data-testid': 'fork-edited', title: 'The fork point: this outcome was edited for this fork, not done again', text: 'edited' });
      item._el.prepend(item._p.edited);
    }
    if (item.forkSeq && !item._p.fork && this.actions.fork) {
      item._p.fork = h('button', {
        type: 'button', class: 'btn small fork', 'data-testid': 'fork-here', 'data-seq': String(item.forkSeq),
        title: `Fork the run at seq ${item.forkSeq}: replay everything before it, edit this, go live`,
        on: { click: () => this.actions.fork(item) },
      }, 'Fork from here');
      item._el.append(item._p.fork);
    }
  }

  render_child(item) {
    return h('li', { class: 'item child' }, this.renderCtx(item.child));
  }

  render_message(item, p) {
    p.text = document.createTextNode('');
    p.shown = 0;
    p.meta = h('div', { class: 'meta' });
    return h('li', { class: 'item msg', 'data-testid': 'message' },
      h('div', { class: 'who', text: item.agent || 'model' }),
      h('div', { class: 'text', 'data-testid': 'message-text' }, p.text),
      p.meta);
  }

  update_message(item, p, el) {
    const text = item.text;
    if (item.replaced || p.shown > text.length) {
      p.text.data = text;
      item.replaced = false;
    } else if (p.shown < text.length) {
      p.text.appendData(text.slice(p.shown));
    }
    p.shown = text.length;
    if (el.dataset.final !== String(item.final)) {
      el.dataset.final = String(item.final);
      el.classList.toggle('streaming', !item.final);
    }
    if (item.final) {
      if (!text && item.toolCalls?.length && !p.calls) {
        // A turn of tool calls alone: say which, where its text would be.
        p.calls = true;
        el.classList.add('calls-only');
        p.text.data = `called ${item.toolCalls.map((c) => c.tool || 'a tool').join(', ')}`;
      }
      const parts = [];
      if (item.discarded) {
        el.classList.add('superseded');
        parts.push('discarded: its model failed mid-answer and the next model started over');
      }
      if (item.skipped?.length) {
        parts.push(`answered by ${item.model} after ${item.skipped.map((x) => `${x.model} (${x.reason.replace('_', ' ')})`).join(', ')}`);
      }
      if (item.superseded) {
        el.classList.add('superseded');
        parts.push('superseded: the run resumed elsewhere and this turn was done again');
      }
      const u = fmtUsage(item.usage);
      if (u) parts.push(u);
      if (item.finishReason) parts.push(`finish: ${item.finishReason}`);
      p.meta.textContent = parts.join(' · ');
    }
  }

  render_tool(item, p) {
    p.state = h('span', { class: 'badge' });
    p.dur = h('span', { class: 'meta' });
    p.args = h('div', { class: 'args' });
    p.extra = h('div', { class: 'tool-extra' });
    p.argsShown = null;
    return h('li', { class: 'item tool', 'data-testid': 'tool-call', 'data-call-id': item.callId },
      h('div', { class: 'tool-head' },
        h('span', { class: 'kind', text: 'tool' }),
        h('span', { class: 'tool-name', 'data-testid': 'tool-name', text: item.tool }),
        p.state, p.dur),
      p.args, p.extra);
  }

  update_tool(item, p, el) {
    const state = item.done ? (item.error ? 'error' : 'ok') : 'running';
    el.dataset.state = state;
    p.state.textContent = item.done ? (item.error ? 'failed' : 'done') : item.restarts ? 'running again' : 'running';
    p.state.className = `badge st-${state}`;
    p.dur.textContent = Number.isFinite(item.durationS) ? fmtDuration(item.durationS * 1000) : '';
    if (p.argsShown !== item.args) {
      p.argsShown = item.args;
      clear(p.args);
      if (item.args) p.args.append(block('arguments', pretty(item.args), 'tool-args', item.args.length <= ARGS_INLINE));
    }
    // Progress changes thousands of times: patch the bar, rebuild nothing.
    // The bar stays when the call ends, at its last value.
    if (item.progress) {
      if (!p.bar) {
        p.bar = h('progress', { max: '100', 'data-testid': 'progress', 'data-call-id': item.callId });
        p.barText = h('span', { class: 'progress-text', 'data-testid': 'progress-message' });
        p.barRow = h('label', { class: 'progress-row' }, p.bar, p.barText);
        p.extra.prepend(p.barRow);
      }
      const v = String(item.progress.percent);
      if (p.bar.getAttribute('value') !== v) {
        p.bar.value = item.progress.percent;
        p.bar.setAttribute('value', v);
      }
      p.barText.textContent = `${v}%${item.progress.message ? ` ${item.progress.message}` : ''}`;
    }
    if (item.options && p.optionsShown !== item.options) {
      p.optionsShown = item.options;
      p.optionsEl?.remove();
      p.optionsEl = h('div', { class: 'tool-options', 'data-testid': 'tool-options' },
        h('div', { text: item.options.question || 'Options' }),
        h('ul', null, ...item.options.options.map((o) => h('li', { 'data-testid': 'tool-option', text: o }))));
      p.extra.append(p.optionsEl);
    }
    if (item.done && !p.resultShown) {
      p.resultShown = true;
      if (item.error) {
        p.extra.append(h('div', { class: 'error', 'data-testid': 'tool-error', text: item.error }));
      } else {
        p.extra.append(block('result', item.result, 'tool-result', item.result.length <= ARGS_INLINE));
      }
      if (item.policies && item.policies.length) {
        const txt = item.policies.map((x) =>
          `${x.policy} (${x.scope}): ${String(x.decision || '').replace(/^POLICY_DECISION_/, '').toLowerCase()}${x.error ? ` — ${x.error}` : ''}`);
        p.extra.append(h('div', { class: 'meta', text: `policies: ${txt.join('; ')}` }));
      }
    } else if (!item.done && p.resultShown) {
      // Started again after a resume.
      p.resultShown = false;
      p.optionsShown = null;
      clear(p.extra);
      p.bar = p.barRow = p.barText = p.optionsEl = null;
    }
  }

  render_approval(item, p) {
    p.body = h('div', { class: 'ask-body' });
    const el = h('li', {
      class: 'item ask approval', 'data-testid': 'approval', 'data-approval-id': item.approvalId,
      'data-call-id': item.callId, tabindex: '-1',
    },
    h('div', { class: 'ask-title' }, h('span', { class: 'kind', text: 'approval' }),
      raiseTitle(item) || h('span', null, 'Run tool ', h('strong', { text: item.tool }), '?')),
    item.args && item.tool !== 'raise_budget' ? h('pre', { class: 'approval-args', 'data-testid': 'approval-args', text: pretty(item.args) }) : null,
    p.body);
    return el;
  }

  update_approval(item, p, el) {
    const state = item.resolved ? (item.resolved.approved ? 'approved' : 'denied') : item.closed ? 'closed' : 'pending';
    if (p.state === state && p.sending === item.sending && p.err === item.errorText) return;
    p.state = state;
    p.sending = item.sending;
    p.err = item.errorText;
    el.dataset.state = state;
    clear(p.body);
    if (state === 'pending') {
      const reason = h('input', { type: 'text', 'data-testid': 'approval-reason', id: `reason-${item.approvalId}`, autocomplete: 'off' });
      const send = (approved) => this.act(item, () => this.actions.approve(item, approved, reason.value));
      add(p.body,
        item.deadline ? h('div', { class: 'meta', text: `denied by silence at ${fmtTime(item.deadline)}` }) : null,
        h('div', { class: 'ask-row' },
          h('label', { for: reason.id, text: 'Reason (optional)' }), reason,
          h('button', { type: 'button', class: 'btn primary', 'data-testid': 'approve', disabled: item.sending, on: { click: () => send(true) } }, 'Approve'),
          h('button', { type: 'button', class: 'btn danger', 'data-testid': 'deny', disabled: item.sending, on: { click: () => send(false) } }, 'Deny')),
        item.sending ? h('div', { class: 'meta', text: 'sent; waiting for the run…' }) : null);
    } else if (state === 'closed') {
      p.body.append(h('div', { class: 'meta', 'data-testid': 'approval-result', text: 'unanswered when the run ended' }));
    } else {
      const r = item.resolved;
      const source = String(r.source || '').replace(/^APPROVAL_SOURCE_/, '').toLowerCase();
      p.body.append(h('div', { class: `verdict ${state}`, 'data-testid': 'approval-result' },
        `${state}${source ? ` by ${{ mode: 'the approval mode', fork: "the fork's edit" }[source] || source}` : ''}${r.reason ? `: ${r.reason}` : ''}`));
    }
    if (item.errorText) p.body.append(h('div', { class: 'error', role: 'alert', 'data-testid': 'item-error', text: item.errorText }));
  }

  render_input(item, p) {
    p.body = h('div', { class: 'ask-body' });
    return h('li', {
      class: 'item ask input', 'data-testid': 'input-request', 'data-input-id': item.inputId,
      'data-call-id': item.callId, tabindex: '-1',
    },
    h('div', { class: 'ask-title' }, h('span', { class: 'kind', text: 'question' }),
      h('span', { 'data-testid': 'input-prompt', text: item.prompt || `${item.tool} asks for input` })),
    p.body);
  }

  update_input(item, p, el) {
    const state = item.answer !== null ? 'answered' : item.timedOut ? 'timed-out' : item.closed ? 'closed' : 'pending';
    if (p.state === state && p.sending === item.sending && p.err === item.errorText) return;
    p.state = state;
    p.sending = item.sending;
    p.err = item.errorText;
    el.dataset.state = state;
    clear(p.body);
    if (state === 'pending') {
      const text = h('input', { type: 'text', 'data-testid': 'input-text', id: `answer-${item.inputId}`, autocomplete: 'off', required: true });
      const send = (value) => this.act(item, () => this.actions.answer(item, value));
      const form = h('form', {
        class: 'ask-row',
        on: { submit: (e) => { e.preventDefault(); if (text.value) send(text.value); } },
      },
      h('label', { for: text.id, text: 'Answer' }), text,
      h('button', { type: 'submit', class: 'btn primary', 'data-testid': 'input-submit', disabled: item.sending }, 'Send'));
      add(p.body,
        item.options.length ? h('div', { class: 'options', role: 'group', 'aria-label': 'Suggested answers' },
          ...item.options.map((o) => h('button', {
            type: 'button', class: 'btn', 'data-testid': 'input-option', 'data-option': o, disabled: item.sending,
            on: { click: () => send(o) },
          }, o))) : null,
        form,
        item.deadline ? h('div', { class: 'meta', text: `no answer for the tool at ${fmtTime(item.deadline)} if unanswered` }) : null,
        item.sending ? h('div', { class: 'meta', text: 'sent; waiting for the run…' }) : null);
    } else if (state === 'timed-out') {
      p.body.append(h('div', { class: 'verdict denied', 'data-testid': 'input-answer', text: 'nobody answered in time: the tool got no answer' }));
    } else if (state === 'closed') {
      p.body.append(h('div', { class: 'meta', 'data-testid': 'input-answer', text: 'unanswered when the run ended' }));
    } else {
      p.body.append(h('div', { class: 'verdict approved', 'data-testid': 'input-answer' }, 'answered: ', h('strong', { text: item.answer })));
    }
    if (item.errorText) p.body.append(h('div', { class: 'error', role: 'alert', 'data-testid': 'item-error', text: item.errorText }));
  }

  /** Sends an answer; errors show on the item; the item settles when the run's event arrives. */
  async act(item, send) {
    item.sending = true;
    item.errorText = '';
    this.updateItem(item);
    try {
      await send();
    } catch (e) {
      item.sending = false;
      item.errorText = e.describe ? e.describe() : String(e.message || e);
    }
    if (item._el) {
      this.updateItem(item);
      if (item.errorText) item._el.focus();
    }
  }

  render_agent(item) {
    return h('li', { class: 'item note', 'data-testid': 'agent-started' },
      `● ${item.agent}`, item.model ? h('span', { class: 'meta', text: ` on ${item.model}` }) : null);
  }

  render_fallback(item) {
    return h('li', { class: 'item note fallback', 'data-testid': 'model-fallback', title: item.error },
      '↻ ', h('strong', { text: item.from }), ` failed (${item.reason.replace('_', ' ')}): `,
      h('strong', { text: item.to }), ' answers instead',
      item.discarded ? '; the text above is discarded' : '');
  }

  render_wait(item) {
    // A wait the server could not estimate (0 or absent) says no number.
    const w = item.waitS;
    const about = Number.isFinite(w) && w >= 0.1 ? `, about ${w < 10 ? w.toFixed(1) : Math.round(w)} s` : '';
    return h('li', { class: 'item note wait', 'data-testid': 'rate-limit-wait' },
      `◷ waiting for ${item.provider}'s rate limit${about}${item.ahead ? ` (${item.ahead} ahead)` : ''}`);
  }

  render_conversation(item) {
    const link = h('a', { href: `#/conversations/${encodeURIComponent(item.conversationId)}`, 'data-testid': 'run-conversation-link', title: item.conversationId },
      h('code', { text: shortId(item.conversationId) }));
    return h('li', { class: 'item note conversation', 'data-testid': 'run-conversation-note' },
      item.messages ? '◆ continues conversation ' : '◆ starts conversation ', link,
      item.messages ? `: the model saw its ${fmtInt(item.messages)} earlier message${item.messages === 1 ? '' : 's'} first` : '');
  }

  render_compacted(item) {
    const why = [item.mode, item.reason.replaceAll('_', ' ')].filter(Boolean).join(', ');
    const tokensSaid = item.tokensBefore ? ` · about ${fmtInt(item.tokensBefore)} → ${fmtInt(item.tokensAfter)} tokens` : '';
    return h('li', { class: 'item note compacted', 'data-testid': 'history-compacted', 'data-mode': item.mode },
      `⇤ folded ${fmtInt(item.folded)} earlier message${item.folded === 1 ? '' : 's'}${why ? ` (${why})` : ''}`
        + `, kept ${fmtInt(item.kept)}${tokensSaid}`,
      item.summary ? block('summary', item.summary, 'history-summary', false) : null);
  }

  render_budget(item) {
    const then = { finish: ' One last answer, without tools.', ask: ' Asking a person for more.' }[item.action] || '';
    return h('li', { class: 'item note budget', 'data-testid': 'budget-exhausted', 'data-action': item.action },
      h('strong', { text: '⊘ ' }), `${item.message}.${then}`);
  }

  render_handoff(item) {
    return h('li', { class: 'item note handoff', 'data-testid': 'handoff' },
      'handoff ', h('strong', { text: item.from }), ' → ', h('strong', { text: item.to }));
  }

  render_write(item) {
    return h('li', { class: 'item note', 'data-testid': 'context-written', 'data-key': item.key },
      'wrote ', h('code', { text: item.key }), ` v${item.version} (${fmtBytes(item.sizeBytes)})`);
  }

  render_done(item) {
    const u = fmtUsage(item.usage);
    return h('li', { class: 'item note done', 'data-testid': 'agent-completed' },
      `■ ${item.agent || 'agent'} done`,
      item.shown || !item.output ? null : h('div', { class: 'output', text: item.output }),
      u ? h('div', { class: 'meta', text: u }) : null);
  }

  render_step(item) {
    return h('li', { class: `item note step ${item.cls || ''}`, 'data-testid': 'step-event' },
      item.text, item.output ? h('div', { class: 'output', text: short(item.output, 400) }) : null);
  }

  render_diverged(item) {
    return h('li', { class: 'item note diverged', 'data-testid': 'run-diverged' },
      h('strong', { text: `⚠ the replay diverged at ${item.at}` }),
      item.strict ? ': the strict replay ends here. ' : ': live from here. ',
      h('code', { text: item.diff }));
  }

  render_resumed(item) {
    return h('li', { class: 'item note resumed', 'data-testid': 'run-resumed' },
      `↻ resumed on ${item.replica || 'another replica'} from seq ${item.checkpointSeq}; what was in flight is done again`);
  }

  render_end(item) {
    const li = h('li', { class: `item end ${item.outcome}`, 'data-testid': 'run-end', 'data-outcome': item.outcome });
    if (item.outcome === 'completed') {
      li.append(h('strong', { text: 'completed' }));
      if (!item.shown && item.output) li.append(h('div', { class: 'output', text: item.output }));
    } else if (item.outcome === 'failed') {
      li.append(h('strong', { text: 'failed ' }),
        h('code', { 'data-testid': 'run-error-code', 'data-code': item.code, text: `${codeName(item.code)} (${item.code})` }),
        h('div', { text: item.message }));
    } else {
      add(li, h('strong', { text: 'cancelled' }), item.reason ? h('div', { text: item.reason }) : null);
    }
    return li;
  }

  render_note(item) {
    return h('li', { class: 'item note', 'data-testid': 'note', text: item.text || '' });
  }
}

/** An approval to raise a budget, said plainly (null for any other). */
function raiseTitle(item) {
  if (item.tool !== 'raise_budget') return null;
  let a;
  try { a = JSON.parse(item.args); } catch { return null; }
  const more = [];
  if (a.tokens) more.push(`${a.tokens.more} tokens (${a.tokens.spent} of ${a.tokens.limit} spent)`);
  if (a.cost) more.push(`${a.cost.more} ${a.cost.currency} (${a.cost.spent} of ${a.cost.limit} spent)`);
  return h('span', { 'data-testid': 'raise-budget' }, 'Raise budget ', h('strong', { text: a.budget || '' }), ` by ${more.join(' and ')}?`);
}

/** A labelled block of text: inline when short, else in a <details>. */
function block(label, text, testid, inline) {
  if (inline) {
    return h('div', { class: 'kv' }, h('span', { class: 'k', text: `${label} ` }), h('code', { 'data-testid': testid, text: short(text, 1000) }));
  }
  return h('details', { class: 'kv' },
    h('summary', null, `${label} `, h('span', { class: 'meta', text: short(text, 80) })),
    h('pre', { 'data-testid': testid, text }));
}
