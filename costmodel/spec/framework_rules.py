"""Framework rules: what a training framework can run, as data (:class:`Profile`) and rules on the shared degree
vocabulary (a :class:`~parplan.costmodel.spec.degrees.Choice` or a :class:`~parplan.costmodel.spec.spec.Plan`).

The cost model's legality (:mod:`~parplan.costmodel.evaluation.legality`) applies them to the spec's profile; the profiles
themselves, one per framework and version range with the citations of every fact, are data in
:mod:`parplan.frameworks.profile_data` and :mod:`parplan.frameworks.profile_citations`, picked by version in
:mod:`parplan.frameworks.profiles`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional, Union

from parplan.costmodel.spec.degrees import Choice
from parplan.costmodel.schedules.schedule import Schedule

if TYPE_CHECKING:  # costmodel.spec.spec imports the legality that reads these rules
    from parplan.costmodel.spec.spec import ModelSpec, Plan, SearchSpec

# what the rules read: a Choice, or a complete Plan (the same degree vocabulary, costmodel/spec/degrees.py)
Degrees = Union[Choice, "Plan"]


@dataclass(frozen=True)
class Profile:
    """One framework (at a version range) in parplan's terms. Field comments name the citation keys."""

    name: str
    versions: str  # human-readable range this profile describes
    schedules: tuple[Schedule, ...]  # parplan schedules it can run (pp 1 runs as 1F1B)
    zero_stages: tuple[int, ...]  # without pipeline parallelism
    zero_stages_with_pp: tuple[int, ...]
    recompute: tuple[str, ...]  # granularities
    full_recompute_counts: str  # 'chunk_block' (Megatron N per chunk, or all) | 'all' | 'all_or_every_nth'
    context_parallel: bool
    expert_tensor_parallel: str  # 'any' | 'one_or_tp' | 'one'
    sequence_parallel: bool  # Megatron-style SP available with TP
    stage_split: str  # 'any' (per-chunk layouts) | 'first_last' | 'even'
    assumptions: dict[str, Any] = field(default_factory=dict)  # memory conventions (knob -> value)
    citations: tuple[str, ...] = ()
    not_expressible: tuple[str, ...] = ()  # what it runs that parplan cannot plan
    cp_comm_types: tuple[str, ...] = ("p2p",)  # CP comm types it runs with cp > 1 (costmodel/communication/context_parallel.py)
    tensor_parallel: bool = True  # False: tp must be 1
    pipeline_parallel: bool = True  # False: pp must be 1
    sequence_parallel_with_tp: bool = False  # True: every TP plan is sequence-parallel (no TP without SP)
    sequence_parallel_with_tp_ep: bool = False  # True: TP > 1 with EP > 1 only with sequence parallelism
    context_parallel_with_pp: bool = True  # False: CP and PP never together (DeepSpeed's pipe topology has no CP axis)
    expert_bias_etp_one: bool = False  # True: an MoE model with linear biases (model.moe.expert_bias) only with etp 1
    multi_token_prediction: bool = True  # False: its models have no MTP module (model.num_mtp_layers must be 0)
    ddp_one_dimensional: bool = False  # True: ZeRO-0 over more than one DP/CP rank only without TP and PP
    interleaved_min_pp: int = 2  # the interleaved schedule needs at least this many pipeline stages
    # memory-side dimensions (costmodel/evaluation/choice.py Choice.zero_replicas, optimizer_states, offload fraction)
    hsdp_zero_stages: tuple[int, ...] = ()  # ZeRO stages that run with zero_replicas > 1 ('megatron.partial_dist_opt')
    hsdp_replicas_divide_dp: bool = False  # the replica degree divides DP (not only DP·CP): 'titan.hsdp'
    optimizer_states: bool = False  # a precision-aware optimizer (optimizer_states not None): 'megatron.precision_aware'
    optimizer_offload: str = "none"  # 'none' | 'any' (any fraction) | 'needs_states' (any fraction, precision-aware
    #                                  states required) | 'ratio_zero3' (ZeRO 1-3; a fraction below 1 only with ZeRO-3)
    fp8_dispatch: bool = False  # MoE FP8 token dispatch (Plan.moe_fp8_dispatch)
    moe_a2a_overlap: bool = False  # EP all-to-all overlapped with another micro-batch (Plan.moe_a2a_overlap)
    dualpipev_ep_no_recompute: bool = False  # DualPipeV with EP > 1 only without activation checkpointing
    activation_offload: bool = False  # N layers' activations on the host (Plan.activation_offload_layers):
    #                                   'megatron.activation_offload'
    default_split: str = "even"  # the stage split it builds when none is given (frameworks/layout.py default_split):
    #                              'even' | 'torchtitan_split_points' (9dec370) | 'torchtitan_fqn_per_part' (v0.2.2 on)


@dataclass(frozen=True)
class SpaceLimits:
    """What ``SpaceOptions.from_spec`` intersects the search with."""

    schedules: tuple[Schedule, ...]
    zero_stages: tuple[int, ...]  # without PP and with it (the union)
    zero_stages_with_pp: tuple[int, ...]
    recompute: tuple[str, ...]
    cp: Optional[tuple[int, ...]]  # None: unrestricted
    cp_comm_types: tuple[str, ...]  # with cp > 1
    etp_one: bool
    sequence_parallel: Optional[tuple[bool, ...]]
    stage_split: str  # the loosest search.stage_split the framework runs: per_stage, first_last or even
    uniform_recompute: bool
    recompute_all_layers: bool  # full recomputation checkpoints every layer of every stage (no per-stage count)
    chunk_layouts: bool  # per-(stage, chunk) layer counts: interleaved chunks may differ within a stage
    tp: Optional[tuple[int, ...]] = None  # None: unrestricted
    pp: Optional[tuple[int, ...]] = None


def space_limits(prof: Profile) -> SpaceLimits:
    """The profile's choice-level space (ZeRO stages: the union over PP, and the ones PP allows)."""
    return SpaceLimits(
        schedules=prof.schedules,
        zero_stages=tuple(sorted(set(prof.zero_stages) | set(prof.zero_stages_with_pp))),
        zero_stages_with_pp=prof.zero_stages_with_pp,
        recompute=prof.recompute,
        cp=None if prof.context_parallel else (1,),
        cp_comm_types=prof.cp_comm_types,
        etp_one=prof.expert_tensor_parallel == "one",
        sequence_parallel=None if prof.sequence_parallel else (False,),
        stage_split={"any": "per_stage"}.get(prof.stage_split, prof.stage_split),
        uniform_recompute=prof.full_recompute_counts == "chunk_block",
        recompute_all_layers=prof.full_recompute_counts in ("all", "all_or_every_nth"),
        chunk_layouts=prof.stage_split == "any",
        tp=None if prof.tensor_parallel else (1,),
        pp=None if prof.pipeline_parallel else (1,),
    )


# The choice fields the choice-level rules read (choice_rule_violations, memory_rule_violations,
# model_rule_violations, with the degree products ParallelDims derives from them): not the batch split, the
# virtual stages nor the chunk trims. solver/space.py caches a profile's verdict by these (a rule on another field
# goes into this tuple: tests/costmodel/spec/test_framework_rules.py checks that the others change no verdict).
CHOICE_RULE_FIELDS = ("tp", "cp", "pp", "dp", "ep", "etp", "schedule", "zero_stage", "recompute", "cp_comm_type",
                      "sequence_parallel", "zero_replicas", "optimizer_states", "optimizer_offload_fraction",
                      "moe_fp8_dispatch", "moe_a2a_overlap", "activation_offload_layers")


def choice_rule_violations(prof: Profile, c: Degrees) -> list[str]:
    """Rules on degrees, schedule, ZeRO, recompute granularity and SP (a Choice or a Plan)."""
    out: list[str] = []
    who = prof.name
    if c.tp > 1 and not prof.tensor_parallel:
        out.append(f"{who} has no tensor parallelism (tp must be 1)")
    if c.pp > 1 and not prof.pipeline_parallel:
        out.append(f"{who} has no pipeline parallelism (pp must be 1)")
    if c.pp > 1 and c.schedule not in prof.schedules:
        out.append(f"{who} cannot run schedule {c.schedule} (it runs {', '.join(prof.schedules)})")
    if c.schedule is Schedule.INTERLEAVED and 1 < c.pp < prof.interleaved_min_pp:
        out.append(f"{who} {prof.versions} runs the interleaved schedule only with pp > {prof.interleaved_min_pp - 1}")
    if c.pp == 1 and c.schedule not in (Schedule.ONE_F_ONE_B, *prof.schedules):
        out.append(f"{who} cannot run schedule {c.schedule}")
    allowed = prof.zero_stages_with_pp if c.pp > 1 else prof.zero_stages
    if c.zero_stage not in allowed:
        where = "with pipeline parallelism" if c.pp > 1 else "without pipeline parallelism"
        out.append(f"{who} cannot run ZeRO-{c.zero_stage} {where} (it runs ZeRO {', '.join(map(str, allowed))})")
    if c.recompute not in prof.recompute:
        out.append(f"{who} has no recompute granularity {c.recompute!r}")
    if c.cp > 1 and not prof.context_parallel:
        out.append(f"{who} has no context parallelism (cp must be 1)")
    elif c.cp > 1 and c.cp_comm_type not in prof.cp_comm_types:
        out.append(f"{who} has no CP comm type {c.cp_comm_type} (it runs {', '.join(prof.cp_comm_types)})")
    if (why := context_parallel_beside_pipeline(prof, c)) is not None:
        out.append(why)
    if c.etp != 1:
        if prof.expert_tensor_parallel == "one":
            out.append(f"{who} has no expert tensor parallelism (etp must be 1)")
        elif prof.expert_tensor_parallel == "one_or_tp" and c.etp != c.tp:
            out.append(f"{who} supports etp 1 or etp = tp only (got etp {c.etp}, tp {c.tp})")
    if c.sequence_parallel and c.tp > 1 and not prof.sequence_parallel:
        out.append(f"{who} has no Megatron-style sequence parallelism")
    if (why := sequence_parallel_required(prof, c)) is not None:
        out.append(why)
    if prof.ddp_one_dimensional and c.zero_stage == 0 and c.dense_dp > 1 and (c.tp > 1 or c.pp > 1 or c.cp > 1):
        out.append(f"{who} {prof.versions} runs DDP (ZeRO-0) only without TP, PP and CP (FSDP otherwise)")
    if c.moe_fp8_dispatch and not prof.fp8_dispatch:
        out.append(f"{who} {prof.versions} has no FP8 expert dispatch")
    if c.moe_a2a_overlap and not prof.moe_a2a_overlap:
        out.append(f"{who} {prof.versions} has no EP all-to-all overlap (--overlap-moe-expert-parallel-comm)")
    if c.activation_offload_layers and not prof.activation_offload:
        out.append(f"{who} {prof.versions} has no activation CPU offload (activation_offload_layers must be 0)")
    if (prof.dualpipev_ep_no_recompute and c.schedule is Schedule.DUALPIPEV and c.pp > 1 and c.ep > 1
            and c.recompute != "none"):
        out.append(f"{who} {prof.versions} runs DualPipeV with expert parallelism only without activation "
                   "checkpointing (recompute none)")
    return out + memory_rule_violations(prof, c)


def sequence_parallel_required(prof: Profile, c: Degrees) -> Optional[str]:
    """Why ``prof`` cannot run ``c``'s tensor parallelism without sequence parallelism, or None (SP on, TP 1, or a
    framework that runs TP without SP). One rule for ``runs_on``, the framework-restricted search and the exports,
    which switch SP on where it says so (frameworks/export_megatron.py, export_torchtitan.py)."""
    if c.tp == 1 or c.sequence_parallel:
        return None
    if prof.sequence_parallel_with_tp:
        return f"{prof.name} {prof.versions} runs tensor parallelism only with sequence parallelism"
    if prof.sequence_parallel_with_tp_ep and c.ep > 1:
        return f"{prof.name} {prof.versions} runs TP with EP only with sequence parallelism"
    return None


def context_parallel_beside_pipeline(prof: Profile, c: Degrees) -> Optional[str]:
    """Why ``prof`` cannot run ``c``'s context parallelism beside its pipeline, or None. One rule for ``runs_on``,
    the search and the DeepSpeed export, which refuses it (frameworks/export_deepspeed.py)."""
    if c.cp > 1 and c.pp > 1 and not prof.context_parallel_with_pp:
        return (f"{prof.name} cannot run cp = {c.cp} with pp = {c.pp} (no context-parallel axis beside the "
                "pipeline)")
    return None


def model_rule_violations(prof: Profile, c: Degrees, model: Optional["ModelSpec"]) -> list[str]:
    """Rules on the degrees that depend on the model: Megatron-Core builds the experts' biases (its one
    ``add_bias_linear`` switch, on for a model with ``moe.expert_bias``) only with expert tensor parallelism 1
    (``TransformerConfig.__post_init__``: "Bias in Moe is only supported when ETP==1"); a framework whose models have
    no multi-token prediction module runs no model with one (torchtitan v0.2.2: 'titan.no_mtp_022'). One rule for
    ``runs_on``, the search and the exports' warnings."""
    out = []
    if (model is not None and prof.expert_bias_etp_one and model.moe is not None and model.moe.expert_bias
            and c.etp > 1):
        out.append(f"{prof.name} builds the experts' biases (model.moe.expert_bias) only with etp 1 (got etp {c.etp})")
    if model is not None and model.num_mtp_layers and not prof.multi_token_prediction:
        out.append(f"{prof.name} {prof.versions} has no multi-token prediction module (model.num_mtp_layers "
                   f"{model.num_mtp_layers} must be 0)")
    return out


def memory_rule_violations(prof: Profile, c: Degrees) -> list[str]:
    """Rules on HSDP, the optimizer states' dtypes and optimizer offload (a Choice or a Plan)."""
    out: list[str] = []
    who = prof.name
    replicas, states, fraction = c.zero_replicas, c.optimizer_states, c.optimizer_offload_fraction
    if replicas > 1:
        if c.zero_stage not in prof.hsdp_zero_stages:
            runs = (f"with ZeRO {', '.join(map(str, prof.hsdp_zero_stages))} only" if prof.hsdp_zero_stages
                    else "not at all")
            out.append(f"{who} runs HSDP (zero_replicas {replicas}) {runs}, not with ZeRO-{c.zero_stage}")
        if prof.hsdp_replicas_divide_dp and c.dp % replicas:
            out.append(f"{who}: zero_replicas ({replicas}) must divide dp ({c.dp}) (data_parallel_replicate_degree "
                       "x data_parallel_shard_degree = dp)")
    if states is not None and not prof.optimizer_states:
        out.append(f"{who} has no precision-aware optimizer (optimizer_states must be unset)")
    if fraction > 0:
        rule = prof.optimizer_offload
        if rule == "none":
            out.append(f"{who} has no optimizer-only CPU offload (optimizer_offload_fraction must be 0)")
        elif rule == "needs_states" and states is None:
            out.append(f"{who}: optimizer CPU offload needs the precision-aware optimizer (set optimizer_states)")
        elif rule == "ratio_zero3":
            if c.zero_stage == 0:
                out.append(f"{who}: offload_optimizer needs ZeRO-1, 2 or 3 (got ZeRO-0)")
            elif fraction < 1 and c.zero_stage != 3:
                out.append(f"{who}: an offload_optimizer ratio below 1 ({fraction:g}) needs ZeRO-3 "
                           f"(got ZeRO-{c.zero_stage})")
    return out


def stage_rule_violations(prof: Profile, c: Degrees, stage_layers: list[int], recompute_layers: list[int],
                          pipeline_layout: Optional[list[list[int]]] = None) -> list[str]:
    """Rules on the stage split and the per-stage full-recompute counts."""
    out: list[str] = []
    who = prof.name
    p = len(stage_layers)
    if p > 1 and prof.stage_split == "even" and len(set(stage_layers)) > 1:
        out.append(f"{who} splits stages evenly (stage_layers {stage_layers} are not)")
    if p > 2 and prof.stage_split == "first_last" and len(set(stage_layers[1:-1])) > 1:
        out.append(f"{who} {prof.versions} sets only the first and last stage's layers; middle stages must be equal")
    if pipeline_layout is not None and prof.stage_split != "any":
        if any(len(set(chunks)) > 1 for chunks in pipeline_layout):
            out.append(f"{who} {prof.versions} has no per-chunk pipeline layout")
    if c.recompute == "full" and any(recompute_layers):
        chunks = pipeline_layout or [[n // max(1, c.vpp)] * max(1, c.vpp) for n in stage_layers]
        if not _recompute_counts_ok(prof.full_recompute_counts, stage_layers, recompute_layers, chunks):
            out.append(f"{who} cannot recompute {recompute_layers} of {stage_layers} layers per stage "
                       f"({_COUNT_RULES[prof.full_recompute_counts]})")
    return out


_COUNT_RULES = {
    "chunk_block": "--recompute-method block recomputes the first N layers of every model chunk, uniform all of them",
    "all": "full recompute checkpoints every layer",
    "all_or_every_nth": "full AC checkpoints every layer, per-layer SAC every N-th",
}


def _recompute_counts_ok(rule: str, layers: list[int], recomputed: list[int], chunks: list[list[int]]) -> bool:
    if list(recomputed) == list(layers):
        return True
    if rule == "chunk_block":
        top = max(max(ch) for ch in chunks)
        return any([sum(min(n, x) for x in ch) for ch in chunks] == list(recomputed) for n in range(1, top + 1))
    if rule == "all_or_every_nth":
        return any([l // n for l in layers] == list(recomputed) for n in range(2, max(layers) + 2))
    return False


def framework_violations(prof: Profile, plan: "Plan", model: Optional["ModelSpec"] = None) -> list[str]:
    """Every rule of ``prof`` a complete plan of ``model`` breaks (empty: the framework can run it)."""
    return choice_rule_violations(prof, plan) + model_rule_violations(prof, plan, model) + stage_rule_violations(
        prof, plan, list(plan.stage_layers), list(plan.recompute_layers), plan.pipeline_layout)


def model_conflicts(model: "ModelSpec", prof: Profile) -> list[str]:
    """What of the model ``prof`` cannot build at all, whatever the plan (a spec error, naming the field): a
    multi-token prediction module where its models have none ('titan.no_mtp_022')."""
    if model.num_mtp_layers and not prof.multi_token_prediction:
        return [f"model.num_mtp_layers {model.num_mtp_layers}: {prof.name} {prof.versions} has no multi-token "
                "prediction module (set 0, or plan for another framework)"]
    return []


def search_conflicts(search: "SearchSpec", prof: Profile) -> list[str]:
    """``search:`` pins that leave nothing ``prof`` can run (a spec error, naming the field)."""
    s, lim, out = search, space_limits(prof), []
    for name, allowed in (("schedules", lim.schedules), ("zero_stages", lim.zero_stages), ("recompute", lim.recompute)):
        pinned = getattr(s, name)
        if pinned is not None and not set(pinned) & set(allowed):
            out.append(f"search.{name} {list(pinned)}: {prof.name} runs none of them "
                       f"(it runs {', '.join(map(str, allowed))})")
    for name, ok in (("moe_fp8_dispatch", prof.fp8_dispatch), ("moe_a2a_overlap", prof.moe_a2a_overlap)):
        pinned = getattr(s, name, None)
        if pinned is not None and not ok and False not in pinned:
            out.append(f"search.{name} {list(pinned)}: {prof.name} {prof.versions} has no such option (allow false)")
    if s.cp is not None and lim.cp is not None and 1 not in s.cp:
        out.append(f"search.cp {list(s.cp)}: {prof.name} has no context parallelism (cp must be 1)")
    kinds = list(s.cp_comm_types or ["p2p"])
    if lim.cp is None and s.cp is not None and 1 not in s.cp and not set(kinds) & set(lim.cp_comm_types):
        out.append(f"search.cp {list(s.cp)} with search.cp_comm_types {kinds}: {prof.name} runs none of these CP "
                   f"comm types (it runs {', '.join(lim.cp_comm_types)}; set search.cp_comm_types)")
    for name, what in (("tp", "tensor"), ("pp", "pipeline")):
        pinned = getattr(s, name)
        if pinned is not None and getattr(lim, name) is not None and 1 not in pinned:
            out.append(f"search.{name} {list(pinned)}: {prof.name} has no {what} parallelism ({name} must be 1)")
    if s.zero_replicas is not None and 1 not in s.zero_replicas and not prof.hsdp_zero_stages:
        out.append(f"search.zero_replicas {list(s.zero_replicas)}: {prof.name} {prof.versions} has no HSDP "
                   "(zero_replicas must be 1)")
    if s.optimizer_states is not None and not prof.optimizer_states:
        out.append(f"search.optimizer_states {list(s.optimizer_states)}: {prof.name} {prof.versions} has no "
                   "precision-aware optimizer (omit the key: the assumptions' optimizer_bytes)")
    counts = s.activation_offload_layers
    if counts is not None and 0 not in counts and not prof.activation_offload:
        out.append(f"search.activation_offload_layers {list(counts)}: {prof.name} {prof.versions} has no activation "
                   "CPU offload (allow 0)")
    fractions = s.optimizer_offload_fractions
    if fractions is not None and 0 not in fractions and prof.optimizer_offload == "none":
        out.append(f"search.optimizer_offload_fractions {list(fractions)}: {prof.name} {prof.versions} has no "
                   "optimizer-only CPU offload (the fraction must be 0)")
    if (fractions is not None and 0 not in fractions and prof.optimizer_offload == "needs_states"
            and s.optimizer_states is None):
        out.append(f"search.optimizer_offload_fractions {list(fractions)}: {prof.name}'s optimizer CPU offload "
                   "needs the precision-aware optimizer; list search.optimizer_states too")
    return out
