// The live web view: polls /ui/api/state every second, draws the topology
// once (a layered SVG layout per sub-topology), and updates per-node
// records/s from the difference between two readings of the node totals.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const NODE_W = 190, NODE_H = 44, GAP_X = 40, GAP_Y = 26, PAD = 16, STORE_W = 150;
let previous = null;
let drawnFor = null;

function el(name, attrs, parent) {
  const e = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (parent) parent.appendChild(e);
  return e;
}

function text(parent, x, y, content, cls) {
  const t = el("text", { x, y, class: cls || "" }, parent);
  t.textContent = content;
  return t;
}

// Depth of each node: the longest path from a node without parents.
function layers(nodes) {
  const byName = new Map(nodes.map((n) => [n.name, n]));
  const depth = new Map();
  const visit = (n, d) => {
    if ((depth.get(n.name) ?? -1) >= d) return;
    depth.set(n.name, d);
    for (const c of n.children) if (byName.has(c)) visit(byName.get(c), d + 1);
  };
  const hasParent = new Set(nodes.flatMap((n) => n.children));
  for (const n of nodes) if (!hasParent.has(n.name)) visit(n, 0);
  for (const n of nodes) if (!depth.has(n.name)) visit(n, 0);
  return depth;
}

function drawGraph(topology) {
  const svg = document.getElementById("graph");
  svg.replaceChildren();
  const defs = el("defs", {}, svg);
  const marker = el("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5,
    markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" }, defs);
  el("path", { d: "M 0 0 L 10 5 L 0 10 z", fill: "#8892a6" }, marker);
  const at = new Map();
  let top = PAD, width = 0;
  for (const sub of topology) {
    text(svg, PAD, top + 12, `Sub-topology ${sub.id}`, "sub-label");
    top += 22;
    const depth = layers(sub.nodes);
    const rows = new Map();
    for (const n of sub.nodes) {
      const d = depth.get(n.name);
      if (!rows.has(d)) rows.set(d, []);
      rows.get(d).push(n);
    }
    let bottom = top;
    for (const [d, row] of [...rows.entries()].sort((a, b) => a[0] - b[0])) {
      row.forEach((n, i) => {
        const x = PAD + i * (NODE_W + STORE_W + GAP_X);
        const y = top + d * (NODE_H + GAP_Y);
        at.set(n.name, { x, y });
        const g = el("g", { class: `node ${n.kind}`, "data-node": n.name }, svg);
        el("rect", { x, y, width: NODE_W, height: NODE_H }, g);
        const label = n.name.length > 26 ? n.name.slice(0, 25) + "…" : n.name;
        text(g, x + 8, y + 16, label).appendChild(el("title", {})).textContent = n.name;
        const detail = n.topics.length ? n.topics.join(", ") : n.kind;
        text(g, x + 8, y + 34, "", "rate").setAttribute("data-rate", n.name);
        text(g, x + 96, y + 34, detail.length > 16 ? detail.slice(0, 15) + "…" : detail);
        n.stores.forEach((s, j) => {
          const sx = x + NODE_W + 20, sy = y + 4 + j * 20;
          const sg = el("g", { class: "store", "data-store": s }, svg);
          el("line", { x1: x + NODE_W, y1: y + NODE_H / 2, x2: sx, y2: sy + 8, class: "store-edge" }, sg);
          el("ellipse", { cx: sx + STORE_W / 2 - 10, cy: sy + 8, rx: STORE_W / 2 - 10, ry: 9 }, sg);
          text(sg, sx + 4, sy + 12, s.length > 22 ? s.slice(0, 21) + "…" : s);
        });
        width = Math.max(width, x + NODE_W + STORE_W + PAD);
        bottom = Math.max(bottom, y + NODE_H);
      });
    }
    for (const n of sub.nodes) {
      const from = at.get(n.name);
      for (const c of n.children) {
        const to = at.get(c);
        if (!from || !to) continue;
        el("path", { class: "edge", d: `M ${from.x + NODE_W / 2} ${from.y + NODE_H} ` +
          `L ${to.x + NODE_W / 2} ${to.y}` }, svg);
      }
    }
    top = bottom + 2 * GAP_Y;
  }
  svg.setAttribute("viewBox", `0 0 ${Math.max(width, 400)} ${top}`);
  svg.style.height = `${top}px`;
}

function fill(id, rows) {
  const body = document.querySelector(`#${id} tbody`);
  body.replaceChildren();
  for (const cells of rows) {
    const tr = document.createElement("tr");
    for (const c of cells) {
      const td = document.createElement("td");
      td.textContent = c === null || c === undefined ? "–" : String(c);
      tr.appendChild(td);
    }
    body.appendChild(tr);
  }
}

function update(state) {
  document.getElementById("app-id").textContent = state.application_id;
  const badge = document.getElementById("state");
  badge.textContent = state.state;
  badge.className = `state ${state.state}`;
  document.getElementById("host").textContent = state.host ? `application.server ${state.host}` : "";
  const shape = JSON.stringify(state.topology);
  if (shape !== drawnFor) {
    drawGraph(state.topology);
    drawnFor = shape;
  }
  if (previous) {
    const seconds = Math.max((state.time_ms - previous.time_ms) / 1000, 0.001);
    for (const [name, total] of Object.entries(state.node_totals)) {
      const rate = Math.max(0, total - (previous.node_totals[name] || 0)) / seconds;
      const label = document.querySelector(`[data-rate="${CSS.escape(name)}"]`);
      if (label) {
        label.textContent = `${rate.toFixed(rate < 10 ? 1 : 0)} rec/s`;
        label.setAttribute("data-value", String(rate));
        label.setAttribute("data-total", String(total));
      }
    }
  }
  previous = state;
  fill("tasks", state.tasks.map((t) => [t.task_id, t.thread, t.partitions.join(", "), t.processed, t.lag]));
  fill("stores", state.stores.map((s) => [s.name, s.entries, s.partitions.join(", ")]));
  const select = document.getElementById("store-name");
  if (select.options.length !== state.stores.length) {
    select.replaceChildren(...state.stores.map((s) => new Option(s.name, s.name)));
  }
}

async function poll() {
  try {
    const response = await fetch("/ui/api/state");
    if (response.ok) update(await response.json());
  } catch (err) {
    document.getElementById("state").textContent = "unreachable";
  }
  setTimeout(poll, 1000);
}

document.getElementById("browse").addEventListener("submit", async (event) => {
  event.preventDefault();
  const store = encodeURIComponent(document.getElementById("store-name").value);
  const kind = document.getElementById("query-kind").value;
  const a = document.getElementById("query-a").value;
  const b = document.getElementById("query-b").value;
  let url = `/iq/stores/${store}/all`;
  if (kind === "key") url = `/iq/stores/${store}/keys/${encodeURIComponent(a)}`;
  if (kind === "prefix") url = `/iq/stores/${store}/prefix?prefix=${encodeURIComponent(a)}`;
  if (kind === "range") {
    const params = new URLSearchParams();
    if (a) params.set("from", a);
    if (b) params.set("to", b);
    url = `/iq/stores/${store}/range?${params}`;
  }
  const response = await fetch(url);
  document.getElementById("result").textContent =
    `${response.status} ${url}\n` + JSON.stringify(await response.json(), null, 2);
});

poll();
