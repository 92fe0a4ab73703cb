/** The TypeScript tool server of the polyglot conformance scenario:
 * `node dist/test/toolhost_main.js` serves `ts_format` on a free port and
 * prints `listening PORT`. */
import { ToolServer } from "../src";

async function main() {
  const tools = new ToolServer().tool(
    "ts_format",
    {
      description: "Upper-cases text (TypeScript).",
      parameters: { type: "object", properties: { text: { type: "string" } }, required: ["text"] },
    },
    async (ctx, args: { text: string }) => {
      await ctx.progress(100, "formatted");
      return args.text.toUpperCase();
    },
  );
  const port = await tools.start("127.0.0.1:0");
  console.log(`listening ${port}`);
  const stop = () => void tools.stop().then(() => process.exit(0));
  process.on("SIGTERM", stop);
  process.on("SIGINT", stop);
}
main();
