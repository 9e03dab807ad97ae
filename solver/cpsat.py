"""The CP-SAT model of one choice's stage problem: every unit its own layer and recompute counts.

Built in OR-Tools' order (cpsat-modeling.md; the cpsat-primer's ``*_vars.py`` shape): :class:`StageVars`
holds the role-named variables, :func:`build_model` adds the constraints of :class:`tables.StageTable`
(layers sum to the model, each unit's time under ``t_max``, its DP time under ``dp_max``, its memory under the
cap and under ``peak``; dense-first recomputation on stage 0; shared counts for ``first_last``, fixed counts for
``even``, one count for ``uniform_recompute``), then the objective: ``U = M·t_max + S·Σ time_u + W·dp_max``, or the least
``peak`` with U held. Before a solve :func:`check_headroom` proves no linear expression of the model can leave
±2^62 over its variables' domains. Status is returned as data: ``MODEL_INVALID`` is an internal error, never
INFEASIBLE.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Optional

from ortools.sat.python import cp_model

from parplan.solver.arguments import check_solver_controls
from parplan.solver.tables import Assignment, StageTable

STATUS_NAMES = {cp_model.OPTIMAL: "OPTIMAL", cp_model.FEASIBLE: "FEASIBLE", cp_model.INFEASIBLE: "INFEASIBLE",
                cp_model.MODEL_INVALID: "MODEL_INVALID", cp_model.UNKNOWN: "UNKNOWN"}
HEADROOM = 1 << 62


@dataclass
class SolverControls:
    """How one call may search: its wall-clock limit (the whole call: search, frontier, explanation), CP-SAT's
    workers and seed, deterministic mode, and a cancellation event. Checked on construction (solver/arguments)."""

    time_limit_s: float = 30.0
    workers: int = 0  # 0: all cores
    deterministic: bool = False  # one worker, fixed seed: the same answer every run
    seed: int = 1
    log: bool = False
    cancel: Optional[threading.Event] = None

    def __post_init__(self) -> None:
        check_solver_controls(time_limit_s=self.time_limit_s, workers=self.workers, seed=self.seed,
                              deterministic=self.deterministic)


class ModelOverflow(Exception):
    """A model whose linear expressions could exceed the solver's integer range (a scaling bug)."""


@dataclass
class StageVars:
    """The variables of one stage model, by role; ``layers[u]``/``recompute[u]`` are unit u's counts."""

    layers: list
    recompute: list
    dense_recompute: object
    dense_done: object  # true: all of stage 0's dense layers are recomputed
    stage_recompute: object  # uniform_recompute: the count every stage recomputes
    t_max: object
    dp_max: object
    peak: object
    objective: object = None  # U as a linear expression
    time_sum: object = 0  # Σ_u time_u as a linear expression (the uneven-stage bubble's term)

    def hint(self, model: cp_model.CpModel, x: Assignment) -> None:
        for v, val in zip(self.layers, x.layers):
            model.add_hint(v, int(val))
        for v, val in zip(self.recompute, x.recompute):
            model.add_hint(v, int(val))
        model.add_hint(self.dense_recompute, int(x.dense))

    def extract(self, solver: cp_model.CpSolver) -> Assignment:
        return Assignment(tuple(solver.value(v) for v in self.layers), tuple(solver.value(v) for v in self.recompute),
                          solver.value(self.dense_recompute))


def _variables(m: cp_model.CpModel, t: StageTable, cap_kib: int, cutoff: Optional[int]) -> StageVars:
    n, L, g = t.num_units, t.num_layers, t.grid
    spare = L - int(t.layers_min.sum())
    layers = []
    for u in range(n):
        lo = int(t.layers_min[u])
        hi = max(lo, lo + spare)
        if g > 1:  # lo + g·q (a trimmed end chunk makes lo no multiple of g)
            q = m.new_int_var(0, (hi - lo) // g, f"layer_groups_{u}")
            lv = m.new_int_var(lo, hi, f"layers_{u}")
            m.add(lv == lo + g * q)
        else:
            lv = m.new_int_var(lo, hi, f"layers_{u}")
        layers.append(lv)
    recompute = [m.new_int_var(0, L, f"recompute_{u}") for u in range(n)]
    dense = m.new_int_var(0, t.k_dense, "dense_recompute")
    dense_done = m.new_bool_var("dense_done")
    stage_rc = m.new_int_var(0, L, "stage_recompute")
    t_hi = max(1, max(int(t.t_layer[u]) * L + int(t.t_recompute[u]) * L + int(t.t_const[u])
                      + int(t.t_recompute_dense) * t.k_dense for u in range(n)))
    if cutoff is not None:  # U ≥ M·t_max + S·(every layer's time without recompute, the constants)
        t_hi = max(0, min(t_hi, (cutoff - t.S * t.base_time_sum) // max(t.M, 1)))
    dp_hi = max(1, max(int(t.dp_layer[u]) * L + int(t.dp_const[u]) for u in range(n)))
    if cutoff is not None:
        dp_hi = max(0, min(dp_hi, cutoff // t.scale.weight))
    t_max = m.new_int_var(min(t.lb_time, t_hi), t_hi, "t_max")
    dp_max = m.new_int_var(0, dp_hi, "dp_max")
    peak = m.new_int_var(0, max(0, cap_kib), "peak_kib")
    return StageVars(layers, recompute, dense, dense_done, stage_rc, t_max, dp_max, peak)


def _constraints(m: cp_model.CpModel, t: StageTable, v: StageVars, cap_kib: int) -> None:
    n, L, k = t.num_units, t.num_layers, t.k_dense
    full = t.choice.recompute == "full" and not t.recompute_all  # recompute_all: folded into the per-layer costs
    m.add(sum(v.layers) == L)
    if t.layers_fixed is not None:
        for u in range(n):
            m.add(v.layers[u] == int(t.layers_fixed[u]))
    # recompute: what a unit may recompute, and the dense-first rule of a plain stage 0
    if not full:
        for r in v.recompute:
            m.add(r == 0)
        m.add(v.dense_recompute == 0)
    else:
        for u in range(n):
            m.add(v.recompute[u] <= v.layers[u] - (k if u == 0 else 0))
        if k:
            free = 0 if t.dense_first else min(t.free_moe_recompute, L)
            m.add(v.recompute[0] <= free).only_enforce_if(v.dense_done.Not())
            m.add(v.dense_recompute == k).only_enforce_if(v.dense_done)
        else:
            m.add(v.dense_recompute == 0)
        if t.uniform_recompute:
            r = v.stage_recompute
            if t.recompute_step > 1:  # vpp chunks of N recomputed layers each (tables.StageTable.recompute_step)
                m.add_modulo_equality(0, r, t.recompute_step)
            if k:
                m.add_min_equality(v.dense_recompute, [r, k])
            for u in range(n):
                m.add(v.recompute[u] == t.members * r - (v.dense_recompute if u == 0 else 0))
                if t.dualpipe and u == 0:
                    for rhs in (k + r, 2 * r, k + 1, r + 1):
                        m.add(v.layers[0] >= rhs)
                else:
                    m.add(v.layers[u] >= t.members * r)
    if t.split == "first_last":
        mid = list(range(1, n - 1)) if not t.one_end else list(range(1, n))
        for u in mid[1:]:
            m.add(v.layers[u] == v.layers[mid[0]])
            m.add(v.recompute[u] == v.recompute[mid[0]])
    # per-unit time, DP time and memory
    for u in range(n):
        time_u = int(t.t_layer[u]) * v.layers[u] + int(t.t_recompute[u]) * v.recompute[u] + int(t.t_const[u])
        mem_u = int(t.m_layer[u]) * v.layers[u] - int(t.m_saved[u]) * v.recompute[u] + int(t.m_const[u])
        if u == 0 and k:
            time_u += int(t.t_recompute_dense) * v.dense_recompute
            mem_u -= int(t.m_saved_dense) * v.dense_recompute
        if full and t.m_workspace:
            mem_u += t.m_workspace * _recomputing_stages(m, t, v, u)
        m.add(time_u <= v.t_max)
        m.add(int(t.dp_layer[u]) * v.layers[u] + int(t.dp_const[u]) <= v.dp_max)
        m.add(mem_u <= cap_kib)
        m.add(mem_u <= v.peak)
    # Σ_u time_u: the layers sum to L and every unit has one per-layer time, so only the recompute terms vary;
    # written so, U keeps the plain max objective's structure (and its solve speed) when nothing is recomputed
    v.time_sum = t.base_time_sum
    if full and t.S:  # without whole-layer recompute the recompute counts are 0: the sum is a constant
        v.time_sum += (int(t.t_recompute_dense) * v.dense_recompute
                       + sum(int(t.t_recompute[u]) * v.recompute[u] for u in range(n)))


def _recomputing_stages(m: cp_model.CpModel, t: StageTable, v: StageVars, u: int):
    """The number of unit u's stages that recompute at least one layer (each holds the working set), as
    tables.rank_split places the recomputation; booleans forced on by the counts they cover."""
    L, k = t.num_layers, t.k_dense
    if t.uniform_recompute:
        has = m.new_bool_var(f"recomputes_{u}")
        m.add(v.stage_recompute <= L * has)
        return t.members * has
    if not t.dualpipe:
        has = m.new_bool_var(f"recomputes_{u}")
        m.add(v.recompute[u] + (v.dense_recompute if u == 0 else 0) <= L * has)
        return has
    first, second = m.new_bool_var(f"first_stage_recomputes_{u}"), m.new_bool_var(f"second_stage_recomputes_{u}")
    if u == 0 and k:  # dense layers on stage 0, MoE layers on stage p-1
        m.add(v.dense_recompute <= k * first)
        m.add(v.recompute[0] <= L * second)
        return first + second
    if t.layers_fixed is not None:
        first_layers = int(t.layers_fixed[u]) // 2
    else:
        first_layers = m.new_int_var(0, L, f"first_stage_layers_{u}")
        m.add(2 * first_layers >= v.layers[u])
        m.add(2 * first_layers <= v.layers[u] + 1)
    m.add(v.recompute[u] <= L * first)
    m.add(v.recompute[u] <= first_layers + L * second)
    return first + second


def build_model(t: StageTable, cap_kib: int, cutoff: Optional[int] = None,
                hold_objective: Optional[int] = None,
                lower_bound: Optional[int] = None) -> tuple[cp_model.CpModel, StageVars]:
    """The model of ``t`` under ``cap_kib``: minimise U (≤ ``cutoff`` if given), or, with ``hold_objective``,
    minimise the peak memory (whole MiB) among assignments of U ≤ ``hold_objective``."""
    m = cp_model.CpModel()
    v = _variables(m, t, cap_kib, cutoff if hold_objective is None else hold_objective)
    _constraints(m, t, v, cap_kib)
    v.objective = t.M * v.t_max + t.S * v.time_sum + t.scale.weight * v.dp_max
    if lower_bound is not None:  # the continuous relaxation's bound (bounds.relaxed_bound): a valid cut
        m.add(v.objective >= lower_bound)
    if cutoff is not None:
        m.add(v.objective <= cutoff)
    if hold_objective is not None:
        m.add(v.objective <= hold_objective)
        peak_mib = m.new_int_var(0, -(-max(0, cap_kib) // 1024), "peak_mib")
        m.add(1024 * peak_mib >= v.peak)
        m.minimize(peak_mib)  # ties are broken on whole MiB (oracle.peak_mib)
    else:
        m.minimize(v.objective)
    return m, v


def check_headroom(m: cp_model.CpModel) -> int:
    """The largest magnitude any linear expression of ``m`` (and its objective) can take over the variables'
    domains; raises :class:`ModelOverflow` at 2^62 or more."""
    proto = m.proto
    bound = [max(abs(var.domain[0]), abs(var.domain[-1])) for var in proto.variables]
    worst = 0
    exprs = [(c.linear.vars, c.linear.coeffs, 0) for c in proto.constraints if c.has_linear()]
    exprs += [(proto.objective.vars, proto.objective.coeffs, int(proto.objective.offset))]
    for vars_, coeffs, offset in exprs:
        total = abs(offset)
        for var, coef in zip(vars_, coeffs):
            total += abs(coef) * bound[var if var >= 0 else -var - 1]
        worst = max(worst, total)
    if worst >= HEADROOM:
        raise ModelOverflow(f"a linear expression may reach {worst:.3g} (limit 2^62)")
    return worst


@dataclass
class CpOutcome:
    status: str
    x: Optional[Assignment] = None
    value: Optional[int] = None  # U, or the peak with U held
    bound: Optional[int] = None
    wall_time_s: float = 0.0
    headroom: int = 0


PORTFOLIO_UNITS = 32  # stage models with fewer units solve fastest on one worker (no portfolio start-up)


def _parameters(solver: cp_model.CpSolver, controls: SolverControls, time_limit_s: float, units: int) -> None:
    prm = solver.parameters
    prm.max_time_in_seconds = max(0.001, time_limit_s)
    prm.random_seed = controls.seed
    small = units < PORTFOLIO_UNITS
    prm.num_workers = 1 if controls.deterministic or small else (controls.workers or 8)
    prm.log_search_progress = controls.log
    # these models are small and already tight: presolve costs more than it saves (benchmarks/solver_speed.py)
    prm.cp_model_presolve = False


def solve(t: StageTable, cap_kib: int, controls: SolverControls, time_limit_s: float,
          cutoff: Optional[int] = None, hint: Optional[Assignment] = None,
          hold_objective: Optional[int] = None, lower_bound: Optional[int] = None) -> CpOutcome:
    """Solve one choice's model; ``INFEASIBLE`` means proven: no assignment fits (with U ≤ ``cutoff``)."""
    t0 = time.perf_counter()
    m, v = build_model(t, cap_kib, cutoff, hold_objective, lower_bound)
    if hint is not None:
        v.hint(m, hint)
    headroom = check_headroom(m)
    solver = cp_model.CpSolver()
    _parameters(solver, controls, time_limit_s, t.num_units)
    stopper = None
    done = threading.Event()
    if controls.cancel is not None:
        def watch():  # stop until the solve ends: a cancel that lands before solve() starts must not be lost
            while not done.wait(0.02):
                if controls.cancel.is_set():
                    solver.stop_search()
        stopper = threading.Thread(target=watch, daemon=True)
        stopper.start()
    status = solver.solve(m)
    done.set()
    name = STATUS_NAMES.get(status, "UNKNOWN")
    out = CpOutcome(name, wall_time_s=time.perf_counter() - t0, headroom=headroom)
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        out.x = v.extract(solver)
        out.value = int(round(solver.objective_value))
        out.bound = int(round(solver.best_objective_bound))
    return out
