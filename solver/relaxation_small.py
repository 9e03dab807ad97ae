"""The continuous relaxation of a small stage table in Python floats: bounds.relaxation_parts' arithmetic, unit by unit.

A warm request bounds hundreds of tables of a few units each (Llama-3 70B on 64 H100: ~500 new tables per request,
2 to 16 units), and bounds.relaxation_parts pays NumPy's per-call cost (~1 us a call, some 40 calls) on arrays of
that size: ~70 us a table. Below :data:`SMALL_UNITS` units and without a paired exposure table, :func:`relaxation_parts`
forms the same quantities with Python floats, one unit at a time: every value is formed by the same IEEE-754 double
operations in the same order as NumPy forms it element-wise (``a·l + d + κ·max(0, σ·l - room)``; the counts are
integers, whose float sums are exact), so the parts are equal, bit for bit (tests/solver/test_relaxation_small.py
checks them against bounds.relaxation_parts on random specs' tables). Its integer search over τ
(bounds.least_integer_reaching) is the same; a table past the size, or with an exposure table, is handed to
bounds.relaxation_parts.
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np

from parplan.solver import bounds
from parplan.solver.deadline import check
from parplan.solver.table_builder import TableFloats
from parplan.solver.tables import StageTable

SMALL_UNITS = 64  # at most this many units: Python floats (a guess's units × counts list stays small too)
INF = math.inf


def relaxation_parts(t: StageTable, cap_kib: int) -> Optional[bounds.RelaxationParts]:
    """bounds.relaxation_parts of ``t`` under ``cap_kib``, the same floats (module docstring)."""
    if t.t_pair is not None or t.num_units > SMALL_UNITS:
        return bounds.relaxation_parts(t, cap_kib)
    units = _units(t, cap_kib)
    if units is None:
        return None
    L = t.num_layers
    lo = [int(v) for v in t.layers_min]
    most = [u[7] for u in units]
    tau_lo = max(_time_at(u, float(l)) for u, l in zip(units, lo))
    tau_hi = float(math.ceil(max(_time_at(u, float(m)) for u, m in zip(units, most))))
    if not math.isfinite(tau_hi) or _layers_at(units, tau_hi) < L:
        return None
    low = float(math.floor(tau_lo)) - 1.0
    cols = np.array(units, float).T  # (a, d, σ, room, κ, finite κ, l_mem0, most) as arrays: the guess, long searches
    a, d, sig, room, kap = cols[:5]
    fin, l_mem0, most_np = cols[5] > 0, cols[6], cols[7].astype(np.int64)

    def time_at(l: np.ndarray) -> np.ndarray:  # bounds.relaxation_parts' time_at, one row per unit
        col = (slice(None),) + (None,) * (np.ndim(l) - 1)
        return a[col] * l + d[col] + kap[col] * np.maximum(0.0, sig[col] * l - room[col])

    guess = bounds._integer_guess(time_at, most_np, L, tau_lo)  # (NumPy's partition: the same guess)
    many: list = []  # bounds' layers_at, made where the search tries more than a guess's two points

    def reached(taus: np.ndarray) -> np.ndarray:
        if len(taus) > 2:
            if not many:
                many.append(bounds._layer_counts(a, d, sig, room, kap, fin, l_mem0, most_np, None))
            return (taus >= tau_lo) & (many[0](taus) >= L)
        check()  # (bounds' layers_at checks the deadline on every call too)
        return np.array([tau >= tau_lo and _layers_at(units, tau) >= L for tau in taus.tolist()], bool)

    high = bounds.least_integer_reaching(reached, low, tau_hi, guess)
    tau = max(float(math.floor(high * (1 - 1e-12))) - 1.0, float(t.lb_time))
    return _objective_parts(t, tau)


def _units(t: StageTable, cap_kib: int) -> Optional[list[tuple]]:
    """Per unit (a, d, σ, room, κ, finite κ, l_mem0, most) as bounds.relaxation_parts forms them; None where not even
    the least layers fit, all recomputed."""
    full = t.choice.recompute == "full" and not t.recompute_all
    dense_saved = float(t.m_saved_dense) if t.k_dense and t.m_saved_dense > 0 else 0.0
    m_saved = t.m_saved.tolist()
    rows = _memory_rows(t.m_layer.tolist(), t.m_const.tolist(), m_saved, t.layers_min.tolist(), full, dense_saved,
                        cap_kib, t.num_layers)
    if rows is None:
        return None
    out = []
    times = zip(t.t_layer.tolist(), t.t_const.tolist(), t.t_recompute.tolist(), m_saved)
    for u, ((sig, room, fin, l_mem0, most), (t_l, t_c, t_r, m_s)) in enumerate(zip(rows, times)):
        kappa = INF
        if full:
            kappa = float(t_r) / float(m_s) if m_s > 0 else INF
            if u == 0 and dense_saved:
                kappa = min(kappa, t.t_recompute_dense / t.m_saved_dense)
        out.append((max(float(t_l), 1e-9), float(t_c), sig, room, kappa if fin else 0.0, fin, l_mem0, most))
    return out


def _memory_rows(m_layer: list, m_const: list, m_saved: list, layers_min: list, full: bool, dense_saved: float,
                 cap_kib: int, num_layers: int) -> Optional[list[tuple]]:
    """Per unit (σ, room, finite κ, l_mem0, most): the relaxation's memory terms, which no scale reads (κ is finite
    exactly where a recomputed layer saves memory: its time over a positive saving, the dense layers' on unit 0);
    None where not even the least layers fit, all recomputed (bounds.relaxation_parts' first exit)."""
    rows = []
    for u, (m_l, m_c, m_s, lo) in enumerate(zip(m_layer, m_const, m_saved, layers_min)):
        sig, room = float(m_l), cap_kib - float(m_c)
        s_max = float(m_s) if full else 0.0
        if full and u == 0 and dense_saved:
            s_max = max(s_max, dense_saved)
        if (sig - s_max) * lo > room:
            return None
        l_mem0 = room / sig if sig > 0 else INF
        l_full = room / (sig - s_max) if sig > s_max else INF
        fin = full and (m_s > 0 or (u == 0 and dense_saved > 0))
        rows.append((sig, room, fin, l_mem0, int(math.floor(min(l_full if fin else min(l_mem0, l_full), num_layers)
                                                            + 1e-9))))
    return rows


def misfit(f: TableFloats, recompute: str, cap_kib: int, num_layers: int) -> bool:
    """Whether the table of float part ``f`` (its choice's ``recompute``) fits no split under ``cap_kib`` by its memory
    terms alone: a unit cannot hold its least layers all recomputed, or the units' most layers fall short of the
    model's. Its relaxation (bounds.relaxation_parts, with an exposure table or not, and :func:`relaxation_parts`) is
    None then, at every scale: it exits before its τ search (each unit's count at τ is at most its most layers, none
    negative). False where the table recomputes every layer (its memory terms are formed with the integer table)
    or past :data:`SMALL_UNITS` units."""
    if f.all_layers or len(f.m_layer) > SMALL_UNITS:
        return False
    dense_saved = float(f.m_saved_dense) if f.k_dense and f.m_saved_dense > 0 else 0.0
    rows = _memory_rows(f.m_layer.tolist(), f.m_const.tolist(), f.m_saved.tolist(), f.layers_min.tolist(),
                        recompute == "full", dense_saved, cap_kib, num_layers)
    if rows is None:
        return True
    most = [r[4] for r in rows]
    return min(most) >= 0 and sum(most) < num_layers


def _time_at(u: tuple, l: float) -> float:
    """T_u(l) = a·l + d + κ·max(0, σ·l - room) (bounds.relaxation_parts' ``time_at``)."""
    a, d, sig, room, kap = u[:5]
    return a * l + d + kap * max(0.0, sig * l - room)


def _layers_at(units: list[tuple], tau: float) -> float:
    """Σ_u max{l ≤ most_u : T_u(l) ≤ τ} (bounds._layer_counts' ``layers_at`` at one τ)."""
    total = 0.0
    for a, d, sig, room, kap, fin, l_mem0, most in units:
        rel = tau - d
        frac = rel / a
        if not frac <= l_mem0:
            frac = (rel + kap * room) / (a + kap * sig) if fin else l_mem0
        total += min(float(math.floor(frac + 1e-9)), float(most))
    return total


def _objective_parts(t: StageTable, tau: float) -> bounds.RelaxationParts:
    """bounds._objective_parts without an exposure table."""
    n, L = t.num_units, t.num_layers
    dp_mean = (float(t.dp_layer[0]) * L + float(t.dp_const.sum())) / n
    dp_lb = max(dp_mean, float((t.dp_layer * t.layers_min + t.dp_const).max()))
    return tau, float(t.S) * float(t.base_time_sum), float(t.scale.weight) * float(math.floor(dp_lb))
