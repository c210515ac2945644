// sluice serve's overview page: reads /api/overview every second and fills the tables.
// Request rates are the difference between two readings over the time between them.
"use strict";
let previous = null;
let updates = 0;

function cell(text, numeric) {
  const td = document.createElement("td");
  td.textContent = text;
  if (numeric) td.className = "n";
  return td;
}

function fill(id, rows, columns, empty) {
  const body = document.querySelector("#" + id + " tbody");
  body.replaceChildren();
  if (rows.length === 0) {
    const tr = document.createElement("tr");
    const td = cell(empty, false);
    td.colSpan = columns;
    td.className = "empty";
    tr.appendChild(td);
    body.appendChild(tr);
    return;
  }
  for (const row of rows) {
    const tr = document.createElement("tr");
    for (const [text, numeric] of row) tr.appendChild(cell(text, numeric));
    body.appendChild(tr);
  }
}

function show(o) {
  const num = (v) => (v === null || v === undefined ? "-" : String(v));
  fill("partitions", o.partitions.map((p) => [[p.topic], [num(p.partition), 1], [num(p.start_offset), 1], [num(p.end_offset), 1]]), 4, "no topics");
  fill("groups", o.groups.map((g) => [[g.group], [g.topic], [num(g.partition), 1], [num(g.committed_offset), 1], [num(g.lag), 1]]), 5, "no committed offsets");
  const secs = previous ? (o.unix_ms - previous.unix_ms) / 1000 : 0;
  const apis = Object.keys(o.requests).sort();
  fill("requests", apis.map((api) => {
    const before = previous && previous.requests[api] !== undefined ? previous.requests[api] : null;
    const rate = before !== null && secs > 0 ? ((o.requests[api] - before) / secs).toFixed(1) : "-";
    return [[api], [num(o.requests[api]), 1], [rate, 1]];
  }), 3, "no Kafka requests yet");
  document.getElementById("summary").textContent =
    o.partitions.length + " partitions, " + o.connections_open + " Kafka connections open, " +
    o.bytes_in + " bytes in, " + o.bytes_out + " bytes out";
  previous = o;
  updates += 1;
  document.body.dataset.updates = String(updates);
  document.getElementById("status").textContent = "updated " + new Date(o.unix_ms).toLocaleTimeString() + " (" + updates + " readings)";
}

async function refresh() {
  try {
    const r = await fetch("/api/overview", { cache: "no-store" });
    if (!r.ok) {
      document.getElementById("status").textContent = "no overview now: " + (await r.text());
    } else {
      show(await r.json());
    }
  } catch (e) {
    document.getElementById("status").textContent = "server unreachable: " + e.message;
  }
  setTimeout(refresh, 1000);
}

refresh();
