"""A planning problem: the spec resolved into the rows both search methods read, and plan reconstruction."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from parplan.costmodel.architecture import Architecture
from parplan.costmodel.assumptions import Assumptions, resolve_assumptions
from parplan.costmodel.choice import Choice, choice_costs, usable_memory_bytes, with_schedule
from parplan.costmodel.evaluate import Evaluation, evaluate
from parplan.costmodel.hardware import GPU, resolve_gpu
from parplan.costmodel.spec import Plan, Spec
from parplan.solver.space import Space, SpaceOptions, enumerate_choices
from parplan.solver.bounds import quick_bounds
from parplan.solver.tables import KIB, Row, build_row


class RowView:
    """``rows[i]`` for the solvers, building each choice's table on first use."""

    def __init__(self, problem: "Problem"):
        self.problem = problem

    def __getitem__(self, i: int) -> Row:
        return self.problem.row(i)

    def __len__(self) -> int:
        return len(self.problem.choices)


@dataclass
class Problem:
    """The choices of the space, cheap per-choice bounds, and coefficient rows built on demand."""

    spec: Spec
    assumptions: Assumptions
    gpu: GPU
    options: SpaceOptions
    space: Space
    cap_kib: int
    num_layers: int
    arch: Architecture
    quick_lb: np.ndarray  # lower bound of U per choice, from the choice alone
    quick_mem_kib: np.ndarray  # lower bound of peak memory per choice
    _rows: dict = field(default_factory=dict)
    _base_costs: dict = field(default_factory=dict)

    @staticmethod
    def build(spec: Spec, options: SpaceOptions | None = None, num_gpus: int | None = None) -> "Problem":
        if num_gpus is not None and num_gpus != spec.cluster.num_gpus:
            spec = spec.model_copy(update={"cluster": spec.cluster.model_copy(update={"num_gpus": num_gpus})})
        a = resolve_assumptions(spec.assumptions)
        gpu = resolve_gpu(spec.cluster)
        options = options or SpaceOptions.from_spec(spec)
        space = enumerate_choices(spec, gpu, a, options)
        arch = Architecture(spec.model)
        usable = usable_memory_bytes(spec, gpu, a)
        q_u, q_mem = quick_bounds(spec, space.choices, gpu, a, arch)
        return Problem(spec, a, gpu, options, space, int(math.floor(usable / KIB)), spec.model.num_layers, arch,
                       q_u, q_mem)

    @property
    def choices(self) -> list[Choice]:
        return self.space.choices

    @property
    def rows(self) -> RowView:
        return RowView(self)

    def all_rows(self) -> list[Row]:
        return [self.row(i) for i in range(len(self.choices))]

    def row(self, i: int) -> Row:
        r = self._rows.get(i)
        if r is None:
            c = self.choices[i]
            spec, a = self.spec, self.assumptions
            if c.schedule == "dualpipe":
                costs = choice_costs(spec, c, self.gpu, a, self.arch)
            else:  # schedules other than DualPipe share every term but the p2p: computed once per layout
                key = replace(c, schedule="1f1b", vpp=1)
                if key not in self._base_costs:
                    self._base_costs[key] = choice_costs(spec, key, self.gpu, a, self.arch)
                costs = with_schedule(self._base_costs[key], c)
            moe = spec.model.moe
            r = build_row(costs, a, self.num_layers, moe.first_dense_layers if moe else 0, moe is not None)
            self._rows[i] = r
        return r

    def order(self, cap_kib: int) -> list[int]:
        """Choices that may fit under ``cap_kib``, by their quick bound (ties by index)."""
        ok = np.nonzero(self.quick_mem_kib <= cap_kib)[0]
        return [int(i) for i in ok[np.argsort(self.quick_lb[ok], kind="stable")]]

    def plan(self, row: Row, x: dict) -> Plan:
        c = row.choice
        p = c.pp
        if p == 1:
            layers = [x["lf"]]
            rc = [x["rf1"] + x["rf2"]]
        else:
            layers = [x["lf"]] + [x["lm"]] * (p - 2) + [x["ll"]]
            if c.schedule == "dualpipe":  # rm totals the pair (i, p-1-i) of middle stages a rank holds
                rc = [x["rf1"] + x["rf2"]] + [(x["rm"] + 1) // 2 if i < p - 1 - i else x["rm"] // 2
                                              for i in range(1, p - 1)] + [x["rl"]]
            else:
                rc = [x["rf1"] + x["rf2"]] + [x["rm"]] * (p - 2) + [x["rl"]]
        recompute = c.recompute
        if recompute == "full" and not any(rc) and "none" in self.options.recompute:
            recompute = "none"  # canonical: full recompute of zero layers is no recompute (when 'none' is allowed)
        return Plan(tp=c.tp, cp=c.cp, pp=c.pp, dp=c.dp, ep=c.ep, etp=c.etp, micro_batch_size=c.micro_batch_size,
                    num_microbatches=c.num_microbatches, vpp=c.vpp, schedule=c.schedule, stage_layers=layers,
                    recompute=recompute, recompute_layers=rc, zero_stage=c.zero_stage,
                    sequence_parallel=c.sequence_parallel)

    def evaluate(self, plan: Plan) -> Evaluation:
        return evaluate(self.spec, plan, assumptions=self.assumptions, gpu=self.gpu)
