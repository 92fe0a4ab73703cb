// Generates src/gen from Baton's protos with buf and ts-proto. The protos
// are the repository's proto/ (../../proto from here), or the folder
// BATON_PROTO names when this package is built elsewhere.
const { existsSync } = require("node:fs");
const { join, resolve } = require("node:path");
const { spawnSync } = require("node:child_process");

const here = resolve(__dirname, "..");
const proto = resolve(process.env.BATON_PROTO || join(here, "..", "..", "proto"));
if (!existsSync(join(proto, "baton", "v1", "orchestrator.proto"))) {
  console.error(
    `@baton/client: no Baton protos at ${proto} (baton/v1/*.proto).\n` +
      "Build it from a checkout of the Baton repository (clients/typescript), " +
      "or set BATON_PROTO to the repository's proto/ folder.",
  );
  process.exit(1);
}
const buf = join(here, "node_modules", ".bin", "buf");
if (!existsSync(buf)) {
  console.error("@baton/client: run `npm install` first (buf and ts-proto are dev dependencies).");
  process.exit(1);
}
const run = spawnSync(buf, ["generate", proto, "--template", "buf.gen.yaml"], { cwd: here, stdio: "inherit" });
process.exit(run.status ?? 1);
