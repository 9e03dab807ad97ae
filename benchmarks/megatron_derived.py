"""What Megatron derives from our Megatron-LM export, through its own code (issue 40 item 3).

Two parsers, one comparison (:func:`config_differences`):

* **megatron-core** (the in-repo CI check, the installed megatron-core 0.16.1): ``TransformerConfig`` (or
  ``MLATransformerConfig``) built from the export's settings and family flags (:func:`megatron_core_config`);
* **Megatron-LM** at the export's target, core_v0.15.3 (``framework_parsers.py --megatron-lm DIR``: its
  ``megatron/`` on ``sys.path`` shadows the installed package, megatron.core included): ``pretrain_gpt.py``'s
  ``parse_args`` + ``validate_args`` on the exported argv, then ``core_transformer_config_from_args`` (what its
  ``model_provider`` calls, megatron/training/arguments.py:1231), i.e. the file itself through Megatron's code.

Compared: TP, PP, CP (and its comm type), EP, ETP, VPP, SP, the layers each (rank, virtual stage) builds
(``get_num_layers_to_build``), recompute (granularity; for full, the layers each stage recomputes under Megatron-Core's
``uniform`` / ``block`` rule; for selective, the modules), MTP depth and MLA; with Megatron-LM also DP, micro-batch,
micro-batches per step, sequence length and ZeRO (distributed optimizer, Megatron-FSDP and its sharding).
"""

from __future__ import annotations

import sys

# Megatron-LM flags on by default whose kernels TransformerConfig.__post_init__ asks Transformer Engine for (not
# installed here: "apply_rope_fusion is not available. Please install TE >= 1.4."): turned off before the config is
# built, as benchmarks/bridge_perf.py ENVIRONMENT_OVERRIDES does for Bridge; kernel choices, no parallel field
KERNELS_WITHOUT_TE = ("apply_rope_fusion", "moe_permute_fusion")


def megatron_family(argv: list[str]) -> dict:
    """The TransformerConfig fields the exported family flags set (Megatron-LM core_transformer_config_from_args: its
    defaults LayerNorm and biases on; --swiglu is gated_linear_unit with SiLU)."""
    import torch.nn.functional as F

    value = lambda flag, default=None: argv[argv.index(flag) + 1] if flag in argv else default  # noqa: E731
    out = dict(normalization=value("--normalization", "LayerNorm"), add_bias_linear="--disable-bias-linear" not in argv,
               gated_linear_unit="--swiglu" in argv, qk_layernorm="--qk-layernorm" in argv)
    if "--swiglu" in argv:
        out["activation_func"] = F.silu
    if "--moe-router-pre-softmax" in argv:
        out["moe_router_pre_softmax"] = True
    if "--mtp-num-layers" in argv:
        out["mtp_num_layers"] = int(value("--mtp-num-layers"))
    if "--multi-latent-attention" in argv:
        out.update(q_lora_rank=int(value("--q-lora-rank")) if "--q-lora-rank" in argv else None,
                   kv_lora_rank=int(value("--kv-lora-rank")), qk_head_dim=int(value("--qk-head-dim")),
                   qk_pos_emb_head_dim=int(value("--qk-pos-emb-head-dim")), v_head_dim=int(value("--v-head-dim")))
    return out


def megatron_core_config(spec, plan):
    """megatron-core's ``TransformerConfig`` (``MLATransformerConfig`` with MLA) from the Megatron export's settings and
    family flags (MTP depth and MLA widths included), and the settings; raises what its ``__post_init__`` raises."""
    from megatron.core.transformer.transformer_config import MLATransformerConfig, TransformerConfig

    from parplan.frameworks.export_megatron import megatron_argv, megatron_settings

    s = megatron_settings(spec, plan)
    m = spec.model
    kwargs = dict(num_layers=m.num_layers, hidden_size=m.hidden_size, ffn_hidden_size=m.ffn_hidden_size,
                  num_attention_heads=m.num_attention_heads, num_query_groups=m.kv_heads,
                  tensor_model_parallel_size=s.tp, pipeline_model_parallel_size=s.pp, context_parallel_size=s.cp,
                  sequence_parallel=s.sequence_parallel, pipeline_dtype=__import__("torch").bfloat16,
                  virtual_pipeline_model_parallel_size=plan.vpp if plan.vpp > 1 else None,
                  num_layers_in_first_pipeline_stage=s.first_stage_layers,
                  num_layers_in_last_pipeline_stage=s.last_stage_layers,
                  pipeline_model_parallel_layout=s.layout, cp_comm_type=s.cp_comm_type or "p2p",
                  recompute_granularity=s.recompute_granularity, recompute_method=s.recompute_method,
                  recompute_num_layers=s.recompute_num_layers)
    if s.ep is not None:
        kwargs.update(num_moe_experts=m.moe.num_experts, moe_router_topk=m.moe.top_k,
                      expert_model_parallel_size=s.ep, expert_tensor_parallel_size=s.etp,
                      moe_ffn_hidden_size=m.moe.expert_ffn_hidden_size)
    kwargs.update(megatron_family(megatron_argv(spec, plan)))
    return (MLATransformerConfig if m.mla is not None else TransformerConfig)(**kwargs), s


def megatron_core_layers_per_chunk(config, plan) -> list[int]:
    """megatron-core's ``get_num_layers_to_build`` for every (virtual stage v, pipeline rank), in
    ``model_chunk_layers`` order (v·pp + rank). Its layout path reads the rank from ``parallel_state`` even when
    ``pp_rank`` is given (megatron/core/transformer/pipeline_parallel_layer_layout.py:159-160 in 0.16.1): set, as
    a rank would, then reset."""
    from megatron.core import parallel_state as ps
    from megatron.core.transformer.transformer_block import get_num_layers_to_build

    built = [0] * (plan.pp * plan.vpp)
    ps.set_pipeline_model_parallel_world_size(plan.pp)
    ps.set_virtual_pipeline_model_parallel_world_size(plan.vpp if plan.vpp > 1 else None)
    try:
        for rank in range(plan.pp):
            ps.set_pipeline_model_parallel_rank(rank)
            for v in range(plan.vpp):
                built[v * plan.pp + rank] = get_num_layers_to_build(config, vp_stage=v if plan.vpp > 1 else None,
                                                                    pp_rank=rank)
    finally:
        ps.set_pipeline_model_parallel_rank(None)
        ps.set_pipeline_model_parallel_world_size(None)
        ps.set_virtual_pipeline_model_parallel_world_size(None)
    return built


def recomputed_per_stage(pp: int, chunk_layers: list[int], granularity, method, num_layers) -> list[int]:
    """Layers each pipeline rank recomputes in full (Megatron-Core transformer_block.py ``_checkpointed_forward``:
    ``uniform`` recomputes every layer, ``block`` the first ``recompute_num_layers`` of every model chunk);
    ``chunk_layers`` in v·pp + rank order."""
    chunks = [[chunk_layers[v * pp + r] for v in range(len(chunk_layers) // pp)] for r in range(pp)]
    if granularity != "full":
        return [0] * pp
    if method == "uniform":
        return [sum(c) for c in chunks]
    return [sum(min(num_layers, n) for n in c) for c in chunks]


def config_differences(config, spec, plan) -> list[str]:
    """Every value of the module docstring that ``config`` (a megatron-core TransformerConfig) derives differently
    from the plan."""
    from parplan.costmodel.spec.layout import model_chunk_layers

    m = spec.model
    chunks = model_chunk_layers(plan)
    built = megatron_core_layers_per_chunk(config, plan)
    full = plan.recompute == "full" and any(plan.recompute_layers)
    got = dict(tp=config.tensor_model_parallel_size, pp=config.pipeline_model_parallel_size,
               cp=config.context_parallel_size, vpp=config.virtual_pipeline_model_parallel_size,
               sequence_parallel=config.sequence_parallel if plan.tp > 1 else None, layers=built,
               cp_comm_type=config.cp_comm_type if plan.cp > 1 else None,
               recompute=config.recompute_granularity,
               recompute_layers=recomputed_per_stage(plan.pp, built, config.recompute_granularity,
                                                     config.recompute_method, config.recompute_num_layers),
               mtp_num_layers=config.mtp_num_layers or 0, mla=bool(config.multi_latent_attention))
    want = dict(tp=plan.tp, pp=plan.pp, cp=plan.cp, vpp=plan.vpp if plan.vpp > 1 else None,
                sequence_parallel=plan.sequence_parallel if plan.tp > 1 else None, layers=chunks,
                cp_comm_type=plan.cp_comm_type if plan.cp > 1 else None,
                recompute="full" if full else ("selective" if plan.recompute == "selective" else None),
                recompute_layers=list(plan.recompute_layers) if full else [0] * plan.pp,
                mtp_num_layers=m.num_mtp_layers or 0, mla=m.mla is not None)
    if plan.recompute == "selective":  # what --recompute-granularity selective recomputes in Megatron-Core
        got["recompute_modules"], want["recompute_modules"] = list(config.recompute_modules), ["core_attn"]
    if m.moe is not None:
        got.update(ep=config.expert_model_parallel_size, etp=config.expert_tensor_parallel_size)
        want.update(ep=plan.ep, etp=plan.etp)
    return [f"{key} {got[key]!r} != {value!r}" for key, value in want.items() if got[key] != value]


def _rejected(err: Exception) -> list[str]:
    return [f"rejected: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"]


def check_megatron_core(spec, plan) -> list[str]:
    """megatron-core's config from the export's settings (module docstring) against the plan."""
    try:
        config, _ = megatron_core_config(spec, plan)
        return config_differences(config, spec, plan)
    except (AssertionError, ValueError, NameError) as err:
        return _rejected(err)


def check_megatron_lm(spec, plan) -> list[str]:
    """Megatron-LM ``pretrain_gpt.py``'s ``parse_args`` + ``validate_args`` (megatron/training/arguments.py) from a
    snapshot on ``sys.path`` (``--megatron-lm``), on the exported argv, then ``core_transformer_config_from_args``;
    WORLD_SIZE the plan's GPUs, the device architecture H100's (sm_90: validate_args asks torch.cuda, and this
    machine has no GPU)."""
    import contextlib
    import io
    import os

    import megatron.training.arguments as arguments

    from parplan.frameworks.export_common import global_batch_size
    from parplan.frameworks.export_megatron import megatron_argv

    arguments.get_device_arch_version = lambda: 9
    os.environ.update(WORLD_SIZE=str(spec.cluster.num_gpus), RANK="0", LOCAL_RANK="0")
    # the export's own environment line: CUDA_DEVICE_MAX_CONNECTIONS=1 except under Megatron-FSDP (export_megatron.render)
    if plan.zero_stage in (2, 3):
        os.environ.pop("CUDA_DEVICE_MAX_CONNECTIONS", None)
    else:
        os.environ["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"
    argv = megatron_argv(spec, plan) + ["--tokenizer-type", "NullTokenizer", "--vocab-size",
                                        str(spec.model.vocab_size), "--mock-data", "--train-iters", "1", "--lr", "1e-4"]
    saved = sys.argv
    sys.argv = ["pretrain_gpt.py", *argv]
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            args = arguments.validate_args(arguments.parse_args(), {})
            for name in KERNELS_WITHOUT_TE:  # fused kernels its __post_init__ refuses without TE: no parallel field
                setattr(args, name, False)
            config = arguments.core_transformer_config_from_args(args)
    except (AssertionError, ValueError, NameError, SystemExit) as err:
        return _rejected(err)
    finally:
        sys.argv = saved
    zero = ({"optim_grads": 2, "optim_grads_params": 3}.get(args.data_parallel_sharding_strategy, 0)
            if getattr(args, "use_megatron_fsdp", False) else int(bool(args.use_distributed_optimizer)))
    got = dict(dp=args.data_parallel_size, micro_batch_size=args.micro_batch_size,
               num_microbatches=args.global_batch_size // (args.micro_batch_size * args.data_parallel_size),
               sequences_per_step=args.global_batch_size, seq_length=args.seq_length, zero_stage=zero)
    want = dict(dp=plan.dp, micro_batch_size=plan.micro_batch_size, num_microbatches=plan.num_microbatches,
                sequences_per_step=global_batch_size(plan), seq_length=spec.training.seq_len,
                zero_stage=plan.zero_stage)
    out = [f"{key} {got[key]!r} != {value!r}" for key, value in want.items() if got[key] != value]
    return out + config_differences(config, spec, plan)


__all__ = ["megatron_family", "megatron_core_config", "megatron_core_layers_per_chunk", "recomputed_per_stage",
           "config_differences", "check_megatron_core", "check_megatron_lm"]
