// sluice-bench's live page: reads the run's server-sent events (/events) and draws them
// as plain SVG. "second" events carry one second's figures, "final" the run's JSON report,
// "failed" the error a run ended with.
"use strict";
const SVG = "http://www.w3.org/2000/svg";
const COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"];
const seconds = [];
let finished = false;

function $(id) { return document.getElementById(id); }
function fmt(v) {
  if (v === null || v === undefined) return "-";
  if (typeof v !== "number") return String(v);
  return Number.isInteger(v) ? String(v) : v.toFixed(v >= 100 ? 1 : 3);
}
function el(parent, name, attrs, text) {
  const e = document.createElementNS(SVG, name);
  for (const k in attrs) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  parent.appendChild(e);
  return e;
}

// Draws `series` ({name, points: [[x, y]]}) on `svg` with linear axes; `xTick(x)` labels x.
function chart(svg, series, xTicks, xTick, xName) {
  svg.replaceChildren();
  const W = 600, H = 260, L = 64, R = 30, T = 12, B = 34;
  const all = series.flatMap((s) => s.points);
  if (all.length === 0) {
    el(svg, "text", { x: W / 2 - 40, y: H / 2 }, "no data yet");
    return;
  }
  const xMax = Math.max(1e-9, ...all.map((p) => p[0]), ...xTicks);
  const xMin = Math.min(0, ...all.map((p) => p[0]));
  const yMax = Math.max(1, ...all.map((p) => p[1])) * 1.05;
  const sx = (x) => L + ((x - xMin) / (xMax - xMin)) * (W - L - R);
  const sy = (y) => H - B - (y / yMax) * (H - T - B);
  for (let i = 0; i <= 4; i++) {
    const y = (yMax * i) / 4;
    el(svg, "line", { class: "grid", x1: L, x2: W - R, y1: sy(y), y2: sy(y) });
    el(svg, "text", { x: 4, y: sy(y) + 4 }, fmt(Math.round(y)));
  }
  for (const x of xTicks) {
    el(svg, "line", { class: "grid", x1: sx(x), x2: sx(x), y1: T, y2: H - B });
    el(svg, "text", { x: sx(x), y: H - B + 14, "text-anchor": "middle" }, xTick(x));
  }
  el(svg, "text", { x: W / 2 - 20, y: H - 4 }, xName);
  el(svg, "line", { class: "axis", x1: L, x2: W - R, y1: H - B, y2: H - B });
  el(svg, "line", { class: "axis", x1: L, x2: L, y1: T, y2: H - B });
  series.forEach((s, i) => {
    const color = COLORS[i % COLORS.length];
    const d = s.points.map((p) => sx(p[0]).toFixed(1) + "," + sy(p[1]).toFixed(1)).join(" ");
    el(svg, "polyline", { class: "line", stroke: color, points: d, "data-series": s.name });
    el(svg, "text", { x: L + 10 + i * 90, y: T + 12, fill: color, style: "fill:" + color }, s.name);
  });
}

function timeTicks(last) {
  const step = Math.max(1, Math.ceil(last / 8));
  const ticks = [];
  for (let t = 0; t <= last + 1e-9; t += step) ticks.push(t);
  return ticks;
}

function drawSeconds() {
  const last = seconds.length ? seconds[seconds.length - 1].t : 1;
  const ticks = timeTicks(last);
  const unit = seconds.length ? seconds[seconds.length - 1].unit : "records";
  chart($("chart-throughput"), [
    { name: unit + "/s", points: seconds.map((s) => [s.t, s.throughput]) },
    { name: "achieved", points: seconds.map((s) => [s.t, s.achieved]) },
  ], ticks, (t) => t + "s", "seconds");
  const withLatency = seconds.filter((s) => s.latency);
  chart($("chart-latency"), ["p50", "p99", "p999", "max"].map((k) => ({
    name: k === "p999" ? "p99.9" : k,
    points: withLatency.map((s) => [s.t, s.latency[k]]),
  })), ticks, (t) => t + "s", "seconds");
}

function onSecond(s) {
  seconds.push(s);
  $("unit-throughput").textContent = s.unit + " /s";
  $("fig-throughput").textContent = fmt(s.throughput);
  $("fig-achieved").textContent = fmt(s.achieved);
  $("fig-offered").textContent = s.offered === null ? "max (closed loop)" : fmt(s.offered);
  for (const k of ["p50", "p99", "p999", "max"]) $("fig-" + k).textContent = s.latency ? fmt(s.latency[k]) : "-";
  drawSeconds();
  document.body.dataset.updates = String(seconds.length);
  if (!finished) $("status").textContent = "running: " + fmt(s.t) + " s, " + fmt(s.total) + " " + s.unit;
}

// Every object of `value` for which `test` holds, with its path, in document order.
function find(value, test, path, out) {
  if (value && typeof value === "object") {
    if (!Array.isArray(value) && test(value)) out.push([path, value]);
    for (const k of Object.keys(value)) find(value[k], test, path ? path + "." + k : k, out);
  }
  return out;
}

function scalars(value, path, out) {
  if (value !== null && typeof value === "object") {
    const isCurve = !Array.isArray(value) && Array.isArray(value.points);
    if (!isCurve) for (const k of Object.keys(value)) scalars(value[k], path ? path + "." + k : k, out);
  } else if (value !== null) {
    out.push([path, value]);
  }
  return out;
}

function onFinal(f) {
  finished = true;
  const report = f.report;
  const isSummary = (o) => ["p50", "p99", "p999", "max", "count"].every((k) => typeof o[k] === "number");
  const summaries = find(report, isSummary, "", []);
  // The run's own latency, not the machine's wake-up floor beside it.
  const main = summaries.find(([p]) => !p.includes("machine_wake")) || summaries[0];
  if (main) {
    for (const k of ["p50", "p99", "p999", "max", "count"]) $("final-" + k).textContent = fmt(main[1][k]);
    $("final-latency-key").textContent = "latency: report field " + main[0];
  } else {
    $("final-latency-key").textContent = "this run's report has no latency summary";
  }
  const curves = find(report, (o) => typeof o.label === "string" && Array.isArray(o.points), "", []);
  const decades = Math.max(1, ...curves.flatMap(([, c]) => c.points.map((p) => Math.ceil(axis(p[0])))));
  const ticks = [];
  for (let d = 0; d <= decades; d++) ticks.push(d);
  chart($("chart-curve"), curves.map(([, c]) => ({ name: c.label, points: c.points.map((p) => [axis(p[0]), p[1]]) })),
    ticks, (x) => percentile(x), "percentile");
  const body = document.querySelector("#final-table tbody");
  body.replaceChildren();
  for (const [k, v] of scalars(report, "", [])) {
    const tr = document.createElement("tr");
    const key = document.createElement("td");
    key.textContent = k;
    const val = document.createElement("td");
    val.className = "n";
    val.dataset.key = k;
    val.textContent = fmt(v);
    tr.append(key, val);
    body.appendChild(tr);
  }
  $("final").style.display = "block";
  $("status").textContent = "finished after " + fmt(f.t) + " s";
  document.body.dataset.final = "1";
}

// The log-scaled percentile axis of the harness's SVG: 90% is 1, 99% is 2, 99.9% is 3.
function axis(p) { return -Math.log10(Math.max(1e-9, 1 - p / 100)); }
function percentile(x) {
  const p = 100 * (1 - Math.pow(10, -x));
  return String(Number(p.toFixed(6))) + "%";
}

function connect() {
  const events = new EventSource("/events");
  events.addEventListener("hello", (e) => {
    const h = JSON.parse(e.data);
    // A reconnection replays the run from its start.
    seconds.length = 0;
    $("title").textContent = "sluice-bench " + h.workload;
    document.title = "sluice-bench " + h.workload + " (live)";
    $("status").textContent = "running";
  });
  events.addEventListener("second", (e) => onSecond(JSON.parse(e.data)));
  events.addEventListener("final", (e) => {
    onFinal(JSON.parse(e.data));
    // Nothing follows the report: no reconnection once the process exits.
    events.close();
  });
  events.addEventListener("failed", (e) => {
    finished = true;
    $("status").textContent = "the run failed: " + JSON.parse(e.data).error;
    $("status").className = "failed";
    document.body.dataset.final = "failed";
    events.close();
  });
  events.onerror = () => {
    if (!finished) $("status").textContent = "connection lost; retrying ...";
  };
}

drawSeconds();
connect();
