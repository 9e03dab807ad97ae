"""Integer coefficient tables: the cost model of one choice as linear forms over the stage variables.

Both the CP-SAT model and the exhaustive oracle read these rows, so they optimise exactly the same
integer objective; returned plans are then re-evaluated with the float cost model.

Variables (per plan): ``lf, lm, ll`` layers of the first, each middle and the last stage; ``rf1`` the
first stage's recomputed dense layers, ``rf2`` its recomputed MoE layers (MoE models keep their leading
dense layers on the first stage), ``rm``, ``rl`` recomputed layers of the middle and last stages (under
DualPipe ``rm`` is the total of the two middle stages a rank holds, 0 ≤ rm ≤ 2·lm).
Middle stages share one layer count, as the contract's space defines it (Megatron's first/last-stage
flags). Sharing one *recompute* count loses nothing for equal layer counts: stage 1 holds the most
in-flight micro-batches among the middle stages, so it needs the most recomputation and sets their pace
(cpsat-modeling.md §2.7). Unequal middle layer counts can win under memory pressure or DualPipe pairing;
those plans are outside the searched space (pinned by strict xfails in tests/test_solver_oracle.py).

Units: time in ns, memory in KiB (memory rounded up, savings down: never under-estimated), objective
``U = round(D·(m + β))·t_max + D·dp_max`` with ``β`` the schedule's bubble in units of t_max.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from parplan.costmodel.assumptions import Assumptions
from parplan.costmodel.choice import Choice, ChoiceCosts, LayerCost

NS = 1e9
KIB = 1024.0
D = 10_000  # objective scale: U = D · step_time_ns
VARS = ("lf", "lm", "ll", "rf1", "rf2", "rm", "rl")


@dataclass(frozen=True)
class Form:
    """An integer affine form: Σ coef[v]·v + const."""

    coef: tuple[tuple[str, int], ...]
    const: int

    def value(self, x: dict) -> int:
        return sum(c * x[v] for v, c in self.coef) + self.const


@dataclass(frozen=True)
class RankClass:
    name: str
    time: Form  # ns per micro-batch
    memory: Form  # KiB
    dp: Form  # ns per step


@dataclass(frozen=True)
class Row:
    """One choice: its coefficient forms and the structural facts the constraints need."""

    choice: Choice
    classes: tuple[RankClass, ...]
    stage_classes: tuple[str, ...]  # which of F, M, L exist (pp = 1: F only)
    k_dense: int  # leading dense layers fixed on the first stage (MoE); 0 for dense models
    moe: bool
    M_int: int  # round(D·(m + β))
    lb_time_ns: int  # lower bound of t_max over all splits (mean stage time, no recompute)
    lb_dp_ns: int


@dataclass(frozen=True)
class _StageLin:
    """One stage's linear pieces in floats (s, bytes) before rounding.

    Memory is kept as resident states and in-flight activations apart, since DualPipe ranks hold the
    states of two stages but the mean of their activations.
    """

    t_l: float  # per layer
    t_r1: float  # per recomputed layer (dense part on an MoE first stage)
    t_r2: float  # per recomputed MoE layer on an MoE first stage
    t_0: float
    states_l: float
    act_l: float  # inflight · activations per layer
    save_r1: float  # inflight · activation bytes saved per recomputed layer
    save_r2: float
    states_0: float
    act_0: float
    dp_l: float
    dp_0: float


def _stage(costs: ChoiceCosts, main: LayerCost, dense: LayerCost | None, k_dense: int, index: int,
           first: bool, last: bool) -> _StageLin:
    """Stage ``index``: its layers are of class ``main`` except ``k_dense`` leading dense layers."""
    inflight = costs.inflight(index)
    # the working set is held once per stage; on a DualPipe rank (activations weighted 1/2 per stage) once
    t_0, states_0, act_0, dp_0 = costs.p2p_s, 0.0, costs.workspace_bytes, costs.dp_const_s
    states_0 += costs.pipeline_buffer_bytes(index)  # resident like states: a DualPipe rank holds both stages'
    if first:
        t_0 += costs.first_extra_time_s
        states_0 += costs.first_extra_bytes
        dp_0 += costs.first_extra_dp_s
    if last:
        t_0 += costs.last_extra_time_s
        states_0 += costs.last_extra_bytes + costs.logits_bytes
        dp_0 += costs.last_extra_dp_s
    save_main = inflight * (main.act_bytes - main.act_recomputed_bytes)
    if dense is not None and k_dense:
        # l layers = k dense + (l - k) main: fold the dense layers' difference into the constants
        t_0 += k_dense * (dense.time_s - main.time_s)
        states_0 += k_dense * (dense.states_bytes - main.states_bytes)
        act_0 += k_dense * inflight * (dense.act_bytes - main.act_bytes)
        dp_0 += k_dense * (dense.dp_s - main.dp_s)
        return _StageLin(main.time_s, dense.recompute_s, main.recompute_s, t_0, main.states_bytes,
                         inflight * main.act_bytes, inflight * (dense.act_bytes - dense.act_recomputed_bytes),
                         save_main, states_0, act_0, main.dp_s, dp_0)
    return _StageLin(main.time_s, main.recompute_s, 0.0, t_0, main.states_bytes, inflight * main.act_bytes,
                     save_main, 0.0, states_0, act_0, main.dp_s, dp_0)


def _time_form(terms: list[tuple[str, float]], const: float) -> Form:
    acc: dict[str, float] = {}
    for v, c in terms:
        acc[v] = acc.get(v, 0.0) + c
    coef = []
    for v, c in acc.items():
        q = round(c * NS)
        if q:
            coef.append((v, q))
    return Form(tuple(coef), round(const * NS))


def _memory_form(up: list[tuple[str, float]], saves: list[tuple[str, float]], const: float) -> Form:
    """Bytes to KiB, rounding every cost up and every saving down (never under-estimate memory)."""
    acc: dict[str, int] = {}
    for v, c in up:
        acc[v] = acc.get(v, 0) + math.ceil(c / KIB)
    for v, c in saves:
        acc[v] = acc.get(v, 0) - math.floor(c / KIB)
    return Form(tuple((v, c) for v, c in acc.items() if c), math.ceil(const / KIB))


_VAR_L = {"F": "lf", "M": "lm", "L": "ll"}
_VAR_R = {"F": "rf1", "M": "rm", "L": "rl"}


def _rank_class(name: str, members: list[tuple[_StageLin, str]], time_w: float, act_w: float,
                r_scale: float = 1.0) -> RankClass:
    """A pipeline rank made of ``members`` stages: time weighted by time_w, activations by act_w.

    ``r_scale`` scales the recompute variables' coefficients: a DualPipe middle rank holds two middle
    stages whose time and memory depend only on their recompute total R, so its variable is R and each
    stage counts R/2."""
    t_terms, up, saves, dp_terms = [], [], [], []
    t_const = states_const = act_const = dp_const = 0.0
    for x, s in members:
        vl, vr = _VAR_L[s], _VAR_R[s]
        t_terms += [(vl, time_w * x.t_l), (vr, time_w * x.t_r1 * r_scale)]
        up += [(vl, x.states_l + act_w * x.act_l)]
        saves += [(vr, act_w * x.save_r1 * r_scale)]
        if s == "F":
            t_terms.append(("rf2", time_w * x.t_r2))
            saves.append(("rf2", act_w * x.save_r2))
        t_const += time_w * x.t_0
        states_const += x.states_0
        act_const += act_w * x.act_0
        dp_terms.append((vl, x.dp_l))
        dp_const += x.dp_0
    return RankClass(name, _time_form(t_terms, t_const), _memory_form(up, saves, states_const + act_const),
                     _time_form(dp_terms, dp_const))


def build_row(costs: ChoiceCosts, a: Assumptions, num_layers: int, k_dense_model: int, is_moe: bool) -> Row:
    c = costs.choice
    p = c.pp
    main = costs.moe if is_moe else costs.dense
    k = k_dense_model if is_moe else 0
    names = ("F",) if p == 1 else ("F", "L") if p == 2 else ("F", "M", "L")
    lin = {"F": _stage(costs, main, costs.dense if k else None, k, 0, True, p == 1)}
    if p >= 2:
        lin["L"] = _stage(costs, main, None, 0, p - 1, False, True)
    if p >= 3:
        lin["M"] = _stage(costs, main, None, 0, 1, False, False)

    if c.schedule == "dualpipe":  # rank i runs stages i and p-1-i (DeepSeek-V3 §3.2.1)
        classes = [_rank_class("R0", [(lin["F"], "F"), (lin["L"], "L")], 0.5, 0.5)]
        if p >= 4:
            # rm is the recompute total of the pair of middle stages a rank holds (0 ≤ rm ≤ 2·lm)
            classes.append(_rank_class("RM", [(lin["M"], "M"), (lin["M"], "M")], 0.5, 0.5, r_scale=0.5))
    else:
        classes = [_rank_class(s, [(lin[s], s)], 1.0, 1.0) for s in names]

    beta = costs.bubble_s(1.0, a)
    M_int = int(round(D * (c.num_microbatches + beta)))
    total = (k * costs.dense.time_s + (num_layers - k) * main.time_s + p * costs.p2p_s
             + costs.first_extra_time_s + costs.last_extra_time_s)
    # t_max >= mean stage time without recomputation; minus a margin for per-coefficient rounding
    lb_time = int(math.floor(total * NS / p)) - 4 * num_layers
    return Row(choice=c, classes=tuple(classes), stage_classes=names, k_dense=k, moe=is_moe, M_int=M_int,
               lb_time_ns=max(0, lb_time), lb_dp_ns=0)


def evaluate_row(row: Row, x: dict) -> tuple[int, int, list[int]]:
    """(U, peak memory KiB, per-class memory KiB) of an integer assignment: the solver's objective."""
    t_max = max(cl.time.value(x) for cl in row.classes)
    dp_max = max(cl.dp.value(x) for cl in row.classes)
    mems = [cl.memory.value(x) for cl in row.classes]
    return row.M_int * t_max + D * dp_max, max(mems), mems
