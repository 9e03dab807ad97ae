#!/usr/bin/env python3
"""How close lower bounds of DualPipe / DualPipeV's step order come to it on the plans an answers digest returns
(issue 39 item 1: a searched lower bound must close on them for the search to prove optimality under the step order).

    python benchmarks/step_order_bound.py DIGEST.json            # the fill-busy-drain bound per plan
    python benchmarks/step_order_bound.py DIGEST.json --dwells   # and the dwell-path families (2, 4, 6 dwells)
    python benchmarks/step_order_bound.py DIGEST.json --cuts     # one plan's critical path priced on its neighbours

Per plan: the closed-form step, the exact step order, the bound (each without the DP term), bound / exact and the
step from the m-independent reference graph (costmodel/schedules/step_order_compressed.py) / exact. The
dwell families are tests/costmodel/schedules/test_paired_overlap.py's (paths that dwell on at most k ranks, moving at
the first or last operation of a type in a step). ``--cuts``: DeepSeek-V3's top plan's critical path
(costmodel/schedules/step_order_bound.py critical_path_form) against 30 seeded one-layer moves of that plan."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def stage_work(spec, plan):
    """The plan's per-stage work as the evaluator builds it (costmodel/evaluation/evaluate.py paired_stage_work)."""
    from parplan.costmodel.evaluation.choice import choice_costs
    from parplan.costmodel.evaluation.evaluate import paired_stage_work
    from parplan.costmodel.evaluation.ledger import layer_classes, stage_totals
    from parplan.costmodel.spec.assumptions import resolve_assumptions
    from parplan.costmodel.spec.hardware import resolve_gpu

    a = resolve_assumptions(spec.assumptions)
    costs = choice_costs(spec, plan.to_choice(), resolve_gpu(spec.cluster), a)
    classes = layer_classes(spec, plan.stage_layers)
    stages = [stage_totals(costs, i, d, e, r) for i, ((d, e), r) in enumerate(zip(classes, plan.recompute_layers))]
    return paired_stage_work(costs, a, classes, stages)


def paired_plans(path: str):
    """(answer key, rank, spec, plan, metrics) of every DualPipe / DualPipeV plan of the digest at ``path``."""
    import solver_speed as ss
    from parplan.costmodel.spec.spec import Plan
    from parplan.frameworks.loader import validate_spec

    answers, specs = json.loads(Path(path).read_text()), dict(ss.SCENARIOS)
    for key, answer in sorted(answers.items()):
        spec = validate_spec(specs[key.rsplit(" top", 1)[0]])
        for rank, entry in enumerate(answer["plans"]):
            plan = Plan.model_validate(entry["plan"])
            if plan.schedule.value in ("dualpipe", "dualpipev"):
                yield key, rank, spec, plan, entry["metrics"]


def bounds(path: str, dwells: bool) -> None:
    from parplan.costmodel.schedules.dualpipe_steps import op_graph, step_order_s
    from parplan.costmodel.schedules.step_order_bound import fill_busy_drain_s
    from parplan.costmodel.schedules.step_order_compressed import compressed_step_s

    for key, rank, spec, plan, metrics in paired_plans(path):
        work, m = stage_work(spec, plan), plan.num_microbatches
        exact, bound = step_order_s(plan.schedule, work, m), fill_busy_drain_s(plan.schedule, work, m)
        dp = metrics["step_order_step_s"] - exact
        line = (f"{key} #{rank + 1} {plan.schedule.value} pp={plan.pp} m={m}: closed form "
                f"{metrics['step_time_s'] - dp:.4f} s, step order {exact:.4f} s, fill-busy-drain {bound:.4f} s "
                f"({bound / exact:.5f}), reference graph {compressed_step_s(plan.schedule, work, m) / exact:.12f}")
        if dwells and plan.pp >= 4:
            from tests.costmodel.schedules.test_paired_overlap import _dwell_path_s
            g = op_graph(plan.schedule, work, m)
            line += ", dwells 2 / 4 / 6: " + " / ".join(f"{_dwell_path_s(g, k) / exact:.5f}" for k in (2, 4, 6))
        print(line, flush=True)


def cuts(path: str) -> None:
    from parplan.costmodel.schedules.dualpipe_steps import step_order_s
    from parplan.costmodel.schedules.step_order_bound import critical_path_form, fill_busy_drain_s, path_form_s

    key, _, spec, plan, _ = next(p for p in paired_plans(path) if p[0].startswith("DeepSeek") and p[1] == 0)
    m = plan.num_microbatches
    form = critical_path_form(plan.schedule, stage_work(spec, plan), m)
    print(f"{key} #1: critical path of {int(form.count.sum())} operations, {len(form.count)} operation types")
    rng, cut, fbd = random.Random(1), [], []
    for _ in range(30):
        layers = list(plan.stage_layers)
        i, j = rng.sample(range(4, plan.pp - 1), 2)
        if layers[i] <= 1:
            continue
        layers[i], layers[j] = layers[i] - 1, layers[j] + 1
        moved = plan.model_copy(update={"stage_layers": layers, "recompute_layers": [0] * plan.pp})
        work = stage_work(spec, moved)
        exact = step_order_s(plan.schedule, work, m)
        cut.append(path_form_s(form, work) / exact)
        fbd.append(fill_busy_drain_s(plan.schedule, work, m) / exact)
    print(f"{len(cut)} one-layer moves: the top plan's critical path / step order {min(cut):.3f}-{max(cut):.3f}, "
          f"fill-busy-drain / step order {min(fbd):.4f}-{max(fbd):.4f}")


if __name__ == "__main__":
    if "--cuts" in sys.argv[2:]:
        cuts(sys.argv[1])
    else:
        bounds(sys.argv[1], "--dwells" in sys.argv[2:])
