"""Exhaustive search over the same integer model as CP-SAT: the test oracle and ``--method exhaustive``.

For every choice (a row of :mod:`tables`) it enumerates every stage split, and for each split the
least recomputation that fits the memory cap -- exact, because recomputing only adds time and only
saves memory (cpsat-modeling.md §2.7). The planner (``planner._Searcher``) visits choices in order of
their lower bound and stops when the bound passes the K-th best value found (branch and bound: still
exhaustive).
"""

from __future__ import annotations

import numpy as np

from parplan.solver.tables import D, Form, Row

BIG = np.int64(1) << np.int64(62)


def _form(f: Form, x: dict[str, np.ndarray], shape) -> np.ndarray:
    out = np.full(shape, f.const, dtype=np.int64)
    for v, c in f.coef:
        out = out + np.int64(c) * x[v]
    return out


def splits(row: Row, num_layers: int, uneven: bool) -> dict[str, np.ndarray]:
    """Every (lf, lm, ll) the row allows: sums to L, each ≥ max(1, vpp) and a multiple of vpp, first ≥ k."""
    c = row.choice
    p, v, L, k = c.pp, c.vpp, num_layers, row.k_dense
    lo = max(1, v)
    if p == 1:
        lf = np.array([L])
        return {"lf": lf, "lm": np.zeros(1, np.int64), "ll": np.zeros(1, np.int64)}
    if not uneven:
        if L % p or (L // p) % v or L // p < max(k, lo):
            return {"lf": np.zeros(0, np.int64), "lm": np.zeros(0, np.int64), "ll": np.zeros(0, np.int64)}
        e = L // p
        return {"lf": np.array([e]), "lm": np.array([e if p >= 3 else 0]), "ll": np.array([e])}
    vals = np.arange(lo, L + 1, v, dtype=np.int64)
    if p == 2:
        lf = vals
        ll = L - lf
        ok = (ll >= lo) & (ll % v == 0) & (lf >= k)
        return {"lf": lf[ok], "lm": np.zeros(ok.sum(), np.int64), "ll": ll[ok]}
    lf, ll = np.meshgrid(vals, vals, indexing="ij")
    lf, ll = lf.ravel(), ll.ravel()
    rest = L - lf - ll
    ok = (rest >= (p - 2) * lo) & (rest % (p - 2) == 0) & (lf >= k)
    lm = np.where(ok, rest // (p - 2), 0)
    ok &= (lm % v == 0) & (lm >= lo)
    return {"lf": lf[ok], "lm": lm[ok], "ll": ll[ok]}


def _min_r(need: np.ndarray, save: int, limit: np.ndarray) -> np.ndarray:
    """Least r with r·save ≥ need (need ≤ 0 -> 0); BIG where impossible within ``limit``."""
    need = np.maximum(need, 0)
    if save <= 0:
        return np.where(need > 0, BIG, 0)
    r = -(-need // save)
    return np.where(r <= limit, r, BIG)


def solve_row(row: Row, num_layers: int, uneven: bool, uniform: bool, cap_kib: int):
    """Best assignment of one row under a memory cap: (U, peak_kib, x) or None."""
    x = splits(row, num_layers, uneven)
    n = len(x["lf"])
    if n == 0:
        return None
    full = row.choice.recompute == "full"
    k = row.k_dense
    cand = _candidates(row, x, n, full, uniform, k, cap_kib)
    best = None
    for xr in cand:
        xx = {**x, **xr}
        valid = np.ones(n, bool)
        for v in ("rf1", "rf2", "rm", "rl"):
            valid &= xx[v] < BIG
        if not valid.any():
            continue
        xx = {v: np.where(valid, a, 0) for v, a in xx.items()}
        mems = np.stack([_form(cl.memory, xx, n) for cl in row.classes])
        valid &= (mems <= cap_kib).all(axis=0)
        if not valid.any():
            continue
        t_max = np.stack([_form(cl.time, xx, n) for cl in row.classes]).max(axis=0)
        dp_max = np.stack([_form(cl.dp, xx, n) for cl in row.classes]).max(axis=0)
        U = np.int64(row.M_int) * t_max + np.int64(D) * dp_max
        peak = mems.max(axis=0)
        U = np.where(valid, U, BIG)
        # tie-break: lower U, then lower peak memory, then lexicographic split (deterministic)
        order = np.lexsort((xx["ll"], xx["lm"], xx["lf"], peak, U))
        i = order[0]
        if U[i] >= BIG:
            continue
        key = (int(U[i]), int(peak[i]))
        if best is None or key < best[0]:
            best = (key, {v: int(a[i]) for v, a in xx.items()})
    if best is None:
        return None
    (U, peak), xd = best
    return U, peak, xd


def _candidates(row: Row, x: dict, n: int, full: bool, uniform: bool, k: int, cap: int):
    """Recompute vectors to try: closed-form minima per class, or an enumeration where classes couple."""
    zeros = np.zeros(n, np.int64)
    if not full:
        yield {"rf1": zeros, "rf2": zeros, "rm": zeros, "rl": zeros}
        return
    lf, lm, ll = x["lf"], x["lm"], x["ll"]
    names = row.stage_classes
    if uniform:
        top = int(lf.max())
        for r in range(0, top + 1):
            rr = np.full(n, r, np.int64)
            ok = rr <= lf
            if "M" in names:
                ok &= rr <= lm
            if "L" in names:
                ok &= rr <= ll
            rf1 = np.minimum(rr, k) if k else rr
            rf2 = rr - rf1 if k else zeros
            big = np.where(ok, 0, BIG)
            pair = 2 if row.choice.schedule == "dualpipe" else 1  # DualPipe: rm totals a pair of stages
            yield {"rf1": rf1 + big, "rf2": rf2, "rm": (pair * rr if "M" in names else zeros) + big,
                   "rl": (rr if "L" in names else zeros) + big}
        return
    # independent classes (not DualPipe): the least recompute that fits, per class, is exact
    coupled = row.choice.schedule == "dualpipe"
    if not coupled:
        yield _independent_minima(row, x, n, k, cap)
        return
    # DualPipe couples F and L in rank 0: enumerate the first stage's count, least last-stage count
    rm = _class_min(row, "RM", x, n, "rm", 2 * lm, cap) if len(row.classes) > 1 else zeros
    for rf in range(0, int(lf.max()) + 1):
        rft = np.full(n, rf, np.int64)
        ok = rft <= lf
        rf1 = np.minimum(rft, k) if k else rft
        rf2 = rft - rf1 if k else zeros
        base = {**x, "rf1": rf1, "rf2": rf2, "rm": rm, "rl": zeros}
        r0 = row.classes[0]
        need = _form(r0.memory, base, n) - cap
        save = -dict(r0.memory.coef).get("rl", 0)
        rl = _min_r(need, save, ll)
        yield {"rf1": np.where(ok, rf1, BIG), "rf2": rf2, "rm": rm, "rl": rl}


def _class_min(row: Row, name: str, x: dict, n: int, var: str, limit: np.ndarray, cap: int) -> np.ndarray:
    cl = next(c for c in row.classes if c.name == name)
    zeros = np.zeros(n, np.int64)
    base = {**x, "rf1": zeros, "rf2": zeros, "rm": zeros, "rl": zeros}
    need = _form(cl.memory, base, n) - cap
    return _min_r(need, -dict(cl.memory.coef).get(var, 0), limit)


def _independent_minima(row: Row, x: dict, n: int, k: int, cap: int) -> dict:
    zeros = np.zeros(n, np.int64)
    out = {"rf1": zeros, "rf2": zeros, "rm": zeros, "rl": zeros}
    base = {**x, **out}
    for cl in row.classes:
        need = _form(cl.memory, base, n) - cap
        coef = dict(cl.memory.coef)
        if cl.name == "F":
            s1 = -coef.get("rf1", 0)
            lim1 = np.full(n, k, np.int64) if k else x["lf"]
            if k:
                r1 = np.minimum(_min_r(need, s1, np.full(n, BIG)), k) if s1 > 0 else zeros
                rest = need - r1 * s1
                r2 = _min_r(rest, -coef.get("rf2", 0), x["lf"] - k)
                out["rf1"], out["rf2"] = r1, r2
            else:
                out["rf1"] = _min_r(need, s1, lim1)
        elif cl.name == "M":
            out["rm"] = _min_r(need, -coef.get("rm", 0), x["lm"])
        elif cl.name == "L":
            out["rl"] = _min_r(need, -coef.get("rl", 0), x["ll"])
    return out
