// Baton's web console: the header (API key, the pages), error alerts, and
// the router between the runs page (#/runs), a run's page (#/runs/{runId};
// #/runs/{runId}?pending={approvalId or inputId} shows that item once drawn),
// the conversations page (#/conversations) and a conversation's chat
// (#/conversations/{id}; #/conversations/new starts one), the
// experiments (#/experiments, #/experiments/{id},
// #/experiments/compare?baseline=…&candidate=…), and the schedules
// (#/schedules, #/schedules/{id}).

import { api, getKey, setKey } from './api.js';
import { openChat } from './chat.js';
import { openConversations } from './conversations.js';
import { openComparison, openExperiment, openExperiments } from './experiments.js';
import { openRun } from './run.js';
import { openRuns } from './runs.js';
import { openSchedule, openSchedules } from './schedules.js';
import { clear, h, shortId } from './util.js';

const main = document.getElementById('main');
const alerts = document.getElementById('alerts');

/** What every page shares. */
const app = {
  config: { traceUrl: '', keysRequired: true },
  /** Shows an error (an ApiError or any Error) until dismissed; `key` replaces an earlier alert of that key. */
  alert(err, key) {
    const code = err.code || 'ERROR';
    const text = err.describe ? err.describe() : String(err.message || err);
    const hint = code === 'UNAUTHENTICATED' ? ' — type an API key at the top of the page.' : '';
    const id = key || text;
    for (const old of alerts.children) if (old.dataset.key === id) old.remove();
    const box = h('div', { class: 'alert', role: 'alert', 'data-testid': 'error', 'data-code': code, 'data-key': id },
      h('span', { text: text + hint }),
      h('button', { type: 'button', class: 'btn small', 'aria-label': 'Dismiss this error', on: { click: () => box.remove() } }, 'Dismiss'));
    alerts.append(box);
    while (alerts.children.length > 4) alerts.firstChild.remove();
  },
};

// ---- the API key (sessionStorage: this tab only) ----
const keyIn = document.getElementById('api-key');
const keyState = document.getElementById('key-state');
function drawKey() {
  const k = getKey();
  keyIn.value = k;
  keyState.textContent = k ? 'key set for this tab' : 'no key';
  keyState.dataset.state = k ? 'set' : 'none';
}
document.getElementById('key-form').addEventListener('submit', (e) => {
  e.preventDefault();
  setKey(keyIn.value.trim());
  drawKey();
  loadConfig();
  route();
});
document.getElementById('key-clear').addEventListener('click', () => {
  setKey('');
  drawKey();
  route();
});
drawKey();

async function loadConfig() {
  try {
    const c = await api.config(AbortSignal.timeout(3000));
    app.config = { traceUrl: c.traceUrl || '', keysRequired: c.keysRequired !== false };
  } catch {
    app.config = { traceUrl: '', keysRequired: true };
  }
  // A server that needs no key gets no key bar (unless a key is set).
  document.getElementById('key-form').hidden = !app.config.keysRequired && !getKey();
}

// ---- routing ----
let page = null;
let first = true;
function route() {
  page?.destroy();
  page = null;
  clear(alerts);
  const m = /^#\/runs\/([^/?#]+)(?:\?(.*))?/.exec(location.hash);
  const c = /^#\/conversations\/([^/?#]+)(?:\?(.*))?/.exec(location.hash);
  let section = 'runs';
  if (m) {
    const runId = decodeURIComponent(m[1]);
    document.title = `Run ${shortId(runId)} · Baton`;
    page = openRun(main, runId, app, new URLSearchParams(m[2] || ''));
  } else if (c) {
    const id = decodeURIComponent(c[1]);
    section = 'conversations';
    document.title = id === 'new' ? 'New conversation · Baton' : `Conversation ${shortId(id)} · Baton`;
    page = openChat(main, id, app, new URLSearchParams(c[2] || ''));
  } else if (/^#\/experiments\/compare(?:\?(.*))?$/.test(location.hash)) {
    section = 'experiments';
    document.title = 'Comparison · Baton';
    page = openComparison(main, new URLSearchParams(location.hash.split('?')[1] || ''), app);
  } else if (/^#\/experiments\/([^/?#]+)$/.test(location.hash)) {
    section = 'experiments';
    const id = decodeURIComponent(/^#\/experiments\/([^/?#]+)$/.exec(location.hash)[1]);
    document.title = `Experiment ${id} · Baton`;
    page = openExperiment(main, id, app);
  } else if (/^#\/experiments\/?$/.test(location.hash)) {
    section = 'experiments';
    document.title = 'Experiments · Baton';
    page = openExperiments(main, app);
  } else if (/^#\/schedules\/([^/?#]+)$/.test(location.hash)) {
    section = 'schedules';
    const id = decodeURIComponent(/^#\/schedules\/([^/?#]+)$/.exec(location.hash)[1]);
    document.title = `Schedule ${shortId(id)} · Baton`;
    page = openSchedule(main, id, app);
  } else if (/^#\/schedules\/?$/.test(location.hash)) {
    section = 'schedules';
    document.title = 'Schedules · Baton';
    page = openSchedules(main, app);
  } else if (/^#\/conversations\/?$/.test(location.hash)) {
    section = 'conversations';
    document.title = 'Conversations · Baton';
    page = openConversations(main, app);
  } else {
    if (location.hash !== '#/runs') history.replaceState(null, '', '#/runs');
    document.title = 'Runs · Baton';
    page = openRuns(main, app);
  }
  // The header says which page this is.
  for (const a of document.querySelectorAll('.top nav a')) {
    if (a.dataset.section === section) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  if (!first) main.focus({ preventScroll: true });
  first = false;
  window.scrollTo(0, 0);
}
window.addEventListener('hashchange', route);

loadConfig().finally(route);
