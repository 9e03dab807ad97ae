"""The variables of one choice's CP-SAT stage model, by role (the cpsat-primer's ``*_vars.py`` shape;
solver/cpsat.py adds the constraints): each unit's layer and recompute counts (on the layer grid of its chunks),
stage 0's recomputed dense layers, ``t_max``, ``dp_max`` and the peak, with domains bounded by the table and, given
one, by the cutoff; an answer's hint and its extraction."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from parplan.solver.deadline import check
from parplan.solver.ortools_cp import cp_model
from parplan.solver.tables import Assignment, StageTable


def check_every(i: int, every: int = 256) -> None:
    """The call's deadline and cancellation (deadline.check) every ``every`` iterations of a model-building loop."""
    if i % every == 0:
        check()


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
    split: list = field(default_factory=list)  # DualPipe with every split priced: each rank's phase-0 layers

    def hint(self, model: cp_model.CpModel, x: Assignment) -> None:
        for v, val in zip(self.layers, x.layers):
            model.add_hint(v, int(val))
        for v, val in zip(self.recompute, x.recompute):
            model.add_hint(v, int(val))
        model.add_hint(self.dense_recompute, int(x.dense))

    def extract(self, solver: cp_model.CpSolver) -> Assignment:
        return Assignment(tuple(solver.value(v) for v in self.layers), tuple(solver.value(v) for v in self.recompute),
                          solver.value(self.dense_recompute),
                          tuple(solver.value(v) for v in self.split) if self.split else None)


def stage_vars(model: cp_model.CpModel, t: StageTable, cap_kib: int, cutoff: Optional[int]) -> StageVars:
    n, L, g = t.num_units, t.num_layers, t.grid
    spare = L - int(t.layers_min.sum())
    layers = []
    for u in range(n):
        check_every(u)
        lo = int(t.layers_min[u])
        hi = max(lo, lo + spare)
        if g > 1:  # lo + g·q (a trimmed end chunk makes lo no multiple of g)
            q = model.new_int_var(0, (hi - lo) // g, f"layer_groups_{u}")
            lv = model.new_int_var(lo, hi, f"layers_{u}")
            model.add(lv == lo + g * q)
        else:
            lv = model.new_int_var(lo, hi, f"layers_{u}")
        layers.append(lv)
    recompute = [model.new_int_var(0, L, f"recompute_{u}") for u in range(n)]
    dense = model.new_int_var(0, t.k_dense, "dense_recompute")
    dense_done = model.new_bool_var("dense_done")
    stage_rc = model.new_int_var(0, L, "stage_recompute")
    t_hi = max(1, max(int(t.t_layer[u]) * L + int(t.t_recompute[u]) * L + int(t.t_const[u])
                      + int(t.t_recompute_dense) * t.k_dense
                      + (int(t.t_pair[u].max()) if t.t_pair is not None else 0) for u in range(n)))
    if cutoff is not None:  # U ≥ M·t_max + S·(every layer's time without recompute, the constants)
        t_hi = max(0, min(t_hi, (cutoff - t.S * t.base_time_sum) // max(t.M, 1)))
    dp_hi = max(1, max(int(t.dp_layer[u]) * L + int(t.dp_const[u]) for u in range(n)))
    if cutoff is not None:
        dp_hi = max(0, min(dp_hi, cutoff // t.scale.weight))
    t_max = model.new_int_var(min(t.lb_time, t_hi), t_hi, "t_max")
    dp_max = model.new_int_var(0, dp_hi, "dp_max")
    peak = model.new_int_var(0, max(0, cap_kib), "peak_kib")
    return StageVars(layers, recompute, dense, dense_done, stage_rc, t_max, dp_max, peak)
