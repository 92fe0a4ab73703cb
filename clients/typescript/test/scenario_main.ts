/** The TypeScript client's runner of the polyglot conformance scenario
 * (tests/polyglot/scenario.json): `node dist/test/scenario_main.js ENDPOINT
 * SCENARIO.json` prints what it saw as one JSON object, the same shape as
 * the Rust and Python runners. */
import { readFileSync } from "node:fs";
import { status } from "@grpc/grpc-js";
import { BatonError, Orchestrator, RunStream, StepSpec, kind, pb } from "../src";

const snake = (s: string) => s.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);

async function run(baton: Orchestrator, spec: any) {
  let stream: RunStream;
  if (spec.pipeline) {
    const p = spec.pipeline;
    const steps: StepSpec[] = p.steps.map((s: any) => ({
      id: s.id,
      agent: s.agent,
      task: s.task,
      outputTo: s.output_to,
      inputFrom: s.input_from,
      dependsOn: s.depends_on,
    }));
    stream = baton.runPipeline(steps, { name: p.name, mode: p.mode, maxConcurrency: p.max_concurrency });
  } else {
    stream = baton.runAgent(spec.agent, spec.input, { maxDepth: spec.max_depth });
  }
  const events: [string, string, number][] = [];
  let output: string | null = null;
  for await (const e of stream) {
    events.push([snake(kind(e)), e.contextId, e.depth]);
    if (e.payload?.$case === "approvalRequested") {
      await baton.resolveApproval(e.runId, e.payload.approvalRequested.approvalId, true);
    }
    if (e.payload?.$case === "runCompleted") output = e.payload.runCompleted.output;
  }
  return { events, output };
}

async function errors(baton: Orchestrator, spec: any) {
  let unknown: Record<string, unknown> = { code: "OK" };
  try {
    await baton.runAgent(spec.unknown_agent.agent, spec.unknown_agent.input).collect();
  } catch (e) {
    if (!(e instanceof BatonError)) throw e;
    unknown = { code: status[e.code], field: e.field ?? null };
  }
  let runId = "";
  for await (const e of baton.runAgent(spec.disconnect.agent, spec.disconnect.input)) {
    runId = e.runId;
    break; // disconnect
  }
  let s = pb.RunStatus.RUN_STATUS_RUNNING;
  for (let i = 0; i < 100 && s === pb.RunStatus.RUN_STATUS_RUNNING; i++) {
    s = (await baton.getRun(runId)).status;
    if (s === pb.RunStatus.RUN_STATUS_RUNNING) await new Promise((r) => setTimeout(r, 50));
  }
  return { unknown_agent: unknown, disconnect: { status: pb.RunStatus[s] } };
}

async function main() {
  const [endpoint, file] = process.argv.slice(2);
  const scenario = JSON.parse(readFileSync(file, "utf8"));
  // TLS and authentication as the other runners: BATON_CA_FILE (the CA an
  // https:// endpoint is checked against), BATON_API_KEY.
  const ca = process.env.BATON_CA_FILE;
  const baton = new Orchestrator(endpoint, process.env.BATON_API_KEY, ca ? { caFile: ca } : undefined);
  const runs: Record<string, unknown> = {};
  for (const spec of scenario.runs) runs[spec.name] = await run(baton, spec);
  const errs = await errors(baton, scenario.errors);
  baton.close();
  console.log(JSON.stringify({ client: "typescript", runs, errors: errs }));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
