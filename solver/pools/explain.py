"""Why each stage of a plan on pools sits where it does (issue 21): lines for the report and the JSON answer.

For the plan's choice, per pool: the time of one layer per micro-batch on a stage there (read off the evaluator
as the stage → pool model reads it, ``solver/pools/cpsat.py: choice_model``), relative to the fastest pool the
plan uses; the layers each of its stages got; the stage times that result (the slowest sets the pace) and the
tightest memory. A pool the plan leaves idle gets its best use priced (the best plan with at least one stage on
it, one more stage → pool solve): how much slower, and its per-layer time, which says why.
"""

from __future__ import annotations

from typing import Optional

from parplan.costmodel.spec.assumptions import Assumptions, resolve_assumptions
from parplan.costmodel.evaluation.ledger import Evaluation
from parplan.costmodel.evaluation.pools import spec_pools
from parplan.costmodel.spec.spec import Spec
from parplan.solver.pools.choice_model import ChoiceModel, choice_model
from parplan.solver.pools.cpsat import best_for_sequence, optimize_pools


def _ms(s: float) -> str:
    return f"{s * 1e3:.3g} ms"


def placement_lines(spec: Spec, evaluation: Evaluation, *, idle_time_limit_s: Optional[float] = 10.0) -> list[str]:
    """The explanation of ``evaluation``'s stage → pool placement (module docstring); [] for a plan without
    ``stage_pools``. ``idle_time_limit_s``: the time given to each idle pool's best-use solve (None: none run)."""
    plan = evaluation.plan
    if plan.stage_pools is None:
        return []
    a = resolve_assumptions(spec.assumptions)
    cm = choice_model(spec, plan.to_choice(), a)
    layer_s = {k: min(row[k].tl for row in cm.coeffs if row[k] is not None)
               for k in range(len(spec_pools(spec))) if any(row[k] is not None for row in cm.coeffs)}
    used = sorted(set(plan.stage_pools))
    fastest = min(used, key=lambda k: layer_s[k])
    lines = _used_pool_lines(spec, evaluation, layer_s, fastest)
    if len(used) > 1 and idle_time_limit_s is not None:
        lines += _stage_order_lines(spec, evaluation, cm, a, idle_time_limit_s)
    lines.append(_memory_line(evaluation, cm))
    if idle_time_limit_s is not None:
        lines += [_idle_pool_line(spec, evaluation, k, fastest, a, idle_time_limit_s)
                  for k in range(len(spec_pools(spec))) if k not in used]
    return lines


def _used_pool_lines(spec: Spec, evaluation: Evaluation, layer_s: dict[int, float], fastest: int) -> list[str]:
    """Each pool the plan uses: its stages, their layers, its time per layer against the fastest pool's; and, on
    several pools, how the slower pool's fewer layers balance the stage times."""
    plan, pools = evaluation.plan, spec_pools(spec)
    sp, c = list(plan.stage_pools), plan.to_choice()
    used = sorted(set(sp))
    per_stage = c.num_gpus // c.pp
    lines = []
    for k in used:
        stages = [i for i, q in enumerate(sp) if q == k]
        layers = [plan.stage_layers[i] for i in stages]
        ratio = layer_s[k] / layer_s[fastest]
        speed = "the fastest pool used" if k == fastest else f"{ratio:.2f}× pool {fastest}'s"
        lines.append(f"pool {k} ({pools[k].gpu}, {len(stages) * per_stage} of {pools[k].num_gpus} GPUs): "
                     f"stage{'s' if len(stages) > 1 else ''} {', '.join(map(str, stages))} with "
                     f"{', '.join(map(str, layers))} of {spec.model.num_layers} layers; a layer takes "
                     f"{_ms(layer_s[k])} per micro-batch here ({speed})")
    times = [s.time_per_microbatch_s for s in evaluation.stages]
    slow = max(range(len(times)), key=times.__getitem__)
    if len(used) > 1:
        slow_pool = max(used, key=lambda k: layer_s[k])
        lines.append(f"the slower pool {slow_pool}'s stages get fewer layers "
                     f"({', '.join(str(plan.stage_layers[i]) for i, q in enumerate(sp) if q == slow_pool)} vs "
                     f"{', '.join(str(plan.stage_layers[i]) for i, q in enumerate(sp) if q != slow_pool)}) so the "
                     f"stage times balance: {', '.join(_ms(t) for t in times)} per micro-batch, stage {slow} the "
                     f"slowest ({(max(times) / min(times) - 1) * 100:.1f} % over the fastest); stage 0 holds the "
                     f"embedding, stage {c.pp - 1} the LM head")
    return lines


def _stage_order_lines(spec: Spec, evaluation: Evaluation, cm: ChoiceModel, a: Assumptions,
                       time_limit_s: float) -> list[str]:
    """The reverse stage order's best step with this choice (one stage → pool solve), and why it is slower; none
    when the order reads the same both ways."""
    sp = list(evaluation.plan.stage_pools)
    flipped = tuple(reversed(sp))
    if flipped == tuple(sp):
        return []
    other = best_for_sequence(spec, cm, flipped, a, time_limit_s=time_limit_s)
    if other is None:
        return [f"stage order: the reverse order (pools {list(flipped)}) fits no layer split with this choice"]
    ev, proven = other
    last = cm.costs[sp[-1]]
    return [f"stage order: the reverse order (pools {list(flipped)}, layers {ev.plan.stage_layers}) takes "
            f"{ev.metrics.step_time_s:.4g} s at best with this choice, "
            f"{(ev.metrics.step_time_s / evaluation.metrics.step_time_s - 1) * 100:+.2f} %"
            f"{'' if proven else ' (best found)'}: stage 0 holds "
            f"{evaluation.stages[0].inflight_microbatches:g} micro-batches in flight and the embedding, "
            f"stage {evaluation.plan.to_choice().pp - 1} the LM head ({_ms(last.last_extra_time_s)} per micro-batch "
            f"on pool {sp[-1]})"]


def _memory_line(evaluation: Evaluation, cm: ChoiceModel) -> str:
    """The stage with the least memory left: its use against its pool's usable memory."""
    sp = list(evaluation.plan.stage_pools)
    usable = [cm.costs[k].usable_memory_bytes / 2**30 for k in sp]
    tight = min(range(len(evaluation.stages)), key=lambda i: usable[i] - evaluation.stages[i].memory_gib)
    return (f"memory: stage {tight} (pool {sp[tight]}) is the tightest, "
            f"{evaluation.stages[tight].memory_gib:.1f} of {usable[tight]:.1f} GiB usable")


def _idle_pool_line(spec: Spec, evaluation: Evaluation, k: int, fastest: int, a: Assumptions,
                    time_limit_s: float) -> str:
    """Pool ``k``, left idle: its best use (the best plan with a stage on it, one more solve), how much slower that
    is, and its time per layer against the fastest used pool's."""
    pools = spec_pools(spec)
    forced = optimize_pools(spec, top_k=1, assumptions=a, time_limit_s=time_limit_s, require_pool=k)
    if not forced.plans:
        return (f"pool {k} ({pools[k].gpu}) is left idle: no plan with a stage on it fits"
                + ("" if forced.status == "INFEASIBLE" else " within the time given"))
    best = forced.plans[0].evaluation
    fp = best.plan
    kl = choice_model(spec, fp.to_choice(), a)
    ks = min(row[k].tl for row in kl.coeffs if row[k] is not None)
    ref = min(row[fastest].tl for row in kl.coeffs if row[fastest] is not None) if all(
        row[fastest] is not None for row in kl.coeffs) else None
    why = f"; a layer takes {_ms(ks)} there" + (f", {ks / ref:.2f}× pool {fastest}'s" if ref else "")
    return (f"pool {k} ({pools[k].gpu}) is left idle: its best use (stages on pools "
            f"{list(fp.stage_pools)}, layers {fp.stage_layers}) takes "
            f"{best.metrics.step_time_s:.4g} s, "
            f"{(best.metrics.step_time_s / evaluation.metrics.step_time_s - 1) * 100:+.1f} %{why}"
            f" ({'proven' if forced.status == 'OPTIMAL' else 'best found, not proven'})")
