"""The least-recompute rule: each unit's least time at a layer count under a memory cap, vectorised.

Recomputation adds time and saves memory (cpsat-modeling.md §2.7), so a unit takes the fewest recomputed layers
that fit the cap; ``time_u(l)`` and ``dp_u(l)`` are then nondecreasing in its layer count ``l``.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from parplan.solver.paired_split import pair_split
from parplan.solver.tables import HEADROOM, StageTable, uniform_layers_min, uniform_parts

INF = np.int64(HEADROOM)  # a unit time where nothing fits


def _ceil_div(numerator: np.ndarray, denominator) -> np.ndarray:
    return -(-numerator // denominator)


def _least_count(excess: np.ndarray, saved_per_layer) -> np.ndarray:
    """The fewest layers whose savings cover ``excess`` (0 where none is left, INF where a layer saves nothing)."""
    return np.where(excess <= 0, 0, _ceil_div(np.maximum(excess, 0), saved_per_layer) if saved_per_layer > 0 else INF)


class UnitCosts:
    """Vectorized unit costs of a table under one memory cap (and optionally a fixed per-stage recompute)."""

    def __init__(self, t: StageTable, cap_kib: int, r_stage: Optional[int] = None):
        """``r_stage``: every stage recomputes exactly this many layers (uniform recompute); None: each unit
        its least. Without full recomputation nothing is recomputed."""
        self.t, self.cap = t, cap_kib
        full = t.choice.recompute == "full" and not t.recompute_all  # recompute_all: folded into the table
        self.fixed_recompute = r_stage is not None or not full
        if full and r_stage is not None:
            self.layers_min = uniform_layers_min(t, r_stage)
            self.fixed_dense, self.fixed_moe = uniform_parts(t, r_stage)
        else:
            self.layers_min = t.layers_min.copy()
            self.fixed_dense, self.fixed_moe = 0, np.zeros(t.num_units, np.int64)

    def at(self, layers: np.ndarray):
        """(time, dp, dense, moe) per entry of ``layers`` (shape (n,) or (n, Q)); time INF where nothing fits;
        dense and moe are the recomputed layer counts of each class.

        A unit's least recompute: none if it fits without; else the fewest layers whose savings cover the
        excess plus the working set of each stage that then recomputes (a DualPipe rank recomputes on its
        larger stage until that is full, then on the other: one working set, then two)."""
        t = self.t
        shape = layers.shape
        col = (slice(None),) + (None,) * (len(shape) - 1)
        saved, t_recompute, workspace = t.m_saved[col], t.t_recompute[col], t.m_workspace
        base_time = t.t_layer[col] * layers + t.t_const[col] + t.pair_time(layers)
        need = t.m_layer[col] * layers + t.m_const[col] - self.cap  # excess over the cap without recomputation
        dense = np.zeros(shape, np.int64)
        if self.fixed_recompute:
            moe = np.broadcast_to(self.fixed_moe[col], shape).copy()
            dense[0] = self.fixed_dense
            saving = saved * moe
            saving[0] += t.m_saved_dense * self.fixed_dense
            holding = t.members if (self.fixed_dense or self.fixed_moe.any()) else 0
            ok = need - saving + workspace * holding <= 0
            if t.pair_first is not None and t.dualpipe and (self.fixed_dense or self.fixed_moe.any()):
                per_stage = (moe[0] + dense[0]) // t.members  # uniform: both stages of every rank recompute it
                first = np.stack([pair_split(t, u, layers[u]) for u in range(t.num_units)])
                ok &= (first >= per_stage) & (layers - first >= per_stage)
            time_ = base_time + t_recompute * moe
            time_[0] += t.t_recompute_dense * self.fixed_dense
        else:
            def least(excess):
                with np.errstate(divide="ignore", invalid="ignore"):
                    return np.where(saved > 0, _ceil_div(np.maximum(excess, 0), np.maximum(saved, 1)), INF)
            if t.dualpipe:
                first = np.stack([pair_split(t, u, layers[u]) for u in range(t.num_units)])
                first_stage = np.maximum(first, layers - first)  # the larger stage recomputes first
                one, two = least(need + workspace), least(need + 2 * workspace)
                moe = np.where(need <= 0, 0, np.where(one <= first_stage, one, two))
            else:
                moe = np.where(need <= 0, 0, least(need + workspace))
            ok = moe <= layers
            time_ = base_time + t_recompute * np.minimum(moe, layers)
            if t.k_dense:
                dense[0], moe[0], ok[0], time_[0] = self._unit0(layers[0], need[0])
        ok &= layers >= self.layers_min[col]
        dp = t.dp_layer[col] * layers + t.dp_const[col]
        return np.where(ok, time_, INF), dp, dense, moe

    def _unit0(self, layers0: np.ndarray, need0: np.ndarray):
        """Unit 0 of an MoE model: dense layers (≤ k, first on a plain stage 0) and MoE layers recomputed."""
        t = self.t
        k = t.k_dense
        dense_saved, dense_time = t.m_saved_dense, t.t_recompute_dense
        moe_saved, moe_time = int(t.m_saved[0]), int(t.t_recompute[0])
        workspace = t.m_workspace
        base = t.t_layer[0] * layers0 + t.t_const[0] + t.pair_time(layers0[None])[0]
        moe_room = layers0 - k
        if t.dense_first:  # a plain stage 0: the working set once, dense layers first
            need = np.where(need0 <= 0, 0, need0 + workspace)
            dense_only = _least_count(need, dense_saved)
            use_dense_only = dense_only <= k
            dense = np.where(use_dense_only, dense_only, k)
            moe = np.where(use_dense_only, 0, _least_count(need - k * dense_saved, moe_saved))
            ok = moe <= moe_room
            time_ = base + dense_time * dense + moe_time * np.minimum(moe, np.maximum(moe_room, 0))
            return dense, moe, ok, np.where(ok, time_, INF)
        best_time = np.full(layers0.shape, INF, np.int64)
        best_dense = np.zeros(layers0.shape, np.int64)
        best_moe = np.zeros(layers0.shape, np.int64)
        for dense in range(k + 1):  # DualPipe rank 0: dense on stage 0, MoE on stage p-1 (each its working set)
            rest = need0 + (workspace if dense else 0) - dense * dense_saved
            moe = np.where(need0 <= 0, 0, _least_count(np.where(rest <= 0, 0, rest + workspace), moe_saved))
            if dense:
                moe = np.where(need0 <= 0, INF, moe)  # nothing to recompute: no dense recompute is the answer
            free = t.free_moe_recompute
            if t.pair_first is not None:  # MoE recompute beyond stage p-1's layers spills onto stage 0
                free = np.minimum(free, layers0 - pair_split(t, 0, layers0))
            ok = (moe <= moe_room) & ((dense == k) | (moe <= free))
            time_ = np.where(ok, base + dense_time * dense + moe_time * np.minimum(moe, np.maximum(moe_room, 0)), INF)
            better = time_ < best_time
            best_time = np.where(better, time_, best_time)
            best_dense = np.where(better, dense, best_dense)
            best_moe = np.where(better, moe, best_moe)
        return best_dense, best_moe, best_time < INF, best_time
