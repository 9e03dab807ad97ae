#!/usr/bin/env python3
"""How close the fill-busy-drain bound (costmodel/schedules/step_order_bound.py) comes to the step order on the
DualPipe / DualPipeV plans an answers digest returns (issue 39 item 1: a searched lower bound must close on them).

    python benchmarks/step_order_bound.py DIGEST.json

Per plan: the closed-form step, the exact step order, the bound (each without the DP term) and bound / exact."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main(path: str) -> None:
    import solver_speed as ss
    from parplan.costmodel.evaluation.choice import choice_costs
    from parplan.costmodel.evaluation.evaluate import paired_stage_work
    from parplan.costmodel.evaluation.ledger import layer_classes, stage_totals
    from parplan.costmodel.schedules.dualpipe_steps import step_order_s
    from parplan.costmodel.schedules.step_order_bound import fill_busy_drain_s
    from parplan.costmodel.spec.assumptions import resolve_assumptions
    from parplan.costmodel.spec.hardware import resolve_gpu
    from parplan.costmodel.spec.spec import Plan
    from parplan.frameworks.loader import validate_spec

    answers, specs = json.loads(Path(path).read_text()), dict(ss.SCENARIOS)
    for key, answer in sorted(answers.items()):
        spec = validate_spec(specs[key.rsplit(" top", 1)[0]])
        a, gpu = resolve_assumptions(spec.assumptions), resolve_gpu(spec.cluster)
        for rank, entry in enumerate(answer["plans"]):
            plan = Plan.model_validate(entry["plan"])
            if plan.schedule.value not in ("dualpipe", "dualpipev"):
                continue
            costs = choice_costs(spec, plan.to_choice(), gpu, a)
            classes = layer_classes(spec, plan.stage_layers)
            stages = [stage_totals(costs, i, d, e, r) for i, ((d, e), r) in enumerate(zip(classes, plan.recompute_layers))]
            work = paired_stage_work(costs, a, classes, stages)
            m, metrics = plan.num_microbatches, entry["metrics"]
            exact, bound = step_order_s(plan.schedule, work, m), fill_busy_drain_s(plan.schedule, work, m)
            dp = metrics["step_order_step_s"] - exact
            print(f"{key} #{rank + 1} {plan.schedule.value} pp={plan.pp} m={m}: closed form "
                  f"{metrics['step_time_s'] - dp:.4f} s, step order {exact:.4f} s, bound {bound:.4f} s "
                  f"(bound / step order {bound / exact:.5f})")


if __name__ == "__main__":
    main(sys.argv[1])
