"""Framework facts and where each is written: the source snapshots read and the citation table (data).

:data:`CITATIONS` maps a fact key to the file at a commit (and lines) that states it; the profiles in
:mod:`~parplan.frameworks.profile_data` cite these keys and :mod:`~parplan.frameworks.profiles` reads both. The
snapshots are listed in the docstring of :mod:`~parplan.frameworks.profiles`.
"""

from __future__ import annotations

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
    "bridge.a2a_overlap": "NVIDIA-NeMo/Megatron-Bridge@51885cf132b2814188b6855c25a8588254274c2a (v0.6.0) "
                          "src/megatron/bridge/training/comm_overlap.py:372-397 and 465-490: CommOverlapConfig's "
                          "overlap_moe_expert_parallel_comm, validated as Megatron-Core's (EP > 1, alltoall or flex "
                          "dispatcher); its MoE performance recipes turn it on",
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
    "titan.mtp": f"{TITAN} torchtitan/models/deepseek_v3/__init__.py:291-299 _build_mtp_layers (model_registry's "
                 "num_mtp_layers) and models/deepseek_v3/MTP.md: DeepSeek-V3's multi-token prediction modules, added "
                 "in f59c215e (2026-08-11, #3392)",
    "titan.no_mtp_022": f"{TITAN_022} torchtitan/models/: no model has a multi-token prediction module (deepseek_v3 "
                        "included; no file of the v0.2.2 wheel names MTP): a spec with model.num_mtp_layers runs on "
                        "no v0.2.2 model",
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
    "titan.ddp_022": f"{TITAN_022} torchtitan/models/llama3/infra/parallelize.py:148-151: DDP (data_parallel_replicate "
                      "alone, no FSDP) raises 'DDP has not supported > 1D parallelism' unless it spans every rank (no TP, "
                      "PP or CP)",
    "titan.ddp_2412": f"{TITAN_2412} torchtitan/parallelisms/parallelize_llama.py:79-110: FSDP over dp_shard x cp "
                      "whenever either is > 1; DDP (data_parallel_replicate alone) raises 'DDP has not supported > 1D "
                      "parallelism' with TP or PP",
    "titan.split_2412": f"{TITAN_2412} torchtitan/parallelisms/pipelining_utils.py:18-57 generate_split_points (no "
                        "pipeline_parallel_split_points given): 2 stages per rank for multi-stage schedules, 1 "
                        "otherwise; layers // stages each, the remainder one each to the middle stages from stage 1, "
                        "the last stage what is left",
    "titan.ac_2412": f"{TITAN_2412} torchtitan/parallelisms/parallelize_llama.py:230-262 and config_manager.py:514-524: "
                     "activation_checkpoint.mode none | full | selective, selective_ac_option 'op' or N (every N-th "
                     "block)",
    "titan.options_2412": f"{TITAN_2412} torchtitan/config_manager.py:288 enable_async_tensor_parallel, 302 "
                          "pipeline_parallel_split_points (any layer boundaries, per stage and virtual stage), 318-324 "
                          "pipeline_parallel_schedule (torch.distributed.pipelining's get_schedule_class: 1F1B, "
                          "Interleaved1F1B, GPipe, LoopedBFS, InterleavedZeroBubble), 359 context_parallel_degree, 389 "
                          "mixed_precision_reduce (float32)",
    "titan.repeat_kv_2412": f"{TITAN_2412} torchtitan/models/llama/model.py:201-202: keys = repeat_kv(xk, n_rep), values = repeat_kv(xv, n_rep) before F.scaled_dot_product_attention (209), so torch's context parallel (torch/distributed/tensor/experimental/_attention.py, which wraps the SDPA op) all-gathers K,V at the query head count; removed by pytorch/torchtitan@ff0829c1 (2026-01-27, 'GQA without kv repeats', enable_gqa), after v0.2.1",
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
    "deepspeed.moe_capacity": f"{DEEPSPEED} deepspeed/moe/sharded_moe.py MOELayer.forward: einsum('sec,sm->ecm', "
                              "dispatch_mask, input) dispatches into capacity-shaped [E, C, M] buffers (top1gating / "
                              "top2gating: C = capacity_factor x tokens / experts), so every expert computes and "
                              "exchanges C rows, padded where fewer are routed (assumptions.moe_pad_to_capacity)",
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
