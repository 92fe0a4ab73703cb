/** The TypeScript client and ToolServer against the real `baton up` binary. */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { Aborted, DeadlineExceeded, InvalidArgument, NotFound, RunStream, ToolContext, events, kind, pb } from "../src";
import { Running, startBaton } from "./baton";

let b: Running;
before(async () => {
  b = await startBaton();
});
after(async () => {
  await b.stop();
});

test("a nested run with a TypeScript tool and its progress", async () => {
  const events = await b.orchestrator.runAgent("outer", "tides", { maxDepth: 2 }).collect();
  const seq = events.map((e) => [kind(e), e.contextId, e.depth]);
  assert.deepEqual(seq[0], ["runStarted", "root", 0]);
  assert.ok(seq.some(([k, c, d]) => k === "agentStarted" && c === "root.inner.1" && d === 1));
  const progress = events.flatMap((e) => (e.payload?.$case === "toolProgress" ? [e.payload.toolProgress] : []));
  assert.deepEqual(
    progress.map((p) => [p.percent, p.message]),
    [
      [50, "step 1"],
      [100, "step 2"],
    ],
  );
  const last = events[events.length - 1].payload;
  assert.equal(last?.$case, "runCompleted");
  assert.equal(
    last?.$case === "runCompleted" && last.runCompleted.output,
    "outer: inner: 2 results for find tides at depth 1",
  );
  assert.deepEqual(
    events.map((e) => e.seq),
    events.map((_, i) => i + 1),
  );
});

test("traceparent joins the caller's trace", async () => {
  const trace = "4bf92f3577b34da6a3ce929d0e0e4736";
  const stream = b.orchestrator.runAgent("echo", "x", { traceparent: `00-${trace}-00f067aa0ba902b7-01` });
  const events = await stream.collect();
  assert.equal(stream.traceId, trace);
  assert.ok(events.every((e) => e.traceId === trace));
});

test("input asked by a TypeScript tool", async () => {
  const offered: [string, string[]][] = [];
  for await (const e of b.orchestrator.runAgent("picker", "go")) {
    if (e.payload?.$case === "toolOptions") offered.push([e.payload.toolOptions.question, e.payload.toolOptions.options]);
    if (e.payload?.$case === "inputRequested") {
      assert.equal(e.payload.inputRequested.prompt, "Which plan?");
      assert.deepEqual(e.payload.inputRequested.options, ["basic", "gold"]);
      await b.orchestrator.submitInput(e.runId, e.payload.inputRequested.inputId, "gold");
    }
    if (e.payload?.$case === "runCompleted") {
      assert.equal(e.payload.runCompleted.output, "picked gold");
      // Offered on the first call and again when resumed.
      assert.deepEqual(offered, [
        ["Plans on offer", ["basic", "gold"]],
        ["Plans on offer", ["basic", "gold"]],
      ]);
      return;
    }
  }
  assert.fail("no runCompleted");
});

test("an approval, then the slot is in the store", async () => {
  const stream = b.orchestrator.runAgent("payer", "order 7");
  for await (const e of stream) {
    if (e.payload?.$case === "approvalRequested") {
      await b.orchestrator.resolveApproval(e.runId, e.payload.approvalRequested.approvalId, true);
    }
  }
  const slot = await b.store.get(stream.traceId!, "paid");
  assert.equal(Buffer.from(slot.value).toString(), "yes");
  const run = await b.orchestrator.getRun(stream.runId!);
  assert.equal(run.status, pb.RunStatus.RUN_STATUS_COMPLETED);
  // Re-attach to the finished run: its events after seq 2.
  const replayed = await b.orchestrator.watch(stream.runId!, 2).collect();
  assert.deepEqual(
    replayed.map((e) => e.seq),
    Array.from({ length: run.lastSeq - 2 }, (_, i) => i + 3),
  );
  assert.equal(kind(replayed[replayed.length - 1]), "runCompleted");
});

test("a DAG pipeline", async () => {
  const events = await b.orchestrator
    .runPipeline(
      [
        { id: "a", agent: "echo", task: "alpha", outputTo: "x", timeout: 10 },
        { id: "b", agent: "echo", task: "got {{x}}" },
      ],
      { mode: "dag", name: "ts" },
    )
    .collect();
  const last = events[events.length - 1].payload;
  assert.equal(last?.$case === "runCompleted" && last.runCompleted.output, "got alpha");
  assert.ok(events.some((e) => kind(e) === "stepStarted" && e.contextId === "root.a" && e.depth === 1));
});

test("schedules are made, listed, paused, resumed and deleted", async () => {
  const made = await b.orchestrator.createSchedule("echo", "tick", { every: 10, description: "ts" });
  assert.ok(made.scheduleId.startsWith("sch_"));
  assert.equal(made.target, "echo");
  assert.equal(made.nextFireTimes.length, 5);
  const cron = await b.orchestrator.createSchedule("echo", "morning", {
    cron: "0 9 * * MON-FRI",
    timeZone: "Europe/Paris",
    overlap: "queue_one",
  });
  assert.deepEqual((await b.orchestrator.listSchedules()).map((s) => s.scheduleId), [made.scheduleId, cron.scheduleId]);
  const paused = await b.orchestrator.pauseSchedule(made.scheduleId);
  assert.ok(paused.paused);
  assert.equal(paused.nextFireTimes.length, 0);
  assert.ok(!(await b.orchestrator.resumeSchedule(made.scheduleId)).paused);
  await b.orchestrator.deleteSchedule(made.scheduleId);
  await b.orchestrator.deleteSchedule(cron.scheduleId);
  await assert.rejects(
    b.orchestrator.getSchedule(made.scheduleId),
    (e: unknown) => e instanceof NotFound && e.field === "schedule_id",
  );
  await assert.rejects(
    b.orchestrator.createSchedule("echo", "x", { cron: "0 9 * * *", timeZone: "Mars/Base" }),
    (e: unknown) => e instanceof InvalidArgument && e.field === "time_zone",
  );
  await assert.rejects(
    b.orchestrator.createSchedule("echo", "x", { every: 1 }),
    (e: unknown) => e instanceof InvalidArgument && e.field === "interval",
  );
  assert.deepEqual(await b.orchestrator.listSchedules(), []);
});

test("a tenant's webhooks are made, listed, rotated and deleted", async () => {
  const made = await b.orchestrator.createWebhook("https://hooks.example.com/ts", { events: ["run.completed"] });
  assert.ok(made.secret.startsWith("whsec_"));
  const id = made.webhook!.webhookId;
  assert.deepEqual((await b.orchestrator.listWebhooks()).map((w) => w.url), ["https://hooks.example.com/ts"]);
  const rotated = await b.orchestrator.rotateWebhookSecret(id, 60);
  assert.notEqual(rotated.secret, made.secret);
  assert.ok(rotated.webhook?.previousSecretExpiresAt);
  assert.deepEqual(await b.orchestrator.listDeadLetters(), []);
  await assert.rejects(
    b.orchestrator.redeliverDeadLetter("msg_nope"),
    (e: unknown) => e instanceof NotFound && e.field === "delivery_id",
  );
  await b.orchestrator.deleteWebhook(id);
  assert.deepEqual(await b.orchestrator.listWebhooks(), []);
  await assert.rejects(
    b.orchestrator.createWebhook("https://10.0.0.1/x"),
    (e: unknown) => e instanceof InvalidArgument && e.field === "url",
  );
});

test("typed errors name the field", async () => {
  await assert.rejects(b.orchestrator.runAgent("nobody", "x").collect(), (e: unknown) => {
    assert.ok(e instanceof InvalidArgument);
    assert.equal(e.field, "agent");
    return true;
  });
  await assert.rejects(b.orchestrator.runPipeline([{ id: "a", agent: "nobody" }]).collect(), (e: unknown) => {
    assert.ok(e instanceof InvalidArgument);
    assert.equal(e.field, "pipeline.steps[0].agent");
    return true;
  });
  await assert.rejects(
    b.orchestrator.runAgent("slow", "x", { webhooks: [{ url: "https://10.0.0.1/hook", secret: "whsec_x" }] }).collect(),
    (e: unknown) => e instanceof InvalidArgument && e.field === "webhooks[0].url",
  );
  await assert.rejects(b.orchestrator.getRun("0190f5a2-7b3c-7d4e-8f10-1a2b3c4d5e6f"), NotFound);
  await assert.rejects(
    b.orchestrator.getRun("no-such-run"),
    (e: unknown) => e instanceof InvalidArgument && e.field === "run_id",
  );
  await assert.rejects(b.orchestrator.runAgent("slow", "x", { timeoutMs: 300 }).collect(), DeadlineExceeded);
  const trace = "0af7651916cd43dd8448eb211c80319c";
  await b.store.put(trace, "k", "v1");
  await assert.rejects(b.store.put(trace, "k", "v2", { expectedVersion: 7 }), (e: unknown) => {
    assert.ok(e instanceof Aborted);
    assert.equal(e.field, "expected_version");
    assert.equal(e.currentVersion, 1);
    return true;
  });
  await assert.rejects(b.store.get("not-a-trace", "k"), (e: unknown) => e instanceof InvalidArgument && e.field === "trace_id");
});

test("leaving the stream cancels the run", async () => {
  let runId = "";
  for await (const e of b.orchestrator.runAgent("slow", "x")) {
    runId = e.runId;
    break; // disconnects
  }
  for (let i = 0; i < 100; i++) {
    const run = await b.orchestrator.getRun(runId);
    if (run.status === pb.RunStatus.RUN_STATUS_CANCELLED) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.fail("the run was not cancelled");
});

test("store put, get, list, delete and watch", async () => {
  const trace = "6bf92f3577b34da6a3ce929d0e0e4736";
  const seen: string[] = [];
  const watching = (async () => {
    for await (const c of b.store.watch(trace, "notes/")) {
      seen.push(c.key);
      if (seen.length === 2) return;
    }
  })();
  await new Promise((r) => setTimeout(r, 200));
  const put = await b.store.put(trace, "notes/a", "hello", { ttl: 60 });
  const got = await b.store.get(trace, "notes/a");
  assert.equal(Buffer.from(got.value).toString(), "hello");
  assert.equal(got.slot?.version, put.version);
  assert.equal(got.slot?.contentType, "text/plain; charset=utf-8");
  assert.deepEqual(
    (await b.store.list(trace, "notes/")).slots.map((s) => s.key),
    ["notes/a"],
  );
  await b.store.delete(trace, "notes/a");
  await assert.rejects(b.store.get(trace, "notes/a"), NotFound);
  await watching;
  assert.deepEqual(seen, ["notes/a", "notes/a"]);
});

test("store batches are all or nothing", async () => {
  const trace = "9bf92f3577b34da6a3ce929d0e0e4736";
  const written = await b.store.putMany(trace, { "b/1": "one", "b/2": new Uint8Array([1, 2]) });
  assert.deepEqual(
    written.map((w) => Number(w.version)),
    [1, 2],
  );
  assert.equal((await b.store.get(trace, "b/1")).slot?.contentType, "text/plain; charset=utf-8");
  await assert.rejects(
    b.store.putMany(trace, [
      { key: "b/3", value: "x" },
      { key: "b/1", value: "y", expectedVersion: 7 },
    ]),
    (e: unknown) => e instanceof Aborted && e.field === "entries[1].expected_version",
  );
  assert.deepEqual(
    (await b.store.list(trace)).slots.map((s) => s.key),
    ["b/1", "b/2"],
  );
  const ok = await b.store.putMany(trace, [{ key: "c", value: "z", ttl: 60, expectedVersion: 0 }]);
  assert.equal(Number(ok[0].version), 3);
  assert.equal(await b.store.deleteMany(trace, { keys: ["b/2", "absent"] }), 1);
  assert.equal(await b.store.deleteMany(trace, { prefix: "b/" }), 1);
  assert.deepEqual(
    (await b.store.list(trace)).slots.map((s) => s.key),
    ["c"],
  );
  await assert.rejects(
    b.store.deleteMany(trace, {}),
    (e: unknown) => e instanceof InvalidArgument && e.field === "keys",
  );
});

test("store list follows every page", async () => {
  const trace = "8bf92f3577b34da6a3ce929d0e0e4736";
  const keys = Array.from({ length: 2500 }, (_, i) => `k/${String(i).padStart(4, "0")}`);
  for (let i = 0; i < keys.length; i += 250) {
    await Promise.all(keys.slice(i, i + 250).map((k) => b.store.put(trace, k, "v")));
  }
  const listing = await b.store.list(trace, "k/");
  assert.deepEqual(listing.slots.map((s) => s.key), keys);
  assert.equal(Number(listing.usedKeys), 2500);
  assert.equal(listing.nextPageToken, "");
  const first = await b.store.listPage(trace, "k/", { pageSize: 2 });
  assert.deepEqual(first.slots.map((s) => s.key), keys.slice(0, 2));
  const second = await b.store.listPage(trace, "k/", { pageSize: 2, pageToken: first.nextPageToken });
  assert.deepEqual(second.slots.map((s) => s.key), keys.slice(2, 4));
  await assert.rejects(
    b.store.listPage(trace, "k/", { pageToken: "garbage" }),
    (e: unknown) => e instanceof InvalidArgument && e.field === "page_token",
  );
});

test("CancelRun ends the run with its reason", async () => {
  const stream = b.orchestrator.runAgent("slow", "x");
  const it = stream[Symbol.asyncIterator]();
  const first = (await it.next()).value!;
  await b.orchestrator.cancel(first.runId, "changed my mind");
  let last = first;
  for (let r = await it.next(); !r.done; r = await it.next()) last = r.value;
  assert.ok(last.payload?.$case === "runCancelled" && last.payload.runCancelled.reason.endsWith("changed my mind"));
  assert.equal((await b.orchestrator.getRun(first.runId)).status, pb.RunStatus.RUN_STATUS_CANCELLED);
});

test("a tool sees its call's idempotency key", () => {
  const ctx = new ToolContext(
    {
      tool: "charge",
      callId: "c1",
      argumentsJson: "{}",
      context: { traceId: "", runId: "r", contextId: "root.payer.1", depth: 1, agent: "payer" },
      resumeToken: "",
      input: "",
      idempotencyKey: "r/root.payer.1/c1",
    },
    () => {},
  );
  assert.equal(ctx.idempotencyKey, "r/root.payer.1/c1");
  assert.equal(ctx.idempotencyKey, `${ctx.runId}/${ctx.contextId}/${ctx.callId}`);
});

test("a detached run outlives its stream and is listed", async () => {
  let runId = "";
  for await (const e of b.orchestrator.runAgent("slow", "x", { detach: true })) {
    runId = e.runId;
    break; // leaves the stream; the run goes on
  }
  await new Promise((r) => setTimeout(r, 100));
  assert.equal((await b.orchestrator.getRun(runId)).status, pb.RunStatus.RUN_STATUS_RUNNING);
  const running = await b.orchestrator.listRuns(pb.RunStatus.RUN_STATUS_RUNNING, 1000);
  const mine = running.runs.find((r) => r.runId === runId);
  assert.ok(mine?.detached, JSON.stringify(running.runs));
  // Sleeping, it waits for nobody: not among the runs waiting for a person.
  assert.deepEqual(mine?.waitingFor, []);
  const waiting = await b.orchestrator.listWaitingRuns(1000);
  assert.ok(!waiting.runs.some((r) => r.runId === runId), JSON.stringify(waiting.runs));
  const page = await b.orchestrator.listRuns(pb.RunStatus.RUN_STATUS_UNSPECIFIED, 1);
  assert.equal(page.runs.length, 1);
  assert.ok(page.nextPageToken !== "");
  assert.equal(await b.orchestrator.cancel(runId, "done"), pb.RunStatus.RUN_STATUS_CANCELLED);
});

test("a broken stream re-attaches after its last seq", async () => {
  const { Metadata, status } = await import("@grpc/grpc-js");
  const unavailable = () =>
    Object.assign(new Error("14 UNAVAILABLE: replica draining"), {
      code: status.UNAVAILABLE,
      details: "replica draining",
      metadata: new Metadata(),
    });
  const ev = (seq: number, done = false): events.RunEvent =>
    events.RunEvent.fromPartial({
      seq,
      runId: "r1",
      traceId: "t",
      payload: done ? { $case: "runCompleted", runCompleted: { output: "done", runContextJson: "" } } : undefined,
    });
  const call = (items: (events.RunEvent | Error)[]) =>
    ({
      async *[Symbol.asyncIterator]() {
        for (const i of items) {
          if (i instanceof Error) throw i;
          yield i;
        }
      },
      cancel() {},
    }) as never;
  const asked: [string, number][] = [];
  const stream = new RunStream(call([ev(1), ev(2), unavailable()]), (runId, afterSeq) => {
    asked.push([runId, afterSeq]);
    return asked.length === 1 ? call([unavailable()]) : call([ev(3), ev(4, true)]);
  });
  const seen = (await stream.collect()).map((e) => e.seq);
  assert.deepEqual(seen, [1, 2, 3, 4]);
  assert.deepEqual(asked, [
    ["r1", 2],
    ["r1", 2],
  ]);
  // An error before the run is known is the caller's.
  await assert.rejects(new RunStream(call([unavailable()]), () => call([])).collect());
});

test("a run budget bounds what the run spends", async () => {
  await assert.rejects(
    b.orchestrator.runAgent("echo", "hi", { budgetTokens: 0 }).collect(),
    (e: unknown) => e instanceof InvalidArgument && e.field === "limits.budget.tokens",
  );
  const refused = await b.orchestrator.runAgent("echo", "hi", { budgetTokens: 1 }).collect();
  const last = refused[refused.length - 1].payload;
  assert.ok(last?.$case === "runFailed", JSON.stringify(last));
  assert.equal(last.runFailed.code, 8); // RESOURCE_EXHAUSTED
  assert.match(last.runFailed.message, /^budget run exhausted: 0 of 1 tokens spent/);
  const done = await b.orchestrator.runAgent("echo", "hi", { budgetTokens: 100000 }).collect();
  assert.equal(done[done.length - 1].payload?.$case, "runCompleted");
});

test("generation settings reach the run", async () => {
  await assert.rejects(
    b.orchestrator.runAgent("echo", "hi", { settings: { temperature: 3 } }).collect(),
    (e: unknown) => e instanceof InvalidArgument && e.field === "settings.temperature",
  );
  // The scripted answer is plain text: a JSON schema fails the run.
  const events = await b.orchestrator
    .runAgent("echo", "hi", {
      maxTurns: 3,
      runTimeout: 30,
      settings: { temperature: 0.2, maxTokens: 10, stop: ["x"], extra: { a: 1 }, responseFormat: { schema: { type: "object" } } },
    })
    .collect();
  const last = events[events.length - 1].payload;
  assert.ok(last?.$case === "runFailed", JSON.stringify(last));
  assert.equal(last.runFailed.code, 9); // FAILED_PRECONDITION
  assert.match(last.runFailed.message, /does not match response_format/);
  const piped = await b.orchestrator
    .runPipeline([{ id: "a", agent: "echo", task: "hi" }], { settings: { responseFormat: { schema: { type: "object" } } } })
    .collect();
  assert.ok(
    piped.some((e) => e.payload?.$case === "stepFailed" && /does not match response_format/.test(e.payload.stepFailed.error)),
  );
});

test("a fork replays up to its point and takes the edit", async () => {
  const original = await b.orchestrator.runAgent("outer", "waves", { maxDepth: 2 }).collect();
  const at = original.find((e) => e.payload?.$case === "toolCallCompleted" && e.contextId === "root.inner.1")?.seq;
  assert.ok(at, "inner's search result");
  const fork = await b.orchestrator.forkRun(original[0].runId, at, { edit: { toolResult: "no waves today" } }).collect();
  const last = fork[fork.length - 1].payload;
  assert.equal(last?.$case === "runCompleted" && last.runCompleted.output, "outer: inner: no waves today");
  const first = fork[0];
  assert.ok(first.replayed);
  assert.equal(first.payload?.$case === "runStarted" && first.payload.runStarted.forkedFrom?.runId, original[0].runId);
  assert.deepEqual(
    fork.map((e) => e.seq),
    fork.map((_, i) => i + 1),
  );
  const got = await b.orchestrator.getRun(first.runId);
  assert.equal(got.forkedFrom?.seq, at);
  // An edit of the wrong kind names the field and starts nothing.
  await assert.rejects(
    b.orchestrator.forkRun(original[0].runId, at, { edit: { input: "x" } }).collect(),
    (e: unknown) => e instanceof InvalidArgument && e.field === "edit.input",
  );
});

test("a strict replay answers every call from the recording", async () => {
  // The tool server may have been away when Baton started: its first call
  // lists its tools, and a run before that offered the model other tool
  // descriptions (a replay rightly says so).
  await b.orchestrator.runAgent("outer", "warm-up", { maxDepth: 2 }).collect();
  const original = await b.orchestrator.runAgent("outer", "tides", { maxDepth: 2 }).collect();
  const replay = await b.orchestrator.replayRun(original[0].runId, { strict: true }).collect();
  const last = replay[replay.length - 1].payload;
  assert.ok(last?.$case === "runCompleted", JSON.stringify(replay.filter((e) => e.payload?.$case === "diverged" || e.payload?.$case === "runFailed")));
  const first = original[original.length - 1].payload;
  assert.equal(last.runCompleted.output, first?.$case === "runCompleted" && first.runCompleted.output);
  const stats = last.runCompleted.replay;
  assert.equal(stats?.runId, original[0].runId);
  assert.equal(stats?.diverged, false);
  assert.ok((stats?.calls ?? 0) >= 3 && stats?.matchedCalls === stats?.calls, JSON.stringify(stats));
  assert.ok(!replay.some((e) => e.payload?.$case === "diverged"));
  const got = await b.orchestrator.getRun(replay[0].runId);
  assert.equal(got.replayOf, original[0].runId);
  await assert.rejects(
    b.orchestrator.replayRun("01a21dea-4a96-7714-991b-987a17c8b34d").collect(),
    (e: unknown) => e instanceof NotFound,
  );
});

test("a fork with a run-context edit ends with that context", async () => {
  const original = await b.orchestrator.runAgent("outer", "clouds", { maxDepth: 2 }).collect();
  const at = original.find((e) => e.payload?.$case === "toolCallCompleted" && e.contextId === "root.inner.1")?.seq;
  assert.ok(at);
  const fork = await b.orchestrator.forkRun(original[0].runId, at, { edit: { runContext: { mood: "calm" } } }).collect();
  const last = fork[fork.length - 1].payload;
  assert.ok(last?.$case === "runCompleted");
  assert.equal(last.$case === "runCompleted" && JSON.parse(last.runCompleted.runContextJson).mood, "calm");
});
