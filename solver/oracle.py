"""The exact per-choice stage solver: ``--method exhaustive`` and the oracle the CP-SAT model is tested against.

For one choice (a :class:`StageTable`) and a memory cap it finds the least objective
``U = M·max_u time_u + W·max_u dp_u`` over every layer split and recompute count the table allows, exactly:

* A unit's least time at ``l`` layers takes the fewest recomputed layers that fit the cap (recomputation adds
  time and saves memory; cpsat-modeling.md §2.7), so ``time_u(l)`` and ``dp_u(l)`` are nondecreasing in ``l``.
* ``per_stage``: a slowest-unit time τ and DP time δ admit a split iff every unit fits its least layer count
  and the units' largest counts under (τ, δ) add up to the model's layers. The least such τ is the
  (K + n)-th smallest of all units' times pooled (K: grid steps to hand out beyond the minima), the least δ
  at a τ follows by bisection, and only the τ at which some unit's count grows can lower U further: they are
  walked in order until ``M·τ`` alone reaches the best U.
* ``first_last``: the middle units share a count; every (first, middle) pair is enumerated.
* ``even``: the split is fixed; each unit takes its least recompute.
* ``uniform_recompute``: every stage recomputes the same count r; each r is solved as a fixed-recompute table.

Ties: among splits of equal U the least peak memory wins (bisection on the cap with U held), then the most
balanced split (middle stages first). :func:`brute_force` enumerates every assignment of tiny tables for tests.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Optional

import numpy as np

from parplan.solver.deadline import check
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
        if n * Q <= POOLED_LIMIT:
            return self._per_stage_pooled(units, K)
        return self._per_stage_bisect(units, K)

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

        def dp_counts(delta: int) -> np.ndarray:
            if (dp_layer == 0).all():
                return np.where(dp0 <= delta, K + 1, 0)
            step = dp_layer * g
            with np.errstate(divide="ignore", invalid="ignore"):
                c = np.where(step > 0, (delta - dp0) // np.maximum(step, 1) + 1, np.where(dp0 <= delta, K + 1, 0))
            return np.clip(c, 0, K + 1)

        def delta_min(cT: np.ndarray) -> int:
            def fits(delta: int) -> bool:
                c = np.minimum(cT, dp_counts(delta))
                return int((c - 1).sum()) >= K and bool((c >= 1).all())
            return least_true(int(dp0.max()), int(DP[:, -1].max()), fits)

        cT_full = counts_max
        d_floor = delta_min(cT_full)
        best = None
        while True:
            check(self.deadline)
            cT = (T <= tau).sum(axis=1)
            d = delta_min(cT)
            U = t.objective(tau, d)
            if best is None or U < best[0]:
                best = (U, tau, d)
            nxt = [int(T[u, cT[u]]) for u in range(n) if cT[u] <= K and T[u, cT[u]] < INF]
            if not nxt:
                break
            tau = min(nxt)
            if self._done(best[0], t.objective(tau, d_floor)):
                break
        U, tau, d = best
        caps = np.minimum((T <= tau).sum(axis=1), dp_counts(d)) - 1
        steps = fill_levels(caps, K, fill_order(n))
        layers = units.lo + g * steps
        return U, self._assign(units, layers)

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
        best = (t.objective(tau, d), tau, d)
        while True:
            c = count(tau, big)
            T, _ = time_dp(np.minimum(c, K))
            nxt = [int(T[u]) for u in range(n) if c[u] <= K and T[u] < INF]
            if not nxt:
                break
            tau = min(nxt)
            if self._done(best[0], t.objective(tau, d_floor)):
                break
            d = d_min(tau)
            U = t.objective(tau, d)
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
        Tm, Dm = self._group(units, mid, l_mid)
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
            if self.t.M * int(tmax[idx].max()) + self.t.scale.weight * int(dmax[idx].max()) < (1 << 62):
                Uv = self.t.M * tmax[idx] + self.t.scale.weight * dmax[idx]
                cand = list(zip(Uv.tolist(), idx.tolist()))
            else:
                cand = [(self.t.objective(int(tmax[i]), int(dmax[i])), int(i)) for i in idx]
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
        """Time and DP of a group sharing layer count ``l`` and one recompute count (the largest any needs)."""
        t = self.t
        full = np.zeros((t.num_units, len(l)), np.int64)
        full[:] = units.lo[:, None]
        full[rows] = l[None, :]
        T, D, _, moe = units.at(full)
        if units.fixed_recompute:
            return T[rows].max(axis=0), D[rows].max(axis=0)
        shared = moe[rows].max(axis=0)
        ok = (T[rows] < INF).all(axis=0) & (shared <= l)
        times = (t.t_layer[rows][:, None] * l[None, :] + t.t_const[rows][:, None]
                 + t.t_recompute[rows][:, None] * np.minimum(shared, l)[None, :])
        return np.where(ok, times.max(axis=0), INF), D[rows].max(axis=0)

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
            for r in range(0, r_hi + 1):
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
