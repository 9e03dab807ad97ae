"""The CP-SAT model of one choice's stage problem: every unit its own layer and recompute counts.

Built in OR-Tools' order (cpsat-modeling.md; the cpsat-primer's ``*_vars.py`` shape): ``StageVars``
(solver/cpsat_vars.py) holds the role-named variables, :func:`build_model` adds the constraints of :class:`tables.StageTable`
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

from parplan.solver.arguments import check_solver_controls
from parplan.solver.deadline import MIB, TimeUp, budget, current, over_budget, rss_bytes
from parplan.solver.ortools_cp import StageModel, cp_model
from parplan.solver.cpsat_stopper import STOPPER
from parplan.solver.cpsat_rank_split import paired_split_terms, recomputing_stages
from parplan.solver.cpsat_vars import StageVars, check_every, stage_vars
from parplan.solver.tables import HEADROOM, MIB_KIB, Assignment, StageTable, scaled_objective

STATUS_NAMES = {cp_model.OPTIMAL: "OPTIMAL", cp_model.FEASIBLE: "FEASIBLE", cp_model.INFEASIBLE: "INFEASIBLE",
                cp_model.MODEL_INVALID: "MODEL_INVALID", cp_model.UNKNOWN: "UNKNOWN"}


@dataclass
class SolverControls:
    """How one call may search: its wall-clock limit (the whole call: search, frontier, explanation), CP-SAT's
    workers and seed, deterministic mode, a cancellation event, and the memory budget: the resident memory (MiB)
    the process may grow to while it solves (solver/deadline.py: every structure past a few MiB is sized and
    checked against it before it is built). Checked on construction (solver/arguments)."""

    time_limit_s: float = 30.0
    workers: int = 0  # 0: all cores
    deterministic: bool = False  # one worker, fixed seed: the same answer every run
    seed: int = 1
    log: bool = False
    cancel: Optional[threading.Event] = None
    memory_budget_mib: Optional[int] = None  # None: the process default (1536, or `serve --memory-budget-mib`)

    def __post_init__(self) -> None:
        check_solver_controls(time_limit_s=self.time_limit_s, workers=self.workers, seed=self.seed,
                              deterministic=self.deterministic, memory_budget_mib=self.memory_budget_mib)


class ModelOverflow(Exception):
    """A model whose linear expressions could exceed the solver's integer range (a scaling bug)."""


def _recompute_rules(model: cp_model.CpModel, t: StageTable, v: StageVars, full: bool) -> None:
    """What a unit may recompute (nothing without whole-layer recompute), the dense-first rule of a plain stage 0,
    and ``uniform_recompute``'s one count per stage (in whole chunks of ``recompute_step`` layers)."""
    n, L, k = t.num_units, t.num_layers, t.k_dense
    if not full:
        for r in v.recompute:
            model.add(r == 0)
        model.add(v.dense_recompute == 0)
    else:
        for u in range(n):
            model.add(v.recompute[u] <= v.layers[u] - (k if u == 0 else 0))
        if k:
            free = 0 if t.dense_first else min(t.free_moe_recompute, L)
            model.add(v.recompute[0] <= free).only_enforce_if(v.dense_done.Not())
            model.add(v.dense_recompute == k).only_enforce_if(v.dense_done)
        else:
            model.add(v.dense_recompute == 0)
        if t.uniform_recompute:
            r = v.stage_recompute
            if t.recompute_step > 1:  # vpp chunks of N recomputed layers each (tables.StageTable.recompute_step)
                per_chunk = model.new_int_var(0, L // t.recompute_step, "chunk_recompute")
                model.add(r == t.recompute_step * per_chunk)  # linear, unlike a modulo equality
            if k:
                model.add_min_equality(v.dense_recompute, [r, k])
            for u in range(n):
                model.add(v.recompute[u] == t.members * r - (v.dense_recompute if u == 0 else 0))
                if t.dualpipe and u == 0:
                    for rhs in (k + r, 2 * r, k + 1, r + 1):
                        model.add(v.layers[0] >= rhs)
                else:
                    model.add(v.layers[u] >= t.members * r)


def _constraints(model: cp_model.CpModel, t: StageTable, v: StageVars, cap_kib: int) -> None:
    n, L, k = t.num_units, t.num_layers, t.k_dense
    full = t.choice.recompute == "full" and not t.recompute_all  # recompute_all: folded into the per-layer costs
    model.add(sum(v.layers) == L)
    if t.layers_fixed is not None:
        for u in range(n):
            model.add(v.layers[u] == int(t.layers_fixed[u]))
    _recompute_rules(model, t, v, full)
    if t.split == "first_last":
        mid = list(range(1, n - 1)) if not t.one_end else list(range(1, n))
        for u in mid[1:]:
            model.add(v.layers[u] == v.layers[mid[0]])
            model.add(v.recompute[u] == v.recompute[mid[0]])
    pair = paired_split_terms(model, t, v, full)
    # per-unit time, DP time and memory
    for u in range(n):
        check_every(u)
        time_u = int(t.t_layer[u]) * v.layers[u] + int(t.t_recompute[u]) * v.recompute[u] + int(t.t_const[u])
        if pair:
            time_u += pair[u][0]
        mem_u = int(t.m_layer[u]) * v.layers[u] - int(t.m_saved[u]) * v.recompute[u] + int(t.m_const[u])
        if u == 0 and k:
            time_u += int(t.t_recompute_dense) * v.dense_recompute
            mem_u -= int(t.m_saved_dense) * v.dense_recompute
        if full and t.m_workspace:
            mem_u += t.m_workspace * recomputing_stages(model, t, v, u)
        model.add(time_u <= v.t_max)
        model.add(int(t.dp_layer[u]) * v.layers[u] + int(t.dp_const[u]) <= v.dp_max)
        model.add(mem_u <= cap_kib)
        model.add(mem_u <= v.peak)
    # Σ_u time_u: the layers sum to L and every unit has one per-layer time, so only the recompute terms vary;
    # written so, U keeps the plain max objective's structure (and its solve speed) when nothing is recomputed
    v.time_sum = t.base_time_sum + sum(e for e, _ in pair)
    if full and t.S:  # without whole-layer recompute the recompute counts are 0: the sum is a constant
        v.time_sum += (int(t.t_recompute_dense) * v.dense_recompute
                       + sum(int(t.t_recompute[u]) * v.recompute[u] for u in range(n)))


def build_model(t: StageTable, cap_kib: int, cutoff: Optional[int] = None,
                hold_objective: Optional[int] = None,
                lower_bound: Optional[int] = None) -> tuple[cp_model.CpModel, StageVars]:
    """The model of ``t`` under ``cap_kib``: minimise U (≤ ``cutoff`` if given), or, with ``hold_objective``,
    minimise the peak memory (whole MiB) among assignments of U ≤ ``hold_objective``."""
    model = StageModel()
    v = stage_vars(model, t, cap_kib, cutoff if hold_objective is None else hold_objective)
    _constraints(model, t, v, cap_kib)
    v.objective = scaled_objective(t, v.t_max, v.time_sum, v.dp_max)
    if lower_bound is not None:  # the continuous relaxation's bound (bounds.relaxed_bound): a valid cut
        model.add(v.objective >= lower_bound)
    if cutoff is not None:
        model.add(v.objective <= cutoff)
    if hold_objective is not None:
        model.add(v.objective <= hold_objective)
        peak_mib = model.new_int_var(0, -(-max(0, cap_kib) // MIB_KIB), "peak_mib")
        model.add(MIB_KIB * peak_mib >= v.peak)
        model.minimize(peak_mib)  # ties are broken on whole MiB (oracle.peak_mib)
    else:
        model.minimize(v.objective)
    return model, v


def check_headroom(model: cp_model.CpModel) -> int:
    """The largest magnitude any linear expression of ``model`` (and its objective) can take over the variables'
    domains; raises :class:`ModelOverflow` at 2^62 or more."""
    proto = model.proto
    bound = []
    for i, var in enumerate(proto.variables):  # a deep pipeline's model has many: the call's cancel is checked
        check_every(i)
        bound.append(max(abs(var.domain[0]), abs(var.domain[-1])))
    worst = 0
    exprs = [(c.linear.vars, c.linear.coeffs, 0) for c in proto.constraints if c.has_linear()]
    exprs += [(proto.objective.vars, proto.objective.coeffs, int(proto.objective.offset))]
    for i, (vars_, coeffs, offset) in enumerate(exprs):
        check_every(i)
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
# resident bytes of a stage model per unit, and per unit and CP-SAT worker: the Python model and its proto, CP-SAT's
# copy and each worker's search state. Measured on a 16,384-unit table (benchmarks/bounded_calls.py's deep16k,
# peak RSS over the start of the solve): 172 MiB with one worker, 428 MiB with four (~11 KiB a unit, ~5 KiB a
# unit per added worker); rounded up here to 12 KiB + 8 KiB per worker.
MODEL_BYTES_PER_UNIT = 12 << 10
MODEL_BYTES_PER_UNIT_WORKER = 8 << 10
MODEL_BYTES_BASE = 8 << 20


def model_bytes(units: int, workers: int) -> int:
    """What a stage model of ``units`` units is expected to hold while ``workers`` CP-SAT workers solve it."""
    return MODEL_BYTES_BASE + units * (MODEL_BYTES_PER_UNIT + MODEL_BYTES_PER_UNIT_WORKER * max(1, workers))


def workers_within_budget(units: int, workers: int) -> int:
    """The most CP-SAT workers (≤ ``workers``) whose model fits the call's memory budget; raises
    :class:`~parplan.solver.deadline.OverBudget` where not even one worker's does (nothing is built)."""
    b = budget()
    while workers > 1 and not b.fits(model_bytes(units, workers)):
        workers //= 2
    b.require(model_bytes(units, workers), f"CP-SAT stage model of {units} units")
    return workers


def _parameters(solver: cp_model.CpSolver, controls: SolverControls, time_limit_s: float, units: int) -> None:
    prm = solver.parameters
    prm.max_time_in_seconds = max(0.001, time_limit_s)
    prm.random_seed = controls.seed
    small = units < PORTFOLIO_UNITS
    prm.num_workers = 1 if controls.deterministic or small else workers_within_budget(units, controls.workers or 8)
    limit = budget().limit_bytes - rss_bytes()  # CP-SAT stops (UNKNOWN/FEASIBLE) rather than pass the budget
    prm.max_memory_in_mb = max(64, int(limit // MIB))
    prm.log_search_progress = controls.log
    # presolve on (CP-SAT's default): without it one interleaved 405B table took 0.1-6 s over seeds, with it 0.02 s,
    # and the 13 scenarios of benchmarks/solver_speed.py are as fast or faster (worst CP-SAT / oracle 2.27x -> 1.50x)
    prm.cp_model_presolve = True


def solve(t: StageTable, cap_kib: int, controls: SolverControls, time_limit_s: float,
          cutoff: Optional[int] = None, hint: Optional[Assignment] = None,
          hold_objective: Optional[int] = None, lower_bound: Optional[int] = None) -> CpOutcome:
    """Solve one choice's model; ``INFEASIBLE`` means proven: no assignment fits (with U ≤ ``cutoff``).

    The model is sized against the call's memory budget before it is built (:func:`workers_within_budget`), its
    building checks the call's deadline and cancellation (raising TimeUp), and ``time_limit_s`` bounds this whole
    function: CP-SAT gets what the building left, and no more than the call has left."""
    t0 = time.perf_counter()
    workers_within_budget(t.num_units, 1)  # OverBudget before anything is built
    model, v = build_model(t, cap_kib, cutoff, hold_objective, lower_bound)
    if hint is not None:
        v.hint(model, hint)
    headroom = check_headroom(model)
    limits = current()
    left = time_limit_s - (time.perf_counter() - t0)
    if limits is not None and limits.deadline is not None:
        left = min(left, limits.deadline - time.perf_counter())
    if left <= 0:
        raise TimeUp()
    time_limit_s = left
    solver = cp_model.CpSolver()
    _parameters(solver, controls, time_limit_s, t.num_units)
    cancel = controls.cancel if controls.cancel is not None else (limits.cancel if limits is not None else None)
    # stopped until the solve ends (solver/cpsat_stopper.py: one thread for every solve): a cancel that lands before
    # solve() starts must not be lost, and a process past its memory budget stops the solve as it stops every other
    # phase (deadline.past)
    token = STOPPER.watch(solver, cancel, limits) if cancel is not None or limits is not None else None
    try:
        status = solver.solve(model)
    finally:
        if token is not None:
            STOPPER.release(token)
    name = STATUS_NAMES.get(status, "UNKNOWN")
    out = CpOutcome(name, wall_time_s=time.perf_counter() - t0, headroom=headroom)
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        out.x = v.extract(solver)
        out.value = int(round(solver.objective_value))
        out.bound = int(round(solver.best_objective_bound))
    return out
