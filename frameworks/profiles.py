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
* torchtitan ``b5bcd76c66d0acb1a08b176d9639425bc55e0b2a`` (2026-08-21), tag ``v0.2.2`` (2026-02-20) and main
  ``9dec370ad26b5f8e9a7333a0e36165018262644b`` (2024-12-26; versions before v0.1.0 are main-branch dates)
* DeepSpeed ``edaa7221267243c7be7fb49c5d5f5c4fb97b4641`` (2026-08-22)
* LLM Foundry ``061f2c7ce64e655100286584a7629e2a09f827ba`` (2023-10-17; after v0.3.0) and the Composer release it
  pins (``mosaicml>=0.16.3,<0.17``: v0.16.4 ``1c9d8d17989424d804bc3baef03ba11d5005fd88``)
* Megatron-LM before Megatron-Core (``megatron-lm``, 2021-2022): the main-branch commits that added each option
  (``git log --first-parent main -S<flag>``), see :data:`MEGATRON_LM_COMMITS`
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
TITAN_2412 = "pytorch/torchtitan@9dec370ad26b5f8e9a7333a0e36165018262644b"
DEEPSPEED = "deepspeedai/DeepSpeed@edaa7221267243c7be7fb49c5d5f5c4fb97b4641"

FRAMEWORKS: tuple[str, ...] = ("megatron-core", "megatron-bridge", "torchtitan", "deepspeed")
# releases of the past, planned for when a spec names them (``runs_on`` lists them only for such a spec)
HISTORICAL: tuple[str, ...] = ("megatron-lm", "llm-foundry")

# Megatron-LM main-branch commits (first-parent merges) that changed what it could run, before Megatron-Core;
# the ``megatron-lm`` profile's versions are dates of that branch (YYYY-MM-DD) or its tags v2.0 / v2.5 / v2.6
MEGATRON_LM_COMMITS: dict[str, tuple[str, str]] = {  # fact -> (commit, commit date)
    "readme_2021_01": ("152aab304d4eabe4f992def6296156642e11c28d", "2021-01-11"),
    "interleaved": ("76e3fca0ee43a11d57ab7dc9a6de93e59d9a1e72", "2021-02-17"),
    "interleaved_pp3": ("2f3a2d68e3e48c1d7fe2eb4a5c7ffe5074b7ca94", "2021-03-23"),
    "sc21_scripts": ("de7dc40f883ceed06344051c3c7ebd57da59cc53", "2021-08-10"),
    "partial_recompute": ("23266c578bb25c3d854d9488cab86f50f2b909c2", "2021-08-19"),
    "sequence_parallel": ("9aad9203aaac510984037098d5072776da1f4e5f", "2022-05-20"),
    "distributed_optimizer": ("d07d29df14ade3a0858c9f33b5da61d80ffd31cd", "2022-06-08"),
    "flash_attention": ("285068c8108e0e8e6538f54fe27c3ee86c5217a2", "2023-01-11"),
}
MEGATRON_LM_TAGS: dict[str, str] = {"v2.0": "2021-01-12", "v2.5": "2021-08-10", "v2.6": "2021-08-27"}  # git tag dates
_MLM = {k: f"NVIDIA/Megatron-LM@{c}" for k, (c, _) in MEGATRON_LM_COMMITS.items()}
FOUNDRY = "mosaicml/llm-foundry@061f2c7ce64e655100286584a7629e2a09f827ba"
COMPOSER = "mosaicml/composer@1c9d8d17989424d804bc3baef03ba11d5005fd88"  # v0.16.4

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
    "megatron.cp_types": f"{MEGATRON} megatron/training/arguments.py:3221-3226 --cp-comm-type (one for all layers "
                         "or one per layer) and :580-585 (a2a+p2p needs --hierarchical-context-parallel-sizes, "
                         "product = cp); NVIDIA/TransformerEngine@d0067d0da6cb01811b8072a7d304f0e00344ce2b "
                         "transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py: "
                         "AttnFuncWithCPAndKVP2P (p2p, a2a+p2p with cp_group_a2a), AttnFuncWithCPAndKVAllGather, "
                         "AttnFuncWithCPAndQKVOA2A (heads per TP rank divisible by cp); a2a+p2p takes cp_group = "
                         "[a2a_cp_group, p2p_cp_group] (context_parallel.py:5020-5023), built by Megatron-LM "
                         "megatron/core/parallel_state.py:387-398 create_hierarchical_groups with the first level of "
                         "--hierarchical-context-parallel-sizes on adjacent CP ranks",
    "titan.cp_rotate": f"{TITAN_022} torchtitan/config/job_config.py:446 context_parallel_rotate_method "
                       "'allgather' (default: all-gather the KV shards) | 'alltoall' (shuffle them around the ring); "
                       f"removed from the config in {TITAN[:TITAN.index('@')]}@8e5554449 (2026-06-14), which leaves "
                       "PyTorch's default (_ContextParallelOptions.rotate_method = ALL_GATHER in "
                       "torch/distributed/tensor/experimental/_context_parallel/_attention.py); "
                       "no all-to-all over heads",
    "deepspeed.ulysses": f"{DEEPSPEED} deepspeed/runtime/sequence_parallel/ulysses_sp.py:145-150 "
                         "UlyssesSPAttentionHF: attention heads divisible by the SP size, KV heads divisible by it "
                         "or it by them; deepspeed/runtime/config.py:721-722 sequence_parallel_size",
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
    "titan.sp_with_tp": f"{TITAN_022} torchtitan/models/llama3/infra/parallelize.py:161-233 apply_tp: the norms are "
                        "SequenceParallel() in every TP plan (no TP without SP; so too at 9dec370 "
                        "torchtitan/parallelisms/parallelize_llama.py:117-185); decoupled in aa68af18 (2026-03-29)",
    "titan.fsdp_2412": f"{TITAN_2412} torchtitan/parallelisms/parallelize_llama.py:320-339 apply_fsdp: with PP no "
                       "reshard after forward (ZeRO-2-like), without PP reshard (ZeRO-3); no option until 5940ddeb "
                       "(2025-02-06, 'Makes FSDP reshard_after_forward configurable')",
    "titan.ddp_2412": f"{TITAN_2412} torchtitan/parallelisms/parallelize_llama.py:79-110: FSDP over dp_shard x cp "
                      "whenever either is > 1; DDP (data_parallel_replicate alone) raises 'DDP has not supported > 1D "
                      "parallelism' with TP or PP",
    "titan.ac_2412": f"{TITAN_2412} torchtitan/parallelisms/parallelize_llama.py:230-262 and config_manager.py:514-524: "
                     "activation_checkpoint.mode none | full | selective, selective_ac_option 'op' or N (every N-th "
                     "block)",
    "titan.options_2412": f"{TITAN_2412} torchtitan/config_manager.py:288 enable_async_tensor_parallel, 302 "
                          "pipeline_parallel_split_points (any layer boundaries, per stage and virtual stage), 318-324 "
                          "pipeline_parallel_schedule (torch.distributed.pipelining's get_schedule_class: 1F1B, "
                          "Interleaved1F1B, GPipe, LoopedBFS, InterleavedZeroBubble), 359 context_parallel_degree, 389 "
                          "mixed_precision_reduce (float32)",
    "titan.runtime": "benchmarks/runs.py _techniques (torch.distributed.pipelining buffers, DTensor SP saved "
                     "inputs, loss_parallel 16 B/logit with TP, 12 B without): facts established and cited there",
    "megatron_lm.1f1b": f"{_MLM['readme_2021_01']} megatron/training.py:497-521 forward_backward_no_pipelining and "
                        "forward_backward_pipelining ('Run 1F1B schedule'); no interleaving, no ZeRO, no sequence "
                        "parallelism, no selective recompute in the tree",
    "megatron_lm.even": f"{_MLM['sc21_scripts']} megatron/model/transformer.py:551-553: num_layers must be divisible "
                        "by pipeline_model_parallel_size (every stage the same count; 10c6ad06 (2022-02-08) adds only "
                        "--standalone-embedding-stage, a stage without transformer layers)",
    "megatron_lm.full_all": f"{_MLM['sc21_scripts']} megatron/model/transformer.py:597-621 _checkpointed_forward: "
                            "--checkpoint-activations checkpoints every layer, in chunks of --checkpoint-num-layers",
    "megatron_lm.interleaved": f"{_MLM['interleaved']} (merge 2021-02-17, 'Interleaved pipelined execution') "
                               "megatron/schedules.py:98 forward_backward_pipelining_with_interleaving, "
                               "--num-layers-per-virtual-pipeline-stage",
    "megatron_lm.interleaved_pp3": f"{_MLM['interleaved_pp3']} (merge 2021-03-23, 'extra_assertion') "
                                   "megatron/arguments.py: 'pipeline-model-parallel size should be greater than 2 with "
                                   "interleaved schedule' (still at de7dc40f arguments.py:118-121; pp = 2 only with "
                                   "--overlap-p2p-comm from 152c5620, 2024-05-31)",
    "megatron_lm.block": f"{_MLM['partial_recompute']} (merge 2021-08-19) megatron/model/transformer.py:613-636 "
                         "--activations-checkpoint-method uniform | block: block checkpoints the first "
                         "--activations-checkpoint-num-layers layers of each model chunk",
    "megatron_lm.sp_selective": f"{_MLM['sequence_parallel']} (merge 2022-05-20, Korthikanti et al. 2022, arXiv "
                                "2205.05198) megatron/arguments.py --sequence-parallel, --recompute-granularity "
                                "full | selective, --recompute-method uniform | block",
    "megatron_lm.dist_opt": f"{_MLM['distributed_optimizer']} (merge 2022-06-08) megatron/arguments.py "
                            "--use-distributed-optimizer (ZeRO-1)",
    "megatron_lm.no_cp_no_flash": f"{_MLM['flash_attention']} (merge 2023-01-11) adds --use-flash-attn; ring "
                                  "context parallelism (--context-parallel-size) merges later (4a6255a7, 2023-10-30): "
                                  "before 2023-01-11 neither exists, and the unfused softmax stores the s x s scores",
    "megatron_lm.ddp": f"{_MLM['sc21_scripts']} megatron/arguments.py:578 --DDP-impl local (default) | torch: the "
                       "local DDP all-reduces gradients after the backward pass (training.py train_step)",
    "foundry.fsdp_only": f"{FOUNDRY} llmfoundry/ and scripts/train/: no tensor, pipeline or context parallelism "
                         "(no tp_config, device mesh or pipeline code; tensor parallelism arrives in ee456002, "
                         "'Tensor Parallelism (#1521)', 2024-09-27, first in v0.13.0); scripts/train/benchmarking/"
                         "submit_benchmarks.py:64-80 sets only fsdp_config (mixed_precision, activation_checkpointing, "
                         "sharding_strategy)",
    "foundry.sharding": f"{COMPOSER} composer/trainer/mosaic_fsdp_utils.py:36-40 SHARDING_MAP NO_SHARD | SHARD_GRAD_OP | "
                        "FULL_SHARD (dist_strategy.py:316-317 reads fsdp_config.sharding_strategy through it): "
                        "ZeRO 0, 2, 3",
    "foundry.ac": f"{FOUNDRY} llmfoundry/models/mpt/modeling_mpt.py:481-482 activation_checkpointing_fn: every "
                  "MPTBlock is checkpointed when fsdp_config.activation_checkpointing is true (no selective, no count)",
    "foundry.pure": f"{FOUNDRY} scripts/train/benchmarking/submit_benchmarks.py:64-66 fsdp_config_mixed_precision "
                    "default PURE (bf16 parameters, gradient reduction and buffers; benchmarks/runs.py)",
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
    "megatron.partial_dist_opt": f"{MEGATRON} megatron/training/arguments.py:3216 --num-distributed-optimizer-"
                                 "instances R; megatron/core/parallel_state.py:922-929 (R divides DP·CP; shard "
                                 "groups of DP·CP/R consecutive ranks, 984-992) and 1447-1452 (R divides the expert "
                                 "DP group); param_and_grad_buffer.py:815-830: reduce-scatter in the shard group, "
                                 "then all-reduce across the R instances",
    "megatron.fsdp_hsdp": f"{MEGATRON} megatron/core/distributed/fsdp/mcore_fsdp_adapter.py:346: Megatron-FSDP "
                          "(ZeRO-2/3) runs HSDP when num_distributed_optimizer_instances > 1 (outer DP group "
                          "no_shard: replicas; arguments.py:3193 --outer-dp-sharding-strategy)",
    "megatron.precision_aware": f"{MEGATRON} megatron/training/arguments.py:3666-3685 --use-precision-aware-"
                                "optimizer with --main-params-dtype fp32|fp16, --exp-avg-dtype and --exp-avg-sq-dtype "
                                "fp32|fp16|bf16|fp8; megatron/core/optimizer/optimizer_config.py:192 "
                                "store_param_remainders (fp32 master kept as 16-bit remainders, default True)",
    "megatron.cpu_offload": f"{MEGATRON} megatron/training/arguments.py:2918-2927 --optimizer-cpu-offload, "
                            "--optimizer-offload-fraction, --overlap-cpu-optimizer-d2h-h2d; 1884-1888: needs "
                            "--use-precision-aware-optimizer; megatron/core/optimizer/cpu_offloading/"
                            "hybrid_optimizer.py (HybridDeviceOptimizer)",
    "megatron.activation_offload": f"{MEGATRON} megatron/core/model_parallel_config.py:458-473 cpu_offloading, "
                                   "cpu_offloading_num_layers, cpu_offloading_activations (default True), "
                                   "cpu_offloading_weights (default False); megatron/core/transformer/"
                                   "transformer_config.py:1884-1898: num_layers in [0, num_layers), no pipeline "
                                   "parallelism, no recompute_granularity (the same checks at core_v0.9.0, "
                                   "transformer_config.py:372-388); megatron/training/arguments.py:1950-1951 "
                                   "--cpu-offloading-num-layers > 0 turns cpu_offloading on (a CLI flag since "
                                   "core_v0.16.0: megatron/training/argument_utils.py:106 derives it from the "
                                   "TransformerConfig field); layers 0..N-1 offloaded by Transformer Engine "
                                   "(NVIDIA/TransformerEngine@d0067d0d transformer_engine/pytorch/cpu_offload.py:"
                                   "602-626)",
    "bridge.activation_offload": f"{BRIDGE} src/megatron/bridge/perf_recipes/llama/gb200/llama3.py:282-284 "
                                 "cfg.model.cpu_offloading = True, cpu_offloading_weights = False, "
                                 "cpu_offloading_num_layers = 40 (the TransformerConfig fields, under model.)",
    "titan.no_activation_offload": f"{TITAN} torchtitan/config/configs.py:70-73 training.enable_cpu_offload is FSDP2's "
                                   "parameter/gradient/optimizer offload (torchtitan/distributed/fsdp.py:197); "
                                   "activation offload exists only in torchtitan/experiments/graph_trainer "
                                   "(README.md:302: 'Activation Offloading' under construction), not the trainer",
    "deepspeed.no_activation_offload": f"{DEEPSPEED} deepspeed/runtime/activation_checkpointing/config.py:42-43 "
                                       "cpu_checkpointing offloads the *checkpointed* layer inputs (checkpointing.py:"
                                       "1141), so it needs activation checkpointing: not an offload of the saved "
                                       "activations of layers that are not recomputed",
    "titan.hsdp": f"{TITAN} torchtitan/config/configs.py:120-145 and torchtitan/distributed/parallel_dims.py:167-184: "
                  "dp_replicate x dp_shard x cp x tp x pp = world; FSDP2 shards over dp_shard x cp, replicates over "
                  "dp_replicate (the replica degree divides dp, not cp)",
    "titan.no_optimizer_offload": f"{TITAN} torchtitan/config/configs.py:70 training.enable_cpu_offload offloads "
                                  "parameters, gradients and optimizer states together (FSDP2 CPUOffloadPolicy, "
                                  "torchtitan/distributed/fsdp.py:231-232): not an optimizer-only offload; no "
                                  "precision-aware optimizer option",
    "deepspeed.mics": f"{DEEPSPEED} deepspeed/runtime/zero/config.py:341 mics_shard_size; deepspeed/runtime/engine.py:"
                      "2533-2535 MiCS_Optimizer (a ZeRO-3 partitioner: model states sharded in groups of "
                      "mics_shard_size ranks, replicated across them; deepspeed/runtime/zero/mics.py:77-83)",
    "deepspeed.offload": f"{DEEPSPEED} deepspeed/runtime/zero/offload_config.py:55-61 offload_optimizer "
                         "{device: cpu} valid with ZeRO-1/2/3, the optimizer step on the CPU (DeepSpeedCPUAdam); "
                         "99: ratio (a share below 1) only with ZeRO-3",
    "deepspeed.bf16_states": f"{DEEPSPEED} deepspeed/runtime/config.py:1045-1049 bf16_optimizer_states requires "
                             "bf16_master_weights_and_grads (master weights and gradients in bf16 too): not "
                             "parplan's optimizer_states, which keep the gradients of assumptions.grad_bytes",
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
    cp_comm_types: tuple[str, ...] = ("p2p",)  # CP comm types it runs with cp > 1 (costmodel/context_parallel.py)
    tensor_parallel: bool = True  # False: tp must be 1
    pipeline_parallel: bool = True  # False: pp must be 1
    sequence_parallel_with_tp: bool = False  # True: every TP plan is sequence-parallel (no TP without SP)
    ddp_one_dimensional: bool = False  # True: ZeRO-0 over more than one DP/CP rank only without TP and PP
    interleaved_min_pp: int = 2  # the interleaved schedule needs at least this many pipeline stages
    # memory-side dimensions (costmodel/choice.py Choice.zero_replicas, optimizer_states, offload fraction)
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
               "megatron.cp", "megatron.cp_types", "megatron.partial_dist_opt", "megatron.fsdp_hsdp",
               "megatron.precision_aware", "megatron.cpu_offload", "megatron.activation_offload"),
    not_expressible=("--recompute-modules (selective recompute of named modules: parplan's 'selective' is the "
                     "attention core)", "a different --cp-comm-type per layer (parplan: one for all layers); "
                     "a2a+p2p with an a2a level other than the CP members of one NVLink domain",
                     "--outer-dp-sharding-strategy optim (optimizer states sharded across the HSDP replicas too)",
                     "--main-grads-dtype bf16 (set assumptions.grad_bytes / grad_reduce_bytes)"),
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
    assumptions={**_MEGATRON_CORE.assumptions, "grad_bytes": 2.0, "grad_reduce_bytes": 2.0},
    citations=_MEGATRON_CORE.citations + ("megatron.grad_buffer", "bridge.perf_grads", "bridge.activation_offload"),
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
    sequence_parallel_with_tp=True,
    citations=_TORCHTITAN.citations + ("titan.layer_sac", "titan.etp_022", "titan.sp_with_tp",
                                   "titan.dualpipev_ep_ac"),
    dualpipev_ep_no_recompute=True,
)
_TORCHTITAN_2412 = replace(
    _TORCHTITAN_022, versions="main 2024-12-26 (9dec370) .. 2025-02-05", zero_stages=(0, 3), zero_stages_with_pp=(0, 2),
    schedules=("1f1b", "interleaved"),  # torch.distributed.pipelining had no ScheduleDualPipeV then
    expert_tensor_parallel="one", ddp_one_dimensional=True,
    citations=("titan.multi_stage", "titan.v_schedules", "titan.runtime", "titan.sp_with_tp", "titan.fsdp_2412",
               "titan.ddp_2412", "titan.ac_2412", "titan.options_2412"),
)
_DEEPSPEED = Profile(
    name="deepspeed", versions="DeepSpeed pipeline engine and ZeRO (2026-08)",
    schedules=("1f1b",),
    zero_stages=(0, 1, 2, 3), zero_stages_with_pp=(0, 1),
    recompute=("none", "full"), full_recompute_counts="all",
    context_parallel=True, expert_tensor_parallel="one_or_tp", sequence_parallel=False, stage_split="even",
    assumptions={"grad_reduce_bytes": 2.0, "pipeline_runtime": "megatron",
                 "sequence_parallel_saves_gathered_inputs": False},
    citations=("deepspeed.schedule", "deepspeed.zero_pp", "deepspeed.partition", "deepspeed.ac",
               "deepspeed.comm_dtype", "deepspeed.moe", "deepspeed.moe_a2a", "deepspeed.tp", "deepspeed.ulysses", "deepspeed.mics",
               "deepspeed.offload", "deepspeed.bf16_states", "deepspeed.no_activation_offload"),
    not_expressible=("Ulysses with fewer KV heads than the SP size (DeepSpeed replicates them; parplan needs "
                     "KV heads divisible by cp)", "ZeRO-Infinity offload",
                     "partition_method 'parameters' (balances parameter counts, not layers)",
                     "ZeRO++ hpZ (zero_hpz_partition_size: a secondary weight shard per node; optimizer states "
                     "stay sharded over the whole group)", "bf16_optimizer_states (bf16 master weights and grads)"),
    cp_comm_types=("a2a",),
    hsdp_zero_stages=(3,), optimizer_offload="ratio_zero3",
)

# Megatron-LM 2021-2022 (before Megatron-Core): each variant adds what one main-branch merge added
_MEGATRON_LM_2021_01 = Profile(
    name="megatron-lm", versions="main 2021-01-11 .. 2021-02-16 (v2.0)",
    schedules=("1f1b",),
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
    _MEGATRON_LM_2021_01, versions="main 2021-02-17 .. 2021-03-22", schedules=("1f1b", "interleaved"),
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
    schedules=("1f1b",),
    zero_stages=(0, 2, 3), zero_stages_with_pp=(0, 2, 3),
    recompute=("none", "full"), full_recompute_counts="all",
    context_parallel=False, expert_tensor_parallel="one", sequence_parallel=False, stage_split="even",
    assumptions={"grad_reduce_bytes": 2.0},
    citations=("foundry.fsdp_only", "foundry.sharding", "foundry.ac", "foundry.pure"),
    not_expressible=("activation_cpu_offload", "mixed_precision DEFAULT / FULL (fp32 reductions: set "
                     "assumptions.grad_reduce_bytes 4)"),
    tensor_parallel=False, pipeline_parallel=False,
)

# (name, lowest version it applies to, or None = any) newest first; version None picks the newest
_VERSIONED: dict[str, tuple[tuple[Optional[tuple[int, ...]], Profile], ...]] = {
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


# versions from this key on are not the profile's (Megatron-LM: flash attention, then CP; use megatron-core)
_UNTIL: dict[str, tuple[int, ...]] = {"megatron-lm": (2023, 1, 11), "llm-foundry": (0, 13, 0)}


def _megatron_lm_date(version: str) -> tuple[int, ...]:
    """'2021-08-10' -> (2021, 8, 10); a tag 'v2.6' -> its date (:data:`MEGATRON_LM_TAGS`)."""
    v = version.strip()
    v = MEGATRON_LM_TAGS.get(v, MEGATRON_LM_TAGS.get(f"v{v}", v))
    m = re.fullmatch(r"(\d{4})-(\d{2})-(\d{2})", v)
    if not m:
        raise UnknownFramework(f"framework.version {version!r} for megatron-lm: expected a date of Megatron-LM's main "
                               f"branch (YYYY-MM-DD) or a tag ({', '.join(MEGATRON_LM_TAGS)})")
    return tuple(int(g) for g in m.groups())


def _torchtitan_at_date(version: str) -> Profile:
    """torchtitan's main branch before its first release (v0.1.0, 2025-06-17) by date: read at 9dec370
    (2024-12-26) up to the merge that made FSDP resharding configurable (5940ddeb, 2025-02-06)."""
    key = tuple(int(x) for x in version.strip().split("-"))
    if key < (2024, 12, 26):
        raise UnknownFramework(f"framework torchtitan version {version} predates the oldest profile "
                               "(main 2024-12-26); its facts are not cited here")
    if key >= (2025, 2, 6):
        raise UnknownFramework(f"framework torchtitan version {version}: main from 2025-02-06 on is not profiled by "
                               "date; name a release (0.1.0 or later)")
    return _TORCHTITAN_2412


def profile(name: str, version: Optional[str] = None) -> Profile:
    """The profile of ``name`` at ``version`` (None: the newest snapshot read)."""
    if name not in _VERSIONED:
        raise UnknownFramework(f"unknown framework {name!r}; known: {', '.join(FRAMEWORKS + HISTORICAL)}")
    variants = _VERSIONED[name]
    if version is None:
        return variants[0][1]
    if name == "torchtitan" and re.fullmatch(r"\s*20\d\d-\d\d-\d\d\s*", version):
        return _torchtitan_at_date(version)
    key = _megatron_lm_date(version) if name == "megatron-lm" else _version_key(version)
    if name == "megatron-lm" and key >= _UNTIL[name]:
        raise UnknownFramework(f"framework megatron-lm version {version}: from {'-'.join(f'{x:02d}' for x in _UNTIL[name])} "
                               "(flash attention, then context parallelism) the megatron-lm profile no longer applies; "
                               "name megatron-core with its core version")
    if name in _UNTIL and key >= _UNTIL[name]:
        raise UnknownFramework(f"framework {name} version {version}: from {'.'.join(map(str, _UNTIL[name]))} "
                               f"(tensor parallelism) the {name} profile no longer applies; its facts are not cited here")
    for since, prof in variants:
        if since is None or key >= since:
            return prof
    oldest = variants[-1][0]
    shown = "-".join(f"{x:02d}" for x in oldest) if name == "megatron-lm" else ".".join(map(str, oldest))
    raise UnknownFramework(f"framework {name} version {version} predates the oldest profile "
                           f"({shown}); its facts are not cited here")


def spec_profile(spec: "Spec") -> Optional[Profile]:
    """The profile a spec names, or None (framework-neutral: ``framework: any``)."""
    fw = getattr(spec, "framework", None)
    if fw is None or fw == "any":
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


def choice_rule_violations(prof: Profile, c: Any) -> list[str]:
    """Rules on degrees, schedule, ZeRO, recompute granularity and SP (a Choice or a Plan)."""
    out: list[str] = []
    who = prof.name
    if c.tp > 1 and not prof.tensor_parallel:
        out.append(f"{who} has no tensor parallelism (tp must be 1)")
    if c.pp > 1 and not prof.pipeline_parallel:
        out.append(f"{who} has no pipeline parallelism (pp must be 1)")
    if c.pp > 1 and c.schedule not in prof.schedules:
        out.append(f"{who} cannot run schedule {c.schedule} (it runs {', '.join(prof.schedules)})")
    if c.schedule == "interleaved" and 1 < c.pp < prof.interleaved_min_pp:
        out.append(f"{who} {prof.versions} runs the interleaved schedule only with pp > {prof.interleaved_min_pp - 1}")
    if c.pp == 1 and c.schedule not in ("1f1b", *prof.schedules):
        out.append(f"{who} cannot run schedule {c.schedule}")
    allowed = prof.zero_stages_with_pp if c.pp > 1 else prof.zero_stages
    if c.zero_stage not in allowed:
        where = "with pipeline parallelism" if c.pp > 1 else "without pipeline parallelism"
        out.append(f"{who} cannot run ZeRO-{c.zero_stage} {where} (it runs ZeRO {', '.join(map(str, allowed))})")
    if c.recompute not in prof.recompute:
        out.append(f"{who} has no recompute granularity {c.recompute!r}")
    if c.cp > 1 and not prof.context_parallel:
        out.append(f"{who} has no context parallelism (cp must be 1)")
    elif c.cp > 1 and getattr(c, "cp_comm_type", "p2p") not in prof.cp_comm_types:
        out.append(f"{who} has no CP comm type {c.cp_comm_type} (it runs {', '.join(prof.cp_comm_types)})")
    if c.etp != 1:
        if prof.expert_tensor_parallel == "one":
            out.append(f"{who} has no expert tensor parallelism (etp must be 1)")
        elif prof.expert_tensor_parallel == "one_or_tp" and c.etp != c.tp:
            out.append(f"{who} supports etp 1 or etp = tp only (got etp {c.etp}, tp {c.tp})")
    if c.sequence_parallel and c.tp > 1 and not prof.sequence_parallel:
        out.append(f"{who} has no Megatron-style sequence parallelism")
    if prof.sequence_parallel_with_tp and c.tp > 1 and not c.sequence_parallel:
        out.append(f"{who} {prof.versions} runs tensor parallelism only with sequence parallelism")
    if prof.ddp_one_dimensional and c.zero_stage == 0 and c.dp * c.cp > 1 and (c.tp > 1 or c.pp > 1 or c.cp > 1):
        out.append(f"{who} {prof.versions} runs DDP (ZeRO-0) only without TP, PP and CP (FSDP otherwise)")
    if getattr(c, "moe_fp8_dispatch", False) and not prof.fp8_dispatch:
        out.append(f"{who} {prof.versions} has no FP8 expert dispatch")
    if getattr(c, "moe_a2a_overlap", False) and not prof.moe_a2a_overlap:
        out.append(f"{who} {prof.versions} has no EP all-to-all overlap (--overlap-moe-expert-parallel-comm)")
    if getattr(c, "activation_offload_layers", 0) and not prof.activation_offload:
        out.append(f"{who} {prof.versions} has no activation CPU offload (activation_offload_layers must be 0)")
    if (prof.dualpipev_ep_no_recompute and c.schedule == "dualpipev" and c.pp > 1 and c.ep > 1
            and c.recompute != "none"):
        out.append(f"{who} {prof.versions} runs DualPipeV with expert parallelism only without activation "
                   "checkpointing (recompute none)")
    return out + memory_rule_violations(prof, c)


def memory_rule_violations(prof: Profile, c: Any) -> list[str]:
    """Rules on HSDP, the optimizer states' dtypes and optimizer offload (a Choice or a Plan)."""
    out: list[str] = []
    who = prof.name
    replicas = getattr(c, "zero_replicas", 1)
    states = getattr(c, "optimizer_states", None)
    fraction = getattr(c, "optimizer_offload_fraction", 0.0)
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
    """The frameworks (newest profiles; the spec's own at its version) that can run ``plan``; a historical
    framework (:data:`HISTORICAL`) only when the spec names it."""
    mine = spec_profile(spec)
    out = []
    names = FRAMEWORKS if mine is None or mine.name in FRAMEWORKS else FRAMEWORKS + (mine.name,)
    for name in names:
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
