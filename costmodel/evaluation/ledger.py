"""The stage ledger: one stage's per-micro-batch times and resident bytes (:class:`StageTotals`), the step time
over a schedule's rows and its breakdown, the per-stage report, and the evaluation's types (:class:`Evaluation`,
:class:`Metrics`, :class:`StageReport`): what the single-pool evaluator (``costmodel/evaluation/evaluate.py``) and the pools
evaluator (``costmodel/evaluation/pools.py``) share.

Step time (seed 003): the slowest stage sets the pace, ``step = m·t_max + bubble + DP exposed``, the bubble
from the other stages' times (``costmodel/schedules/bubble.py``, Alpa §5.1 Eq. 2); its breakdown is compute (the mean
stage's), recompute, TP, CP, EP, PP (means over stages), imbalance (slowest minus mean), bubble and DP, and sums
to the step time.
"""

from __future__ import annotations

from typing import Optional

from pydantic import BaseModel, ConfigDict

from parplan.costmodel.compute.architecture import Architecture
from parplan.costmodel.spec.assumptions import Assumptions
from parplan.costmodel.evaluation.choice import Choice, ChoiceCosts, LayerCost
from parplan.costmodel.spec.hardware import GIB
from parplan.costmodel.spec.layout import model_chunk_layers, stage_activation_bytes, stage_inflight
from parplan.costmodel.moe.moe_dispatch import kept_share
from parplan.costmodel.schedules.schedule import PipelineUnits, Schedule, stage_bubble_weights
from parplan.costmodel.spec.spec import Plan, Spec


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class StageReport(_Out):
    index: int
    layers: int
    dense_layers: int
    moe_layers: int
    recomputed_layers: int
    inflight_microbatches: float
    time_per_microbatch_s: float
    compute_s: float
    recompute_s: float
    tp_s: float
    cp_s: float
    ep_s: float
    pp_s: float
    zero_s: float
    dp_s: float
    model_states_gib: float
    activations_gib: float
    logits_gib: float
    workspace_gib: float
    pipeline_buffers_gib: float
    runtime_buffers_gib: float = 0.0  # NCCL buffers, TE userbuffers and cuBLAS workspaces (costmodel/memory/runtime_memory.py)
    memory_gib: float


class Metrics(_Out):
    step_time_s: float
    mfu: float
    tokens_per_s: float
    peak_memory_gib: float
    stage_memory_gib: list[float]
    breakdown_s: dict[str, float]
    hfu: float
    model_tflops_per_gpu: float
    usable_memory_gib: float
    fits: bool
    # every term outside the tensor ledger, GiB per GPU: cuda_context and allocator_fragmentation (left out of
    # usable_memory_gib), nccl_buffers, userbuffers and te_workspaces (each stage's runtime_buffers_gib)
    memory_outside_ledger_gib: dict[str, float] = {}
    # DualPipe / DualPipeV: the step by the upstream step order over this plan's per-stage times
    # (costmodel/schedules/dualpipe_steps.py) beside step_time_s's closed form, which the search optimizes; else None
    step_order_step_s: Optional[float] = None


class Evaluation(_Out):
    plan: Plan
    metrics: Metrics
    stages: list[StageReport]
    violations: list[str]
    runs_on: list[str] = []  # frameworks whose profile can run the plan (frameworks/profiles.py runs_on)

    @property
    def feasible(self) -> bool:
        return not self.violations


BREAKDOWN_KEYS = ("compute", "recompute", "tp", "cp", "ep", "pp", "dp", "bubble", "imbalance")


def layer_classes(spec: Spec, stage_layers: list[int],
                  chunk_layers: Optional[list[int]] = None) -> list[tuple[int, int]]:
    """(dense, moe) layer counts per stage; MoE models put their leading dense layers first: in stage order, or under
    the interleaved schedule (``chunk_layers``: each model chunk's layers in model-chunk order, chunk i on stage
    i mod pp: :func:`interleaved_chunk_layers`) in that order, so leading dense layers past stage 0's first chunk sit on
    stage 1."""
    k = spec.model.num_layers if spec.model.moe is None else spec.model.moe.first_dense_layers
    if chunk_layers is not None and spec.model.moe is not None:
        dense, left = [0] * len(stage_layers), k
        for i, n in enumerate(chunk_layers):
            take = min(left, n)
            dense[i % len(stage_layers)], left = dense[i % len(stage_layers)] + take, left - take
        return [(d, n - d) for d, n in zip(dense, stage_layers)]
    out, start = [], 0
    for n in stage_layers:
        dense = max(0, min(k, start + n) - start)
        out.append((dense, n - dense))
        start += n
    return out


def interleaved_chunk_layers(plan: Plan) -> Optional[list[int]]:
    """:func:`~parplan.costmodel.spec.layout.model_chunk_layers` under the interleaved schedule; None for the others."""
    if plan.schedule is not Schedule.INTERLEAVED or plan.vpp < 2:
        return None
    return model_chunk_layers(plan)


class StageTotals(BaseModel):
    """One stage's per-micro-batch times, resident bytes and per-step DP time (before schedule pairing)."""

    compute_s: float = 0.0
    recompute_s: float = 0.0
    tp_s: float = 0.0
    cp_s: float = 0.0
    ep_s: float = 0.0
    pp_s: float = 0.0
    zero_s: float = 0.0
    dp_s: float = 0.0
    states_bytes: float = 0.0
    act_bytes: float = 0.0  # per in-flight micro-batch
    act_saved_bytes: float = 0.0  # of which recomputation saves (already subtracted from act_bytes)
    logits_bytes: float = 0.0
    workspace_bytes: float = 0.0  # once per stage (a DualPipe rank: the mean of its two stages')
    buffer_bytes: float = 0.0  # the pipeline runtime's boundary buffers (a DualPipe rank: both stages')
    runtime_bytes: float = 0.0  # NCCL / TE buffers, once per stage (a DualPipe rank: the mean of its two stages')
    model_flops: float = 0.0
    recompute_flops: float = 0.0

    def memory_bytes(self, activations_bytes: float) -> float:
        """The stage's memory with ``activations_bytes`` of in-flight activations: every other ledger line once."""
        return (self.states_bytes + activations_bytes + self.logits_bytes + self.workspace_bytes + self.buffer_bytes
                + self.runtime_bytes)

    @property
    def time_s(self) -> float:
        return self.compute_s + self.recompute_s + self.tp_s + self.cp_s + self.ep_s + self.pp_s + self.zero_s

    def __add__(self, other: "StageTotals") -> "StageTotals":
        return StageTotals(**{k: getattr(self, k) + getattr(other, k) for k in StageTotals.model_fields})

    def scaled(self, f: float) -> "StageTotals":
        return StageTotals(**{k: getattr(self, k) * f for k in StageTotals.model_fields})


def stage_totals(costs: ChoiceCosts, index: int, dense: int, moe: int, recomputed: int) -> StageTotals:
    c = costs.choice
    t = StageTotals(pp_s=costs.p2p_s, dp_s=costs.dp_const_s, workspace_bytes=costs.stage_workspace_bytes(recomputed),
                    buffer_bytes=costs.pipeline_buffer_bytes(index), runtime_bytes=costs.runtime_bytes)
    for lc, n, r in ((costs.dense, dense, min(recomputed, dense)), (costs.moe, moe, max(0, recomputed - dense))):
        if n == 0 or lc is None:
            continue
        t = t + layer_totals(lc, n, r)
    if index == 0:
        t = t + StageTotals(zero_s=costs.first_extra_time_s, states_bytes=costs.first_extra_bytes,
                            dp_s=costs.first_extra_dp_s, model_flops=costs.first_extra_flops)
    if index == last_stage_unit(c):
        t = t + StageTotals(compute_s=costs.last_extra_compute_s,
                            zero_s=costs.last_extra_time_s - costs.last_extra_compute_s,
                            states_bytes=costs.last_extra_bytes, logits_bytes=costs.logits_bytes,
                            dp_s=costs.last_extra_dp_s, model_flops=costs.last_extra_flops)
    return t


def last_stage_unit(c: Choice) -> int:
    """The pipeline unit holding the model's last stage (the head, the loss, MTP): the last rank, or under
    DualPipeV rank 0, whose second chunk is stage 2p-1 (costmodel/schedules/dualpipev.py)."""
    return PipelineUnits.of(c).last_stage


def layer_totals(lc: LayerCost, n: int, r: int) -> StageTotals:
    """The totals of ``n`` layers priced by ``lc``, ``r`` of them fully recomputed."""
    rc_tp, rc_cp, rc_ep = lc.recompute_comm
    rc_compute = lc.recompute_s - rc_tp - rc_cp - rc_ep
    return StageTotals(
        compute_s=n * (lc.compute_s - lc.selective_s),
        recompute_s=n * lc.selective_s + r * rc_compute,
        tp_s=n * lc.tp_s + r * rc_tp,
        cp_s=n * lc.cp_s + r * rc_cp,
        ep_s=n * lc.ep_s + r * rc_ep,
        zero_s=n * lc.zero_s,
        dp_s=n * lc.dp_s,
        states_bytes=n * lc.states_bytes,
        act_bytes=(n - r) * lc.act_bytes + r * lc.act_recomputed_bytes,
        act_saved_bytes=r * (lc.act_bytes - lc.act_recomputed_bytes),
        model_flops=n * lc.model_flops,
        recompute_flops=r * lc.recompute_flops,
    )


def step_time(costs: ChoiceCosts, a: Assumptions, ranks: list[StageTotals]) -> tuple[float, dict[str, float]]:
    """(step seconds, breakdown): ``m·t_max + bubble + DP exposed``, the bubble from the other rows' times
    (costmodel/schedules/schedule.py :func:`stage_bubble_weights`), the breakdown's terms as means over the rows."""
    m = costs.choice.num_microbatches
    times = [r.time_s for r in ranks]
    t_max = max(times)
    w_max, w_sum = stage_bubble_weights(costs.bubble_s(1.0, a), len(ranks), a.uneven_stage_bubble)
    bubble = w_max * t_max + w_sum * sum(times)  # the other stages' times fill and drain
    dp_exposed = max(r.dp_s for r in ranks)
    n = len(ranks)
    mean = lambda attr: sum(getattr(r, attr) for r in ranks) / n  # noqa: E731
    breakdown = {
        "compute": m * mean("compute_s"),
        "recompute": m * mean("recompute_s"),
        "tp": m * mean("tp_s"),
        "cp": m * mean("cp_s"),
        "ep": m * mean("ep_s"),
        "pp": m * mean("pp_s"),
        "dp": dp_exposed + m * mean("zero_s"),
        "bubble": bubble,
        "imbalance": m * (t_max - sum(times) / n),
    }
    return m * t_max + bubble + dp_exposed, breakdown


def stage_report(plan: Plan, costs: ChoiceCosts, i: int, r: StageTotals, dense: int, moe: int) -> StageReport:
    """Row ``i``'s report: its times per micro-batch and its memory ledger (activations at its in-flight count)."""
    c = costs.choice
    inflight = costs.inflight(i)
    activations = inflight * r.act_bytes
    if plan.pipeline_layout is not None and c.schedule is Schedule.INTERLEAVED:
        # uneven chunks: each in-flight chunk forward holds its own chunk's layers, and saves for the chunk's own
        # recomputed layers (costmodel/spec/layout.py stage_activation_bytes); per-layer bytes are the stage's means
        layers, rec = plan.stage_layers[i], plan.recompute_layers[i]
        full = (r.act_bytes + r.act_saved_bytes) / layers if layers else 0.0
        saved = r.act_saved_bytes / rec if rec else 0.0
        activations = stage_activation_bytes(plan.pipeline_layout, c.pp, c.vpp, c.num_microbatches, i, full, saved,
                                             rec)
        inflight = activations / r.act_bytes if r.act_bytes else stage_inflight(
            plan.pipeline_layout, c.pp, c.vpp, c.num_microbatches, i)
    total = r.memory_bytes(activations)
    return StageReport(
        index=i, layers=plan.stage_layers[i], dense_layers=dense, moe_layers=moe,
        recomputed_layers=plan.recompute_layers[i], inflight_microbatches=inflight,
        time_per_microbatch_s=r.time_s, compute_s=r.compute_s, recompute_s=r.recompute_s, tp_s=r.tp_s,
        cp_s=r.cp_s, ep_s=r.ep_s, pp_s=r.pp_s, zero_s=r.zero_s, dp_s=r.dp_s,
        model_states_gib=r.states_bytes / GIB, activations_gib=activations / GIB,
        logits_gib=r.logits_bytes / GIB, workspace_gib=r.workspace_bytes / GIB,
        pipeline_buffers_gib=r.buffer_bytes / GIB, runtime_buffers_gib=r.runtime_bytes / GIB, memory_gib=total / GIB)


def step_model_flops(spec: Spec, a: Assumptions, arch: Architecture) -> float:
    """The model FLOPs of one step (MFU's numerator): the per-token count of ``Architecture.model_flops_per_token``
    times the step's tokens, routed experts counted on the tokens a capacity factor keeps
    (``moe_dispatch.kept_share``); shared by the one-pool and the pools evaluator."""
    tokens = spec.training.global_batch_size * spec.training.seq_len
    return arch.model_flops_per_token(spec.training.seq_len, a.attention_flops_causal_fraction,
                                      kept_share(a, spec.model.moe)) * tokens
