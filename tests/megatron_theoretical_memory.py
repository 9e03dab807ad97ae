"""Test oracle: Megatron-LM's theoretical memory formula, re-implemented.

Source read: NVIDIA/Megatron-LM ``megatron/training/theoretical_memory_usage.py`` at commit
``00caa53af30912914981c86f39db123961678bbd`` (functions ``compute_weight_and_optimizer_memory``,
``compute_activation_memory``, ``compute_activation_memory_without_sp``, ``report_theoretical_memory``).
An older revision (``38644dd756c46142787b1bd5dc08ed82ca0e6de1``) has the same activation formula and a
coarser parameter count (no gated-MLP multiplier, no norm kinds, no MLA/MTP), and reports nothing unless
SP + selective recompute are on. This is an independent re-implementation of the arithmetic, written
for this project; it takes the same arguments Megatron reads from ``args`` (same names) and returns the
same numbers (MB = 2**20 bytes).

What Megatron's formula assumes (and therefore what a comparison must respect):

* It describes the **first pipeline stage** (the most loaded one): 1/pp of the transformer block
  (including 1/pp of the final norm), the MTP block if any, and the input embedding, all divided by TP;
  with pp = 1 and untied embeddings also the output layer.
* Bytes per parameter: 18 (bf16 weight 2 + fp32 main grad 4 + fp32 master weight and Adam m, v 12)
  without the distributed optimizer, ``6 + 12/dp`` with it (optimizer states sharded over DP only;
  context parallelism is not considered).
* Parameters: no linear biases; LayerNorm counts weight + bias (2h), RMSNorm only a weight (h);
  a SwiGLU MLP is 3·h·f (``gated_linear_multiplier = 3/2``); GQA shrinks K and V to
  ``num_query_groups · kv_channels``. MoE layers count *all* experts divided by TP only (expert
  parallelism is not modelled).
* Activations with SP + selective recompute (Korthikanti et al. 2022, Table 2): per layer
  ``s·b·h·(18 + 4·ffn/h)`` bytes / TP -- the GPT-3 constant 34 when ffn = 4h. It assumes MHA-sized Q,K,V,
  a non-gated MLP (GeLU input and output, 2·ffn each), two 1-byte hidden-dropout masks per layer, and
  never looks at ``num_query_groups``, ``swiglu`` or MoE. It is multiplied by *num_layers* (the first
  stage holds pp micro-batches of L/pp layers each), then the embedding input (8 bytes per token, int64
  ids) and embedding dropout mask (s·b·h) are added for pp in-flight micro-batches, then the schedule
  factor: interleaved ``1 + (pp-1)/(pp·vpp)``, else ``min(1, num_microbatches/pp)`` when pp > 1.
  With pp = 1 the output layer is added: ``4·s·b·h·(1 + V/h)`` (its input and fp32 logits for the CE
  loss). Everything is divided by TP.
* Without SP or without selective recompute the other function is used: per layer
  ``s·b·h·(10 + 24/tp)`` (Korthikanti's TP + selective, no SP), the same embedding / schedule terms,
  with pp = 1 bf16 logits ``2·(s·b·V/tp + s·b·h)``, and a final 5 % overhead. Note that Megatron's
  ``arguments.py`` turns ``sequence_parallel`` off when tp = 1, so every TP=1 run takes this branch;
  callers pass ``sequence_parallel`` as Megatron would have it after that check
  (see :func:`megatron_sequence_parallel`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Union

NUM_BYTES_IN_MEGABYTE = 1024 * 1024


@dataclass
class MegatronArgs:
    """The fields of Megatron's ``args`` that the theoretical-memory functions read (same names)."""

    num_layers: int
    hidden_size: int
    ffn_hidden_size: int
    num_attention_heads: int
    seq_length: int
    micro_batch_size: int
    padded_vocab_size: int
    kv_channels: Optional[int] = None  # Megatron default: hidden_size // num_attention_heads
    group_query_attention: bool = False
    num_query_groups: Optional[int] = None
    swiglu: bool = False
    normalization: str = "LayerNorm"  # or "RMSNorm"
    untie_embeddings_and_output_weights: bool = False
    tensor_model_parallel_size: int = 1
    pipeline_model_parallel_size: int = 1
    virtual_pipeline_model_parallel_size: Optional[int] = None
    data_parallel_size: int = 1
    use_distributed_optimizer: bool = False
    sequence_parallel: bool = False
    recompute_granularity: Optional[str] = None
    # MoE
    num_experts: Optional[int] = None
    moe_ffn_hidden_size: Optional[int] = None
    moe_shared_expert_intermediate_size: Optional[int] = None
    moe_layer_freq: Union[int, list[int]] = 1
    # multi-token prediction
    mtp_num_layers: Optional[int] = None
    # multi-latent attention
    multi_latent_attention: bool = False
    q_lora_rank: Optional[int] = None
    kv_lora_rank: Optional[int] = None
    qk_head_dim: Optional[int] = None
    qk_pos_emb_head_dim: Optional[int] = None
    v_head_dim: Optional[int] = None
    is_hybrid_model: bool = False

    def __post_init__(self) -> None:
        if self.kv_channels is None:
            self.kv_channels = self.hidden_size // self.num_attention_heads


def megatron_sequence_parallel(requested: bool, tp: int) -> bool:
    """Megatron's ``arguments.py``: sequence parallelism is switched off when tp == 1."""
    return bool(requested) and tp > 1


def pad_vocab_size(orig_vocab_size: int, tp: int, make_vocab_size_divisible_by: int = 128) -> int:
    """Megatron's tokenizer padding: round up to a multiple of ``divisible_by · tp``."""
    multiple = make_vocab_size_divisible_by * tp
    return int(math.ceil(orig_vocab_size / multiple) * multiple)


# ---------------------------------------------------------------- parameters, weights + optimizer
def parameter_counts(args: MegatronArgs) -> dict[str, float]:
    """Megatron's parameter bookkeeping: per-layer, block, embedding and most-loaded-shard counts."""
    h = args.hidden_size
    a = args.num_attention_heads
    groups = args.num_query_groups if args.group_query_attention else a
    q_size = args.kv_channels * a
    gated = 1.5 if args.swiglu else 1.0
    norm = 1 if args.normalization == "RMSNorm" else 2

    if args.num_experts is not None:
        if isinstance(args.moe_layer_freq, int):
            pattern = [1 if i % args.moe_layer_freq == 0 else 0 for i in range(args.num_layers)]
        else:
            pattern = list(args.moe_layer_freq)
            assert len(pattern) == args.num_layers, "moe_layer_freq list must have num_layers entries"
        n_moe = sum(pattern)
        n_dense = args.num_layers - n_moe
        moe_ffn = args.moe_ffn_hidden_size
        experts = args.num_experts
    else:
        pattern = [0] * args.num_layers
        n_moe, n_dense, moe_ffn, experts = 0, args.num_layers, 0, 1
    shared_ffn = args.moe_shared_expert_intermediate_size or 0
    if args.mtp_num_layers is not None:
        mtp_moe = pattern[-1] * args.mtp_num_layers
        mtp_dense = (1 - pattern[-1]) * args.mtp_num_layers
    else:
        mtp_moe = mtp_dense = 0

    if args.multi_latent_attention:
        assert not args.group_query_attention
        rope_q = args.qk_head_dim + args.qk_pos_emb_head_dim
        if args.q_lora_rank is None:
            q_term = h * a * rope_q
        else:
            q_term = args.q_lora_rank * (h + a * rope_q + norm)
        attn = (q_term
                + args.kv_lora_rank * (h + a * (args.qk_head_dim + args.v_head_dim) + norm)
                + h * args.qk_pos_emb_head_dim
                + a * args.v_head_dim * h)
    else:
        # Q and O: h·q each; K and V: h·q·groups/heads each.
        attn = 2 * h * h * (1 + groups / a) * (q_size / h)

    dense_layer = 2 * h * (args.ffn_hidden_size * gated + norm) + attn
    moe_layer = 2 * h * (moe_ffn * experts * gated + shared_ffn * gated + norm) + attn
    embedding = h * args.padded_vocab_size
    block = dense_layer * n_dense + moe_layer * n_moe + norm * h  # + final norm
    mtp = dense_layer * mtp_dense + moe_layer * mtp_moe
    emb_layers = (2 if args.untie_embeddings_and_output_weights else 1) * embedding
    tp, pp = args.tensor_model_parallel_size, args.pipeline_model_parallel_size
    most_loaded = (block / pp + mtp + embedding) / tp
    if args.untie_embeddings_and_output_weights and pp == 1:
        most_loaded += embedding / tp
    return {
        "dense_layer": dense_layer,
        "moe_layer": moe_layer,
        "transformer_block": block,
        "mtp_block": mtp,
        "embedding_layers": emb_layers,
        "total": block + mtp + emb_layers,
        "most_loaded_shard": most_loaded,
        "other_shards": block / (pp * tp),
    }


def bytes_per_parameter(args: MegatronArgs) -> float:
    return 6 + 12 / args.data_parallel_size if args.use_distributed_optimizer else 18.0


def compute_weight_and_optimizer_memory(args: MegatronArgs) -> float:
    """Bytes of weights + grads + optimizer states on the most loaded (first-stage) shard."""
    return parameter_counts(args)["most_loaded_shard"] * bytes_per_parameter(args)


# ---------------------------------------------------------------- activations
def _embedding_and_schedule(args: MegatronArgs, per_model: float, num_microbatches: Optional[int]) -> float:
    """Add embedding input + dropout for pp in-flight micro-batches, then apply the schedule factor."""
    s, b, h = args.seq_length, args.micro_batch_size, args.hidden_size
    pp, vpp = args.pipeline_model_parallel_size, args.virtual_pipeline_model_parallel_size
    mem = per_model
    mem += 8 * s * b * pp  # int64 token ids
    mem += s * b * h * pp  # 1-byte embedding dropout mask
    if vpp is not None:
        mem *= 1 + (pp - 1) / (pp * vpp)
    elif pp > 1 and num_microbatches is not None:
        mem *= min(1, num_microbatches / pp)
    return mem


def interleaved_penalty(pp: int, vpp: Optional[int]) -> float:
    return 1.0 if vpp is None else 1 + (pp - 1) / (pp * vpp)


def activation_bytes_per_layer(args: MegatronArgs) -> float:
    """SP + selective recompute, per layer, before /TP: s·b·h·(18 + 4·ffn/h)."""
    s, b, h = args.seq_length, args.micro_batch_size, args.hidden_size
    return s * b * h * (18 + 4 * args.ffn_hidden_size / h)


def compute_activation_memory(args: MegatronArgs, num_microbatches: Optional[int]) -> float:
    """Bytes of activations on the first stage with SP + selective recompute."""
    s, b, h = args.seq_length, args.micro_batch_size, args.hidden_size
    mem = activation_bytes_per_layer(args) * args.num_layers
    mem = _embedding_and_schedule(args, mem, num_microbatches)
    if args.pipeline_model_parallel_size == 1:
        mem += s * b * h * 4 * (1 + args.padded_vocab_size / h)  # output-layer input + fp32 logits
    return mem / args.tensor_model_parallel_size


def compute_activation_memory_without_sp(args: MegatronArgs, num_microbatches: Optional[int]) -> float:
    """Bytes of activations on the first stage without SP (Korthikanti: TP + selective, 10 + 24/t)."""
    s, b, h = args.seq_length, args.micro_batch_size, args.hidden_size
    tp = args.tensor_model_parallel_size
    mem = s * b * h * (10 + 24 / tp) * args.num_layers
    mem = _embedding_and_schedule(args, mem, num_microbatches)
    if args.pipeline_model_parallel_size == 1:
        mem += (s * b * args.padded_vocab_size / tp + s * b * h) * 2  # bf16 logits + final-norm output
    return mem * 1.05  # 5 % for optimizer and miscellaneous temporaries


def report_theoretical_memory(args: MegatronArgs, num_microbatches: Optional[int] = None):
    """(weight_and_optimizer_MB, activation_MB, total_MB), as Megatron prints them; None for hybrids."""
    if args.is_hybrid_model:
        return None
    weights = compute_weight_and_optimizer_memory(args) / NUM_BYTES_IN_MEGABYTE
    if args.sequence_parallel and args.recompute_granularity == "selective":
        act = compute_activation_memory(args, num_microbatches) / NUM_BYTES_IN_MEGABYTE
    else:
        act = compute_activation_memory_without_sp(args, num_microbatches) / NUM_BYTES_IN_MEGABYTE
    return weights, act, weights + act


__all__ = [
    "MegatronArgs", "NUM_BYTES_IN_MEGABYTE", "megatron_sequence_parallel", "pad_vocab_size", "parameter_counts",
    "bytes_per_parameter", "compute_weight_and_optimizer_memory", "compute_activation_memory",
    "compute_activation_memory_without_sp", "activation_bytes_per_layer", "interleaved_penalty",
    "report_theoretical_memory",
]
