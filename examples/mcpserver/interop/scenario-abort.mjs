// A device that leaves mid-call, on MCP 2026-07-28 with the TypeScript SDK
// v2 (@modelcontextprotocol/client): the browser holds the conversation in a
// run; the desktop's queue_note waits its turn (progress names the holder)
// and the desktop aborts it (AbortController); then the browser ends its
// run. The abandoned call must never write: the Go test polls the notes
// table and the lease after this script exits.
// Usage: node scenario-abort.mjs <endpoint> <conversation>
// Exits 1 when a check fails; prints one line per check.
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";

const [endpoint, conversation] = process.argv.slice(2);
if (!endpoint || !conversation) {
  console.error("usage: node scenario-abort.mjs <endpoint> <conversation>");
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
  const client = new Client({ name, version: "0.1.0" }, { versionNegotiation: { mode: { pin: "2026-07-28" } } });
  await client.connect(transport);
  await client.listTools();
  return client;
}

const meta = (extra) => ({ "io.fencekit/account": account, "io.fencekit/conversation": conversation, ...extra });
const desktop = await device("desktop", "alice");
const browser = await device("browser", "alice");

let res = await browser.callTool({ name: "append_note", arguments: { text: "abort held" }, _meta: meta({ "io.fencekit/run_start": true }) });
const brun = res._meta?.["io.fencekit/lease"]?.run;
check(!res.isError && typeof brun === "string", "browser starts a run and holds the conversation", JSON.stringify(res._meta));

const controller = new AbortController();
let progress = "";
let waiting;
const waited = new Promise((resolve) => (waiting = resolve));
const abandoned = desktop.callTool(
  { name: "queue_note", arguments: { text: "abort never" }, _meta: meta({}) },
  { signal: controller.signal, onprogress: (p) => { progress = p.message ?? ""; waiting(); } },
);
// The call must be waiting (a progress notification) before it is aborted;
// one that returned at once ends the scenario here.
const first = await Promise.race([waited.then(() => "waiting"), abandoned.then((r) => JSON.stringify(r), (e) => String(e))]);
check(first === "waiting" && /browser/.test(progress), "desktop's queue_note waits, told the browser holds the conversation", first === "waiting" ? progress : first);
if (first !== "waiting") process.exit(1);
controller.abort(new Error("the desktop left"));
let outcome;
try {
  outcome = await abandoned;
} catch (err) {
  outcome = err;
}
check(outcome instanceof Error, "the desktop's aborted call ends on the client", String(outcome?.message ?? JSON.stringify(outcome)));

res = await browser.callTool({ name: "append_note", arguments: { text: "abort released" }, _meta: meta({ "io.fencekit/run": brun, "io.fencekit/run_end": true }) });
check(!res.isError, "browser's last call ends its run: the conversation is free", JSON.stringify(res._meta));

await Promise.all([desktop.close(), browser.close()]);
console.log(failed === 0 ? "abort: all checks passed" : `abort: ${failed} checks failed`);
process.exit(failed === 0 ? 0 : 1);
