#!/usr/bin/env python3
"""Rank check: where does a published configuration rank among the plans the planner finds?

    python benchmarks/rank_check.py [--top-k 50] [--rows ID ...]

For rows that publish a full configuration (TP, PP, DP, CP, micro-batch size), the spec is the row's model,
cluster and global batch (as :mod:`benchmarks.runs` maps them, with the row's technique facts such as "no TP
overlap in Megatron-LM 2021"), and the search space is left at its default. The planner's exhaustive search
returns its ``top_k`` best plans (one per discrete choice: degrees, micro-batch size, schedule, recompute,
ZeRO stage, SP); the published plan's rank is one plus the number of those plans the model finds strictly
faster than the published plan (the published plan evaluated by the same model, memory violations
included). A second ranking restricts the search to the techniques the published run used (its ZeRO stage,
1F1B/interleaved schedules or DualPipe, and its sequence-parallel setting), since a 2021 run could not use
ZeRO-1 or zero-bubble schedules. A third ranking searches the space of the run's framework at the run's version
(``spec.framework`` = the row's framework profile, :func:`benchmarks.runs.profile_family`, at
:func:`benchmarks.runs.framework_version`: Megatron-LM 2021/22 rows at their commit date, torchtitan 2024-12 rows at
their main-branch date, LLM Foundry's FSDP-only profile; the others at today's profile; the profile's schedules,
ZeRO stages, recompute options, TP/PP/CP/ETP/SP rules, frameworks/profiles.py): the planner's optimum *within that
framework* against the published plan, same model (the row's own assumption facts stay; the profile's memory
knobs are not re-applied, so both plans are priced alike). Rows without a profile keep the default space there
and are reported apart. Results go to ``benchmarks/results/rank_check.txt``.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import sys
import time
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.fit import RESULTS, _git_commit, source_of  # noqa: E402
from benchmarks.runs import express, load_runs, plan_summary  # noqa: E402
from parplan.costmodel.spec.assumptions import AssumptionsSpec  # noqa: E402
from parplan.costmodel.evaluation.evaluate import evaluate, resolve_plan  # noqa: E402
from parplan.costmodel.spec.spec import FrameworkSpec, SearchSpec  # noqa: E402
from parplan.frameworks.loader import retarget  # noqa: E402
from parplan.solver.planner import optimize  # noqa: E402

# Rows with a full published configuration (TP, PP, DP, CP and micro-batch size all stated), one or two
# per source, small and large.
ROWS = (
    "narayanan2021-t1-gpt-18.4b",
    "narayanan2021-t1-gpt-145.6b",
    "megatron-readme2021-gpt3-175b-1024gpu",
    "korthikanti2022-22b-sp-selective",
    "korthikanti2022-175b-sp-selective",
    "korthikanti2022-530b-sp-selective",
    "nemo2407-h100-fp8-llama2-7b-8gpu",
    "nemo2407-h100-fp8-llama2-70b-64gpu",
    "nemo2407-h100-fp8-llama3-70b-64gpu",
    "nemo2407-h100-fp8-gpt3-175b-128gpu",
    "torchtitan-202412-t2-llama3-8b-8gpu-4",
    "torchtitan-202412-t4-llama3-70b-256gpu-11",
    "llmfoundry-mpt-7b-a100_80gb-8gpu-seq2048",
    "llmfoundry-mpt-70b-h100_80gb-64gpu-seq2048",
)

OUT = RESULTS / "rank_check.txt"


def _rank(spec, t_pub: float, top_k: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    res = optimize(spec, method="exhaustive", top_k=top_k)
    wall = time.perf_counter() - t0
    times = [p.metrics.step_time_s for p in res.plans]
    faster = sum(1 for t in times if t < t_pub * (1 - 1e-9))
    rank: Any = faster + 1
    if faster == len(times) and len(times) == top_k:
        rank = f">{top_k}"
    best = res.plans[0] if res.plans else None
    return {"rank": rank, "found": len(times), "wall_s": wall, "status": res.status,
            "best_step_s": best.metrics.step_time_s if best else None,
            "best_plan": plan_summary(best.plan) if best else None,
            "best_mfu": best.metrics.mfu if best else None}


def same_techniques(row: dict, plan) -> dict[str, Any]:
    """The search space of the techniques the published run had: its ZeRO stage and SP setting, its schedule
    family (1F1B/interleaved, or DualPipe), and for Megatron-LM 2021/2022 no context parallelism, with
    recompute limited to none/full in 2021 (selective recompute is Korthikanti 2022's)."""
    fw = (row.get("framework") or "").lower()
    search: dict[str, Any] = {
        "schedules": ["dualpipe"] if plan.schedule == "dualpipe" else ["1f1b", "interleaved"],
        "zero_stages": [plan.zero_stage],
        "sequence_parallel": [plan.sequence_parallel],
    }
    if fw.startswith("megatron-lm (2021") or fw.startswith("megatron-lm (+deepspeed"):
        search.update(cp=[1], recompute=["none", "full"])
    elif fw.startswith("megatron-lm (2022"):
        search.update(cp=[1])
    return search


def check_row(row: dict, top_k: int) -> dict[str, Any]:
    ex = express(row)
    if not ex.ok:
        return {"id": ex.row_id, "error": ex.reason}
    spec = ex.spec.model_copy(update={"assumptions": AssumptionsSpec(**ex.overrides)})
    plan = resolve_plan(spec, ex.plan)
    ev = evaluate(spec, plan)
    t_pub = ev.metrics.step_time_s
    out: dict[str, Any] = {"id": ex.row_id, "source": source_of(ex.row_id), "published_plan": plan_summary(plan),
                           "published_step_s": t_pub, "published_mfu": ev.metrics.mfu,
                           "published_violations": list(ev.violations)}
    out["default"] = _rank(spec, t_pub, top_k)
    out["same_techniques_search"] = same_techniques(row, plan)
    same = spec.model_copy(update={"search": SearchSpec(**out["same_techniques_search"])})
    out["same_techniques"] = _rank(same, t_pub, top_k)
    out["framework"] = ex.framework if ex.framework_version is None else f"{ex.framework} {ex.framework_version}"
    fw = ex.framework if ex.framework_version is None else FrameworkSpec(name=ex.framework, version=ex.framework_version)
    in_fw = retarget(spec, fw) if ex.framework else spec
    out["in_framework"] = _rank(in_fw, t_pub, top_k)
    best = optimize(in_fw, method="exhaustive").plans if ex.framework else []
    out["in_framework"]["best_runs_on_framework"] = bool(best) and ex.framework in best[0].runs_on
    return out


def render(results: list[dict[str, Any]], top_k: int, header: list[str]) -> str:
    lines = list(header)
    w = lines.append
    w(f"{'row':44s} {'published plan (model MFU)':46s} {'rank':>5s} {'rank*':>5s}  {'pub/best':>8s} {'pub/best*':>9s}  best plan in the default space (model MFU)")
    ranks, ranks_same, gaps, gaps_same, gaps_fw, fw_lines, gaps_prof = [], [], [], [], [], [], []
    for r in results:
        if "error" in r:
            w(f"{r['id']:44s} not expressible: {r['error']}")
            continue
        d, s = r["default"], r["same_techniques"]
        gap = r["published_step_s"] / d["best_step_s"] if d["best_step_s"] else float("nan")
        gap_s = r["published_step_s"] / s["best_step_s"] if s["best_step_s"] else float("nan")
        gaps.append(gap)
        gaps_same.append(gap_s)
        ranks.append(d["rank"])
        ranks_same.append(s["rank"])
        flag = " (!fit)" if any("GiB" in v for v in r["published_violations"]) else ""
        flag += " (illegal)" if any("GiB" not in v for v in r["published_violations"]) else ""
        pub = "{} ({:.0f}%){}".format(r["published_plan"], 100 * r["published_mfu"], flag)
        w(f"{r['id']:44s} {pub:46s} "
          f"{str(d['rank']):>5s} {str(s['rank']):>5s}  {gap:8.2f} {gap_s:9.2f}  {d['best_plan']} ({100 * d['best_mfu']:.0f}%)")
        f = r["in_framework"]
        gap_f = r["published_step_s"] / f["best_step_s"] if f["best_step_s"] else float("nan")
        gaps_fw.append(gap_f)
        if r["framework"]:
            gaps_prof.append(gap_f)
        runs_note = "" if not r["framework"] else " yes" if f["best_runs_on_framework"] else " NO (recompute counts)"
        fw_lines.append(f"{r['id']:44s} {str(r['framework'] or '(none)'):22s} {str(f['rank']):>5s}  {gap_f:8.2f}  "
                        f"{f['best_plan']} ({100 * f['best_mfu']:.0f}%){runs_note}")
    w("")
    w(f"rank: 1 + the number of plans (one per discrete choice, top {top_k} of the exhaustive search) the model finds")
    w("faster than the published plan, in the default search space; rank*: the same with the search restricted to")
    w("the techniques the published run had (its ZeRO stage, SP setting and schedule family; for Megatron-LM 2021/22")
    w("no CP, and in 2021 no selective recompute). pub/best(*): the published plan's step time over the best plan's")
    w("in that space (1.00 = the model agrees the published plan is optimal). MFU: model FLOPs (causal attention).")
    w("")
    w("Within each run's framework (spec.framework = the row's profile; search = the profile's legal space):")
    w(f"{'row':44s} {'framework':22s} {'rank':>5s}  {'pub/best':>8s}  best plan the framework runs (model MFU), runs on it")
    lines.extend(fw_lines)
    ints = [x for x in ranks if isinstance(x, int)]
    ints_s = [x for x in ranks_same if isinstance(x, int)]
    w("")
    w(f"Summary over {len(ranks)} rows: published plan ranked 1st in {sum(1 for x in ranks if x == 1)} (default space) / "
      f"{sum(1 for x in ranks_same if x == 1)} (same techniques); within the top 5 in {sum(1 for x in ints if x <= 5)} / "
      f"{sum(1 for x in ints_s if x <= 5)}; beyond the top {top_k} in {sum(1 for x in ranks if not isinstance(x, int))} / "
      f"{sum(1 for x in ranks_same if not isinstance(x, int))}.")
    spaces = [("default space", gaps), ("same techniques", gaps_same), ("within its framework", gaps_fw)]
    if len(gaps_prof) < len(gaps_fw):
        spaces.append(("within its framework, rows with a profile", gaps_prof))
    for label, g in spaces:
        if g:
            gs = sorted(g)
            w(f"Published step time over the model's best ({label}): median {gs[len(gs) // 2]:.2f}, "
              f"range {gs[0]:.2f}-{gs[-1]:.2f}; within 5 % of the best in {sum(1 for x in gs if x <= 1.05)} of {len(gs)}.")
    if len(gaps_prof) < len(gaps_fw):
        w(f"({len(gaps_fw) - len(gaps_prof)} rows have no framework profile; their 'within its framework' figure is the "
          "default space's.)")
    return "\n".join(lines) + "\n"


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--top-k", type=int, default=50)
    ap.add_argument("--rows", nargs="*", default=None)
    args = ap.parse_args(argv)
    by_id = {r["id"]: r for r in load_runs()}
    ids = args.rows or list(ROWS)
    results = []
    for rid in ids:
        t0 = time.perf_counter()
        results.append(check_row(by_id[rid], args.top_k))
        print(f"  {rid}: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    date = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%MZ")
    cmd = "python benchmarks/rank_check.py" + (f" --top-k {args.top_k}" if args.top_k != 50 else "")
    header = [f"# Command: {cmd}", f"# Date: {date} (commit {_git_commit()} + working tree)", "",
              "Published configuration vs the planner's plans for the same model, cluster and global batch "
              "(default preset).", ""]
    text = render(results, args.top_k, header)
    print(text)
    if not args.rows:
        RESULTS.mkdir(parents=True, exist_ok=True)
        OUT.write_text(text)
        print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
