"""The CP-SAT model: one literal per candidate choice, linear stage constraints enforced by it.

Encoding (cpsat-modeling.md §2.2, variant "b+lb"): every coefficient is precomputed per choice in
:mod:`tables`, so each enforced constraint is linear; the redundant cut ``U ≥ Σ LB_k·x_k`` gives the
LP relaxation a useful bound. Candidate choices are those whose lower bound does not exceed a known
plan's objective (the bound proves the others cannot win), so the optimum is proven over the whole
space.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

from ortools.sat.python import cp_model

from parplan.solver.tables import D, Row

STATUS_NAMES = {cp_model.OPTIMAL: "OPTIMAL", cp_model.FEASIBLE: "FEASIBLE", cp_model.INFEASIBLE: "INFEASIBLE",
                cp_model.MODEL_INVALID: "MODEL_INVALID", cp_model.UNKNOWN: "UNKNOWN"}


@dataclass
class SolverControls:
    time_limit_s: float = 30.0
    workers: int = 0  # 0: all cores
    deterministic: bool = False  # one worker, fixed seed, deterministic time limit
    seed: int = 1
    log: bool = False
    cancel: Optional[threading.Event] = None


@dataclass
class CpResult:
    status: str
    row_index: Optional[int] = None
    x: dict = field(default_factory=dict)
    objective: Optional[int] = None
    bound: Optional[int] = None
    wall_time_s: float = 0.0


class _Model:
    def __init__(self, rows: list[Row], idx: list[int], num_layers: int, cap_kib: int, uneven: bool,
                 uniform: bool, upper_bound: Optional[int], objective: str = "time"):
        self.m = m = cp_model.CpModel()
        self.rows, self.idx = rows, idx
        L = num_layers
        v = {name: m.new_int_var(0, L, name) for name in ("lf", "lm", "ll", "rf1", "rf2", "rm", "rl")}
        self.v = v
        sel = [rows[i] for i in idx]
        k_dense = sel[0].k_dense if sel else 0
        moe = sel[0].moe if sel else False
        t_hi = 1
        for r in sel:
            for cl in r.classes:
                t_hi = max(t_hi, sum(max(0, c) for _, c in cl.time.coef) * L + max(0, cl.time.const))
        dp_hi = 1
        for r in sel:
            for cl in r.classes:
                dp_hi = max(dp_hi, sum(max(0, c) for _, c in cl.dp.coef) * L + max(0, cl.dp.const))
        self.t_max = m.new_int_var(0, t_hi, "t_max")
        self.dp_max = m.new_int_var(0, dp_hi, "dp_max")
        u_hi = max(r.M_int for r in sel) * t_hi + D * dp_hi if sel else 1
        if upper_bound is not None:
            u_hi = min(u_hi, upper_bound)
        self.U = m.new_int_var(0, u_hi, "U")
        mem_hi = cap_kib
        self.peak = m.new_int_var(0, mem_hi, "peak_kib")
        self.x = [m.new_bool_var(f"x{i}") for i in idx]
        m.add_exactly_one(self.x)
        if moe and k_dense:
            b = m.new_bool_var("first_stage_recomputes_moe")
            m.add(v["rf1"] <= k_dense)
            m.add(v["rf2"] <= L * b)
            m.add(v["rf1"] >= k_dense * b)
        else:
            m.add(v["rf2"] == 0)
        for lit, r in zip(self.x, sel):
            self._row(m, lit, r, L, cap_kib, uneven, uniform)
        m.add(self.U >= sum(r.M_int * r.lb_time_ns * lit for lit, r in zip(self.x, sel)))
        if objective == "time":
            m.minimize(self.U)
        else:
            m.minimize(self.peak)

    def _row(self, m, lit, r: Row, L: int, cap: int, uneven: bool, uniform: bool):
        v = self.v
        c = r.choice
        p, vp = c.pp, c.vpp
        lo = max(1, vp)
        E = lambda ct: m.add(ct).only_enforce_if(lit)  # noqa: E731
        if p == 1:
            E(v["lf"] == L); E(v["lm"] == 0); E(v["ll"] == 0)  # noqa: E702
        elif p == 2:
            E(v["lf"] + v["ll"] == L); E(v["lm"] == 0)  # noqa: E702
        else:
            E(v["lf"] + (p - 2) * v["lm"] + v["ll"] == L)
        present = ["lf"] + (["lm"] if p >= 3 else []) + (["ll"] if p >= 2 else [])
        for name in present:
            E(v[name] >= lo)
            if vp > 1:
                q = m.new_int_var(0, L // vp, f"q_{name}_{id(lit)}")
                E(v[name] == vp * q)
            if not uneven:
                E(v[name] == L // p)
        if r.k_dense:
            E(v["lf"] >= r.k_dense)
        if c.recompute != "full":
            for name in ("rf1", "rf2", "rm", "rl"):
                E(v[name] == 0)
        else:
            E(v["rf1"] + v["rf2"] <= v["lf"])
            if r.k_dense:
                E(v["rf2"] <= v["lf"] - r.k_dense)
            E(v["rm"] <= (2 if c.schedule == "dualpipe" else 1) * v["lm"])
            E(v["rl"] <= v["ll"])
            if p < 3:
                E(v["rm"] == 0)
            if p < 2:
                E(v["rl"] == 0)
            if uniform:
                if p >= 3:
                    E(v["rm"] == (2 if c.schedule == "dualpipe" else 1) * (v["rf1"] + v["rf2"]))
                if p >= 2:
                    E(v["rl"] == v["rf1"] + v["rf2"])
        for cl in r.classes:
            E(sum(cf * v[n] for n, cf in cl.time.coef) + cl.time.const <= self.t_max)
            E(sum(cf * v[n] for n, cf in cl.dp.coef) + cl.dp.const <= self.dp_max)
            mem = sum(cf * v[n] for n, cf in cl.memory.coef) + cl.memory.const
            E(mem <= cap)
            E(mem <= self.peak)
        E(self.U >= r.M_int * self.t_max + D * self.dp_max)

    def hint(self, row_pos: int, x: dict):
        for j, lit in enumerate(self.x):
            self.m.add_hint(lit, j == row_pos)
        for name, var in self.v.items():
            self.m.add_hint(var, int(x.get(name, 0)))


class _Streamer(cp_model.CpSolverSolutionCallback):
    def __init__(self, model: _Model, on_solution: Optional[Callable], cancel: Optional[threading.Event]):
        super().__init__()
        self.model, self.on_solution, self.cancel = model, on_solution, cancel

    def on_solution_callback(self):
        if self.on_solution is not None:
            pos = next(j for j, lit in enumerate(self.model.x) if self.value(lit))
            x = {n: self.value(var) for n, var in self.model.v.items()}
            self.on_solution(self.model.idx[pos], x, int(self.objective_value), int(self.best_objective_bound),
                             self.wall_time)
        if self.cancel is not None and self.cancel.is_set():
            self.stop_search()


def solve(rows: list[Row], idx: list[int], num_layers: int, cap_kib: int, uneven: bool, uniform: bool,
          controls: SolverControls, upper_bound: Optional[int] = None, hint: Optional[tuple[int, dict]] = None,
          on_solution: Optional[Callable] = None, objective: str = "time",
          extra: Optional[Callable] = None) -> CpResult:
    """Minimise U (or peak memory) over the candidate rows ``idx``."""
    if not idx:
        return CpResult("INFEASIBLE")
    t0 = time.perf_counter()
    model = _Model(rows, idx, num_layers, cap_kib, uneven, uniform, upper_bound, objective)
    if extra is not None:
        extra(model)
    if hint is not None and hint[0] in idx:
        model.hint(idx.index(hint[0]), hint[1])
    solver = cp_model.CpSolver()
    prm = solver.parameters
    # The LP relaxation of the enforced rows is weak; a stronger linearization closes proofs that otherwise
    # stall on ties (tests/test_solver_oracle.py: SLOW_PROOF_CASE, >10 min at level 1, 0.2 s at level 2).
    prm.linearization_level = 2
    if controls.deterministic:
        prm.num_workers = 1
        prm.random_seed = controls.seed
        prm.max_deterministic_time = controls.time_limit_s
        prm.max_time_in_seconds = 10 * controls.time_limit_s  # wall-clock backstop if deterministic time stalls
    else:
        prm.num_workers = controls.workers
        prm.random_seed = controls.seed
        prm.max_time_in_seconds = controls.time_limit_s
    prm.log_search_progress = controls.log
    cb = _Streamer(model, on_solution, controls.cancel)
    stopper = None
    if controls.cancel is not None:
        def watch():
            while not controls.cancel.wait(0.05):
                if done.is_set():
                    return
            solver.stop_search()
        done = threading.Event()
        stopper = threading.Thread(target=watch, daemon=True)
        stopper.start()
    status = solver.solve(model.m, cb)
    if stopper is not None:
        done.set()
    name = STATUS_NAMES.get(status, "UNKNOWN")
    res = CpResult(name, wall_time_s=time.perf_counter() - t0)
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        pos = next(j for j, lit in enumerate(model.x) if solver.boolean_value(lit))
        res.row_index = idx[pos]
        res.x = {n: solver.value(var) for n, var in model.v.items()}
        res.objective = int(solver.objective_value)
        res.bound = int(solver.best_objective_bound)
    return res
