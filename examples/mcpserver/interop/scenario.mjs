// The two-devices scenario of examples/mcpserver driven by the official
// TypeScript MCP SDK over streamable HTTP: two clients of one conversation,
// continue here, the desktop's late write refused as stale, its next call
// refused as taken_over, both told who owns the conversation; a non-member
// and malformed _meta refused. Usage: node scenario.mjs <endpoint> <conversation>
// Exits 1 when a check fails; prints one line per check.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [endpoint, conversation] = process.argv.slice(2);
if (!endpoint || !conversation) {
  console.error("usage: node scenario.mjs <endpoint> <conversation>");
  process.exit(2);
}
const account = "acme";
let failed = 0;
function check(ok, what, detail) {
  console.log(`${ok ? "ok  " : "FAIL"} ${what}${detail ? ": " + detail : ""}`);
  if (!ok) failed++;
}

async function device(name, user) {
  const transport = new StreamableHTTPClientTransport(new URL(endpoint), {
    requestInit: { headers: { Authorization: `Bearer ${user}` } },
  });
  const client = new Client({ name, version: "0.1.0" });
  await client.connect(transport);
  await client.listTools(); // as hosts do: the client now validates structured content
  return client;
}

// run: "start" starts a run (io.fencekit/run_start), a handle continues it.
function call(client, name, args, { run, end, meta, onprogress } = {}) {
  const _meta = meta ?? { "io.fencekit/account": account, "io.fencekit/conversation": conversation };
  if (run === "start") _meta["io.fencekit/run_start"] = true;
  else if (run) _meta["io.fencekit/run"] = run;
  if (end) _meta["io.fencekit/run_end"] = true;
  return client.callTool({ name, arguments: args, _meta }, undefined, onprogress ? { onprogress } : undefined);
}

const refusal = (res) => (res.isError && res.structuredContent && res.structuredContent.cause ? res.structuredContent : null);

const desktop = await device("desktop", "alice");
const browser = await device("browser", "alice");

let res = await call(desktop, "append_note", { text: "ts draft" }, { run: "start" });
const run = res._meta?.["io.fencekit/lease"]?.run;
check(!res.isError && res._meta?.["io.fencekit/lease"]?.holder === "desktop" && run, "desktop writes in the run it starts", JSON.stringify(res._meta));

let holding;
const held = new Promise((resolve) => (holding = resolve));
const late = call(desktop, "append_note", { text: "ts late draft", stall: true }, { run, onprogress: () => holding() });
await held;

res = await call(browser, "continue_here", { text: "ts final" }, { run: "start" });
const brun = res._meta?.["io.fencekit/lease"]?.run;
check(!res.isError && res._meta?.["io.fencekit/lease"]?.holder === "browser" && brun, "browser continues here and writes");

res = await late;
let r = refusal(res);
check(r?.cause === "stale" && BigInt(r.presented) < BigInt(r.highest) && r.owner?.holder === "browser",
  "desktop's late write refused as stale, owner named", JSON.stringify(r));

res = await call(desktop, "append_note", { text: "ts never" }, { run });
r = refusal(res);
check(r?.cause === "taken_over" && r.owner?.holder === "browser" && r.owner?.held === true,
  "desktop's next call refused as taken_over by the browser", JSON.stringify(r));

res = await call(browser, "append_note", { text: "ts last" }, { run: brun, end: true });
check(!res.isError, "browser's last call ends its run");

const mallory = await device("mallory", "mallory");
res = await call(mallory, "append_note", { text: "ts intrusion" });
r = refusal(res);
check(r?.cause === "unauthorized", "a non-member is refused", JSON.stringify(r));

res = await call(desktop, "append_note", { text: "ts bad" }, { meta: { "io.fencekit/account": account, "io.fencekit/conversation": 7 } });
r = refusal(res);
check(r?.cause === "invalid_meta" && /want a string/.test(r.message), "a number as conversation id is refused", JSON.stringify(r));
res = await call(desktop, "append_note", { text: "ts bad" }, { meta: { "io.fencekit/account": account } });
r = refusal(res);
check(r?.cause === "no_key", "a call without a conversation is refused", JSON.stringify(r));

res = await browser.callTool({ name: "read_notes", arguments: {}, _meta: { "io.fencekit/account": account, "io.fencekit/conversation": conversation } });
const bodies = (res.structuredContent?.notes ?? []).map((n) => n.body);
check(JSON.stringify(bodies) === JSON.stringify(["ts draft", "ts final", "ts last"]), "stored: each note once, none of the refused", JSON.stringify(bodies));

await Promise.all([desktop.close(), browser.close(), mallory.close()]);
console.log(failed === 0 ? "interop: all checks passed" : `interop: ${failed} checks failed`);
process.exit(failed === 0 ? 0 : 1);
