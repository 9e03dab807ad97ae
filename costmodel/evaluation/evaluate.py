"""The exact evaluator: one (spec, plan) in, the full ledger out.

A plan on one GPU type is priced here, its stages' totals, step time and reports by the stage ledger
(``costmodel/evaluation/ledger.py``: the step time's formula and breakdown); a plan on several ``cluster.pools`` by
``costmodel/evaluation/pools.py``, on the same ledger. MFU counts model FLOPs only (no recomputation) against the dense
peak of the training precision.
"""

from __future__ import annotations

from typing import Callable, Optional

from parplan.costmodel.schedules import dualpipev
from parplan.costmodel.compute.architecture import Architecture
from parplan.costmodel.spec.assumptions import Assumptions, resolve_assumptions
from parplan.costmodel.evaluation.choice import Choice, ChoiceCosts, choice_costs, nvlink_domain_size
from parplan.costmodel.schedules.dualpipe_steps import StageWork, step_order_defined, step_order_s
from parplan.costmodel.errors import ParplanError
from parplan.costmodel.spec.hardware import GIB, GPU, resolve_gpu
from parplan.costmodel.evaluation.ledger import (Evaluation, Metrics, StageTotals, interleaved_chunk_layers, layer_classes,
                                                 stage_report, stage_totals, step_model_flops, step_time)
from parplan.costmodel.evaluation.legality import choice_violations, framework_stage_violations, stage_violations
from parplan.costmodel.evaluation.pools import evaluate_pool_plan
from parplan.costmodel.memory.runtime_memory import outside_ledger_gib
from parplan.costmodel.schedules.schedule import PipelineUnits, Schedule
from parplan.costmodel.spec.spec import Plan, PlanSpec, Spec
from parplan.costmodel.spec.layout import LayoutError, resolve_layout
from parplan.costmodel.spec.plan_fields import COPIED_BY_RESOLVE
from parplan.costmodel.spec.framework_binding import runs_on


class PlanError(ParplanError):
    """A plan that cannot be evaluated (its shape contradicts the spec); the message names the field."""


NO_PLAN = ("plan: the spec has no plan to evaluate; add a `plan:` section (`plan: {}` takes every default: "
           "tp = cp = pp = 1) or pass a plan")


def even_stage_layers(num_layers: int, pp: int, vpp: int = 1) -> list[int]:
    """As even as possible; the remainder goes to the middle stages first (the ends carry embedding/head).

    With ``vpp > 1`` every stage holds ``vpp`` equal model chunks, so its layer count is a multiple of vpp
    (the rule :func:`~parplan.costmodel.evaluation.legality.stage_violations` applies): the ``num_layers / vpp`` units
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
    leave GPUs idle, each pool's share checked by ``costmodel/evaluation/pools.py: capacity_violations``)."""
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
    :func:`check_plan_shape`: the fields declared ``resolved`` (costmodel/spec/plan_fields.py) computed here, the
    others copied."""
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
            schedule = Schedule.INTERLEAVED  # Megatron runs virtual stages with the interleaved schedule
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
    return Plan(**{name: getattr(ps, name) for name in COPIED_BY_RESOLVE}, dp=dp, num_microbatches=m, vpp=vpp,
                schedule=schedule, stage_layers=stage_layers, recompute_layers=rc,
                sequence_parallel=ps.sequence_parallel and ps.tp > 1, pipeline_layout=layout,
                cp_comm_type=ps.cp_comm_type if ps.cp > 1 else "p2p")


def plan_choice(plan: Plan) -> Choice:
    """``plan.to_choice()`` (the name tests and benchmarks import)."""
    return plan.to_choice()


def evaluate(spec: Spec, plan: Plan | PlanSpec | None = None, *, assumptions: Optional[Assumptions] = None,
             gpu: Optional[GPU] = None, costs_of: Optional[Callable[..., ChoiceCosts]] = None) -> Evaluation:
    """Evaluate ``plan`` (default: the spec's ``plan:``; a spec without one is a PlanError naming ``plan``)
    under the spec's assumptions. ``costs_of(spec, choice, gpu, assumptions)``: :func:`choice_costs` or a cache of
    its answers (solver/warm_cache.py)."""
    if plan is None:
        plan = spec.plan
    if plan is None:
        raise PlanError(NO_PLAN)
    if isinstance(plan, PlanSpec):
        plan = resolve_plan(spec, plan)
    if spec.cluster.pools is not None and len(spec.cluster.pools) > 1:  # issue 21: each stage on its pool
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
    costs = (costs_of or choice_costs)(spec, c, gpu, a)
    return evaluate_costs(spec, plan, costs, a, violations)


def evaluate_costs(spec: Spec, plan: Plan, costs: ChoiceCosts, a: Assumptions, violations: list[str]) -> Evaluation:
    """The ledger of ``plan`` from its choice's ``costs``: per-stage totals, the schedule's rows, the step time
    and its breakdown, the per-stage memory and the metrics (the module docstring)."""
    c = costs.choice
    classes = layer_classes(spec, plan.stage_layers, interleaved_chunk_layers(plan))
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
    too (its ``stage_layers`` entry is the rank's total, costmodel/schedules/dualpipev.py); otherwise the stages."""
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
    (:meth:`ChoiceCosts.rank_exposed_s`, costmodel/schedules/paired_overlap.py): a DualPipe rank's two stages (phase 0 the
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
    """A DualPipe or DualPipeV plan's step by its step order (costmodel/schedules/dualpipe_steps.py, the longest path) plus
    the exposed DP term, or None for other schedules (and where :func:`paired_stage_work` has none)."""
    work = paired_stage_work(costs, a, classes, stages)
    c = costs.choice
    return None if work is None else step_order_s(c.schedule, work, c.num_microbatches) + dp_exposed_s


def paired_stage_work(costs: ChoiceCosts, a: Assumptions, classes: list[tuple[int, int]],
                      stages: list[StageTotals]) -> Optional[StageWork]:
    """The per-model-stage work a DualPipe or DualPipeV plan's step order runs, or None for other schedules. Per
    model stage: C its layers' compute (what hides a partner's all-to-all, :meth:`ChoiceCosts.chunk_work`), X their
    all-to-all, E the rest of its time per micro-batch. A DualPipeV rank's two chunks split as
    :func:`dualpipev.chunk_classes` splits them; the rank's embedding goes to chunk 0 and its head and loss to chunk 1
    (rank 0), its other time by layers. None where the step order does not exist (an odd or too small micro-batch
    count: the plan's violations name the rule)."""
    c = costs.choice
    units = PipelineUnits.of(c)
    if not units.schedule.paired or not step_order_defined(c.schedule, c.pp, c.num_microbatches):
        return None  # other schedules; a plan breaking the schedule's micro-batch rule (its violations say so)
    if units.schedule is Schedule.DUALPIPE:
        work = [(costs.chunk_work(*k), st.time_s) for k, st in zip(classes, stages)]
        C, X, E = [w.compute_s for w, _ in work], [w.a2a_s for w, _ in work], [t - w.compute_s for w, t in work]
        A = [w.attn_s for w, _ in work]
    else:
        P = c.pp
        C, X, E, A = [0.0] * (2 * P), [0.0] * (2 * P), [0.0] * (2 * P), [0.0] * (2 * P)
        for r, ((dense, moe), st) in enumerate(zip(classes, stages)):
            ends = (costs.first_extra_time_s, costs.last_extra_time_s) if r == 0 else (0.0, 0.0)
            chunks = dualpipev.chunk_classes(dense, moe)
            parts = [costs.chunk_work(*k) for k in chunks]
            rest = st.time_s - sum(p.compute_s for p in parts) - sum(ends)
            for phase, (s, k, p) in enumerate(zip((r, 2 * P - 1 - r), chunks, parts)):
                share = sum(k) / (dense + moe) if dense + moe else 0.5
                C[s], X[s], E[s], A[s] = p.compute_s, p.a2a_s, rest * share + ends[phase], p.attn_s
    w = a.zb_weight_grad_fraction * min(1.0, max(0.0, costs.weight_grad_share))
    A, dispatch = (None, 0.5) if None in A or costs.moe is None else (A, costs.moe.dispatch_share)
    return StageWork(C, X, costs.fwd_share, w, E, A, dispatch)


def step_metrics(spec: Spec, costs: ChoiceCosts, a: Assumptions, stages: list[StageTotals], step: float,
                 breakdown: dict[str, float], mem: list[float]) -> Metrics:
    """MFU (model FLOPs only), HFU (with the recomputed forwards), tokens/s and the memory verdict."""
    c = costs.choice
    usable_gib = costs.usable_memory_bytes / GIB
    arch = Architecture(spec.model)
    tokens = spec.training.global_batch_size * spec.training.seq_len
    model_flops = step_model_flops(spec, a, arch)
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
