// The fenced scenarios of examples/mcpserver driven by the official
// TypeScript SDK v2 (@modelcontextprotocol/client, pinned in
// package-lock.json) on protocol revision 2026-07-28 (stateless: no
// initialize, no MCP session), against two replicas of the server behind a
// round-robin proxy that sends every call of a run to the replica that did
// not serve the run's previous call. Two devices of one conversation: the
// desktop's run continues across replicas under one token; the browser is
// refused while the run holds the conversation, then continues here; the
// desktop's late write is refused as stale and its next call as
// taken_over. On 2025-11-25 each device keeps an MCP session, which lives
// in the replica that served its initialize: the proxy routes by
// Mcp-Session-Id, so each device stays on one replica (one each). Usage: node replicas.mjs <endpoint> <conversation>
// [revision] (default 2026-07-28; 2025-11-25 initializes and keeps an MCP
// session). Exits 1 when a check fails; prints one line per check.
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";

const [endpoint, conversation, revisionArg] = process.argv.slice(2);
if (!endpoint || !conversation) {
  console.error("usage: node replicas.mjs <endpoint> <conversation> [revision]");
  process.exit(2);
}
const revision = revisionArg ?? "2026-07-28";
const stateless = revision >= "2026-07-28";
// Where the proxy sends a later call of a run: on 2025-11-25 to the
// replica of the device's MCP session.
const where = stateless ? "on the other replica" : "on its session's replica";
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
  // Pinning is for 2026-07-28 and later; 2025-era revisions negotiate at
  // initialize (mode "legacy").
  const versionNegotiation = stateless ? { mode: { pin: revision } } : { mode: "legacy" };
  const client = new Client({ name, version: "0.1.0" }, { versionNegotiation });
  await client.connect(transport);
  await client.listTools(); // as hosts do: the client then validates structured content
  return client;
}

// run: "start" starts a run (io.fencekit/run_start); a handle continues it.
function call(client, name, args, { run, end, onprogress } = {}) {
  const _meta = { "io.fencekit/account": account, "io.fencekit/conversation": conversation };
  if (run === "start") _meta["io.fencekit/run_start"] = true;
  else if (run) _meta["io.fencekit/run"] = run;
  if (end) _meta["io.fencekit/run_end"] = true;
  return client.callTool({ name, arguments: args, _meta }, onprogress ? { onprogress } : undefined);
}

const lease = (res) => res._meta?.["io.fencekit/lease"];
const refusal = (res) => (res.isError && res.structuredContent && res.structuredContent.cause ? res.structuredContent : null);
const show = (res) => JSON.stringify({ isError: res.isError, structuredContent: res.structuredContent, _meta: res._meta });

const desktop = await device("desktop", "alice");
const browser = await device("browser", "alice");
check(desktop.getNegotiatedProtocolVersion() === revision && browser.getNegotiatedProtocolVersion() === revision,
  `both clients speak ${revision}`, String(desktop.getNegotiatedProtocolVersion()));

let res = await call(desktop, "append_note", { text: "v2 draft" }, { run: "start" });
const run = lease(res)?.run;
const token = lease(res)?.token;
check(!res.isError && run && lease(res)?.holder === "desktop", `desktop starts a run (holder from ${stateless ? "the request's client info" : "initialize"})`, show(res));

res = await call(desktop, "append_note", { text: "v2 second" }, { run });
check(!res.isError && lease(res)?.run === run && lease(res)?.token === token,
  `the run's next call, ${where}, runs under the same token`, show(res));

res = await call(browser, "append_note", { text: "v2 refused" });
let r = refusal(res);
check(r?.cause === "held" && r.owner?.holder === "desktop", "the browser is refused while the desktop's run holds the conversation", JSON.stringify(r));

let holding;
const held = new Promise((resolve) => (holding = resolve));
const late = call(desktop, "append_note", { text: "v2 late draft", stall: true }, { run, onprogress: () => holding() });
await held;

res = await call(browser, "continue_here", { text: "v2 final" }, { run: "start" });
const brun = lease(res)?.run;
check(!res.isError && brun && lease(res)?.holder === "browser" && BigInt(lease(res).token) > BigInt(token),
  "the browser continues here and writes", show(res));

res = await late;
r = refusal(res);
check(r?.cause === "stale" && BigInt(r.presented) < BigInt(r.highest) && r.owner?.holder === "browser",
  "the desktop's late write is refused as stale, owner named", JSON.stringify(r));

res = await call(desktop, "append_note", { text: "v2 never" }, { run });
r = refusal(res);
check(r?.cause === "taken_over" && r.owner?.holder === "browser" && r.owner?.held === true,
  "the desktop's next call of its displaced run is refused as taken_over", JSON.stringify(r));

res = await call(browser, "append_note", { text: "v2 last" }, { run: brun, end: true });
check(!res.isError && lease(res)?.run === brun, `the browser's last call, ${where}, ends its run`, show(res));

res = await call(desktop, "append_note", { text: "v2 ended" }, { run: brun });
r = refusal(res);
check(r?.cause === "run_ended", "the ended run's handle is refused", JSON.stringify(r));

res = await browser.callTool({ name: "read_notes", arguments: {}, _meta: { "io.fencekit/account": account, "io.fencekit/conversation": conversation } });
const bodies = (res.structuredContent?.notes ?? []).map((n) => n.body);
check(JSON.stringify(bodies) === JSON.stringify(["v2 draft", "v2 second", "v2 final", "v2 last"]),
  "stored: each note once, none of the refused", JSON.stringify(bodies));

await Promise.all([desktop.close(), browser.close()]);
console.log(failed === 0 ? "replicas: all checks passed" : `replicas: ${failed} checks failed`);
process.exit(failed === 0 ? 0 : 1);
