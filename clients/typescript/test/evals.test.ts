/** Evaluations from TypeScript against the real `baton up` binary and its
 * example agents: the example dataset as an experiment (each case told as
 * it is scored), a researcher run saved as a case passing with its tools
 * answered from the recording, two experiments compared, and a bad dataset
 * refused naming its file, line and field. */
import assert from "node:assert/strict";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { FailedPrecondition, InvalidArgument, NotFound, evals } from "../src";
import { REPO, Running, startBaton } from "./baton";

let b: Running;
before(async () => {
  b = await startBaton({ exampleAgents: true });
});
after(async () => {
  await b.stop();
});

test("an experiment runs, compares, and a saved case passes with recorded tools", async () => {
  const dataset = join(REPO, "deploy/config/evals/examples.jsonl");
  const told: string[] = [];
  const e = await b.orchestrator.runExperiment(dataset, { name: "ts-main", onCase: (c) => told.push(c.caseId) });
  assert.equal(e.status, evals.ExperimentStatus.EXPERIMENT_STATUS_COMPLETED);
  assert.deepEqual([...told].sort(), e.cases.map((c) => c.caseId).sort());
  assert.equal(e.totals?.passed, 4);
  assert.equal((await b.orchestrator.getExperiment("ts-main")).id, e.id);
  const listed = await b.orchestrator.listExperiments();
  assert.deepEqual(
    listed.experiments.map((x) => x.name),
    ["ts-main"],
  );

  const researcher = e.cases.find((c) => c.caseId === "researcher-tides");
  assert.ok(researcher);
  const saved = await b.orchestrator.saveCase(researcher.tries[0].runId, true);
  assert.equal(saved.tools, "recorded");
  const dir = mkdtempSync(join(tmpdir(), "baton-evals-"));
  const file = join(dir, "saved.jsonl");
  writeFileSync(file, JSON.stringify(saved) + "\n");
  const again = await b.orchestrator.runExperiment(file, { name: "ts-saved", repeat: 2 });
  assert.equal(again.cases[0].passRate, 1, JSON.stringify(again.cases[0]));

  const second = await b.orchestrator.runExperiment(dataset, { name: "ts-again" });
  const compared = await b.orchestrator.compareExperiments("ts-main", second.id);
  assert.equal(compared.regressed, false);

  const bad = join(dir, "bad.jsonl");
  writeFileSync(bad, '{"input": "hi", "expected": "x"}\n{"input": "hi", "scorers": [{"kind": "regex", "pattern": "("}]}\n');
  await assert.rejects(b.orchestrator.runExperiment(bad), (err: unknown) => {
    assert.ok(err instanceof InvalidArgument, String(err));
    assert.ok(String((err as Error).message).includes(`${bad}:2: scorers[0].pattern: regex parse error`), String(err));
    return true;
  });
  await assert.rejects(b.orchestrator.getExperiment("nope"), NotFound);
});

test("cancelExperiment stops a running experiment and keeps what finished", async () => {
  const t = await startBaton();
  try {
    const dir = mkdtempSync(join(tmpdir(), "baton-evals-"));
    const file = join(dir, "slow.jsonl");
    writeFileSync(
      file,
      '{"id": "quick", "agent": "echo", "input": "hi", "scorers": [{"kind": "contains", "value": "hi"}]}\n' +
        '{"id": "slow-1", "input": "x", "expected": "never"}\n' +
        '{"id": "slow-2", "input": "x", "expected": "never"}\n',
    );
    const told: string[] = [];
    const running = t.orchestrator.runExperiment(file, { agent: "slow", name: "ts-slow", onCase: (c) => told.push(c.caseId) });
    for (let i = 0; i < 200 && told.length === 0; i++) await new Promise((r) => setTimeout(r, 20));
    assert.deepEqual(told, ["quick"]);
    const e = await t.orchestrator.cancelExperiment("ts-slow");
    assert.equal(e.status, evals.ExperimentStatus.EXPERIMENT_STATUS_CANCELLED);
    assert.deepEqual(
      e.cases.map((c) => c.caseId),
      ["quick"],
    );
    const ended = await running;
    assert.equal(ended.status, evals.ExperimentStatus.EXPERIMENT_STATUS_CANCELLED);
    await assert.rejects(t.orchestrator.cancelExperiment("ts-slow"), (err: unknown) => {
      assert.ok(err instanceof FailedPrecondition, String(err));
      assert.ok(String((err as Error).message).includes("only a running experiment can be cancelled"), String(err));
      return true;
    });
  } finally {
    await t.stop();
  }
});
