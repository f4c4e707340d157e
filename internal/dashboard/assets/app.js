// weir dashboard: polls /api/v1/job and draws it. No dependencies.
"use strict";

const NODE_W = 240, NODE_H = 96, GAP_X = 90, GAP_Y = 28, PAD = 16;
const SVG_NS = "http://www.w3.org/2000/svg";
const MIN_WATERMARK = -9.2e18;

let token = "";
let selected = "";
let refresh = 1000;
let timer = 0;
let lastJob = null;

function $(id) { return document.getElementById(id); }

function init() {
  const q = new URLSearchParams(location.search);
  const h = new URLSearchParams(location.hash.slice(1));
  token = h.get("token") || q.get("token") || sessionStorage.getItem("weir-token") || "";
  $("token-form").addEventListener("submit", (e) => {
    e.preventDefault();
    token = $("token-input").value;
    sessionStorage.setItem("weir-token", token);
    $("token-form").hidden = true;
    poll();
  });
  poll();
}

async function poll() {
  clearTimeout(timer);
  try {
    const headers = token ? { Authorization: "Bearer " + token } : {};
    const r = await fetch("/api/v1/job", { headers, cache: "no-store" });
    if (r.status === 401) {
      showError("The dashboard needs a token.");
      $("token-form").hidden = false;
      return;
    }
    if (!r.ok) throw new Error("HTTP " + r.status);
    const job = await r.json();
    $("error").hidden = true;
    lastJob = job;
    render(job);
    if (job.refresh > 0) refresh = job.refresh;
    if (job.state === "finished" || job.state === "failed" || job.state === "canceled") return;
  } catch (e) {
    showError("Cannot reach the job: " + e.message + " (it may have ended).");
  }
  timer = setTimeout(poll, refresh);
}

function showError(msg) {
  const el = $("error");
  el.textContent = msg;
  el.hidden = false;
}

function render(job) {
  $("job-name").textContent = job.name;
  $("job-state").textContent = job.state;
  $("job-state").className = "state-" + job.state;
  $("job-uptime").textContent = duration(job.uptime);
  $("job-restarts").textContent = job.numRestarts;
  $("job-time").textContent = new Date(job.time).toLocaleTimeString();
  const vs = job.vertices || [];
  if (!vs.some((v) => v.id === selected) && vs.length > 0) selected = vs[0].id;
  renderGraph(vs);
  renderSubtasks(vs.find((v) => v.id === selected));
  renderCheckpoints(job.checkpoints);
  renderExceptions(job);
}

// --- job graph ---

function layout(vs) {
  const byId = new Map(vs.map((v) => [v.id, v]));
  const layer = new Map();
  const depth = (v) => {
    if (layer.has(v.id)) return layer.get(v.id);
    layer.set(v.id, 0);
    let d = 0;
    for (const i of v.inputs || []) {
      const u = byId.get(i.id);
      if (u) d = Math.max(d, depth(u) + 1);
    }
    layer.set(v.id, d);
    return d;
  };
  vs.forEach(depth);
  const rows = new Map();
  const pos = new Map();
  for (const v of vs) {
    const l = layer.get(v.id);
    const r = rows.get(l) || 0;
    rows.set(l, r + 1);
    pos.set(v.id, { x: PAD + l * (NODE_W + GAP_X), y: PAD + r * (NODE_H + GAP_Y) });
  }
  const layers = Math.max(1, ...[...layer.values()].map((l) => l + 1));
  const maxRows = Math.max(1, ...rows.values());
  return { pos, width: PAD * 2 + layers * NODE_W + (layers - 1) * GAP_X, height: PAD * 2 + maxRows * NODE_H + (maxRows - 1) * GAP_Y };
}

function el(name, attrs, text) {
  const e = document.createElementNS(SVG_NS, name);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

// colour is Flink's: blue when idle, towards red when busy, dark grey when
// back-pressured.
function colour(v) {
  const busy = v.busyTimeMsPerSecond / 1000, bp = v.backPressuredTimeMsPerSecond / 1000;
  if (v.backPressure !== "ok" && bp >= busy) return `hsl(215, 8%, ${Math.round(62 - bp * 32)}%)`;
  return `hsl(${Math.round(210 * (1 - busy))}, 70%, ${Math.round(88 - busy * 18)}%)`;
}

function renderGraph(vs) {
  const svg = $("graph-svg");
  const { pos, width, height } = layout(vs);
  svg.setAttribute("width", width);
  svg.setAttribute("height", height);
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.replaceChildren();
  const marker = el("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 8, markerHeight: 8, orient: "auto" });
  marker.append(el("path", { class: "arrow", d: "M0,0 L10,5 L0,10 z" }));
  const defs = el("defs");
  defs.append(marker);
  svg.append(defs);
  for (const v of vs) {
    const to = pos.get(v.id);
    for (const i of v.inputs || []) {
      const from = pos.get(i.id);
      if (!from) continue;
      const x1 = from.x + NODE_W, y1 = from.y + NODE_H / 2, x2 = to.x, y2 = to.y + NODE_H / 2;
      const mx = (x1 + x2) / 2;
      svg.append(el("path", { class: "edge", d: `M${x1},${y1} C${mx},${y1} ${mx},${y2} ${x2},${y2}`, "marker-end": "url(#arrow)" }));
      svg.append(el("text", { class: "edge-label", x: mx, y: (y1 + y2) / 2 - 5, "text-anchor": "middle" }, i.partitioning));
    }
  }
  for (const v of vs) {
    const p = pos.get(v.id);
    const bp = v.backPressure !== "ok";
    const g = el("g", {
      class: "vertex" + (bp ? " backpressured" : "") + (v.id === selected ? " selected" : ""),
      id: "vertex-" + v.id, "data-id": v.id, "data-name": v.name, "data-backpressure": v.backPressure,
      transform: `translate(${p.x},${p.y})`, tabindex: "0",
    });
    g.append(el("title", {}, `${v.name}\n${(v.operators || []).join(" → ")}`));
    g.append(el("rect", { width: NODE_W, height: NODE_H, rx: 6, fill: colour(v) }));
    g.append(el("text", { class: "name", x: 10, y: 19 }, clip(v.name, 30)));
    g.append(el("text", { class: "parallelism", x: 10, y: 37 }, `Parallelism: ${v.parallelism}`));
    g.append(el("text", { class: "rates", x: 10, y: 55 }, `in ${rate(v.numRecordsInPerSecond)}/s · out ${rate(v.numRecordsOutPerSecond)}/s`));
    g.append(el("text", { class: "times", x: 10, y: 73 },
      `busy ${pct(v.busyTimeMsPerSecond)} · back-pressured ${pct(v.backPressuredTimeMsPerSecond)}`));
    if (bp) g.append(el("text", { class: "badge", x: 10, y: 89 }, `BACK-PRESSURED (${v.backPressure.toUpperCase()})`));
    g.addEventListener("click", () => select(v.id));
    g.addEventListener("keydown", (e) => { if (e.key === "Enter") select(v.id); });
    svg.append(g);
  }
}

function select(id) {
  selected = id;
  if (lastJob) render(lastJob);
}

// --- subtasks ---

function renderSubtasks(v) {
  $("selected-name").textContent = v ? v.name : "…";
  const body = $("subtasks").tBodies[0];
  body.replaceChildren();
  if (!v) return;
  for (const t of v.subtasks || []) {
    const tr = document.createElement("tr");
    if (t.backPressuredTimeMsPerSecond > 500) tr.className = "bp-high";
    const cells = [
      t.subtask, t.state, t.location,
      count(t.numRecordsIn), rate(t.numRecordsInPerSecond), count(t.numRecordsOut), rate(t.numRecordsOutPerSecond),
      bytes(t.numBytesInPerSecond) + "/s", bytes(t.numBytesOutPerSecond) + "/s",
      pct(t.busyTimeMsPerSecond), pct(t.idleTimeMsPerSecond), pct(t.backPressuredTimeMsPerSecond),
      pct(t.inPoolUsage * 1000), pct(t.outPoolUsage * 1000), t.inputQueueLength, t.outputQueueLength,
      ms(t.checkpointAlignmentTime / 1e6), ms(t.checkpointStartDelayNanos / 1e6),
      watermark(t.currentInputWatermark), watermark(t.currentOutputWatermark), count(t.numLateRecordsDropped),
    ];
    const names = ["subtask", "state", "location", "numRecordsIn", "numRecordsInPerSecond", "numRecordsOut",
      "numRecordsOutPerSecond", "numBytesInPerSecond", "numBytesOutPerSecond", "busyTimeMsPerSecond",
      "idleTimeMsPerSecond", "backPressuredTimeMsPerSecond", "inPoolUsage", "outPoolUsage", "inputQueueLength",
      "outputQueueLength", "checkpointAlignmentTime", "checkpointStartDelayNanos", "currentInputWatermark",
      "currentOutputWatermark", "numLateRecordsDropped"];
    cells.forEach((c, i) => {
      const td = document.createElement("td");
      td.textContent = c;
      td.dataset.metric = names[i];
      tr.append(td);
    });
    body.append(tr);
  }
}

// --- checkpoints ---

function renderCheckpoints(c) {
  $("checkpoints-off").hidden = !!c;
  $("checkpoints-on").hidden = !c;
  if (!c) return;
  $("ck-completed").textContent = c.numberOfCompletedCheckpoints;
  $("ck-failed").textContent = c.numberOfFailedCheckpoints;
  $("ck-aborted").textContent = c.numberOfAbortedCheckpoints;
  $("ck-inprogress").textContent = c.numberOfInProgressCheckpoints;
  const s = c.summary;
  $("ck-summary").textContent = s.count > 0 ? `${ms(s.min)} / ${ms(s.avg)} / ${ms(s.max)}` : "–";
  $("ck-restore").textContent = c.lastCheckpointRestoreTimestamp > 0 ? new Date(c.lastCheckpointRestoreTimestamp).toLocaleString() : "never";
  const body = $("checkpoints").tBodies[0];
  body.replaceChildren();
  for (const h of (c.history || []).slice(0, 10)) {
    const tr = document.createElement("tr");
    tr.className = "checkpoint status-" + h.status.replace(" ", "-");
    tr.dataset.id = h.id;
    for (const v of [h.id, h.kind, h.status, `${h.acknowledged}/${h.total}`, new Date(h.triggerTime).toLocaleTimeString(),
      ms(h.duration), bytes(h.size), ms(h.alignmentTime)]) {
      const td = document.createElement("td");
      td.textContent = v;
      tr.append(td);
    }
    if (h.failure) tr.title = h.failure;
    body.append(tr);
  }
}

// --- restarts and exceptions ---

function renderExceptions(job) {
  $("restarts").textContent = job.numRestarts;
  const e = job.latestException;
  $("no-exception").hidden = !!e;
  $("exception").hidden = !e;
  if (e) {
    $("exception-time").textContent = new Date(e.time).toLocaleString();
    $("exception-message").textContent = e.message;
  }
}

// --- formatting ---

function clip(s, n) { return s.length > n ? s.slice(0, n - 1) + "…" : s; }
function pct(msPerSecond) { return (msPerSecond / 10).toFixed(0) + "%"; }
function ms(x) { return x >= 1000 ? (x / 1000).toFixed(1) + " s" : Math.round(x) + " ms"; }
function count(x) { return Math.round(x).toLocaleString("en-US"); }
function rate(x) {
  if (x >= 1e6) return (x / 1e6).toFixed(1) + "M";
  if (x >= 1e4) return (x / 1e3).toFixed(1) + "k";
  return x.toFixed(0);
}
function bytes(x) {
  if (x >= 1 << 20) return (x / (1 << 20)).toFixed(1) + " MiB";
  if (x >= 1 << 10) return (x / (1 << 10)).toFixed(1) + " KiB";
  return Math.round(x) + " B";
}
function duration(msecs) {
  let s = Math.floor(msecs / 1000);
  const h = Math.floor(s / 3600); s -= h * 3600;
  const m = Math.floor(s / 60); s -= m * 60;
  return (h ? h + "h " : "") + (h || m ? m + "m " : "") + s + "s";
}
function watermark(x) {
  if (x <= MIN_WATERMARK) return "none";
  if (x >= 9.2e18) return "end";
  return new Date(x).toISOString().replace("T", " ").replace("Z", "");
}

document.addEventListener("DOMContentLoaded", init);
