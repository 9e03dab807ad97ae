"""The exact pools search (``solver/pools/space.py``) by branch and bound: the same space, the same ranking, far fewer
evaluations (issue 36 finding 8: the plain enumeration of the 8B pools example has ~10^13 leaves).

It is the oracle that checks the CP-SAT stage → pool model (``solver/pools/cpsat.py``), so it shares nothing with
it: every candidate it ranks is priced by the evaluator (``costmodel/evaluation/pools.py: evaluate_pools``) after the same
``least_recompute`` as the plain enumeration, and a subtree is cut only when a lower bound on the step time of
every plan in it exceeds the K-th best step found so far (strictly, after a relative slack of :data:`SLACK` that
covers the bound's own rounding: ties are still evaluated and ranked by peak memory, then enumeration order).

Search: choices ordered by their root bound (a choice whose bound exceeds the incumbent ends the search, the rest
bound no lower); within a choice, stages placed left to right, each child a (pool, layers) pair, children taken
in order of their bound. Ties are broken as the plain enumeration breaks them: by the position of a candidate in
its order (choice index, stage pools, stage layers), lexicographic like its nested loops.

Why the bound is a lower bound (:meth:`_Choice.bound`). The step is ``(m + w_max)·t_max + w_sum·Σ t_i + max dp_i``
(``costmodel/evaluation/ledger.py: step_time``; ``w_sum ≥ 0``, ``m + w_max + w_sum = m ≥ 0``), non-decreasing in every
``t_i`` and ``dp_i``. Each stage's time is :func:`stage_totals` of its pool: the empty stage (its p2p, the first
and last stages' extras) plus per-layer terms linear in its dense and MoE counts plus recompute terms ≥ 0 (the
linear form is checked per choice at a few points, ``_Choice._linear_terms``; where it fails the choice is
searched with the placed stages' bound only), and a stage next to another pool adds ``boundary_p2p_s - p2p_s ≥
0``. So for a placed stage its time at its least fitting recompute count without the crossing is a lower bound
(any count that fits, one N for all stages included, is at least that count, and time does not fall with it;
a stage that fits at no count has no completion); its DP seconds are exact. For the stages not placed, Σ t ≥
the least empty-stage time of each position plus every remaining layer at the least per-layer time of its kind
on a pool with room left; t_max ≥ that sum over their count, and t_max ≥ E + rest/H (``_Choice._fill``: a stage
of time ≤ T on pool k holds at most (T - E)/τ_k layers, E the least empty-stage time left, H the sum of 1/τ_k
over the fastest stage slots the pools' room allows); their DP seconds ≥ 0. With ``m + w_max ≥ 0`` the bound is
``(m + w_max)·T_lb + w_sum·Σ_lb + dp_lb``; otherwise (t_max ≤ Σ t) ``m·Σ_lb + dp_lb``. Every pool's bubble
weights are bounded and the least taken (the step reads the first stage's pool's, equal today). A leaf is priced
by the same formula on its exact stage times (crossings known) before the evaluator is called.

Checked by ``tests/solver/pools/test_bnb.py``: the bound of every prefix of every feasible candidate at most its step,
and the answers equal to the plain enumeration's on random small specs.
"""

from __future__ import annotations

import heapq
import math
from typing import Optional

from parplan.costmodel.compute.architecture import Architecture
from parplan.costmodel.spec.assumptions import Assumptions
from parplan.costmodel.spec.degrees import Choice
from parplan.costmodel.evaluation.ledger import StageTotals, layer_totals, stage_totals
from parplan.costmodel.evaluation.pools import (boundary_p2p_s, evaluate_pools, inter_pool_link, pool_choice_violations,
                                     pool_costs, spec_pools)
from parplan.costmodel.schedules.schedule import stage_bubble_weights
from parplan.costmodel.spec.spec import Plan, Spec
from parplan.solver.deadline import check
from parplan.solver.oracle.levels import least_true
from parplan.solver.pools.space import StageRules, least_recompute, pool_choices, stage_fits

SLACK = 1e-9  # relative: a bound is cut only if bound·(1 - SLACK) > incumbent (float rounding is ~1e-15)
_ROOT = (0.0, 0.0, 0.0, None)  # a search state before any stage (_Choice.child)
LINEAR_TOL = 1e-9  # relative: the per-choice check that stage times are linear in the layer counts


class _Incumbent:
    """The K-th best step among the (choice, stage pools) keys found so far (inf below K keys): a subtree whose
    bound exceeds it holds no plan of the top K (a key's best only falls, the K-th best only falls)."""

    def __init__(self, top_k: int, best: dict):
        self.top_k, self.best, self.value = top_k, best, math.inf

    def cuts(self, bound: float) -> bool:
        return bound * (1.0 - SLACK) > self.value

    def add(self, key, rank, ev, seq) -> None:
        if key not in self.best or rank < self.best[key][0]:
            self.best[key] = (rank, ev, seq)
            if len(self.best) >= self.top_k:
                self.value = heapq.nsmallest(self.top_k, (v[0][0] for v in self.best.values()))[-1]


class _Choice:
    """One choice's pools, costs, per-stage table and bound (module docstring)."""

    def __init__(self, spec: Spec, index: int, c: Choice, a: Assumptions, arch: Architecture, rules: StageRules):
        self.spec, self.index, self.c, self.a, self.arch, self.rules = spec, index, c, a, arch, rules
        self.P, self.L = c.pp, spec.model.num_layers
        moe = spec.model.moe
        self.first_dense = self.L if moe is None else moe.first_dense_layers
        self.costs = pool_costs(spec, c, a, arch)
        per_stage = c.num_gpus // c.pp
        pools = spec_pools(spec)
        # pools this choice may use: its rules hold there (evaluate_pools adds them as violations otherwise)
        self.pools = [k for k in range(len(pools)) if not pool_choice_violations(spec, k, c, a)]
        self.room = [pools[k].num_gpus // per_stage if k in self.pools else 0 for k in range(len(pools))]
        self.plan = Plan.from_choice(c, [self.L // self.P + (1 if i < self.L % self.P else 0) for i in range(self.P)],
                                     [0] * self.P)
        link = inter_pool_link(spec)
        self.cross = [boundary_p2p_s(co, link, a) - co.p2p_s for co in self.costs]
        m = c.num_microbatches
        self.weights = []
        for co in self.costs:
            w_max, w_sum = stage_bubble_weights(co.bubble_s(1.0, a), self.P, a.uneven_stage_bubble)
            self.weights.append((m + w_max, w_sum, m))
        self._table: dict = {}
        self.linear = self._linear_terms()
        self.searchable = sum(self.room) >= self.P and self.P <= self.L and bool(self.pools)

    # ---- per-stage data
    def _linear_terms(self) -> Optional[dict]:
        """Per pool: empty-stage time at each position kind, per-layer dense and MoE times at no recompute; None
        (no bound) if stage times are not that linear form at a few checked points."""
        out = {}
        for k in self.pools:
            co = self.costs[k]
            empty = {i: stage_totals(co, i, 0, 0, 0).time_s for i in {0, min(1, self.P - 1), self.P - 1}}
            tau_d = layer_totals(co.dense, 1, 0).time_s
            tau_e = layer_totals(co.moe, 1, 0).time_s if co.moe is not None else 0.0
            for i in empty:
                for d, e in ((1, 0), (self.L, 0), (0, 1), (3, self.L)):
                    if (e and co.moe is None) or (d and co.dense is None):
                        continue
                    got = stage_totals(co, i, d, e, 0).time_s
                    want = empty[i] + d * tau_d + e * tau_e
                    if abs(got - want) > LINEAR_TOL * max(1.0, abs(got)):
                        return None
            out[k] = (empty, tau_d if co.dense is not None else math.inf, tau_e if co.moe is not None else math.inf)
        return out

    def stage(self, k: int, i: int, d: int, e: int) -> Optional[tuple[float, float, float]]:
        """(time without crossing, time with, dp seconds) of stage ``i`` on pool ``k`` at its least recompute count
        that fits its pool's memory (None: it fits at none)."""
        key = (k, i, d, e)
        if key in self._table:
            return self._table[key]
        co = self.costs[k]
        r = self._least_fitting(co, i, d, e)
        out = None
        if r is not None:
            t: StageTotals = stage_totals(co, i, d, e, r)
            out = (t.time_s, t.time_s + self.cross[k], t.dp_s)
        self._table[key] = out
        return out

    def _least_fitting(self, co, i: int, d: int, e: int) -> Optional[int]:
        """The least recompute count at which the stage fits (``solver/pools/space.py: stage_fits``; None: none does).
        Past zero a stage's memory falls with every recomputed layer wherever each recomputed layer stores less
        than it saves (``layer_totals``: activations ``(n - r)·act + r·act_recomputed``, the recompute workspace
        constant for r ≥ 1, nothing else reads r): then the counts that fit, past zero, are a suffix of 1..n and a
        bisection finds its start; otherwise every count is tried in turn."""
        fits = lambda r: stage_fits(self.plan, co, i, d, e, r)  # noqa: E731
        n = d + e
        if self.c.recompute != "full" or fits(0):
            return 0 if fits(0) else None
        kinds = [lc for lc, cnt in ((co.dense, d), (co.moe, e)) if cnt and lc is not None]
        if not all(lc.act_recomputed_bytes < lc.act_bytes for lc in kinds):
            return next((r for r in range(1, n + 1) if fits(r)), None)
        if n == 0 or not fits(n):
            return None
        return least_true(1, n, fits)

    def classes(self, start: int, n: int) -> tuple[int, int]:
        d = max(0, min(self.first_dense, start + n) - start)
        return d, n - d

    # ---- the bound
    def _empty(self, k: int, i: int) -> float:
        empty = self.linear[k][0]
        return empty[0] if i == 0 else empty[self.P - 1] if i == self.P - 1 else empty[min(1, self.P - 1)]

    def bound(self, i: int, start: int, used: list[int], t_closed: float, s_closed: float, dp: float,
              t_open: float) -> float:
        """A lower bound on the step of every completion of stages ``0..i-1`` (module docstring): ``t_closed`` /
        ``s_closed`` the max / sum of the times of the stages whose both neighbours are placed, ``t_open`` the last
        placed stage's time without crossing (0 if none), ``dp`` the max DP seconds so far."""
        q, rest = self.P - i, self.L - start
        t_max, total = max(t_closed, t_open), s_closed + t_open
        if q and self.linear is not None:
            free = [k for k in self.pools if used[k] < self.room[k]]
            if not free:
                return math.inf
            d, e = self.classes(start, rest)
            empty_min = sum(min(self._empty(k, j) for k in free) for j in range(i, self.P))
            taus = [self._tau(k, d, e) for k in free]
            rest_sum = empty_min + (d * min(self.linear[k][1] for k in free) if d else 0.0) + \
                (e * min(self.linear[k][2] for k in free) if e else 0.0)
            total += rest_sum
            t_max = max(t_max, rest_sum / q, self._fill(i, q, rest, free, taus, used))
        out = math.inf
        for coef_max, w_sum, m in self.weights:
            b = coef_max * t_max + w_sum * total if coef_max >= 0 else m * total
            out = min(out, b + dp)
        return out

    def _tau(self, k: int, d: int, e: int) -> float:
        """Pool ``k``'s least per-layer time over the layer kinds left (``d`` dense, ``e`` MoE)."""
        _, tau_d, tau_e = self.linear[k]
        return min(tau_d if d else math.inf, tau_e if e else math.inf)

    def _fill(self, i: int, q: int, rest: int, free: list[int], taus: list[float], used: list[int]) -> float:
        """A lower bound on the least T at which ``q`` stages, each on a pool with room and of time ≤ T, hold
        ``rest`` layers: a stage on pool k holds at most (T - E)/τ_k layers, E the least empty-stage time of the
        positions left, so q stages hold at most (T - E)·H, H the sum of 1/τ_k over the q fastest stage slots
        (each pool at most its room): T ≥ E + rest/H. No completion (too little room): inf."""
        e0 = min(self._empty(k, j) for k in free for j in range(i, self.P))
        left, h = q, 0.0
        for tau, k in sorted(zip(taus, free)):
            take = min(left, self.room[k] - used[k])
            h += take / tau if tau > 0 else math.inf
            left -= take
            if not left:
                break
        if left:
            return math.inf
        return e0 + rest / h if h < math.inf else e0

    # ---- the search
    def root_bound(self) -> float:
        if not self.searchable:
            return math.inf
        return self.bound(0, 0, [0] * len(self.room), 0.0, 0.0, 0.0, 0.0)

    def search(self, inc: _Incumbent, deadline: Optional[float], cancel) -> None:
        self._dfs(inc, deadline, cancel, [], [], [0] * len(self.room), _ROOT)

    def _split_ok(self, i: int, n: int, layers: list[int]) -> bool:
        split = self.rules.split
        if split == "even":
            return self.L % self.P == 0 and n == self.L // self.P
        if split == "first_last" and 2 <= i <= self.P - 2:
            return n == layers[1]
        return True

    def child(self, seq: list[int], layers: list[int], used: list[int], state: tuple, k: int,
              n: int) -> Optional[tuple[float, tuple]]:
        """Stage ``len(seq)`` placed on pool ``k`` with ``n`` layers after the prefix (``used``: its stages per
        pool, ``state``: its (max and sum of the closed stages' times, max DP seconds, the open stage's (time,
        time crossing, pool, crosses on its left))): (the child's bound, its state), or None where the stage
        breaks the split rule or fits at no recompute count. ``used`` is not changed."""
        i, start = len(seq), sum(layers)
        if not self._split_ok(i, n, layers):
            return None
        st = self.stage(k, i, *self.classes(start, n))
        if st is None:
            return None
        t_closed, s_closed, dp, open_ = state
        if open_ is not None:  # the last placed stage closes: it crosses if either neighbour is elsewhere
            t_prev = open_[1] if open_[3] or open_[2] != k else open_[0]
            t_closed, s_closed = max(t_closed, t_prev), s_closed + t_prev
        left = i > 0 and seq[-1] != k
        dp = max(dp, st[2])
        used[k] += 1
        b = self.bound(i + 1, start + n, used, t_closed, s_closed, dp, st[1] if left else st[0])
        used[k] -= 1
        return b, (t_closed, s_closed, dp, (st[0], st[1], k, left))

    def prefix_bound(self, seq: list[int], layers: list[int]) -> float:
        """The bound the search gives the node of this prefix (stage pools and layers), inf where a stage of it
        is cut by the rules (the tests check it against every completion)."""
        if not seq:
            return self.root_bound()
        used, state, b = [0] * len(self.room), _ROOT, math.inf
        for j, (k, n) in enumerate(zip(seq, layers)):
            if used[k] >= self.room[k] or (got := self.child(seq[:j], layers[:j], used, state, k, n)) is None:
                return math.inf
            (b, state), used[k] = got, used[k] + 1
        return b

    def _dfs(self, inc: _Incumbent, deadline, cancel, seq: list[int], layers: list[int], used: list[int],
             state: tuple) -> None:
        check(deadline, cancel)
        i, start = len(seq), sum(layers)
        if i == self.P:
            t_closed, s_closed, dp, open_ = state
            t_last = open_[1] if open_[3] else open_[0]
            self._leaf(inc, seq, layers, max(t_closed, t_last), s_closed + t_last, dp)
            return
        q, rest = self.P - i, self.L - start
        sizes = [rest] if q == 1 else range(1, rest - q + 2)
        children = []
        for k in self.pools:
            if used[k] >= self.room[k]:
                continue
            for n in sizes:
                got = self.child(seq, layers, used, state, k, n)
                if got is not None and not inc.cuts(got[0]):
                    children.append((got[0], k, n, got[1]))
        children.sort(key=lambda ch: ch[:3])
        for b, k, n, child_state in children:
            if inc.cuts(b):
                break  # sorted: the rest bound no lower
            used[k] += 1
            seq.append(k)
            layers.append(n)
            self._dfs(inc, deadline, cancel, seq, layers, used, child_state)
            seq.pop()
            layers.pop()
            used[k] -= 1

    def _leaf(self, inc: _Incumbent, seq: list[int], layers: list[int], t_max: float, total: float,
              dp: float) -> None:
        coef_max, w_sum, m = self.weights[seq[0]]
        if self.linear is not None and inc.cuts(coef_max * t_max + w_sum * total + dp):
            return
        if not self.rules.split_ok(tuple(layers)):
            return
        c, spec = self.c, self.spec
        r = least_recompute(spec, c, tuple(seq), tuple(layers), self.costs, self.a, self.rules.uniform_recompute)
        if r is None:
            return
        ev = evaluate_pools(spec, Plan.from_choice(c, list(layers), r), list(seq), assumptions=self.a,
                            costs=self.costs, arch=self.arch)
        if ev.violations:
            return
        rank = (ev.metrics.step_time_s, ev.metrics.peak_memory_gib, (self.index, tuple(seq), tuple(layers)))
        inc.add((c, tuple(seq)), rank, ev, tuple(seq))


def branch_and_bound(spec: Spec, a: Assumptions, best: dict, top_k: int, deadline: Optional[float], cancel,
                     counts: Optional[list[int]] = None) -> None:
    """Fill ``best`` ((choice, stage pools) -> (rank, evaluation, stage pools)) with every key that can be among
    the ``top_k`` best, each with its best plan (module docstring); raises TimeUp (``best`` holding what was
    found) past the deadline or on cancel. ``counts``: set to [choices, choices searched] as it goes."""
    counts = counts if counts is not None else [0, 0]
    counts[:] = [0, 0]
    rules = StageRules.of(spec)
    arch = Architecture(spec.model)
    entries = []
    for index, c in enumerate(pool_choices(spec, a)):
        check(deadline, cancel)
        ch = _Choice(spec, index, c, a, arch, rules)
        entries.append((ch.root_bound(), index, ch))
        counts[0] += 1
    entries.sort(key=lambda e: e[:2])
    inc = _Incumbent(top_k, best)
    for root, _, ch in entries:
        if root == math.inf and ch.searchable is False:
            continue
        if inc.cuts(root):
            break
        counts[1] += 1
        ch.search(inc, deadline, cancel)
