"""A DualPipe choice under its step order by its units' layer totals (issue 39 item 1): where the branch and bound
(solver/step_order_branch.py) leaves a choice open and the memory cap and threshold leave at most MAX_PATTERNS
vectors of per-unit layer totals (*patterns*), each pattern is closed by the linear relaxation of every path of the
step order's graph over its options, or by branching on that relaxation.

Why: on 405B over 2048 H100 a 64-stage choice's units hold at most 4 layers each (3 for the unit with the embedding
and the head), 126 layers in 32 units, so nearly every unit holds 4 as (1, 3), (2, 2) or (3, 1): 3^31 arrangements
within a percent of each other. The branch and bound's per-cut least values each dodge their path by another
arrangement, and the relaxation over all the options (solver/step_order_lp.py) spreads the two missing layers over
every unit (at m=512 it converged to 18.99 s with every path, the choice's optimum being 19.107 s); with the totals
fixed it reaches the pattern's optimum or passes the best plan known (``python benchmarks/step_order_patterns.py
--only "405B / 2048" --pp 64 --below 19.121``).

Per pattern, least per-cut bound first: the relaxation (each unit's options of the pattern's total, fractions summing
to 1; ``Z ≥`` every path so far, ``D ≥`` every unit's DP time; minimise ``Z + D``: step_order_lp.CutsLP, restricted to
the pattern's options, which fix the layers) is solved by GLOP, and the longest
path of the graph at the fractional answer (each operation's duration the fractions' mix of its options' durations:
linear, so that path is the one the answer most violates) is added while it is longer than ``Z``; paths are shared by
every pattern (a path of the graph is a cut of every plan). A pattern closes once its relaxation is at or above the
best plan known (within CLOSE_UNITS); else the answer's largest fractions are tried as a plan and the unit whose
fractions are most spread is branched on (each of its options alone), MAX_LP_NODES relaxations per choice, then the
branch and bound over the pattern's options. GLOP's answer is taken ``LP_REL`` below itself. Not closed by it: a
choice with whole-layer recompute whose relaxation splits a unit's recomputed layer between its two stages (405B's
64-stage choice at m=256: every node of the branching ties at the relaxation's value).
"""

from __future__ import annotations

import time
from typing import Callable, Optional

import numpy as np
from parplan.costmodel.schedules.dualpipe_steps import step_structure
from parplan.costmodel.schedules.step_order_bound import PathForm
from parplan.solver.deadline import TimeUp
from parplan.solver.step_order_critical import longest_path
from parplan.solver.step_order_lp import LP_REL, CutsLP

MAX_PATTERNS = 256  # a choice with more vectors of unit totals is left to the branch and bound
MAX_LP_NODES = 3000  # relaxations per choice in the branching on fractional units (then the branch and bound)
MAX_ROUNDS = 400  # paths added per pattern at most (then the pattern's last relaxation is its bound)
CONVERGED_REL = 1e-7  # the fractional answer's longest path within this of Z: no path cuts it off
CLOSE_UNITS = 2  # a relaxation within this many of the problem's time units below the best found closes its plans
# (the unit DP times are the table's, floored by two units: step_order_branch._dp_floor_s; 405B on 2048 H100's
# 64-stage choices tie within them): the best found is then optimal within that, and the bound says how far


def patterns(tots: list[np.ndarray], layers: int) -> Optional[list[tuple[int, ...]]]:
    """Every vector of per-unit totals (each from the unit's options) summing to ``layers``; None past
    MAX_PATTERNS."""
    n, values = len(tots), [np.unique(t).tolist() for t in tots]
    ways = np.zeros((n + 1, layers + 1), np.int64)
    ways[n, 0] = 1
    for u in reversed(range(n)):
        for t in (t for t in values[u] if t <= layers):
            ways[u, t:] += ways[u + 1, :layers + 1 - t]
        np.minimum(ways[u], MAX_PATTERNS + 1, out=ways[u])
    if ways[0, layers] > MAX_PATTERNS:
        return None
    out: list[tuple[int, ...]] = []

    def walk(u: int, left: int, acc: tuple[int, ...]) -> None:
        if u == n:
            out.append(acc)
            return
        for t in values[u]:
            if t <= left and ways[u + 1, left - t]:
                walk(u + 1, left - t, acc + (t,))
    walk(0, layers, ())
    return out


def fractional_path(search, x: list[np.ndarray]) -> tuple[float, PathForm]:
    """The longest path of ``search``'s choice at fractions ``x`` of its units' options: each stage's features the
    fractions' mix (T, X, the two F&B exposures of its unit), each operation's duration dualpipe_steps'
    (step_order_cuts.CutModel.add_cut's coefficients), linear in the features."""
    c, lk = search.c, search.lk
    p, f, w = c.pp, lk.f, lk.w
    T, X, pe = np.zeros(p), np.zeros(p), np.zeros((p, p))
    for o, xs in zip(search.opts, x):
        a, b = o.u, p - 1 - o.u
        T[a], T[b], X[a], X[b], pe[a, b], pe[b, a] = o.feats @ xs
    st = step_structure(c.schedule, p, c.num_microbatches)
    kind, s, s2 = st.kind, st.stage, st.stage_b
    zb = st.zb.astype(bool)
    d = np.select([kind == 0, kind == 1, kind == 2],
                  [f * T[s] + X[s] / 2, (1 - f) * T[s] * np.where(zb, 1 - w, 1.0) + X[s] / 2,
                   f * T[s] + (1 - f) * T[s2] + pe[s, s2]], w * (1 - f) * T[s])
    return longest_path(c.schedule, p, c.num_microbatches, d)


def solve_by_patterns(search, pats: list[tuple[int, ...]], deadline: Optional[float]) -> tuple[bool, float]:
    """Every pattern of ``search`` (a step_order_branch.PairSearch at the choice's threshold, its best found and cuts
    updated) closed by its relaxation or solved (module docstring); returns (exact: within CLOSE_UNITS, a lower
    bound of every plan of the choice below its best found: infinite where none). Raises TimeUp past ``deadline``."""
    lp = CutsLP([o.tot for o in search.opts], [o.dp_s for o in search.opts])
    for k in range(len(search.forms)):
        lp.add([g[k] for g in search.G])
    exact, low, budget = True, [float("inf")], [MAX_LP_NODES]
    slack = CLOSE_UNITS * search.p.scale.time_unit_ns / 1e9
    for pat in sorted(pats, key=lambda q: _cut_bound(search, q)):
        allowed = [o.tot == t for o, t in zip(search.opts, pat)]
        done, value = _lp_node(search, lp, allowed, deadline, budget, slack, low)
        if not done and (budget[0] <= 0 or not _branch(search, allowed, deadline)):
            exact, low[0] = False, min(low[0], max(value, _cut_bound(search, pat)))
    return exact, low[0]


def _lp_node(search, lp: CutsLP, allowed: list[np.ndarray], deadline: Optional[float], budget: list[int],
             slack: float, low: list[float]) -> tuple[bool, float]:
    """The plans of options ``allowed`` closed by their relaxation (within ``slack`` seconds of the best found: its
    value kept in ``low`` where below it), or by branching on the unit whose fractions are most spread (each of its
    options allowed alone, largest fraction first): (True, its bound), else (False, its relaxation) once ``budget``
    relaxations are spent or GLOP does not answer."""
    if budget[0] <= 0:
        return False, -np.inf
    budget[0] -= 1
    lp.restrict(allowed)
    value, x = _relax(search, lp, deadline)
    for attempt in range(2):
        if value >= search.best_v * (1 - LP_REL) - slack:
            if value < search.best_v:
                low[0] = min(low[0], value)
            return True, value
        if x is None:
            return False, value
        if attempt == 0:
            search.leaf_of([int(np.argmax(xs)) for xs in x])  # the answer's largest fractions, a plan
    spread = [xs.max() if ok.sum() > 1 else 2.0 for xs, ok in zip(x, allowed)]
    u = int(np.argmin(spread))
    if spread[u] > 1.5:  # every unit fixed: the one plan, a leaf above
        return True, value
    for j in np.argsort(-x[u], kind="stable"):  # (an integral answer whose plan the evaluator prices higher or
        # rejects: a unit left free is fixed, down to the one plan)
        if not allowed[u][j]:
            continue
        child = list(allowed)
        child[u] = np.zeros_like(allowed[u])
        child[u][j] = True
        done, _ = _lp_node(search, lp, child, deadline, budget, slack, low)
        if not done:
            return False, value
    return True, value


def _relax(search, lp: CutsLP, deadline: Optional[float]) -> tuple[float, Optional[list[np.ndarray]]]:
    """The pattern's relaxation, paths added until it converges, passes the best found or MAX_ROUNDS: (its value,
    the last fractions; -inf and None where GLOP never answered)."""
    value, x = -np.inf, None
    for _ in range(MAX_ROUNDS):
        if deadline is not None and time.perf_counter() > deadline:
            raise TimeUp()
        answer = lp.solve()
        if answer is None:
            break
        value, z, x = answer
        if value >= search.best_v * (1 - LP_REL):
            break
        length, form = fractional_path(search, x)
        if length <= z * (1 + CONVERGED_REL):
            break
        search.add([form])
        search.new_forms.append(form)
        lp.add([g[-1] for g in search.G])
    return value, x


def _branch(search, allowed: list[np.ndarray], deadline: Optional[float]) -> bool:
    """The options ``allowed`` by the branch and bound (every path found as cuts, the best found as threshold);
    True where its search ended."""
    sub = [type(o)(*(getattr(o, f)[..., ok] for f in ("la", "lb", "ra", "rb", "tot", "dp_s", "feats")), o.u)
           for o, ok in zip(search.opts, allowed)]
    inner = type(search)(search.p, search.i, search.lk, sub, search.best_v, search.forms)
    exact = inner.run(deadline)
    if inner.best is not None and inner.best_v < search.best_v:
        search.best, search.best_v = inner.best, inner.best_v
    search.add(inner.new_forms)
    search.new_forms.extend(inner.new_forms)
    return exact


def _cut_bound(search, pattern: tuple[int, ...]) -> float:
    """The per-cut bound of a pattern: each cut's least price over each unit's options of the pattern's total,
    summed over the units, the largest over the cuts."""
    total = np.zeros(len(search.forms))
    for o, g, t in zip(search.opts, search.G, pattern):
        total += g[:, o.tot == t].min(axis=1)
    return float(total.max()) if len(total) else 0.0
