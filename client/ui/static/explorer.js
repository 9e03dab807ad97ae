// The plan explorer's page logic: every number comes from the JSON endpoints (client/ui/payloads.py), which
// call the library; nothing is computed here beyond drawing.
"use strict";
const $ = id => document.getElementById(id);
const state = { result: null, plan: null, pareto: "memory" };

async function api(path, body) {
  const res = await fetch(path, { method: body === undefined ? "GET" : "POST", headers: { "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body) });
  const data = await res.json();
  if (!res.ok) throw new Error(data.error || res.statusText);
  return data;
}
function specBody(extra) { return { spec_yaml: $("spec").value, ...(extra || {}) }; }
function shortPlan(p) {
  let s = `TP${p.tp} CP${p.cp} PP${p.pp} DP${p.dp}`;
  if (p.ep > 1) s += ` EP${p.ep}`;
  s += ` mb${p.micro_batch_size}×${p.num_microbatches} ${p.schedule}${p.vpp > 1 ? "×" + p.vpp : ""} ZeRO${p.zero_stage}`;
  if (p.recompute !== "none") s += ` rc:${p.recompute}`;
  return s;
}
function setNum(id, value, text) { const e = $(id); e.textContent = text; e.dataset.value = value; }

// ---- spec editor: live validation, presets, Hugging Face import
let validateTimer = null;
function scheduleValidate() { clearTimeout(validateTimer); validateTimer = setTimeout(validate, 350); }
async function validate() {
  const st = $("spec-status");
  try {
    const v = await api("/api/validate", specBody());
    st.className = "status ok"; st.dataset.field = "";
    st.textContent = `✓ valid (${v.num_gpus} GPUs)` + (v.warnings.length ? "  warnings: " + v.warnings.join("; ") : "");
  } catch (err) { st.className = "status bad"; st.textContent = err.message; st.dataset.field = err.message.split(":")[0]; }
}
async function applyPatch(patch) {
  const out = await api("/api/patch", specBody({ patch }));
  $("spec").value = out.spec_yaml; await validate();
}
async function loadPresets() {
  const { presets } = await api("/api/presets");
  for (const p of presets) { const o = document.createElement("option"); o.value = p.name; o.textContent = p.name; o.title = p.source; $("preset").appendChild(o); }
}

// ---- solve: top-K table, frontier, explanation
async function solve() {
  $("solve-error").textContent = ""; $("busy").hidden = false; $("solve").disabled = true;
  state.pareto = $("pareto").value; $("plan").hidden = true;
  try {
    const ask = pareto => api("/api/optimize", specBody({ top_k: +$("top-k").value, pareto, time_limit_s: +$("time-limit").value }));
    const r = await ask(state.pareto === "both" ? "memory" : state.pareto || null);
    state.result = r; state.gpus = null; showResult(r); drawFrontier($("frontier-gpus"), null, "gpus");
    if (r.plans.length) await openPlan(r.plans[0], "#1");
    if (state.pareto === "both" && r.plans.length) { state.gpus = await ask("gpus"); drawFrontier($("frontier-gpus"), state.gpus, "gpus"); }
  } catch (err) { $("solve-error").textContent = err.message; }
  finally { $("busy").hidden = true; $("solve").disabled = false; }
}
function showResult(r) {
  $("results").hidden = false;
  $("result-status").textContent = `${r.status}, objective ${r.objective}`;
  $("warnings").textContent = (r.warnings || []).join(" ");
  const tb = $("plans").querySelector("tbody"); tb.innerHTML = "";
  r.plans.forEach((e, i) => {
    const tr = document.createElement("tr"); tr.id = `plan-row-${i}`;
    const m = e.metrics;
    for (const t of [i + 1, shortPlan(e.plan), e.num_gpus, m.step_time_s.toFixed(3), (100 * m.mfu).toFixed(1) + "%", m.peak_memory_gib.toFixed(1), m.fits ? "yes" : "no"]) {
      const td = document.createElement("td"); td.textContent = t; tr.appendChild(td); }
    tr.addEventListener("click", () => openPlan(e, `#${i + 1}`));
    tb.appendChild(tr);
  });
  showExplanation(r.explanation);
  drawFrontier($("frontier"), r, r.pareto_axis || "memory");
}
function showExplanation(ex) {
  const box = $("explanation"); box.innerHTML = ""; box.hidden = !ex;
  if (!ex) return;
  const h = document.createElement("h3"); h.textContent = "Why nothing fits"; box.appendChild(h);
  const p = document.createElement("p"); p.id = "explanation-summary"; p.textContent = ex.summary; box.appendChild(p);
  ex.relaxations.forEach((rx, i) => {
    const d = document.createElement("div"); d.className = "relaxation"; d.id = `relaxation-${i}`;
    d.textContent = `${rx.requirement}: ${rx.change}` + (rx.plan ? ` → ${shortPlan(rx.plan.plan)}, ${rx.plan.metrics.step_time_s.toFixed(3)} s/step` : "");
    const b = document.createElement("button"); b.textContent = "apply";
    b.addEventListener("click", async () => { await applyPatch(rx.patch); await solve(); });
    d.appendChild(b); box.appendChild(d);
  });
}
// one frontier chart (svg #frontier or #frontier-gpus) of a result r, its title the svg's previous sibling
function drawFrontier(svg, r, axis) {
  const shown = !!(r && r.pareto_axis && r.pareto.length), title = svg.previousElementSibling;
  title.hidden = !shown; svg.style.display = shown ? "block" : "none";
  if (r) $("plans").hidden = !r.plans.length;
  title.textContent = `Pareto frontier: step time × ${axis === "gpus" ? "GPUs" : "peak memory"} (click a point)`;
  if (!shown) { clear(svg); return; }
  const id = svg.id;
  const pts = r.pareto.map((e, i) => ({ x: axis === "gpus" ? e.num_gpus : e.metrics.peak_memory_gib, y: e.metrics.step_time_s, line: true,
    title: `${shortPlan(e.plan)}\n${e.metrics.step_time_s.toFixed(3)} s, ${e.metrics.peak_memory_gib.toFixed(1)} GiB, ${e.num_gpus} GPUs`,
    attrs: { id: `${id}-pt-${i}`, "data-index": i }, onclick: ev => { selectPoint(ev.target); openPlan(e, `${axis === "gpus" ? "GPU frontier" : "frontier"} ${i + 1}`); } }));
  scatter(svg, pts, axis === "gpus" ? "GPUs" : "peak memory, GiB", "step time, s", { logy: true });
}
function selectPoint(node) { document.querySelectorAll(".pt.selected").forEach(n => n.classList.remove("selected")); node.classList.add("selected"); }

// ---- one plan: metrics, breakdown, memory ledger, timeline, exports
// entry: a plan entry of a result (its plan and num_gpus: a GPU frontier's plan is evaluated at its own count)
async function openPlan(entry, label) {
  try {
    const e = await api("/api/plan", specBody({ plan: entry.plan, num_gpus: entry.num_gpus }));
    state.plan = e; showPlan(e, label);
  } catch (err) { $("solve-error").textContent = err.message; }
}
function showPlan(e, label) {
  $("plan").hidden = false; const m = e.metrics;
  $("plan-label").textContent = `${label}: ${shortPlan(e.plan)}`;
  setNum("plan-step-time", m.step_time_s, m.step_time_s.toFixed(3) + " s");
  setNum("plan-mfu", m.mfu, (100 * m.mfu).toFixed(2) + "%");
  setNum("plan-tokens", m.tokens_per_s, Math.round(m.tokens_per_s).toLocaleString("en-US"));
  setNum("plan-peak", m.peak_memory_gib, m.peak_memory_gib.toFixed(2) + " GiB");
  setNum("plan-usable", m.usable_memory_gib, m.usable_memory_gib.toFixed(2) + " GiB");
  setNum("plan-gpus", e.num_gpus, e.num_gpus);
  $("plan-violations").textContent = e.violations.join("\n");
  hbar($("breakdown"), m.breakdown_s, Object.values(m.breakdown_s).reduce((a, b) => a + b, 0));
  const keys = ["model_states_gib", "activations_gib", "logits_gib", "workspace_gib", "pipeline_buffers_gib", "runtime_buffers_gib"];
  stackedBars($("memory"), e.stages.map(s => ({ label: `stage ${s.index}`, parts: Object.fromEntries(keys.map(k => [k, s[k]])) })),
    keys, m.usable_memory_gib, `usable ${m.usable_memory_gib.toFixed(1)} GiB`);
  const t = e.timeline;
  $("timeline-note").textContent = `${t.schedule}, ${t.microbatches_drawn} of ${t.microbatches} micro-batches drawn, span ${t.span_s.toFixed(3)} s` +
    (m.step_order_step_s ? `; step order ${m.step_order_step_s.toFixed(3)} s` : "");
  gantt($("timeline"), t.ranks, t.span_s);
  $("export-out").hidden = true;
}
async function doExport(btn) {
  try {
    const out = await api("/api/export", specBody({ plan: state.plan.plan, num_gpus: state.plan.num_gpus, target: btn.dataset.target || null, launcher: btn.dataset.launcher || null }));
    $("export-out").hidden = false; $("export-text").textContent = out.text + (out.warnings.length ? "\n# warnings: " + out.warnings.join("; ") : "");
    const a = $("export-download"); a.download = out.filename; a.textContent = `download ${out.filename}`;
    a.href = URL.createObjectURL(new Blob([out.text], { type: "text/plain" }));
  } catch (err) { $("solve-error").textContent = err.message; }
}

// ---- sweeps: scaling curves and cost x time
let followTimer = null;
async function loadSweep() {
  $("sweep-error").textContent = "";
  try {
    const s = await api("/api/sweep", { folder: $("sweep-folder").value });
    $("sweep-charts").hidden = false;
    lines($("scaling"), s.curves.map(c => ({ name: `${c.model} on ${c.gpu}${c.knee_reached ? ", knee " + c.knee_gpus : ""}`,
      points: c.points.map(p => ({ x: p.num_gpus, y: p.tokens_per_s, mark: c.knee_reached && p.num_gpus === c.knee_gpus })) })),
      "GPUs", "tokens/s", { logx: true });
    const axis = s.pareto_axis, timed = s.points.filter(p => p.time_to_train_h !== null && p[axis] !== null);
    $("sweep-progress").textContent = s.total === null ? "starting…" : `${s.solved} of ${s.total} points solved` + (s.running ? " (running)" : "");
    $("sweep-progress").dataset.solved = s.solved;
    if (s.error) $("sweep-error").textContent = s.error;
    if (!s.running && !$("sweep-follow").checked) clearInterval(followTimer);
    $("cost-title").textContent = `${axis === "cost_usd" ? "Cost, $" : "GPU-hours"} × time to train, h (Pareto set filled)`;
    scatter($("cost-time"), timed.map((p, i) => ({ x: p.time_to_train_h, y: p[axis], fill: p.pareto ? "#e15759" : "#ccc", r: p.pareto ? 6 : 4,
      title: `${p.model} ${p.num_gpus}× ${p.gpu}: ${p.plan}\n${p.time_to_train_h.toFixed(1)} h, ${p[axis].toFixed(0)}`, attrs: { "data-pareto": p.pareto ? 1 : 0 } })),
      "time to train, h", axis === "cost_usd" ? "cost, $" : "GPU-hours", { yzero: false });
  } catch (err) { $("sweep-error").textContent = err.message; }
}

window.addEventListener("DOMContentLoaded", () => {
  loadPresets();
  $("spec").addEventListener("input", scheduleValidate);
  $("preset").addEventListener("change", ev => ev.target.value && applyPatch({ model: { preset: ev.target.value } }).catch(err => { $("spec-status").textContent = err.message; }));
  $("hf-file").addEventListener("change", async ev => {
    const file = ev.target.files[0]; if (!file) return;
    try { const out = await api("/api/hf_import", specBody({ config_json: await file.text(), name: file.name.replace(/\.json$/, "") }));
      $("spec").value = out.spec_yaml; await validate();
      if (out.warnings.length) $("spec-status").textContent += "  HF: " + out.warnings.join("; ");
    } catch (err) { $("spec-status").className = "status bad"; $("spec-status").textContent = err.message; }
  });
  $("solve").addEventListener("click", solve);
  document.querySelectorAll("#exports button").forEach(b => b.addEventListener("click", () => doExport(b)));
  $("sweep-load").addEventListener("click", loadSweep);
  $("sweep-run").addEventListener("click", async () => {
    $("sweep-error").textContent = "";
    try { await api("/api/sweep_run", { sweep_yaml: $("sweep-yaml").value, folder: $("sweep-folder").value });
      clearInterval(followTimer); followTimer = setInterval(loadSweep, 2000); await loadSweep();
    } catch (err) { $("sweep-error").textContent = err.message; }
  });
  $("sweep-follow").addEventListener("change", ev => { clearInterval(followTimer); if (ev.target.checked) followTimer = setInterval(loadSweep, 3000); });
});
