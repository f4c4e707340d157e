// weir dashboard: polls /api/v1/job and draws it; reads and acts through
// the REST API (/jobs/…). No dependencies.
"use strict";

const NODE_W = 240, GAP_X = 90, GAP_Y = 28, PAD = 16, LINE = 17, NAME_LINES = 3;
const SVG_NS = "http://www.w3.org/2000/svg";
const MIN_WATERMARK = -9.2e18, MAX_WATERMARK = 9.2e18;
const PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22"];

let token = "";
let selected = "";
let refresh = 1000;
let timer = 0;
let lastJob = null;
let ended = false;

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
  for (const b of document.querySelectorAll("#actions button")) b.addEventListener("click", () => confirmAction(b.dataset.action));
  $("profile-form").addEventListener("submit", (e) => { e.preventDefault(); takeProfile(); });
  $("profile-reset").addEventListener("click", () => { flameRoot = null; drawFlame(); });
  $("profile-worker").addEventListener("change", () => { $("profile-seconds").max = $("profile-worker").value ? 60 : 300; });
  poll();
}

// api fetches path with the token; it throws on an HTTP error with the
// server's message.
async function api(path, opts) {
  const o = Object.assign({ cache: "no-store" }, opts || {});
  o.headers = Object.assign(token ? { Authorization: "Bearer " + token } : {}, o.headers || {});
  const r = await fetch(path, o);
  let body = null;
  try { body = await r.json(); } catch (_) { /* not JSON */ }
  if (!r.ok) {
    const msg = body && (body.error || (body.errors && body.errors.join("; ")));
    const e = new Error(msg || "HTTP " + r.status);
    e.status = r.status;
    throw e;
  }
  return body;
}

async function poll() {
  clearTimeout(timer);
  try {
    const job = await api("/api/v1/job");
    $("error").hidden = true;
    lastJob = job;
    if (job.refresh > 0) refresh = job.refresh;
    ended = job.state === "finished" || job.state === "failed" || job.state === "canceled";
    render(job);
    await Promise.all([pollHistory(job), pollExceptions(job), pollWorkers(job), pollDetails()]);
    if (ended) return;
  } catch (e) {
    if (e.status === 401) {
      showError("The dashboard needs a token.");
      $("token-form").hidden = false;
      return;
    }
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
  renderActions(job);
  renderGraph(vs);
  renderSubtasks(vs.find((v) => v.id === selected));
  renderWatermarks(job);
  renderCheckpoints(job.checkpoints);
  renderExceptions(job);
  $("profile-section").hidden = !job.profiling;
}

// --- job graph ---

let measureCtx = null;
// textWidth measures s in the given CSS font, as the SVG draws it.
function textWidth(s, font) {
  if (!measureCtx) measureCtx = document.createElement("canvas").getContext("2d");
  measureCtx.font = font + " " + getComputedStyle(document.body).fontFamily;
  return measureCtx.measureText(s).width;
}

// fit cuts s to width px, with an ellipsis.
function fit(s, width, font) {
  if (textWidth(s, font) <= width) return s;
  let lo = 0, hi = s.length;
  while (lo < hi) {
    const m = Math.ceil((lo + hi) / 2);
    if (textWidth(s.slice(0, m) + "…", font) <= width) lo = m; else hi = m - 1;
  }
  return s.slice(0, lo) + "…";
}

// wrap breaks s into at most n lines of width px, at spaces where it can;
// the last line is cut with an ellipsis.
function wrap(s, width, font, n) {
  const words = s.split(/(?<= )/);
  const lines = [];
  let cur = "";
  for (let w of words) {
    if (textWidth(cur + w, font) <= width || cur === "") {
      if (cur === "" && textWidth(w, font) > width) {
        // One long word: split it by characters.
        while (textWidth(w, font) > width && lines.length < n - 1) {
          let k = w.length;
          while (k > 1 && textWidth(w.slice(0, k), font) > width) k--;
          lines.push(w.slice(0, k));
          w = w.slice(k);
        }
      }
      cur += w;
      continue;
    }
    lines.push(cur.trimEnd());
    cur = w;
  }
  if (cur) lines.push(cur.trimEnd());
  if (lines.length > n) {
    const rest = lines.slice(n - 1).join(" ");
    lines.length = n - 1;
    lines.push(rest);
  }
  return lines.map((l, i) => (i === lines.length - 1 ? fit(l, width, font) : l));
}

const NAME_FONT = "600 13px", TEXT_FONT = "12px", BADGE_FONT = "700 10px";

// boxLines are the lines of a vertex's box and its height.
function boxLines(v) {
  const w = NODE_W - 20;
  const name = wrap(v.name, w, NAME_FONT, NAME_LINES);
  const bp = v.backPressure !== "ok";
  const lines = name.map((t) => ({ cls: "name", t }));
  lines.push({ cls: "parallelism", t: fit(`Parallelism: ${v.parallelism}`, w, TEXT_FONT) });
  lines.push({ cls: "rates", t: fit(`in ${rate(v.numRecordsInPerSecond)}/s · out ${rate(v.numRecordsOutPerSecond)}/s`, w, TEXT_FONT) });
  lines.push({ cls: "times", t: fit(`busy ${pct(v.busyTimeMsPerSecond)} · back-pressured ${pct(v.backPressuredTimeMsPerSecond)}`, w, TEXT_FONT) });
  if (bp) lines.push({ cls: "badge", t: fit(`BACK-PRESSURED (${v.backPressure.toUpperCase()})`, w, BADGE_FONT) });
  return { lines, height: 10 + lines.length * LINE };
}

function layout(vs, boxes) {
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
  const colY = new Map();
  const pos = new Map();
  let height = 0;
  for (const v of vs) {
    const l = layer.get(v.id);
    const y = colY.get(l) || PAD;
    const h = boxes.get(v.id).height;
    colY.set(l, y + h + GAP_Y);
    pos.set(v.id, { x: PAD + l * (NODE_W + GAP_X), y, h });
    height = Math.max(height, y + h + PAD);
  }
  const layers = Math.max(1, ...[...layer.values()].map((l) => l + 1));
  return { pos, width: PAD * 2 + layers * NODE_W + (layers - 1) * GAP_X, height: Math.max(height, 60) };
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
  const boxes = new Map(vs.map((v) => [v.id, boxLines(v)]));
  const { pos, width, height } = layout(vs, boxes);
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
      const x1 = from.x + NODE_W, y1 = from.y + from.h / 2, x2 = to.x, y2 = to.y + to.h / 2;
      const mx = (x1 + x2) / 2;
      svg.append(el("path", { class: "edge", d: `M${x1},${y1} C${mx},${y1} ${mx},${y2} ${x2},${y2}`, "marker-end": "url(#arrow)" }));
      svg.append(el("text", { class: "edge-label", x: mx, y: (y1 + y2) / 2 - 5, "text-anchor": "middle" }, i.partitioning));
    }
  }
  vs.forEach((v, k) => {
    const p = pos.get(v.id);
    const bp = v.backPressure !== "ok";
    const g = el("g", {
      class: "vertex" + (bp ? " backpressured" : "") + (v.id === selected ? " selected" : ""),
      id: "vertex-" + v.id, "data-id": v.id, "data-name": v.name, "data-backpressure": v.backPressure,
      transform: `translate(${p.x},${p.y})`, tabindex: "0",
    });
    g.append(el("title", {}, `${v.name}\n${(v.operators || []).join(" → ")}`));
    // Nothing is drawn outside the box.
    const clip = el("clipPath", { id: "clip-" + k });
    clip.append(el("rect", { width: NODE_W, height: p.h, rx: 6 }));
    g.append(clip);
    g.append(el("rect", { class: "box", width: NODE_W, height: p.h, rx: 6, fill: colour(v) }));
    const body = el("g", { "clip-path": `url(#clip-${k})` });
    boxes.get(v.id).lines.forEach((l, i) => body.append(el("text", { class: l.cls, x: 10, y: 19 + i * LINE }, l.t)));
    g.append(body);
    g.addEventListener("click", () => select(v.id));
    g.addEventListener("keydown", (e) => { if (e.key === "Enter") select(v.id); });
    svg.append(g);
  });
}

function select(id) {
  selected = id;
  if (lastJob) render(lastJob);
}

// --- subtasks ---

function cellRow(tr, cells, names) {
  cells.forEach((c, i) => {
    const td = document.createElement("td");
    td.textContent = c;
    if (names) td.dataset.metric = names[i];
    tr.append(td);
  });
}

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
    cellRow(tr, cells, names);
    body.append(tr);
  }
}

// --- watermarks ---

function hasWatermark(x) { return x > MIN_WATERMARK && x < MAX_WATERMARK; }
function lag(now, x) { return hasWatermark(x) ? ms(Math.max(0, now - x)) : "–"; }

function renderWatermarks(job) {
  const now = new Date(job.time).getTime();
  const body = $("watermarks").tBodies[0];
  body.replaceChildren();
  for (const v of job.vertices || []) {
    const subs = v.subtasks || [];
    // The operator's low watermark: the lowest of its subtasks'.
    const low = (f) => subs.reduce((m, t) => Math.min(m, f(t)), MAX_WATERMARK * 2);
    const lowIn = low((t) => t.currentInputWatermark), lowOut = low((t) => t.currentOutputWatermark);
    const head = document.createElement("tr");
    head.className = "operator";
    head.dataset.vertex = v.id;
    cellRow(head, [v.name, "all", watermark(lowIn), lag(now, lowIn), watermark(lowOut), lag(now, lowOut)],
      ["operator", "subtask", "inputWatermark", "inputLag", "outputWatermark", "outputLag"]);
    head.cells[0].title = v.name;
    body.append(head);
    for (const t of subs) {
      const tr = document.createElement("tr");
      tr.dataset.vertex = v.id;
      cellRow(tr, ["", t.subtask, watermark(t.currentInputWatermark), lag(now, t.currentInputWatermark),
        watermark(t.currentOutputWatermark), lag(now, t.currentOutputWatermark)],
      ["operator", "subtask", "inputWatermark", "inputLag", "outputWatermark", "outputLag"]);
      body.append(tr);
    }
  }
}

// --- charts ---

const hist = { since: 0, step: 1000, window: 600000, times: [], vertices: new Map(), checkpoints: new Map(), fetched: 0 };

async function pollHistory(job) {
  $("charts-off").hidden = !!job.charts;
  $("charts").hidden = !job.charts;
  if (!job.charts) return;
  const now = Date.now();
  if (now - hist.fetched < Math.max(refresh, hist.step) && !ended) return;
  hist.fetched = now;
  let h;
  try {
    h = await api("/api/v1/history?since=" + hist.since);
  } catch (e) {
    return; // the next poll retries
  }
  hist.step = h.step;
  hist.window = h.window;
  const n = h.times.length;
  for (const v of h.vertices) {
    let s = hist.vertices.get(v.id);
    if (!s) {
      s = { name: v.name, in: [], out: [], bp: [], busy: [] };
      // Vertices new to this answer have no values before it.
      const pad = hist.times.length;
      for (const k of ["in", "out", "bp", "busy"]) s[k] = new Array(pad).fill(0);
      hist.vertices.set(v.id, s);
    }
    s.in.push(...v.numRecordsInPerSecond);
    s.out.push(...v.numRecordsOutPerSecond);
    s.bp.push(...v.backPressuredTimeMsPerSecond);
    s.busy.push(...v.busyTimeMsPerSecond);
  }
  hist.times.push(...h.times);
  for (const c of h.checkpoints) hist.checkpoints.set(c.id, c);
  if (n > 0) hist.since = h.times[n - 1];
  // Keep the window.
  const newest = hist.times.length ? hist.times[hist.times.length - 1] : 0;
  let drop = 0;
  while (drop < hist.times.length && hist.times[drop] < newest - hist.window) drop++;
  if (drop > 0) {
    hist.times.splice(0, drop);
    for (const s of hist.vertices.values()) for (const k of ["in", "out", "bp", "busy"]) s[k].splice(0, drop);
  }
  for (const [id, c] of hist.checkpoints) if (c.time < newest - hist.window) hist.checkpoints.delete(id);
  drawCharts(newest);
}

function drawCharts(newest) {
  const ids = [...hist.vertices.keys()];
  const colourOf = (id) => PALETTE[ids.indexOf(id) % PALETTE.length];
  const legend = $("charts-legend");
  legend.replaceChildren();
  for (const id of ids) {
    const s = document.createElement("span");
    s.className = "series-key";
    const sw = document.createElement("span");
    sw.className = "swatch";
    sw.style.background = colourOf(id);
    s.append(sw, document.createTextNode(hist.vertices.get(id).name));
    s.title = hist.vertices.get(id).name;
    legend.append(s);
  }
  const series = (key) => ids.map((id) => ({ id, colour: colourOf(id), values: hist.vertices.get(id)[key] }));
  lineChart($("chart-in"), hist.times, series("in"), newest, rate);
  lineChart($("chart-out"), hist.times, series("out"), newest, rate);
  lineChart($("chart-bp"), hist.times, series("bp"), newest, (x) => Math.round(x) + "");
  lineChart($("chart-busy"), hist.times, series("busy"), newest, (x) => Math.round(x) + "");
  const cks = [...hist.checkpoints.values()].filter((c) => c.kind === "checkpoint").sort((a, b) => a.time - b.time);
  const ckTimes = cks.map((c) => c.time);
  lineChart($("chart-ck-duration"), ckTimes, [{ id: "duration", colour: PALETTE[0], values: cks.map((c) => c.duration) }], newest, ms, true);
  lineChart($("chart-ck-size"), ckTimes, [{ id: "size", colour: PALETTE[2], values: cks.map((c) => c.size) }], newest, bytes, true);
}

const CW = 440, CH = 150, CL = 64, CB = 20, CT = 8, CR = 10;

// niceMax rounds x up to 1, 2 or 5 times a power of ten.
function niceMax(x) {
  if (!(x > 0)) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(x)));
  for (const m of [1, 2, 5, 10]) if (m * p >= x) return m * p;
  return 10 * p;
}

// lineChart draws series over times (unix ms) in the window before newest.
function lineChart(svg, times, series, newest, format, dots) {
  svg.setAttribute("viewBox", `0 0 ${CW} ${CH}`);
  svg.setAttribute("width", CW);
  svg.setAttribute("height", CH);
  svg.replaceChildren();
  const x0 = newest - hist.window;
  const top = niceMax(Math.max(0, ...series.flatMap((s) => s.values)));
  const X = (t) => CL + ((t - x0) / hist.window) * (CW - CL - CR);
  const Y = (v) => CT + (1 - v / top) * (CH - CT - CB);
  for (const f of [0, 0.5, 1]) {
    const y = Y(top * f);
    svg.append(el("line", { class: "grid", x1: CL, x2: CW - CR, y1: y, y2: y }));
    svg.append(el("text", { class: "axis", x: CL - 6, y: y + 4, "text-anchor": "end" }, format(top * f)));
  }
  for (const [f, label] of [[0, "−10 min"], [0.5, "−5 min"], [1, "now"]]) {
    svg.append(el("text", { class: "axis", x: CL + f * (CW - CL - CR), y: CH - 5, "text-anchor": f === 0 ? "start" : f === 1 ? "end" : "middle" }, label));
  }
  svg.dataset.points = String(times.length);
  if (times.length === 0) {
    svg.append(el("text", { class: "axis empty", x: (CL + CW) / 2, y: CH / 2, "text-anchor": "middle" }, "no data yet"));
    return;
  }
  for (const s of series) {
    const pts = times.map((t, i) => `${X(t).toFixed(1)},${Y(s.values[i] || 0).toFixed(1)}`).join(" ");
    svg.append(el("polyline", { class: "series", points: pts, stroke: s.colour, "data-series": s.id }));
    if (dots) {
      times.forEach((t, i) => {
        const c = el("circle", { class: "dot", cx: X(t), cy: Y(s.values[i]), r: 2.5, fill: s.colour });
        c.append(el("title", {}, `${new Date(t).toLocaleTimeString()}: ${format(s.values[i])}`));
        svg.append(c);
      });
    }
  }
}

// --- checkpoints ---

let ckSelected = 0, ckDetailsStatus = "";

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
    tr.className = "checkpoint status-" + h.status.replace(" ", "-") + (h.id === ckSelected ? " selected" : "");
    tr.dataset.id = h.id;
    tr.tabIndex = 0;
    cellRow(tr, [h.id, h.kind, h.status, `${h.acknowledged}/${h.total}`, new Date(h.triggerTime).toLocaleTimeString(),
      ms(h.duration), bytes(h.size), ms(h.alignmentTime)]);
    if (h.failure) tr.title = h.failure;
    if (lastJob && lastJob.jid) {
      tr.addEventListener("click", () => openCheckpoint(h.id));
      tr.addEventListener("keydown", (e) => { if (e.key === "Enter") openCheckpoint(h.id); });
    }
    body.append(tr);
  }
}

function openCheckpoint(id) {
  ckSelected = id;
  ckDetailsStatus = "";
  if (lastJob) renderCheckpoints(lastJob.checkpoints);
  pollDetails(true);
}

// pollDetails reads the selected checkpoint's details: when it is opened,
// and while it is in progress.
async function pollDetails(force) {
  if (!ckSelected || !lastJob || !lastJob.jid) return;
  if (!force && ckDetailsStatus !== "IN_PROGRESS") return;
  const id = ckSelected;
  let d;
  try {
    d = await api(`/jobs/${lastJob.jid}/checkpoints/details/${id}`);
  } catch (e) {
    $("ck-details").hidden = false;
    $("ck-details-title").textContent = `Checkpoint ${id}: ${e.message}`;
    $("ck-details-tasks").replaceChildren();
    ckDetailsStatus = "";
    return;
  }
  if (id !== ckSelected) return;
  ckDetailsStatus = d.status;
  renderDetails(d);
}

function renderDetails(d) {
  const box = $("ck-details");
  box.hidden = false;
  box.dataset.id = d.id;
  box.dataset.status = d.status;
  const kind = d.checkpoint_type.toLowerCase().replace(/_/g, " ");
  $("ck-details-title").textContent = `Checkpoint ${d.id} (${kind}): ${d.status.toLowerCase().replace("_", " ")}, ` +
    `${d.num_acknowledged_subtasks}/${d.num_subtasks} acknowledged, ${ms(d.end_to_end_duration)}, ${bytes(d.state_size)}` +
    (d.failure_message ? ` — ${d.failure_message}` : "");
  const names = new Map((lastJob.vertices || []).map((v) => [v.id, v.name]));
  const order = (lastJob.vertices || []).map((v) => v.id).filter((id) => d.tasks[id]);
  const out = [];
  for (const vid of order) {
    const t = d.tasks[vid];
    const h = document.createElement("h4");
    h.textContent = `${names.get(vid) || vid}: ${t.num_acknowledged_subtasks}/${t.num_subtasks} acknowledged`;
    h.title = names.get(vid) || vid;
    const wrapDiv = document.createElement("div");
    wrapDiv.className = "scroll";
    const table = document.createElement("table");
    table.className = "ck-subtasks sticky";
    table.dataset.vertex = vid;
    table.innerHTML = "<thead><tr><th>#</th><th>Status</th><th>Acknowledged</th><th>End to end</th><th>Sync</th><th>Async</th>" +
      "<th>Alignment</th><th>Start delay</th><th>State size</th><th>Processed in alignment</th><th>Persisted (unaligned)</th><th>Unaligned</th></tr></thead><tbody></tbody>";
    const subs = t.subtasks || [];
    let slowest = -1, worst = -1;
    subs.forEach((s, i) => { if (s.status === "completed" && s.end_to_end_duration > worst) { worst = s.end_to_end_duration; slowest = i; } });
    subs.forEach((s, i) => {
      const tr = document.createElement("tr");
      tr.className = "ck-subtask" + (i === slowest && subs.length > 1 ? " slowest" : "");
      if (i === slowest && subs.length > 1) tr.title = "the slowest subtask of this operator";
      if (s.status !== "completed") {
        cellRow(tr, [s.index, "pending or failed", "–", "–", "–", "–", "–", "–", "–", "–", "–", "–"]);
      } else {
        cellRow(tr, [s.index, "completed", new Date(s.ack_timestamp).toLocaleTimeString(), ms(s.end_to_end_duration),
          ms(s.checkpoint.sync), ms(s.checkpoint.async), ms(s.alignment.duration), ms(s.start_delay), bytes(s.state_size),
          bytes(s.alignment.processed), bytes(s.alignment.persisted), s.unaligned_checkpoint ? "yes" : "no"],
        ["subtask", "status", "ack_timestamp", "end_to_end_duration", "sync", "async", "alignment", "start_delay", "state_size",
          "processed", "persisted", "unaligned"]);
      }
      table.tBodies[0].append(tr);
    });
    wrapDiv.append(table);
    out.push(h, wrapDiv);
  }
  $("ck-details-tasks").replaceChildren(...out);
}

// --- restarts and exceptions ---

let exceptionsKey = null;

function renderExceptions(job) {
  $("restarts").textContent = job.numRestarts;
  const e = job.latestException;
  $("no-exception").hidden = !!e;
  $("exception").hidden = !e || !!job.jid; // the history shows it, with its stack
  if (e) {
    $("exception-time").textContent = new Date(e.time).toLocaleString();
    $("exception-message").textContent = e.message;
  }
}

// pollExceptions reads the exception history when a failure is new.
async function pollExceptions(job) {
  if (!job.jid) return;
  const key = `${job.numRestarts}/${job.latestException ? job.latestException.time : ""}/${job.state}`;
  if (key === exceptionsKey) return;
  let x;
  try {
    x = await api(`/jobs/${job.jid}/exceptions`);
  } catch (e) {
    return;
  }
  exceptionsKey = key;
  const list = $("exception-history");
  const items = [];
  for (const f of x.exceptionHistory.entries) {
    const d = document.createElement("details");
    d.className = "exception-entry";
    const s = document.createElement("summary");
    const where = f.taskName ? ` in ${f.taskName}${f.operator ? " (" + f.operator + ")" : ""}` : "";
    s.textContent = `${new Date(f.timestamp).toLocaleString()}${where}: ${f.chain && f.chain.length ? f.chain[0] : f.exceptionName}` +
      (f.restarting ? " — restarted" : " — ended the job");
    s.title = f.exceptionName;
    const pre = document.createElement("pre");
    pre.className = "stack";
    pre.textContent = f.stacktrace;
    d.append(s, pre);
    items.push(d);
  }
  if (items.length > 0) items[0].open = true;
  list.replaceChildren(...items);
}

// --- workers ---

let workersFetched = 0;

async function pollWorkers(job) {
  if (!job.jid || (Date.now() - workersFetched < Math.max(refresh, 1000) && !ended)) return;
  workersFetched = Date.now();
  let x;
  try {
    x = await api("/taskmanagers");
  } catch (e) {
    return;
  }
  const ws = x.taskmanagers || [];
  $("workers-section").hidden = ws.length === 0;
  profileWorkers(ws);
  const body = $("workers").tBodies[0];
  body.replaceChildren();
  for (const w of ws) {
    const tr = document.createElement("tr");
    tr.dataset.worker = w.id;
    const r = w.runtime || {};
    cellRow(tr, [w.id, w.path || "–", w.tasks, bytes(r.heapBytes || 0), r.goroutines || 0, r.numGC || 0,
      ms((r.gcPauseTotalNanos || 0) / 1e6), ms((r.maxRecentGCPauseNanos || 0) / 1e6),
      w.timeSinceLastHeartbeat >= 0 ? new Date(w.timeSinceLastHeartbeat).toLocaleTimeString() : "–"],
    ["id", "path", "tasks", "heapBytes", "goroutines", "numGC", "gcPauseTotal", "maxRecentGCPause", "reported"]);
    body.append(tr);
  }
}

// --- actions ---

const ACTIONS = {
  checkpoint: { text: "Trigger a checkpoint now?", dir: false },
  savepoint: { text: "Trigger a savepoint? The job goes on running.", dir: true },
  stop: { text: "Stop the job with a savepoint? It ends once the savepoint completed.", dir: true },
  cancel: { text: "Cancel the job? It ends without a savepoint.", dir: false },
};

function renderActions(job) {
  const nav = $("actions");
  nav.hidden = !job.jid;
  const running = job.state === "running";
  const ck = !!job.checkpoints;
  $("action-checkpoint").disabled = !running || !ck;
  $("action-savepoint").disabled = !running || !ck;
  $("action-stop").disabled = !running || !ck;
  $("action-cancel").disabled = ended;
}

function actionStatus(state, text) {
  const s = $("action-status");
  s.dataset.state = state;
  s.textContent = text;
}

// confirmAction asks before it acts; savepoints take a directory.
function confirmAction(name) {
  const a = ACTIONS[name];
  const dlg = $("confirm");
  $("confirm-text").textContent = a.text;
  $("confirm-dir-label").hidden = !a.dir;
  dlg.dataset.action = name;
  dlg.returnValue = "";
  dlg.onclose = () => { if (dlg.returnValue === "ok") act(name, $("confirm-dir").value.trim()); };
  dlg.showModal();
}

async function act(name, dir) {
  const jid = lastJob && lastJob.jid;
  if (!jid) return;
  const post = (path, body) => api(`/jobs/${jid}${path}`, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
  actionStatus("in-progress", name + ": asked…");
  try {
    let poll;
    switch (name) {
      case "checkpoint": {
        const r = await post("/checkpoints", {});
        poll = `/checkpoints/${r["request-id"]}`;
        break;
      }
      case "savepoint": {
        const r = await post("/savepoints", { "target-directory": dir || null, "cancel-job": false });
        poll = `/savepoints/${r["request-id"]}`;
        break;
      }
      case "stop": {
        const r = await post("/stop", { targetDirectory: dir || null });
        poll = `/savepoints/${r["request-id"]}`;
        break;
      }
      case "cancel":
        await api(`/jobs/${jid}?mode=cancel`, { method: "PATCH" });
        actionStatus("completed", "cancel: the job is canceling");
        poll_soon();
        return;
    }
    actionStatus("in-progress", name + ": in progress…");
    for (;;) {
      const s = await api(`/jobs/${jid}${poll}`);
      if (s.status.id === "COMPLETED") {
        const op = s.operation || {};
        const cause = op["failure-cause"] || op.failureCause;
        if (cause) {
          actionStatus("failed", `${name} failed: ${cause["stack-trace"]}`);
        } else if (name === "checkpoint") {
          actionStatus("completed", `checkpoint ${op.checkpointId} completed`);
        } else {
          actionStatus("completed", `${name === "stop" ? "stopped with savepoint" : "savepoint"} ${op.location}`);
        }
        break;
      }
      await new Promise((r) => setTimeout(r, 200));
    }
  } catch (e) {
    actionStatus("failed", `${name}: ${e.message}`);
  }
  poll_soon();
}

function poll_soon() {
  if (!ended) { clearTimeout(timer); timer = setTimeout(poll, 50); }
}

// --- profile: a flame graph of a CPU profile ---

let flame = null, flameRoot = null;

// profileWorkers offers a cluster job's workers in the profile form
// besides the job's process (the coordinator's); a job in one process
// lists only itself ("local"), which is the job's process.
function profileWorkers(ws) {
  const sel = $("profile-worker");
  const ids = ws.map((w) => w.id).filter((id) => id !== "local");
  const have = Array.from(sel.options).slice(1).map((o) => o.value);
  if (ids.join("\n") === have.join("\n")) return;
  const keep = sel.value;
  sel.replaceChildren(sel.options[0]);
  sel.options[0].textContent = ids.length ? "the coordinator's process" : "the job's process";
  for (const id of ids) sel.append(new Option("worker " + id, id));
  sel.value = ids.includes(keep) ? keep : "";
}

async function takeProfile() {
  const secs = Number($("profile-seconds").value) || 5;
  const worker = $("profile-worker").value;
  $("profile-start").disabled = true;
  const st = $("profile-status");
  st.dataset.state = "in-progress";
  st.textContent = `profiling ${worker ? "worker " + worker : "the process"} for ${secs} s…`;
  try {
    flame = await api((worker ? "/taskmanagers/" + encodeURIComponent(worker) + "/flamegraph" : "/api/v1/flamegraph") +
      "?seconds=" + secs);
    flameRoot = null;
    st.dataset.state = "completed";
    st.textContent = `${worker ? "worker " + worker + ": " : ""}${flame.samples} samples, ${ms(flame.root.value / 1e6)} of CPU in ${secs} s`;
    drawFlame();
  } catch (e) {
    st.dataset.state = "failed";
    st.textContent = "profile: " + e.message;
  }
  $("profile-start").disabled = false;
}

const FRAME_H = 18, FLAME_W = 1200;

function drawFlame() {
  const box = $("flame");
  if (!flame) { box.replaceChildren(); return; }
  const root = flameRoot || flame.root;
  $("profile-reset").hidden = !flameRoot;
  let depth = 0;
  const walk = (n, d) => { depth = Math.max(depth, d); for (const c of n.children || []) walk(c, d + 1); };
  walk(root, 1);
  const svg = el("svg", { id: "flame-svg", width: FLAME_W, height: depth * FRAME_H + 2, viewBox: `0 0 ${FLAME_W} ${depth * FRAME_H + 2}` });
  const total = root.value || 1;
  const draw = (n, x, d) => {
    const w = (n.value / total) * FLAME_W;
    if (w < 0.5) return;
    const g = el("g", { class: "frame", "data-name": n.name, transform: `translate(${x.toFixed(2)},${d * FRAME_H})` });
    g.append(el("title", {}, `${n.name}\n${ms(n.value / 1e6)} (${((n.value / flame.root.value) * 100).toFixed(1)} %)`));
    g.append(el("rect", { width: Math.max(0, w - 0.5).toFixed(2), height: FRAME_H - 1, rx: 2, fill: frameColour(n.name) }));
    if (w > 40) g.append(el("text", { x: 4, y: 13 }, fit(shortName(n.name), w - 8, "11px")));
    g.addEventListener("click", (e) => { e.stopPropagation(); flameRoot = n; drawFlame(); });
    svg.append(g);
    let cx = x;
    for (const c of n.children || []) {
      draw(c, cx, d + 1);
      cx += (c.value / total) * FLAME_W;
    }
  };
  draw(root, 0, 0);
  box.replaceChildren(svg);
}

function shortName(s) {
  const i = s.lastIndexOf("/");
  return i >= 0 ? s.slice(i + 1) : s;
}

function frameColour(name) {
  let h = 0;
  for (let i = 0; i < name.length; i++) h = (h * 31 + name.charCodeAt(i)) >>> 0;
  if (name === "root") return "hsl(210, 20%, 80%)";
  return `hsl(${10 + (h % 45)}, ${70 + (h % 20)}%, ${58 + (h % 15)}%)`;
}

// --- formatting ---

function pct(msPerSecond) { return (msPerSecond / 10).toFixed(0) + "%"; }
function ms(x) { return x >= 1000 ? (x / 1000).toFixed(1) + " s" : Math.round(x) + " ms"; }
function count(x) { return Math.round(x).toLocaleString("en-US"); }
function rate(x) {
  if (x >= 1e6) return (x / 1e6).toFixed(1) + "M";
  if (x >= 1e4) return (x / 1e3).toFixed(1) + "k";
  return x.toFixed(0);
}
function bytes(x) {
  if (x >= 1 << 30) return (x / (1 << 30)).toFixed(1) + " GiB";
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
  if (x >= MAX_WATERMARK) return "end";
  return new Date(x).toISOString().replace("T", " ").replace("Z", "");
}

document.addEventListener("DOMContentLoaded", init);
