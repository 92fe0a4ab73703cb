/** API keys: `baton up --api-keys-file`, keys naming tenants. */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { NotFound, Orchestrator, Unauthenticated, pb } from "../src";
import { Running, startBaton } from "./baton";

const ACME = "acme-key-0123456789";
const GLOBEX = "globex-key-9876543210";

let b: Running;
before(async () => {
  b = await startBaton({ apiKeys: `acme ${ACME}\nglobex ${GLOBEX}\n`, apiKey: ACME });
});
after(async () => {
  await b.stop();
});

test("calls need a known key, and a run is its tenant's", async () => {
  assert.ok((await b.orchestrator.listAgents()).agents.length > 0);
  const anonymous = new Orchestrator(b.orchestratorTarget);
  const other = new Orchestrator(b.orchestratorTarget, GLOBEX);
  try {
    await assert.rejects(anonymous.listAgents(), (e: unknown) => {
      assert.ok(e instanceof Unauthenticated);
      assert.match(e.message, /authorization: missing/);
      return true;
    });
    await assert.rejects(new Orchestrator(b.orchestratorTarget, "not-a-known-key-at-all").listAgents(), Unauthenticated);
    const stream = b.orchestrator.runAgent("payer", "order 9");
    for await (const e of stream) {
      if (e.payload?.$case === "approvalRequested") {
        const id = e.payload.approvalRequested.approvalId;
        await assert.rejects(other.resolveApproval(e.runId, id, true), (err: unknown) => {
          assert.ok(err instanceof NotFound);
          assert.equal(err.field, "run_id");
          return true;
        });
        await assert.rejects(other.getRun(e.runId), NotFound);
        await b.orchestrator.resolveApproval(e.runId, id, true);
      }
    }
    const run = await b.orchestrator.getRun(stream.runId!);
    assert.equal(run.status, pb.RunStatus.RUN_STATUS_COMPLETED);
  } finally {
    anonymous.close();
    other.close();
  }
});
