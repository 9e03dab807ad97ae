"""A planning problem: the spec resolved into the rows both search methods read, and plan reconstruction."""

from __future__ import annotations

import math
from dataclasses import dataclass

from parplan.costmodel.architecture import Architecture
from parplan.costmodel.assumptions import Assumptions, resolve_assumptions
from parplan.costmodel.choice import choice_costs
from parplan.costmodel.evaluate import Evaluation, evaluate
from parplan.costmodel.hardware import GPU, resolve_gpu
from parplan.costmodel.spec import Plan, Spec
from parplan.solver.space import Space, SpaceOptions, enumerate_choices
from parplan.solver.tables import KIB, Row, build_row


@dataclass
class Problem:
    spec: Spec
    assumptions: Assumptions
    gpu: GPU
    options: SpaceOptions
    space: Space
    rows: list[Row]
    cap_kib: int
    num_layers: int

    @staticmethod
    def build(spec: Spec, options: SpaceOptions | None = None, num_gpus: int | None = None) -> "Problem":
        if num_gpus is not None and num_gpus != spec.cluster.num_gpus:
            spec = spec.model_copy(update={"cluster": spec.cluster.model_copy(update={"num_gpus": num_gpus})})
        a = resolve_assumptions(spec.assumptions)
        gpu = resolve_gpu(spec.cluster)
        options = options or SpaceOptions.from_spec(spec)
        space = enumerate_choices(spec, gpu, a, options)
        arch = Architecture(spec.model)
        moe = spec.model.moe
        k = moe.first_dense_layers if moe else 0
        rows = []
        usable = None
        for c in space.choices:
            costs = choice_costs(spec, c, gpu, a, arch)
            usable = costs.usable_memory_bytes
            rows.append(build_row(costs, a, spec.model.num_layers, k, moe is not None))
        if usable is None:
            from parplan.costmodel.choice import usable_memory_bytes

            usable = usable_memory_bytes(spec, gpu, a)
        return Problem(spec, a, gpu, options, space, rows, int(math.floor(usable / KIB)), spec.model.num_layers)

    def plan(self, row: Row, x: dict) -> Plan:
        c = row.choice
        p = c.pp
        if p == 1:
            layers = [x["lf"]]
            rc = [x["rf1"] + x["rf2"]]
        else:
            layers = [x["lf"]] + [x["lm"]] * (p - 2) + [x["ll"]]
            rc = [x["rf1"] + x["rf2"]] + [x["rm"]] * (p - 2) + [x["rl"]]
        recompute = c.recompute
        if recompute == "full" and not any(rc):
            recompute = "none"  # canonical: full recompute of zero layers is no recompute
        return Plan(tp=c.tp, cp=c.cp, pp=c.pp, dp=c.dp, ep=c.ep, etp=c.etp, micro_batch_size=c.micro_batch_size,
                    num_microbatches=c.num_microbatches, vpp=c.vpp, schedule=c.schedule, stage_layers=layers,
                    recompute=recompute, recompute_layers=rc, zero_stage=c.zero_stage,
                    sequence_parallel=c.sequence_parallel)

    def evaluate(self, plan: Plan) -> Evaluation:
        return evaluate(self.spec, plan, assumptions=self.assumptions, gpu=self.gpu)
