/** The README's examples, compiled as the README says and run against the
 * real `baton up` on the example agents, print what the README shows: the
 * quick start (the researcher's run three deep, within its `maxDepth`) and
 * the conversation (`chat` remembers what it was told). */
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

/** The README's section from `from` to `to`: its code and what it prints. */
function example(from: string, to: string, prints: RegExp): { code: string; shown: string } {
  const readme = readFileSync(join(HERE, "README.md"), "utf8");
  const section = readme.slice(readme.indexOf(from), readme.indexOf(to));
  const code = /```ts\n([\s\S]*?)```/.exec(section)?.[1];
  const shown = prints.exec(section)?.[1];
  assert.ok(code && shown, `${from}: the example and what it prints`);
  return { code, shown };
}

/** Compiles `code` as the README says (saved as `name`.ts), runs it against
 * a `baton up` of the example agents, and returns what it printed. */
async function runExample(code: string, name: string): Promise<string> {
  const [orch, store] = [await freePort(), await freePort()];
  const dir = mkdtempSync(join(tmpdir(), `baton-${name}-`));
  // Saved elsewhere, so `./src` is this package's build.
  const source = code
    .replace("127.0.0.1:50051", `127.0.0.1:${orch}`)
    .replace('"./src"', JSON.stringify(join(HERE, "dist/src")));
  writeFileSync(join(dir, `${name}.ts`), source);
  const tsc = join(HERE, "node_modules/.bin/tsc");
  execFileSync(tsc, ["--target", "es2022", "--module", "commonjs", "--esModuleInterop", "--skipLibCheck", `${name}.ts`], {
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
    return execFileSync("node", [join(dir, `${name}.js`)], { encoding: "utf8", timeout: 60_000 });
  } finally {
    up.kill("SIGINT");
    await exited;
  }
}

test("the README's quick start prints what the README shows", async () => {
  const { code, shown } = example("## Quick start", "## The API", /It prints [\s\S]*?\n\n```text\n([\s\S]*?)```/);
  const printed = await runExample(code, "quickstart");
  assert.equal(printed, shown);
  assert.ok(!printed.includes("over max_depth"));
});

test("the README's conversation prints what the README shows", async () => {
  const { code, shown } = example("## Conversations", "## Serving tools", /It prints:\n\n```text\n([\s\S]*?)```/);
  assert.equal(await runExample(code, "conversation"), shown);
});
