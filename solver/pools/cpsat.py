"""Plans on heterogeneous GPU pools (issue 21): one CP-SAT model per choice with a stage → pool assignment.

For a choice (the job's degrees, micro-batches, schedule 1F1B/ZB-H1, ZeRO, recompute granularity, SP; the same
choices :func:`parplan.solver.pools.pool_choices` enumerates) the model decides, per pipeline stage ``i``, its
pool (``x[i][k]``, one per stage), its layers ``l_i ≥ 1`` (Σ = the model's layers) and its recomputed layers
``r_i ≤ l_i`` (full recompute by count only). Every coefficient is read off the evaluator itself
(``costmodel/evaluation/ledger.py: stage_totals`` / ``stage_report`` with the pool's ``choice_costs``), which is affine in
the counts for a stage of one layer class::

    time_ik(l, r)   = T0_ik + Tl_k·l + Tr_k·r  (+ D_k when a neighbour of stage i sits on another pool)
    memory_ik(l, r) = M0_ik + Ml_ik·l − Mr_ik·r + WS_k·[r ≥ 1]      ≤ usable memory of pool k
    dp_ik(l)        = P0_ik + Pl_k·l
    step            = (m + w_max)·max_i time_i + w_sum·Σ_i time_i + max_i dp_i

(``D_k``: ``costmodel/evaluation/pools.py: boundary_p2p_s`` less the pool's own p2p; ``w_max, w_sum``: the uneven-stage
bubble weights, ``costmodel/schedules/bubble.py``), with the pools' capacities Σ_i x_ik·tp·cp·dp ≤ num_gpus_k and the
pools a choice is illegal on (``choice_violations`` of the pool's view) forbidden, and the stage rules of the
spec's framework and ``search:`` (``solver/pools/space.py: StageRules``: equal layer counts under an ``even`` or
``first_last`` split; under ``uniform_recompute`` every stage recomputes one N ≤ its layers). Products x·l are
linearised per (stage, pool); the crossing indicators, the maximum and the sum enter the minimised objective
with non-negative weights, so one-sided constraints are exact. The coefficients are checked against the
evaluator at a further point before use (solver/pools/choice_model.py, :class:`PoolModelError` when a term is not affine: an MoE model with
leading dense layers, whose stage 0 mixes two layer classes, is refused).

Times are integers of ``2^j`` ns (the largest stage time ≈ 2^28 units), weights ``W·(m + w_max)`` ≤ 2^20,
memory in bytes. Choices are visited in the order of a quick lower bound (every stage at the least p2p time, the
slowest stage at least N / Σ_i 1/tl_k(i) with the fastest pools taking as many stages as their GPUs allow,
every layer at the fastest legal pool's time, ``t_max ≥ Σt / pp``: ``choice_model.choice_head``, from the pool costs
alone) and the walk stops once it reaches the K-th best step found; a choice's coefficients are read only when
it is visited, and its tighter bound (each stage's least constant, the least DP time) may skip it; each model
gets the K-th best as a cutoff. Every answer is re-evaluated by ``costmodel/evaluation/pools.py: evaluate_pools`` and ranked by that step time;
the proof is CP-SAT's per choice (OPTIMAL or INFEASIBLE under the cutoff) and the bounds of the choices skipped,
up to the integer model's resolution (a relative 2^-20 of a step). Top-K is K distinct (choice, stage pools)
pairs, as :func:`parplan.solver.pools.search.search_pools`: each found sequence is cut off (a no-good) and the choice
re-solved.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Optional

from parplan.costmodel.spec.assumptions import Assumptions, resolve_assumptions
from parplan.costmodel.evaluation.pools import evaluate_pools, pool_usage, spec_pools
from parplan.costmodel.spec.spec import Plan, Spec
from parplan.solver.ortools_cp import cp_model
from parplan.solver.pools.choice_model import (ChoiceHead, ChoiceModel, PoolModelError, check_uniform_model,
                                               choice_heads, complete_model, stage_counts)
from parplan.solver.pools.space import PoolPlan, StageRules

TIME_BITS = 28
WEIGHT_BITS = 20
# CPU s of optimize_pools (70B / 8B examples, any): presolve on, linearization 1: 8.3 / 0.69; on, 2: 3.6 / 0.91;
# off, 2: 6.7 / 0.74; off, 1: 2.7 / 0.57 (one worker, seed 1)
PRESOLVE = False
LINEARIZATION = 1


@dataclass
class PoolSearchStats:
    """How the answer was found: choices in the space, choices whose model was solved, CP-SAT status per solve."""

    choices_total: int = 0
    choices_solved: int = 0
    models_solved: int = 0
    proven: bool = True  # every model solved to OPTIMAL/INFEASIBLE and every skipped choice bounded
    best_bound_s: Optional[float] = None  # a lower bound of the best step time (the least over the open parts)
    wall_time_s: float = 0.0


@dataclass
class PoolSearch:
    plans: list[PoolPlan]
    stats: PoolSearchStats = field(default_factory=PoolSearchStats)

    @property
    def status(self) -> str:
        if self.plans:
            return "OPTIMAL" if self.stats.proven else "FEASIBLE"
        return "INFEASIBLE" if self.stats.proven else "UNKNOWN"


class _Built:
    """One choice's CP-SAT model (module docstring): its integer units, each stage's pool, layers and recompute
    with their per-pool terms, the crossings between pools, the pools' capacities, the objective."""

    def __init__(self, spec: Spec, cm: ChoiceModel, cutoff_s: Optional[float], require_pool: Optional[int] = None,
                 stage_counts: Optional[tuple[int, ...]] = None):
        c, n = cm.choice, spec.model.num_layers
        p, pools = c.pp, spec_pools(spec)
        K = len(pools)
        full = c.recompute == "full"
        self._set_units(cm, n, full)
        m = self.model = cp_model.CpModel()
        self.x = [[m.NewBoolVar(f"x{i}_{k}") if cm.coeffs[i][k] else None for k in range(K)] for i in range(p)]
        self.layers = [m.NewIntVar(1, n, f"l{i}") for i in range(p)]
        self.rec = [m.NewIntVar(0, n if full else 0, f"r{i}") for i in range(p)]
        m.Add(sum(self.layers) == n)
        self._stage_rules(StageRules.of(spec), full)
        t_vars = []
        t_max = m.NewIntVar(0, 1 << 40, "tmax")
        dp_max = m.NewIntVar(0, 1 << 40, "dpmax")
        cross = [m.NewBoolVar(f"cross{i}") for i in range(p)]
        for i in range(p):
            ti, di = self._stage(i, cm.coeffs[i], cross[i], n, full)
            m.Add(t_max >= ti)
            m.Add(dp_max >= di)
            t_vars.append(ti)
        self._crossings(cross)
        self._pool_limits(pools, c.num_gpus // p, stage_counts, require_pool)
        self.objective = self.M * t_max + self.S * sum(t_vars) + self.W * dp_max
        if cutoff_s is not None:
            m.Add(self.objective <= int(math.ceil(self.units_of(cutoff_s) * (1 + 2.0 ** -WEIGHT_BITS))) + p + 2)
        m.Minimize(self.objective)

    def _set_units(self, cm: ChoiceModel, n: int, full: bool) -> None:
        """The integer units (module docstring): a time unit of 2^j ns, the longest stage about 2^TIME_BITS units,
        and the objective's weights of the slowest stage (M), of the summed stages (S) and of the DP time (W),
        M at most about 2^WEIGHT_BITS."""
        c, p = cm.choice, cm.choice.pp
        t_hi = max(x.t0 + n * x.tl + (n * x.tr if full else 0) + x.cross for row in cm.coeffs for x in row if x)
        self.unit_ns = 1 << max(0, int(math.floor(math.log2(max(t_hi * 1e9, 1.0)))) - TIME_BITS)
        factor = max(1.0, c.num_microbatches + cm.w_max + cm.w_sum * p)
        self.W = 1 << max(0, WEIGHT_BITS - int(math.ceil(math.log2(factor))))
        self.M = int(round(self.W * (c.num_microbatches + cm.w_max)))
        self.S = int(round(self.W * cm.w_sum))

    def _time(self, seconds: float) -> int:
        return int(round(seconds * 1e9 / self.unit_ns))

    def _stage(self, i: int, coeffs: list, cross, n: int, full: bool):
        """Stage ``i``'s (time, DP time) variables: on exactly one pool, its layers and recompute split over the
        pools as (l_ik, r_ik), each pool's terms (:meth:`_stage_on_pool`) summed, its memory within the pool's."""
        m = self.model
        xs = [v for v in self.x[i] if v is not None]
        m.AddExactlyOne(xs)
        m.Add(self.rec[i] <= self.layers[i])
        t_terms, dp_terms, mem_terms, split = [], [], [], []
        for k in range(len(self.x[i])):
            x, s = self.x[i][k], coeffs[k]
            if x is None:
                continue
            lk, rk, terms = self._stage_on_pool(i, k, x, s, cross, n, full)
            t_terms += terms[0]
            dp_terms += terms[1]
            mem_terms += terms[2]
            split.append((lk, rk))
        m.Add(sum(lk for lk, _ in split) == self.layers[i])
        m.Add(sum(rk for _, rk in split) == self.rec[i])
        m.Add(sum(mem_terms) <= 0)
        ti = m.NewIntVar(0, 1 << 40, f"t{i}")
        m.Add(ti == sum(t_terms))
        di = m.NewIntVar(0, 1 << 40, f"dp{i}")
        m.Add(di == sum(dp_terms))
        return ti, di

    def _stage_on_pool(self, i: int, k: int, x, s, cross, n: int, full: bool):
        """(l_ik, r_ik, (time, DP time, memory terms)) of stage ``i`` on pool ``k`` (chosen: ``x``): the products
        x·l and x·r linearised, the recompute working set held when r_ik ≥ 1 (z_ik), the crossing cost when a
        neighbour sits on another pool (c_ik = x ∧ crossing, a ≥ form: its cost is minimised)."""
        m, T = self.model, self._time
        lk = m.NewIntVar(0, n, f"l{i}_{k}")
        rk = m.NewIntVar(0, n if full else 0, f"r{i}_{k}")
        zk = m.NewBoolVar(f"z{i}_{k}")
        m.Add(lk <= n * x)
        m.Add(rk <= n * zk)
        m.AddImplication(zk, x)
        ck = m.NewBoolVar(f"c{i}_{k}")  # x ∧ crossing: ≥ form (its cost is minimised)
        m.Add(ck >= x + cross - 1)
        return lk, rk, ([T(s.t0) * x, T(s.tl) * lk, T(s.tr) * rk, T(s.cross) * ck],
                        [T(s.p0) * x, T(s.pl) * lk],
                        [int(math.ceil(s.m0 - s.usable)) * x, int(math.ceil(s.ml)) * lk,
                         -int(math.floor(s.mr)) * rk, int(math.ceil(s.ws)) * zk])

    def _crossings(self, cross: list) -> None:
        """Stages i and i+1 on different pools: both cross (their p2p runs between the pools)."""
        m, p = self.model, len(self.x)
        for i in range(p - 1):  # stages i and i+1 on different pools: both cross
            for k in range(len(self.x[i])):
                a_, b_ = self.x[i][k], self.x[i + 1][k]
                if a_ is not None:
                    m.Add(cross[i] >= a_ - (b_ if b_ is not None else 0))
                    m.Add(cross[i + 1] >= a_ - (b_ if b_ is not None else 0))

    def _pool_limits(self, pools: list, per_stage: int, stage_counts: Optional[tuple[int, ...]],
                     require_pool: Optional[int]) -> None:
        """Each pool's GPUs bound the stages on it; ``stage_counts``: exactly this many stages on each pool (the
        per-pool GPU frontier); ``require_pool``: at least one stage on it (the explanation's "best use" of a pool)."""
        m, p = self.model, len(self.x)
        for k, pool in enumerate(pools):
            xs = [self.x[i][k] for i in range(p) if self.x[i][k] is not None]
            if xs and len(xs) * per_stage > pool.num_gpus:
                m.Add(per_stage * sum(xs) <= pool.num_gpus)
        if stage_counts is not None:  # exactly this many stages on each pool (the per-pool GPU frontier)
            for k, want in enumerate(stage_counts):
                m.Add(sum(self.x[i][k] for i in range(p) if self.x[i][k] is not None) == want)
        if require_pool is not None:  # at least one stage on this pool (the explanation's "best use" of a pool)
            m.Add(sum(self.x[i][require_pool] for i in range(p) if self.x[i][require_pool] is not None) >= 1)

    def _stage_rules(self, rules: StageRules, full: bool) -> None:
        """The framework's stage split (equal layer counts: even all, first_last the middle ones) and one
        recompute count N for every stage, at most its layers (the first N layers of each)."""
        m, p = self.model, len(self.layers)
        for i in {"even": range(1, p), "first_last": range(2, p - 1)}.get(rules.split, ()):
            m.Add(self.layers[i] == self.layers[i - 1])
        if full and rules.uniform_recompute:
            for i in range(p):
                m.Add(self.rec[i] == self.rec[0])
                m.Add(self.layers[i] >= self.rec[0])

    def seconds(self, objective: float) -> float:
        return objective / self.W * self.unit_ns / 1e9

    def units_of(self, seconds: float) -> float:
        return seconds * 1e9 / self.unit_ns * self.W

    def forbid(self, seq: tuple[int, ...]) -> None:
        self.model.AddBoolOr([self.x[i][k].Not() for i, k in enumerate(seq)])


def _solve(b: _Built, time_limit_s: float, workers: int, seed: int):
    solver = cp_model.CpSolver()
    prm = solver.parameters
    prm.max_time_in_seconds = max(0.001, time_limit_s)
    prm.num_workers = max(1, workers)
    prm.random_seed = seed
    prm.cp_model_presolve = PRESOLVE
    prm.linearization_level = LINEARIZATION
    status = solver.Solve(b.model)
    return solver, status


def _with_usage(heads: list[ChoiceHead], total: int, usage: Optional[tuple[int, ...]]):
    """(the heads that can use exactly ``usage``, their stage counts per pool by id, how many) or all heads."""
    counts = {id(h): stage_counts(h, usage) for h in heads} if usage is not None else {}
    kept = [h for h in heads if usage is None or counts[id(h)] is not None]
    return kept, counts, total if usage is None else len(kept)


def optimize_pools(spec: Spec, top_k: int = 1, *, assumptions: Optional[Assumptions] = None,
                   time_limit_s: float = 60.0, workers: int = 1, seed: int = 1, cancel=None,
                   require_pool: Optional[int] = None, usage: Optional[tuple[int, ...]] = None,
                   cutoff_s: Optional[float] = None, heads: Optional[list[ChoiceHead]] = None,
                   models: Optional[dict] = None) -> PoolSearch:
    """The ``top_k`` best plans (module docstring; OPTIMAL when proven) with a stage on ``require_pool``, using
    exactly ``usage`` GPUs per pool, at most ``cutoff_s`` (none found: none is faster); ``heads``: choice_heads'
    (read once), ``models``: their complete_model by id, filled as read (solver/pools/frontier.py)."""
    t0, stats = time.perf_counter(), PoolSearchStats()
    deadline = t0 + time_limit_s
    check_uniform_model(spec)
    a = assumptions or resolve_assumptions(spec.assumptions)
    read = (heads, len(heads)) if heads is not None else choice_heads(spec, a, deadline, cancel)
    if read is None:
        stats.proven = False  # out of time before the space was read: no plan, UNKNOWN
        stats.wall_time_s = time.perf_counter() - t0
        return PoolSearch(plans=[], stats=stats)
    heads, counts, stats.choices_total = _with_usage(*read, usage)
    checked = False
    best = _BestPlans(top_k, cutoff_s)
    open_bounds: list[float] = []
    for h in heads:
        cutoff = best.kth()
        if cutoff is not None and h.quick_bound_s >= cutoff:
            break
        if time.perf_counter() >= deadline or (cancel is not None and cancel.is_set()):
            stats.proven = False
            open_bounds.append(h.quick_bound_s)
            break
        cm = (models or {}).get(id(h)) or complete_model(spec, h, a, check=not checked)  # checked once
        if models is not None:
            models[id(h)] = cm
        checked = True
        if cutoff is not None and cm.lower_bound_s >= cutoff:
            continue
        if require_pool is not None and all(row[require_pool] is None for row in cm.coeffs):
            continue
        stats.choices_solved += 1
        b = _Built(spec, cm, cutoff, require_pool, counts.get(id(h)))
        _solve_choice(spec, cm, b, a, best, stats, open_bounds, deadline, workers, seed)
    stats.wall_time_s = time.perf_counter() - t0
    if best.found:
        stats.best_bound_s = min([best.found[0][0], *open_bounds])
    return PoolSearch(plans=[f[2] for f in best.found], stats=stats)


@dataclass
class _BestPlans:
    """The ``top_k`` best plans found so far, by step time (then peak memory, then the order found), and what a
    choice must beat: the K-th best step time or the cutoff, the lower."""

    top_k: int
    cutoff_s: Optional[float]
    found: list[tuple[float, int, PoolPlan]] = field(default_factory=list)  # (step, order, plan)
    order: int = 0

    def kth(self) -> Optional[float]:
        kth_found = self.found[self.top_k - 1][0] if len(self.found) >= self.top_k else None
        return min([x for x in (kth_found, self.cutoff_s) if x is not None], default=None)

    def add(self, plan: PoolPlan) -> None:
        self.order += 1
        self.found.append((plan.evaluation.metrics.step_time_s, self.order, plan))
        self.found.sort(key=lambda f: (f[0], f[2].evaluation.metrics.peak_memory_gib, f[1]))
        del self.found[self.top_k:]


def _solve_choice(spec: Spec, cm: ChoiceModel, b: _Built, a: Assumptions, best: _BestPlans, stats: PoolSearchStats,
                  open_bounds: list[float], deadline: float, workers: int, seed: int) -> None:
    """Choice ``cm``'s best stage-pool sequences into ``best``, up to top_k solves of its model ``b``: each answer
    re-evaluated (:func:`_evaluated_plan`), its sequence then cut off and the K-th best made the model's cutoff; a
    solve not proven leaves its bound in ``open_bounds``."""
    for _ in range(best.top_k):
        solver, status = _solve(b, deadline - time.perf_counter(), workers, seed)
        stats.models_solved += 1
        if status == cp_model.INFEASIBLE:
            break
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            stats.proven = False
            open_bounds.append(cm.lower_bound_s)
            break
        if status == cp_model.FEASIBLE:
            stats.proven = False
            open_bounds.append(b.seconds(solver.best_objective_bound))
        plan = _evaluated_plan(spec, cm, b, solver, a)
        best.add(plan)
        b.forbid(plan.stage_pools)
        if (cut := best.kth()) is not None:
            b.model.Add(b.objective <= int(math.ceil(b.units_of(cut) * (1 + 2.0 ** -WEIGHT_BITS))) + cm.choice.pp + 2)


def _evaluated_plan(spec: Spec, cm: ChoiceModel, b: _Built, solver, a: Assumptions) -> PoolPlan:
    """The solver's answer as a plan re-evaluated by ``evaluate_pools``; :class:`PoolModelError` where it does not fit
    or the evaluator's step time is not the model's (relative 1e-4)."""
    c = cm.choice
    seq = tuple(next(k for k, v in enumerate(b.x[i]) if v is not None and solver.Value(v))
                for i in range(c.pp))
    layers = [solver.Value(v) for v in b.layers]
    rec = [solver.Value(v) for v in b.rec]
    plan = Plan.from_choice(c, layers, rec)
    ev = evaluate_pools(spec, plan, list(seq), assumptions=a, costs=cm.costs)
    if ev.violations:
        raise PoolModelError(f"internal: the stage → pool model's answer does not fit: {ev.violations}")
    model_s = b.seconds(solver.objective_value)
    if not math.isclose(model_s, ev.metrics.step_time_s, rel_tol=1e-4):
        raise PoolModelError(f"internal: the stage → pool model prices {model_s} s, the evaluator "
                             f"{ev.metrics.step_time_s} s")
    return PoolPlan(evaluation=ev, stage_pools=seq, gpus_per_pool=tuple(pool_usage(spec, c, list(seq))))


def best_for_sequence(spec: Spec, cm: ChoiceModel, seq: tuple[int, ...], a: Assumptions,
                      time_limit_s: float = 10.0):
    """The best plan of ``cm``'s choice with its stages on the pools ``seq`` (one CP-SAT solve, every answer
    re-evaluated): ``(evaluation, proven)``, or None when no split fits that sequence."""
    if any(cm.coeffs[i][k] is None for i, k in enumerate(seq)):
        return None
    b = _Built(spec, cm, None)
    for i, k in enumerate(seq):
        b.model.Add(b.x[i][k] == 1)
    solver, status = _solve(b, time_limit_s, 1, 1)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    plan = Plan.from_choice(cm.choice, [solver.Value(v) for v in b.layers], [solver.Value(v) for v in b.rec])
    ev = evaluate_pools(spec, plan, list(seq), assumptions=a, costs=cm.costs)
    return None if ev.violations else (ev, status == cp_model.OPTIMAL)
