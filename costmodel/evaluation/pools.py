"""Heterogeneous GPU pools (issue 21): one job whose pipeline stages run on pools of different GPU types.

A plan on pools is a homogeneous plan (one TP/CP/EP/DP shape, per-stage layer and recompute counts) plus
``stage_pools``, the pool index of each pipeline stage. Stage ``i`` uses tp·cp·dp GPUs of its pool, so a pool
holds Σ over its stages of tp·cp·dp GPUs, at most its ``num_gpus`` (a pool may be used in part or not at
all). Each stage is priced with its pool's GPU (:func:`pool_costs`: ``choice_costs`` once per pool), so its
compute rates, memory limit, NVLink domain and intra/inter-node links are its pool's; its DP gradient
collectives run on its pool's network; a stage whose neighbour sits on another pool sends its boundary
activations over the inter-pool link (:func:`inter_pool_link`; default the slower pool's inter-node network,
the issue's "the slower pool's network"); the step is ``m·t_max + bubble + max DP`` with the uneven-stage
bubble over the heterogeneous stage times (Alpa, Zheng et al. OSDI '22 §5.1 Eq. 2, as
``costmodel/evaluation/ledger.py: step_time`` already does), so the slowest stage paces it.

Under a framework (:data:`POOL_FRAMEWORKS`) the plan keeps that framework's rules as on one pool: its schedules,
stage split and recompute counts are legality (``framework_stage_violations``), its memory conventions are the
spec's assumptions (the loader merged them), and ``runs_on`` lists the pool frameworks that run it.

Scope of this first slice: schedules with one stage per rank and one model chunk (1F1B, ZB-H1); the
interleaved schedule (chunks crossing pools several times per step) and DualPipe/DualPipeV (a rank holding
two stages) are refused with a :class:`PoolPlanError` naming the schedule. A one-pool cluster prices exactly
as :func:`parplan.costmodel.evaluation.evaluate.evaluate` (``tests/costmodel/evaluation/test_pools.py``).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace
from typing import Optional

from parplan.costmodel.compute.architecture import Architecture
from parplan.costmodel.spec.assumptions import Assumptions, resolve_assumptions
from parplan.costmodel.evaluation.choice import ChoiceCosts, choice_costs
from parplan.costmodel.communication.comm import Link
from parplan.costmodel.spec.degrees import Choice
from parplan.costmodel.errors import ParplanError
from parplan.costmodel.spec.framework_binding import runs_on, spec_profile
from parplan.costmodel.evaluation.ledger import (Evaluation, Metrics, StageTotals, interleaved_chunk_layers, layer_classes,
                                                 stage_report, stage_totals, step_model_flops, step_time)
from parplan.costmodel.spec.hardware import GIB, GPU, resolve_gpu
from parplan.costmodel.evaluation.legality import choice_violations, framework_stage_violations
from parplan.costmodel.memory.runtime_memory import outside_ledger_gib
from parplan.costmodel.evaluation.choice import nvlink_domain_size
from parplan.costmodel.schedules.schedule import PipelineUnits, Schedule
from parplan.costmodel.spec.spec import ClusterSpec, Plan, PoolSpec, Spec

# schedules whose pipeline units are single stages of one chunk: a pool boundary is crossed once each way
POOL_SCHEDULES = (Schedule.ONE_F_ONE_B, Schedule.ZB_H1)
# frameworks that run a plan on pools: Megatron-Core places stage s on the global ranks [s·w, (s+1)·w), w = tp·cp·dp
# (order tp-cp-ep-dp-pp, megatron/core/parallel_state.py:413-470 at core_v0.15.3), gives each stage its own layers
# (--pipeline-model-parallel-layout) and Megatron-Bridge initializes the same order (training/initialize.py:820 at
# v0.6.0): frameworks/pool_placement.py. Their profiles' rules (schedules: 1F1B, no ZB-H1; stage split; recompute
# counts) and memory conventions apply to the plan as on one pool.
POOL_FRAMEWORKS = ("megatron-core", "megatron-bridge")


class PoolPlanError(ParplanError):
    """A plan on pools that cannot be evaluated: a wrong ``stage_pools``, or a schedule this slice refuses."""


def require_pool_framework(spec: Spec) -> None:
    """Plans on several pools run on the frameworks of :data:`POOL_FRAMEWORKS` (or ``framework: any``, the
    research space); a :class:`PoolPlanError` naming ``framework`` otherwise."""
    if (prof := spec_profile(spec)) is not None and prof.name not in POOL_FRAMEWORKS:
        raise PoolPlanError(f"framework: {prof.name}: plans on several cluster.pools run on "
                            f"{' or '.join(POOL_FRAMEWORKS)} only; set framework: {', '.join(POOL_FRAMEWORKS)} or any")


def spec_pools(spec: Spec) -> list[PoolSpec]:
    """The cluster's pools: ``cluster.pools``, or the one pool that ``cluster.gpu`` and its keys describe."""
    cl = spec.cluster
    if cl.pools is not None:
        return list(cl.pools)
    keys = {k: getattr(cl, k) for k in PoolSpec.model_fields}
    return [PoolSpec.model_construct(**keys)]


def pool_spec(spec: Spec, k: int, num_gpus: Optional[int] = None) -> Spec:
    """``spec`` seen from pool ``k``: its cluster is pool ``k`` as a homogeneous cluster (GPU, node size and
    overrides), with ``num_gpus`` (default the pool's) GPUs. Built without re-validation (the pool was
    validated; a job's GPU count need not be whole nodes of one pool)."""
    pool = spec_pools(spec)[k]
    fields = {f: getattr(pool, f) for f in PoolSpec.model_fields}
    fields["num_gpus"] = pool.num_gpus if num_gpus is None else num_gpus
    cluster = ClusterSpec.model_construct(**fields, pools=None, inter_pool_bandwidth_gbps=None)
    return spec.model_copy(update={"cluster": cluster})


def pool_gpus(spec: Spec) -> list[GPU]:
    """Each pool's catalog GPU with its overrides (``costmodel/spec/hardware.py: resolve_gpu``)."""
    return [resolve_gpu(pool) for pool in spec_pools(spec)]


def inter_pool_link(spec: Spec, gpus: Optional[list[GPU]] = None) -> Link:
    """The link between two pools: ``cluster.inter_pool_bandwidth_gbps`` (GB/s per GPU per direction, as the
    catalog's bandwidths) or the slowest pool's inter-node bandwidth, at the largest inter-node latency.
    ``gpus``: :func:`pool_gpus` if the caller has them."""
    gpus = gpus or pool_gpus(spec)
    gbps = spec.cluster.inter_pool_bandwidth_gbps or min(g.inter_node_bandwidth_gbps for g in gpus)
    return Link(nvlink=False, bandwidth_Bps=gbps * 1e9, latency_s=max(g.inter_node_latency_us for g in gpus) * 1e-6)


def pool_costs(spec: Spec, choice: Choice, a: Assumptions, arch: Optional[Architecture] = None) -> list[ChoiceCosts]:
    """``choice_costs`` of ``choice`` once per pool, each with its pool's GPU and cluster keys, and one
    weight-gradient share for all, the fastest pool's (the least layer time): a pipeline across pools runs one
    schedule, so its ZB/DualPipe bubble (``PipelineUnits.bubble_beta``, W = the share of B in linear GEMMs) takes one
    value (the stage -> pool model in ``solver/pools/cpsat.py`` relies on one), and a plan on the fastest pool
    alone is priced as that pool's own spec prices it."""
    arch = arch or Architecture(spec.model)
    costs = [choice_costs(pool_spec(spec, k, choice.num_gpus), choice, gpu, a, arch)
             for k, gpu in enumerate(pool_gpus(spec))]
    fastest = min(costs, key=lambda c: c.dense.time_s)
    share = fastest.weight_grad_share
    return [c if c.weight_grad_share == share else replace(c, weight_grad_share=share) for c in costs]


def boundary_p2p_s(costs: ChoiceCosts, link: Link, a: Assumptions) -> float:
    """A stage's p2p seconds per micro-batch when a neighbour is on another pool: the same boundary bytes
    (``costmodel/evaluation/stage_extras.py: pipeline_boundary``, 2 sends of ``bytes`` each way less the hidden share),
    over the slower of its own pipeline link and ``link``."""
    own = costs.links["pp"]
    hidden = 1 - a.pp_comm_overlap
    if costs.p2p_s == 0.0 or hidden <= 0.0:
        return costs.p2p_s
    boundary_bytes = (costs.p2p_s / (2 * hidden) - own.latency_s) * own.bandwidth_Bps
    crossing = 2 * hidden * (link.latency_s + boundary_bytes / link.bandwidth_Bps)
    return max(costs.p2p_s, crossing)


def pool_usage(spec: Spec, choice: Choice, stage_pools: list[int]) -> list[int]:
    """GPUs each pool gives the plan: tp·cp·dp per stage placed on it."""
    per_stage = choice.num_gpus // choice.pp
    used = [0] * len(spec_pools(spec))
    for k in stage_pools:
        used[k] += per_stage
    return used


def check_stage_pools(spec: Spec, choice: Choice, stage_pools: list[int]) -> list[str]:
    """Structural errors of ``stage_pools`` (length, indices, schedule), as messages naming the field."""
    pools = spec_pools(spec)
    errors = []
    if len(stage_pools) != choice.pp:
        errors.append(f"stage_pools: {len(stage_pools)} entries for pp = {choice.pp} stages")
    if bad := [k for k in stage_pools if not 0 <= k < len(pools)]:
        errors.append(f"stage_pools: pool indices {bad} outside 0..{len(pools) - 1}")
    if len({*stage_pools}) > 1 and (choice.schedule not in POOL_SCHEDULES or choice.vpp != 1):
        errors.append(f"stage_pools: schedule {choice.schedule} (vpp {choice.vpp}) on more than one pool is "
                      f"not supported yet; use 1f1b or zb-h1")
    return errors


def capacity_violations(spec: Spec, choice: Choice, stage_pools: list[int]) -> list[str]:
    """Pools asked for more GPUs than they hold."""
    out = []
    for k, (used, pool) in enumerate(zip(pool_usage(spec, choice, stage_pools), spec_pools(spec))):
        if used > pool.num_gpus:
            out.append(f"pool {k} ({pool.gpu}) gives {used} GPUs to its stages, more than its {pool.num_gpus}")
    return out


class _PerSpec:
    """Answers that depend on a spec and keys, kept for the few specs asked about last (keyed by the spec's
    identity, the spec held so its id is not reused; a Spec is frozen, so the answers cannot go stale): the
    pools evaluator checks the same choice on the same pool for every layer split and recompute vector of it."""

    SPECS = 8  # specs kept
    ENTRIES = 1 << 16  # answers kept per spec (then emptied)

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._specs: dict[int, tuple[Spec, dict]] = {}

    def get(self, spec: Spec, key: tuple, compute):
        with self._lock:
            entry = self._specs.get(id(spec))
            if entry is None or entry[0] is not spec:
                if len(self._specs) >= self.SPECS:
                    self._specs.pop(next(iter(self._specs)))
                entry = self._specs[id(spec)] = (spec, {})
            answers = entry[1]
            if key in answers:
                return answers[key]
        value = compute()
        with self._lock:
            if len(answers) >= self.ENTRIES:
                answers.clear()
            answers[key] = value
        return value


_PER_SPEC = _PerSpec()


def pool_choice_violations(spec: Spec, k: int, c: Choice, a: Assumptions) -> tuple[str, ...]:
    """The choice's rules (``legality.choice_violations``) under pool ``k``'s view (:func:`pool_spec` at the
    choice's GPU count, TP inside that pool's NVLink domain); memoized per (spec, pool, choice, assumptions)."""
    def compute() -> tuple[str, ...]:
        view = pool_spec(spec, k, c.num_gpus)
        return tuple(choice_violations(view, c, a, nvlink_domain_size(view, pool_gpus(spec)[k])))

    return _PER_SPEC.get(spec, ("choice_violations", k, c, a), compute)


def evaluate_pools(spec: Spec, plan: Plan, stage_pools: Optional[list[int]] = None, *,
                   assumptions: Optional[Assumptions] = None,
                   costs: Optional[list[ChoiceCosts]] = None, arch: Optional[Architecture] = None) -> Evaluation:
    """The ledger of ``plan`` with stage ``i`` on pool ``stage_pools[i]`` (the module docstring).

    Legality is the choice's rules under pool 0's view (the pools share the model, batch and shape; TP inside
    each pool's NVLink domain is checked per pool used), the pools' capacities, and each stage's memory against
    its own pool's usable memory. MFU counts every stage's GPUs at its pool's peak. ``stage_pools`` defaults to
    ``plan.stage_pools``; the answer's plan carries them. ``assumptions``, ``costs`` (:func:`pool_costs`) and
    ``arch`` (``Architecture(spec.model)``): what a caller evaluating many plans of one spec has already."""
    plan, stage_pools = _with_stage_pools(spec, plan, stage_pools)
    c = plan.to_choice()
    if errors := check_stage_pools(spec, c, stage_pools):
        raise PoolPlanError("; ".join(errors))
    a = assumptions or resolve_assumptions(spec.assumptions)
    costs = costs or pool_costs(spec, c, a)
    violations = _rule_violations(spec, plan, c, a, stage_pools)
    classes = layer_classes(spec, plan.stage_layers, interleaved_chunk_layers(plan))
    stages = _stage_totals_on_pools(spec, c, a, costs, classes, plan.recompute_layers, stage_pools)
    ref = costs[stage_pools[0]]
    step, breakdown = step_time(ref, a, stages)
    reports = [stage_report(plan, costs[stage_pools[i]], i, r, d, e)
               for i, (r, (d, e)) in enumerate(zip(stages, classes))]
    mem = [s.memory_gib for s in reports]
    usable = [costs[k].usable_memory_bytes / GIB for k in stage_pools]
    for i, (g, u) in enumerate(zip(mem, usable)):
        if g > u:
            violations.append(f"stage {i} needs {g:.1f} GiB, more than the {u:.1f} GiB usable per GPU of pool "
                              f"{stage_pools[i]}")
    metrics = _metrics_on_pools(spec, c, a, arch or Architecture(spec.model), costs, stage_pools, stages, step,
                                breakdown, mem, usable)
    return Evaluation(plan=plan, metrics=metrics, stages=reports, violations=violations,
                      runs_on=pool_runs_on(spec, plan))


def _with_stage_pools(spec: Spec, plan: Plan, stage_pools: Optional[list[int]]) -> tuple[Plan, list[int]]:
    """(``plan`` carrying ``stage_pools``, the stage pools): ``plan.stage_pools`` where none are given;
    :class:`PoolPlanError` where neither names them."""
    if stage_pools is None:
        if plan.stage_pools is None:
            raise PoolPlanError(f"plan.stage_pools: a plan on {len(spec_pools(spec))} pools names the pool of each "
                                f"of its {plan.pp} stages (e.g. stage_pools: {[0] * plan.pp})")
        stage_pools = list(plan.stage_pools)
    stage_pools = list(stage_pools)
    if plan.stage_pools != stage_pools:
        plan = plan.model_copy(update={"stage_pools": stage_pools})
    return plan, stage_pools


def _rule_violations(spec: Spec, plan: Plan, c: Choice, a: Assumptions, stage_pools: list[int]) -> list[str]:
    """The rules ``plan`` breaks before its memory: the choice's on each pool it uses (once each), the framework's
    stage rules, the pools' capacities."""
    violations: list[str] = []
    for k in sorted({*stage_pools}):
        for v in pool_choice_violations(spec, k, c, a):
            if v not in violations:
                violations.append(v)
    violations += framework_stage_violations(spec, c, list(plan.stage_layers), list(plan.recompute_layers),
                                             plan.pipeline_layout)
    violations += capacity_violations(spec, c, stage_pools)
    return violations


def _stage_totals_on_pools(spec: Spec, c: Choice, a: Assumptions, costs: list[ChoiceCosts], classes: list,
                           recompute_layers, stage_pools: list[int]) -> list[StageTotals]:
    """Each stage's ledger totals at its pool's costs, its p2p the boundary's (:func:`boundary_p2p_s`) where a
    neighbour stage sits on another pool."""
    link = inter_pool_link(spec, pool_gpus(spec))
    stages: list[StageTotals] = []
    for i, ((d, e), r) in enumerate(zip(classes, recompute_layers)):
        k = stage_pools[i]
        t = stage_totals(costs[k], i, d, e, r)
        crosses = (i > 0 and stage_pools[i - 1] != k) or (i + 1 < c.pp and stage_pools[i + 1] != k)
        if crosses:
            t = t.model_copy(update={"pp_s": t.pp_s - costs[k].p2p_s + boundary_p2p_s(costs[k], link, a)})
        stages.append(t)
    return stages


def _metrics_on_pools(spec: Spec, c: Choice, a: Assumptions, arch: Architecture, costs: list[ChoiceCosts],
                      stage_pools: list[int], stages: list[StageTotals], step: float, breakdown, mem: list[float],
                      usable: list[float]) -> Metrics:
    """The plan's metrics on its pools: MFU and HFU over every stage's GPUs at its pool's peak, the memory against
    each stage's own pool, the terms outside the ledger of the pool with the least usable memory."""
    tokens = spec.training.global_batch_size * spec.training.seq_len
    model_flops = step_model_flops(spec, a, arch)
    per_stage = c.num_gpus // c.pp
    peak_sum = per_stage * sum(costs[k].peak_flops for k in stage_pools)  # Σ over GPUs of their peaks
    recompute_flops = c.num_microbatches * sum(st.recompute_flops for st in stages) * per_stage
    return Metrics(
        step_time_s=step, mfu=model_flops / (step * peak_sum), tokens_per_s=tokens / step,
        peak_memory_gib=max(mem), stage_memory_gib=mem, breakdown_s=breakdown,
        hfu=(model_flops + recompute_flops) / (step * peak_sum),
        model_tflops_per_gpu=model_flops / step / c.num_gpus / 1e12,
        usable_memory_gib=min(usable), fits=all(g <= u for g, u in zip(mem, usable)),
        # the terms outside the ledger of the pool with the least usable memory (costmodel/memory/runtime_memory.py)
        memory_outside_ledger_gib=outside_ledger_gib(spec, costs[stage_pools[usable.index(min(usable))]], a))


def pool_runs_on(spec: Spec, plan: Plan) -> list[str]:
    """The frameworks that run ``plan`` on the spec's pools: those of :data:`POOL_FRAMEWORKS` whose rules it keeps
    (the others' exports refuse a cluster of several pools); on a one-pool cluster, the homogeneous ``runs_on``."""
    return runs_on(spec, plan, None if len(spec_pools(spec)) == 1 else POOL_FRAMEWORKS)


@dataclass(frozen=True)
class PoolStageTimes:
    """Per-stage forward and backward seconds per micro-batch of a plan on pools, for a discrete-event check:
    the stage's time split as the schedule's F : B (1 : 2, recompute on the backward)."""

    forward_s: list[float]
    backward_s: list[float]

    @staticmethod
    def of(evaluation: Evaluation) -> "PoolStageTimes":
        fwd = [s.time_per_microbatch_s / 3 for s in evaluation.stages]
        return PoolStageTimes(forward_s=fwd, backward_s=[s.time_per_microbatch_s - f
                                                         for s, f in zip(evaluation.stages, fwd)])


def evaluate_pool_plan(spec: Spec, plan: Plan, assumptions: Optional[Assumptions] = None) -> Evaluation:
    """``evaluate`` on a spec of several pools: the plan's stage shapes checked as ``evaluate`` checks them
    (a :class:`PoolPlanError` naming the field), then :func:`evaluate_pools` with ``plan.stage_pools``."""
    from parplan.costmodel.evaluation.legality import stage_violations

    if plan.stage_pools is None:
        raise PoolPlanError(f"plan.stage_pools: a plan on {len(spec_pools(spec))} pools names the pool of each of "
                            f"its {plan.pp} stages (e.g. stage_pools: {[0] * plan.pp})")
    require_pool_framework(spec)
    c = plan.to_choice()
    errors = check_stage_pools(spec, c, list(plan.stage_pools))
    errors += stage_violations(spec, c, plan.stage_layers, plan.recompute_layers, plan.pipeline_layout)
    if errors:
        raise PoolPlanError("plan: " + "; ".join(errors))
    return evaluate_pools(spec, plan, assumptions=assumptions)
