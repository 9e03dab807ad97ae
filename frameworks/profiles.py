"""Target-framework profiles: what each training framework can run, and what it allocates.

A spec's ``framework:`` (``megatron-core | megatron-bridge | torchtitan | deepspeed``, or
``{name: ..., version: ...}``) selects one :class:`Profile`. A profile is

* a **legal space**, in parplan's own terms: the pipeline schedules, ZeRO stages (with and without
  pipeline parallelism), recompute granularities and per-stage recompute counts, CP / EP / ETP /
  sequence-parallel rules and stage splits the framework can launch. :func:`space_limits` is what
  ``SpaceOptions.from_spec`` intersects the search with; :func:`framework_violations` is the rule
  ``costmodel.legality`` reports and :func:`runs_on` applies to every returned plan;
* a **memory convention**: values for the cost model's existing knobs (``solver-cli knobs``), applied
  under the user's explicit ``assumptions:`` (user values win; :func:`framework_assumptions`).

Every fact carries a citation (:data:`CITATIONS`; repository file at a commit). Source snapshots read:

* Megatron-LM ``d98e8a64ddf34856e74b24714e3bedb2f5a39553`` (2026-08-22; tag core_v0.19.0 is 2026-08-19)
* Megatron-Bridge ``067f987df03b8355b03192d88d70f1709fedf51a`` (2026-08-22)
* torchtitan ``b5bcd76c66d0acb1a08b176d9639425bc55e0b2a`` (2026-08-21) and tag ``v0.2.2`` (2026-02-20)
* DeepSpeed ``edaa7221267243c7be7fb49c5d5f5c4fb97b4641`` (2026-08-22)
* PyTorch ``1fd7abc2f521e4429a29c3088e39ebaca20f4698`` (torch.distributed.pipelining ScheduleDualPipeV),
  deepseek-ai/DualPipe ``3da1bbea53606543d7f5f232338fc58096db30e3`` (2025-03-10) and deepseek-ai/DeepEP
  ``dd758caf451848bd150e1046af3d0a73e5fff38d`` (2026-07-14): costmodel/dualpipev.py and costmodel/moe_comm.py

What parplan's schedules cannot express is listed per profile (``not_expressible``): the framework
can run it, parplan cannot plan it, so no returned plan uses it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:  # the rules read plans and specs by attribute; no import cycle with costmodel.spec
    from parplan.costmodel.spec import Spec

MEGATRON = "NVIDIA/Megatron-LM@d98e8a64ddf34856e74b24714e3bedb2f5a39553"
BRIDGE = "NVIDIA-NeMo/Megatron-Bridge@067f987df03b8355b03192d88d70f1709fedf51a"
TITAN = "pytorch/torchtitan@b5bcd76c66d0acb1a08b176d9639425bc55e0b2a"
TITAN_022 = "pytorch/torchtitan@v0.2.2"
DEEPSPEED = "deepspeedai/DeepSpeed@edaa7221267243c7be7fb49c5d5f5c4fb97b4641"

FRAMEWORKS: tuple[str, ...] = ("megatron-core", "megatron-bridge", "torchtitan", "deepspeed")

# fact -> where it is written (file at a commit, lines). The profiles below cite these keys.
CITATIONS: dict[str, str] = {
    "megatron.schedules": f"{MEGATRON} megatron/core/pipeline_parallel/schedules.py:153-168 get_forward_backward_func: "
                          "pp 1 -> forward_backward_no_pipelining; virtual stages -> ..._with_interleaving; else "
                          "..._without_interleaving (1F1B). No zero-bubble or DualPipe schedule in the package",
    "megatron.vp_group": f"{MEGATRON} megatron/core/pipeline_parallel/schedules.py:932-1012 (warm-up "
                         "(num_model_chunks-1)*microbatch_group_size_per_vp_stage; get_schedule_table orders "
                         "forwards chunk by chunk within groups of microbatch_group_size_per_vp_stage, default pp)",
    "megatron.dist_opt": f"{MEGATRON} megatron/training/arguments.py:3156 --use-distributed-optimizer (ZeRO-1)",
    "megatron.fsdp": f"{MEGATRON} megatron/training/arguments.py:3190 --data-parallel-sharding-strategy "
                     "{no_shard, optim, optim_grads, optim_grads_params} (Megatron-FSDP, --use-megatron-fsdp; "
                     "docs/user-guide/features/megatron_fsdp.md:435: DDP, ZeRO-1, ZeRO-2, ZeRO-3)",
    "megatron.fsdp_pp": f"{BRIDGE} docs/training/megatron-fsdp.md:77-84: Megatron FSDP is intended to work with "
                        "tensor, pipeline, context and expert parallelism",
    "megatron.torch_fsdp2_pp": f"{MEGATRON} megatron/training/arguments.py:1031-1035: --use-torch-fsdp2 is not "
                               "supported with pipeline parallelism",
    "megatron.tp_overlap_sp": f"{MEGATRON} megatron/training/arguments.py:1441-1442: tensor-parallel "
                              "communication/GEMM overlap only with sequence parallelism",
    "megatron.recompute": f"{MEGATRON} megatron/training/arguments.py:1425-1428 (--recompute-granularity "
                          "full|selective; selective takes no --recompute-method); full with --recompute-method "
                          "uniform|block and --recompute-num-layers N, applied per model chunk "
                          "(megatron/core/transformer/transformer_block.py _checkpointed_forward)",
    "megatron.layout": f"{MEGATRON} megatron/core/transformer/pipeline_parallel_layer_layout.py (added in "
                       "77732c36, 2025-06-13, first in core_v0.13.0): any per-(stage, virtual stage) layout",
    "megatron.uneven": f"{MEGATRON} megatron/core/transformer/transformer_block.py:103-143 "
                       "--decoder-first/last-pipeline-num-layers (fa8bb592, 2024-09, core_v0.9.0): first and last "
                       "stage free, middle stages even",
    "megatron.grads_fp32": f"{MEGATRON} megatron/training/arguments.py:1204-1216: bf16 accumulates and "
                           "all-reduces gradients in fp32 (main_grads fp32) unless --grad-reduce-in-bf16",
    "megatron.grad_buffer": f"{MEGATRON} megatron/core/distributed/param_and_grad_buffer.py:924: the gradient "
                            "buffer is fp32 if grad_reduce_in_fp32, else the parameter dtype (bf16); "
                            "distributed_data_parallel_config.py:15 grad_reduce_in_fp32 defaults to False",
    "bridge.perf_grads": f"{BRIDGE} src/megatron/bridge/perf_recipes/_common.py:72-74 and 122: the performance "
                         "recipes (the published performance tables) set grad_reduce_in_fp32 = False: bf16 "
                         "gradient buffers and reductions; the training recipes (recipes/common.py:82) keep fp32",
    "bridge.alloc": f"{BRIDGE} src/megatron/bridge/perf_recipes/llama/h100/llama31.py: "
                    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True in the recipe's environment",
    "megatron.cp": f"{MEGATRON} megatron/training/arguments.py:3221 --cp-comm-type p2p (ring, default) | a2a | "
                   "allgather | a2a+p2p",
    "titan.schedules": f"{TITAN} torchtitan/config/configs.py:216-224 pipeline_parallel_schedule, any of "
                       "torch.distributed.pipelining's get_schedule_class: 1F1B, GPipe, Interleaved1F1B, LoopedBFS, "
                       "InterleavedZeroBubble, ZBVZeroBubble, DualPipeV",
    "titan.multi_stage": f"{TITAN_022} torchtitan/distributed/pipeline_parallel.py:96-115: single-stage schedules "
                         "take exactly 1 stage per rank, multi-stage (looped) ones at least 2 (default 2)",
    "titan.v_schedules": f"{TITAN} torchtitan/distributed/pipeline_parallel.py:550-552 and "
                         f"{TITAN_022} pipeline_parallel.py:459-465: ZBVZeroBubble and DualPipeV place stages in a "
                         "'v' (rank i holds stages i and 2p-1-i, two per rank)",
    "titan.dualpipev": f"{TITAN} torchtitan/distributed/pipeline_parallel.py:23 and 550-552 (imports torch's "
                       "ScheduleDualPipeV, 'v' stage placement) and pytorch/pytorch@1fd7abc2f521e4429a29c3088e39ebaca20f4698 "
                       "torch/distributed/pipelining/schedules.py ScheduleDualPipeV: exactly 2 stages per rank, "
                       "n_microbatches >= number of stages (2·pp), DeepSeek's cut-in-half DualPipe "
                       "(deepseek-ai/DualPipe@3da1bbea dualpipe/dualpipev.py); DeepSeek's two-direction DualPipe "
                       "(parplan 'dualpipe': every rank two full stages, parameters twice) is not in "
                       "torch.distributed.pipelining's get_schedule_class",
    "titan.dualpipev_ep_ac": f"{TITAN_022} torchtitan/distributed/dual_pipe_v.py:32-51 get_dual_pipe_v_flag: with "
                             "EP and PP, DualPipeV and pipeline_parallel_expert_parallel_overlap (default true, "
                             "config/job_config.py:420) raise NotImplementedError unless activation_checkpoint.mode "
                             "is 'none'",
    "titan.no_fp8_dispatch": f"{TITAN} torchtitan/distributed/deepep/deepep.py:341: the DeepEP dispatch takes "
                             "use_fp8_dispatch (default False) but no configuration sets it: no FP8 dispatch",
    "megatron.fp8_dispatch": f"{MEGATRON} megatron/core/transformer/transformer_config.py:997 moe_dispatch_fwd_dtype "
                             "'bf16' | 'mxfp8' and 1776-1790 (needs --moe-token-dispatcher-type flex with "
                             "--moe-flex-dispatcher-backend ncclep, the TE op fuser and grouped GEMM); added in "
                             "7afe0319 (2026-08-20), after core_v0.19.0; moe/fused_a2a.py:327 and 402: no FP8 "
                             "dispatch through the HybridEP backend",
    "megatron.a2a_overlap": f"{MEGATRON} megatron/core/transformer/transformer_config.py:3002-3046 "
                            "--overlap-moe-expert-parallel-comm: pp > 1 needs virtual pipeline stages, ep > 1, "
                            "alltoall/flex dispatcher, no full recompute, at most one MTP layer, torch >= 2.6; "
                            "pipeline_parallel/schedules.py:966-970 one more warm-up forward; combined_1f1b.py "
                            "(pp 1); added for pp 1 in ae1c8829 (core_v0.14.0), interleaved in d7bf5aaa "
                            "(core_v0.15.0)",
    "titan.fsdp": f"{TITAN} torchtitan/config/configs.py:120-158 (data_parallel_replicate_degree: DDP; "
                  "data_parallel_shard_degree: FSDP2; both: HSDP; fsdp_reshard_after_forward default|always|never)",
    "titan.reshard_pp": f"{TITAN} torchtitan/distributed/fsdp.py:125-132: by default no reshard after forward "
                        "under PP (ZeRO-2-like), reshard without PP (ZeRO-3)",
    "titan.reduce_fp32": f"{TITAN} torchtitan/config/configs.py:102 mixed_precision_reduce float32",
    "titan.ac": f"{TITAN} torchtitan/distributed/activation_checkpoint.py:166-290: FullAC (every block), "
                "SelectiveAC (per-op: saves matmul outputs except every second mm), MemoryBudgetAC",
    "titan.layer_sac": f"{TITAN_022} torchtitan/distributed/activation_checkpoint.py _apply_layer_sac: "
                       "selective_ac_option N checkpoints every N-th block (a process-wide counter); removed in "
                       "114151ad (2026-03-23)",
    "titan.split": f"{TITAN} torchtitan/config/configs.py:186-211 module_fqns_per_model_part (any split per model "
                   "chunk), pipeline_parallel_first/last_stage_less_layers (default 1)",
    "titan.ep": f"{TITAN} torchtitan/config/configs.py:283-291: EP borrows ranks from FSDP and TP "
                "(efsdp = dp_shard*cp*tp/ep); no expert-tensor-parallel degree",
    "titan.etp_022": f"{TITAN_022} torchtitan/config/job_config.py:454-470: expert_tensor_parallel_degree is 1 or tp",
    "titan.sp": f"{TITAN} torchtitan/config/configs.py:168-169 enable_sequence_parallel (default true)",
    "titan.async_tp": f"{TITAN} torchtitan/config/configs.py:299-309 enable_async_tensor_parallel (default off; "
                      "needs torch.compile of the model)",
    "titan.cp": f"{TITAN} torchtitan/config/configs.py:233-242 context_parallel_degree, head-tail load balancing",
    "titan.runtime": "benchmarks/runs.py _techniques (torch.distributed.pipelining buffers, DTensor SP saved "
                     "inputs, loss_parallel 16 B/logit with TP, 12 B without): facts established and cited there",
    "deepspeed.schedule": f"{DEEPSPEED} deepspeed/runtime/pipe/schedule.py:189-252 TrainSchedule (synchronous "
                          "1F1B); no interleaved schedule",
    "deepspeed.zero_pp": f"{DEEPSPEED} deepspeed/runtime/pipe/engine.py:76-77: ZeRO-2 and ZeRO-3 are "
                         "incompatible with pipeline parallelism",
    "deepspeed.partition": f"{DEEPSPEED} deepspeed/runtime/pipe/module.py:396-417 partition_method uniform | "
                           "parameters | type:regex (balanced counts; no per-stage counts)",
    "deepspeed.ac": f"{DEEPSPEED} deepspeed/runtime/pipe/module.py:117 activation_checkpoint_interval (every layer "
                    "group checkpointed; no selective recompute)",
    "deepspeed.comm_dtype": f"{DEEPSPEED} deepspeed/runtime/engine.py:1405-1416: gradients are reduced in the "
                            "training dtype (fp16/bf16) unless communication_data_type is set",
    "deepspeed.moe": f"{DEEPSPEED} deepspeed/moe/layer.py:24-60 MoE(ep_size, enable_expert_tensor_parallelism): "
                     "experts split over ep_size ranks (num_experts divisible by it), expert weights either "
                     "unsplit or split by the tensor-parallel degree",
    "deepspeed.moe_a2a": f"{DEEPSPEED} deepspeed/moe/sharded_moe.py:97-109, 720 and 749: the dispatch and combine "
                         "are dist.all_to_all_single of the activations in their own dtype inside the layer's "
                         "forward: no FP8 dispatch, no all-to-all overlap with another micro-batch",
    "deepspeed.tp": f"{DEEPSPEED} deepspeed/runtime/tensor_parallel/ (AutoTP training); "
                    "deepspeed/runtime/sequence_parallel/ is Ulysses (all-to-all over heads), not ring CP or "
                    "Megatron's sequence parallelism",
}


@dataclass(frozen=True)
class Profile:
    """One framework (at a version range) in parplan's terms. Field comments name the citation keys."""

    name: str
    versions: str  # human-readable range this profile describes
    schedules: tuple[str, ...]  # parplan schedules it can run (pp 1 runs as '1f1b')
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
    fp8_dispatch: bool = False  # MoE FP8 token dispatch (Plan.moe_fp8_dispatch)
    moe_a2a_overlap: bool = False  # EP all-to-all overlapped with another micro-batch (Plan.moe_a2a_overlap)
    dualpipev_ep_no_recompute: bool = False  # DualPipeV with EP > 1 only without activation checkpointing


_MEGATRON_CORE = Profile(
    name="megatron-core", versions=">= 0.13.0 (core_v0.13.0 .. core_v0.19.0)",
    schedules=("1f1b", "interleaved"),
    zero_stages=(0, 1, 2, 3), zero_stages_with_pp=(0, 1, 2, 3),
    recompute=("none", "selective", "full"), full_recompute_counts="chunk_block",
    context_parallel=True, expert_tensor_parallel="any", sequence_parallel=True, stage_split="any",
    assumptions={"grad_bytes": 4.0, "grad_reduce_bytes": 4.0, "pipeline_runtime": "megatron",
                 "sequence_parallel_saves_gathered_inputs": False, "selective_recompute_policy": "attention"},
    citations=("megatron.schedules", "megatron.vp_group", "megatron.dist_opt", "megatron.fsdp", "megatron.fsdp_pp",
               "megatron.tp_overlap_sp", "megatron.recompute", "megatron.layout", "megatron.grads_fp32",
               "megatron.cp"),
    not_expressible=("--recompute-modules (selective recompute of named modules: parplan's 'selective' is the "
                     "attention core)", "CP comm types a2a / allgather (parplan prices the p2p ring)",
                     "--outer-dp-sharding-strategy (HSDP)"),
)
_MEGATRON_CORE_015 = replace(
    _MEGATRON_CORE, versions=">= 0.15.0 (core_v0.15.0 .. core_v0.19.0)", moe_a2a_overlap=True,
    citations=_MEGATRON_CORE.citations + ("megatron.a2a_overlap",),
)
_MEGATRON_CORE_MAIN = replace(
    _MEGATRON_CORE_015, versions="main after core_v0.19.0 (snapshot d98e8a64, 2026-08-22)", fp8_dispatch=True,
    citations=_MEGATRON_CORE_015.citations + ("megatron.fp8_dispatch",),
)
_MEGATRON_CORE_PRE_LAYOUT = replace(
    _MEGATRON_CORE, versions=">= 0.9.0, < 0.13.0", stage_split="first_last",
    citations=_MEGATRON_CORE.citations[:-3] + ("megatron.uneven", "megatron.grads_fp32", "megatron.cp"),
)
_MEGATRON_BRIDGE = replace(
    _MEGATRON_CORE, name="megatron-bridge", versions="Megatron-Bridge performance recipes on Megatron-Core >= 0.13.0",
    assumptions={**_MEGATRON_CORE.assumptions, "grad_bytes": 2.0, "grad_reduce_bytes": 2.0},
    citations=_MEGATRON_CORE.citations + ("megatron.grad_buffer", "bridge.perf_grads"),
)
_TORCHTITAN = Profile(
    name="torchtitan", versions="> 0.2.2 (main after 2026-03-23)",
    schedules=("1f1b", "interleaved", "dualpipev"),
    zero_stages=(0, 2, 3), zero_stages_with_pp=(0, 2, 3),
    recompute=("none", "selective", "full"), full_recompute_counts="all",
    context_parallel=True, expert_tensor_parallel="one", sequence_parallel=True, stage_split="any",
    assumptions={"grad_bytes": 4.0, "grad_reduce_bytes": 4.0, "pipeline_runtime": "torch",
                 "sequence_parallel_saves_gathered_inputs": True, "selective_recompute_policy": "alternate_matmuls",
                 "tp_comm_overlap": 0.0},
    citations=("titan.schedules", "titan.multi_stage", "titan.v_schedules", "titan.dualpipev", "titan.no_fp8_dispatch",
               "titan.fsdp", "titan.reshard_pp",
               "titan.reduce_fp32", "titan.ac", "titan.split", "titan.ep", "titan.sp", "titan.async_tp", "titan.cp",
               "titan.runtime"),
    not_expressible=("GPipe (parplan has no all-forwards-first schedule)",
                     "InterleavedZeroBubble (parplan's zb-h1 has one stage per rank; torchtitan's looped schedules "
                     "need at least two)",
                     "ZBVZeroBubble (a zero-bubble 'v' of two stages per rank; parplan plans the V as DualPipeV, "
                     "schedule dualpipev)",
                     "HSDP (data_parallel_replicate x data_parallel_shard: parplan shards over the whole DP group)",
                     "AsyncTP (set assumptions.tp_comm_overlap when compiled with it)",
                     "MemoryBudgetAC"),
)
_TORCHTITAN_022 = replace(
    _TORCHTITAN, versions="<= 0.2.2", full_recompute_counts="all_or_every_nth", expert_tensor_parallel="one_or_tp",
    citations=_TORCHTITAN.citations + ("titan.layer_sac", "titan.etp_022", "titan.dualpipev_ep_ac"),
    dualpipev_ep_no_recompute=True,
)
_DEEPSPEED = Profile(
    name="deepspeed", versions="DeepSpeed pipeline engine and ZeRO (2026-08)",
    schedules=("1f1b",),
    zero_stages=(0, 1, 2, 3), zero_stages_with_pp=(0, 1),
    recompute=("none", "full"), full_recompute_counts="all",
    context_parallel=False, expert_tensor_parallel="one_or_tp", sequence_parallel=False, stage_split="even",
    assumptions={"grad_reduce_bytes": 2.0, "pipeline_runtime": "megatron",
                 "sequence_parallel_saves_gathered_inputs": False},
    citations=("deepspeed.schedule", "deepspeed.zero_pp", "deepspeed.partition", "deepspeed.ac",
               "deepspeed.comm_dtype", "deepspeed.moe", "deepspeed.moe_a2a", "deepspeed.tp"),
    not_expressible=("DeepSpeed-Ulysses sequence parallelism (all-to-all over heads)", "ZeRO-Infinity offload",
                     "partition_method 'parameters' (balances parameter counts, not layers)"),
)

# (name, lowest version it applies to, or None = any) newest first; version None picks the newest
_VERSIONED: dict[str, tuple[tuple[Optional[tuple[int, ...]], Profile], ...]] = {
    "megatron-core": (((0, 20, 0), _MEGATRON_CORE_MAIN), ((0, 15, 0), _MEGATRON_CORE_015),
                      ((0, 13, 0), _MEGATRON_CORE), ((0, 9, 0), _MEGATRON_CORE_PRE_LAYOUT)),
    "megatron-bridge": ((None, _MEGATRON_BRIDGE),),
    "torchtitan": (((0, 2, 3), _TORCHTITAN), ((0, 0, 0), _TORCHTITAN_022)),
    "deepspeed": ((None, _DEEPSPEED),),
}


class UnknownFramework(ValueError):
    pass


def _version_key(version: str) -> tuple[int, ...]:
    """'core_v0.13.0' / 'v0.2.2' / '0.13' -> (0, 13, 0); 'main' / 'latest' -> newest."""
    nums = re.findall(r"\d+", version)
    if not nums:
        if version.strip().lower() in ("main", "latest", "head", "nightly"):
            return (10**6,)
        raise UnknownFramework(f"framework.version {version!r}: expected a release number such as 0.13.0 or 'main'")
    return tuple(int(n) for n in nums[:3]) + (0,) * (3 - min(3, len(nums)))


def profile(name: str, version: Optional[str] = None) -> Profile:
    """The profile of ``name`` at ``version`` (None: the newest snapshot read)."""
    if name not in _VERSIONED:
        raise UnknownFramework(f"unknown framework {name!r}; known: {', '.join(FRAMEWORKS)}")
    variants = _VERSIONED[name]
    if version is None:
        return variants[0][1]
    key = _version_key(version)
    for since, prof in variants:
        if since is None or key >= since:
            return prof
    oldest = variants[-1][0]
    raise UnknownFramework(f"framework {name} version {version} predates the oldest profile "
                           f"({'.'.join(map(str, oldest))}); its facts are not cited here")


def spec_profile(spec: "Spec") -> Optional[Profile]:
    """The profile a spec names, or None (framework-neutral)."""
    fw = getattr(spec, "framework", None)
    if fw is None:
        return None
    if isinstance(fw, str):
        return profile(fw)
    return profile(fw.name, fw.version)


# ------------------------------------------------------------------------------------ memory conventions


def framework_assumptions(prof: Profile, tp_values: Optional[list[int]] = None) -> dict[str, Any]:
    """The profile's knob values. torchtitan's loss buffer depends on TP (``loss_parallel`` holds 16 B per
    logit, the plain fp32 loss 12 B; benchmarks/runs.py): 12 only when every allowed TP degree is 1."""
    out = dict(prof.assumptions)
    if prof.name == "torchtitan":
        out["logits_bytes_per_element"] = 12.0 if tp_values is not None and set(tp_values) == {1} else 16.0
    return out


def apply_framework_assumptions(data: Any) -> Any:
    """Raw spec input (a dict) -> the same with the profile's knobs filled where the user set none.

    Called by ``Spec``'s before-validator: user-set knobs win, the preset underlies both. Input of the wrong
    shape is returned unchanged for the field validators to report.
    """
    if not isinstance(data, dict) or data.get("framework") is None:
        return data
    fw = data["framework"]
    if isinstance(fw, dict):
        name, version = fw.get("name"), fw.get("version")
    else:
        name, version = getattr(fw, "name", fw), getattr(fw, "version", None)
    if not isinstance(name, str) or name not in _VERSIONED or not (version is None or isinstance(version, str)):
        return data
    prof = profile(name, version)  # an unknown version raises ValueError: a spec error naming the framework
    section = data.get("assumptions")
    if section is None:
        section = {}
    elif hasattr(section, "model_dump"):
        section = section.model_dump(exclude_none=True)
    elif not isinstance(section, dict):
        return data
    merged = {**framework_assumptions(prof, _tp_values(data)), **{k: v for k, v in section.items() if v is not None}}
    return {**data, "assumptions": merged}


def _tp_values(data: dict) -> Optional[list[int]]:
    """The TP degrees a spec allows (its plan's, or its search pins), None when unrestricted or unreadable."""
    plan, search = data.get("plan"), data.get("search")
    get = lambda obj, key: obj.get(key) if isinstance(obj, dict) else getattr(obj, key, None)  # noqa: E731
    if plan is not None:
        tp = get(plan, "tp")
        values = [1 if tp is None else tp]
    elif search is not None and get(search, "tp") is not None:
        values = get(search, "tp")
    else:
        return None
    if not isinstance(values, (list, tuple)) or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return None
    return list(values)


# ----------------------------------------------------------------------------------------- legal space


@dataclass(frozen=True)
class SpaceLimits:
    """What ``SpaceOptions.from_spec`` intersects the search with."""

    schedules: tuple[str, ...]
    zero_stages: tuple[int, ...]  # without PP and with it (the union)
    zero_stages_with_pp: tuple[int, ...]
    recompute: tuple[str, ...]
    cp: Optional[tuple[int, ...]]  # None: unrestricted
    etp_one: bool
    sequence_parallel: Optional[tuple[bool, ...]]
    stage_split: str  # the loosest search.stage_split the framework runs: per_stage, first_last or even
    uniform_recompute: bool
    recompute_all_layers: bool  # full recomputation checkpoints every layer of every stage (no per-stage count)


def space_limits(prof: Profile) -> SpaceLimits:
    """The profile's choice-level space (ZeRO stages: the union over PP, and the ones PP allows)."""
    return SpaceLimits(
        schedules=prof.schedules,
        zero_stages=tuple(sorted(set(prof.zero_stages) | set(prof.zero_stages_with_pp))),
        zero_stages_with_pp=prof.zero_stages_with_pp,
        recompute=prof.recompute,
        cp=None if prof.context_parallel else (1,),
        etp_one=prof.expert_tensor_parallel == "one",
        sequence_parallel=None if prof.sequence_parallel else (False,),
        stage_split={"any": "per_stage"}.get(prof.stage_split, prof.stage_split),
        uniform_recompute=prof.full_recompute_counts == "chunk_block",
        recompute_all_layers=prof.full_recompute_counts in ("all", "all_or_every_nth"),
    )


def choice_rule_violations(prof: Profile, c: Any) -> list[str]:
    """Rules on degrees, schedule, ZeRO, recompute granularity and SP (a Choice or a Plan)."""
    out: list[str] = []
    who = prof.name
    if c.pp > 1 and c.schedule not in prof.schedules:
        out.append(f"{who} cannot run schedule {c.schedule} (it runs {', '.join(prof.schedules)})")
    if c.pp == 1 and c.schedule not in ("1f1b", *prof.schedules):
        out.append(f"{who} cannot run schedule {c.schedule}")
    allowed = prof.zero_stages_with_pp if c.pp > 1 else prof.zero_stages
    if c.zero_stage not in allowed:
        where = "with pipeline parallelism" if c.pp > 1 else "without pipeline parallelism"
        out.append(f"{who} cannot run ZeRO-{c.zero_stage} {where} (it runs ZeRO {', '.join(map(str, allowed))})")
    if c.recompute not in prof.recompute:
        out.append(f"{who} has no recompute granularity {c.recompute!r}")
    if c.cp > 1 and not prof.context_parallel:
        out.append(f"{who} has no ring context parallelism (cp must be 1)")
    if c.etp != 1:
        if prof.expert_tensor_parallel == "one":
            out.append(f"{who} has no expert tensor parallelism (etp must be 1)")
        elif prof.expert_tensor_parallel == "one_or_tp" and c.etp != c.tp:
            out.append(f"{who} supports etp 1 or etp = tp only (got etp {c.etp}, tp {c.tp})")
    if c.sequence_parallel and c.tp > 1 and not prof.sequence_parallel:
        out.append(f"{who} has no Megatron-style sequence parallelism")
    if getattr(c, "moe_fp8_dispatch", False) and not prof.fp8_dispatch:
        out.append(f"{who} {prof.versions} has no FP8 expert dispatch")
    if getattr(c, "moe_a2a_overlap", False) and not prof.moe_a2a_overlap:
        out.append(f"{who} {prof.versions} has no EP all-to-all overlap (--overlap-moe-expert-parallel-comm)")
    if (prof.dualpipev_ep_no_recompute and c.schedule == "dualpipev" and c.pp > 1 and c.ep > 1
            and c.recompute != "none"):
        out.append(f"{who} {prof.versions} runs DualPipeV with expert parallelism only without activation "
                   "checkpointing (recompute none)")
    return out


def stage_rule_violations(prof: Profile, c: Any, stage_layers: list[int], recompute_layers: list[int],
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


def framework_violations(prof: Profile, plan: Any) -> list[str]:
    """Every rule of ``prof`` a complete plan breaks (empty: the framework can run it)."""
    return choice_rule_violations(prof, plan) + stage_rule_violations(
        prof, plan, list(plan.stage_layers), list(plan.recompute_layers), getattr(plan, "pipeline_layout", None))


def runs_on(spec: "Spec", plan: Any) -> list[str]:
    """The frameworks (newest profiles; the spec's own at its version) that can run ``plan``."""
    mine = spec_profile(spec)
    out = []
    for name in FRAMEWORKS:
        prof = mine if mine is not None and mine.name == name else profile(name)
        if not framework_violations(prof, plan):
            out.append(name)
    return out


def describe(prof: Profile) -> list[tuple[str, str]]:
    """(fact, citation) rows for a profile: what ``solver-cli`` or a README can print."""
    return [(key, CITATIONS[key]) for key in prof.citations]


def search_conflicts(spec: "Spec") -> list[str]:
    """``search:`` pins that leave nothing the spec's framework can run (a spec error, naming the field)."""
    prof = spec_profile(spec)
    if prof is None:
        return []
    s, lim, out = spec.search, space_limits(prof), []
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
        out.append(f"search.cp {list(s.cp)}: {prof.name} has no ring context parallelism (cp must be 1)")
    return out
