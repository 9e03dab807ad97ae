"""Which plans are legal: one list of rules shared by the evaluator, the enumerator and the solver.

Rules follow Megatron-LM's argument checks (arguments.py, num_microbatches_calculator.py) and the
schedules' own requirements; each returns a sentence naming the rule, so "why not" is always printable.
"""

from __future__ import annotations

from parplan.costmodel.evaluation.activation_offload import activation_offload_violations
from parplan.costmodel.spec.assumptions import Assumptions
from parplan.costmodel.evaluation.choice import Choice
from parplan.costmodel.communication.context_parallel import a2a_group_size
from parplan.costmodel.spec.framework_rules import choice_rule_violations, model_rule_violations, stage_rule_violations
from parplan.costmodel.communication.mesh import ep_members_per_domain, span_within_domain
from parplan.costmodel.moe.moe_comm import a2a_overlap_violations, fp8_dispatch_violations
from parplan.costmodel.schedules.schedule import Schedule
from parplan.costmodel.spec.spec import Spec
from parplan.costmodel.spec.framework_binding import spec_profile


def choice_violations(spec: Spec, c: Choice, a: Assumptions, domain: int) -> list[str]:
    """Rules on the degrees, batch split and schedule (everything but stage sizes and memory)."""
    return (degree_violations(spec, c, a, domain) + schedule_violations(spec, c) + memory_dim_violations(c)
            + moe_comm_violations(spec, c) + activation_offload_violations(spec, c)
            + framework_choice_violations(spec, c))


def memory_dim_violations(c: Choice) -> list[str]:
    """Rules on HSDP and optimizer offload, whatever the framework.

    HSDP shard groups tile the ZeRO group: ``zero_replicas`` divides DP·CP and, for MoE layers, the expert-DP
    group (Megatron-Core parallel_state.py:922-926 and 1447-1449 at d98e8a64 assert both); ZeRO-0 shards
    nothing, so it has no shard group to replicate. The offload fraction is a share."""
    out: list[str] = []
    r = c.zero_replicas
    if r > 1:
        if c.zero_stage == 0:
            out.append(f"zero_replicas ({r}) > 1 needs ZeRO-1, 2 or 3 (ZeRO-0 shards nothing to replicate)")
        if c.dense_dp % r:
            out.append(f"zero_replicas ({r}) must divide dp·cp ({c.dense_dp}), the ZeRO group")
        if c.expert_dp % r:
            out.append(f"zero_replicas ({r}) must divide the expert data-parallel group ({c.expert_dp})")
    if not 0.0 <= c.optimizer_offload_fraction <= 1.0:
        out.append(f"optimizer_offload_fraction ({c.optimizer_offload_fraction}) must lie in [0, 1]")
    return out
def moe_comm_violations(spec: Spec, c: Choice) -> list[str]:
    """Rules on the EP communication choices, FP8 dispatch and the all-to-all overlap (costmodel/moe/moe_comm.py)."""
    moe = spec.model.moe is not None
    return (fp8_dispatch_violations(c, spec.training.precision, moe)
            + a2a_overlap_violations(c, spec.model.num_mtp_layers, moe))


def framework_choice_violations(spec: Spec, c: Choice) -> list[str]:
    """The spec's framework cannot run this choice (schedule, ZeRO, recompute, CP/ETP/SP): the rules of
    costmodel/spec/framework_rules.py on the profile frameworks/profiles.py picks."""
    return profile_choice_violations(spec_profile(spec), spec, c)


def profile_choice_violations(prof, spec: Spec, c: Choice) -> list[str]:
    """:func:`framework_choice_violations` under the profile ``prof`` (the spec's, looked up once by a caller that
    asks for many choices; None: framework-neutral, no rule)."""
    return [] if prof is None else choice_rule_violations(prof, c) + model_rule_violations(prof, c, spec.model)


def framework_stage_violations(spec: Spec, c: Choice, stage_layers: list[int], recompute_layers: list[int],
                               pipeline_layout: list[list[int]] | None = None) -> list[str]:
    """The spec's framework cannot split stages or recompute layers this way (costmodel/spec/framework_rules.py)."""
    prof = spec_profile(spec)
    return [] if prof is None else stage_rule_violations(prof, c, stage_layers, recompute_layers, pipeline_layout)


def degree_violations(spec: Spec, c: Choice, a: Assumptions, domain: int) -> list[str]:
    """Rules on tp, cp, pp, dp, ep, etp alone."""
    m = spec.model
    out: list[str] = []
    if c.num_gpus != spec.cluster.num_gpus:
        out.append(f"tp·cp·pp·dp = {c.num_gpus} must equal cluster.num_gpus = {spec.cluster.num_gpus}")
    if m.num_attention_heads % c.tp:
        out.append(f"num_attention_heads ({m.num_attention_heads}) must be divisible by tp ({c.tp})")
    if m.kv_heads % c.tp:
        out.append(f"num_kv_heads ({m.kv_heads}) must be divisible by tp ({c.tp})")
    if a.tp_requires_nvlink and not span_within_domain(1, c.tp, domain, c.num_gpus):
        out.append(f"tp ({c.tp}) must fit inside one NVLink domain of {domain} GPUs")
    if c.cp > 1:
        seq = spec.training.seq_len
        if seq % (2 * c.cp):
            out.append(f"seq_len ({seq}) must be divisible by 2·cp ({2 * c.cp}) for load-balanced causal CP")
        if seq // c.cp < a.min_tokens_per_cp_rank:
            out.append(f"seq_len/cp = {seq // c.cp} tokens is below min_tokens_per_cp_rank ({a.min_tokens_per_cp_rank})")
    out += cp_comm_violations(spec, c, domain)
    if m.moe is None:
        if c.ep != 1 or c.etp != 1:
            out.append("ep and etp must be 1 for a dense model")
    else:
        if m.moe.num_experts % c.ep:
            out.append(f"moe.num_experts ({m.moe.num_experts}) must be divisible by ep ({c.ep})")
        if c.stage_ranks % (c.ep * c.etp):
            out.append(f"ep·etp ({c.ep * c.etp}) must divide tp·cp·dp ({c.stage_ranks}) (EP folds into DP×CP)")
        if a.tp_requires_nvlink and not span_within_domain(1, c.etp, domain, c.num_gpus):
            out.append(f"etp ({c.etp}) must fit inside one NVLink domain of {domain} GPUs")
    return out


def schedule_violations(spec: Spec, c: Choice) -> list[str]:
    """Rules on the batch split and the pipeline schedule. They read dp, pp, micro_batch_size, num_microbatches,
    schedule and vpp only. solver/space.py caches the verdict by (pp, num_microbatches, schedule, vpp): it asks only of
    splits whose dp·micro_batch_size·num_microbatches is the global batch (solver/space_memo.py); a rule on another
    field goes elsewhere or into that cache's key."""
    out: list[str] = []
    if c.dp * c.micro_batch_size * c.num_microbatches != spec.training.global_batch_size:
        out.append(f"dp·micro_batch_size·num_microbatches = {c.dp * c.micro_batch_size * c.num_microbatches} "
                   f"must equal training.global_batch_size = {spec.training.global_batch_size}")
    p, mb, v = c.pp, c.num_microbatches, c.vpp
    schedule = c.schedule
    if schedule is not Schedule.INTERLEAVED and v != 1:
        out.append(f"vpp ({v}) > 1 needs schedule interleaved")
    if schedule is Schedule.INTERLEAVED:
        if p < 2 or v < 2:
            out.append("schedule interleaved needs pp ≥ 2 and vpp ≥ 2")
        if mb % p:
            out.append(f"interleaved: num_microbatches ({mb}) must be divisible by pp ({p})")
    elif schedule.one_stage_per_rank:
        if p > 1 and mb < p:
            out.append(f"{schedule}: num_microbatches ({mb}) must be at least pp ({p})")
    elif schedule is Schedule.DUALPIPE:
        if p < 2 or p % 2:
            out.append(f"dualpipe needs an even pp ≥ 2 (got {p})")
        if mb < 2 * p or mb % 2:
            out.append(f"dualpipe needs an even num_microbatches ≥ 2·pp (got {mb})")
    elif schedule is Schedule.DUALPIPEV:
        # DualPipe dualpipe/dualpipev.py step(): num_chunks >= num_ranks * 2; torch ScheduleDualPipeV:
        # n_microbatches >= the number of stages (2·pp)
        if p > 1 and mb < 2 * p:
            out.append(f"dualpipev needs num_microbatches ≥ 2·pp (got {mb} for pp {p})")
    if schedule.needs_pipeline and p == 1:
        out.append(f"{schedule} needs pp ≥ 2")
    return out


def stage_violations(spec: Spec, c: Choice, stage_layers: list[int], recompute_layers: list[int],
                     pipeline_layout: list[list[int]] | None = None) -> list[str]:
    """Stage shapes; a ``pipeline_layout`` (per-chunk counts) replaces the equal-chunks rule."""
    out: list[str] = []
    if len(stage_layers) != c.pp:
        out.append(f"stage_layers has {len(stage_layers)} entries for pp = {c.pp}")
    if sum(stage_layers) != spec.model.num_layers:
        out.append(f"stage_layers sum to {sum(stage_layers)}, model.num_layers is {spec.model.num_layers}")
    if len(recompute_layers) != len(stage_layers):
        out.append("recompute_layers must have one entry per stage")
    for i, (l, r) in enumerate(zip(stage_layers, recompute_layers)):
        if not 0 <= r <= l:
            out.append(f"recompute_layers[{i}] = {r} must lie in [0, {l}]")
        if c.vpp > 1 and l % c.vpp and pipeline_layout is None:
            out.append(f"stage_layers[{i}] = {l} must be divisible by vpp ({c.vpp})")
    if pipeline_layout is not None:
        if len(pipeline_layout) != c.pp or any(len(ch) != c.vpp for ch in pipeline_layout):
            out.append(f"pipeline_layout must have {c.pp} stages of {c.vpp} chunks")
        elif [sum(ch) for ch in pipeline_layout] != list(stage_layers):
            out.append("pipeline_layout's per-stage sums must equal stage_layers")
    if c.recompute != "full" and any(recompute_layers):
        out.append("recompute_layers must be 0 unless recompute is full")
    if c.schedule is Schedule.DUALPIPEV and len(stage_layers) == c.pp:
        # two stages per rank, each with a layer; rank 0's first stage holds the model's leading dense layers
        k = spec.model.moe.first_dense_layers if spec.model.moe is not None else 0
        for i, l in enumerate(stage_layers):
            need = max(2, k + 1) if i == 0 else 2
            if l < need:
                out.append(f"dualpipev: stage_layers[{i}] = {l}, a rank holds two stages of ≥ 1 layer"
                           + (f" and rank 0 the {k} leading dense layers before them" if i == 0 and k else "")
                           + f" (at least {need})")
    return out


def cp_comm_violations(spec: Spec, c: Choice, domain: int) -> list[str]:
    """Rules of the CP comm type (costmodel/communication/context_parallel.py).

    * cp = 1 has no CP communication: the canonical type is p2p.
    * a2a re-shards heads over the CP group: every TP rank's query and KV heads must divide by cp
      (NVIDIA/TransformerEngine@d0067d0d context_parallel.py, AttnFuncWithCPAndQKVOA2A.forward:
      ``assert q.shape[-2] % cp_size == 0 and k.shape[-2] % cp_size == 0``, shapes per TP rank).
    * a2a+p2p: the a2a level is the CP members in one NVLink domain; it must hold more than one member and
      fewer than cp (otherwise the plan is a2a or p2p), and the heads per TP rank must divide by it
      (Megatron-LM@d98e8a64 arguments.py:583-585 needs --hierarchical-context-parallel-sizes; its product is
      cp, arguments.py:580-582).
    """
    kind = c.cp_comm_type
    if c.cp == 1:
        return [] if kind == "p2p" else [f"cp_comm_type {kind} needs cp > 1 (cp = 1 is written p2p)"]
    if kind in ("p2p", "allgather"):
        return []
    m = spec.model
    heads, kv = m.num_attention_heads // c.tp, m.kv_heads // c.tp
    size = a2a_group_size(kind, c.cp, ep_members_per_domain(c.tp, c.cp, domain, c.num_gpus))
    out: list[str] = []
    if kind == "a2a+p2p" and not 1 < size < c.cp:
        out.append(f"cp_comm_type a2a+p2p needs the CP group (cp {c.cp}, stride tp {c.tp}) to span NVLink domains "
                   f"of {domain} GPUs with more than one member in each (it has {size} per domain)")
    if heads % size or kv % size:
        out.append(f"cp_comm_type {kind}: attention heads per TP rank ({heads}) and KV heads per TP rank ({kv}) "
                   f"must be divisible by the all-to-all group ({size})")
    return out
