"""One DualPipe choice solved under its step order by branch and bound over its rank pairs (issue 39 item 1).

DualPipe's rank u and rank p-1-u hold the same two stages, a = u and b = p-1-u (a *unit*): their layers, recomputed
layers, memory and DP time are the unit's alone (solver/tables.py). A path of the step order's graph compressed to
counts per operation type (``PathForm``, costmodel/schedules/step_order_bound.py) is priced by the lookups of
solver/step_order_lookups.py as a sum over units of a function of the unit's option (la, lb, ra, rb): every
operation reads its own stage's time and all-to-all, and an F&B pair the two stages of one rank. So over a set of such
paths (the cuts: every rank's chain, then the critical path of each leaf whose bound it was above), the least
value of each path over the units not yet fixed with the layers left is a dynamic program (a min-plus convolution per
unit), and ``max over cuts (fixed part + that least value) + the DP time of the fixed units`` is a lower bound of the
step order (the longest path, plus the largest exposed DP time, evaluate.py ``paired_step_order_s``) of every plan
below a node of the search over the units' options. A depth-first search, least bound first, prices each leaf's
step order by the lookups in one pass over the graph (:func:`critical_path`); where it is above the leaf's bound it
adds the leaf's critical path as a cut, and where it may be below the best found the evaluator decides (legality,
memory, the objective). When the search ends no plan of the choice is below the best found (each pruned node's
bound is at least it, within ``PRUNE_REL``): exact. Per unit, only options that fit the memory cap, and of those
with the same layers only the recompute counts no other fitting one is below in both stages (recomputing more never
shortens an operation, so never the longest path).

It takes DualPipe choices with per-stage splits and per-stage recompute counts (``stage_split`` per_stage, no
``uniform_recompute``); solver/step_order_search.py hands the others to the CP-SAT cut loop (step_order_cuts.py).
Measured on DeepSeek-V3's research space (benchmarks/step_order_search.py): its 32-stage choice, which the CP-SAT cut
loop left open after 287 s, closes in about 3.5 s (about 60,000 nodes of unit groups, 300 leaves, a cut each); a
min-max bound over the units' own cuts pruned no more nodes, and branching on the middle units first doubled the
time.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Optional

import numpy as np

from parplan.costmodel.evaluation.evaluate import PlanError
from parplan.costmodel.schedules.schedule import Schedule
from parplan.costmodel.schedules.step_order_bound import PathForm
from parplan.solver.deadline import TimeUp
from parplan.solver.problem import Problem, canonical_plan
from parplan.solver.step_order_critical import critical_path
from parplan.solver.step_order_cuts import CutOutcome, busy_forms, objective_s
from parplan.solver.step_order_lookups import StepOrderLookups, build_lookups
from parplan.solver.step_order_lp import lp_bound_s
from parplan.solver.step_order_patterns import patterns, solve_by_patterns

UNIT_ORDER = range  # the order the units are branched on (middle units first was slower: 21.7 s against 11.0 s)
PRUNE_REL = 1e-9  # a node whose bound is within this of the best found is pruned (float rounding of the prices)
GROUP_COMBOS = 125  # units branched on at once: at most this many combinations of their options
MAX_LEAVES = 5000  # past this many leaves the choice is left open with its bound
MAX_NODES = 200_000  # past this many nodes too (step_order_search.py then runs the CP-SAT cut loop)
EVALUATE_REL = 1e-6  # a leaf whose step order by the lookups is below the best found plus this is evaluated
MAX_OPTIONS = 200_000  # past this many options over the units (no threshold to filter by) the choice is not taken


def takes(problem: Problem, i: int) -> bool:
    """Whether this search solves choice ``i``: DualPipe, per-stage splits and recompute counts."""
    o = problem.options
    return (problem.choices[i].schedule is Schedule.DUALPIPE and o.stage_split == "per_stage"
            and not o.uniform_recompute)


@dataclass
class Options:
    """One unit's options: stage a's and b's layers and recomputed layers, the unit's layer total, its DP time (s)
    and its features (per option: T_a, T_b, X_a, X_b, the exposure of a's forward beside b's backward and of b's
    beside a's; seconds per micro-batch)."""
    la: np.ndarray
    lb: np.ndarray
    ra: np.ndarray
    rb: np.ndarray
    tot: np.ndarray
    dp_s: np.ndarray
    feats: np.ndarray  # [6, n]
    u: int = 0  # the unit


def _features(lk: StepOrderLookups, a: int, b: int, la, lb, ra, rb) -> np.ndarray:
    def t(s, l, r):
        d = np.minimum(r, lk.k_dense) if s == 0 else np.zeros_like(r)
        return lk.T[s, l] + lk.rho[0] * d + lk.rho[1] * (r - d)
    return np.stack([t(a, la, ra), t(b, lb, rb), lk.X[a, la], lk.X[b, lb],
                     np.asarray(lk.pair[(a, b)], float)[la, lb], np.asarray(lk.pair[(b, a)], float)[lb, la]])


def _memory_kib(problem: Problem, t, u: int, tot, ra, rb) -> np.ndarray:
    """Unit ``u``'s memory (step_order_cuts.CutModel's terms: m_saved per recomputed MoE layer, stage 0's dense ones
    m_saved_dense, the working set per recomputing stage; nothing saved under ``recompute_all_layers``)."""
    base = t.m_layer[u].astype(np.int64) * tot + int(t.m_const[u])
    if problem.options.recompute_all_layers:
        return base
    d = np.minimum(ra, t.k_dense) if u == 0 else np.zeros_like(ra)
    return (base - int(t.m_saved[u]) * (ra + rb - d) - int(t.m_saved_dense) * d
            + int(t.m_workspace) * ((ra > 0).astype(np.int64) + (rb > 0)))


def _minimal(ra: np.ndarray, rb: np.ndarray, key: np.ndarray) -> np.ndarray:
    """Of options grouped by ``key`` (their layers), those no other of the group is at or below in both recompute
    counts (the first of equals kept)."""
    keep = np.ones(len(ra), bool)
    order = np.lexsort((rb, ra, key))
    best_rb, last = {}, None
    for j in order:
        k = int(key[j])
        if k != last:
            best_rb, last = np.inf, k
        if rb[j] >= best_rb:
            keep[j] = False
        else:
            best_rb = rb[j]
    return keep


def _dp_floor_s(t, u: int, tot: np.ndarray, unit_s: float) -> np.ndarray:
    """Unit ``u``'s exposed DP time at ``tot`` layers from the table, less two time units (its two rounded terms):
    never above the evaluator's."""
    return np.maximum(0, int(t.dp_layer[u]) * tot + int(t.dp_const[u]) - 2) * unit_s


def unit_options(problem: Problem, i: int, lk: StepOrderLookups, cap_kib: int, u: int,
                 busy: list[PathForm], below: float) -> Options:
    """Unit ``u``'s options that fit the cap, minimal in recompute, whose ranks' chains (``busy``) and DP time are
    below ``below``."""
    c, t, L = problem.choices[i], problem.table(i), problem.num_layers
    a, b = u, c.pp - 1 - u
    spare = L - sum(lk.lo)
    la, lb = (g.ravel() for g in np.meshgrid(np.arange(lk.lo[a], lk.lo[a] + spare + 1),
                                             np.arange(lk.lo[b], lk.lo[b] + spare + 1), indexing="ij"))
    ok = la + lb - lk.lo[a] - lk.lo[b] <= spare
    la, lb = la[ok], lb[ok]
    unit_s = problem.scale.time_unit_ns / 1e9
    dp_s = _dp_floor_s(t, u, la + lb, unit_s)
    zero = np.zeros_like(la)
    floor = np.max(cut_coefficients(lk, busy, u) @ _features(lk, a, b, la, lb, zero, zero), axis=0) + dp_s
    keep = floor < below
    la, lb = la[keep], lb[keep]
    if c.recompute == "full" and problem.options.recompute_all_layers:
        ra, rb = la.copy(), lb.copy()
    elif c.recompute == "full":
        reps = (la + 1) * (lb + 1)
        if int(reps.sum()) > MAX_OPTIONS * 8:  # (every recompute pair of every split: too many to list)
            raise TooMany()
        la, lb = np.repeat(la, reps), np.repeat(lb, reps)
        start = np.repeat(np.cumsum(reps) - reps, reps)
        j = np.arange(len(la)) - start
        ra, rb = j // (lb + 1), j % (lb + 1)
    else:
        ra, rb = np.zeros_like(la), np.zeros_like(lb)
    fits = _memory_kib(problem, t, u, la + lb, ra, rb) <= cap_kib
    la, lb, ra, rb = la[fits], lb[fits], ra[fits], rb[fits]
    keep = _minimal(ra, rb, la * (L + 1) + lb)
    la, lb, ra, rb = la[keep], lb[keep], ra[keep], rb[keep]
    tot = la + lb
    dp_s = _dp_floor_s(t, u, tot, unit_s)
    return Options(la, lb, ra, rb, tot, dp_s, _features(lk, a, b, la, lb, ra, rb), u)


def cut_coefficients(lk: StepOrderLookups, forms: list[PathForm], u: int) -> np.ndarray:
    """[cuts, 6]: each path's coefficients of unit ``u``'s features (:func:`unit_coefficients`)."""
    return unit_coefficients(lk, forms)[:, u, :]


def unit_coefficients(lk: StepOrderLookups, forms: list[PathForm]) -> np.ndarray:
    """[cuts, units, 6]: each path's coefficients of every unit's features (step_order_cuts.CutModel.add_cut's,
    unrounded: dualpipe_steps.op_durations_s's durations; a unit's stage a in slot 0, b in slot 1)."""
    p, f, w = lk.ranks, lk.f, lk.w
    out = np.zeros((len(forms), p // 2, 6))
    if not forms:
        return out
    k = np.concatenate([np.full(len(x.count), j) for j, x in enumerate(forms)])
    kind, s, s2 = (np.concatenate([getattr(x, a) for x in forms]).astype(np.int64)
                   for a in ("kind", "stage", "stage_b"))
    zb = np.concatenate([x.zb for x in forms]).astype(bool)
    n = np.concatenate([x.count for x in forms]).astype(float)
    unit, slot = np.minimum(s, p - 1 - s), (s > p - 1 - s).astype(np.int64)
    unit2, slot2 = np.minimum(s2, p - 1 - s2), (s2 > p - 1 - s2).astype(np.int64)
    t = np.select([kind == 0, kind == 1, kind == 2], [n * f, n * (1 - f) * np.where(zb, 1 - w, 1.0), n * f],
                  n * w * (1 - f))
    np.add.at(out, (k, unit, slot), t)
    lone = kind <= 1
    np.add.at(out, (k[lone], unit[lone], 2 + slot[lone]), n[lone] / 2)
    pair = kind == 2
    np.add.at(out, (k[pair], unit2[pair], slot2[pair]), n[pair] * (1 - f))
    np.add.at(out, (k[pair], unit[pair], 4 + slot[pair]), n[pair])
    return out

class _Group:
    """Consecutive units branched on at once: every combination of their options (``idx``, one column per unit),
    its layers, its largest DP time and its price under each cut (``G``, rows added as cuts come)."""

    def __init__(self, opts: list[Options], start: int, end: int, L: int):
        grids = np.meshgrid(*(np.arange(len(o.tot)) for o in opts[start:end]), indexing="ij")
        idx = np.stack([g.ravel() for g in grids], axis=1) if grids else np.zeros((1, 0), np.int64)
        tot = sum((o.tot[idx[:, n]] for n, o in enumerate(opts[start:end])), np.zeros(len(idx), np.int64))
        keep = tot <= L
        self.start, self.end, self.idx, self.tot = start, end, idx[keep], tot[keep]
        self.dp = np.max([o.dp_s[self.idx[:, n]] for n, o in enumerate(opts[start:end])], axis=0)
        self.G = np.zeros((0, len(self.tot)))

    def prices(self, G: list[np.ndarray]) -> np.ndarray:
        """Every combination's price under every cut (the rows of cuts added since the last call computed)."""
        k0, k = len(self.G), len(G[self.start])
        if k0 < k:
            new = sum(G[u][k0:, self.idx[:, n]] for n, u in enumerate(range(self.start, self.end)))
            self.G = np.vstack([self.G, new])
        return self.G


def _groups(opts: list[Options], L: int) -> list[_Group]:
    """The units in consecutive groups of at most GROUP_COMBOS combinations each (one unit at least)."""
    out, start = [], 0
    while start < len(opts):
        end, n = start + 1, len(opts[start].tot)
        while end < len(opts) and n * len(opts[end].tot) <= GROUP_COMBOS:
            n *= len(opts[end].tot)
            end += 1
        out.append(_Group(opts, start, end, L))
        start = end
    return out


class PairSearch:
    """The branch and bound of one DualPipe choice (module docstring)."""

    def __init__(self, problem: Problem, i: int, lk: StepOrderLookups, opts: list[Options], below: float,
                 forms: list[PathForm]):
        c = problem.choices[i]
        self.p, self.i, self.c, self.L, self.lk, self.opts = problem, i, c, problem.num_layers, lk, opts
        self.n_units = c.pp // 2
        self.forms: list[PathForm] = []
        self.G = [np.zeros((0, len(o.tot))) for o in self.opts]  # [cuts, options] per unit
        self.S = np.zeros((0, self.n_units + 1, self.L + 1))  # least value of each cut over units u.. at b layers
        self.best, self.best_v, self.leaves, self.version = None, below, 0, 0
        self.max_leaves, self.nodes = MAX_LEAVES, 0
        self._fits: dict = {}  # (group, layers left): (version, combinations that leave a feasible rest, ...)
        self.new_forms: list[PathForm] = []  # the cuts the leaves added
        self.groups = _groups(opts, self.L)
        self.add(forms)

    def add(self, forms: list[PathForm]) -> None:
        """New cuts: their prices per unit option and their least values over every suffix of units."""
        if not forms:
            return
        coef = unit_coefficients(self.lk, forms)
        G = [coef[:, o.u, :] @ o.feats for o in self.opts]
        S = np.full((len(forms), self.n_units + 1, self.L + 1), np.inf)
        S[:, self.n_units, 0] = 0.0
        for u in reversed(range(self.n_units)):
            least = np.full((len(forms), self.L + 1), np.inf)
            tot = self.opts[u].tot
            for t in np.unique(tot):
                least[:, t] = G[u][:, tot == t].min(axis=1)
            for t in np.flatnonzero(np.isfinite(least[0])):
                S[:, u, t:] = np.minimum(S[:, u, t:], least[:, t, None] + S[:, u + 1, :self.L + 1 - t])
        self.forms += forms
        self.G = [np.vstack([g0, g]) for g0, g in zip(self.G, G)]
        self.S = np.concatenate([self.S, S])
        self.version += 1

    def root_bound_s(self) -> float:
        return float(np.max(self.S[:, 0, self.L])) if len(self.forms) else 0.0

    def _bounds(self, g: int, budget: int, acc: np.ndarray, dp_s: float) -> tuple[np.ndarray, list[float]]:
        """Group ``g``'s combinations that leave the later units a feasible total (a suffix whose least price is
        finite), and each one's bound (``acc``: every cut's price over the units fixed); the combinations' prices
        plus the suffix's least ones kept per (group, layers left) until cuts are added."""
        grp = self.groups[g]
        cached = self._fits.get((g, budget))
        if cached is None or cached[0] != self.version:
            sel = np.flatnonzero(grp.tot <= budget)
            sel = sel[np.isfinite(self.S[0, grp.end, budget - grp.tot[sel]])]
            rest = self.S[:, grp.end, budget - grp.tot[sel]] + grp.prices(self.G)[:, sel]
            cached = self._fits[(g, budget)] = (self.version, sel, rest, grp.dp[sel])
        _, sel, rest, dp = cached
        return sel, ((acc[:, None] + rest).max(axis=0) + np.maximum(dp_s, dp)).tolist()

    def run(self, deadline: Optional[float]) -> bool:
        """The search to its end (True) or to ``max_leaves`` leaves or MAX_NODES nodes (False); raises TimeUp past
        ``deadline``."""
        try:
            self._node(0, self.L, [], np.zeros(len(self.forms)), 0.0, deadline)
        except _LeafLimit:
            return False
        return True

    def _node(self, g: int, budget: int, chosen: list[int], acc: np.ndarray, dp_s: float,
              deadline: Optional[float]) -> None:
        """Every combination of group ``g``'s options whose bound is below the best found, least bound first
        (bounds again after the leaves below added cuts)."""
        if deadline is not None and time.perf_counter() > deadline:
            raise TimeUp()
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise _LeafLimit()
        if g == len(self.groups):
            self._leaf(chosen, dp_s)
            return
        sel, bound = self._bounds(g, budget, acc, dp_s)
        version = sorted_at = self.version
        grp = self.groups[g]
        for k in sorted(range(len(bound)), key=bound.__getitem__):
            if self.version != version:  # cuts added below: every price again
                version = self.version
                acc = sum((self.G[v][:, j] for v, j in enumerate(chosen)), np.zeros(len(self.forms)))
                _, bound = self._bounds(g, budget, acc, dp_s)
            if bound[k] >= self.best_v * (1 - PRUNE_REL):
                if version == sorted_at:
                    break  # (in order of bound: every later one too)
                continue
            c = int(sel[k])
            self._node(g + 1, budget - int(grp.tot[c]), chosen + grp.idx[c].tolist(), acc + grp.G[:, c],
                       max(dp_s, float(grp.dp[c])), deadline)

    def _leaf(self, chosen: list[int], dp_s: float) -> None:
        """A plan of the choice: its step order by the lookups (the evaluator's, tests/solver/test_step_order_cuts.py)
        with its critical path a cut where above the leaf's bound; the evaluator's verdict where it may be the best."""
        if self.leaves >= self.max_leaves:
            raise _LeafLimit()
        self.leaves += 1
        layers, recompute = self.counts(chosen)
        bound = float(np.max(sum(self.G[v][:, j] for v, j in enumerate(chosen)))) + dp_s
        step_s, form = critical_path(self.c.schedule, self.lk.work(layers, recompute), self.c.num_microbatches)
        if step_s + dp_s > bound * (1 + PRUNE_REL):
            self.add([form])
            self.new_forms.append(form)
        if step_s + dp_s >= self.best_v * (1 + EVALUATE_REL):
            return
        try:
            e = self.p.evaluate(canonical_plan(self.c, layers, recompute, self.p.options))
        except PlanError:
            return
        if e.feasible and objective_s(e) < self.best_v:
            self.best, self.best_v = e, objective_s(e)

    def leaf_of(self, chosen: list[int]) -> None:
        """The plan of the units' options ``chosen`` as a leaf (its DP time the largest of theirs)."""
        self._leaf(chosen, max(float(o.dp_s[j]) for o, j in zip(self.opts, chosen)))

    def counts(self, chosen: list[int]) -> tuple[list[int], list[int]]:
        """Per-stage layers and recomputed layers of the units' options ``chosen``."""
        p = self.c.pp
        layers, recompute = [0] * p, [0] * p
        for o, j in zip(self.opts, chosen):
            u = o.u
            layers[u], layers[p - 1 - u] = int(o.la[j]), int(o.lb[j])
            recompute[u], recompute[p - 1 - u] = int(o.ra[j]), int(o.rb[j])
        return layers, recompute


class _LeafLimit(Exception):
    pass


class TooMany(Exception):
    """A unit's options before the memory filter are more than this search lists (no threshold prunes them)."""


def solve_dualpipe_choice(problem: Problem, i: int, cap_kib: int, below: float = float("inf"),
                          deadline: Optional[float] = None, forms: Optional[list] = None,
                          max_leaves: int = MAX_LEAVES) -> Optional[CutOutcome]:
    """DualPipe choice ``i``'s plan of least step order below ``below`` (module docstring), or None where this search
    does not take it (:func:`takes`; too many options without a threshold); raises TimeUp past ``deadline``.
    ``forms``: paths found for choices of the same schedule, depth and micro-batch count (valid cuts), the new ones
    appended. ``max_leaves``: past this many leaves, the best found and the choice open (a dive)."""
    if not takes(problem, i):
        return None
    c, lk = problem.choices[i], build_lookups(problem, i)
    busy = busy_forms(c.schedule, c.pp, c.num_microbatches)
    try:
        opts = [unit_options(problem, i, lk, cap_kib, u, busy, below) for u in UNIT_ORDER(c.pp // 2)]
    except TooMany:
        return None
    if sum(len(o.tot) for o in opts) > MAX_OPTIONS:
        return None
    s = PairSearch(problem, i, lk, opts, below, busy + list(forms or ()))
    lp_s = lp_bound_s([o.tot for o in opts], s.G, [o.dp_s for o in opts], s.L) if np.isfinite(below) else -np.inf
    if lp_s >= below:  # the relaxation closes the choice: no plan below the threshold
        return CutOutcome(None, below, True, 0)
    s.max_leaves = max_leaves
    exact, low = s.run(deadline), max(s.root_bound_s(), lp_s)
    pats = patterns([o.tot for o in opts], s.L) if not exact and max_leaves == MAX_LEAVES else None
    if pats is not None:  # few vectors of unit totals: each by its relaxation (step_order_patterns.py)
        exact, by_pattern = solve_by_patterns(s, pats, deadline)
        low = by_pattern if exact else max(low, by_pattern)
    if forms is not None:
        forms.extend(s.new_forms)
    return CutOutcome(s.best, min(s.best_v, low) if pats is not None or not exact else s.best_v, exact,
                      len(s.new_forms))
