"""One paired choice solved under its step order by CP-SAT with lazy path cuts (issue 39 item 1, design (b)).

The step order's step is the longest path through its graph, so it is at least the length of any one path; a path
compressed to counts per operation type (``PathForm``, costmodel/schedules/step_order_bound.py) is priced over any
split by the lookups of solver/step_order_lookups.py, linear in them. The model: the layer counts (a DualPipe
stage's, a DualPipeV rank's), each unit's memory and DP time from the choice's table (solver/tables.py, without
recomputation a DualPipe rank's depend on its total only), and ``Z ≥`` every cut so far, minimising ``Z + dp_max``.
It starts with every rank's chain (its busy time, a path); each solve's answer is evaluated (the evaluator's step
order), its critical path added as a cut, until the answer's step order is within ``TOL`` of the model's value: then
no split of the choice is shorter (every split's step order is at least the model's least value). Time units are the
problem's; each cut's coefficients are rounded down to 1/``D`` (a lower bound still).

DualPipe with whole-layer recompute: each stage's recomputed count a variable too (its time affine in it, each
unit's memory the table's: m_saved per layer, the working set per recomputing stage). DualPipeV with it: solved
without recompute and without the memory cap, a lower bound of every plan of the choice (recomputing only lengthens
operations), exact where its answer fits without recomputing.
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass
from typing import Optional

import numpy as np

from parplan.costmodel.evaluation.evaluate import PlanError
from parplan.costmodel.evaluation.ledger import Evaluation
from parplan.costmodel.schedules.dualpipe_steps import step_orders, step_structure
from parplan.costmodel.schedules.schedule import Schedule
from parplan.costmodel.schedules.step_order_bound import PathForm
from parplan.costmodel.spec.spec import Plan
from parplan.solver.cpsat_stopper import STOPPER
from parplan.solver.deadline import TimeUp, current, past
from parplan.solver.ortools_cp import cp_model
from parplan.solver.problem import Problem, canonical_plan
from parplan.solver.step_order_critical import rank_paths
from parplan.solver.step_order_lookups import StepOrderLookups, build_lookups

D_BITS = 20  # cut coefficients in 1/D, D = 2^20 where the model's range allows (CutModel.D)
COARSE = 1  # the model's time unit in the problem's (2^12 made no CP-SAT solve reliably faster: 2-15 s either way)
TOL = 1e-5  # an answer within this of the model's value is optimal (the rounding of the cuts' coefficients)
RANGE_BITS = 60  # every linear expression of the model stays below 2^RANGE_BITS (CP-SAT's limit is 2^62)
MAX_CUTS = 600  # past this many cuts of its own the choice is left with its bound
SOLVE_DET = 5.0  # CP-SAT's deterministic seconds per solve of the loop (one 32-stage DeepSeek-V3 solve ran 287 s)


@dataclass
class CutOutcome:
    best: Optional[Evaluation]  # the choice's best plan found below the threshold
    bound_s: float  # a lower bound of every plan of the choice (seconds)
    exact: bool  # True: ``best`` is the choice's optimum (or none is below the threshold)
    cuts: int  # the cuts the loop added (beyond every rank's chain and the shared ones)


@functools.lru_cache(maxsize=16)
def _busy_forms(schedule: Schedule, ranks: int, m: int) -> tuple[PathForm, ...]:
    return tuple(_rank_chains(schedule, ranks, m))


def busy_forms(schedule: Schedule, ranks: int, m: int) -> list[PathForm]:
    """Every rank's chain of operations, compressed (a path of the graph: its busy time); made once per (schedule,
    ranks, m)."""
    return list(_busy_forms(schedule, ranks, m))


def _rank_chains(schedule: Schedule, ranks: int, m: int) -> list[PathForm]:
    """Every rank's chain of operations, compressed (a path of the graph: its busy time)."""
    st = step_structure(schedule, ranks, m)
    rank_of = np.fromiter((rank for rank, _ in st.node), np.int64, len(st.node))
    out = []
    for r in range(len(step_orders(schedule, ranks, m))):
        idx = np.flatnonzero(rank_of == r)
        keys, count = np.unique(np.stack([st.kind[idx], st.stage[idx], st.stage_b[idx], st.zb[idx].astype(int)]),
                                axis=1, return_counts=True)
        out.append(PathForm(keys[0], keys[1], keys[2], keys[3].astype(bool), count))
    return out


class CutModel:
    """The CP-SAT model of one paired choice (module docstring)."""

    def __init__(self, problem: Problem, i: int, cap_kib: int, lk: StepOrderLookups, memory: bool,
                 recompute: bool = False):
        self.p, self.i, self.lk = problem, i, lk
        t = problem.table(i)
        self.unit = problem.scale.time_unit_ns / 1e9 * COARSE
        m, L, n = cp_model.CpModel(), problem.num_layers, lk.num_vars
        self.model = m
        lo = lk.lo if lk.schedule is Schedule.DUALPIPE else tuple(int(x) for x in t.layers_min)  # DualPipeV: units
        hi = np.maximum(lo, L - sum(lo) + np.array(lo))  # (more than L at the least: infeasible)
        self.l = [m.new_int_var(lo[v], int(hi[v]), f"l{v}") for v in range(n)]
        m.add(sum(self.l) == L)
        self._split_rules(problem.options.stage_split)
        dual = lk.schedule is Schedule.DUALPIPE
        totals = [self.l[u] + self.l[n - 1 - u] for u in range(n // 2)] if dual else list(self.l)
        self.r = self._recompute_vars(problem, t, recompute)
        dp_hi = int(max(int(t.dp_layer[u]) * L + int(t.dp_const[u]) for u in range(len(totals)))) // COARSE + 1
        self.dp = m.new_int_var(0, max(1, dp_hi), "dp_max")  # in the model's units, rounded down
        for u, tot in enumerate(totals):
            m.add(int(t.dp_layer[u]) * tot + int(t.dp_const[u]) <= COARSE * self.dp + COARSE - 1)
            if memory:
                m.add(int(t.m_layer[u]) * tot + int(t.m_const[u]) + self._memory_saved(t, u) <= cap_kib)
        self.lo, self.hi = lo, hi
        self.T = [self._lookup(lk.T[s], lk.key[s], f"T{s}") for s in range(len(lk.key))]
        self.X = [self._lookup(lk.X[s], lk.key[s], f"X{s}") for s in range(len(lk.key))]
        if self.r:  # a recomputed layer's time, its coefficient rounded down (stage 0's dense layers first)
            rd, rm = (math.floor(x / self.unit) for x in lk.rho)
            self.T = [T + rm * (r - (self.d0 if s == 0 else 0)) + (rd * self.d0 if s == 0 else 0)
                      for s, (T, r) in enumerate(zip(self.T, self.r))]
        self.pe = {ab: self._pair(ab, table) for ab, table in lk.pair.items()}
        raw = int(sum(lk.m * 4 * (int(max(self._units(lk.T[s]))) + int(max(self._units(lk.X[s])))
                                   + max((int(self._units(p).max()) for p in lk.pair.values()), default=0))
                      for s in range(len(lk.key)))) + dp_hi + 1
        self.D = 1 << max(0, min(D_BITS, RANGE_BITS - raw.bit_length()))
        self.z = m.new_int_var(0, raw * self.D, "z")
        m.minimize(self.z + self.D * self.dp)
        self.cuts = 0

    def _recompute_vars(self, problem: Problem, t, on: bool) -> list:
        """DualPipe with whole-layer recompute: each stage's recomputed layers (≤ its layers; ``uniform_recompute``:
        one count; every layer under ``recompute_all_layers``), whether it recomputes any (its working set) and
        stage 0's recomputed dense layers, ``d0 = min(r_0, k)``; none otherwise."""
        if not on:
            return []
        m, L = self.model, problem.num_layers
        r = [m.new_int_var(0, L, f"r{s}") for s in range(len(self.l))]
        self.b = [m.new_bool_var(f"b{s}") for s in range(len(self.l))]
        for rs, ls, bs in zip(r, self.l, self.b):
            m.add(rs <= ls)
            m.add(rs <= L * bs)
            if problem.options.recompute_all_layers:
                m.add(rs == ls)
        if problem.options.uniform_recompute:
            for rs in r[1:]:
                m.add(rs == r[0])
        self.d0 = m.new_int_var(0, self.lk.k_dense, "d0")
        m.add_min_equality(self.d0, [r[0], self.lk.k_dense])
        return r

    def _memory_saved(self, t, u: int):
        """What unit ``u``'s recomputation changes of its memory (solver/tables.py: m_saved per MoE layer, unit 0's
        dense ones m_saved_dense, the working set per recomputing stage); 0 without recompute or with
        ``recompute_all_layers`` (folded into the table's per-layer terms)."""
        if not self.r or self.p.options.recompute_all_layers:
            return 0
        n = len(self.l)
        pair = (u, n - 1 - u)
        d = self.d0 if u == 0 else 0
        return (-int(t.m_saved[u]) * (sum(self.r[s] for s in pair) - d) - int(t.m_saved_dense) * d
                + int(t.m_workspace) * sum(self.b[s] for s in pair))

    def _split_rules(self, split: str) -> None:
        """``even``: every variable alike; ``first_last``: the middle ones alike (DualPipeV: every rank past 0)."""
        mid = self.l[1:] if self.lk.schedule is Schedule.DUALPIPEV else self.l[1:-1]
        alike = self.l if split == "even" else mid if split == "first_last" else []
        for v in alike[1:]:
            self.model.add(v == alike[0])

    def _units(self, seconds: np.ndarray) -> np.ndarray:
        """Seconds to time units, rounded down (a lower bound)."""
        return np.floor(np.asarray(seconds) / self.unit).astype(np.int64)

    def _lookup(self, seconds: np.ndarray, v: int, name: str):
        """Variable ``v``'s entry of ``seconds`` in time units: a linear expression where the entries are affine in
        the count over its domain (a stage's per-layer costs: CP-SAT's relaxation stays tight), its coefficients
        rounded down (never above the entry, counts being ≥ 0), else an element constraint."""
        lo, hi = int(self.lo[v]), int(self.hi[v])
        x = np.asarray(seconds, float)
        if hi > lo:
            slope = (x[hi] - x[lo]) / (hi - lo)
            fit = x[lo] + slope * (np.arange(lo, hi + 1) - lo)
            if np.allclose(fit, x[lo:hi + 1], rtol=1e-9, atol=1e-15) and slope >= 0:
                a = math.floor(slope / self.unit)
                return a * self.l[v] + math.floor((x[lo] - slope * lo) / self.unit)
        return self._element(x, self.l[v], name)

    def _element(self, seconds: np.ndarray, var, name: str):
        values = [int(x) for x in self._units(seconds)]
        out = self.model.new_int_var(min(0, min(values)), max(1, max(values)), name)
        self.model.add_element(var, values, out)
        return out

    def _pair(self, ab, table: np.ndarray):
        """The exposure of pair ``ab`` (a's forward beside b's backward) in time units: DualPipe's as the sum of its
        phases' positive parts where each phase is affine in the two stages' counts (``e ≥ phase, e ≥ 0``: the
        cuts bound Z from below, so each e takes its least value, the positive part), else a table lookup."""
        if table.ndim == 2:
            terms = [self._affine2(p, ab) for p in self.lk.phases[ab]]
            if all(t is not None for t in terms):
                out = 0
                for k, expr in enumerate(terms):
                    e = self.model.new_int_var(0, max(1, int(self._units(table).max()) + 1), f"pe{ab}_{k}")
                    self.model.add(e >= expr)
                    out += e
                return out
        if table.ndim == 1:
            return self._element(table, self.l[self.lk.key[ab[0]]], f"pe{ab}")
        a, b = (self.l[self.lk.key[s]] for s in ab)
        width = table.shape[1]
        idx = self.model.new_int_var(0, table.size - 1, f"pe_idx{ab}")
        self.model.add(idx == a * width + b)
        return self._element(table.reshape(-1), idx, f"pe{ab}")

    def _affine2(self, values: np.ndarray, ab):
        """``values[l_a, l_b]`` as a linear expression rounded down, where affine over the two domains (else None)."""
        va, vb = (self.lk.key[s] for s in ab)
        la, lb = np.arange(self.lo[va], self.hi[va] + 1), np.arange(self.lo[vb], self.hi[vb] + 1)
        x = np.asarray(values, float)[np.ix_(la, lb)]
        ga = (x[-1, 0] - x[0, 0]) / max(1, len(la) - 1)
        gb = (x[0, -1] - x[0, 0]) / max(1, len(lb) - 1)
        c = x[0, 0] - ga * la[0] - gb * lb[0]
        fit = c + ga * la[:, None] + gb * lb[None, :]
        if not np.allclose(fit, x, rtol=1e-9, atol=1e-12 * max(1.0, float(np.abs(x).max()))):
            return None
        u = self.unit
        return math.floor(ga / u) * self.l[va] + math.floor(gb / u) * self.l[vb] + math.floor(c / u)

    def add_cut(self, form: PathForm) -> None:
        """``Z ≥`` the path ``form`` priced by the lookups (dualpipe_steps.op_durations_s's durations)."""
        f, w = self.lk.f, self.lk.w
        coef_T: dict[int, float] = {}
        coef_X: dict[int, float] = {}
        pairs: dict = {}
        for kind, a, b, zb, n in zip(form.kind, form.stage, form.stage_b, form.zb, form.count):
            a, b, n = int(a), int(b), int(n)
            if kind == 0:
                coef_T[a] = coef_T.get(a, 0.0) + n * f
                coef_X[a] = coef_X.get(a, 0.0) + n / 2
            elif kind == 1:
                coef_T[a] = coef_T.get(a, 0.0) + n * (1 - f) * ((1 - w) if zb else 1.0)
                coef_X[a] = coef_X.get(a, 0.0) + n / 2
            elif kind == 2:
                coef_T[a] = coef_T.get(a, 0.0) + n * f
                coef_T[b] = coef_T.get(b, 0.0) + n * (1 - f)
                pairs[(a, b)] = pairs.get((a, b), 0) + n
            else:
                coef_T[a] = coef_T.get(a, 0.0) + n * w * (1 - f)
        D = self.D
        expr = sum(math.floor(c * D) * self.T[s] for s, c in coef_T.items())
        expr += sum(math.floor(c * D) * self.X[s] for s, c in coef_X.items())
        expr += sum(D * n * self.pe[ab] for ab, n in pairs.items())
        self.model.add(self.z >= expr)
        self.cuts += 1

    def layers(self, solver: cp_model.CpSolver) -> tuple[list[int], list[int]]:
        """(layers, recompute) per variable of the answer (recompute zeros where not modelled)."""
        return [solver.value(v) for v in self.l], [solver.value(v) for v in self.r] or [0] * len(self.l)

    def value_s(self, solver: cp_model.CpSolver) -> float:
        """The model's least value found, in seconds (objective over D, in time units)."""
        return solver.best_objective_bound / self.D * self.unit

    def cutoff(self, seconds: float) -> None:
        """Only values below ``seconds`` (the best plan known) from now on."""
        self.model.add(self.z + self.D * self.dp < math.ceil(seconds / self.unit * self.D))

    def forbid(self, x: tuple[list[int], list[int]]) -> None:
        """Not this answer again (the evaluator found it illegal or not fitting)."""
        layers, recompute = x
        if self.r:
            self.model.add_forbidden_assignments(self.l + self.r, [tuple(layers) + tuple(recompute)])
        else:
            self.model.add_forbidden_assignments(self.l, [tuple(layers)])


def _plan(problem: Problem, i: int, x: tuple[list[int], list[int]]) -> Plan:
    """The plan of choice ``i`` at these stage (DualPipeV: rank) layers and recomputed layers (Problem.plan's
    canonical recompute; with ``recompute_all_layers`` every layer)."""
    return canonical_plan(problem.choices[i], *x, problem.options)


def objective_s(e: Evaluation) -> float:
    """A plan's objective under the step order: a paired plan's step order, any other plan's closed-form step
    (solver/step_order_search.py's module docstring)."""
    return e.metrics.step_order_step_s if e.metrics.step_order_step_s is not None else e.metrics.step_time_s


def _end(deadline: Optional[float]) -> Optional[float]:
    """The earlier of ``deadline`` and the call's (solver/deadline.py ``call_limits``), None where neither is set."""
    limits = current()
    ends = [x for x in (deadline, limits.deadline if limits is not None else None) if x is not None]
    return min(ends) if ends else None


def _solve(cm: CutModel, deadline: Optional[float], hint: Optional[list[int]]):
    """One CP-SAT solve of the model within SOLVE_DET deterministic seconds (the same answer run to run), stopped by
    the project's stopper (solver/cpsat_stopper.py) past the deadline (the earlier of ``deadline`` and the call's),
    on the call's cancellation or past its memory budget, each raising TimeUp once the solve is back: OPTIMAL (within
    the gap limit), INFEASIBLE, or FEASIBLE / UNKNOWN where the cap cut it short (its bound still a lower bound of
    the model)."""
    solver = cp_model.CpSolver()
    solver.parameters.max_deterministic_time = SOLVE_DET
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = 1
    solver.parameters.relative_gap_limit = TOL / 4  # the bound it proves is what the loop reads (CutModel.value_s)
    end, limits = _end(deadline), current()
    if end is not None:
        left = end - time.perf_counter()
        if left <= 0:
            raise TimeUp()
        solver.parameters.max_time_in_seconds = left
    if hint is not None:
        cm.model.clear_hints()
        for v, x in zip(cm.l + cm.r, hint[0] + (hint[1] if cm.r else [])):
            cm.model.add_hint(v, x)
    token = STOPPER.watch(solver, limits.cancel if limits is not None else None, limits, end)
    try:
        status = solver.solve(cm.model)
    finally:
        STOPPER.release(token)
    if status == cp_model.MODEL_INVALID:
        raise RuntimeError(f"the step-order cut model is invalid: {cm.model.validate()}")
    if past(end):  # (stopped, or ended at the deadline: nothing more of the loop starts)
        raise TimeUp()
    return solver, status


def solve_paired_choice(problem: Problem, i: int, cap_kib: int, below: float = float("inf"),
                        deadline: Optional[float] = None, forms: Optional[list] = None) -> CutOutcome:
    """Paired choice ``i``'s plan of least step order below ``below`` (module docstring); raises TimeUp past
    ``deadline``. ``forms``: paths found for other choices of the same schedule, pipeline depth and micro-batch
    count (a path of one's graph is a path of the other's: valid cuts from the start), the new ones appended."""
    c = problem.choices[i]
    lk = build_lookups(problem, i)
    modelled = c.recompute == "full" and c.schedule is Schedule.DUALPIPE
    relaxed = c.recompute == "full" and not modelled  # without recompute and the memory cap: a bound
    cm = CutModel(problem, i, cap_kib, lk, memory=not relaxed, recompute=modelled)
    for form in busy_forms(c.schedule, c.pp, c.num_microbatches) + list(forms or ()):
        cm.add_cut(form)
    if past(_end(deadline)):
        raise TimeUp()
    shared = cm.cuts
    best, best_v, hint, last_lb = None, below, None, 0.0
    if np.isfinite(below):
        cm.cutoff(below)
    while True:
        solver, status = _solve(cm, deadline, hint)
        if status == cp_model.INFEASIBLE:  # nothing of the choice below the best known (the relaxation's neither)
            return CutOutcome(best, best_v, True, cm.cuts - shared)
        if status == cp_model.UNKNOWN:  # the solve's cap, no answer: the choice open, at the last bound
            return CutOutcome(best, min(last_lb, best_v), False, cm.cuts - shared)
        lb, x = cm.value_s(solver), cm.layers(solver)  # (FEASIBLE: the capped solve's bound and answer)
        lb = last_lb = max(last_lb, lb)  # (an earlier bound holds still: the model only gained constraints)
        try:
            e = problem.evaluate(_plan(problem, i, x))
        except PlanError:
            e = None
        v = objective_s(e) if e is not None else float("inf")
        if past(_end(deadline)):  # (an evaluation at 64 stages takes a tenth of a second)
            raise TimeUp()
        if e is not None and e.feasible and v < best_v:
            best, best_v = e, v
            cm.cutoff(v)
        if v <= lb * (1 + TOL):
            if e is not None and e.feasible:  # the model's least value is reached: nothing of the choice is shorter
                return CutOutcome(best, lb, True, cm.cuts - shared)
            if relaxed:  # the relaxation's optimum needs recomputation (or breaks a rule): a bound only
                return CutOutcome(best, lb, False, cm.cuts - shared)
        if e is not None and not e.feasible and relaxed:  # may fit with recomputation: the choice keeps its bound
            return CutOutcome(best, lb, False, cm.cuts - shared)
        if e is None or not e.feasible:  # breaks a rule of the evaluator's (or its memory) the model does not hold
            cm.forbid(x)
        elif v > lb * (1 + TOL):
            if cm.cuts - shared >= MAX_CUTS:
                return CutOutcome(best, lb, False, cm.cuts - shared)
            for form in rank_paths(c.schedule, lk.work(*x) if modelled else lk.work(x[0]), c.num_microbatches):
                cm.add_cut(form)  # the longest path through each rank (the critical path among them)
                if forms is not None:
                    forms.append(form)
        hint = x
