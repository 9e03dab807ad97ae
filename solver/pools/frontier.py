"""The exact Pareto frontier of plans on several pools (issue 21: "frontiers (time × GPUs now per pool)"): step
time against the GPUs each pool gives, and the ``min_gpus`` objective read off it.

A point is a plan with its usage vector ``u`` (GPUs of pool k it uses, ``costmodel/evaluation/pools.py: pool_usage``); it
is on the frontier when no plan is as fast or faster with at most the GPUs of every pool and fewer of one (and
none strictly faster with the same usage). Every reachable usage vector is known from the choices alone: a
choice of ``pp`` stages of ``w = tp·cp·dp`` GPUs puts ``n_k`` stages on pool k, Σ n_k = pp, w·n_k ≤ the pool's
GPUs, none on a pool the choice is illegal on. The vectors are visited in order of their total (then
lexicographically), so every vector u' ≤ u comes before u. At each, the stage → pool model
(``solver/pools/cpsat.py: optimize_pools`` with ``usage`` = u) looks for the best plan strictly faster than
every point found at some u' ≤ u (its cutoff): one found is on the frontier (nothing at a u' ≤ u is as fast,
and nothing at u is faster: the model's optimum), none found proves u dominated. The same walk as the
homogeneous GPU frontier (``solver/frontier.py: gpu_frontier``: the best step time at each GPU count, kept where
it strictly improves), with a vector of counts in place of one count (the ε-constraint method over a
lattice, cpsat-modeling.md §2.11). Exact up to the model's resolution (a relative 2^-20 of a step); checked
against a brute force over the evaluator in ``tests/solver/pools/test_frontier.py``.

``min_gpus``: the least total GPUs whose plan meets the spec's target step time. A plan meeting it is on the
frontier or dominated by a frontier point with no more GPUs in any pool and no slower step, so the answer is the
frontier point with the least total among those meeting the target (the faster on a tie).
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import Optional

from parplan.costmodel.spec.assumptions import Assumptions, resolve_assumptions
from parplan.costmodel.evaluation.pools import spec_pools
from parplan.costmodel.spec.spec import Spec
from parplan.solver.pools.space import PoolPlan
from parplan.solver.pools.choice_model import ChoiceHead, choice_heads
from parplan.solver.pools.cpsat import PoolSearchStats, optimize_pools

STRICT_RTOL = 1e-9  # "strictly faster": by more than this relative margin (float noise of one evaluator)


@dataclass
class PoolFrontier:
    """The frontier's points (fastest last: fewest GPUs first), and whether every step of the walk was proven."""

    points: list[PoolPlan] = field(default_factory=list)
    stats: PoolSearchStats = field(default_factory=PoolSearchStats)


def usage_vectors(spec: Spec, heads: list[ChoiceHead]) -> list[tuple[int, ...]]:
    """Every usage vector some choice can reach (module docstring), by total GPUs, then lexicographically."""
    caps = [p.num_gpus for p in spec_pools(spec)]
    out: set[tuple[int, ...]] = set()
    for h in heads:
        c = h.choice
        w = c.num_gpus // c.pp
        ranges = [range(min(cap // w, c.pp) + 1) if ok else range(1) for cap, ok in zip(caps, h.legal)]
        for n in itertools.product(*ranges):
            if sum(n) == c.pp:
                out.add(tuple(w * x for x in n))
    return sorted(out, key=lambda u: (sum(u), u))


def dominates(u: tuple[int, ...], v: tuple[int, ...]) -> bool:
    """Usage ``u`` is at most ``v`` in every pool."""
    return all(a <= b for a, b in zip(u, v))


def pool_frontier(spec: Spec, *, assumptions: Optional[Assumptions] = None, time_limit_s: float = 60.0,
                  seed: int = 1, cancel=None) -> PoolFrontier:
    """The frontier of step time against GPUs per pool (module docstring); ``stats.proven`` False when the time
    ran out (the points found are then each the best at its usage among the choices solved)."""
    t0 = time.perf_counter()
    deadline = t0 + time_limit_s
    a = assumptions or resolve_assumptions(spec.assumptions)
    out = PoolFrontier()
    read = choice_heads(spec, a, deadline, cancel)
    if read is None:
        out.stats.proven = False
        return out
    heads, out.stats.choices_total = read
    models: dict = {}  # each choice's coefficients, read once for every usage vector it can reach
    for u in usage_vectors(spec, heads):
        left = deadline - time.perf_counter()
        if left <= 0 or (cancel is not None and cancel.is_set()):
            out.stats.proven = False
            break
        better = [p.key[0] for p in out.points if dominates(p.gpus_per_pool, u)]
        cutoff = min(better) * (1 - STRICT_RTOL) if better else None
        got = optimize_pools(spec, assumptions=a, time_limit_s=left, seed=seed, cancel=cancel, usage=u,
                             cutoff_s=cutoff, heads=heads, models=models)
        out.stats.models_solved += got.stats.models_solved
        out.stats.proven &= got.stats.proven
        if got.plans and (cutoff is None or got.plans[0].key[0] < cutoff):
            out.points.append(got.plans[0])
    out.stats.choices_solved = len(models)  # distinct choices whose model was read, over every usage vector
    out.stats.wall_time_s = time.perf_counter() - t0
    return out


def least_gpus(frontier: PoolFrontier, target_s: float) -> Optional[PoolPlan]:
    """The ``min_gpus`` answer: the frontier point meeting ``target_s`` with the least total GPUs (the faster on a
    tie), or None when none meets it."""
    meets = [p for p in frontier.points if p.key[0] <= target_s]
    return min(meets, key=lambda p: (sum(p.gpus_per_pool), p.key[0]), default=None)
