"""Ties the closed form leaves: among DualPipe stage splits it prices alike, the one its step order runs fastest.

A DualPipe rank runs model stages r and p-1-r (deepseek-ai/DualPipe@3da1bbe ``dualpipe.py:355-356``). The closed form
the search optimizes (costmodel/evaluation/evaluate.py ``step_time``) reads a rank through its row, the mean of its two stages
plus the all-to-all its pairs leave exposed, so where that exposure does not change, every split of a rank's layers
between its two stages has the same step: Mixtral 8x7B's research-space optimum on 64 H100 came back as
[7, 7, 7, 7, 1, 1, 1, 1] at 5.69 s, tied with [4 x 8]. The step order itself (``metrics.step_order_step_s``,
costmodel/schedules/dualpipe_steps.py) tells them apart: 5.85 s against 5.63 s. So for each DualPipe plan the planner
returns, it also evaluates the plan with every rank's two stages balanced (the odd layer on either side), and keeps
a candidate only if it is legal, fits, has the same closed-form step (relative 1e-9) and a shorter step order. The
objective value, the status and the optimality proof are unchanged: only which of the tied plans is returned.
Applied under ``objective: max_throughput`` with per-stage splits (``search.stage_split: per_stage``), where the
search's space holds every split.
"""

from __future__ import annotations

from typing import Callable

from parplan.costmodel.evaluation.evaluate import PlanError
from parplan.costmodel.evaluation.ledger import Evaluation
from parplan.costmodel.schedules.schedule import Schedule

TIE_REL = 1e-9


def balanced_pairs(stage_layers: list[int], odd_first: bool) -> list[int]:
    """``stage_layers`` with each DualPipe rank's two stages (r, p-1-r) holding half its layers each; an odd layer
    on stage r when ``odd_first``, else on stage p-1-r."""
    p, out = len(stage_layers), list(stage_layers)
    for r in range(p // 2):
        total = stage_layers[r] + stage_layers[p - 1 - r]
        low, high = total // 2, total - total // 2
        out[r], out[p - 1 - r] = (high, low) if odd_first else (low, high)
    return out


def _candidates(e: Evaluation, evaluate_plan: Callable) -> list[Evaluation]:
    plan, out = e.plan, []
    for odd_first in (False, True):
        layers = balanced_pairs(list(plan.stage_layers), odd_first)
        if layers == list(plan.stage_layers):
            continue
        recompute = [min(r, n) for r, n in zip(plan.recompute_layers, layers)]
        try:
            out.append(evaluate_plan(plan.model_copy(update={"stage_layers": layers, "recompute_layers": recompute})))
        except PlanError:
            continue
    return out


def shortest_step_order(e: Evaluation, evaluate_plan: Callable) -> Evaluation:
    """``e``, or the tied balanced split of it whose step order is shortest (module docstring)."""
    if e.plan.schedule is not Schedule.DUALPIPE or e.metrics.step_order_step_s is None or e.plan.pipeline_layout is not None:
        return e
    step, best = e.metrics.step_time_s, e
    for cand in _candidates(e, evaluate_plan):
        tied = abs(cand.metrics.step_time_s - step) <= TIE_REL * step
        if (cand.feasible and tied and cand.metrics.step_order_step_s is not None
                and cand.metrics.step_order_step_s < best.metrics.step_order_step_s * (1 - TIE_REL)):
            best = cand
    return best


def break_ties(evaluations: list[Evaluation], evaluate_plan: Callable, objective: str,
               stage_split: str) -> list[Evaluation]:
    """Every plan of ``evaluations`` through :func:`shortest_step_order`, unless its tied replacement is already
    one of the others (the K best stay K distinct plans)."""
    if objective != "max_throughput" or stage_split != "per_stage":
        return evaluations
    out = []
    for i, e in enumerate(evaluations):
        best = shortest_step_order(e, evaluate_plan)
        others = [x.plan for j, x in enumerate(evaluations) if j != i] + [x.plan for x in out]
        out.append(e if best is not e and best.plan in others else best)
    return out
