"""Plans on heterogeneous GPU pools (issue 21), first slice: an exact exhaustive search for small specs.

Decisions: the job's choice (degrees, micro-batches, schedule 1F1B/ZB-H1, ZeRO, recompute granularity, SP: the
single-pool space of :func:`parplan.solver.space.enumerate_choices` at every used GPU count, seen from pool 0 and
narrowed by the spec's framework as on one pool, each plan's legality then checked on every pool it uses by
:func:`parplan.costmodel.evaluation.pools.evaluate_pools`), the pool of every stage (every sequence in ``pools^pp`` whose
stages fit the pools' GPU counts: the stage order is a decision, a pool may be used in part or not at all), the
layers of every stage (every composition the stage split allows, :class:`StageRules`) and its recompute count
(one N for all, N ≤ every stage's layers, under ``uniform_recompute``). For a fixed choice, sequence and layer split the least
recompute that fits each stage's pool memory is optimal: every term of the step (``m·t_max``, the uneven bubble
over Σ t, the DP maximum) is non-decreasing in it, and a stage's fit depends on its own count only.
Plans are ranked by step
time, then peak memory, then enumeration order; top-K is K distinct (choice, stage pools) pairs, each with its
best split. The step time of every candidate is the evaluator's own (``costmodel/evaluation/pools.py``): no separate
integer model to disagree with it.

Cost: the plain enumeration (``plain=True``) makes Σ over choices of (sequences × compositions) evaluations,
~10^13 on the 8B pools example, so small specs only (the tests' reference); the search itself is a branch and
bound over the same space (``solver/pools/bnb.py``: the 8B and 70B pools examples proven in seconds), the
oracle of the CP-SAT stage → pool model (``solver/pools/cpsat.py``).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Iterator, Optional

from parplan.costmodel.spec.assumptions import Assumptions
from parplan.costmodel.spec.degrees import Choice
from parplan.costmodel.evaluation.ledger import Evaluation, layer_classes, stage_report, stage_totals
from parplan.costmodel.evaluation.pools import POOL_SCHEDULES, pool_gpus, pool_spec, pool_usage, spec_pools
from parplan.costmodel.spec.spec import Plan, Spec
from parplan.solver.space import SpaceOptions, enumerate_choices


@dataclass(frozen=True)
class StageRules:
    """The stage-level rules a pool plan keeps (``search:`` intersected with the spec's framework,
    ``SpaceOptions.from_spec``): ``split`` per_stage | first_last (middle stages equal) | even, and
    ``uniform_recompute`` (one count N for every stage, N at most each stage's layers: Megatron's
    ``--recompute-method block --recompute-num-layers N`` on one chunk per stage, as the one-pool CP-SAT model
    reads the ``chunk_block`` rule of ``costmodel/spec/framework_rules.py``; a stage shorter than N, which recomputes
    all its layers there, is not searched: its min(N, l_i) form made the 70B example's models 15× slower)."""

    split: str
    uniform_recompute: bool

    @staticmethod
    def of(spec: Spec) -> "StageRules":
        opts = SpaceOptions.from_spec(spec)
        return StageRules(split=opts.stage_split, uniform_recompute=opts.uniform_recompute)

    def split_ok(self, layers: tuple[int, ...]) -> bool:
        if self.split == "even":
            return len({*layers}) == 1
        if self.split == "first_last":
            return len({*layers[1:-1]}) <= 1
        return True


@dataclass(frozen=True)
class PoolPlan:
    """One answer: the evaluation of a plan and the pool of each of its stages."""

    evaluation: Evaluation
    stage_pools: tuple[int, ...]
    gpus_per_pool: tuple[int, ...]  # GPUs each pool gives (0: left idle); their sum is the plan's GPU count

    @property
    def key(self) -> tuple[float, float]:
        """(step seconds, peak GiB): the ranking before enumeration order."""
        m = self.evaluation.metrics
        return (m.step_time_s, m.peak_memory_gib)


def pool_choices(spec: Spec, a: Assumptions) -> Iterator[Choice]:
    """The space's choices at every used GPU count up to the pools' total, schedules whose stages cross a pool
    boundary once each way (``costmodel/evaluation/pools.py: POOL_SCHEDULES``, one chunk)."""
    total = sum(p.num_gpus for p in spec_pools(spec))
    gpu0 = pool_gpus(spec)[0]
    for g in range(1, total + 1):
        view = pool_spec(spec, 0, g)
        for c in enumerate_choices(view, gpu0, a).choices:
            if c.schedule in POOL_SCHEDULES and c.vpp == 1:
                yield c


def stage_sequences(spec: Spec, c: Choice) -> Iterator[tuple[int, ...]]:
    """Every stage → pool sequence whose pools hold their stages' tp·cp·dp GPUs."""
    caps = [p.num_gpus for p in spec_pools(spec)]
    for seq in itertools.product(range(len(caps)), repeat=c.pp):
        if all(u <= cap for u, cap in zip(pool_usage(spec, c, list(seq)), caps)):
            yield seq


def compositions(n: int, parts: int) -> Iterator[tuple[int, ...]]:
    """Every split of ``n`` layers into ``parts`` stages of at least one layer each."""
    for cuts in itertools.combinations(range(1, n), parts - 1):
        yield tuple(b - a for a, b in zip((0, *cuts), (*cuts, n)))


def stage_fits(plan: Plan, costs, i: int, dense: int, moe: int, r: int) -> bool:
    """Whether stage ``i`` of ``dense`` + ``moe`` layers, ``r`` of them recomputed, fits its pool's usable memory
    (``costs``: that pool's). ``plan``: the choice's plan; its stage fields name the report's rows only (the memory
    of a one-chunk schedule is the stage's own, ``costmodel/evaluation/ledger.py: stage_report``)."""
    rows = stage_totals(costs, i, dense, moe, r)
    plan_r = plan.model_copy(update={"recompute_layers": [r if j == i else 0 for j in range(plan.pp)]})
    return stage_report(plan_r, costs, i, rows, dense, moe).memory_gib <= costs.usable_memory_bytes / 2**30


def least_recompute(spec: Spec, c: Choice, seq: tuple[int, ...], layers: tuple[int, ...], costs,
                    a: Assumptions, uniform: bool = False) -> Optional[list[int]]:
    """Each stage's least recompute count that fits its pool's usable memory (None if a stage fits at none);
    zeros unless the choice recomputes full layers by count. ``uniform``: the least N (at most every stage's
    layers) at which every stage, recomputing N, fits."""
    if c.recompute != "full":
        return [0] * c.pp
    plan = Plan.from_choice(c, list(layers), [0] * c.pp)
    classes = layer_classes(spec, list(layers))

    def fits(i: int, r: int) -> bool:
        return stage_fits(plan, costs[seq[i]], i, *classes[i], r)

    if uniform:  # the least N at which every stage fits (the step is non-decreasing in N)
        return next(([r] * c.pp for r in range(min(layers) + 1) if all(fits(i, r) for i in range(c.pp))), None)
    out = []
    for i, n in enumerate(layers):
        r = next((r for r in range(n + 1) if fits(i, r)), None)
        if r is None:
            return None
        out.append(r)
    return out
