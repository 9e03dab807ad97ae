"""The exact evaluator: one (spec, plan) in, the full ledger out.

Step time (seed 003): the slowest stage sets the pace, ``step = m·t_max + bubble + DP exposed``, the bubble
from the other stages' times (``costmodel/bubble.py``, Alpa §5.1 Eq. 2);
its breakdown is compute (the mean stage's), recompute, TP, CP, EP, PP (means over stages), imbalance
(slowest minus mean), bubble and DP, and sums to the step time. MFU counts model FLOPs only
(no recomputation) against the dense peak of the training precision.
"""

from __future__ import annotations

from typing import Optional

from pydantic import BaseModel, ConfigDict

from parplan.costmodel import dualpipev
from parplan.costmodel.architecture import Architecture
from parplan.costmodel.assumptions import Assumptions, resolve_assumptions
from parplan.costmodel.choice import Choice, ChoiceCosts, LayerCost, choice_costs, nvlink_domain_size
from parplan.costmodel.dualpipe_steps import StageWork, step_order_defined, step_order_s
from parplan.costmodel.errors import ParplanError
from parplan.costmodel.hardware import GIB, GPU, resolve_gpu
from parplan.costmodel.legality import choice_violations, framework_stage_violations, stage_violations
from parplan.costmodel.runtime_memory import outside_ledger_gib
from parplan.costmodel.schedule import PipelineUnits, Schedule, stage_bubble_weights
from parplan.costmodel.spec import Plan, PlanSpec, Spec
from parplan.costmodel.layout import LayoutError, resolve_layout, stage_activation_bytes, stage_inflight
from parplan.costmodel.framework_binding import runs_on


class PlanError(ParplanError):
    """A plan that cannot be evaluated (its shape contradicts the spec); the message names the field."""


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
    runtime_buffers_gib: float = 0.0  # NCCL buffers, TE userbuffers and cuBLAS workspaces (costmodel/runtime_memory.py)
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
    # (costmodel/dualpipe_steps.py) beside step_time_s's closed form, which the search optimizes; else None
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


NO_PLAN = ("plan: the spec has no plan to evaluate; add a `plan:` section (`plan: {}` takes every default: "
           "tp = cp = pp = 1) or pass a plan")

BREAKDOWN_KEYS = ("compute", "recompute", "tp", "cp", "ep", "pp", "dp", "bubble", "imbalance")


def even_stage_layers(num_layers: int, pp: int, vpp: int = 1) -> list[int]:
    """As even as possible; the remainder goes to the middle stages first (the ends carry embedding/head).

    With ``vpp > 1`` every stage holds ``vpp`` equal model chunks, so its layer count is a multiple of vpp
    (the rule :func:`~parplan.costmodel.legality.stage_violations` applies): the ``num_layers / vpp`` units
    of vpp layers are spread over the stages. With vpp > 1, raises :class:`PlanError` if num_layers is not
    a multiple of vpp or a stage would get no unit."""
    if vpp > 1 and num_layers % vpp:
        raise PlanError(f"plan.vpp: model.num_layers = {num_layers} must be a multiple of vpp ({vpp}) for the "
                        f"default stage_layers (every stage holds vpp equal chunks); give plan.stage_layers")
    units = num_layers // vpp
    if vpp > 1 and units < pp:
        raise PlanError(f"plan.pp: pp·vpp = {pp * vpp} model chunks for model.num_layers = {num_layers}; every "
                        f"chunk needs at least one layer")
    base, rem = divmod(units, pp)
    order = sorted(range(pp), key=lambda i: (abs(i - (pp - 1) / 2), i))
    layers = [base] * pp
    for i in order[:rem]:
        layers[i] += 1
    return [n * vpp for n in layers]


def layout_stage_layers(layout: list[list[int]]) -> list[int]:
    return [sum(chunks) for chunks in layout]


def gpu_count_violation(spec: Spec, num_gpus: int) -> Optional[str]:
    """The plan's tp·cp·pp·dp against ``cluster.num_gpus`` (None when they agree; on several pools a plan may
    leave GPUs idle, each pool's share checked by ``costmodel/pools.py: capacity_violations``)."""
    if spec.cluster.pools is not None and len(spec.cluster.pools) > 1 and num_gpus <= spec.cluster.num_gpus:
        return None
    if num_gpus != spec.cluster.num_gpus:
        return f"tp·cp·pp·dp = {num_gpus} must equal cluster.num_gpus = {spec.cluster.num_gpus}"
    return None


def check_plan_shape(spec: Spec, ps: PlanSpec) -> int:
    """The one shape check of a YAML plan before the cost model builds per-stage lists; returns its dp.

    Refused, each as a :class:`PlanError` naming the field: more pipeline stages than layers (every stage needs
    a layer; the degree would otherwise be unbounded), an explicit ``dp`` whose tp·cp·pp·dp is not the cluster,
    an ``ep·etp`` that does not divide tp·cp·dp (EP folds into DP×CP; the expert data-parallel group would be
    empty), and a tp·cp·pp that does not divide the cluster when dp is derived."""
    gpus, L = spec.cluster.num_gpus, spec.model.num_layers
    mp = ps.tp * ps.cp * ps.pp
    if ps.pp > L:
        raise PlanError(f"plan.pp: {ps.pp} pipeline stages for model.num_layers = {L}; every stage needs at least "
                        f"one layer")
    if ps.dp is not None and (why := gpu_count_violation(spec, mp * ps.dp)):
        raise PlanError(f"plan: {why}")
    ranks = ps.tp * ps.cp * (ps.dp or max(1, gpus // mp))
    if ranks % (ps.ep * ps.etp):
        raise PlanError(f"plan: ep·etp ({ps.ep * ps.etp}) must divide tp·cp·dp ({ranks}) (EP folds into DP×CP)")
    if ps.dp is None and gpus % mp:
        raise PlanError(f"plan: tp·cp·pp = {mp} does not divide cluster.num_gpus = {gpus}")
    return ps.dp or gpus // mp


def resolve_plan(spec: Spec, ps: PlanSpec) -> Plan:
    """Fill a YAML plan's defaults (dp, num_microbatches, stage_layers, recompute_layers) after
    :func:`check_plan_shape`."""
    gbs, L = spec.training.global_batch_size, spec.model.num_layers
    dp = check_plan_shape(spec, ps)
    m = ps.num_microbatches
    if m is None:
        if gbs % (dp * ps.micro_batch_size):
            raise PlanError(f"plan: dp·micro_batch_size = {dp * ps.micro_batch_size} does not divide "
                            f"training.global_batch_size = {gbs}")
        m = gbs // (dp * ps.micro_batch_size)
    vpp, schedule, layout = ps.vpp, ps.schedule, None
    if ps.pipeline_layout is not None:
        try:
            resolved = resolve_layout(ps.pipeline_layout, ps.pp, L)
        except LayoutError as e:
            raise PlanError(f"plan.pipeline_layout: {e}") from None
        layout = resolved.decoder
        if "vpp" in ps.model_fields_set and ps.vpp != resolved.vpp:
            raise PlanError(f"plan.vpp = {ps.vpp} but plan.pipeline_layout has {resolved.vpp} chunks per stage")
        vpp = resolved.vpp
        if vpp > 1 and "schedule" not in ps.model_fields_set:
            schedule = Schedule.INTERLEAVED.value  # Megatron runs virtual stages with the interleaved schedule
        if ps.stage_layers is not None and list(ps.stage_layers) != resolved.stage_layers:
            raise PlanError(f"plan.stage_layers {list(ps.stage_layers)} differ from the layout's {resolved.stage_layers}")
        empty = [i for i, n in enumerate(resolved.stage_layers) if n == 0]
        if empty:
            raise PlanError(f"plan.pipeline_layout: stage {empty[0]} holds no decoder layer (the cost model needs one)")
    stage_layers = (list(ps.stage_layers) if ps.stage_layers is not None
                    else layout_stage_layers(layout) if layout is not None else even_stage_layers(L, ps.pp, vpp))
    if ps.recompute_layers is not None:
        rc = list(ps.recompute_layers)
    else:
        rc = list(stage_layers) if ps.recompute == "full" else [0] * len(stage_layers)
    return Plan(tp=ps.tp, cp=ps.cp, pp=ps.pp, dp=dp, ep=ps.ep, etp=ps.etp, micro_batch_size=ps.micro_batch_size,
                num_microbatches=m, vpp=vpp, schedule=schedule, stage_layers=stage_layers,
                recompute=ps.recompute, recompute_layers=rc, zero_stage=ps.zero_stage,
                sequence_parallel=ps.sequence_parallel and ps.tp > 1, pipeline_layout=layout,
                cp_comm_type=ps.cp_comm_type if ps.cp > 1 else "p2p",
                zero_replicas=ps.zero_replicas, optimizer_states=ps.optimizer_states,
                optimizer_offload_fraction=ps.optimizer_offload_fraction,
                moe_fp8_dispatch=ps.moe_fp8_dispatch, moe_a2a_overlap=ps.moe_a2a_overlap,
                activation_offload_layers=ps.activation_offload_layers,
                stage_pools=list(ps.stage_pools) if ps.stage_pools is not None else None)


def plan_choice(plan: Plan) -> Choice:
    """``plan.to_choice()`` (the name tests and benchmarks import)."""
    return plan.to_choice()


def layer_classes(spec: Spec, stage_layers: list[int]) -> list[tuple[int, int]]:
    """(dense, moe) layer counts per stage; MoE models put their leading dense layers first."""
    k = spec.model.num_layers if spec.model.moe is None else spec.model.moe.first_dense_layers
    out, start = [], 0
    for n in stage_layers:
        dense = max(0, min(k, start + n) - start)
        out.append((dense, n - dense))
        start += n
    return out


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
        t = t + _layers(lc, n, r)
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
    DualPipeV rank 0, whose second chunk is stage 2p-1 (costmodel/dualpipev.py)."""
    return PipelineUnits.of(c).last_stage


def _layers(lc: LayerCost, n: int, r: int) -> StageTotals:
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


def evaluate(spec: Spec, plan: Plan | PlanSpec | None = None, *, assumptions: Optional[Assumptions] = None,
             gpu: Optional[GPU] = None) -> Evaluation:
    """Evaluate ``plan`` (default: the spec's ``plan:``; a spec without one is a PlanError naming ``plan``)
    under the spec's assumptions."""
    if plan is None:
        plan = spec.plan
    if plan is None:
        raise PlanError(NO_PLAN)
    if isinstance(plan, PlanSpec):
        plan = resolve_plan(spec, plan)
    if spec.cluster.pools is not None and len(spec.cluster.pools) > 1:  # issue 21: each stage on its pool
        from parplan.costmodel.pools import evaluate_pool_plan
        return evaluate_pool_plan(spec, plan, assumptions)
    a = assumptions or resolve_assumptions(spec.assumptions)
    gpu = gpu or resolve_gpu(spec.cluster)
    c = plan.to_choice()
    structural = stage_violations(spec, c, plan.stage_layers, plan.recompute_layers, plan.pipeline_layout)
    if why := gpu_count_violation(spec, plan.num_gpus):
        structural.insert(0, why)
    if structural:
        raise PlanError("plan: " + "; ".join(structural))
    domain = nvlink_domain_size(spec, gpu)
    violations = choice_violations(spec, c, a, domain) + framework_stage_violations(
        spec, c, plan.stage_layers, plan.recompute_layers, plan.pipeline_layout)
    costs = choice_costs(spec, c, gpu, a)
    return evaluate_costs(spec, plan, costs, a, violations)


def evaluate_costs(spec: Spec, plan: Plan, costs: ChoiceCosts, a: Assumptions, violations: list[str]) -> Evaluation:
    """The ledger of ``plan`` from its choice's ``costs``: per-stage totals, the schedule's rows, the step time
    and its breakdown, the per-stage memory and the metrics (the module docstring)."""
    c = costs.choice
    classes = layer_classes(spec, plan.stage_layers)
    stages = [stage_totals(costs, i, d, e, r) for i, ((d, e), r) in enumerate(zip(classes, plan.recompute_layers))]
    ranks = paired_exposure(costs, PipelineUnits.of(c), classes, schedule_rows(PipelineUnits.of(c), stages))
    step, breakdown = step_time(costs, a, ranks)
    by_order = paired_step_order_s(costs, a, classes, stages, max(r.dp_s for r in ranks))
    stage_reports = [stage_report(plan, costs, i, r, d, e) for i, (r, (d, e)) in enumerate(zip(ranks, classes))]
    mem = [s.memory_gib for s in stage_reports]
    usable_gib = costs.usable_memory_bytes / GIB
    violations = list(violations)
    for i, g in enumerate(mem):
        if g > usable_gib:
            violations.append(f"stage {i} needs {g:.1f} GiB, more than the {usable_gib:.1f} GiB usable per GPU")
    metrics = step_metrics(spec, costs, a, stages, step, breakdown, mem).model_copy(
        update={"step_order_step_s": by_order})
    return Evaluation(plan=plan, metrics=metrics, stages=stage_reports, violations=violations,
                      runs_on=runs_on(spec, plan))


def schedule_rows(units: PipelineUnits, stages: list[StageTotals]) -> list[StageTotals]:
    """One row per rank as the schedule runs it: under DualPipe rank i runs stage i for one direction and stage
    p-1-i for the other, half the micro-batches each (times and activations weighted by
    :attr:`~PipelineUnits.stage_share`; states, DP time, logits and buffers summed); a DualPipeV rank is one unit
    too (its ``stage_layers`` entry is the rank's total, costmodel/dualpipev.py); otherwise the stages."""
    if units.stages_per_unit == 1:
        return stages
    rows = []
    for i in range(units.pp):
        both = stages[i] + stages[units.partner(i)]
        per_mb = both.scaled(units.stage_share)
        rows.append(per_mb.model_copy(update={"states_bytes": both.states_bytes, "dp_s": both.dp_s,
                                              "logits_bytes": both.logits_bytes, "buffer_bytes": both.buffer_bytes}))
    return rows


def paired_exposure(costs: ChoiceCosts, units: PipelineUnits, classes: list[tuple[int, int]],
                    rows: list[StageTotals]) -> list[StageTotals]:
    """DualPipe and DualPipeV rows with the all-to-all each rank's step leaves exposed
    (:meth:`ChoiceCosts.rank_exposed_s`, costmodel/paired_overlap.py): a DualPipe rank's two stages (phase 0 the
    lower of i and p-1-i), a DualPipeV rank's two chunks (:func:`dualpipev.chunk_split`, the model's leading dense layers in
    chunk 0); other schedules' rows unchanged."""
    if not units.schedule.paired:
        return rows
    out = []
    for i, row in enumerate(rows):
        if units.schedule is Schedule.DUALPIPE:
            a, b = classes[min(i, units.partner(i))], classes[max(i, units.partner(i))]
        else:
            a, b = dualpipev.chunk_classes(*classes[i])
        out.append(row.model_copy(update={"ep_s": row.ep_s + costs.rank_exposed_s(i, a, b)}))
    return out


def paired_step_order_s(costs: ChoiceCosts, a: Assumptions, classes: list[tuple[int, int]],
                        stages: list[StageTotals], dp_exposed_s: float) -> Optional[float]:
    """A DualPipe or DualPipeV plan's step by its step order (costmodel/dualpipe_steps.py, the longest path) plus
    the exposed DP term, or None for other schedules. Per model stage: C its layers' compute (what hides a
    partner's all-to-all, :meth:`ChoiceCosts.chunk_work`), X their all-to-all, E the rest of its time per
    micro-batch. A DualPipeV rank's two chunks split as :func:`dualpipev.chunk_classes` splits them; the rank's
    embedding goes to chunk 0 and its head and loss to chunk 1 (rank 0), its other time by layers. None where the
    step order does not exist (an odd or too small micro-batch count: the plan's violations name the rule)."""
    c = costs.choice
    units = PipelineUnits.of(c)
    if not units.schedule.paired or not step_order_defined(c.schedule, c.pp, c.num_microbatches):
        return None  # other schedules; a plan breaking the schedule's micro-batch rule (its violations say so)
    if units.schedule is Schedule.DUALPIPE:
        work = [(costs.chunk_work(*k), st.time_s) for k, st in zip(classes, stages)]
        C, X, E = [w.compute_s for w, _ in work], [w.a2a_s for w, _ in work], [t - w.compute_s for w, t in work]
    else:
        P = c.pp
        C, X, E = [0.0] * (2 * P), [0.0] * (2 * P), [0.0] * (2 * P)
        for r, ((dense, moe), st) in enumerate(zip(classes, stages)):
            ends = (costs.first_extra_time_s, costs.last_extra_time_s) if r == 0 else (0.0, 0.0)
            chunks = dualpipev.chunk_classes(dense, moe)
            parts = [costs.chunk_work(*k) for k in chunks]
            rest = st.time_s - sum(p.compute_s for p in parts) - sum(ends)
            for phase, (s, k, p) in enumerate(zip((r, 2 * P - 1 - r), chunks, parts)):
                share = sum(k) / (dense + moe) if dense + moe else 0.5
                C[s], X[s], E[s] = p.compute_s, p.a2a_s, rest * share + ends[phase]
    w = a.zb_weight_grad_fraction * min(1.0, max(0.0, costs.weight_grad_share))
    return step_order_s(c.schedule, StageWork(C, X, costs.fwd_share, w, E), c.num_microbatches) + dp_exposed_s


def step_time(costs: ChoiceCosts, a: Assumptions, ranks: list[StageTotals]) -> tuple[float, dict[str, float]]:
    """(step seconds, breakdown): ``m·t_max + bubble + DP exposed``, the bubble from the other rows' times
    (costmodel/schedule.py :func:`stage_bubble_weights`), the breakdown's terms as means over the rows."""
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
    if plan.pipeline_layout is not None and c.schedule == Schedule.INTERLEAVED:
        # uneven chunks: each in-flight chunk forward holds its own chunk's layers, and saves for the chunk's own
        # recomputed layers (costmodel/layout.py stage_activation_bytes); per-layer bytes are the stage's means
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


def step_metrics(spec: Spec, costs: ChoiceCosts, a: Assumptions, stages: list[StageTotals], step: float,
                 breakdown: dict[str, float], mem: list[float]) -> Metrics:
    """MFU (model FLOPs only), HFU (with the recomputed forwards), tokens/s and the memory verdict."""
    c = costs.choice
    usable_gib = costs.usable_memory_bytes / GIB
    arch = Architecture(spec.model)
    tokens = spec.training.global_batch_size * spec.training.seq_len
    model_flops = arch.model_flops_per_token(spec.training.seq_len, a.attention_flops_causal_fraction) * tokens
    gpus = c.num_gpus
    peak = costs.peak_flops
    # hardware FLOPs add the recomputed forwards: every stage's GPUs (tp·cp·dp) run m micro-batches
    recompute_flops = c.num_microbatches * sum(st.recompute_flops for st in stages) * (gpus // c.pp)
    return Metrics(
        step_time_s=step,
        mfu=model_flops / (step * gpus * peak),
        tokens_per_s=tokens / step,
        peak_memory_gib=max(mem),
        stage_memory_gib=mem,
        breakdown_s=breakdown,
        hfu=(model_flops + recompute_flops) / (step * gpus * peak),
        model_tflops_per_gpu=model_flops / step / gpus / 1e12,
        usable_memory_gib=usable_gib,
        fits=all(g <= usable_gib for g in mem),
        memory_outside_ledger_gib=outside_ledger_gib(spec, costs, a),
    )
