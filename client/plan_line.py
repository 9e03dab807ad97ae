"""A plan in one line for people (``TP2 CP1 PP1 DP32 mbs2×8 1f1b ZeRO-1``): the tables of client/report.py and the
export's summary (client/export_cli.py)."""

from __future__ import annotations

from typing import Iterable

from parplan.costmodel.spec.spec import Plan


def ints(values: Iterable[int]) -> str:
    return "[" + ", ".join(str(v) for v in values) + "]"


def short_plan(p: Plan) -> str:
    s = f"TP{p.tp} CP{p.cp} PP{p.pp} DP{p.dp}"
    if p.ep > 1 or p.etp > 1:
        s += f" EP{p.ep} ETP{p.etp}"
    s += f" mbs{p.micro_batch_size}×{p.num_microbatches} {p.schedule}"
    if p.vpp > 1:
        s += f" v{p.vpp}"
    s += f" ZeRO-{p.zero_stage}"
    if p.zero_replicas > 1:
        s += f" HSDP×{p.zero_replicas}"
    if p.optimizer_states is not None:
        s += f" opt {p.optimizer_states}"
    if p.optimizer_offload_fraction > 0:
        s += f" offload {p.optimizer_offload_fraction:g}"
    if p.activation_offload_layers:
        s += f" act-offload {p.activation_offload_layers}"
    if len(set(p.stage_layers)) > 1:
        s += " layers " + ints(p.stage_layers) if p.pp <= 4 else f" layers {p.stage_layers[0]}/{p.stage_layers[1]}…/{p.stage_layers[-1]}"
    if any(p.recompute_layers):
        s += " recompute " + (ints(p.recompute_layers) if p.pp <= 4 else f"{sum(p.recompute_layers)} layers")
    elif p.recompute == "selective":
        s += " selective"
    return s


__all__ = ["ints", "short_plan"]
