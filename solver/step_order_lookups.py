"""A paired choice's step-order operation durations as lookups by its decision variables (issue 39 item 1).

The step order's operations (costmodel/schedules/dualpipe_steps.py ``op_durations_s``) read, per model stage s, its
time ``T_s = C_s + E_s`` and all-to-all ``X_s``, and per F&B pair (a, b) the exposure ``pair_exposed_s`` of its two
stages. Without recomputation each of these is a function of one layer count: a DualPipe stage's own (the model's
leading dense layers on stage 0, as ``ledger.layer_classes`` places them once stage 0 holds them), a DualPipeV stage's
rank total (``dualpipev.chunk_classes`` splits a rank into its two chunks). So a path of the step order's graph,
compressed to counts per operation type (costmodel/schedules/step_order_bound.py ``PathForm``), is a sum of table
lookups by the layer counts: what a CP-SAT model can carry (solver/step_order_cuts.py). Every entry is computed by the
evaluator's own functions (``evaluate.paired_stage_work`` over ``ledger.stage_totals``) at a uniform split, each stage
reading only its own classes; tests/solver/test_step_order_cuts.py checks the lookups rebuild each plan's work.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from parplan.costmodel.evaluation.evaluate import paired_stage_work
from parplan.costmodel.evaluation.ledger import stage_totals
from parplan.costmodel.schedules.dualpipe_steps import StageWork
from parplan.costmodel.schedules.paired_overlap import ChunkWork, component_phases_s, pair_exposed_s
from parplan.costmodel.schedules.schedule import Schedule


@dataclass(frozen=True)
class StepOrderLookups:
    """Per stage s and layer count l of the variable it reads (``key[s]``): ``T[s, l]``, ``X[s, l]`` seconds per
    micro-batch (``C``, ``A``: its compute and attention part); ``pair[(a, b)]``: the exposure of a's forward beside
    b's backward, over (l_a, l_b) under DualPipe, over the rank's total under DualPipeV; ``phases[(a, b)]``: the
    terms whose positive parts sum to it (paired_overlap's per-component phases, or per chunk its two passes), each
    a difference of per-layer sums. ``lo[v]``: variable v's least layers (1, or the dense layers on the stage or rank
    that holds them)."""
    schedule: Schedule
    ranks: int
    m: int
    f: float
    w: float
    key: tuple[int, ...]
    lo: tuple[int, ...]
    T: np.ndarray
    X: np.ndarray
    C: np.ndarray
    A: np.ndarray | None
    share: float
    pair: dict
    phases: dict
    rho: tuple[float, float] = (0.0, 0.0)  # a recomputed (dense, MoE) layer's time: stage time is affine in it
    k_dense: int = 0  # DualPipe stage 0's dense layers (recomputed first, ledger.stage_totals)

    @property
    def num_vars(self) -> int:
        return len(self.lo)

    def recompute_s(self, s: int, r: int) -> float:
        """What recomputing ``r`` layers adds to DualPipe stage ``s``'s time (its dense layers first)."""
        d = min(r, self.k_dense) if s == 0 else 0
        return self.rho[0] * d + self.rho[1] * (r - d)

    def work(self, layers, recompute=None) -> StageWork:
        """The StageWork at one value of the variables (each stage's entries at its variable's count; DualPipe
        stages recomputing ``recompute[s]`` layers)."""
        idx = [int(layers[k]) for k in self.key]
        s = range(len(self.key))
        pick = lambda a: [float(a[j, l]) for j, l in zip(s, idx)]  # noqa: E731
        T, C = pick(self.T), pick(self.C)
        if recompute is not None:
            T = [t + self.recompute_s(j, int(r)) for j, (t, r) in enumerate(zip(T, recompute))]
        return StageWork(C, pick(self.X), self.f, self.w, [t - c for t, c in zip(T, C)],
                         None if self.A is None else pick(self.A), self.share)


def _classes(k: int, moe: bool, n_vars: int, l: int) -> list[tuple[int, int]]:
    """(dense, MoE) of every variable's stage (or rank) at ``l`` layers: the dense layers on variable 0."""
    if not moe:
        return [(l, 0)] * n_vars
    return [(min(k, l), l - min(k, l))] + [(0, l)] * (n_vars - 1)


def build_lookups(problem, i: int) -> StepOrderLookups:
    """The lookups of paired choice ``i`` of ``problem`` (solver/problem.py), l = 0..L (entries below a variable's
    least count are unused: its domain excludes them)."""
    c, costs, a = problem.choices[i], problem.costs(i), problem.assumptions
    L, moe = problem.num_layers, problem.spec.model.moe
    k = moe.first_dense_layers if moe else 0
    dual = c.schedule is Schedule.DUALPIPE
    n_vars, stages = c.pp, (c.pp if dual else 2 * c.pp)
    key = tuple(range(stages)) if dual else tuple(s if s < c.pp else 2 * c.pp - 1 - s for s in range(stages))
    T, X, C, A = (np.zeros((stages, L + 1)) for _ in range(4))
    has_attn, share, f, w = True, 0.5, costs.fwd_share, 0.0
    for l in range(1, L + 1):
        classes = _classes(k, moe is not None, n_vars, l)
        totals = [stage_totals(costs, j, d, e, 0) for j, (d, e) in enumerate(classes)]
        work = paired_stage_work(costs, a, classes, totals)
        T[:, l] = np.asarray(work.C) + np.asarray(work.E)
        X[:, l], C[:, l] = work.X, work.C
        has_attn, share, f, w = work.A is not None, work.dispatch_share, work.f, work.w
        if has_attn:
            A[:, l] = work.A
    lo = tuple(max(1, k if v == 0 and moe is not None else 1) for v in range(n_vars))
    lk = StepOrderLookups(c.schedule, c.pp, c.num_microbatches, f, w, key, lo, T, X, C, A if has_attn else None,
                          share, {}, {}, _rho(costs, k, moe is not None, n_vars), k if moe is not None else 0)
    for ab, (table, phases) in _pairs(lk, L).items():
        lk.pair[ab], lk.phases[ab] = table, phases
    return lk


def _rho(costs, k: int, moe: bool, n_vars: int) -> tuple[float, float]:
    """(dense, MoE) time of one recomputed layer (ledger.layer_totals: affine in the recomputed count), read off
    ``stage_totals`` at a stage past the first (stage 0 for a dense one where the model's dense layers are there)."""
    j = 1 if n_vars > 1 else 0
    moe_s = (stage_totals(costs, j, 0, 2, 1).time_s - stage_totals(costs, j, 0, 2, 0).time_s) if moe else 0.0
    dense_s = stage_totals(costs, j, 2, 0, 1).time_s - stage_totals(costs, j, 2, 0, 0).time_s if (k or not moe) else 0.0
    return dense_s, moe_s


def _chunk(lk: StepOrderLookups, s: int, cols) -> ChunkWork:
    return ChunkWork(lk.C[s, cols], lk.X[s, cols], None if lk.A is None else lk.A[s, cols], lk.share)


def _phases(lk: StepOrderLookups, fwd: ChunkWork, bwd: ChunkWork) -> list[np.ndarray]:
    """The terms of ``pair_exposed_s(fwd, bwd)`` before their positive parts (paired_overlap.py's two forms)."""
    if lk.A is None:
        return [np.asarray(fwd.a2a_s / 2 - (1 - lk.f) * bwd.compute_s, float),
                np.asarray(bwd.a2a_s / 2 - lk.f * fwd.compute_s, float)]
    return [np.asarray(comm - comp, float) for comp, comm in component_phases_s(fwd, bwd, lk.f)]


def _pairs(lk: StepOrderLookups, L: int) -> dict:
    """Every F&B pair's exposure table and phases: DualPipe rank r pairs stages h and p-1-h (h = min(r, p-1-r))
    both ways, over (l_a, l_b); DualPipeV rank r its chunks r and 2P-1-r, over the rank's total."""
    out, every = {}, np.arange(L + 1)
    for r in range(lk.ranks if lk.schedule is Schedule.DUALPIPEV else lk.ranks // 2):
        a, b = (r, lk.ranks - 1 - r) if lk.schedule is Schedule.DUALPIPE else (r, 2 * lk.ranks - 1 - r)
        for fwd, bwd in ((a, b), (b, a)):
            if lk.schedule is Schedule.DUALPIPE:
                cf, cb = _chunk(lk, fwd, every[:, None]), _chunk(lk, bwd, every[None, :])
            else:
                cf, cb = _chunk(lk, fwd, every), _chunk(lk, bwd, every)
            table = np.asarray(pair_exposed_s(cf, cb, lk.f), float)
            out[(fwd, bwd)] = (table, [np.broadcast_to(p, table.shape) for p in _phases(lk, cf, cb)])
    return out
