// Browser tests of Baton's web console: Debian's chromium, headless, driven
// by playwright-core, against two real `baton up` started by ./run (which
// sets the variables below): `example` serves deploy/config/agents.yaml,
// `nested` serves ./agents.yaml. Everything is done the way a person does it
// — typing the key, choosing from the form, clicking the buttons — and
// checked on the page (the console's data-testid attributes) and on
// window.batonConsole, the stream's own record of the seqs it applied.
//
// Screenshots go to artifacts/ (ignored by git), one per test and one more
// for a test that failed; UPDATE_DOCS_SCREENSHOT=1 also writes the nested
// run to docs/console.png (1280×800), the README's picture.

import assert from 'node:assert/strict';
import { copyFileSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const here = dirname(fileURLToPath(import.meta.url));

function need(name) {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set: run these tests with tests/console/run`);
  return v;
}
const EXAMPLE = need('BATON_CONSOLE_URL');
const NESTED = need('BATON_CONSOLE_NESTED_URL');
const OPEN = need('BATON_CONSOLE_OPEN_URL');
const KEY_A = need('BATON_KEY_A');
const KEY_B = need('BATON_KEY_B');
const CHROMIUM = process.env.CHROMIUM_PATH || '/usr/bin/chromium';
const ARTIFACTS = join(here, 'artifacts');
const DOCS_PNG = join(here, '..', '..', 'docs', 'console.png');

const TEST_TIMEOUT = 90_000;
const WAIT = 20_000;

let context = null;
let profile = null;
/** Why the browser went away under a test, if it did. */
let lost = '';

/** A headless chromium with a fresh profile; another one if the last one went away. */
async function browser() {
  if (context) return context;
  if (profile) rmSync(profile, { recursive: true, force: true });
  profile = mkdtempSync(join(tmpdir(), 'baton-console-chromium-'));
  const c = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-background-networking',
      '--disable-component-update',
      '--no-first-run',
    ],
    viewport: { width: 1280, height: 800 },
    timeout: 60_000,
  });
  c.setDefaultTimeout(WAIT);
  c.on('close', () => {
    if (context === c) {
      context = null;
      lost = 'chromium went away (crashed or was killed) during this test';
    }
  });
  context = c;
  return c;
}

/** A researcher run started before the tests, opened again a minute later
 * (`baton up` used to drop a finished run's events 60 s after its end). */
let oldRun = { id: '', endedBy: 0 };

before(async () => {
  mkdirSync(ARTIFACTS, { recursive: true });
  const res = await fetch(`${EXAMPLE}/v1/runs`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${KEY_A}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ agent: 'researcher', input: 'an old run' }),
  });
  assert.equal(res.status, 200, 'a detached run starts');
  oldRun = { id: (await res.json()).runId, endedBy: Date.now() + 5000 };
  await browser();
});

after(async () => {
  const c = context;
  context = null;
  await c?.close();
  if (profile) rmSync(profile, { recursive: true, force: true });
});

// ---- helpers ---------------------------------------------------------------

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const tid = (id) => `[data-testid="${id}"]`;
const ctxSel = (id) => `[data-testid="context"][data-context-id="${id}"]`;

/**
 * One browser tab for one test: every uncaught error of the page fails the
 * test; a screenshot of the page is kept when the test fails.
 */
function consoleTest(name, fn) {
  test(name, { timeout: TEST_TIMEOUT }, async () => {
    lost = '';
    const page = await (await browser()).newPage();
    const errors = [];
    page.on('pageerror', (e) => errors.push(String(e.stack || e)));
    try {
      await fn(page);
      assert.deepEqual(errors, [], 'uncaught errors in the page');
    } catch (e) {
      if (lost) throw new Error(`${lost}: ${e.message}`, { cause: e });
      await page.screenshot({ path: join(ARTIFACTS, `FAILED-${slug(name)}.png`), fullPage: true }).catch(() => {});
      throw e;
    } finally {
      await page.close().catch(() => {});
    }
  });
}

const slug = (s) => s.toLowerCase().replace(/[^a-z0-9]+/g, '-').replace(/^-|-$/g, '').slice(0, 60);
const shot = (page, name, opts = {}) => page.screenshot({ path: join(ARTIFACTS, `${name}.png`), ...opts });

/** Opens the console at `base` and types `key` into the header, as a person does. */
async function openConsole(page, base, key) {
  await page.goto(`${base}/`);
  await page.locator(tid('runs-page')).waitFor();
  await page.locator(tid('api-key')).fill(key);
  await page.locator(tid('api-key-save')).click();
  await page.locator(`${tid('api-key-state')}[data-state="set"]`).waitFor();
  await page.locator(`${tid('list-state')}[data-state="ok"]`).waitFor();
}

/** Unfolds the runs page's start form (folded at first on a phone; always open on a desktop). */
async function openStartForm(page) {
  const fold = page.locator(tid('start-fold'));
  if (!(await fold.evaluate((d) => d.open))) await page.locator(tid('start-fold-toggle')).click();
  await page.locator(`${tid('start-fold')}[open]`).waitFor();
}

/** Starts `agent` with `input` from the runs page's form; resolves to the run id once its page is open. */
async function startRun(page, agent, input) {
  await openStartForm(page);
  const select = page.locator(tid('start-agent'));
  await select.locator(`option[value="${agent}"]`).waitFor({ state: 'attached' });
  await select.selectOption(agent);
  await page.locator(tid('start-input')).fill(input);
  await page.locator(tid('start-approval-mode')).selectOption('APPROVAL_MODE_ASK');
  await page.locator(tid('start-run')).click();
  const runPage = page.locator(tid('run-page'));
  await runPage.waitFor();
  const runId = await runPage.getAttribute('data-run-id');
  assert.match(runId, /^[0-9a-f-]{36}$/);
  assert.equal(new URL(page.url()).hash, `#/runs/${runId}`);
  return runId;
}

/** Waits for the run's status badge to read `status` (RUN_STATUS_…). */
async function waitStatus(page, status, timeout = WAIT) {
  await page.locator(`${tid('run-status')}[data-status="${status}"]`).waitFor({ timeout });
}

/** Opens a collapsed context (clicks its toggle) and waits for its body. */
async function expand(page, contextId) {
  const toggle = page.locator(`${ctxSel(contextId)} > .ctx-head ${tid('context-toggle')}`);
  await toggle.waitFor();
  if ((await toggle.getAttribute('aria-expanded')) !== 'true') await toggle.click();
  await page.locator(`${ctxSel(contextId)} > .ctx-head ${tid('context-toggle')}[aria-expanded="true"]`).waitFor();
}

/** What window.batonConsole says of the open run. */
const streamStats = (page) => page.evaluate(() => {
  const s = window.batonConsole;
  return { seqs: [...s.seqs], duplicates: s.duplicates, gaps: s.gaps, reconnects: s.reconnects, done: s.done };
});

/** GetRun with the tab's key, from the page (its own origin). */
const getRun = (page, runId) => page.evaluate(async (id) => {
  const key = sessionStorage.getItem('baton.apiKey');
  const r = await fetch(`/v1/runs/${encodeURIComponent(id)}`, { headers: { Authorization: `Bearer ${key}` } });
  return { status: r.status, body: await r.json() };
}, runId);

/** Every seq from 1 to n, once, in order. */
function assertContiguous(seqs, n, what) {
  assert.ok(seqs.length > 0, `${what}: no seqs`);
  assert.equal(new Set(seqs).size, seqs.length, `${what}: duplicate seqs ${seqs}`);
  assert.deepEqual(seqs, Array.from({ length: n }, (_, i) => i + 1), `${what}: seqs are not 1..${n}`);
}

/** Waits for the stream to have ended and checks the seqs against GetRun's last seq. */
async function assertStreamComplete(page, runId, what) {
  await page.waitForFunction(() => window.batonConsole?.done === true);
  const run = await getRun(page, runId);
  assert.equal(run.status, 200);
  const last = Number(run.body.lastSeq);
  const s = await streamStats(page);
  assertContiguous(s.seqs, last, what);
  assert.equal(s.duplicates, 0, `${what}: duplicates dropped`);
  assert.equal(s.gaps, 0, `${what}: gaps seen`);
  assert.equal(await page.locator(tid('run-events')).textContent(), String(last));
  return s;
}

// ---- the scenarios ---------------------------------------------------------

consoleTest('a key typed into the console starts researcher; its nested contexts open to root.summarizer.1.fact_checker.1', async (page) => {
  // Without a key the API says who is missing.
  await page.goto(`${EXAMPLE}/`);
  await page.locator(`${tid('error')}[data-code="UNAUTHENTICATED"]`).waitFor();
  assert.equal(await page.locator(`${tid('api-key-state')}[data-state="none"]`).count(), 1);
  await openConsole(page, EXAMPLE, KEY_A);
  assert.equal(await page.locator(tid('error')).count(), 0, 'the error stayed after a key was typed');
  const runId = await startRun(page, 'researcher', 'the history of Rust');
  await waitStatus(page, 'RUN_STATUS_COMPLETED');
  assert.match(await page.locator(tid('run-output')).textContent(), /^Research done\./);

  // Sub-agents start collapsed: open the way down, two deep.
  const summarizer = page.locator(ctxSel('root.summarizer.1'));
  await summarizer.waitFor();
  assert.equal(await summarizer.getAttribute('data-depth'), '1');
  assert.equal(await page.locator(ctxSel('root.summarizer.1.fact_checker.1')).count(), 0, 'drawn before its parent was opened');
  await expand(page, 'root.summarizer.1');
  const checker = page.locator(ctxSel('root.summarizer.1.fact_checker.1'));
  await checker.waitFor();
  assert.equal(await checker.getAttribute('data-depth'), '2');
  assert.equal(await checker.getAttribute('data-agent'), 'fact_checker');
  // Nested in the DOM too: inside summarizer's section.
  assert.equal(await summarizer.locator(ctxSel('root.summarizer.1.fact_checker.1')).count(), 1);
  await expand(page, 'root.summarizer.1.fact_checker.1');
  assert.equal(
    await checker.locator(tid('message-text')).first().textContent(),
    'Checked: Check the facts about: Summarize what is known about the history of Rust. Looks right.',
  );
  assert.equal(await checker.locator(tid('context-status')).textContent(), 'completed');
  // The root's own tools: the sleep's bar stayed at its last value.
  const bar = page.locator(`${ctxSel('root')} > .ctx-body ${tid('progress')}`);
  assert.equal(await bar.getAttribute('value'), '100');

  await assertStreamComplete(page, runId, 'researcher');
  // What it cost: the example prices researcher's and summarizer's models,
  // not fact_checker's (its call counts as unpriced, no cost invented).
  await page.waitForFunction(() => /USD/.test(document.querySelector('[data-testid="run-usage"]').textContent));
  assert.match(await page.locator(tid('run-usage')).textContent(), /5 model calls · 4 tool calls · 0\.\d{4} USD · 1 call unpriced$/);
  await shot(page, 'nested-run-full', { fullPage: true });
  // The tree from the tabs down.
  await page.locator(tid('tab-conversation')).evaluate((el) => el.scrollIntoView({ block: 'start' }));
  await shot(page, 'nested-run-tree');
  // The README's picture: the run's head, its output folded, the tree two
  // deep. (The page redraws the output once more, 200 ms after the stream
  // ended, with GetRun's last word: fold it after that.)
  await sleep(500);
  await page.locator(`${tid('run-outcome')} summary`).first().click();
  await page.locator(tid('run-target')).evaluate((el) => el.scrollIntoView({ block: 'start' }));
  await shot(page, 'nested-run');
  if (process.env.UPDATE_DOCS_SCREENSHOT === '1') copyFileSync(join(ARTIFACTS, 'nested-run.png'), DOCS_PNG);
  // The runs list says it too, from ListRuns.
  await page.locator('a[href="#/runs"]').first().click();
  const cost = page.locator(`${tid('run-row')}[data-run-id="${runId}"] ${tid('run-cost')}`);
  await page.waitForFunction((id) => /USD/.test(document.querySelector(`[data-testid="run-row"][data-run-id="${id}"] [data-testid="run-cost"]`)?.textContent || ''), runId);
  assert.match(await cost.textContent(), /^0\.\d{4} USD$/);
  await shot(page, 'runs-list-cost');
  await page.setViewportSize({ width: 390, height: 844 });
  await shot(page, 'runs-list-cost-phone');
  await page.setViewportSize({ width: 1280, height: 800 });
});

consoleTest('a progress bar moves while a tool reports progress', async (page) => {
  await openConsole(page, NESTED, KEY_A);
  const runId = await startRun(page, 'slow', 'the sleep');
  const seen = [];
  const deadline = Date.now() + WAIT;
  let shotTaken = false;
  while (Date.now() < deadline) {
    const v = await page.evaluate(() => {
      const bar = document.querySelector('[data-testid="progress"]');
      return bar ? Number(bar.getAttribute('value')) : null;
    });
    if (v !== null && seen[seen.length - 1] !== v) seen.push(v);
    if (!shotTaken && v !== null && v >= 30 && v < 100) {
      shotTaken = true;
      await shot(page, 'progress');
    }
    if (v === 100) break;
    await sleep(40);
  }
  assert.equal(seen[seen.length - 1], 100, `the bar never reached 100: ${seen}`);
  assert.ok(seen.length >= 4, `the bar did not move in steps: ${seen}`);
  for (let i = 1; i < seen.length; i++) assert.ok(seen[i] > seen[i - 1], `the bar went back: ${seen}`);
  assert.match(await page.locator(tid('progress-message')).textContent(), /^100% step 20 of 20$/);
  await waitStatus(page, 'RUN_STATUS_COMPLETED');
  assert.equal(await page.locator(tid('run-output')).textContent(), 'Done: slept 4000 ms');
  await assertStreamComplete(page, runId, 'slow');
});

consoleTest('a question is answered by clicking one of its suggested answers', async (page) => {
  await openConsole(page, EXAMPLE, KEY_A);
  const runId = await startRun(page, 'interviewer', 'a trip');
  const question = page.locator(`${tid('input-request')}[data-state="pending"]`);
  await question.waitFor();
  assert.equal(await question.locator(tid('input-prompt')).textContent(), 'Which city should I plan for?');
  assert.deepEqual(await question.locator(tid('input-option')).allTextContents(), ['Paris', 'Lisbon']);
  assert.match(await page.locator(tid('pending')).textContent(), /Waiting for you \(1\)/);
  await shot(page, 'question');
  await question.locator(`${tid('input-option')}[data-option="Lisbon"]`).click();
  await waitStatus(page, 'RUN_STATUS_COMPLETED');
  assert.equal(await page.locator(tid('run-output')).textContent(), 'Planning a trip to Lisbon.');
  const answered = page.locator(`${tid('input-request')}[data-state="answered"]`);
  assert.equal(await answered.locator(tid('input-answer')).textContent(), 'answered: Lisbon');
  assert.equal(await page.locator(tid('pending')).isHidden(), true);
  await assertStreamComplete(page, runId, 'interviewer');
});

consoleTest('two approvals two deep: one approved, one denied', async (page) => {
  await openConsole(page, NESTED, KEY_A);
  const runId = await startRun(page, 'outer', 'order 7');
  const clerk = page.locator(ctxSel('root.middle.1.clerk.1'));
  // Open questions open the way to themselves: no clicking needed.
  const first = clerk.locator(tid('approval'), { has: page.locator(tid('approval-args'), { hasText: 'refunds/first' }) });
  const second = clerk.locator(tid('approval'), { has: page.locator(tid('approval-args'), { hasText: 'refunds/second' }) });
  await first.and(page.locator('[data-state="pending"]')).waitFor();
  assert.equal(await clerk.getAttribute('data-depth'), '2');
  assert.match(await first.getAttribute('data-approval-id'), /.+/);
  await second.and(page.locator('[data-state="pending"]')).waitFor();
  await shot(page, 'approvals');
  await first.locator(tid('approval-reason')).fill('checked by Ana');
  await first.locator(tid('approve')).click();
  await first.and(page.locator('[data-state="approved"]')).waitFor();
  await second.locator(tid('approval-reason')).fill('not this one');
  await second.locator(tid('deny')).click();
  await second.and(page.locator('[data-state="denied"]')).waitFor();
  assert.equal(await first.locator(tid('approval-result')).textContent(), 'approved by person: checked by Ana');
  assert.equal(await second.locator(tid('approval-result')).textContent(), 'denied by person: not this one');
  await waitStatus(page, 'RUN_STATUS_COMPLETED');
  const output = await page.locator(tid('run-output')).textContent();
  assert.match(output, /^outer: middle: clerk: /);
  assert.match(output, /wrote refunds\/first at version 1/);
  assert.match(output, /write_context was denied: not this one/);
  await shot(page, 'approvals-done');
  await assertStreamComplete(page, runId, 'outer');
});

consoleTest('a spent budget asks for more, said plainly; approved, the run goes on', async (page) => {
  await openConsole(page, EXAMPLE, KEY_A);
  const runId = await startRun(page, 'frugal', 'tides');
  const ask = page.locator(`${tid('approval')}[data-state="pending"]`);
  await ask.waitFor();
  assert.equal(await ask.locator(tid('raise-budget')).textContent(),
    'Raise budget agent frugal in root by 1000 tokens (515 of 600 spent)?');
  const spent = page.locator(`${tid('budget-exhausted')}[data-action="ask"]`);
  assert.match(await spent.textContent(), /budget agent frugal in root exhausted: 515 of 600 tokens spent.*Asking a person for more\.$/);
  assert.match(await page.locator(tid('pending')).textContent(), /raise a budget/);
  await shot(page, 'budget-ask', { fullPage: true });
  await page.setViewportSize({ width: 390, height: 844 });
  await shot(page, 'budget-ask-phone', { fullPage: true });
  await page.setViewportSize({ width: 1280, height: 800 });
  await ask.locator(tid('approve')).click();
  await waitStatus(page, 'RUN_STATUS_COMPLETED');
  assert.match(await page.locator(tid('run-output')).textContent(), /^Both sources agree: /);
  await assertStreamComplete(page, runId, 'frugal');
});

consoleTest('a model whose provider is down is passed over: a fallback answers, and both say so', async (page) => {
  await openConsole(page, NESTED, KEY_A);
  const runId = await startRun(page, 'sturdy', 'hi');
  await waitStatus(page, 'RUN_STATUS_COMPLETED');
  const note = page.locator(tid('model-fallback'));
  assert.equal(await note.textContent(), '↻ down:m failed (unavailable): scripted:sturdy answers instead');
  const meta = await page.locator(tid('message')).last().locator('.meta').textContent();
  assert.match(meta, /answered by scripted:sturdy after down:m \(unavailable\)/);
  await shot(page, 'fallback');
  await assertStreamComplete(page, runId, 'sturdy');
});

consoleTest("a call over its provider's rate limit waits, and the context says so", async (page) => {
  await openConsole(page, NESTED, KEY_A);
  // The first run takes the limit's one call in 3 s; the second waits.
  const first = await startRun(page, 'limited', 'one');
  await waitStatus(page, 'RUN_STATUS_COMPLETED');
  await assertStreamComplete(page, first, 'limited');
  await page.locator('a', { hasText: 'Runs' }).first().click();
  await page.locator(tid('runs-page')).waitFor();
  const runId = await startRun(page, 'limited', 'two');
  const wait = page.locator(tid('rate-limit-wait'));
  await wait.waitFor();
  // "about N s" only when the server estimated the wait (never "0.0 s").
  const waitText = await wait.textContent();
  assert.match(waitText, /^◷ waiting for stub's rate limit(, about [0-9]+(\.[0-9])? s)?( \([0-9]+ ahead\))?$/);
  assert.doesNotMatch(waitText, /about 0(\.0)? s/);
  await shot(page, 'rate-limit-wait');
  await waitStatus(page, 'RUN_STATUS_COMPLETED');
  assert.equal(await page.locator(tid('run-output')).textContent(), 'stub answer');
  await assertStreamComplete(page, runId, 'limited');
});

consoleTest('a question is answered by typing', async (page) => {
  await openConsole(page, EXAMPLE, KEY_A);
  const runId = await startRun(page, 'interviewer', 'a trip');
  const question = page.locator(`${tid('input-request')}[data-state="pending"]`);
  await question.waitFor();
  await question.locator(tid('input-text')).fill('Porto');
  await question.locator(tid('input-submit')).click();
  await waitStatus(page, 'RUN_STATUS_COMPLETED');
  assert.equal(await page.locator(tid('run-output')).textContent(), 'Planning a trip to Porto.');
  assert.equal(await page.locator(tid('input-answer')).textContent(), 'answered: Porto');
  await assertStreamComplete(page, runId, 'interviewer (typed)');
});

consoleTest('the cancel button cancels a run', async (page) => {
  await openConsole(page, EXAMPLE, KEY_A);
  const runId = await startRun(page, 'interviewer', 'a trip nobody answers');
  await page.locator(`${tid('input-request')}[data-state="pending"]`).waitFor();
  const cancel = page.locator(tid('cancel-run'));
  await cancel.click();
  await waitStatus(page, 'RUN_STATUS_CANCELLED');
  await page.locator(`${tid('run-end')}[data-outcome="cancelled"]`).waitFor();
  assert.match(await page.locator(tid('run-outcome')).textContent(), /^Cancelled: cancelled by request: cancelled from the console$/);
  assert.equal(await page.locator(`${tid('input-request')}[data-state="closed"]`).count(), 1);
  assert.equal(await cancel.isHidden(), true, 'a cancelled run offers no cancel');
  await shot(page, 'cancelled');
  await assertStreamComplete(page, runId, 'cancelled');
  // The runs page says so too.
  await page.locator('a[href="#/runs"]').first().click();
  await page.locator(`${tid('run-row')}[data-run-id="${runId}"][data-status="RUN_STATUS_CANCELLED"]`).waitFor();
});

consoleTest('a reload while a run waits for a person replays every seq once', async (page) => {
  await openConsole(page, EXAMPLE, KEY_A);
  const runId = await startRun(page, 'interviewer', 'a trip after a reload');
  await page.locator(`${tid('input-request')}[data-state="pending"]`).waitFor();
  const before = await streamStats(page);
  assertContiguous(before.seqs, before.seqs.length, 'before the reload');
  await page.reload();
  // The key stays with the tab (sessionStorage), the page with the address.
  await page.locator(`${tid('run-page')}[data-run-id="${runId}"]`).waitFor();
  const question = page.locator(`${tid('input-request')}[data-state="pending"]`);
  await question.waitFor();
  await page.locator(`${tid('stream-state')}[data-state="live"]`).waitFor();
  const after = await streamStats(page);
  assertContiguous(after.seqs, after.seqs.length, 'after the reload');
  assert.ok(after.seqs.length >= before.seqs.length, `${after.seqs.length} seqs after the reload, ${before.seqs.length} before`);
  await question.locator(`${tid('input-option')}[data-option="Paris"]`).click();
  await waitStatus(page, 'RUN_STATUS_COMPLETED');
  assert.equal(await page.locator(tid('run-output')).textContent(), 'Planning a trip to Paris.');
  await assertStreamComplete(page, runId, 'interviewer after a reload');
});

consoleTest('a reload in the middle of a slow run replays every seq once', async (page) => {
  await openConsole(page, NESTED, KEY_A);
  const runId = await startRun(page, 'slow', 'a reload');
  await page.waitForFunction(() => Number(document.querySelector('[data-testid="progress"]')?.getAttribute('value')) >= 10);
  await page.reload();
  await page.locator(`${tid('run-page')}[data-run-id="${runId}"]`).waitFor();
  // Still running after the reload: the rest arrives live.
  await page.waitForFunction(() => {
    const v = Number(document.querySelector('[data-testid="progress"]')?.getAttribute('value'));
    return v >= 10 && v < 100;
  });
  await page.locator(`${tid('stream-state')}[data-state="live"]`).waitFor();
  const mid = await streamStats(page);
  assertContiguous(mid.seqs, mid.seqs.length, 'mid-run after the reload');
  await waitStatus(page, 'RUN_STATUS_COMPLETED');
  await assertStreamComplete(page, runId, 'slow after a reload');
});

consoleTest("another tenant's key sees none of the first tenant's runs", async (page) => {
  // Tenant alpha has runs (the tests above, and this one).
  await openConsole(page, EXAMPLE, KEY_A);
  const runId = await startRun(page, 'assistant', 'only for alpha');
  await waitStatus(page, 'RUN_STATUS_COMPLETED');
  await page.locator('a[href="#/runs"]').first().click();
  await page.locator(`${tid('run-row')}[data-run-id="${runId}"]`).waitFor();
  const alphaRows = await page.locator(tid('run-row')).count();
  assert.ok(alphaRows >= 1, `alpha lists ${alphaRows} runs`);

  // The same tab with beta's key: an empty list.
  await page.locator(tid('api-key')).fill(KEY_B);
  await page.locator(tid('api-key-save')).click();
  await page.locator(`${tid('list-state')}[data-state="ok"]`).waitFor();
  await page.locator(tid('runs-empty')).waitFor();
  // Several polls later, still nothing.
  await sleep(2000);
  assert.equal(await page.locator(tid('run-row')).count(), 0);
  assert.equal(await page.locator(tid('runs-empty')).textContent(), 'No runs yet: start one with the form.');
  await shot(page, 'tenant-beta-runs');

  // Alpha's run by its address: not found for beta.
  await page.goto(`${EXAMPLE}/#/runs/${runId}`);
  await page.locator(`${tid('error')}[data-code="NOT_FOUND"]`).waitFor();
  assert.equal(await page.locator(tid('message')).count(), 0);
  assert.equal(await page.locator(tid('run-output')).count(), 0);
  await shot(page, 'tenant-beta-not-found');

  // Beta's own run is beta's alone.
  await page.goto(`${EXAMPLE}/#/runs`);
  await page.locator(`${tid('list-state')}[data-state="ok"]`).waitFor();
  const betaRun = await startRun(page, 'assistant', 'only for beta');
  await waitStatus(page, 'RUN_STATUS_COMPLETED');
  await page.locator('a[href="#/runs"]').first().click();
  await page.locator(`${tid('run-row')}[data-run-id="${betaRun}"]`).waitFor();
  assert.equal(await page.locator(tid('run-row')).count(), 1);
  await page.locator(tid('api-key')).fill(KEY_A);
  await page.locator(tid('api-key-save')).click();
  await page.locator(`${tid('run-row')}[data-run-id="${runId}"]`).waitFor();
  assert.equal(await page.locator(`${tid('run-row')}[data-run-id="${betaRun}"]`).count(), 0);
});

consoleTest('on a 390×844 phone screen, keyboard only: a question is answered and nothing scrolls sideways', async (page) => {
  await page.setViewportSize({ width: 390, height: 844 });
  await openConsole(page, EXAMPLE, KEY_A);
  const fits = () => page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth + 1);
  assert.equal(await fits(), true, 'the runs page fits 390 px');
  const runId = await startRun(page, 'interviewer', 'a phone trip');
  const question = page.locator(`${tid('input-request')}[data-state="pending"]`);
  await question.waitFor();
  assert.equal(await fits(), true, 'the run page fits 390 px');
  // Keyboard only: focus the first suggested answer and press Enter.
  const lisbon = question.locator(`${tid('input-option')}[data-option="Lisbon"]`);
  await lisbon.focus();
  assert.equal(await lisbon.evaluate((el) => el === document.activeElement), true, 'an answer takes the focus');
  await page.keyboard.press('Enter');
  await waitStatus(page, 'RUN_STATUS_COMPLETED');
  assert.equal(await page.locator(tid('run-output')).textContent(), 'Planning a trip to Lisbon.');
  assert.equal(await fits(), true, 'the finished run fits 390 px');
  await shot(page, 'phone-run', { fullPage: true });
  await assertStreamComplete(page, runId, 'interviewer (phone)');
});

consoleTest('on a 390×844 phone screen, a pipeline run: the graph scrolls in its own box and the steps fold into cards', async (page) => {
  await page.setViewportSize({ width: 390, height: 844 });
  await openConsole(page, EXAMPLE, KEY_A);
  // On a phone the start form is above the list, folded.
  assert.equal(await page.locator(tid('start-fold')).evaluate((d) => d.open), false, 'the start form is folded on a phone');
  const formBox = await page.locator(tid('start-fold')).boundingBox();
  const listBox = await page.locator(tid('runs-table')).boundingBox();
  assert.ok(formBox.y < listBox.y, `the start form is above the runs list: ${JSON.stringify({ formBox, listBox })}`);
  await openStartForm(page);
  await page.locator(tid('start-tab-pipeline')).click();
  await page.locator(tid('pipeline-example')).click();
  await page.locator(tid('pipeline-approval-mode')).selectOption('APPROVAL_MODE_AUTO_APPROVE');
  await page.locator(tid('start-pipeline')).click();
  await page.locator(tid('run-page')).waitFor();
  await waitStatus(page, 'RUN_STATUS_COMPLETED', 60_000);
  await page.locator(tid('tab-graph')).click();
  const graph = page.locator(tid('pipeline-graph')).first();
  await graph.waitFor();
  await page.locator(`${tid('step-row')}[data-step-id="report"][data-state="completed"]`).waitFor();
  const fits = () => page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth + 1);
  assert.equal(await fits(), true, 'the pipeline page fits 390 px (it was 492 px wide)');
  // The graph is wider than the screen and scrolls inside its own box.
  const box = await page.locator(`${tid('pipeline-graph')} .graph-scroll`).first().evaluate((el) => ({
    client: el.clientWidth, scroll: el.scrollWidth, right: el.getBoundingClientRect().right,
  }));
  assert.ok(box.right <= 391, `the graph's box ends on the screen: ${JSON.stringify(box)}`);
  assert.ok(box.scroll > box.client, `the graph scrolls in its box: ${JSON.stringify(box)}`);
  // Each step is a card of label / value lines, not a word per line.
  const rows = await page.locator(tid('step-row')).evaluateAll((trs) => trs.map((tr) => tr.getBoundingClientRect().height));
  assert.equal(rows.length, 4);
  for (const h of rows) assert.ok(h < 320, `a step's card is ${h}px tall: ${rows}`);
  const labels = await page.locator(`${tid('step-row')}[data-step-id="report"] td`).evaluateAll((tds) =>
    tds.map((td) => getComputedStyle(td, '::before').content));
  assert.ok(labels.includes('"Agent"') && labels.includes('"Detail"'), `cells say what they are: ${labels}`);
  const height = await page.evaluate(() => document.documentElement.scrollHeight);
  assert.ok(height < 3500, `the page is ${height}px tall (it was 4,548)`);
  await shot(page, 'phone-pipeline', { fullPage: true });
});

consoleTest('a server without API keys: no key bar; a finished run offers no cancel; the timeline keeps its last label', async (page) => {
  await page.goto(`${OPEN}/`);
  await page.locator(`${tid('list-state')}[data-state="ok"]`).waitFor();
  await page.locator(`${tid('api-key-form')}[hidden]`).waitFor({ state: 'attached' });
  assert.equal(await page.locator(tid('api-key-form')).isHidden(), true, 'no key bar');
  assert.equal(await page.locator(tid('error')).count(), 0);
  // A server that needs a key keeps the bar.
  const other = await page.context().newPage();
  await other.goto(`${EXAMPLE}/`);
  await other.locator(tid('runs-page')).waitFor();
  await other.waitForFunction(() => document.readyState === 'complete');
  await sleep(300);
  assert.equal(await other.locator(tid('api-key-form')).isVisible(), true, 'the key bar where keys are needed');
  await other.close();

  const runId = await startRun(page, 'researcher', 'tide pools');
  const cancel = page.locator(tid('cancel-run'));
  await waitStatus(page, 'RUN_STATUS_COMPLETED');
  assert.equal(await cancel.isHidden(), true, 'a completed run offers no cancel');
  await page.locator(tid('tab-timeline')).click();
  const ticks = page.locator(tid('timeline-tick'));
  await ticks.first().waitFor();
  // Every axis label is inside the timeline's box, the last one too.
  const clipped = await ticks.evaluateAll((els) => els.map((el) => {
    const track = el.parentElement.getBoundingClientRect();
    const r = el.getBoundingClientRect();
    return { text: el.textContent, out: r.right > track.right + 0.5 || r.left < track.left - 0.5 };
  }).filter((t) => t.out));
  assert.deepEqual(clipped, [], 'no axis label runs past the track');
  await shot(page, 'open-timeline');
  await assertStreamComplete(page, runId, 'researcher (no keys)');
});

consoleTest('a run waiting for a person says so on its page and in the list, which can show only the runs waiting for me', async (page) => {
  await openConsole(page, EXAMPLE, KEY_A);
  const runId = await startRun(page, 'billing', 'a refund the list should show as waiting');
  const status = page.locator(tid('run-status'));
  await page.locator(`${tid('run-status')}[data-waiting="approval"]`).waitFor();
  assert.equal(await status.textContent(), 'waiting for approval');
  assert.equal(await status.getAttribute('data-status'), 'RUN_STATUS_RUNNING');
  // The list: "waiting", and what for; the filter keeps only such runs.
  await page.locator('a[href="#/runs"]').first().click();
  const row = page.locator(`${tid('run-row')}[data-run-id="${runId}"]`);
  await page.locator(`${tid('run-row')}[data-run-id="${runId}"][data-waiting="approval"]`).waitFor();
  assert.equal(await row.locator('.badge').textContent(), 'waiting · approval');
  await page.locator(tid('filter-status')).selectOption('WAITING');
  await page.locator(`${tid('list-state')}[data-state="ok"]`).waitFor();
  await page.waitForFunction(() => [...document.querySelectorAll('[data-testid="run-row"]')]
    .every((r) => r.dataset.waiting));
  assert.ok(await row.count() === 1, 'the waiting run is listed');
  await shot(page, 'waiting-list');
  // Approved: no longer waiting, and gone from the filtered list.
  await row.locator(tid('run-link')).click();
  await page.locator(tid('approve')).first().click();
  await waitStatus(page, 'RUN_STATUS_COMPLETED');
  assert.equal(await status.getAttribute('data-waiting'), '');
  await page.locator('a[href="#/runs"]').first().click();
  await page.locator(tid('filter-status')).selectOption('WAITING');
  await page.locator(`${tid('run-row')}[data-run-id="${runId}"]`).waitFor({ state: 'detached' });
});

consoleTest('a researcher run is forked at a nested tool result with an edited result, and the fork shows the new answer', async (page) => {
  await openConsole(page, EXAMPLE, KEY_A);
  const runId = await startRun(page, 'researcher', 'the history of forks');
  await waitStatus(page, 'RUN_STATUS_COMPLETED');
  await expand(page, 'root.summarizer.1');
  // The summarizer's first turn is tool calls alone: an item of its own,
  // a fork point like any turn.
  const turn = page.locator(`${ctxSel('root.summarizer.1')} > .ctx-body ${tid('message')}`).first();
  assert.equal(await turn.locator(tid('message-text')).textContent(), 'called fact_checker');
  assert.equal(await turn.locator(tid('fork-here')).count(), 1, 'a turn of tool calls alone can be forked');
  // summarizer's call of fact_checker: a fork point one level down.
  const call = page.locator(`${ctxSel('root.summarizer.1')} > .ctx-body ${tid('tool-call')}`).first();
  await call.locator(tid('fork-here')).click();
  const box = page.locator(tid('fork-box'));
  await box.waitFor();
  assert.match(await page.locator(tid('fork-text')).inputValue(), /^Checked: /, 'the form starts from the recorded result');
  await page.locator(tid('fork-text')).fill('FACT CHECK: the sources disagree');
  await shot(page, 'fork-form');
  await page.locator(tid('fork-submit')).click();
  // The fork's page: a new run, linked to its origin, with the new answer.
  await page.waitForFunction((id) => {
    const el = document.querySelector('[data-testid="run-page"]');
    return el && el.dataset.runId && el.dataset.runId !== id;
  }, runId);
  const forkId = await page.locator(tid('run-page')).getAttribute('data-run-id');
  await waitStatus(page, 'RUN_STATUS_COMPLETED');
  assert.match(await page.locator(tid('run-output')).textContent(), /Summary: FACT CHECK: the sources disagree/);
  const origin = page.locator(`${tid('run-origin')} ${tid('lineage-link')}`);
  assert.equal(await origin.getAttribute('href'), `#/runs/${runId}`);
  assert.match(await page.locator(tid('run-origin')).textContent(), /at seq \d+ · \d+ events replayed/);
  await assertStreamComplete(page, forkId, 'the fork');
  // Where it went live: the edited result, marked so, and said in the root.
  assert.match(await page.locator(tid('fork-live')).textContent(), /^▶ edited here, then live/);
  await expand(page, 'root.summarizer.1');
  const edited = page.locator(`${ctxSel('root.summarizer.1')} > .ctx-body ${tid('tool-call')}[data-edited="true"]`);
  assert.equal(await edited.count(), 1, 'the edited result is marked');
  assert.equal(await edited.locator(tid('fork-edited')).textContent(), 'edited');
  await shot(page, 'fork-run', { fullPage: true });
  await page.setViewportSize({ width: 390, height: 844 });
  await shot(page, 'fork-run-phone', { fullPage: true });
  await page.setViewportSize({ width: 1280, height: 800 });
  // The original lists its fork.
  await origin.click();
  await page.locator(`${tid('run-forks')} a[href="#/runs/${forkId}"]`).waitFor();
});

consoleTest('an edited model answer keeps the turn\'s tool calls unless removed, and the form opens beside its point', async (page) => {
  await openConsole(page, EXAMPLE, KEY_A);
  const runId = await startRun(page, 'researcher', 'the history of edits');
  await waitStatus(page, 'RUN_STATUS_COMPLETED');
  // The root's first answer: "Let me look into …" with three tool calls.
  const message = page.locator(`${ctxSel('root')} > .ctx-body ${tid('message')}`).first();
  await message.locator(tid('fork-here')).click();
  const box = page.locator(tid('fork-box'));
  await box.waitFor();
  assert.match(await page.locator(tid('fork-title')).textContent(), /^Fork at seq \d+: researcher's answer in root$/);
  // Beside the item, not at the top of the page.
  const [m, b] = [await message.boundingBox(), await box.boundingBox()];
  assert.ok(b.y >= m.y + m.height - 1 && b.y - (m.y + m.height) < 80, `the form follows its point (${m.y}+${m.height}, ${b.y})`);
  const tools = await page.locator(tid('fork-call-tool')).evaluateAll((els) => els.map((e) => e.value));
  assert.deepEqual(tools, ['summarizer', 'sleep', 'write_context'], 'the turn\'s calls, pre-filled');
  assert.equal(await page.locator(tid('fork-text')).getAttribute('aria-label'), 'The model\'s answer, edited');
  await page.locator(tid('fork-text')).fill('Let me look again.');
  await shot(page, 'fork-turn-form');
  await page.setViewportSize({ width: 390, height: 844 });
  await shot(page, 'fork-turn-form-phone');
  await page.setViewportSize({ width: 1280, height: 800 });
  // Neither a text nor a call: said at once, nothing sent.
  await page.locator(tid('fork-text')).fill('');
  for (let n = await page.locator(tid('fork-call-remove')).count(); n > 0; n--) {
    await page.locator(tid('fork-call-remove')).first().click();
  }
  await page.locator(tid('fork-submit')).click();
  assert.match(await page.locator(tid('fork-problem')).textContent(), /a text or keep one of its tool calls/);
  // The text edited, the calls kept: the fork runs them.
  await page.locator(tid('fork-cancel')).click();
  await message.locator(tid('fork-here')).click();
  await page.locator(tid('fork-text')).fill('Let me look again.');
  await page.locator(tid('fork-submit')).click();
  await page.waitForFunction((id) => {
    const el = document.querySelector('[data-testid="run-page"]');
    return el && el.dataset.runId && el.dataset.runId !== id;
  }, runId);
  await waitStatus(page, 'RUN_STATUS_COMPLETED');
  assert.match(await page.locator(tid('run-output')).textContent(), /^Research done\./, 'the kept calls ran');
});

consoleTest('an unchanged researcher run replayed strictly matches its recording, call for call', async (page) => {
  await openConsole(page, EXAMPLE, KEY_A);
  const runId = await startRun(page, 'researcher', 'the history of replays');
  await waitStatus(page, 'RUN_STATUS_COMPLETED');
  const output = await page.locator(tid('run-output')).textContent();
  await page.locator(tid('replay-run')).click();
  await page.locator(tid('replay-box')).waitFor();
  assert.equal(await page.locator(tid('replay-strict')).isChecked(), true, 'strict by default');
  await shot(page, 'replay-form');
  await page.locator(tid('replay-submit')).click();
  // The replay's page: a new run, linked to the run it replays.
  await page.waitForFunction((id) => {
    const el = document.querySelector('[data-testid="run-page"]');
    return el && el.dataset.runId && el.dataset.runId !== id;
  }, runId);
  const replayId = await page.locator(tid('run-page')).getAttribute('data-run-id');
  await waitStatus(page, 'RUN_STATUS_COMPLETED');
  assert.equal(await page.locator(tid('run-output')).textContent(), output, 'the same answer');
  const origin = page.locator(`${tid('run-replay-of')} ${tid('lineage-link')}`);
  assert.equal(await origin.getAttribute('href'), `#/runs/${runId}`);
  const stats = await page.locator(tid('replay-stats')).textContent();
  const m = stats.match(/(\d+) of (\d+) calls matched the recording$/);
  assert.ok(m && m[1] === m[2] && Number(m[1]) >= 4, `every call matched: ${stats}`);
  assert.equal(await page.locator(tid('run-diverged')).count(), 0, 'nothing diverged');
  assert.match(await page.locator(tid('run-replay-of')).textContent(), /strict/);
  await assertStreamComplete(page, replayId, 'the replay');
  await shot(page, 'replay-run', { fullPage: true });
  await page.setViewportSize({ width: 390, height: 844 });
  await shot(page, 'replay-run-phone', { fullPage: true });
  await page.setViewportSize({ width: 1280, height: 800 });
  // The original lists its replay.
  await origin.click();
  await page.locator(`${tid('run-replays')} a[href="#/runs/${replayId}"]`).waitFor();
});

/** Whether the page is no wider than the screen (nothing scrolls sideways). */
const fitsWidth = (page) => page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth + 1);

/** Sends `text` from the chat page and waits until its answer settled: the
 * conversation read again holds `total` messages and nothing runs. */
async function chatSend(page, text, total, how = 'click') {
  await page.locator(tid('chat-input')).fill(text);
  if (how === 'enter') await page.locator(tid('chat-input')).press('Enter');
  else await page.locator(tid('chat-send')).click();
  await page.waitForFunction((n) => {
    const chat = document.querySelector('[data-testid="chat-page"]');
    return chat && chat.dataset.state === 'idle' && window.batonConsole?.done === true
      && document.querySelectorAll('[data-testid="chat-message"]').length === n;
  }, total);
}

/** What the chat shows: [role, text] of each message, oldest first. */
const chatMessages = (page) => page.locator(tid('chat-message')).evaluateAll((els) => els.map((el) => [
  el.dataset.role, (el.querySelector('[data-testid="chat-text"]') || el.querySelector('summary'))?.textContent || '',
]));

/** POST /v1/runs with tenant alpha's key; the run id. */
async function apiStart(body) {
  const res = await fetch(`${EXAMPLE}/v1/runs`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${KEY_A}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ detach: true, ...body }),
  });
  const j = await res.json();
  assert.equal(res.status, 200, JSON.stringify(j));
  return j.runId;
}

/** GET on the example server with tenant alpha's key. */
async function apiGet(path) {
  const res = await fetch(`${EXAMPLE}${path}`, { headers: { Authorization: `Bearer ${KEY_A}` } });
  const j = await res.json();
  assert.equal(res.status, 200, JSON.stringify(j));
  return j;
}

consoleTest('a conversation with assistant: three messages from its chat page, in order; an answer opens its run; listed; continued from a run', async (page) => {
  await openConsole(page, EXAMPLE, KEY_A);
  await page.locator(tid('nav-conversations')).click();
  await page.locator(`${tid('conversations-state')}[data-state="ok"]`).waitFor();
  assert.equal(await page.locator(tid('nav-conversations')).getAttribute('aria-current'), 'page');
  await page.locator(tid('new-conversation')).click();
  const chat = page.locator(tid('chat-page'));
  await page.locator(`${tid('chat-page')}[data-state="new"]`).waitFor();
  assert.equal(new URL(page.url()).hash, '#/conversations/new');
  const agent = page.locator(tid('chat-agent'));
  await agent.locator('option[value="assistant"]').waitFor({ state: 'attached' });
  // Nothing goes out before an agent is chosen.
  await page.locator(tid('chat-input')).fill('Hello there');
  await page.locator(tid('chat-send')).click();
  assert.equal(await page.locator(tid('chat-error')).textContent(), 'Choose the agent to talk to.');
  await agent.selectOption('assistant');
  await shot(page, 'chat-new');
  await page.setViewportSize({ width: 390, height: 844 });
  assert.equal(await fitsWidth(page), true, 'a new chat fits 390 px');
  await shot(page, 'chat-new-phone');
  await page.setViewportSize({ width: 1280, height: 800 });

  const said = ['Hello there', 'How are you?', 'Goodbye'];
  await chatSend(page, said[0], 2);
  // The first run said the conversation's id: the page's address is its own.
  const convId = await chat.getAttribute('data-conversation-id');
  assert.match(convId, /^conv-/);
  assert.equal(new URL(page.url()).hash, `#/conversations/${convId}`);
  // Untitled, it is named by its first message.
  assert.equal(await page.locator(tid('chat-title')).textContent(), said[0]);
  await chatSend(page, said[1], 4, 'enter');
  await chatSend(page, said[2], 6);
  assert.deepEqual(await chatMessages(page), said.flatMap((s) => [['user', s], ['assistant', `You said: ${s}`]]));
  assert.equal(await page.locator(tid('chat-input')).inputValue(), '', 'the box is empty again');
  // Under each answer, its run.
  const runs = page.locator(tid('chat-run'));
  assert.equal(await runs.count(), 3);
  const runIds = await runs.evaluateAll((els) => els.map((el) => el.dataset.runId));
  const answers = await page.locator(`${tid('chat-message')}[data-role="assistant"]`).evaluateAll((els) => els.map((el) => el.dataset.runId));
  assert.deepEqual(answers, runIds, 'each answer is followed by its own run');
  assert.equal(new Set(runIds).size, 3);
  assert.match(await page.locator(tid('chat-facts')).textContent(), /^6 messages .* · last answered by assistant · /);
  assert.equal(await fitsWidth(page), true, 'the chat fits 1280 px');
  await shot(page, 'chat');
  // On a phone: opened at its newest message, the send box on the screen
  // below it, nothing wider than the screen.
  await page.setViewportSize({ width: 390, height: 844 });
  await page.reload();
  await page.locator(`${tid('chat-page')}[data-conversation-id="${convId}"][data-state="idle"]`).waitFor();
  await page.waitForFunction(() => document.querySelectorAll('[data-testid="chat-message"]').length === 6);
  await sleep(300);
  assert.equal(await fitsWidth(page), true, 'the chat fits 390 px');
  const box = await page.locator(tid('chat-form')).boundingBox();
  assert.ok(box.x >= 0 && box.x + box.width <= 391 && box.y >= 0 && box.y + box.height <= 845, `the send box is on the screen: ${JSON.stringify(box)}`);
  const last = await page.locator(tid('chat-run')).last().boundingBox();
  assert.ok(last.y >= 0 && last.y + last.height <= box.y + 1, `the newest answer shows above the send box: ${JSON.stringify({ last, box })}`);
  await shot(page, 'chat-phone');
  await page.evaluate(() => window.scrollTo(0, 0));
  await shot(page, 'chat-phone-top');
  await page.setViewportSize({ width: 1280, height: 800 });

  // The second answer's run, on the run page.
  await runs.nth(1).locator(tid('chat-run-link')).click();
  await page.locator(`${tid('run-page')}[data-run-id="${runIds[1]}"]`).waitFor();
  await waitStatus(page, 'RUN_STATUS_COMPLETED');
  assert.equal(await page.locator(tid('run-output')).textContent(), 'You said: How are you?');
  assert.match(await page.locator(tid('run-conversation-note')).textContent(),
    /^◆ continues conversation …[0-9a-f]{8}: the model saw its 2 earlier messages first$/);
  assert.equal(await page.locator(tid('continue-conversation')).getAttribute('href'), `#/conversations/${convId}`);
  await assertStreamComplete(page, runIds[1], 'a message of a conversation');
  await shot(page, 'chat-run');
  // Back to the chat, as it was.
  await page.goBack();
  await page.locator(`${tid('chat-page')}[data-conversation-id="${convId}"][data-state="idle"]`).waitFor();
  await page.waitForFunction(() => document.querySelectorAll('[data-testid="chat-message"]').length === 6);
  assert.deepEqual(await chatMessages(page), said.flatMap((s) => [['user', s], ['assistant', `You said: ${s}`]]));

  // The list: most recently used first.
  await page.locator(tid('nav-conversations')).click();
  const row = page.locator(`${tid('conversation-row')}[data-conversation-id="${convId}"]`);
  await row.waitFor();
  assert.equal(await page.locator(tid('conversation-row')).first().getAttribute('data-conversation-id'), convId);
  assert.equal(await row.locator(tid('conversation-messages')).textContent(), '6');
  assert.equal(await row.locator(tid('conversation-agent')).textContent(), 'assistant');
  // Named by its first message (the server's preview), the whole id in its tooltip.
  assert.equal(await row.locator(tid('conversation-link')).textContent(), said[0]);
  assert.equal(await row.locator(tid('conversation-link')).getAttribute('title'), convId);
  // The count is said once: in its column on a desktop, under the name on a phone.
  assert.equal(await row.locator(tid('conversation-sub')).evaluate((el) => el.innerText.includes('6 messages')), false, 'the count is not repeated under the name');
  assert.equal(await row.getAttribute('data-running'), 'false');
  await shot(page, 'conversations');
  await page.setViewportSize({ width: 390, height: 844 });
  assert.equal(await fitsWidth(page), true, 'the list fits 390 px');
  assert.match(await row.locator(tid('conversation-sub')).evaluate((el) => el.innerText), /6 messages · assistant · used /);
  await shot(page, 'conversations-phone');
  await page.setViewportSize({ width: 1280, height: 800 });

  // The runs list says a run's conversation; its page continues it.
  await page.locator(tid('nav-runs')).click();
  const runRow = page.locator(`${tid('run-row')}[data-run-id="${runIds[2]}"]`);
  await runRow.waitFor();
  assert.equal(await runRow.locator(tid('run-conversation')).getAttribute('href'), `#/conversations/${convId}`);
  await shot(page, 'runs-list-conversation');
  await page.setViewportSize({ width: 390, height: 844 });
  assert.equal(await fitsWidth(page), true, 'the runs list with conversations fits 390 px');
  const table = await page.locator('.runs-list .table-scroll').evaluate((el) => [el.scrollWidth, el.clientWidth]);
  assert.ok(table[0] <= table[1], `the runs table does not scroll sideways for a conversation's badge: ${table}`);
  await shot(page, 'runs-list-conversation-phone');
  await page.setViewportSize({ width: 1280, height: 800 });
  await runRow.locator(tid('run-link')).click();
  await waitStatus(page, 'RUN_STATUS_COMPLETED');
  await page.locator(tid('continue-conversation')).click();
  await page.locator(`${tid('chat-page')}[data-conversation-id="${convId}"][data-state="idle"]`).waitFor();
  // The next message goes to the agent of the last one.
  await page.waitForFunction(() => document.querySelector('[data-testid="chat-agent"]').value === 'assistant');
  await chatSend(page, 'One more thing', 8);
  assert.deepEqual((await chatMessages(page)).slice(6), [['user', 'One more thing'], ['assistant', 'You said: One more thing']]);
  const conv = await apiGet(`/v1/conversations/${encodeURIComponent(convId)}`);
  assert.equal(conv.messageCount, 8);
  assert.equal(conv.runs.length, 4);
});

consoleTest('a message of a conversation waits for an approval: the chat links to the run, approved there, the answer comes back', async (page) => {
  await openConsole(page, EXAMPLE, KEY_A);
  await page.goto(`${EXAMPLE}/#/conversations/new?agent=billing`);
  await page.locator(`${tid('chat-page')}[data-state="new"]`).waitFor();
  await page.waitForFunction(() => document.querySelector('[data-testid="chat-agent"]').value === 'billing');
  await page.locator(tid('chat-input')).fill('refund order 7');
  await page.locator(tid('chat-send')).click();
  // The run waits for a person: the chat says so, and where to answer.
  await page.locator(`${tid('chat-page')}[data-state="waiting"]`).waitFor();
  const pending = page.locator(tid('chat-pending'));
  assert.match(await pending.textContent(), /Waiting for you \(1\): approve write_context in root/);
  assert.equal(await page.locator(tid('chat-send')).isDisabled(), true, 'no second message while the first is answered');
  assert.equal(await page.locator(tid('chat-stop')).isVisible(), true, 'the answer can be stopped');
  assert.match(await page.locator(tid('chat-live')).textContent(), /I will record the refund\./);
  // The call shows once, in its turn's entry, waiting for the approval.
  assert.equal(await page.locator(tid('chat-live-tool')).count(), 0, 'no second row for the call');
  assert.equal(await page.locator(`${tid('chat-live')} ${tid('chat-tool-state')}`).textContent(), 'waiting for you');
  assert.equal(await fitsWidth(page), true);
  await shot(page, 'chat-waiting');
  const convId = await page.locator(tid('chat-page')).getAttribute('data-conversation-id');
  assert.match(convId, /^conv-/);
  // The list says it is going on.
  await page.locator(tid('nav-conversations')).click();
  await page.locator(`${tid('conversation-row')}[data-conversation-id="${convId}"][data-running="true"]`).waitFor();
  await page.goBack();
  await page.locator(`${tid('chat-page')}[data-state="waiting"]`).waitFor();

  // The link opens the run's page on the approval itself, in view.
  assert.match(await page.locator(tid('chat-pending-link')).getAttribute('href'), /^#\/runs\/[0-9a-f-]{36}\?pending=./);
  await page.locator(tid('chat-pending-link')).click();
  await page.locator(tid('run-page')).waitFor();
  await page.waitForFunction(() => {
    const el = document.querySelector('[data-testid="approval"][data-state="pending"]');
    const r = el && el.getBoundingClientRect();
    return r && r.height > 0 && r.top >= 0 && r.bottom <= window.innerHeight;
  });
  await page.locator(`${tid('approval')}[data-state="pending"] ${tid('approve')}`).click();
  await waitStatus(page, 'RUN_STATUS_COMPLETED');
  await page.locator(tid('continue-conversation')).click();
  await page.locator(`${tid('chat-page')}[data-conversation-id="${convId}"][data-state="idle"]`).waitFor();
  // Four messages, three rows: the tool's result is in its call's entry.
  await page.waitForFunction(() => document.querySelectorAll('[data-testid="chat-message"]').length === 3);
  assert.deepEqual((await chatMessages(page)).map(([role]) => role), ['user', 'assistant', 'assistant']);
  const calls = page.locator(tid('chat-tool-calls'));
  assert.equal(await calls.locator('summary').textContent(), 'called write_context');
  assert.equal(await calls.evaluate((d) => d.open), false, 'the calls are folded');
  const call = calls.locator(tid('chat-tool-call'));
  assert.equal(await call.count(), 1);
  assert.equal(await call.getAttribute('data-state'), 'ok');
  assert.match(await call.locator(tid('chat-tool-result')).textContent(), /^wrote refunds\/last at version 1/);
  assert.match((await chatMessages(page))[2][1], /^Done\. wrote refunds\/last at version 1/);
  await calls.locator('summary').click();
  await call.locator(tid('chat-tool-result')).waitFor();
  await shot(page, 'chat-tools');
  await page.setViewportSize({ width: 390, height: 844 });
  assert.equal(await fitsWidth(page), true, 'the open tool call fits 390 px');
  await calls.evaluate((el) => el.scrollIntoView({ block: 'start' }));
  await shot(page, 'chat-tools-phone');
  await page.setViewportSize({ width: 1280, height: 800 });

  // Renamed, it is listed by its title; deleted, it is gone.
  await page.locator(tid('chat-rename')).click();
  await page.locator(tid('chat-title-input')).fill('Refund for order 7');
  await page.locator(tid('chat-rename-save')).click();
  await page.locator(tid('chat-title'), { hasText: 'Refund for order 7' }).waitFor();
  await page.locator(tid('nav-conversations')).click();
  const row = page.locator(`${tid('conversation-row')}[data-conversation-id="${convId}"]`);
  assert.equal(await row.locator(tid('conversation-link')).textContent(), 'Refund for order 7');
  await row.locator(tid('conversation-link')).click();
  await page.locator(`${tid('chat-page')}[data-state="idle"]`).waitFor();
  await page.locator(tid('chat-delete')).click();
  await page.locator(tid('chat-delete-confirm')).click();
  await page.locator(`${tid('conversations-state')}[data-state="ok"]`).waitFor();
  assert.equal(new URL(page.url()).hash, '#/conversations');
  assert.equal(await row.count(), 0, 'the deleted conversation is not listed');
  const gone = await page.evaluate(async (id) => (await fetch(`/v1/conversations/${encodeURIComponent(id)}`, {
    headers: { Authorization: `Bearer ${sessionStorage.getItem('baton.apiKey')}` },
  })).status, convId);
  assert.equal(gone, 404);
});

consoleTest('a cancelled message of a conversation is marked interrupted in the chat', async (page) => {
  const runId = await apiStart({ agent: 'interviewer', input: 'a trip nobody plans', newConversation: true });
  const convId = (await apiGet(`/v1/runs/${runId}`)).conversationId;
  await openConsole(page, EXAMPLE, KEY_A);
  await page.goto(`${EXAMPLE}/#/conversations/${encodeURIComponent(convId)}`);
  // Opened while its run waits for an answer: followed, and said so.
  await page.locator(`${tid('chat-page')}[data-state="waiting"]`).waitFor();
  assert.match(await page.locator(tid('chat-pending')).textContent(), /answer ask_user: Which city should I plan for\?/);
  assert.equal(await page.locator(`${tid('chat-live-message')}[data-role="user"] ${tid('chat-text')}`).textContent(), 'a trip nobody plans');
  await page.locator(tid('chat-pending-link')).click();
  await page.locator(tid('cancel-run')).click();
  await waitStatus(page, 'RUN_STATUS_CANCELLED');
  await page.goBack();
  await page.locator(`${tid('chat-page')}[data-state="idle"]`).waitFor();
  const message = page.locator(`${tid('chat-message')}[data-interrupted="true"]`);
  await message.waitFor();
  assert.equal(await message.getAttribute('data-role'), 'user');
  assert.equal(await message.locator(tid('chat-interrupted-mark')).textContent(), 'interrupted');
  assert.equal(await page.locator(`${tid('chat-run')}[data-run-id="${runId}"] ${tid('chat-run-status')}`).textContent(), 'cancelled');
  await shot(page, 'chat-interrupted');
});

consoleTest('Stop in the chat cancels the run answering: the answer ends, marked cancelled', async (page) => {
  const runId = await apiStart({ agent: 'interviewer', input: 'a trip to stop', newConversation: true });
  const convId = (await apiGet(`/v1/runs/${runId}`)).conversationId;
  await openConsole(page, EXAMPLE, KEY_A);
  await page.goto(`${EXAMPLE}/#/conversations/${encodeURIComponent(convId)}`);
  await page.locator(`${tid('chat-page')}[data-state="waiting"]`).waitFor();
  // Named by its first message (its run is going on: from the run's input).
  assert.equal(await page.locator(tid('chat-title')).textContent(), 'a trip to stop');
  const stop = page.locator(tid('chat-stop'));
  assert.equal(await stop.isVisible(), true, 'Stop shows while the answer runs');
  await stop.click();
  await page.locator(`${tid('chat-page')}[data-state="idle"]`).waitFor();
  await page.locator(`${tid('chat-run')}[data-run-id="${runId}"][data-status="RUN_STATUS_CANCELLED"]`).waitFor();
  assert.equal(await page.locator(`${tid('chat-run')}[data-run-id="${runId}"] ${tid('chat-run-status')}`).textContent(), 'cancelled');
  assert.equal(await stop.isVisible(), false, 'no Stop once nothing runs');
  const run = await apiGet(`/v1/runs/${runId}`);
  assert.equal(run.status, 'RUN_STATUS_CANCELLED');
  await shot(page, 'chat-stopped');
});

consoleTest('a long conversation is compacted: the run view says what was folded, the chat says how many', async (page) => {
  // chat keeps 20 messages: its 11th message folds the 10 oldest.
  const first = await apiStart({ agent: 'chat', input: 'm0', newConversation: true });
  const convId = (await apiGet(`/v1/runs/${first}`)).conversationId;
  assert.match(convId, /^conv-/);
  let compacting = '';
  for (let i = 1; i <= 11; i++) {
    const runId = await apiStart({ agent: 'chat', input: `m${i}`, conversationId: convId });
    if (i === 10) compacting = runId;
  }
  for (let tries = 0; ; tries++) {
    const c = await apiGet(`/v1/conversations/${encodeURIComponent(convId)}`);
    if (!c.runningRunId && c.runs.length === 12) break;
    assert.ok(tries < 100, `the conversation's runs did not end: ${JSON.stringify(c.runs)}`);
    await sleep(200);
  }
  await openConsole(page, EXAMPLE, KEY_A);
  await page.goto(`${EXAMPLE}/#/conversations/${encodeURIComponent(convId)}`);
  await page.locator(`${tid('chat-page')}[data-state="idle"]`).waitFor();
  await page.locator(tid('chat-message')).first().waitFor();
  assert.match(await page.locator(tid('chat-folded')).textContent(), /^10 earlier messages were folded away/);
  const msgs = await chatMessages(page);
  assert.equal(msgs.length, 14);
  assert.deepEqual(msgs[msgs.length - 1], ['assistant', 'You said: m11. Before that: m5 | m6 | m7 | m8 | m9 | m10']);
  await shot(page, 'chat-compacted');
  await page.locator(`${tid('chat-run')}[data-run-id="${compacting}"] ${tid('chat-run-link')}`).click();
  await page.locator(`${tid('run-page')}[data-run-id="${compacting}"]`).waitFor();
  const note = page.locator(tid('history-compacted'));
  await note.waitFor();
  assert.match(await note.textContent(), /^⇤ folded 10 earlier messages \(window, max messages\), kept 10 · about \d+ → \d+ tokens$/);
  assert.match(await page.locator(tid('run-conversation-note')).textContent(), /: the model saw its 10 earlier messages first$/);
  await shot(page, 'run-compacted');
});

consoleTest('a run that ended more than a minute ago opens from seq 1 in baton up', async (page) => {
  assert.ok(oldRun.id, 'the run started before the tests');
  // A minute after its end (it ends within seconds of its start).
  const wait = oldRun.endedBy + 61_000 - Date.now();
  if (wait > 0) await sleep(wait);
  await openConsole(page, EXAMPLE, KEY_A);
  await page.goto(`${EXAMPLE}/#/runs/${oldRun.id}`);
  await waitStatus(page, 'RUN_STATUS_COMPLETED');
  await assertStreamComplete(page, oldRun.id, 'a run older than a minute');
  assert.equal(await page.locator(tid('replay-progress')).isVisible(), false);
  assert.equal(await page.locator(tid('error')).count(), 0, 'no error');
  assert.match(await page.locator(tid('run-output')).textContent(), /^Research done\./);
});

/** POST /v1/experiments with tenant alpha's key (detached); `{experimentId, name}`. */
async function apiExperiment(name, cases) {
  const res = await fetch(`${EXAMPLE}/v1/experiments`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${KEY_A}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ name, agent: 'assistant', datasetName: `${name}.jsonl`, dataset: cases.map((c) => JSON.stringify(c)).join('\n') }),
  });
  const j = await res.json();
  assert.equal(res.status, 200, JSON.stringify(j));
  for (let i = 0; i < 100; i++) {
    const e = await apiGet(`/v1/experiments/${j.experimentId}`);
    if (e.status === 'EXPERIMENT_STATUS_COMPLETED') return e;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`experiment ${name} did not end`);
}

consoleTest('experiments: listed, one opened with its failing reason and runs, two compared with the regression first; a run saved as a case', async (page) => {
  const stamp = Date.now().toString(36);
  const base = await apiExperiment(`base-${stamp}`, [
    { id: 'hello', input: 'hello', expected: 'You said: hello' },
    { id: 'bye', input: 'bye', scorers: [{ kind: 'contains', value: 'bye' }] },
    { id: 'never', input: 'x', expected: 'something else' },
  ]);
  const cand = await apiExperiment(`cand-${stamp}`, [
    { id: 'hello', input: 'hello', expected: 'You said: HELLO' },
    { id: 'bye', input: 'bye', scorers: [{ kind: 'contains', value: 'bye' }] },
    { id: 'never', input: 'x', expected: 'something else' },
  ]);
  await openConsole(page, EXAMPLE, KEY_A);
  await page.locator(tid('nav-experiments')).click();
  const row = (e) => page.locator(`${tid('experiment-row')}[data-experiment-id="${e.id}"]`);
  await row(cand).waitFor();
  assert.equal(await row(base).locator(tid('experiment-passed')).textContent(), '2 / 3');
  await shot(page, 'experiments', { fullPage: true });
  // Two ticked: the older is the baseline.
  await row(base).locator(tid('experiment-pick')).check();
  await row(cand).locator(tid('experiment-pick')).check();
  await page.locator(tid('compare-picked')).click();
  await page.locator(`${tid('change-row')}`).first().waitFor();
  assert.equal(await page.locator(tid('comparison-title')).textContent(), `base-${stamp} → cand-${stamp}`);
  const first = page.locator(tid('change-row')).first();
  assert.equal(await first.getAttribute('data-kind'), 'regressed');
  assert.match(await first.textContent(), /hello.*exact: expected "You said: HELLO", got "You said: hello".*1\/1 → 0\/1/);
  assert.match(await page.locator(tid('comparison-verdict')).textContent(), /1 case regressed beyond noise/);
  await shot(page, 'experiments-compare', { fullPage: true });

  // The candidate: its cases, a failing one's reason; only the failing.
  await page.goto(`${EXAMPLE}/#/experiments/${cand.id}`);
  const hello = page.locator(`${tid('case-row')}[data-case-id="hello"]`);
  await hello.waitFor();
  assert.equal(await hello.getAttribute('data-passed'), 'false');
  assert.equal(await hello.locator(tid('case-reason')).textContent(), 'exact: expected "You said: HELLO", got "You said: hello"');
  assert.match(await page.locator(tid('experiment-totals')).textContent(), /^1 of 3 cases · 2 failed · 0 errors$/);
  await page.locator(tid('failing-only')).check();
  assert.equal(await page.locator(tid('case-row')).count(), 2);
  await shot(page, 'experiment', { fullPage: true });
  // A case's run: an ordinary run, labelled; saved as a case.
  await hello.locator(tid('case-run')).click();
  await page.locator(tid('run-page')).waitFor();
  await page.locator(`${tid('run-experiment')} a`).waitFor();
  await page.locator(tid('save-case')).click();
  await page.locator(tid('save-case-submit')).click();
  const json = JSON.parse(await page.locator(tid('save-case-json')).textContent());
  assert.equal(json.input, 'hello');
  assert.equal(json.expected, 'You said: hello');
  assert.equal(json.tools, 'recorded');
  assert.deepEqual(json.recording, { calls: [] }, 'assistant calls no tool outside Baton');
  assert.match(await page.locator(tid('save-case-download')).getAttribute('download'), /^case-.*\.jsonl$/);

  // At phone width: nothing scrolls sideways.
  await page.setViewportSize({ width: 390, height: 844 });
  const fits = () => page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth + 1);
  await page.goto(`${EXAMPLE}/#/experiments`);
  await row(cand).waitFor();
  assert.equal(await fits(), true, 'the experiments page fits 390 px');
  await shot(page, 'phone-experiments', { fullPage: true });
  await page.goto(`${EXAMPLE}/#/experiments/${cand.id}`);
  await hello.waitFor();
  assert.equal(await fits(), true, 'an experiment fits 390 px');
  await shot(page, 'phone-experiment', { fullPage: true });
  await page.goto(`${EXAMPLE}/#/experiments/compare?baseline=${base.id}&candidate=${cand.id}`);
  await page.locator(tid('change-row')).first().waitFor();
  assert.equal(await fits(), true, 'a comparison fits 390 px');
  await shot(page, 'phone-experiments-compare', { fullPage: true });
});

consoleTest('experiments: a running one is cancelled from its page, keeping what finished', async (page) => {
  const name = `slow-${Date.now().toString(36)}`;
  const dataset = [
    { id: 'quick', agent: 'sturdy', input: 'x', scorers: [{ kind: 'regex', pattern: '.' }] },
    { id: 'slow-1', input: 'one', expected: 'never' },
    { id: 'slow-2', input: 'two', expected: 'never' },
  ].map((c) => JSON.stringify(c)).join('\n');
  const res = await fetch(`${NESTED}/v1/experiments`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${KEY_A}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ name, agent: 'slow', datasetName: `${name}.jsonl`, dataset }),
  });
  const started = await res.json();
  assert.equal(res.status, 200, JSON.stringify(started));
  await openConsole(page, NESTED, KEY_A);
  await page.goto(`${NESTED}/#/experiments/${started.experimentId}`);
  const cancel = page.locator(tid('cancel-experiment'));
  await cancel.waitFor();
  assert.equal(await page.locator(tid('experiment-status')).textContent(), 'running');
  await shot(page, 'experiment-running', { fullPage: true });
  await cancel.click();
  await page.locator(`${tid('experiment-status')}:text("cancelled")`).waitFor();
  assert.equal(await cancel.isVisible(), false, 'no cancel once it ended');
  assert.match(await page.locator(tid('experiment-totals')).textContent(), /not run$/);
  const e = await (await fetch(`${NESTED}/v1/experiments/${started.experimentId}`, { headers: { Authorization: `Bearer ${KEY_A}` } })).json();
  assert.equal(e.status, 'EXPERIMENT_STATUS_CANCELLED');
  assert.ok((e.cases || []).every((c) => c.caseId === 'quick'), JSON.stringify(e.cases));
  assert.equal(await page.locator(tid('error')).count(), 0, 'no error');
  await page.setViewportSize({ width: 390, height: 844 });
  assert.equal(await page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth + 1), true, 'fits 390 px');
  await shot(page, 'phone-experiment-cancelled', { fullPage: true });
});

/** A call of the nested server's API with tenant alpha's key: `{status, body}`. */
async function nestedApi(method, path, body) {
  const res = await fetch(`${NESTED}${path}`, {
    method,
    headers: { Authorization: `Bearer ${KEY_A}`, ...(body ? { 'Content-Type': 'application/json' } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  return { status: res.status, body: await res.json() };
}

consoleTest('schedules: listed with their next fire times and latest tick; one paused, resumed and its run opened; one deleted; the agents file\'s has no buttons', async (page) => {
  // One fires every 2 s (the run script lets an interval be this short);
  // the other at 9:00 on weekdays in Paris, never during the test.
  const every = await nestedApi('POST', '/v1/schedules', {
    description: 'Ping sturdy every 2 s', agent: { agent: 'sturdy', input: 'ping' }, interval: '2s',
  });
  assert.equal(every.status, 200, JSON.stringify(every.body));
  const endAt = new Date(Date.now() + 365 * 86400_000).toISOString();
  const morning = await nestedApi('POST', '/v1/schedules', {
    description: 'Morning report',
    pipeline: { pipeline: { name: 'morning-report', steps: [{ id: 'check', agent: 'sturdy', task: 'the morning' }] } },
    cron: '0 9 * * 1-5', timeZone: 'Europe/Paris', endAt,
    overlap: 'SCHEDULE_OVERLAP_QUEUE_ONE', missed: 'SCHEDULE_MISSED_RUN_ONCE',
  });
  assert.equal(morning.status, 200, JSON.stringify(morning.body));
  const A = every.body.scheduleId;
  const B = morning.body.scheduleId;
  assert.match(A, /^sch_/);
  try {
    // Its first tick: fired, with a run.
    let fired = null;
    for (let i = 0; !fired; i++) {
      assert.ok(i < 100, 'no tick fired within 10 s');
      const s = await nestedApi('GET', `/v1/schedules/${A}`);
      fired = (s.body.recent || []).find((t) => t.outcome === 'SCHEDULE_TICK_OUTCOME_FIRED' && t.runId);
      if (!fired) await sleep(100);
    }

    await openConsole(page, NESTED, KEY_A);
    await page.locator(tid('nav-schedules')).click();
    await page.locator(`${tid('schedules-state')}[data-state="ok"]`).waitFor();
    assert.equal(await page.locator(tid('nav-schedules')).getAttribute('aria-current'), 'page');
    const row = (id) => page.locator(`${tid('schedule-row')}[data-schedule-id="${id}"]`);
    await row(A).waitFor();
    // The agents file's first, then oldest first.
    const ids = await page.locator(tid('schedule-row')).evaluateAll((trs) => trs.map((tr) => tr.dataset.scheduleId));
    assert.deepEqual(ids, ['file:nightly_digest', A, B]);
    // Every 2 s: active, due within seconds, its latest tick fired a run.
    assert.equal(await row(A).locator(tid('schedule-link')).textContent(), 'Ping sturdy every 2 s');
    assert.equal(await row(A).locator(tid('schedule-target')).textContent(), 'agent sturdy');
    assert.equal(await row(A).locator(tid('schedule-when')).textContent(), 'every 2 s');
    assert.equal(await row(A).locator(tid('schedule-state')).textContent(), 'active');
    assert.match(await row(A).locator(tid('schedule-next')).textContent(), /^(in [12] s|due now)$/);
    assert.match(await row(A).locator(tid('schedule-next')).getAttribute('title'), /\(\d{4}-\d\d-\d\dT.*Z\)$/);
    await row(A).and(page.locator('[data-outcome="fired"]')).waitFor();
    assert.equal(await row(A).locator(tid('schedule-last-outcome')).textContent(), 'fired');
    assert.match(await row(A).locator(tid('schedule-last-run')).getAttribute('href'), /^#\/runs\/[0-9a-f-]{36}$/);
    assert.match(await row(A).locator(tid('schedule-last-run-status')).textContent(), /^(running|completed)$/);
    // At 9 on weekdays: a pipeline, not yet ticked.
    assert.equal(await row(B).locator(tid('schedule-target')).textContent(), 'pipeline morning-report');
    assert.equal(await row(B).locator(tid('schedule-when')).textContent(), '0 9 * * 1-5 Europe/Paris');
    assert.match(await row(B).locator(tid('schedule-next')).textContent(), /^in \d+ (h|d)/);
    assert.equal(await row(B).locator(tid('schedule-last')).textContent(), 'no tick yet');
    // The agents file's: ended (its end is past), marked so.
    const file = row('file:nightly_digest');
    assert.equal(await file.getAttribute('data-state'), 'ended');
    assert.equal(await file.locator(tid('schedule-file')).isVisible(), true);
    assert.equal(await file.locator(tid('schedule-next')).textContent(), '—');
    await shot(page, 'schedules', { fullPage: true });

    // One schedule: its definition, next fire times, ticks.
    await row(A).locator(tid('schedule-link')).click();
    const detail = page.locator(`${tid('schedule-page')}[data-schedule-id="${A}"]`);
    await page.locator(`${tid('schedule-page')}[data-state="active"]`).waitFor();
    assert.equal(await detail.locator(tid('schedule-title')).textContent(), 'Ping sturdy every 2 s');
    assert.equal(await page.locator(tid('schedule-id')).textContent(), A);
    assert.equal(await page.locator(tid('schedule-target')).textContent(), 'agent sturdy');
    assert.equal(await page.locator(tid('schedule-input')).textContent(), 'ping');
    assert.equal(await page.locator(tid('schedule-when')).textContent(), 'every 2 s');
    assert.equal(await page.locator(tid('schedule-end')).textContent(), 'never');
    assert.equal(await page.locator(tid('schedule-overlap')).textContent(), 'skip');
    assert.equal(await page.locator(tid('schedule-missed')).textContent(), 'skip');
    assert.equal(await page.locator(tid('schedule-origin')).textContent(), 'through the API');
    assert.equal(await page.locator(tid('schedule-next-time')).count(), 5);
    const firedRow = page.locator(`${tid('tick-row')}[data-run-id="${fired.runId}"]`);
    await firedRow.waitFor();
    assert.equal(await firedRow.getAttribute('data-outcome'), 'fired');
    assert.equal(await firedRow.locator(tid('tick-run')).getAttribute('href'), `#/runs/${fired.runId}`);
    assert.match(await firedRow.locator(tid('tick-run-status')).textContent(), /^(running|completed)$/);
    assert.equal(await page.locator(tid('schedule-file-note')).isVisible(), false);
    await shot(page, 'schedule', { fullPage: true });

    // Paused: no next fire time, and no tick fires.
    await page.locator(tid('schedule-pause')).click();
    await page.locator(`${tid('schedule-page')}[data-state="paused"]`).waitFor();
    assert.equal(await page.locator(tid('schedule-state')).textContent(), 'paused');
    assert.equal(await page.locator(tid('schedule-next-time')).count(), 0);
    assert.match(await page.locator(tid('schedule-no-next')).textContent(), /^None while it is paused/);
    assert.equal(await page.locator(tid('schedule-pause')).isVisible(), false);
    await sleep(500);
    const paused = await nestedApi('GET', `/v1/schedules/${A}`);
    assert.equal(paused.body.paused, true);
    assert.deepEqual(paused.body.nextFireTimes || [], []);
    await sleep(2500);
    const later = await nestedApi('GET', `/v1/schedules/${A}`);
    assert.equal(later.body.recent[0].tickAt, paused.body.recent[0].tickAt, 'a paused schedule fired');
    await shot(page, 'schedule-paused');
    // Resumed: active again, its next fire times back.
    await page.locator(tid('schedule-resume')).click();
    await page.locator(`${tid('schedule-page')}[data-state="active"]`).waitFor();
    assert.equal(await page.locator(tid('schedule-next-time')).count(), 5);
    assert.equal(await page.locator(tid('schedule-resume')).isVisible(), false);

    // The pipeline's: its policies, its end, its ticks at 9:00 in Paris.
    await page.goto(`${NESTED}/#/schedules/${B}`);
    await page.locator(`${tid('schedule-page')}[data-schedule-id="${B}"][data-state="active"]`).waitFor();
    assert.equal(await page.locator(tid('schedule-target')).textContent(), 'pipeline morning-report');
    assert.equal(await page.locator(tid('schedule-input')).textContent(), '1 step: check (sturdy)');
    assert.equal(await page.locator(tid('schedule-when')).textContent(), '0 9 * * 1-5 in Europe/Paris');
    assert.equal(await page.locator(tid('schedule-overlap')).textContent(), 'queue one');
    assert.equal(await page.locator(tid('schedule-missed')).textContent(), 'run once');
    assert.notEqual(await page.locator(tid('schedule-end')).textContent(), 'never');
    const times = await page.locator(tid('schedule-next-time')).evaluateAll((els) => els.map((el) => el.dataset.at));
    assert.equal(times.length, 5);
    for (const t of times) {
      const paris = new Intl.DateTimeFormat('en-GB', { timeZone: 'Europe/Paris', weekday: 'short', hour: '2-digit', minute: '2-digit' }).format(new Date(t));
      assert.match(paris, /^(Mon|Tue|Wed|Thu|Fri) 09:00$/, `${t} is ${paris} in Paris`);
    }
    assert.equal(await page.locator(tid('ticks-empty')).isVisible(), true);
    // Deleted, after a confirmation in the page: gone from the list.
    await page.locator(tid('schedule-delete')).click();
    await page.locator(tid('schedule-delete-box')).waitFor();
    assert.equal((await nestedApi('GET', `/v1/schedules/${B}`)).status, 200, 'deleted before it was confirmed');
    await page.locator(tid('schedule-delete-confirm')).click();
    await page.locator(tid('schedules-page')).waitFor();
    assert.equal(new URL(page.url()).hash, '#/schedules');
    await page.locator(`${tid('schedules-state')}[data-state="ok"]`).waitFor();
    await row(A).waitFor();
    assert.equal(await row(B).count(), 0, 'the deleted schedule is listed');
    assert.equal((await nestedApi('GET', `/v1/schedules/${B}`)).status, 404);

    // The agents file's: said so, without buttons.
    await page.goto(`${NESTED}/#/schedules/${encodeURIComponent('file:nightly_digest')}`);
    await page.locator(`${tid('schedule-page')}[data-state="ended"]`).waitFor();
    assert.match(await page.locator(tid('schedule-file-note')).textContent(), /^Declared in the agents file, as schedules\.nightly_digest/);
    assert.equal(await page.locator(tid('schedule-origin')).textContent(), 'in the agents file');
    for (const b of ['schedule-pause', 'schedule-resume', 'schedule-delete']) {
      assert.equal(await page.locator(tid(b)).isVisible(), false, `${b} shows for the agents file's schedule`);
    }
    assert.equal(await page.locator(tid('schedule-no-next')).textContent(), 'None: it has ended.');
    await shot(page, 'schedule-file');

    // At phone width: nothing scrolls sideways.
    await page.setViewportSize({ width: 390, height: 844 });
    await page.goto(`${NESTED}/#/schedules`);
    await row(A).and(page.locator('[data-outcome="fired"]')).waitFor();
    assert.equal(await fitsWidth(page), true, 'the schedules page fits 390 px');
    await shot(page, 'phone-schedules', { fullPage: true });
    await page.goto(`${NESTED}/#/schedules/${A}`);
    await page.locator(`${tid('schedule-page')}[data-state="active"]`).waitFor();
    await page.locator(tid('tick-row')).first().waitFor();
    assert.equal(await fitsWidth(page), true, 'a schedule fits 390 px');
    await shot(page, 'phone-schedule', { fullPage: true });
    await page.setViewportSize({ width: 1280, height: 800 });

    // Paused, its latest run stays put: opened from the list, it says
    // which schedule started it.
    assert.equal((await nestedApi('POST', `/v1/schedules/${A}:pause`)).status, 200);
    await page.goto(`${NESTED}/#/schedules`);
    await row(A).and(page.locator('[data-state="paused"]')).waitFor();
    const runId = await row(A).getAttribute('data-run-id');
    assert.match(runId, /^[0-9a-f-]{36}$/);
    await row(A).locator(tid('schedule-last-run')).click();
    await page.locator(`${tid('run-page')}[data-run-id="${runId}"]`).waitFor();
    await waitStatus(page, 'RUN_STATUS_COMPLETED');
    assert.equal(await page.locator(tid('run-target')).textContent(), 'sturdy');
    assert.equal(await page.locator(tid('run-schedule-link')).getAttribute('href'), `#/schedules/${A}`);
    await shot(page, 'schedule-run');

    // Another tenant sees none of them, and is told how to make one.
    await page.locator(tid('api-key')).fill(KEY_B);
    await page.locator(tid('api-key-save')).click();
    await page.locator(tid('nav-schedules')).click();
    await page.locator(`${tid('schedules-state')}[data-state="ok"]`).waitFor();
    await page.locator(tid('schedules-empty')).waitFor();
    assert.equal(await page.locator(tid('schedule-row')).count(), 0);
    assert.match(await page.locator(tid('schedules-how-cli')).textContent(), /^baton schedules create /);
    assert.match(await page.locator(tid('schedules-how-api')).textContent(), /^POST \/v1\/schedules /);
    await shot(page, 'schedules-empty');
  } finally {
    await nestedApi('DELETE', `/v1/schedules/${A}`).catch(() => {});
    await nestedApi('DELETE', `/v1/schedules/${B}`).catch(() => {});
  }
});
