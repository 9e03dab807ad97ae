"""The exhaustive search on heterogeneous pools (issue 21): the ``top_k`` best plans over the space of
``solver/pools/space.py`` (choices, stage pools, layer splits, least recompute), by branch and bound
(``solver/pools/bnb.py``) or, for the tests' reference on small specs, the plain enumeration of every candidate.
Both rank by step time, then peak memory, then enumeration order, with the evaluator's own step times."""

from __future__ import annotations

from typing import Optional

from parplan.costmodel.compute.architecture import Architecture
from parplan.costmodel.spec.assumptions import Assumptions, resolve_assumptions
from parplan.costmodel.evaluation.pools import evaluate_pools, pool_costs, pool_usage
from parplan.costmodel.spec.spec import Plan, Spec
from parplan.solver.deadline import TimeUp, check
from parplan.solver.pools.space import (PoolPlan, StageRules, compositions, least_recompute, pool_choices,
                                  stage_sequences)
from parplan.solver.pools.bnb import branch_and_bound


def search_pools(spec: Spec, top_k: int = 1, *, assumptions: Optional[Assumptions] = None) -> list[PoolPlan]:
    """The ``top_k`` best plans on the spec's pools (module docstring): an empty list when nothing fits (the
    enumeration is complete, so that is proven for this space)."""
    return search_pools_until(spec, top_k, assumptions=assumptions)[0]


def search_pools_until(spec: Spec, top_k: int = 1, *, assumptions: Optional[Assumptions] = None,
                       deadline: Optional[float] = None, cancel=None, plain: bool = False,
                       counts: Optional[list[int]] = None) -> tuple[list[PoolPlan], bool]:
    """:func:`search_pools` that stops at ``deadline`` (``time.perf_counter()``), the call's deadline or a set
    ``cancel`` event (``solver/deadline.py: check``, at every node and evaluation): (the best plans found so far,
    whether the search completed). Incomplete: the plans are feasible, not proven best. The search is branch and
    bound (``solver/pools/bnb.py``: the same space and ranking, subtrees cut by a lower bound); ``plain``: the
    enumeration of every candidate (small specs only; the tests' reference). ``counts``: set to [choices, choices
    searched] by the branch and bound."""
    a = assumptions or resolve_assumptions(spec.assumptions)
    best: dict[tuple, tuple] = {}
    try:
        if plain:
            enumerate_every_candidate(spec, a, best, deadline, cancel)
        else:
            branch_and_bound(spec, a, best, top_k, deadline, cancel, counts)
        complete = True
    except TimeUp:
        complete = False
    ranked = sorted(best.values(), key=lambda item: item[0])[:top_k]
    return [PoolPlan(evaluation=ev, stage_pools=seq,
                     gpus_per_pool=tuple(pool_usage(spec, ev.plan.to_choice(), list(seq))))
            for _, ev, seq in ranked], complete


def enumerate_every_candidate(spec: Spec, a: Assumptions, best: dict, deadline: Optional[float], cancel) -> None:
    """Fill ``best`` ((choice, sequence) -> (rank, evaluation, sequence)) over the whole space; raises TimeUp
    (``best`` holding what was found) past the deadline or on cancel."""
    order = 0
    rules = StageRules.of(spec)
    arch = Architecture(spec.model)
    for c in pool_choices(spec, a):
        costs = pool_costs(spec, c, a, arch)
        for seq in stage_sequences(spec, c):
            for layers in filter(rules.split_ok, compositions(spec.model.num_layers, c.pp)):
                check(deadline, cancel)
                r = least_recompute(spec, c, seq, layers, costs, a, rules.uniform_recompute)
                if r is None:
                    continue
                ev = evaluate_pools(spec, Plan.from_choice(c, list(layers), r), list(seq), assumptions=a,
                                    costs=costs, arch=arch)
                if ev.violations:
                    continue
                order += 1
                rank = (ev.metrics.step_time_s, ev.metrics.peak_memory_gib, order)
                key = (c, seq)
                if key not in best or rank < best[key][0]:
                    best[key] = (rank, ev, seq)
