/** API keys: `baton up --api-keys-file`, keys naming tenants. */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { NotFound, Orchestrator, Store, Unauthenticated, Unavailable, pb } from "../src";
import { Running, makePki, startBaton, startStore } from "./baton";

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

test("a store key reaches only its own tenant's slots", async () => {
  const store = await startStore(`acme ${ACME}\nglobex ${GLOBEX}\n`, "service-token-0123456789");
  const trace = "7af92f3577b34da6a3ce929d0e0e4736";
  const anonymous = new Store(store.target);
  const acme = new Store(store.target, ACME);
  const globex = new Store(store.target, GLOBEX);
  try {
    await assert.rejects(anonymous.put(trace, "k", "x"), (e: unknown) => {
      assert.ok(e instanceof Unauthenticated);
      assert.match(e.message, /authorization/);
      return true;
    });
    await acme.put(trace, "plan", "acme's");
    await assert.rejects(globex.get(trace, "plan"), NotFound);
    assert.equal((await globex.list(trace)).slots.length, 0);
    assert.equal(await globex.clear(trace), 0);
    await globex.put(trace, "plan", "globex's");
    assert.equal(Buffer.from((await acme.get(trace, "plan")).value).toString(), "acme's");
    assert.equal(Buffer.from((await globex.get(trace, "plan")).value).toString(), "globex's");
  } finally {
    anonymous.close();
    acme.close();
    globex.close();
    await store.stop();
  }
});

test("the store over TLS with a CA file and a client certificate", async () => {
  const pki = makePki();
  const store = await startStore(`acme ${ACME}\n`, "service-token-0123456789", pki, true);
  const trace = "6af92f3577b34da6a3ce929d0e0e4736";
  const https = `https://localhost:${store.target.split(":")[1]}`;
  const good = new Store(https, ACME, { caFile: pki.ca, certFile: pki.clientCert, keyFile: pki.clientKey });
  const refused = [
    new Store(store.target, ACME),
    new Store(https, ACME, { certFile: pki.clientCert, keyFile: pki.clientKey }),
    new Store(https, ACME, { caFile: pki.ca }),
  ];
  try {
    await good.put(trace, "k", "over tls");
    assert.equal(Buffer.from((await good.get(trace, "k")).value).toString(), "over tls");
    for (const s of refused) await assert.rejects(s.get(trace, "k", { timeoutMs: 5000 }), Unavailable);
  } finally {
    good.close();
    for (const s of refused) s.close();
    await store.stop();
  }
});
