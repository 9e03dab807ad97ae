"""The exact per-choice stage solver: ``--method exhaustive`` and the oracle the CP-SAT model is tested against.

For one choice (a :class:`StageTable`) and a memory cap it finds the least objective
``U = M·max_u time_u + S·Σ_u time_u + W·max_u dp_u`` over every layer split and recompute count the table
allows, exactly (S weighs the uneven-stage bubble, ``costmodel/bubble.py``; per-layer times are the same on
every unit, so Σ_u time_u is one constant over the splits unless each unit's least recompute varies with it):

* A unit's least time at ``l`` layers takes the fewest recomputed layers that fit the cap (recomputation adds
  time and saves memory; cpsat-modeling.md §2.7), so ``time_u(l)`` and ``dp_u(l)`` are nondecreasing in ``l``.
* ``per_stage``: a slowest-unit time τ and DP time δ admit a split iff every unit fits its least layer count
  and the units' largest counts under (τ, δ) add up to the model's layers. The least such τ is the
  (K + n)-th smallest of all units' times pooled (K: grid steps to hand out beyond the minima), the least δ
  at a τ follows by bisection, and only the τ at which some unit's count grows can lower U further: they are
  walked in order until ``M·τ`` alone reaches the best U. Where Σ_u time_u varies, each (τ, δ) also takes the
  least Σ under the units' count caps, a min-plus knapsack (:func:`least_sum`, over the steps beyond each
  unit's recompute-free count), and δ walks up at each τ through the values at which a DP-bound unit's count
  grows (:meth:`_Solver._per_stage_walk_sums`).
* ``first_last``: the middle units share a count; every (first, middle) pair is enumerated.
* ``even``: the split is fixed; each unit takes its least recompute.
* ``uniform_recompute``: every stage recomputes the same count r; each r is solved as a fixed-recompute table.

Ties: among splits of equal U the least peak memory wins (bisection on the cap with U held), then the most
balanced split (middle stages first). :func:`brute_force` enumerates every assignment of tiny tables for tests.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from typing import Optional

import numpy as np

from parplan.solver import cpsat
from parplan.solver.deadline import TimeUp, check
from parplan.solver.tables import (Assignment, StageTable, assignment_violations, evaluate_assignment,
                                   uniform_layers_min, uniform_parts)

INF = np.int64(1) << np.int64(62)
POOLED_LIMIT = 4_000_000  # unit × layer-count entries the tables may hold; larger tables are solved by bisection


@dataclass(frozen=True)
class RowSolution:
    """The best assignment of one choice under a cap: its objective, peak memory and the assignment."""

    U: int
    peak_kib: int
    x: Assignment


def _ceil_div(a: np.ndarray, b: int) -> np.ndarray:
    return -(-a // b)


class UnitCosts:
    """Vectorized unit costs of a table under one memory cap (and optionally a fixed per-stage recompute)."""

    def __init__(self, t: StageTable, cap_kib: int, r_stage: Optional[int] = None):
        """``r_stage``: every stage recomputes exactly this many layers (uniform recompute); None: each unit
        its least. Without full recomputation nothing is recomputed."""
        self.t, self.cap = t, cap_kib
        full = t.choice.recompute == "full" and not t.recompute_all  # recompute_all: folded into the table
        self.fixed_recompute = r_stage is not None or not full
        if full and r_stage is not None:
            self.lo = uniform_layers_min(t, r_stage)
            self.fixed_dense, self.fixed_moe = uniform_parts(t, r_stage)
        else:
            self.lo = t.layers_min.copy()
            self.fixed_dense, self.fixed_moe = 0, np.zeros(t.num_units, np.int64)

    def at(self, l: np.ndarray):
        """(time, dp, dense, moe) per entry of ``l`` (shape (n,) or (n, Q)); time INF where nothing fits.

        A unit's least recompute: none if it fits without; else the fewest layers whose savings cover the
        excess plus the working set of each stage that then recomputes (a DualPipe rank recomputes on its
        first stage until that is full, then on its second: one working set, then two)."""
        t = self.t
        shape = l.shape
        col = (slice(None),) + (None,) * (len(shape) - 1)
        tl, tc, ml, mc = t.t_layer[col], t.t_const[col], t.m_layer[col], t.m_const[col]
        ms, tr = t.m_saved[col], t.t_recompute[col]
        ws = t.m_workspace
        lo = self.lo[col]
        base_time = tl * l + tc
        need = ml * l + mc - self.cap  # excess over the cap without recomputation
        dense = np.zeros(shape, np.int64)
        if self.fixed_recompute:
            moe = np.broadcast_to(self.fixed_moe[col], shape).copy()
            dense[0] = self.fixed_dense
            saved = ms * moe
            saved[0] += t.m_saved_dense * self.fixed_dense
            holding = t.members if (self.fixed_dense or self.fixed_moe.any()) else 0
            ok = need - saved + ws * holding <= 0
            time_ = base_time + tr * moe
            time_[0] += t.t_recompute_dense * self.fixed_dense
        else:
            def least(excess):
                with np.errstate(divide="ignore", invalid="ignore"):
                    return np.where(ms > 0, _ceil_div(np.maximum(excess, 0), np.maximum(ms, 1)), INF)
            if t.dualpipe:
                first_stage = l // 2 if t.layers_fixed is not None else (l + 1) // 2
                one, two = least(need + ws), least(need + 2 * ws)
                moe = np.where(need <= 0, 0, np.where(one <= first_stage, one, two))
            else:
                moe = np.where(need <= 0, 0, least(need + ws))
            ok = moe <= l
            time_ = base_time + tr * np.minimum(moe, l)
            if t.k_dense:
                d0, m0, ok0, t0 = self._unit0(l[0], need[0])
                dense[0], moe[0], ok[0], time_[0] = d0, m0, ok0, t0
        ok &= l >= lo
        dp = t.dp_layer[col] * l + t.dp_const[col]
        return np.where(ok, time_, INF), dp, dense, moe

    def _unit0(self, l0: np.ndarray, need0: np.ndarray):
        """Unit 0 of an MoE model: dense layers (≤ k, first on a plain stage 0) and MoE layers recomputed."""
        t = self.t
        k, s1, r1, s2, r2 = t.k_dense, t.m_saved_dense, t.t_recompute_dense, int(t.m_saved[0]), int(t.t_recompute[0])
        ws = t.m_workspace
        base = t.t_layer[0] * l0 + t.t_const[0]
        moe_room = l0 - k

        def div(a, b):
            return np.where(a <= 0, 0, _ceil_div(np.maximum(a, 0), b) if b > 0 else INF)

        if t.dense_first:  # a plain stage 0: the working set once, dense layers first
            need = np.where(need0 <= 0, 0, need0 + ws)
            d_only = div(need, s1)
            use_dense_only = d_only <= k
            d = np.where(use_dense_only, d_only, k)
            m = np.where(use_dense_only, 0, div(need - k * s1, s2))
            ok = m <= moe_room
            tt = base + r1 * d + r2 * np.minimum(m, np.maximum(moe_room, 0))
            return d, m, ok, np.where(ok, tt, INF)
        best_t = np.full(l0.shape, INF, np.int64)
        best_d = np.zeros(l0.shape, np.int64)
        best_m = np.zeros(l0.shape, np.int64)
        for d in range(k + 1):  # DualPipe rank 0: dense on stage 0, MoE on stage p-1 (each its working set)
            rest = need0 + (ws if d else 0) - d * s1
            m = np.where(need0 <= 0, 0, div(np.where(rest <= 0, 0, rest + ws), s2))
            if d:
                m = np.where(need0 <= 0, INF, m)  # nothing to recompute: d = 0 is the answer
            ok = (m <= moe_room) & ((d == k) | (m <= t.free_moe_recompute))
            tt = np.where(ok, base + r1 * d + r2 * np.minimum(m, np.maximum(moe_room, 0)), INF)
            better = tt < best_t
            best_t = np.where(better, tt, best_t)
            best_d = np.where(better, d, best_d)
            best_m = np.where(better, m, best_m)
        return best_d, best_m, best_t < INF, best_t


def fill_order(n: int) -> list[int]:
    """Units in the order extra layers go to them: middle first (the ends carry embedding and head)."""
    return sorted(range(n), key=lambda i: (abs(i - (n - 1) / 2), i))


class _Solver:
    """The exact solve of one table, for one cap and (if uniform) one per-stage recompute count."""

    def __init__(self, t: StageTable, deadline: Optional[float], target: Optional[int] = None):
        """``target``: only whether some assignment reaches U ≤ target matters (the walk stops there)."""
        self.t, self.deadline, self.target = t, deadline, target

    def _done(self, best_U: int, next_U_floor: int) -> bool:
        """Stop walking τ: nothing further can beat the best, or the target is already met or out of reach."""
        if next_U_floor >= best_U:
            return True
        return self.target is not None and (best_U <= self.target or next_U_floor > self.target)

    # ---------------------------------------------------------------- per_stage
    def per_stage(self, units: UnitCosts) -> Optional[tuple[int, Assignment]]:
        t = self.t
        n, g, L = t.num_units, t.grid, t.num_layers
        lo = units.lo
        spare = L - int(lo.sum())
        if spare < 0 or spare % g:
            return None
        K = spare // g
        Q = K + 1
        varies = self._sum_varies(units)
        if n * Q <= POOLED_LIMIT:
            try:
                return self._per_stage_pooled(units, K)
            except KnapsackTooLarge:
                return self._per_stage_cpsat(units)
        return self._per_stage_cpsat(units) if varies else self._per_stage_bisect(units, K)

    def _per_stage_cpsat(self, units: UnitCosts):
        """Tables whose summed-time walk would not fit in memory (a knapsack over more than
        :data:`KNAPSACK_LIMIT` entries, e.g. 10^6 layers under memory pressure): the same exact answer from the
        CP-SAT model of the table, one worker, within the deadline (past it: :class:`TimeUp`)."""
        left = 3600.0 if self.deadline is None else self.deadline - time.perf_counter()
        if left <= 0:
            raise TimeUp()
        out = cpsat.solve(self.t, units.cap, cpsat.SolverControls(workers=1, deterministic=True), left)
        if out.status == "INFEASIBLE":
            return None
        if out.status != "OPTIMAL":
            raise TimeUp()
        return out.value, out.x

    def _sum_varies(self, units: UnitCosts) -> bool:
        """Whether Σ_u time_u depends on the split: only through each unit's least recompute, and only when the
        objective weighs it (S > 0). Per-layer times are the same on every unit (tables.build_table), so with
        the recompute fixed Σ_u time_u is one constant over every split (:meth:`_fixed_sum`)."""
        return bool(self.t.S) and not units.fixed_recompute

    def _fixed_sum(self, T0: np.ndarray, K: int) -> int:
        """Σ_u time_u of every split when it does not vary: the least counts' times plus K grid steps of layers."""
        return int(T0.sum()) + int(self.t.t_layer[0]) * self.t.grid * K

    def _per_stage_pooled(self, units: UnitCosts, K: int):
        t = self.t
        n, g = t.num_units, t.grid
        q = np.arange(K + 1, dtype=np.int64)
        l = units.lo[:, None] + g * q[None, :]
        T, DP, _, _ = units.at(l)
        T = np.maximum.accumulate(T, axis=1)  # nondecreasing by construction; enforced against rounding
        check(self.deadline)
        if (T[:, 0] >= INF).any():
            return None
        counts_max = (T < INF).sum(axis=1)
        if int((counts_max - 1).sum()) < K:
            return None
        flat = T[T < INF]
        kth = np.partition(flat, K + n - 1)[K + n - 1]
        tau = max(int(kth), int(T[:, 0].max()))
        dp_layer, dp0 = t.dp_layer, DP[:, 0]

        step = dp_layer * g
        flat_dp, has_step, step_safe = bool((dp_layer == 0).all()), step > 0, np.maximum(step, 1)

        def dp_counts(delta: int) -> np.ndarray:
            """Per unit, how many counts have a DP time within ``delta`` (DP times are affine in the count)."""
            within = np.where(dp0 <= delta, K + 1, 0)
            if flat_dp:
                return within
            c = np.where(has_step, (delta - dp0) // step_safe + 1, within)
            return np.minimum(np.maximum(c, 0), K + 1)

        dp_values = np.unique(DP)  # the least δ is one of them: the counts change only there

        def delta_min(cT: np.ndarray) -> int:
            def fits(i: int) -> bool:
                c = np.minimum(cT, dp_counts(int(dp_values[i])))
                return int((c - 1).sum()) >= K and bool((c >= 1).all())
            lo_i, hi_i = np.searchsorted(dp_values, [dp0.max(), DP[:, -1].max()])
            return int(dp_values[least_true(int(lo_i), int(hi_i), fits)])

        cT_full = counts_max
        d_floor = delta_min(cT_full)
        if self._sum_varies(units):
            return self._per_stage_walk_sums(units, K, T, DP, tau, d_floor, delta_min, dp_counts)
        t_sum = self._fixed_sum(T[:, 0], K) if t.S else 0
        best = None
        while True:
            check(self.deadline)
            cT = (T <= tau).sum(axis=1)
            d = delta_min(cT)
            U = t.objective(tau, d, t_sum)
            if best is None or U < best[0]:
                best = (U, tau, d)
            nxt = [int(T[u, cT[u]]) for u in range(n) if cT[u] <= K and T[u, cT[u]] < INF]
            if not nxt:
                break
            tau = min(nxt)
            if self._done(best[0], t.objective(tau, d_floor, t_sum)):
                break
        U, tau, d = best
        caps = np.minimum((T <= tau).sum(axis=1), dp_counts(d)) - 1
        steps = fill_levels(caps, K, fill_order(n))
        layers = units.lo + g * steps
        return U, self._assign(units, layers)

    def _per_stage_walk_sums(self, units: UnitCosts, K: int, T: np.ndarray, DP: np.ndarray, tau: int,
                             d_floor: int, delta_min, dp_counts):
        """The τ-walk when U also weighs Σ_u time_u and that sum depends on the split (each unit's least
        recompute): at each (τ, δ) the caps of the units' counts are known and the least Σ under them is a
        min-plus knapsack (:func:`least_sum`). τ walks as in the plain walk; at each τ, δ walks up from its least
        value through the values at which some DP-bound unit's count grows. Both stop once the objective's
        floor (M·τ + S·least Σ + W·δ) reaches the best U: the least Σ over all caps bounds every τ, the least Σ
        at τ every δ of it."""
        t = self.t
        n, g = t.num_units, t.grid
        free = free_steps(T, int(t.t_layer[0]) * g)
        sums: dict[bytes, int] = {}  # least Σ by the caps it was taken under (the walks revisit caps)

        def least(caps: np.ndarray) -> int:
            key = caps.tobytes()
            if key not in sums:
                sums[key] = least_sum(T, caps, K, free=free, split=False)[0]
            return sums[key]

        sum_floor = least((T < INF).sum(axis=1) - 1)
        best = None  # (U, tau, d)
        while True:
            check(self.deadline)
            cT = (T <= tau).sum(axis=1)
            sum_tau = least(cT - 1)
            d = delta_min(cT)
            while best is None or t.objective(tau, d, sum_tau) < best[0]:
                check(self.deadline)
                dc = dp_counts(d)
                total = least(np.minimum(cT, dc) - 1)
                if total < LEAST_SUM_NONE:
                    U = t.objective(tau, d, total)
                    if best is None or U < best[0]:
                        best = (U, tau, d)
                grow = [int(DP[u, dc[u]]) for u in range(n) if dc[u] < cT[u]]
                if not grow or (self.target is not None and best is not None and best[0] <= self.target):
                    break
                d = min(grow)
            nxt = [int(T[u, cT[u]]) for u in range(n) if cT[u] <= K and T[u, cT[u]] < INF]
            if not nxt:
                break
            tau = min(nxt)
            if best is not None and self._done(best[0], t.objective(tau, d_floor, sum_floor)):
                break
        if best is None:
            return None
        U, tau, d = best
        caps = np.minimum((T <= tau).sum(axis=1), dp_counts(d)) - 1
        _, steps = least_sum(T, caps, K, units.lo, g, free)
        return U, self._assign(units, units.lo + g * steps)

    def _per_stage_bisect(self, units: UnitCosts, K: int):
        """The same answer for tables too large to hold: per-unit counts by bisection on the layer count."""
        t = self.t
        n, g = t.num_units, t.grid

        def time_dp(qs: np.ndarray):
            T, DP, _, _ = units.at(units.lo + g * qs)
            return T, DP

        def count(limit_t: int, limit_d: int) -> np.ndarray:
            lo_q = np.full(n, -1, np.int64)
            hi_q = np.full(n, K, np.int64)
            while (lo_q < hi_q).any():
                check(self.deadline)
                mid = (lo_q + hi_q + 1) // 2
                T, DP = time_dp(np.maximum(mid, 0))
                ok = (T <= limit_t) & (DP <= limit_d)
                lo_q = np.where(lo_q < hi_q, np.where(ok, mid, lo_q), lo_q)
                hi_q = np.where(lo_q < hi_q, np.where(ok, hi_q, mid - 1), hi_q)
            return lo_q + 1

        def feasible(limit_t: int, limit_d: int) -> bool:
            c = count(limit_t, limit_d)
            return bool((c >= 1).all() and int((c - 1).sum()) >= K)

        T0, DP0 = time_dp(np.zeros(n, np.int64))
        if (T0 >= INF).any():
            return None
        Tmax, DPmax = time_dp(np.full(n, K, np.int64))
        big = int(INF) - 1
        if not feasible(big, big):
            return None
        d_top = int(DPmax.max())

        def tau_min(limit_d: int) -> int:
            hi_t = int(time_dp(np.maximum(count(big, limit_d) - 1, 0))[0].max())
            return least_true(int(T0.max()), hi_t, lambda tau: feasible(tau, limit_d))

        def d_min(limit_t: int) -> int:
            return least_true(int(DP0.max()), d_top, lambda d: feasible(limit_t, d))

        tau = tau_min(d_top)
        d_floor = d_min(big)
        d = d_min(tau)
        t_sum = self._fixed_sum(T0, K) if t.S else 0  # per_stage sends varying sums to the pooled walk
        best = (t.objective(tau, d, t_sum), tau, d)
        while True:
            c = count(tau, big)
            T, _ = time_dp(np.minimum(c, K))
            nxt = [int(T[u]) for u in range(n) if c[u] <= K and T[u] < INF]
            if not nxt:
                break
            tau = min(nxt)
            if self._done(best[0], t.objective(tau, d_floor, t_sum)):
                break
            d = d_min(tau)
            U = t.objective(tau, d, t_sum)
            if U < best[0]:
                best = (U, tau, d)
        U, tau, d = best
        caps = count(tau, d) - 1
        steps = fill_levels(caps, K, fill_order(n))
        return U, self._assign(units, units.lo + g * steps)

    # ---------------------------------------------------------------- first_last and even
    def grouped(self, units: UnitCosts) -> Optional[tuple[int, Assignment]]:
        """first_last (middle units share layers and recompute) and even (layers fixed)."""
        t = self.t
        n, g, L = t.num_units, t.grid, t.num_layers
        if t.layers_fixed is not None:
            layers = t.layers_fixed
            if (layers < units.lo).any() or int(layers.sum()) != L or (layers % g).any():
                return None
            x = self._assign(units, layers)
            if x is None:
                return None
            return evaluate_assignment(t, x)[0], x
        if n <= 2 if not t.one_end else n <= 1:
            return self.per_stage(units)
        mid = list(range(1, n - 1)) if not t.one_end else list(range(1, n))
        ends = [0, n - 1] if not t.one_end else [0]
        lo = units.lo
        lo_mid = int(lo[mid].max())
        spare = L - int(lo[ends].sum()) - len(mid) * lo_mid
        if spare < 0 or spare % g:
            return None
        K = spare // g
        q = np.arange(K + 1, dtype=np.int64)
        l_end = lo[ends][:, None] + g * q[None, :]
        l_mid = lo_mid + g * q[: K // len(mid) + 1]
        Te, De, _, _ = self._at_rows(units, ends, l_end)
        Tm, Dm, Tm_sum = self._group(units, mid, l_mid)
        check(self.deadline)
        best = None
        for qm in range(len(l_mid)):
            if Tm[qm] >= INF:
                break
            rest = K - len(mid) * qm
            if rest < 0:
                break
            if len(ends) == 1:
                qf = np.array([rest])
                if rest > K:
                    continue
                tmax = np.maximum(Te[0, qf], Tm[qm])
                dmax = np.maximum(De[0, qf], Dm[qm])
                ql = None
            else:
                qf = np.arange(0, rest + 1)
                ql = rest - qf
                tmax = np.maximum(np.maximum(Te[0, qf], Te[1, ql]), Tm[qm])
                dmax = np.maximum(np.maximum(De[0, qf], De[1, ql]), Dm[qm])
            ok = tmax < INF
            if not ok.any():
                continue
            idx = np.nonzero(ok)[0]
            tsum = Te[0, qf[idx]] + Tm_sum[qm] + (Te[1, ql[idx]] if ql is not None else 0)
            if (self.t.M * int(tmax[idx].max()) + self.t.S * int(tsum.max())
                    + self.t.scale.weight * int(dmax[idx].max()) < (1 << 62)):
                Uv = self.t.M * tmax[idx] + self.t.S * tsum + self.t.scale.weight * dmax[idx]
                cand = list(zip(Uv.tolist(), idx.tolist()))
            else:
                cand = [(self.t.objective(int(tmax[i]), int(dmax[i]), int(ts)), int(i)) for i, ts in zip(idx, tsum)]
            Ub, i = min(cand, key=lambda c: (c[0], abs(int(qf[c[1]]) - (int(ql[c[1]]) if ql is not None else 0)), c[1]))
            if best is None or Ub < best[0]:
                layers = np.zeros(n, np.int64)
                layers[mid] = l_mid[qm]
                layers[ends[0]] = lo[ends[0]] + g * int(qf[i])
                if ql is not None:
                    layers[ends[1]] = lo[ends[1]] + g * int(ql[i])
                best = (Ub, layers)
        if best is None:
            return None
        x = self._assign(units, best[1])
        return (evaluate_assignment(t, x)[0], x) if x is not None else None

    def _at_rows(self, units: UnitCosts, rows: list[int], l: np.ndarray):
        full = np.zeros((self.t.num_units, l.shape[1]), np.int64)
        full[:] = units.lo[:, None]
        full[rows] = l
        T, D, dn, mo = units.at(full)
        return T[rows], D[rows], dn[rows], mo[rows]

    def _group(self, units: UnitCosts, rows: list[int], l: np.ndarray):
        """Slowest time, DP time and summed time of a group sharing layer count ``l`` and one recompute count
        (the largest any needs); the sum is only meaningful where the slowest time is finite."""
        t = self.t
        full = np.zeros((t.num_units, len(l)), np.int64)
        full[:] = units.lo[:, None]
        full[rows] = l[None, :]
        T, D, _, moe = units.at(full)
        if units.fixed_recompute:
            ok = (T[rows] < INF).all(axis=0)
            return T[rows].max(axis=0), D[rows].max(axis=0), np.where(ok, np.where(ok, T[rows], 0).sum(axis=0), 0)
        shared = moe[rows].max(axis=0)
        ok = (T[rows] < INF).all(axis=0) & (shared <= l)
        times = (t.t_layer[rows][:, None] * l[None, :] + t.t_const[rows][:, None]
                 + t.t_recompute[rows][:, None] * np.minimum(shared, l)[None, :])
        return np.where(ok, times.max(axis=0), INF), D[rows].max(axis=0), np.where(ok, times.sum(axis=0), 0)

    # ---------------------------------------------------------------- shared
    def _assign(self, units: UnitCosts, layers: np.ndarray) -> Optional[Assignment]:
        T, _, dense, moe = units.at(np.asarray(layers, np.int64))
        if (T >= INF).any():
            return None
        moe = moe.copy()
        if self.t.split == "first_last" and not units.fixed_recompute and self.t.num_units >= 3:
            mid = list(range(1, self.t.num_units - 1)) if not self.t.one_end else list(range(1, self.t.num_units))
            moe[mid] = moe[mid].max()
        return Assignment(tuple(int(v) for v in layers), tuple(int(v) for v in moe), int(dense[0]))

    def best_at(self, cap_kib: int) -> Optional[RowSolution]:
        """The least U under ``cap_kib`` (then the least peak at that cap's U is chosen by the caller)."""
        t = self.t
        solve = self.per_stage if t.split == "per_stage" else self.grouped
        if t.uniform_recompute and t.choice.recompute == "full" and not t.recompute_all:
            best = None
            r_hi = t.num_layers // (t.choice.pp if t.choice.pp else 1)
            for r in range(0, r_hi + 1, t.recompute_step):
                check(self.deadline)
                got = solve(UnitCosts(t, cap_kib, r_stage=r))
                if got is not None and (best is None or got[0] < best[0]):
                    best = got
            got = best
        else:
            got = solve(UnitCosts(t, cap_kib, r_stage=0 if t.choice.recompute != "full" or t.recompute_all else None))
        if got is None:
            return None
        U, x = got
        U2, peak = evaluate_assignment(t, x)
        assert U2 == U, (U2, U)
        return RowSolution(U, peak, x)


LEAST_SUM_NONE = np.int64(1) << np.int64(60)  # least_sum's value where no split meets the caps
KNAPSACK_LIMIT = 30_000_000  # entries one least_sum may form; beyond, the table goes to CP-SAT


class KnapsackTooLarge(Exception):
    """A least_sum over more than :data:`KNAPSACK_LIMIT` entries."""


def free_steps(T: np.ndarray, slope: int) -> np.ndarray:
    """Per unit, the largest count q up to which its time grows by ``slope`` a step and no more (no recompute)."""
    q = np.arange(T.shape[1], dtype=np.int64)
    linear = T == T[:, :1] + slope * q[None, :]
    return np.cumprod(linear, axis=1).sum(axis=1) - 1


def least_sum(T: np.ndarray, caps: np.ndarray, K: int, lo: Optional[np.ndarray] = None,
              grid: int = 1, free: Optional[np.ndarray] = None, split: bool = True) -> tuple[int, np.ndarray]:
    """The least Σ_u T[u, q_u] over counts q_u ∈ [0, caps[u]] with Σ_u q_u = K, and one such q (a min-plus
    knapsack over the units, exact; :data:`LEAST_SUM_NONE` where no q meets the caps). Ties go to the split of
    least Σ_u layers_u² (layers_u = lo_u + grid·q_u: as level as the sums allow).

    ``free`` (:func:`free_steps`): where every unit's time grows by one common slope a step up to ``free[u]``
    and by at least that slope beyond, some least split gives every unit at least min(free, caps) steps
    (moving a step from a unit above it to one below it never adds time), so only the steps beyond those
    floors are searched; when the floors hold all K steps the split is the most level fill of them.
    ``split=False``: the least Σ alone (no split returned, no tie-break: the walks' bounds)."""
    n = T.shape[0]
    none = LEAST_SUM_NONE
    caps = np.minimum(np.asarray(caps, np.int64), K)
    if (caps < 0).any() or int(caps.sum()) < K:
        return int(none), np.zeros(n, np.int64)
    if free is not None:
        floor = np.minimum(np.asarray(free, np.int64), caps)
        rest = K - int(floor.sum())
        if rest <= 0:
            steps = fill_levels(floor, K, fill_order(n))
            return int(T[np.arange(n), steps].sum()), steps
        rows = np.arange(n)[:, None]
        width = int((caps - floor).max()) + 1
        cols = np.minimum(floor[:, None] + np.arange(width)[None, :], T.shape[1] - 1)
        shifted = np.where(np.arange(width)[None, :] <= (caps - floor)[:, None], T[rows, cols], INF)
        lo_shift = (np.zeros(n, np.int64) if lo is None else np.asarray(lo, np.int64)) + grid * floor
        total, extra = least_sum(shifted, caps - floor, rest, lo_shift, grid, split=split)
        return total, floor + extra
    if n * (K + 1) * (int(caps.max()) + 1) > KNAPSACK_LIMIT:
        raise KnapsackTooLarge()
    if not split:
        return _least_sum_value(T, caps, K), np.zeros(n, np.int64)
    base = np.zeros(n, np.int64) if lo is None else np.asarray(lo, np.int64)
    vals = np.where(T[:, :K + 1] >= INF, none, T[:, :K + 1])
    j = np.arange(K + 1)
    f = np.full(K + 1, none, np.int64)
    f[:caps[0] + 1] = vals[0, :caps[0] + 1]
    sq = np.full(K + 1, none, np.int64)
    sq[:caps[0] + 1] = (base[0] + grid * j[:caps[0] + 1]) ** 2
    picks = []
    for u in range(1, n):
        q = np.arange(caps[u] + 1)
        prev = j[:, None] - q[None, :]
        valid = prev >= 0
        at = np.maximum(prev, 0)
        cand = np.where(valid, np.minimum(f[at] + vals[u, q][None, :], none), none)
        cand_sq = np.where(valid, sq[at] + ((base[u] + grid * q) ** 2)[None, :], none)
        least = cand.min(axis=1)
        arg = np.where(cand == least[:, None], cand_sq, np.iinfo(np.int64).max).argmin(axis=1)
        f, sq = least, np.where(least < none, cand_sq[j, arg], none)
        picks.append(arg)
    if f[K] >= none:
        return int(none), np.zeros(n, np.int64)
    steps = np.zeros(n, np.int64)
    rest = K
    for u in range(n - 1, 0, -1):
        steps[u] = picks[u - 1][rest]
        rest -= int(steps[u])
    steps[0] = rest
    return int(f[K]), steps


def _least_sum_value(T: np.ndarray, caps: np.ndarray, K: int) -> int:
    """:func:`least_sum`'s value alone: the min-plus convolution of the units' capped rows, five array operations
    a unit."""
    none = LEAST_SUM_NONE
    n, width = T.shape[0], int(caps.max()) + 1
    cols = np.arange(width)
    vals = np.full((n, width), none, np.int64)
    have = min(width, T.shape[1])
    vals[:, :have] = np.where(T[:, :have] >= INF, none, T[:, :have])
    rows = np.where(cols[None, :] <= caps[:, None], vals, none)
    idx = (width - 1) + np.arange(K + 1)[:, None] - cols[None, :]  # f[j - q], the pad where q > j
    pad = np.full(width - 1, none, np.int64)
    f = np.full(K + 1, none, np.int64)
    f[:min(width, K + 1)] = rows[0, :min(width, K + 1)]
    for u in range(1, n):
        f = np.minimum((np.concatenate((pad, f))[idx] + rows[u][None, :]).min(axis=1), none)
    return int(f[K])


def least_true(lo: int, hi: int, ok) -> int:
    """The least integer in [lo, hi] for which the monotone predicate ``ok`` holds (``ok(hi)`` is assumed)."""
    while lo < hi:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid + 1
    return hi


def fill_levels(caps: np.ndarray, K: int, order: list[int]) -> np.ndarray:
    """Hand out K grid steps, each unit at most caps[u]: as level as possible, remainders in ``order``."""
    caps = np.maximum(caps, 0)
    lam = least_true(0, int(caps.max()) if len(caps) else 0, lambda level: int(np.minimum(caps, level).sum()) >= K)
    steps = np.minimum(caps, max(lam - 1, 0))
    rest = K - int(steps.sum())
    for u in order:
        if rest <= 0:
            break
        if caps[u] > steps[u]:
            steps[u] += 1
            rest -= 1
    assert rest == 0, (caps, K)
    return steps


def solve_table(t: StageTable, cap_kib: int, deadline: Optional[float] = None) -> Optional[RowSolution]:
    """Least-U assignment of one choice under ``cap_kib`` (None if nothing fits). Raises :class:`TimeUp` past
    ``deadline``. Its peak is that assignment's; :func:`least_peak` finds the least peak at that U."""
    return _Solver(t, deadline).best_at(cap_kib)


def peak_mib(peak_kib: int) -> int:
    """Peak memory in whole MiB, rounded up: the resolution at which ties between plans are broken."""
    return -(-int(peak_kib) // 1024)


def least_peak(t: StageTable, cap_kib: int, best: RowSolution, deadline: Optional[float] = None) -> RowSolution:
    """Among the assignments of U = ``best.U`` under ``cap_kib``, one of least peak memory in MiB (bisection on
    the cap: the least cap whose least U is still ``best.U``)."""
    s = _Solver(t, deadline, target=best.U)
    lo, hi, top = 0, min(peak_mib(best.peak_kib), cap_kib // 1024), best
    if peak_mib(best.peak_kib) > cap_kib // 1024:
        return best  # the cap itself is not a whole MiB: nothing lower to look for at MiB resolution
    while lo < hi:
        mid = (lo + hi) // 2
        got = s.best_at(mid * 1024)
        if got is not None and got.U <= best.U:
            hi, top = mid, got
        else:
            lo = mid + 1
    return top


def brute_force(t: StageTable, cap_kib: int) -> Optional[tuple[int, int]]:
    """(least U, least peak in MiB at that U) over every assignment of a tiny table, for tests."""
    n, L, k = t.num_units, t.num_layers, t.k_dense
    best = None
    values = range(0, L + 1)
    for layers in itertools.product(values, repeat=n):
        if sum(layers) != L:
            continue
        ranges = [range(0, layers[u] + 1) for u in range(n)]
        for rec in itertools.product(*ranges):
            for dense in range(0, k + 1) if k and t.choice.recompute == "full" else [0]:
                x = Assignment(tuple(layers), tuple(rec), dense)
                if assignment_violations(t, x, cap_kib):
                    continue
                U, peak = evaluate_assignment(t, x)
                if best is None or (U, peak_mib(peak)) < best:
                    best = (U, peak_mib(peak))
    return best
