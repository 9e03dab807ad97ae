#!/usr/bin/env python3
"""Prototype (issue 39 item 1, not used by the solver): one DualPipe choice of an answers digest solved under its
step order by CP-SAT with event-time variables over the m-independent reference graph
(costmodel/schedules/step_order_compressed.py), to size such a model and time it.

    python benchmarks/step_order_event_model.py DIGEST.json "DeepSeek-V3 671B / 2048 H800, 4K top1" [SECONDS]

The decisions are per-stage layer counts (stage 0 holds the model's leading dense layers, every stage a layer at
least; no recompute, no memory rule: the plan's own choice otherwise). Per stage, its time T, layer compute C and
all-to-all X per micro-batch (``stage_totals`` / ``ChoiceCosts.chunk_work``) are affine in its layers where they are
(else an element lookup); each operation's duration is dualpipe_steps' (an F&B pair's exposure as two max(0, ·)
terms); forward and backward potentials ``e ≥ e_pred + d``, ``q ≥ q_succ + d``; the objective ``z ≥ e_o + q_o - d_o +
Δ·λ_r`` at each rank's last main-step iteration (the compressed step), ``z ≥`` each rank's busy time (redundant),
and ``z ≤`` the digest plan's own step order (a cutoff, as the search's K-th best). Seconds in 1 ns integers; one
worker, seed 1. Measured (12:40-12:45 UTC, load 1.2-2.6 on 2 shared cores): p = 2 choices (8B, 13B, 70B GB200
top 10) OPTIMAL in 0.01 s; Mixtral's DualPipe choice (p = 8, m = 64: 266 reference operations) OPTIMAL in 0.36 s at
the digest plan's step order (5.585040 s); DeepSeek-V3's (p = 32, m = 480: 4,130 operations, 24,966 constraints)
FEASIBLE after 90 s, bound 21.37 s against 21.941086 s found (a split 0.45 ms shorter than the digest plan's
21.941537 s); 405B's (p = 64, m = 512: 16,450 operations, 99,078 constraints) FEASIBLE after 30 s, bound 9.68 s
against 19.012015 s: a direct event model does not close at p = 32 or 64."""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

UNIT_S = 1e-9


def stage_table(spec, plan, costs, most: int) -> dict:
    """(stage, layers) -> (T, C, X) per micro-batch, None where stage 0 would not hold the dense layers."""
    from parplan.costmodel.evaluation.ledger import stage_totals

    k = spec.model.moe.first_dense_layers if spec.model.moe else 0
    out = {}
    for s in range(plan.pp):
        for n in range(most + 1):
            dense = n if spec.model.moe is None else min(k, n) if s == 0 else 0  # ledger.layer_classes
            if s == 0 and n < k:
                out[s, n] = None
                continue
            work = costs.chunk_work(dense, n - dense)
            out[s, n] = (stage_totals(costs, s, dense, n - dense, 0).time_s, work.compute_s, work.a2a_s)
    return out


class EventModel:
    """The CP-SAT model (module docstring) of one plan's choice."""

    def __init__(self, spec, plan, costs, f: float, w: float, most: int):
        from ortools.sat.python import cp_model

        self.plan, self.f, self.w, self.most = plan, f, w, most
        self.k = spec.model.moe.first_dense_layers if spec.model.moe else 0
        self.tab = stage_table(spec, plan, costs, most)
        self.m = cp_model.CpModel()
        self.layers = [self.m.new_int_var(self.k if s == 0 else 1, most, f"l{s}") for s in range(plan.pp)]
        self.m.add(sum(self.layers) == spec.model.num_layers)
        self.pairs: dict = {}
        f_, w_ = f, w
        shares = {"fT": lambda T, C, X: f_ * T, "bT": lambda T, C, X: (1 - f_) * T, "Xh": lambda T, C, X: X / 2,
                  "fC": lambda T, C, X: f_ * C, "bC": lambda T, C, X: (1 - f_) * C,
                  "lf": lambda T, C, X: f_ * T + X / 2, "lb": lambda T, C, X: (1 - f_) * T + X / 2,
                  "lbz": lambda T, C, X: (1 - f_) * T * (1 - w_) + X / 2, "w": lambda T, C, X: w_ * (1 - f_) * T}
        self.x = {name: [self._per_stage(s, fn) for s in range(plan.pp)] for name, fn in shares.items()}

    def _per_stage(self, s: int, fn):
        """Stage s's quantity ``fn(T, C, X)`` in units: affine in its layers where it is within 2 units, else a
        lookup."""
        vals = [round(fn(*self.tab[s, n]) / UNIT_S) if self.tab[s, n] is not None else 1 << 50
                for n in range(self.most + 1)]
        lo = self.k if s == 0 else 1
        slope = (vals[self.most] - vals[lo]) / max(1, self.most - lo)
        if all(abs(vals[n] - (vals[lo] + slope * (n - lo))) <= 2 for n in range(lo, self.most + 1)):
            a = int(round(slope))
            return a * self.layers[s] + (vals[lo] - a * lo)
        v = self.m.new_int_var(0, max(x for x in vals if x < 1 << 50), "")
        self.m.add_element(self.layers[s], vals, v)
        return v

    def pair(self, a: int, b: int):
        """An F&B pair's duration: both shares and what neither covers of the other's all-to-all."""
        if (a, b) not in self.pairs:
            x = self.x
            e1, e2, v = (self.m.new_int_var(0, 1 << 44, "") for _ in range(3))
            self.m.add(e1 >= x["Xh"][a] - x["bC"][b])
            self.m.add(e2 >= x["Xh"][b] - x["fC"][a])
            self.m.add(v == x["fT"][a] + x["bT"][b] + e1 + e2)
            self.pairs[a, b] = v
        return self.pairs[a, b]

    def build(self, cutoff_s: float):
        """Potentials over the reference graph and the compressed step's objective; returns the step variable."""
        from parplan.costmodel.schedules.dualpipe_steps import step_structure, step_orders
        from parplan.costmodel.schedules.step_order_compressed import reference_microbatches

        plan, x = self.plan, self.x
        m0, per = reference_microbatches(plan.schedule, plan.pp)
        st = step_structure(plan.schedule, plan.pp, m0)
        dur = [self.pair(int(s), int(b)) if kind == 2 else
               [x["lf"][s], x["lbz"][s] if zb else x["lb"][s], None, x["w"][s]][kind]
               for kind, s, b, zb in zip(st.kind, st.stage, st.stage_b, st.zb)]
        n = len(dur)
        e, q = [self.m.new_int_var(0, 1 << 44, "") for _ in range(n)], [self.m.new_int_var(0, 1 << 44, "") for _ in range(n)]
        succ: list[list[int]] = [[] for _ in range(n)]
        for i, (ins, prev) in enumerate(zip(st.inputs, st.prev)):
            self.m.add(e[i] >= dur[i])
            self.m.add(q[i] >= dur[i])
            for p in list(ins) + ([prev] if prev >= 0 else []):
                self.m.add(e[i] >= e[p] + dur[i])
                succ[p].append(i)
        for i in range(n):
            for s in succ[i]:
                self.m.add(q[i] >= q[s] + dur[i])
        z, at, delta = self.m.new_int_var(0, 1 << 50, "z"), {node: i for i, node in enumerate(st.node)}, (self.plan.num_microbatches - m0) // per
        for r, ops in enumerate(step_orders(plan.schedule, plan.pp, m0)):
            last = [at[(r, j)] for j, op in enumerate(ops) if op.step == 4 and op.kind == "FB"][-2:]
            extra = delta * (dur[last[0]] + dur[last[1]])
            for o in last:
                self.m.add(z >= e[o] + q[o] - dur[o] + extra)
            self.m.add(z >= sum(dur[at[(r, j)]] for j in range(len(ops))) + extra)
        self.m.add(z <= round(cutoff_s / UNIT_S) + 64)
        self.m.minimize(z)
        self.n_ops = n
        return z


def step_order_of(model: EventModel, layers: list[int]) -> float:
    """The exact step order of a per-stage layer split under the model's table."""
    from parplan.costmodel.schedules.dualpipe_steps import StageWork, step_order_s

    T, C, X = zip(*(model.tab[s, n] for s, n in enumerate(layers)))
    work = StageWork(list(C), list(X), model.f, model.w, [t - c for t, c in zip(T, C)])
    return step_order_s(model.plan.schedule, work, model.plan.num_microbatches)


def main(path: str, key: str, seconds: float) -> None:
    from ortools.sat.python import cp_model
    from step_order_bound import paired_plans
    from parplan.costmodel.evaluation.choice import choice_costs
    from parplan.costmodel.spec.assumptions import resolve_assumptions
    from parplan.costmodel.spec.hardware import resolve_gpu

    key, _, spec, plan, _ = next(p for p in paired_plans(path) if p[0].startswith(key))
    a = resolve_assumptions(spec.assumptions)
    costs = choice_costs(spec, plan.to_choice(), resolve_gpu(spec.cluster), a)
    w = a.zb_weight_grad_fraction * min(1.0, max(0.0, costs.weight_grad_share))
    t0 = time.perf_counter()
    model = EventModel(spec, plan, costs, costs.fwd_share, w, max(plan.stage_layers) + 3)
    today = step_order_of(model, list(plan.stage_layers))
    model.build(today)
    for s, n in enumerate(plan.stage_layers):
        model.m.add_hint(model.layers[s], n)
    built = time.perf_counter() - t0
    solver = cp_model.CpSolver()
    solver.parameters.num_workers, solver.parameters.random_seed, solver.parameters.max_time_in_seconds = 1, 1, seconds
    t1 = time.perf_counter()
    status = solver.solve(model.m)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        print(f"{key}: {solver.status_name(status)} in {time.perf_counter() - t1:.2f} s")
        return
    got = [solver.value(v) for v in model.layers]
    print(f"{key}: p={plan.pp} m={plan.num_microbatches}: {model.n_ops} reference operations, "
          f"{len(model.m.proto.constraints)} constraints, {len(model.m.proto.variables)} variables; built in "
          f"{built:.2f} s, {solver.status_name(status)} in {time.perf_counter() - t1:.2f} s; objective "
          f"{solver.objective_value * UNIT_S:.6f} s, bound {solver.best_objective_bound * UNIT_S:.6f} s; its split's "
          f"step order {step_order_of(model, got):.6f} s {got}; the digest plan's {today:.6f} s")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], float(sys.argv[3]) if len(sys.argv) > 3 else 60.0)
