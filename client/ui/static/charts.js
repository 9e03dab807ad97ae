// Hand-written SVG charts for the plan explorer: scatter/lines with axes, stacked bars, a horizontal stacked
// bar and a Gantt timeline. No library, no CDN: the page works offline from the wheel's own files.
"use strict";
const SVGNS = "http://www.w3.org/2000/svg";
const PALETTE = { compute: "#4e79a7", recompute: "#a0cbe8", tp: "#f28e2b", cp: "#ffbe7d", ep: "#59a14f", pp: "#8cd17d",
  dp: "#b6992d", zero: "#f1ce63", bubble: "#e15759", imbalance: "#ff9d9a", model_states_gib: "#4e79a7",
  activations_gib: "#f28e2b", logits_gib: "#e15759", workspace_gib: "#76b7b2", pipeline_buffers_gib: "#59a14f",
  runtime_buffers_gib: "#b07aa1", F: "#4e79a7", B: "#f28e2b", W: "#59a14f", FB: "#9c755f" };
const EXTRA_COLORS = ["#79706e", "#d37295", "#bab0ac", "#499894", "#86bcb6"];

function el(tag, attrs, parent, text) {
  const node = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  if (parent) parent.appendChild(node);
  return node;
}
function clear(svg) { while (svg.firstChild) svg.removeChild(svg.firstChild); }
function color(key, i) { return PALETTE[key] || EXTRA_COLORS[i % EXTRA_COLORS.length]; }
function niceTicks(lo, hi, n) {
  if (!(hi > lo)) { hi = lo + 1; }
  const step0 = (hi - lo) / n, mag = Math.pow(10, Math.floor(Math.log10(step0)));
  const step = [1, 2, 5, 10].map(s => s * mag).find(s => s >= step0);
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + 1e-9 * step; v += step) out.push(+v.toPrecision(12));
  return out;
}
// 1-2-5 ticks of each decade between lo and hi (a log axis)
function logTicks(lo, hi) {
  const out = [];
  for (let e = Math.floor(Math.log10(lo)); e <= Math.ceil(Math.log10(hi)); e++)
    for (const d of [1, 2, 5]) { const v = d * Math.pow(10, e); if (v >= lo && v <= hi) out.push(v); }
  return out.length >= 2 ? out : niceTicks(lo, hi, 4);
}
function fmt(v) { return Math.abs(v) >= 1e4 || (Math.abs(v) < 1e-2 && v !== 0) ? v.toExponential(1) : +v.toPrecision(4) + ""; }

// axes: returns {x(v), y(v)} mapping data to pixels inside the margins, and draws ticks and labels
function axes(svg, xr, yr, xlabel, ylabel, opts) {
  const W = +svg.getAttribute("width"), H = +svg.getAttribute("height"), m = { l: 68, r: 12, t: 10, b: 38 };
  const logx = opts && opts.logx;
  const tx = v => logx ? Math.log2(v) : v;
  const [x0, x1] = [tx(xr[0]), tx(xr[1])], pad = (x1 - x0) * 0.05 || 1, ypad = (yr[1] - yr[0]) * 0.06 || 1;
  const X = v => m.l + (tx(v) - x0 + pad) / (x1 - x0 + 2 * pad) * (W - m.l - m.r);
  const logy = opts && opts.logy && yr[0] > 0 && yr[1] / yr[0] > 10;  // log only where it spans a decade
  const ty = v => logy ? Math.log10(v) : v, lpad = logy ? (ty(yr[1]) - ty(yr[0])) * 0.06 || 0.1 : 0;
  const ylo = logy ? ty(yr[0]) - lpad : opts && opts.yzero ? 0 : yr[0] - ypad, yhi = logy ? ty(yr[1]) + lpad : yr[1] + ypad;
  const Y = v => H - m.b - (ty(v) - ylo) / (yhi - ylo) * (H - m.t - m.b);
  el("line", { x1: m.l, y1: H - m.b, x2: W - m.r, y2: H - m.b, stroke: "#888" }, svg);
  el("line", { x1: m.l, y1: m.t, x2: m.l, y2: H - m.b, stroke: "#888" }, svg);
  const xt = logx ? niceTicks(x0, x1, 6).filter(Number.isInteger).map(e => Math.pow(2, e)) : niceTicks(xr[0] - pad, xr[1] + pad, 6);
  for (const v of xt) { if (X(v) < m.l || X(v) > W - m.r) continue;
    el("line", { x1: X(v), y1: H - m.b, x2: X(v), y2: H - m.b + 4, stroke: "#888" }, svg);
    el("text", { x: X(v), y: H - m.b + 15, "text-anchor": "middle" }, svg, fmt(v)); }
  const yt = logy ? logTicks(Math.pow(10, ylo), Math.pow(10, yhi)) : niceTicks(ylo, yhi, 5);
  for (const v of yt) { if (Y(v) < m.t || Y(v) > H - m.b) continue;
    el("line", { x1: m.l - 4, y1: Y(v), x2: W - m.r, y2: Y(v), stroke: "#eee" }, svg);
    el("text", { x: m.l - 6, y: Y(v) + 4, "text-anchor": "end" }, svg, fmt(v)); }
  el("text", { x: (m.l + W - m.r) / 2, y: H - 4, "text-anchor": "middle" }, svg, xlabel);
  el("text", { x: 12, y: (m.t + H - m.b) / 2, transform: `rotate(-90 12 ${(m.t + H - m.b) / 2})`, "text-anchor": "middle" }, svg, ylabel);
  return { X, Y, m, W, H };
}

function extent(vals) { return [Math.min(...vals), Math.max(...vals)]; }

// scatter: points [{x, y, title, cls, fill, onclick, attrs}], optional step line through those with line: true
function scatter(svg, points, xlabel, ylabel, opts) {
  clear(svg);
  if (!points.length) { el("text", { x: 20, y: 30 }, svg, "nothing to draw"); return; }
  const { X, Y } = axes(svg, extent(points.map(p => p.x)), extent(points.map(p => p.y)), xlabel, ylabel, opts);
  const line = points.filter(p => p.line).sort((a, b) => a.x - b.x);
  if (line.length > 1) el("polyline", { points: line.map(p => `${X(p.x)},${Y(p.y)}`).join(" "), fill: "none", stroke: "#4e79a7", "stroke-opacity": .5 }, svg);
  for (const p of points) {
    const c = el("circle", { cx: X(p.x), cy: Y(p.y), r: p.r || 5, fill: p.fill || "#4e79a7", class: "pt " + (p.cls || ""), ...(p.attrs || {}) }, svg);
    if (p.title) el("title", {}, c, p.title);
    if (p.onclick) c.addEventListener("click", p.onclick);
  }
}

// lines: series [{name, points: [{x, y, mark}]}]
function lines(svg, series, xlabel, ylabel, opts) {
  clear(svg);
  const all = series.flatMap(s => s.points);
  if (!all.length) { el("text", { x: 20, y: 30 }, svg, "no curve: a curve needs two GPU counts that fit"); return; }
  const { X, Y, W, m } = axes(svg, extent(all.map(p => p.x)), extent(all.map(p => p.y)), xlabel, ylabel, opts);
  series.forEach((s, i) => {
    const c = EXTRA_COLORS.concat(["#4e79a7", "#f28e2b", "#59a14f", "#e15759"])[(i + 5) % 9];
    el("polyline", { points: s.points.map(p => `${X(p.x)},${Y(p.y)}`).join(" "), fill: "none", stroke: c, "stroke-width": 2, class: "curve" }, svg);
    for (const p of s.points) el("circle", { cx: X(p.x), cy: Y(p.y), r: p.mark ? 6 : 3, fill: p.mark ? "#fff" : c, stroke: c, "stroke-width": 2 }, svg);
    el("text", { x: W - m.r - 4, y: 18 + 14 * i, "text-anchor": "end", fill: c }, svg, s.name);
  });
}

// stacked bars: bars [{label, parts: {key: value}}], limit (a horizontal line), keys in stacking order
function stackedBars(svg, bars, keys, limit, limitLabel) {
  clear(svg);
  const W = +svg.getAttribute("width"), H = +svg.getAttribute("height"), m = { l: 58, r: 150, t: 10, b: 30 };
  const top = Math.max(limit || 0, ...bars.map(b => keys.reduce((s, k) => s + (b.parts[k] || 0), 0))) * 1.08;
  const Y = v => H - m.b - v / top * (H - m.t - m.b), bw = Math.min(48, (W - m.l - m.r) / bars.length * 0.7);
  for (const v of niceTicks(0, top, 5)) { el("line", { x1: m.l, y1: Y(v), x2: W - m.r, y2: Y(v), stroke: "#eee" }, svg);
    el("text", { x: m.l - 6, y: Y(v) + 4, "text-anchor": "end" }, svg, fmt(v)); }
  bars.forEach((b, i) => {
    const x = m.l + (i + 0.5) * (W - m.l - m.r) / bars.length - bw / 2;
    let acc = 0;
    keys.forEach((k, j) => { const v = b.parts[k] || 0; if (v <= 0) return;
      const r = el("rect", { x, y: Y(acc + v), width: bw, height: Y(acc) - Y(acc + v), fill: color(k, j), class: "seg", "data-key": k, "data-value": v }, svg);
      el("title", {}, r, `${b.label} ${k}: ${v.toFixed(2)}`); acc += v; });
    el("text", { x: x + bw / 2, y: H - m.b + 14, "text-anchor": "middle" }, svg, b.label);
    el("text", { x: x + bw / 2, y: Y(acc) - 3, "text-anchor": "middle", class: "bar-total", "data-value": acc }, svg, acc.toFixed(1));
  });
  if (limit) { el("line", { x1: m.l, y1: Y(limit), x2: W - m.r, y2: Y(limit), stroke: "#b42318", "stroke-dasharray": "6 3", id: "usable-line", "data-value": limit }, svg);
    el("text", { x: W - m.r - 2, y: Y(limit) - 4, "text-anchor": "end", fill: "#b42318" }, svg, limitLabel); }
  keys.forEach((k, j) => { el("rect", { x: W - m.r + 10, y: m.t + 16 * j, width: 10, height: 10, fill: color(k, j) }, svg);
    el("text", { x: W - m.r + 24, y: m.t + 9 + 16 * j }, svg, k.replace(/_gib$/, "")); });
}

// one horizontal stacked bar: parts {key: seconds}
function hbar(svg, parts, total) {
  clear(svg);
  const W = +svg.getAttribute("width"), m = 4;
  let x = m; const scale = (W - 2 * m) / total; let i = 0;
  for (const [k, v] of Object.entries(parts)) { if (v <= 0) { i++; continue; }
    const w = v * scale, r = el("rect", { x, y: 4, width: w, height: 26, fill: color(k, i), class: "seg", "data-key": k, "data-value": v }, svg);
    el("title", {}, r, `${k}: ${v.toFixed(3)} s (${(100 * v / total).toFixed(1)}%)`);
    if (w > 44) el("text", { x: x + 3, y: 22, fill: "#fff" }, svg, `${k} ${(100 * v / total).toFixed(0)}%`);
    x += w; i++; }
  el("text", { x: m, y: 50 }, svg, `total ${total.toFixed(3)} s; hover a part for its seconds`);
}

// gantt: ranks [[{kind, start_s, end_s, mb, step}]], span_s
function gantt(svg, ranks, span) {
  clear(svg);
  const W = +svg.getAttribute("width"), rowH = 18, m = { l: 50, r: 10, t: 6, b: 24 };
  const H = m.t + m.b + rowH * ranks.length; svg.setAttribute("height", H);
  const X = v => m.l + v / (span || 1) * (W - m.l - m.r);
  ranks.forEach((row, r) => {
    el("text", { x: m.l - 6, y: m.t + r * rowH + 13, "text-anchor": "end" }, svg, `rank ${r}`);
    el("rect", { x: m.l, y: m.t + r * rowH + 1, width: W - m.l - m.r, height: rowH - 2, fill: "#fbe9e9", class: "bubble-bg" }, svg);
    for (const c of row) { const w = Math.max(0.5, X(c.end_s) - X(c.start_s));
      const b = el("rect", { x: X(c.start_s), y: m.t + r * rowH + 1, width: w, height: rowH - 2, fill: color(c.kind, 0), stroke: "#fff", "stroke-width": w > 3 ? .5 : 0, class: "chunk chunk-" + c.kind }, svg);
      el("title", {}, b, `${c.kind}${c.mb !== null && c.mb !== undefined ? " mb " + c.mb : ""}${c.step ? " step " + c.step : ""}: ${c.start_s.toFixed(3)}–${c.end_s.toFixed(3)} s`); }
  });
  el("text", { x: m.l, y: H - 6 }, svg, "0 s");
  el("text", { x: W - m.r, y: H - 6, "text-anchor": "end" }, svg, `${span.toFixed(3)} s   (blue F, orange B, green W, brown F&B pair, pink: bubble)`);
}
