#!/usr/bin/env python3
"""The deterministic answers of benchmarks/solver_speed.py's 13 scenarios (CP-SAT, top 1 and top 10), to check that a
solver change keeps them.

    python benchmarks/answers_digest.py --out FILE.json          # at one revision (~1 min)
    python benchmarks/answers_digest.py --compare OLD.json NEW.json
    python benchmarks/answers_digest.py --no-memory-band --out FILE.json  # every scenario with search.memory_band: false
    python benchmarks/answers_digest.py --compare-plans OLD.json NEW.json  # which answers' plans (only) changed

Each call is ``optimize`` in deterministic mode (one worker, fixed seed: byte-identical output run to run), so two
revisions whose digests are equal return the same plans, metrics and stats. ``--compare`` prints, per call, whether
the plans (everything but ``stats``) are the same and which ``stats`` fields differ (e.g. ``choices_searched``, the
choices solved exactly, which a change of search order may move without changing any plan); exit 1 if a plan differs.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def digest(out: Path, memory_band: bool = True) -> None:
    import solver_speed as ss
    from parplan.frameworks.loader import validate_spec
    from parplan.solver.cpsat import SolverControls
    from parplan.solver.planner import optimize

    answers = {}
    for name, raw in ss.SCENARIOS:
        if not memory_band:  # the default fits by the memory band's upper end (costmodel/evaluation/prediction_band.py)
            raw = {**raw, "search": {**(raw.get("search") or {}), "memory_band": False}}
        for k in (1, 10):
            t0 = time.perf_counter()
            res = optimize(validate_spec(raw), method="cpsat", top_k=k,
                           controls=SolverControls(time_limit_s=120, deterministic=True))
            answers[f"{name} top{k}"] = res.model_dump(mode="json")
            print(f"{name} top {k}: {res.status} in {time.perf_counter() - t0:.2f} s", flush=True)
    out.write_text(json.dumps(answers, indent=1, sort_keys=True))


def compare(old: Path, new: Path) -> int:
    a, b = json.loads(old.read_text()), json.loads(new.read_text())
    differ = 0
    for key in sorted(set(a) | set(b)):
        if key not in a or key not in b:
            print(f"{key}: only in {'new' if key in b else 'old'}")
            differ += 1
            continue
        x, y = dict(a[key]), dict(b[key])
        sx, sy = x.pop("stats", {}), y.pop("stats", {})
        same = json.dumps(x, sort_keys=True) == json.dumps(y, sort_keys=True)
        stats = {f: (sx.get(f), sy.get(f)) for f in sorted(set(sx) | set(sy)) if sx.get(f) != sy.get(f)}
        differ += not same
        print(f"{key}: {'plans same' if same else 'PLANS DIFFER'}" + (f"; stats {stats}" if stats else ""))
    return 1 if differ else 0


def compare_plans(old: Path, new: Path) -> int:
    """Per call: whether the list of plans (their ``plan`` fields only: not the margin, the ledgers' headroom or the
    stats) and the best plan changed, and the best step time before -> after; a count at the end. Exit 0."""
    a, b = json.loads(old.read_text()), json.loads(new.read_text())
    plans_changed = best_changed = 0
    for key in sorted(set(a) & set(b)):
        pa, pb = ([json.dumps(p["plan"], sort_keys=True) for p in d[key]["plans"]] for d in (a, b))
        ta, tb = (d[key]["plans"][0]["metrics"]["step_time_s"] if d[key]["plans"] else None for d in (a, b))
        plans_changed += pa != pb
        best_changed += pa[:1] != pb[:1]
        step = f"{ta:.4f} -> {tb:.4f} s ({100 * (tb / ta - 1):+.2f} %)" if ta and tb else f"{ta} -> {tb}"
        print(f"{key:42s} margin {b[key].get('memory_margin_gib')} GiB  {a[key]['status']} -> {b[key]['status']}  "
              f"plans {'CHANGED' if pa != pb else 'same'}  best {'CHANGED' if pa[:1] != pb[:1] else 'same'}  {step}")
    print(f"answers whose plan list changes: {plans_changed} of {len(set(a) & set(b))}; whose best plan changes: "
          f"{best_changed}")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="write the digest here")
    ap.add_argument("--compare", nargs=2, type=Path, metavar=("OLD", "NEW"))
    ap.add_argument("--no-memory-band", action="store_true", help="every scenario with search.memory_band: false")
    ap.add_argument("--compare-plans", nargs=2, type=Path, metavar=("OLD", "NEW"))
    args = ap.parse_args(argv)
    if args.compare:
        return compare(*args.compare)
    if args.compare_plans:
        return compare_plans(*args.compare_plans)
    if not args.out:
        ap.error("--out FILE or --compare OLD NEW")
    digest(args.out, not args.no_memory_band)
    return 0


if __name__ == "__main__":
    sys.exit(main())
