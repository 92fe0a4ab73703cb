/** The README's quick start, compiled as the README says and run against
 * the real `baton up` on the example agents, prints what the README shows:
 * the researcher's run three deep, within its `maxDepth`. */
import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { test } from "node:test";
import { freePort } from "./baton";

/** clients/typescript (this file runs from dist/test). */
const HERE = resolve(__dirname, "../..");
const REPO = resolve(HERE, "../..");
const BIN = process.env.BATON_BIN ?? join(REPO, "target/debug/baton");

test("the README's quick start prints what the README shows", async () => {
  const readme = readFileSync(join(HERE, "README.md"), "utf8");
  const quick = readme.slice(readme.indexOf("## Quick start"), readme.indexOf("## The API"));
  const code = /```ts\n([\s\S]*?)```/.exec(quick)?.[1];
  const shown = /It prints [\s\S]*?\n\n```text\n([\s\S]*?)```/.exec(quick)?.[1];
  assert.ok(code && shown, "the quick start and what it prints");
  const [orch, store] = [await freePort(), await freePort()];
  const dir = mkdtempSync(join(tmpdir(), "baton-quickstart-"));
  // Saved elsewhere, so `./src` is this package's build.
  const source = code
    .replace("127.0.0.1:50051", `127.0.0.1:${orch}`)
    .replace('"./src"', JSON.stringify(join(HERE, "dist/src")));
  writeFileSync(join(dir, "quickstart.ts"), source);
  const tsc = join(HERE, "node_modules/.bin/tsc");
  execFileSync(tsc, ["--target", "es2022", "--module", "commonjs", "--esModuleInterop", "--skipLibCheck", "quickstart.ts"], {
    cwd: dir,
  });
  // In the repository, `baton up` serves deploy/config/agents.yaml.
  const up = spawn(BIN, ["up", "--listen", `127.0.0.1:${orch}`, "--store-listen", `127.0.0.1:${store}`], {
    cwd: REPO,
    stdio: ["ignore", "pipe", "ignore"],
  });
  const exited = new Promise((ok) => up.on("exit", ok));
  try {
    await new Promise<void>((ok, fail) => {
      createInterface({ input: up.stdout! }).on("line", (line) => {
        if (line.startsWith("Baton is up")) ok();
      });
      void exited.then(() => fail(new Error("baton up exited before it was up")));
    });
    const printed = execFileSync("node", [join(dir, "quickstart.js")], { encoding: "utf8", timeout: 60_000 });
    assert.equal(printed, shown);
    assert.ok(!printed.includes("over max_depth"));
  } finally {
    up.kill("SIGINT");
    await exited;
  }
});
