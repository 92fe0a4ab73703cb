// A benchmark of Baton's web console in a browser (not a test: ./bench
// starts the servers and runs this; nothing here is part of ./run or
// tests/run). Debian's chromium, headless, 1280×800, driven by
// playwright-core; a fresh browser for every scenario. What it measures:
//
//   1. a FINISHED run of ~100,000 events opening: the time from navigating
//      to `#/runs/{id}` until window.batonConsole.done and every seq 1..N
//      applied (N = GetRun's lastSeq), then real mouse clicks (CDP input
//      events) on controls — collapse-all (which has nothing to do: how soon
//      the page answers), expand-all, the timeline, raw-events and
//      conversation tabs — each timed in the page from the event's
//      timeStamp to the end of the next frame. Two
//      shapes: `flat` (one answer of 100,000 deltas in one context) and
//      `tree` (110 sub-agents two deep), on the durable orchestrator (Redis
//      keeps every event; so does an in-memory one now, which is checked
//      too: the page replays the whole finished run);
//   2. a LIVE run at ~5,000 events/s (`live`), its page opened right after
//      the run started: every animation frame's time until the run ended
//      and the page caught up, long tasks, five clicks during the run, and
//      the seqs, which must be 1..N once each; on both orchestrators;
//   3. the tab's memory in (1), once every event is applied and again after
//      the clicks (then once more after a forced GC): the renderer's VmRSS
//      (its private part, RssAnon, beside it; the rest is mostly chromium's
//      own code mapped from disk) and peak (VmHWM) from /proc — its pid is
//      the renderer, of those CDP SystemInfo.getProcessInfo lists, that
//      spends the CPU time when the page spins — and the JS heap (CDP
//      Performance.getMetrics), against the 300 MB budget.
//
// Then a table of the figures. Exit status 1 when a check failed (a seq
// lost or doubled, a page error, a run that did not complete), whatever the
// timings; the budgets are reported, not enforced.

import { readFileSync } from 'node:fs';
import { chromium } from 'playwright-core';

function need(name) {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set: run the benchmark with tests/console/bench`);
  return v;
}
const MEMORY = need('BATON_BENCH_MEMORY_URL');
const DURABLE = need('BATON_BENCH_DURABLE_URL');
const CHROMIUM = process.env.CHROMIUM_PATH || '/usr/bin/chromium';
const SHAPES = (process.env.BATON_BENCH_SHAPES ?? 'flat,tree').split(',').filter(Boolean);
const LIVE_ON = (process.env.BATON_BENCH_LIVE_ON ?? 'memory,durable').split(',').filter(Boolean);

const OPEN_BUDGET_MS = 2000;
const MEMORY_BUDGET_MB = 300;
const LONG_FRAME_MS = 50;

const rows = [];
const failures = [];
const row = (scenario, figure, value, budget = '', verdict = '') => rows.push({ scenario, figure, value, budget, verdict });
const fail = (what) => {
  failures.push(what);
  console.error(`FAILED: ${what}`);
};
const log = (...a) => console.log(...a);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const ms = (v) => (Number.isFinite(v) ? `${Math.round(v).toLocaleString('en-US')} ms` : '—');
const ms1 = (v) => (Number.isFinite(v) ? `${v.toFixed(1)} ms` : '—');
const mb = (bytes) => `${(bytes / 1048576).toFixed(1)} MB`;
const int = (v) => Math.round(v).toLocaleString('en-US');
const within = (v, budget) => (v <= budget ? 'within' : 'OVER');

// ---- the API, from node ----------------------------------------------------

async function call(base, path, body) {
  const r = await fetch(`${base}${path}`, body === undefined ? {} : {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body),
  });
  const text = await r.text();
  if (!r.ok) throw new Error(`${path}: HTTP ${r.status}: ${text.slice(0, 300)}`);
  return JSON.parse(text);
}

const startRun = async (base, agent) => (await call(base, '/v1/runs', {
  agent, input: `bench ${agent}`, detach: true, limits: { maxTurns: 1000 },
})).runId;

async function waitEnded(base, runId, timeoutMs = 120_000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const r = await call(base, `/v1/runs/${runId}`);
    if (r.status !== 'RUN_STATUS_RUNNING') return r;
    if (Date.now() > deadline) throw new Error(`run ${runId} still running after ${timeoutMs} ms`);
    await sleep(100);
  }
}

// ---- the browser -----------------------------------------------------------

// Installed in every page before its scripts: a requestAnimationFrame loop
// recording every frame's time and the first frame at which the console has
// the whole run (done, seqs 1..N with N from the bench, or the last seq
// seen when N is 0), a long-task observer, and a probe for clicks.
function pageProbe({ runId, want }) {
  const b = { frames: [], ready: null, readyWall: null, firstRunPage: null, longTasks: [], clickProbe: null };
  window.__bench = b;
  b.want = want;
  try {
    new PerformanceObserver((l) => {
      for (const e of l.getEntries()) b.longTasks.push([e.startTime, e.duration]);
    }).observe({ type: 'longtask', buffered: true });
  } catch { /* no long-task timing */ }
  const complete = () => {
    const s = window.batonConsole;
    if (!s || s.runId !== runId || !s.done) return false;
    const n = s.seqs.length;
    const w = b.want || n;
    return n === w && s.seqs[n - 1] === w;
  };
  const tick = (t) => {
    b.frames.push(t);
    if (b.firstRunPage === null && document.querySelector('[data-testid="run-page"]')) b.firstRunPage = performance.now();
    if (b.ready === null && complete()) {
      b.ready = performance.now();
      b.readyWall = Date.now();
    }
    requestAnimationFrame(tick);
  };
  requestAnimationFrame(tick);
  // Arms a probe for the next click anywhere: its timeStamp, when the first
  // listener (capture, on window) and the last one (bubble, on document)
  // ran, and when the frame after it was done (a task posted from that
  // frame's requestAnimationFrame runs after its style, layout and paint).
  b.armClick = () => {
    const r = {};
    b.clickProbe = new Promise((resolve) => {
      window.addEventListener('click', (e) => {
        r.timeStamp = e.timeStamp;
        r.start = performance.now();
      }, { capture: true, once: true });
      document.addEventListener('click', () => {
        r.end = performance.now();
        requestAnimationFrame(() => {
          r.raf = performance.now();
          const ch = new MessageChannel();
          ch.port1.onmessage = () => {
            r.painted = performance.now();
            resolve(r);
          };
          ch.port2.postMessage(0);
        });
      }, { once: true });
    });
  };
}

async function launch() {
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--no-first-run'],
    timeout: 60_000,
  });
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  const page = await context.newPage();
  page.setDefaultTimeout(60_000);
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e.stack || e)));
  return { browser, context, page, errors };
}

/** Clicks `testid` with the mouse (a trusted event); the probe's timings. */
async function clickTimed(page, testid) {
  const loc = page.locator(`[data-testid="${testid}"]`);
  await loc.scrollIntoViewIfNeeded();
  const box = await loc.boundingBox();
  await page.evaluate(() => window.__bench.armClick());
  await page.mouse.click(box.x + box.width / 2, box.y + box.height / 2);
  const r = await page.evaluate(() => window.__bench.clickProbe);
  // The event's timeStamp is when the browser made the input event; if it
  // is not on the page's clock, count from the first listener.
  const from = Number.isFinite(r.timeStamp) && r.timeStamp > 0 && r.timeStamp <= r.start ? r.timeStamp : r.start;
  return { delay: r.start - from, handlers: r.end - r.start, toPaint: r.painted - from };
}

/**
 * The tab's renderer process: of the browser's renderers (CDP
 * SystemInfo.getProcessInfo), the one whose CPU time grows while the page
 * spins for 400 ms. (Headless chromium also runs its own WebUI renderer, a
 * spare one, and one for the first blank page: the most CPU or the most RSS
 * does not tell them apart reliably.)
 */
async function rendererOf(browser, page) {
  const s = await browser.newBrowserCDPSession();
  const cpu = async () => new Map((await s.send('SystemInfo.getProcessInfo')).processInfo
    .filter((p) => p.type === 'renderer').map((p) => [p.id, p.cpuTime]));
  const before = await cpu();
  await page.evaluate(() => {
    const t = performance.now();
    while (performance.now() - t < 400) { /* spin */ }
  });
  const after = await cpu();
  await s.detach();
  const grew = [...after].map(([pid, t]) => [pid, t - (before.get(pid) || 0)]).sort((x, y) => y[1] - x[1]);
  if (!grew.length || grew[0][1] < 0.2) throw new Error(`no renderer ran the page's 400 ms: ${JSON.stringify(grew)}`);
  return { pid: grew[0][0], others: grew.slice(1).map(([pid]) => pid) };
}

/** VmRSS (= RssAnon + RssFile + RssShmem) and VmHWM of a process, in bytes. */
function procStatus(pid) {
  try {
    const s = readFileSync(`/proc/${pid}/status`, 'utf8');
    const kb = (k) => Number((s.match(new RegExp(`^${k}:\\s+(\\d+) kB`, 'm')) || [])[1] || NaN) * 1024;
    return { rss: kb('VmRSS'), hwm: kb('VmHWM'), anon: kb('RssAnon'), file: kb('RssFile') };
  } catch {
    return { rss: NaN, hwm: NaN, anon: NaN, file: NaN };
  }
}

/** The tab's memory now: the renderer's RSS and the JS heap; again after a forced GC when `gc`. */
async function memory(context, page, { pid, others }, gc) {
  const cdp = await context.newCDPSession(page);
  await cdp.send('Performance.enable');
  const metric = async () => Object.fromEntries((await cdp.send('Performance.getMetrics')).metrics.map((m) => [m.name, m.value]));
  const m1 = await metric();
  const p1 = procStatus(pid);
  let m2 = {};
  let p2 = {};
  if (gc) {
    await cdp.send('HeapProfiler.enable');
    await cdp.send('HeapProfiler.collectGarbage');
    await sleep(500);
    m2 = await metric();
    p2 = procStatus(pid);
  }
  await cdp.detach();
  return {
    pid, others: others.map((p) => ({ pid: p, ...procStatus(p) })),
    ...p1, heap: m1.JSHeapUsedSize, heapTotal: m1.JSHeapTotalSize, nodes: m1.Nodes,
    rssGc: p2.rss, anonGc: p2.anon, heapGc: m2.JSHeapUsedSize,
  };
}

const memLine = (m) => `renderer ${m.pid}: RSS ${mb(m.rss)} (private ${mb(m.anon)}, files ${mb(m.file)}; peak ${mb(m.hwm)})`
  + `${Number.isFinite(m.rssGc) ? `, after GC ${mb(m.rssGc)} (private ${mb(m.anonGc)})` : ''}; JS heap ${mb(m.heap)}`
  + `${Number.isFinite(m.heapGc) ? `, after GC ${mb(m.heapGc)}` : ''}; ${int(m.nodes)} DOM nodes;`
  + ` other renderers: ${m.others.map((o) => `${o.pid} ${mb(o.rss)}`).join(', ') || 'none'}`;

/** The console's record of the open run, checked against GetRun's last seq. */
async function checkSeqs(page, last, what) {
  const s = await page.evaluate(() => {
    const c = window.batonConsole;
    let bad = -1;
    for (let i = 0; i < c.seqs.length; i++) if (c.seqs[i] !== i + 1) { bad = i; break; }
    return { n: c.seqs.length, bad, badSeq: bad >= 0 ? c.seqs[bad] : 0, duplicates: c.duplicates, gaps: c.gaps, reconnects: c.reconnects, done: c.done };
  });
  const ok = s.done && s.n === last && s.bad < 0;
  if (!ok) fail(`${what}: the page has ${s.n} seqs of ${last}${s.bad >= 0 ? `, seq ${s.badSeq} at position ${s.bad + 1}` : ''}, done=${s.done}`);
  return { ...s, ok };
}

const quantile = (sorted, q) => sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] : NaN;

// ---- 1 and 3: a finished run opens ------------------------------------------

async function finished(shape) {
  const name = `finished ${shape}`;
  log(`\n== ${name}: starting the run on the durable orchestrator`);
  const runId = await startRun(DURABLE, shape);
  const run = await waitEnded(DURABLE, runId);
  if (run.status !== 'RUN_STATUS_COMPLETED') fail(`${name}: the run ended ${run.status}`);
  const last = Number(run.lastSeq);
  log(`run ${runId}: ${run.status}, ${int(last)} events`);

  const { browser, context, page, errors } = await launch();
  try {
    await page.addInitScript(pageProbe, { runId, want: last });
    const t0 = Date.now();
    await page.goto(`${DURABLE}/#/runs/${runId}`);
    await page.waitForFunction(() => window.__bench.ready !== null, null, { timeout: 120_000, polling: 100 });
    const b = await page.evaluate(() => ({ ready: window.__bench.ready, firstRunPage: window.__bench.firstRunPage, longTasks: window.__bench.longTasks }));
    log(`opened: run page drawn at ${ms(b.firstRunPage)}, every event applied at ${ms(b.ready)} (wall ${ms(Date.now() - t0)} incl. waiting)`);
    const seqs = await checkSeqs(page, last, name);
    const renderer = await rendererOf(browser, page);
    const memOpen = await memory(context, page, renderer, false);
    log(`opened: ${memLine(memOpen)}`);
    // The first click does next to nothing (nothing is open to collapse):
    // it measures how soon the page answers; the others what they cost.
    const first = await clickTimed(page, 'collapse-all');
    const expand = await clickTimed(page, 'expand-all');
    const timeline = await clickTimed(page, 'tab-timeline');
    const events = await clickTimed(page, 'tab-events');
    const back = await clickTimed(page, 'tab-conversation');
    const mem = await memory(context, page, renderer, true);
    log(`clicks → next frame: collapse-all ${ms1(first.toPaint)}, expand-all ${ms1(expand.toPaint)}, timeline ${ms1(timeline.toPaint)}, raw events ${ms1(events.toPaint)}, conversation ${ms1(back.toPaint)}`);
    log(`after the clicks: ${memLine(mem)}`);
    if (errors.length) fail(`${name}: errors in the page: ${errors.join('; ')}`);

    const interactive = b.ready + first.toPaint;
    const opening = b.longTasks.filter(([s]) => s <= b.ready);
    const label = `${name}: ${int(last)} events${shape === 'tree' ? ', 111 contexts' : ', 1 context'}`;
    const detail = (c) => `input delay ${ms1(c.delay)}, handlers ${ms1(c.handlers)}`;
    row(label, 'run page drawn', ms(b.firstRunPage));
    row(label, 'every event applied (done, seqs 1..N)', ms(b.ready), `≤ ${int(OPEN_BUDGET_MS)} ms`, within(b.ready, OPEN_BUDGET_MS));
    row(label, 'then a click (collapse-all) → next frame', ms1(first.toPaint), '', detail(first));
    row(label, 'opens and interactive (applied + that click)', ms(interactive), `≤ ${int(OPEN_BUDGET_MS)} ms`, within(interactive, OPEN_BUDGET_MS));
    row(label, 'long tasks while opening, longest', `${opening.length}, ${ms(Math.max(0, ...opening.map(([, d]) => d)))}`);
    row(label, 'seqs 1..N once each', seqs.ok ? `yes (${int(seqs.n)}; dropped ${seqs.duplicates}, gaps ${seqs.gaps})` : 'NO', '', seqs.ok ? 'ok' : 'FAILED');
    row(label, 'renderer RSS when opened (private)', `${mb(memOpen.rss)} (${mb(memOpen.anon)})`, `≤ ${MEMORY_BUDGET_MB} MB`, within(memOpen.rss / 1048576, MEMORY_BUDGET_MB));
    row(label, 'JS heap used when opened', mb(memOpen.heap), `≤ ${MEMORY_BUDGET_MB} MB`, within(memOpen.heap / 1048576, MEMORY_BUDGET_MB));
    row(label, 'click expand-all → next frame', ms1(expand.toPaint), '', detail(expand));
    row(label, 'click the timeline tab → next frame', ms1(timeline.toPaint), '', detail(timeline));
    row(label, 'click the raw-events tab → next frame', ms1(events.toPaint), '', detail(events));
    row(label, 'click the conversation tab → next frame', ms1(back.toPaint), '', detail(back));
    row(label, 'after the clicks: renderer RSS (private), peak', `${mb(mem.rss)} (${mb(mem.anon)}), ${mb(mem.hwm)}`, `≤ ${MEMORY_BUDGET_MB} MB`, within(mem.rss / 1048576, MEMORY_BUDGET_MB));
    row(label, 'after the clicks: RSS after a forced GC (private)', `${mb(mem.rssGc)} (${mb(mem.anonGc)})`, `≤ ${MEMORY_BUDGET_MB} MB`, within(mem.rssGc / 1048576, MEMORY_BUDGET_MB));
    row(label, 'after the clicks: JS heap used, after GC', `${mb(mem.heap)}, ${mb(mem.heapGc)}`, `≤ ${MEMORY_BUDGET_MB} MB`, within(mem.heap / 1048576, MEMORY_BUDGET_MB));
    row(label, 'after the clicks: DOM nodes', int(mem.nodes), '', `${int(memOpen.nodes)} when opened`);
  } finally {
    await browser.close();
  }
}

/** An in-memory orchestrator keeps a run's whole history: the page replays it from seq 1. */
async function finishedInMemory() {
  const name = 'finished flat, in-memory orchestrator';
  log(`\n== ${name}`);
  const runId = await startRun(MEMORY, 'flat');
  const run = await waitEnded(MEMORY, runId);
  const { browser, page } = await launch();
  try {
    await page.addInitScript(pageProbe, { runId, want: Number(run.lastSeq) });
    await page.goto(`${MEMORY}/#/runs/${runId}`);
    await page.waitForFunction(() => window.batonConsole?.done === true, null, { timeout: 120000 });
    const when = await page.evaluate(() => performance.now());
    const seen = await page.evaluate(() => window.batonConsole.seqs.length);
    const ok = seen === Number(run.lastSeq);
    if (!ok) fail(`${name}: the page applied ${seen} of ${run.lastSeq} events`);
    row(`${name}: ${int(Number(run.lastSeq))} events`, 'the page replays the whole history', `${int(seen)} events within ${ms(when)}`, '', ok ? 'whole history kept' : 'FAILED');
  } finally {
    await browser.close();
  }
}

// ---- 2: a live run ----------------------------------------------------------

async function live(where) {
  const base = where === 'durable' ? DURABLE : MEMORY;
  const name = `live, ${where === 'durable' ? 'durable (Redis)' : 'in-memory'} orchestrator`;
  log(`\n== ${name}`);
  const { browser, page, errors } = await launch();
  try {
    // The browser is up before the run starts; the page opens right after.
    await page.goto('about:blank');
    const runId = await startRun(base, 'live');
    await page.addInitScript(pageProbe, { runId, want: 0 });
    const started = Date.now();
    await page.goto(`${base}/#/runs/${runId}`);
    await page.locator('[data-testid="run-page"]').waitFor();
    const opened = Date.now() - started;
    // Five clicks while it runs, a second apart (expand-all: nothing to open
    // in a one-context run, so the figure is the page's own latency).
    const clicks = [];
    const ended = waitEnded(base, runId);
    let done = false;
    ended.then(() => { done = true; }, () => { done = true; });
    await sleep(1500);
    while (!done && clicks.length < 5) {
      clicks.push(await clickTimed(page, 'expand-all'));
      await sleep(1000);
    }
    const run = await ended;
    const last = Number(run.lastSeq);
    await page.evaluate((n) => { window.__bench.want = n; }, last);
    await page.waitForFunction(() => window.__bench.ready !== null, null, { timeout: 60_000, polling: 200 });
    const b = await page.evaluate(() => ({
      frames: window.__bench.frames, ready: window.__bench.ready, readyWall: window.__bench.readyWall,
      longTasks: window.__bench.longTasks, origin: performance.timeOrigin,
    }));
    const seqs = await checkSeqs(page, last, name);
    if (run.status !== 'RUN_STATUS_COMPLETED') fail(`${name}: the run ended ${run.status}`);
    if (errors.length) fail(`${name}: errors in the page: ${errors.join('; ')}`);

    const runStart = Date.parse(run.startedAt);
    const runEnd = Date.parse(run.endedAt);
    const seconds = (runEnd - runStart) / 1000;
    // Frames from the page's first to the one at which it had every event.
    const fr = b.frames.filter((t) => t <= b.ready);
    const dts = fr.slice(1).map((t, i) => t - fr[i]).sort((x, y) => x - y);
    const long = dts.filter((d) => d > LONG_FRAME_MS);
    const lt = b.longTasks.filter(([s]) => s <= b.ready);
    const lag = b.readyWall - runEnd;
    const clickPaint = clicks.map((c) => c.toPaint).sort((x, y) => x - y);
    log(`run ${runId}: ${int(last)} events in ${seconds.toFixed(2)} s = ${int(last / seconds)} events/s; page opened ${ms(opened)} after the start, had every event ${ms(lag)} after the run ended`);
    log(`frames: ${dts.length}, median ${ms1(quantile(dts, 0.5))}, p95 ${ms1(quantile(dts, 0.95))}, max ${ms1(dts[dts.length - 1])}, > ${LONG_FRAME_MS} ms: ${long.length}; long tasks ${lt.length} (${ms(lt.reduce((a, [, d]) => a + d, 0))} in all)`);
    log(`clicks during the run → next frame: ${clickPaint.map(ms1).join(', ')}`);

    const label = `${name}: ${int(last)} events`;
    row(label, 'event rate (events / run seconds)', `${int(last / seconds)}/s (${seconds.toFixed(2)} s)`, '~5,000/s');
    row(label, 'frame time median / p95', `${ms1(quantile(dts, 0.5))} / ${ms1(quantile(dts, 0.95))}`, '', `${int(dts.length)} frames over ${((fr[fr.length - 1] - fr[0]) / 1000).toFixed(1)} s`);
    row(label, 'frame time max', ms1(dts[dts.length - 1]));
    row(label, `frames > ${LONG_FRAME_MS} ms`, `${long.length} (${(100 * long.length / Math.max(1, dts.length)).toFixed(1)} %)`);
    row(label, 'long tasks (> 50 ms), their total', `${lt.length}, ${ms(lt.reduce((a, [, d]) => a + d, 0))}`);
    row(label, 'click → next frame during the run, median / max', `${ms1(quantile(clickPaint, 0.5))} / ${ms1(clickPaint[clickPaint.length - 1])}`, '', `${clicks.length} clicks`);
    row(label, 'every event applied, after the run ended', ms(lag));
    row(label, 'seqs 1..N once each', seqs.ok ? `yes (${int(seqs.n)}; dropped ${seqs.duplicates}, gaps ${seqs.gaps}, reconnects ${seqs.reconnects})` : 'NO', '', seqs.ok ? 'ok' : 'FAILED');
  } finally {
    await browser.close();
  }
}

// ---- the table ---------------------------------------------------------------

function table() {
  const cols = ['scenario', 'figure', 'value', 'budget', 'verdict'];
  const w = cols.map((c) => Math.max(c.length, ...rows.map((r) => String(r[c]).length)));
  const line = (r) => cols.map((c, i) => String(r[c]).padEnd(w[i])).join(' | ').trimEnd();
  log('');
  log(line(Object.fromEntries(cols.map((c) => [c, c]))));
  log(w.map((n) => '-'.repeat(n)).join('-|-'));
  let prev = '';
  for (const r of rows) {
    log(line({ ...r, scenario: r.scenario === prev ? '' : r.scenario }));
    prev = r.scenario;
  }
}

try {
  log(`chromium ${CHROMIUM}, headless, 1280×800; playwright-core ${JSON.parse(readFileSync(new URL('./node_modules/playwright-core/package.json', import.meta.url))).version}`);
  for (const shape of SHAPES) await finished(shape);
  if (SHAPES.includes('flat')) await finishedInMemory();
  for (const where of LIVE_ON) await live(where);
} catch (e) {
  fail(String(e.stack || e));
}
table();
if (failures.length) {
  console.error(`\n${failures.length} check(s) failed:\n  ${failures.join('\n  ')}`);
  process.exit(1);
}
