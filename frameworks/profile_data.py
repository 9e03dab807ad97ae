"""Framework profiles (data): what each framework can run, at each version range, with its memory conventions.

One :class:`~parplan.costmodel.spec.framework_rules.Profile` per framework and version range; the field comments name the citation keys of
:data:`~parplan.frameworks.profile_citations.CITATIONS`. :data:`VERSIONED` lists them per framework, newest first;
:func:`parplan.frameworks.profiles.profile` picks one by version and the rules there read them.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

from parplan.costmodel.schedules.schedule import Schedule
from parplan.costmodel.spec.framework_rules import Profile

_MEGATRON_CORE = Profile(
    name="megatron-core", versions=">= 0.13.0 (core_v0.13.0 .. core_v0.19.0)",
    schedules=(Schedule.ONE_F_ONE_B, Schedule.INTERLEAVED),
    zero_stages=(0, 1, 2, 3), zero_stages_with_pp=(0, 1, 2, 3),
    recompute=("none", "selective", "full"), full_recompute_counts="chunk_block",
    context_parallel=True, expert_tensor_parallel="any", sequence_parallel=True, stage_split="any",
    assumptions={"grad_bytes": 4.0, "grad_reduce_bytes": 4.0, "pipeline_runtime": "megatron",
                 "sequence_parallel_saves_gathered_inputs": False, "selective_recompute_policy": "model"},
    citations=("megatron.schedules", "megatron.vp_group", "megatron.dist_opt", "megatron.fsdp", "megatron.fsdp_pp",
               "megatron.tp_overlap_sp", "megatron.recompute", "megatron.layout", "megatron.grads_fp32",
               "megatron.cp", "megatron.cp_types", "megatron.partial_dist_opt", "megatron.fsdp_hsdp",
               "megatron.precision_aware", "megatron.cpu_offload", "megatron.activation_offload"),
    not_expressible=("--recompute-modules (selective recompute of named modules: parplan's 'selective' is the "
                     "attention core)", "a different --cp-comm-type per layer (parplan: one for all layers); "
                     "a2a+p2p with an a2a level other than the CP members of one NVLink domain",
                     "--outer-dp-sharding-strategy optim (optimizer states sharded across the HSDP replicas too)",
                     "--main-grads-dtype bf16 (set assumptions.grad_bytes / grad_reduce_bytes)"),
    sequence_parallel_with_tp_ep=True,  # model_parallel_config.py:388-393 (core_v0.15.3): SP with TP and EP
    expert_bias_etp_one=True,  # transformer_config.py TransformerConfig.__post_init__: "Bias in Moe is only supported
    #                            when ETP==1" (megatron-core 0.16.1 :1588-1591)
    cp_comm_types=("p2p", "a2a", "allgather", "a2a+p2p"),
    hsdp_zero_stages=(1, 2, 3), optimizer_states=True, optimizer_offload="needs_states",
    activation_offload=True,
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
    citations=tuple("megatron.uneven" if c == "megatron.layout" else c for c in _MEGATRON_CORE.citations),
    # the memory-side options came later: --num-distributed-optimizer-instances in core_v0.10.0 (bb84eb93),
    # --use-precision-aware-optimizer in core_v0.11.0 (47a175b4), --optimizer-cpu-offload in core_v0.12.0
    # (60007c93); this profile spans 0.9-0.12, so it allows none of them
    hsdp_zero_stages=(), optimizer_states=False, optimizer_offload="none",
)
_MEGATRON_BRIDGE = replace(
    _MEGATRON_CORE, name="megatron-bridge", versions="Megatron-Bridge performance recipes on Megatron-Core >= 0.13.0",
    assumptions={**_MEGATRON_CORE.assumptions, "grad_bytes": 2.0, "grad_reduce_bytes": 2.0}, moe_a2a_overlap=True,
    citations=_MEGATRON_CORE.citations + ("megatron.grad_buffer", "bridge.perf_grads", "bridge.activation_offload",
                                          "megatron.a2a_overlap", "bridge.a2a_overlap"),
)
_TORCHTITAN = Profile(
    name="torchtitan", versions="> 0.2.2 (main after 2026-03-23)",
    schedules=(Schedule.ONE_F_ONE_B, Schedule.INTERLEAVED, Schedule.DUALPIPEV),
    zero_stages=(0, 2, 3), zero_stages_with_pp=(0, 2, 3),
    recompute=("none", "selective", "full"), full_recompute_counts="all",
    context_parallel=True, expert_tensor_parallel="one", sequence_parallel=True, stage_split="any",
    default_split="torchtitan_fqn_per_part",
    assumptions={"grad_bytes": 4.0, "grad_reduce_bytes": 4.0, "pipeline_runtime": "torch",
                 "sequence_parallel_saves_gathered_inputs": True, "selective_recompute_policy": "alternate_matmuls",
                 "tp_comm_overlap": 0.0, "userbuffer_count": 0, "te_cublas_workspaces": 0},  # no Transformer Engine
    citations=("titan.schedules", "titan.multi_stage", "titan.v_schedules", "titan.dualpipev", "titan.no_fp8_dispatch",
               "titan.mtp",
               "titan.fsdp", "titan.reshard_pp",
               "titan.reduce_fp32", "titan.ac", "titan.split", "titan.ep", "titan.sp", "titan.async_tp", "titan.cp",
               "titan.runtime", "titan.cp_rotate", "titan.hsdp", "titan.no_optimizer_offload",
               "titan.no_activation_offload"),
    cp_comm_types=("p2p", "allgather"),
    not_expressible=("GPipe (parplan has no all-forwards-first schedule)",
                     "InterleavedZeroBubble (parplan's zb-h1 has one stage per rank; torchtitan's looped schedules "
                     "need at least two)",
                     "ZBVZeroBubble (a zero-bubble 'v' of two stages per rank; parplan plans the V as DualPipeV, "
                     "schedule dualpipev)",
                     "HSDP (data_parallel_replicate x data_parallel_shard: parplan shards over the whole DP group)",
                     "AsyncTP (set assumptions.tp_comm_overlap when compiled with it)",
                     "MemoryBudgetAC", "training.enable_cpu_offload (parameters, gradients and optimizer states "
                     "offloaded together)"),
    hsdp_zero_stages=(2, 3), hsdp_replicas_divide_dp=True,
)
_TORCHTITAN_022 = replace(
    _TORCHTITAN, versions="<= 0.2.2", full_recompute_counts="all_or_every_nth", expert_tensor_parallel="one_or_tp",
    sequence_parallel_with_tp=True, ddp_one_dimensional=True,
    citations=_TORCHTITAN.citations + ("titan.layer_sac", "titan.etp_022", "titan.sp_with_tp",
                                   "titan.dualpipev_ep_ac", "titan.ddp_022", "titan.no_mtp_022"),
    dualpipev_ep_no_recompute=True, multi_token_prediction=False,
)
TORCHTITAN_MAIN_2412 = replace(
    _TORCHTITAN_022, versions="main 2024-12-26 (9dec370) .. 2025-02-05", zero_stages=(0, 3), zero_stages_with_pp=(0, 2),
    schedules=(Schedule.ONE_F_ONE_B, Schedule.INTERLEAVED),  # torch.distributed.pipelining had no ScheduleDualPipeV then
    expert_tensor_parallel="one", ddp_one_dimensional=True, default_split="torchtitan_split_points",
    assumptions={**_TORCHTITAN_022.assumptions, "cp_kv_heads_repeated": True},
    citations=("titan.multi_stage", "titan.v_schedules", "titan.runtime", "titan.sp_with_tp", "titan.fsdp_2412",
               "titan.ddp_2412", "titan.ac_2412", "titan.options_2412",
               "titan.repeat_kv_2412", "titan.split_2412", "titan.no_mtp_022"),
)
_DEEPSPEED = Profile(
    name="deepspeed", versions="DeepSpeed pipeline engine and ZeRO (2026-08)",
    schedules=(Schedule.ONE_F_ONE_B,),
    zero_stages=(0, 1, 2, 3), zero_stages_with_pp=(0, 1),
    recompute=("none", "full"), full_recompute_counts="all",
    context_parallel=True, expert_tensor_parallel="one_or_tp", sequence_parallel=False, stage_split="even",
    assumptions={"grad_reduce_bytes": 2.0, "pipeline_runtime": "megatron",
                 "sequence_parallel_saves_gathered_inputs": False, "userbuffer_count": 0, "te_cublas_workspaces": 0,
                 "dp_overlap_min_zero_stage": 2,  # ZeRO-0/1 reduce after the backward (assumptions.py)
                 "moe_pad_to_capacity": True},  # capacity-shaped expert buffers (deepspeed.moe_capacity)
    citations=("deepspeed.schedule", "deepspeed.zero_pp", "deepspeed.partition", "deepspeed.ac",
               "deepspeed.comm_dtype", "deepspeed.moe", "deepspeed.moe_capacity", "deepspeed.moe_a2a", "deepspeed.tp", "deepspeed.ulysses", "deepspeed.mics",
               "deepspeed.offload", "deepspeed.bf16_states", "deepspeed.no_activation_offload"),
    not_expressible=("Ulysses with fewer KV heads than the SP size (DeepSpeed replicates them; parplan needs "
                     "KV heads divisible by cp)", "ZeRO-Infinity offload",
                     "partition_method 'parameters' (balances parameter counts, not layers)",
                     "ZeRO++ hpZ (zero_hpz_partition_size: a secondary weight shard per node; optimizer states "
                     "stay sharded over the whole group)", "bf16_optimizer_states (bf16 master weights and grads)"),
    cp_comm_types=("a2a",), context_parallel_with_pp=False,  # pipe/topology.py:232-249: pipe, data, model axes
    hsdp_zero_stages=(3,), optimizer_offload="ratio_zero3",
)

# Megatron-LM 2021-2022 (before Megatron-Core): each variant adds what one main-branch merge added
_MEGATRON_LM_2021_01 = Profile(
    name="megatron-lm", versions="main 2021-01-11 .. 2021-02-16 (v2.0)",
    schedules=(Schedule.ONE_F_ONE_B,),
    zero_stages=(0,), zero_stages_with_pp=(0,),
    recompute=("none", "full"), full_recompute_counts="all",
    context_parallel=False, expert_tensor_parallel="one", sequence_parallel=False, stage_split="even",
    assumptions={"pipeline_runtime": "megatron", "sequence_parallel_saves_gathered_inputs": False,
                 "flash_attention": False, "tp_comm_overlap": 0.0, "pp_comm_overlap": 0.0, "dp_comm_overlap": 0.0},
    citations=("megatron_lm.1f1b", "megatron_lm.even", "megatron_lm.full_all", "megatron_lm.no_cp_no_flash",
               "megatron_lm.ddp"),
    not_expressible=("--DDP-impl torch (PyTorch DDP overlaps the all-reduce: set assumptions.dp_comm_overlap)",),
)
_MEGATRON_LM_2021_02 = replace(
    _MEGATRON_LM_2021_01, versions="main 2021-02-17 .. 2021-03-22",
    schedules=(Schedule.ONE_F_ONE_B, Schedule.INTERLEAVED),
    citations=_MEGATRON_LM_2021_01.citations + ("megatron_lm.interleaved",),
)
_MEGATRON_LM_2021_03 = replace(
    _MEGATRON_LM_2021_02, versions="main 2021-03-23 .. 2021-08-18 (v2.5)", interleaved_min_pp=3,
    citations=_MEGATRON_LM_2021_02.citations + ("megatron_lm.interleaved_pp3",),
)
_MEGATRON_LM_2021_08 = replace(
    _MEGATRON_LM_2021_03, versions="main 2021-08-19 .. 2022-05-19 (v2.6)", full_recompute_counts="chunk_block",
    citations=_MEGATRON_LM_2021_03.citations + ("megatron_lm.block",),
)
_MEGATRON_LM_2022_05 = replace(
    _MEGATRON_LM_2021_08, versions="main 2022-05-20 .. 2022-06-07", recompute=("none", "selective", "full"),
    sequence_parallel=True,
    assumptions={**_MEGATRON_LM_2021_08.assumptions, "selective_recompute_policy": "attention"},
    citations=_MEGATRON_LM_2021_08.citations + ("megatron_lm.sp_selective",),
)
_MEGATRON_LM_2022_06 = replace(
    _MEGATRON_LM_2022_05, versions="main 2022-06-08 .. 2023-01-10", zero_stages=(0, 1), zero_stages_with_pp=(0, 1),
    citations=_MEGATRON_LM_2022_05.citations + ("megatron_lm.dist_opt",),
)

_LLM_FOUNDRY = Profile(
    name="llm-foundry", versions="< 0.13.0 (main 061f2c7, 2023-10-17, on Composer 0.16)",
    schedules=(Schedule.ONE_F_ONE_B,),
    zero_stages=(0, 2, 3), zero_stages_with_pp=(0, 2, 3),
    recompute=("none", "full"), full_recompute_counts="all",
    context_parallel=False, expert_tensor_parallel="one", sequence_parallel=False, stage_split="even",
    assumptions={"grad_reduce_bytes": 2.0},
    citations=("foundry.fsdp_only", "foundry.sharding", "foundry.ac", "foundry.pure"),
    not_expressible=("activation_cpu_offload", "mixed_precision DEFAULT / FULL (fp32 reductions: set "
                     "assumptions.grad_reduce_bytes 4)"),
    tensor_parallel=False, pipeline_parallel=False,
)

# the version each framework's export writes for (frameworks/export_*.py read it from here): ``runs_on`` judges a
# framework by the profile of this version (frameworks/loader.py), so a plan it lists is one its export writes
# unchanged. torchtitan: v0.2.2 is the last release with TOML job configs; megatron-core: core_v0.15.3, the flags of
# frameworks/export_megatron.py; Megatron-Bridge: tag v0.6.0 (export_bridge.py); DeepSpeed: 0.19.6 (export_deepspeed.py)
EXPORT_VERSIONS: dict[str, str] = {"megatron-core": "core_v0.15.3", "megatron-bridge": "v0.6.0",
                                   "torchtitan": "v0.2.2", "deepspeed": "0.19.6"}

# (name, lowest version it applies to, or None = any) newest first; version None picks the newest
VERSIONED: dict[str, tuple[tuple[Optional[tuple[int, ...]], Profile], ...]] = {
    "megatron-core": (((0, 20, 0), _MEGATRON_CORE_MAIN), ((0, 15, 0), _MEGATRON_CORE_015),
                      ((0, 13, 0), _MEGATRON_CORE), ((0, 9, 0), _MEGATRON_CORE_PRE_LAYOUT)),
    "megatron-lm": (((2022, 6, 8), _MEGATRON_LM_2022_06), ((2022, 5, 20), _MEGATRON_LM_2022_05),
                    ((2021, 8, 19), _MEGATRON_LM_2021_08), ((2021, 3, 23), _MEGATRON_LM_2021_03),
                    ((2021, 2, 17), _MEGATRON_LM_2021_02),
                    ((2021, 1, 11), _MEGATRON_LM_2021_01)),
    "llm-foundry": (((0, 0, 0), _LLM_FOUNDRY),),
    "megatron-bridge": ((None, _MEGATRON_BRIDGE),),
    "torchtitan": (((0, 2, 3), _TORCHTITAN), ((0, 0, 0), _TORCHTITAN_022)),
    "deepspeed": ((None, _DEEPSPEED),),
}
