// fence-demo serve: one tab of the conversation. Who owns the run comes only
// from the server's stream (/api/stream, Server-Sent Events); the tab never
// decides it on its own.
"use strict";
const q = new URLSearchParams(location.search);
const $ = (id) => document.getElementById(id);
let session = q.get("session");
const device = q.get("device");
if (!session) {
  session = "conv-" + Math.random().toString(16).slice(2, 10);
}
$("session").textContent = session;
if (device !== "desktop" && device !== "browser") {
  $("device").textContent = "pick a device";
  $("links").hidden = false;
  for (const d of ["desktop", "browser"]) {
    $("open-" + d).href = "?session=" + encodeURIComponent(session) + "&device=" + d;
  }
} else {
  $("device").textContent = device;
  $("app").hidden = false;
  start();
}

function start() {
  const api = (path, extra) =>
    "/api/" + path + "?session=" + encodeURIComponent(session) + "&device=" + device + (extra || "");
  let myToken = 0; // the token of the grant this tab got, 0 when none
  let current = null; // the latest event from the stream
  let expiresAt = 0; // local clock, from remaining_ms at receipt

  const render = () => {
    const held = current && current.state === "held";
    const mine = held && current.token === myToken;
    $("owner").textContent = held ? (current.holder || "another run") : "nobody";
    $("state").textContent = current ? "(" + current.state + ")" : "";
    $("token").textContent = current && current.token ? current.token : "—";
    $("composer").readOnly = !mine;
    $("run").disabled = !mine;
    $("run-stalled").disabled = !mine;
    $("start").hidden = held;
    $("continue").hidden = !held || mine;
    const b = $("banner");
    b.hidden = !current;
    b.className = "banner" + (mine ? " mine" : "");
    if (mine) b.textContent = "The run is live here.";
    else if (held) b.textContent = "Continued on " + (current.holder || "another device") + ": this tab is read-only.";
    else b.textContent = "Nobody runs this conversation: start here.";
    document.body.dataset.owner = held ? current.holder || "" : "";
    document.body.dataset.mine = mine ? "1" : "0";
  };
  setInterval(() => {
    if (current && current.state === "held") {
      $("expiry").textContent = "in " + Math.max(0, (expiresAt - Date.now()) / 1000).toFixed(1) + "s";
    } else {
      $("expiry").textContent = "—";
    }
  }, 200);

  const es = new EventSource("/api/stream?account=acme&session=" + encodeURIComponent(session) + "&device=" + device);
  es.onopen = () => { $("conn").textContent = "live"; $("conn").className = "conn live"; };
  es.onerror = () => { $("conn").textContent = "reconnecting…"; $("conn").className = "conn down"; };
  for (const kind of ["current", "granted", "renewed", "taken-over", "released", "expired"]) {
    es.addEventListener(kind, (e) => {
      current = JSON.parse(e.data);
      expiresAt = Date.now() + (current.remaining_ms || 0);
      document.body.dataset.token = String(current.token);
      render();
    });
  }

  const post = async (path, extra) => {
    const r = await fetch(api(path, extra), { method: "POST" });
    return { status: r.status, body: await r.json() };
  };
  const grant = async (path) => {
    const r = await post(path);
    if (r.status === 200) myToken = r.body.token;
    else log("refused", path + ": " + r.body.error);
    render();
  };
  $("start").onclick = () => grant("open");
  $("continue").onclick = () => grant("takeover");

  let n = 0;
  const log = (cls, text) => {
    const li = document.createElement("li");
    li.className = cls;
    li.textContent = text;
    $("log").append(li);
    return li;
  };
  const run = async (stalled) => {
    const id = ++n;
    const li = log("pending", "#" + id + " token " + myToken + (stalled ? " (network stalled)" : "") + ": sent…");
    const r = await post("write", stalled ? "&stall=1" : "");
    if (r.status !== 200) {
      li.className = "refused";
      li.textContent = "#" + id + ": " + r.body.error;
      return;
    }
    const b = r.body;
    const refused = !b.s3.ok || !b.pg.ok;
    li.className = refused ? "refused" : "ok";
    li.dataset.outcome = refused ? "refused" : "accepted";
    li.textContent = "#" + id + " token " + b.token + (b.stalled ? " (late)" : "") +
      ": MinIO " + b.s3.text + "; PostgreSQL " + b.pg.text;
  };
  $("run").onclick = () => run(false);
  $("run-stalled").onclick = () => run(true);
  render();
}
