// The two-devices scenario of examples/mcpserver on MCP 2026-07-28 (no
// initialize, no sessions: every request carries its protocol version and
// clientInfo in _meta), driven by the TypeScript SDK v2
// (@modelcontextprotocol/client) against replicas of the server behind a
// round-robin proxy that names the replica of each response (X-Replica).
// The desktop starts a run (io.fencekit/run_start) and later calls of the
// run, sent with the handle the server minted, land on the other replica
// each time; a duplicate of one call (same io.fencekit/request id) returns
// the first call's result and writes nothing; the browser continues here;
// the desktop's late write is refused as stale and its next call of the run
// as taken_over, both naming the browser as the owner.
// Usage: node scenario-v2.mjs <endpoint> <conversation>
// Exits 1 when a check fails; prints one line per check.
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { randomUUID } from "node:crypto";

const [endpoint, conversation] = process.argv.slice(2);
if (!endpoint || !conversation) {
  console.error("usage: node scenario-v2.mjs <endpoint> <conversation>");
  process.exit(2);
}
const account = "acme";
let failed = 0;
function check(ok, what, detail) {
  console.log(`${ok ? "ok  " : "FAIL"} ${what}${detail ? ": " + detail : ""}`);
  if (!ok) failed++;
}

// device connects a client named name, signed in as user; its calls record
// the replica that answered each tools/call (the proxy's X-Replica header).
async function device(name, user) {
  const replicas = []; // one entry per tools/call sent: the replica that answered
  const transport = new StreamableHTTPClientTransport(new URL(endpoint), {
    requestInit: { headers: { Authorization: `Bearer ${user}` } },
    fetch: async (url, init) => {
      const res = await fetch(url, init);
      let method;
      try {
        method = JSON.parse(init?.body ?? "null")?.method;
      } catch {
        method = undefined;
      }
      if (method === "tools/call") replicas.push(res.headers.get("x-replica"));
      allReplicas.add(res.headers.get("x-replica"));
      return res;
    },
  });
  const client = new Client({ name, version: "0.1.0" }, { versionNegotiation: { mode: { pin: "2026-07-28" } } });
  await client.connect(transport);
  await client.listTools(); // as hosts do: the client validates structured content against it
  return { client, replicas };
}
const allReplicas = new Set();

// call sends one tools/call from device d and returns its result, with
// replica: the replica that answered it.
async function call(d, name, args, { run, start, end, request, meta, onprogress } = {}) {
  const _meta = meta ?? { "io.fencekit/account": account, "io.fencekit/conversation": conversation };
  if (start) _meta["io.fencekit/run_start"] = true;
  if (run) _meta["io.fencekit/run"] = run;
  if (end) _meta["io.fencekit/run_end"] = true;
  if (request) _meta["io.fencekit/request"] = request;
  const sent = d.replicas.length;
  const res = await d.client.callTool({ name, arguments: args, _meta }, onprogress ? { onprogress } : undefined);
  res.replica = d.replicas[sent];
  return res;
}

const refusal = (res) => (res.isError && res.structuredContent && res.structuredContent.cause ? res.structuredContent : null);
const lease = (res) => res._meta?.["io.fencekit/lease"];

const desktop = await device("desktop", "alice");
const browser = await device("browser", "alice");

// The desktop starts a run; its handle comes back in the lease info.
let res = await call(desktop, "append_note", { text: "v2 draft" }, { start: true });
const run = lease(res)?.run;
check(!res.isError && typeof run === "string" && run !== "" && lease(res)?.holder === "desktop",
  "desktop starts a run and writes; the server mints the run handle", JSON.stringify(res._meta));
const token = lease(res)?.token;
let prev = res.replica;
for (const text of ["v2 second", "v2 third"]) {
  res = await call(desktop, "append_note", { text }, { run });
  check(!res.isError && lease(res)?.token === token && lease(res)?.run === run,
    `desktop's "${text}" joins its run (one lease, one token) on replica ${res.replica}`, JSON.stringify(res._meta));
  check(res.replica != null && prev != null && res.replica !== prev,
    `the run's call went to the other replica (${prev} -> ${res.replica})`);
  prev = res.replica;
}

// A duplicate of one logical call (a retry after a lost reply) is answered
// with the first call's result and writes nothing again.
const request = randomUUID();
const first = await call(desktop, "append_note", { text: "v2 once" }, { run, request });
const again = await call(desktop, "append_note", { text: "v2 once" }, { run, request });
check(!first.isError && !again.isError && JSON.stringify(again.structuredContent) === JSON.stringify(first.structuredContent),
  `a duplicate tools/call (same io.fencekit/request, replicas ${first.replica} then ${again.replica}) returns the first result`,
  JSON.stringify([first.structuredContent, again.structuredContent]));

// The desktop pauses mid-call; the browser continues here meanwhile.
let holding;
const held = new Promise((resolve) => (holding = resolve));
const late = call(desktop, "append_note", { text: "v2 late draft", stall: true }, { run, onprogress: () => holding() });
await held;

res = await call(browser, "continue_here", { text: "v2 final" }, { start: true });
const brun = lease(res)?.run;
check(!res.isError && lease(res)?.holder === "browser" && typeof brun === "string" && brun !== run,
  `browser continues here and writes (replica ${res.replica})`, JSON.stringify(res._meta));

res = await late;
let r = refusal(res);
check(r?.cause === "stale" && BigInt(r.presented) < BigInt(r.highest) && r.owner?.holder === "browser",
  "desktop's late write refused as stale, owner named", JSON.stringify(r));

res = await call(desktop, "append_note", { text: "v2 never" }, { run });
r = refusal(res);
check(r?.cause === "taken_over" && r.owner?.holder === "browser" && r.owner?.held === true,
  `desktop's next call of its run refused as taken_over by the browser (replica ${res.replica})`, JSON.stringify(r));

res = await call(browser, "append_note", { text: "v2 last" }, { run: brun, end: true });
check(!res.isError, `browser's last call ends its run (replica ${res.replica})`, JSON.stringify(res._meta));

const mallory = await device("mallory", "mallory");
res = await call(mallory, "append_note", { text: "v2 intrusion" }, { start: true });
r = refusal(res);
check(r?.cause === "unauthorized", "a non-member is refused", JSON.stringify(r));

res = await browser.client.callTool({ name: "read_notes", arguments: {}, _meta: { "io.fencekit/account": account, "io.fencekit/conversation": conversation } });
const bodies = (res.structuredContent?.notes ?? []).map((n) => n.body);
const want = ["v2 draft", "v2 second", "v2 third", "v2 once", "v2 final", "v2 last"];
check(JSON.stringify(bodies) === JSON.stringify(want), "stored: each note once, none of the refused", JSON.stringify(bodies));

check(allReplicas.size >= 2, `requests were served by ${allReplicas.size} replicas`, JSON.stringify([...allReplicas]));

await Promise.all([desktop.client.close(), browser.client.close(), mallory.client.close()]);
console.log(failed === 0 ? "interop v2: all checks passed" : `interop v2: ${failed} checks failed`);
process.exit(failed === 0 ? 0 : 1);
