"""A choice's stage → pool model, read off the evaluator (solver/pools/cpsat.py's module docstring gives the
terms): per (stage, pool) the affine coefficients of a stage's time, memory and DP time in its layer and recompute
counts (:func:`stage_coeffs`, checked at a further point), the choice's head (its pool costs, the pools it is legal
on, its bubble weights and a quick lower bound of its step, :func:`choice_head`) and the tighter bound its
coefficients give (:func:`complete_model`); the capacity bound of the slowest stage from the pools' sizes; how many
stages each pool holds at a given GPU usage."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Optional

from parplan.costmodel.errors import ParplanError
from parplan.costmodel.evaluation.choice import ChoiceCosts, nvlink_domain_size
from parplan.costmodel.evaluation.ledger import stage_report, stage_totals
from parplan.costmodel.evaluation.legality import choice_violations
from parplan.costmodel.evaluation.pools import (boundary_p2p_s, inter_pool_link, pool_costs, pool_gpus, pool_spec,
                                                spec_pools)
from parplan.costmodel.schedules.bubble import stage_bubble_weights
from parplan.costmodel.spec.assumptions import Assumptions
from parplan.costmodel.spec.degrees import Choice
from parplan.costmodel.spec.spec import Plan, Spec
from parplan.solver.pools.space import pool_choices

AFFINE_RTOL = 1e-9


class PoolModelError(ParplanError):
    """A pools spec the stage → pool model does not cover (the message names the field)."""


@dataclass(frozen=True)
class StageCoeffs:
    """Stage ``i`` on pool ``k``: the affine terms of the module docstring, in seconds and bytes."""

    t0: float
    tl: float
    tr: float
    cross: float
    m0: float
    ml: float
    mr: float
    ws: float
    p0: float
    pl: float
    usable: float


def check_uniform_model(spec: Spec) -> None:
    moe = spec.model.moe
    if moe is not None and moe.first_dense_layers:
        raise PoolModelError(f"model.moe.first_dense_layers: {moe.first_dense_layers} leading dense layers on a "
                             f"pools spec are not planned yet (stage 0 would mix two layer classes)")


def _classes(spec: Spec, n: int) -> tuple[int, int]:
    return (n, 0) if spec.model.moe is None else (0, n)


def _point(spec: Spec, c: Choice, costs: ChoiceCosts, i: int, n: int, r: int) -> tuple[float, float, float]:
    """(time, memory bytes, DP time) of stage ``i`` with ``n`` layers, ``r`` recomputed: ``stage_totals`` and
    ``stage_report``'s memory sum (one chunk per stage, as on pools), checked against ``stage_report`` itself
    at the check point of :func:`stage_coeffs`."""
    d, e = _classes(spec, n)
    t = stage_totals(costs, i, d, e, r)
    mem = t.memory_bytes(costs.inflight(i) * t.act_bytes)
    return t.time_s, mem, t.dp_s


def _report_memory(spec: Spec, c: Choice, costs: ChoiceCosts, i: int, n: int, r: int) -> float:
    d, e = _classes(spec, n)
    layers, rec = [1] * c.pp, [0] * c.pp
    layers[i], rec[i] = n, r
    plan = Plan.from_choice(c, layers, rec)
    return stage_report(plan, costs, i, stage_totals(costs, i, d, e, r), d, e).memory_gib * 2**30


def stage_coeffs(spec: Spec, c: Choice, costs: ChoiceCosts, i: int, a: Assumptions, link,
                 check: bool = False) -> StageCoeffs:
    """Read the affine terms off the evaluator at (1,0), (2,0), (2,1), (2,2) and check them at (3,1) (and
    the memory sum against ``stage_report`` when ``check``)."""
    t10, m10, d10 = _point(spec, c, costs, i, 1, 0)
    t20, m20, d20 = _point(spec, c, costs, i, 2, 0)
    t21, m21, _ = _point(spec, c, costs, i, 2, 1)
    t22, m22, _ = _point(spec, c, costs, i, 2, 2)
    tl, ml, pl = t20 - t10, m20 - m10, d20 - d10
    tr, mr = t21 - t20, m21 - m22
    ws = m21 - m20 + mr
    k = StageCoeffs(t0=t10 - tl, tl=tl, tr=tr, cross=boundary_p2p_s(costs, link, a) - costs.p2p_s,
                    m0=m10 - ml, ml=ml, mr=mr, ws=ws, p0=d10 - pl, pl=pl, usable=costs.usable_memory_bytes)
    t31, m31, d31 = _point(spec, c, costs, i, 3, 1)
    checks = [(t31, k.t0 + 3 * k.tl + k.tr), (m31, k.m0 + 3 * k.ml - k.mr + k.ws), (d31, k.p0 + 3 * k.pl)]
    if check:
        checks.append((_report_memory(spec, c, costs, i, 3, 1), m31))
    for got, want in checks:
        if not math.isclose(got, want, rel_tol=AFFINE_RTOL, abs_tol=1e-6 * max(1.0, abs(got)) * AFFINE_RTOL):
            raise PoolModelError(f"cluster.pools: the cost of stage {i} is not affine in its layer and recompute "
                                 f"counts for choice {c} ({got} vs {want}); the stage → pool model needs it")
    return k


@dataclass
class ChoiceModel:
    """One choice's coefficients (per stage and pool) and its bubble weights; the lower bound of its step."""

    choice: Choice
    costs: list[ChoiceCosts]
    coeffs: list[list[Optional[StageCoeffs]]]  # [stage][pool], None where the pool is illegal for the choice
    w_max: float
    w_sum: float
    lower_bound_s: float


@dataclass
class ChoiceHead:
    """A choice's pool costs, the pools it is legal on, its bubble weights and a quick lower bound of its step
    (every stage at the least p2p time, every layer at the fastest legal pool's time: stage extras ≥ 0)."""

    choice: Choice
    costs: list[ChoiceCosts]
    legal: list[bool]
    w_max: float
    w_sum: float
    quick_bound_s: float


def choice_head(spec: Spec, c: Choice, a: Assumptions) -> Optional[ChoiceHead]:
    costs = pool_costs(spec, c, a)
    gpus = pool_gpus(spec)
    legal = []
    for k in range(len(gpus)):
        view = pool_spec(spec, k, c.num_gpus)
        legal.append(not choice_violations(view, c, a, nvlink_domain_size(view, gpus[k])))
    if not any(legal):
        return None
    weights = {stage_bubble_weights(costs[k].bubble_s(1.0, a), c.pp, a.uneven_stage_bubble)
               for k in range(len(gpus)) if legal[k]}
    if len(weights) != 1:
        raise PoolModelError("cluster.pools: the pipeline bubble weights differ between pools for this choice; "
                             "the stage → pool model assumes one schedule bubble")
    (w_max, w_sum), = weights
    d1, e1 = _classes(spec, 1)
    d2, e2 = _classes(spec, 2)
    tl = {k: stage_totals(costs[k], 0, d2, e2, 0).time_s - stage_totals(costs[k], 0, d1, e1, 0).time_s
          for k in range(len(gpus)) if legal[k]}
    t_max = capacity_bound(spec, c, tl)
    if t_max is None:
        return None  # the legal pools hold fewer than pp stages
    t_sum = c.pp * min(costs[k].p2p_s for k in tl) + spec.model.num_layers * min(tl.values())
    lb = (c.num_microbatches + w_max) * max(t_max, t_sum / c.pp) + w_sum * t_sum
    return ChoiceHead(choice=c, costs=costs, legal=legal, w_max=w_max, w_sum=w_sum, quick_bound_s=lb)


def capacity_bound(spec: Spec, c: Choice, tl: dict[int, float]) -> Optional[float]:
    """A lower bound of the slowest stage's time from the pools' sizes (None: the pools ``tl`` lists hold fewer
    than pp stages). Stage i on pool k with n_i layers takes at least tl_k·n_i (its constant is ≥ 0), so
    t_max ≥ N / Σ_i 1/tl_k(i), and Σ_i 1/tl_k(i) is largest when the fastest pools take as many stages as their
    GPUs allow."""
    per_stage = c.num_gpus // c.pp
    pools = spec_pools(spec)
    left, speed = c.pp, 0.0
    for k in sorted(tl, key=tl.__getitem__):
        take = min(left, pools[k].num_gpus // per_stage)
        speed += take / tl[k] if tl[k] > 0 else math.inf
        left -= take
    if left > 0:
        return None
    return 0.0 if math.isinf(speed) else spec.model.num_layers / speed


def complete_model(spec: Spec, h: ChoiceHead, a: Assumptions, check: bool = False) -> ChoiceModel:
    """The head's coefficients for every (stage, legal pool) and the tighter lower bound they give."""
    c = h.choice
    link = inter_pool_link(spec)
    coeffs = [[stage_coeffs(spec, c, h.costs[k], i, a, link, check=check and i == 0) if h.legal[k] else None
               for k in range(len(h.costs))] for i in range(c.pp)]
    # lower bound: every layer at the fastest legal pool's per-layer time, every stage at its least constant
    n = spec.model.num_layers
    t_sum = sum(min(x.t0 for x in row if x) for row in coeffs) + n * min(x.tl for row in coeffs for x in row if x)
    dp_min = max(min(x.p0 + x.pl for x in row if x) for row in coeffs)
    t_max = t_sum / c.pp
    if all(x.t0 >= 0 for row in coeffs for x in row if x):
        tl = {k: min(row[k].tl for row in coeffs) for k in range(len(h.costs)) if h.legal[k]}
        t_max = max(t_max, capacity_bound(spec, c, tl) or 0.0)
    lb = (c.num_microbatches + h.w_max) * t_max + h.w_sum * t_sum + dp_min
    return ChoiceModel(choice=c, costs=h.costs, coeffs=coeffs, w_max=h.w_max, w_sum=h.w_sum, lower_bound_s=lb)


def choice_model(spec: Spec, c: Choice, a: Assumptions) -> Optional[ChoiceModel]:
    """The choice's coefficients, or None when no pool may hold any stage of it."""
    check_uniform_model(spec)
    h = choice_head(spec, c, a)
    return None if h is None else complete_model(spec, h, a, check=True)


def choice_heads(spec: Spec, a: Assumptions, deadline: float, cancel=None) -> Optional[tuple[list[ChoiceHead], int]]:
    """Every choice's head (:func:`choice_head`) in the order of its quick bound, and the number of choices;
    None when the deadline or ``cancel`` comes first."""
    heads, total = [], 0
    for c in pool_choices(spec, a):
        if time.perf_counter() >= deadline or (cancel is not None and cancel.is_set()):
            return None
        total += 1
        h = choice_head(spec, c, a)
        if h is not None:
            heads.append(h)
    return sorted(heads, key=lambda h: h.quick_bound_s), total


def stage_counts(h: ChoiceHead, usage: tuple[int, ...]) -> Optional[tuple[int, ...]]:
    """The stages each pool holds when the choice of ``h`` uses exactly ``usage`` GPUs of each pool, or None
    when it cannot (another GPU count, a share no whole number of stages, a stage on a pool it is illegal on)."""
    c = h.choice
    per_stage = c.num_gpus // c.pp
    if sum(usage) != c.num_gpus or any(u % per_stage or (u and not ok) for u, ok in zip(usage, h.legal)):
        return None
    return tuple(u // per_stage for u in usage)
