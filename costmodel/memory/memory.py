"""Memory ledger terms: model states under ZeRO, activations per layer.

Model states (seed 000 §1 ``mem_ledger.py``): per parameter, weights w, gradients g and optimizer
states o bytes (bf16 + AdamW: 2 + 2 + 12 = 16). ZeRO-1 shards o, ZeRO-2 also g, ZeRO-3 also w over the
data-parallel group (Megatron's distributed optimizer shards over DP × CP).

Activations per layer (Korthikanti et al. 2022, "Reducing Activation Recomputation", Table 2), itemized
so that GQA and a gated MLP count what they store: bytes per token, bf16.
"""

from __future__ import annotations

from dataclasses import dataclass


def model_state_bytes(params: float, zero_stage: int, shards: int, weight_bytes: float = 2.0,
                      grad_bytes: float = 2.0, optimizer_bytes: float = 12.0, offload_fraction: float = 0.0,
                      zero3_weight_bytes: float | None = None) -> float:
    """Per-GPU bytes of weights + gradients + optimizer states for ``params`` parameters.

    Seed 000: DDP 16P; ZeRO-1 P(12/N + 4); ZeRO-2 P(14/N + 2); ZeRO-3 16P/N. ``shards`` N is the group the
    states are sharded over (HSDP: one shard group, not its replicas); ``offload_fraction`` f of the
    optimizer states lives in host memory (optimizer CPU offload, costmodel/memory/offload.py): o becomes o·(1-f).
    ``zero3_weight_bytes``: under ZeRO-3 the resident shard's bytes per weight instead of ``weight_bytes``
    (PyTorch FSDP keeps only the fp32 shard, which the optimizer's master term already counts: 0;
    Assumptions.zero3_resident_weight_bytes cites it).
    """
    w, g = weight_bytes, grad_bytes
    if zero_stage == 3 and zero3_weight_bytes is not None:
        w = zero3_weight_bytes
    o = optimizer_bytes if not offload_fraction else optimizer_bytes * (1.0 - offload_fraction)
    n = shards
    if zero_stage == 0:
        return params * (w + g + o)
    if zero_stage == 1:
        return params * (w + g + o / n)
    if zero_stage == 2:
        return params * (w + (g + o) / n)
    if zero_stage == 3:
        return params * (w + g + o) / n
    raise ValueError(f"zero_stage must be 0..3, got {zero_stage}")


@dataclass(frozen=True)
class ActivationItems:
    """Bytes stored per token of one layer, split by whether tensor/sequence parallelism shards them.

    ``sharded`` is divided by TP always; ``replicated`` is divided by TP only with sequence parallelism
    (LayerNorm inputs, the inputs of the first linear of each block, dropout masks).
    """

    sharded: float
    replicated: float

    def per_token(self, tp: int, sequence_parallel: bool) -> float:
        return self.sharded / tp + self.replicated / (tp if sequence_parallel else 1)


def mlp_activation_bytes(ffn: int, gated: bool, linear_input_bytes: float = 2.0,
                         swiglu_inputs_bytes: float = 2.0, recompute_activation: bool = False) -> float:
    """Saved bytes per token inside one MLP of width ``ffn`` (its input is counted by the caller).

    Gated: gate and up outputs (the SwiGLU inputs, 2 B each in BF16) and their product (the second
    linear's input, ``linear_input_bytes``); GeLU: its input 2f and output. ``recompute_activation``: the
    activation's output is recomputed from its inputs in backward (DeepSeek-V3 §3.3.2 for the MoE
    experts, whose SwiGLU inputs it caches in FP8: ``swiglu_inputs_bytes`` 1; Megatron-Core
    ``--recompute-modules moe_act``).
    """
    out = 0.0 if recompute_activation else linear_input_bytes * ffn
    return (2 * swiglu_inputs_bytes * ffn if gated else 2 * ffn) + out


def dense_layer_activation_items(hidden: int, q_dim: int, kv_dim: int, ffn: int, gated: bool,
                                 num_heads: int, seq_len: int, flash_attention: bool = True,
                                 dropout: bool = False, keep_scores: bool = True, *,
                                 v_dim: int | None = None, o_dim: int | None = None,
                                 mla_latents: tuple[int, int] | None = None, linear_input_bytes: float = 2.0,
                                 recompute_norms: bool = False, recompute_mla_up: bool = False) -> ActivationItems:
    """Itemized activation bytes per token of one transformer layer.

    Replicated without SP: two LayerNorm inputs 2·2h, QKV input 2h, first MLP linear input 2h, dropout
    masks h + h. Sharded by TP: Q 2·d_q, K and V 2·d_kv each (GQA), attention output 2·d_q, fp32
    softmax statistics 4·a; MLP: gated 3·2f (gate, up, their product), else 2·2f (GeLU in and out).
    Without FlashAttention the scores, softmax and its dropout add 5·a·s bytes (Korthikanti's 5as/h
    term); selective recompute drops them (``keep_scores=False``).
    GPT-3 shapes (MHA, f = 4h, dropout) give 34 bytes·h, Korthikanti's constant.

    Extensions (defaults reproduce the above): ``v_dim``/``o_dim`` the V and attention-output widths when
    they differ from K's and Q's (MLA); ``mla_latents = (q_lora_rank, kv_lora_rank + d_rope)``: the two
    down-projection outputs (inputs of their RMSNorms, 2 B each) and their normed copies (inputs of the
    up-projections), replicated like the block input; ``linear_input_bytes``: bytes per element of every
    saved linear-layer input (QKV / down-projection input, up-projection inputs, output-projection input,
    first and second MLP linear inputs; FP8 training saves the FP8-cast input: Transformer Engine's Linear
    keeps the quantized input for the weight gradient, DeepSeek-V3 §3.3.2 caches them in FP8);
    ``recompute_norms``: RMSNorm outputs recomputed, not stored (DeepSeek-V3 §3.2.3; Megatron-Core
    ``--recompute-modules layernorm``); ``recompute_mla_up``: the MLA up-projections recomputed from the
    stored latents, so Q, K, V are not stored (DeepSeek-V3 §3.2.3; ``--recompute-modules mla_up_proj``).
    """
    lb = linear_input_bytes
    v_dim = kv_dim if v_dim is None else v_dim
    o_dim = q_dim if o_dim is None else o_dim
    norm_out = 0.0 if recompute_norms else lb * hidden  # the QKV (down-projection) input and the MLP input
    replicated = 4 * hidden + 2 * norm_out + (2 * hidden if dropout else 0)
    qkv = 0.0 if recompute_mla_up else 2 * q_dim + 2 * kv_dim + 2 * v_dim
    attn = qkv + lb * o_dim + 4 * num_heads
    if mla_latents is not None:
        latents = sum(mla_latents)
        replicated += 2 * latents + (0.0 if recompute_norms else lb * latents)
    mlp = mlp_activation_bytes(ffn, gated, lb)
    scores = 5 * num_heads * seq_len if (not flash_attention and keep_scores) else 0
    return ActivationItems(sharded=attn + mlp + scores, replicated=replicated)


def alternate_matmul_activation_items(hidden: int, q_dim: int, kv_dim: int, ffn: int, gated: bool,
                                      num_heads: int) -> tuple[ActivationItems, ActivationItems, float]:
    """Per-op selective checkpointing as torchtitan runs it (``_save_list``: save the output of every
    attention kernel and of every other matmul, recompute everything else): (layer items, of which the
    MLP's, share of the layer's matmul FLOPs recomputed).

    Stored per token: the block's input 2h (sequence-sharded under SP), the attention output 2·d_q and
    its fp32 log-sum-exp 4·a, and the odd-numbered matmul outputs in call order q, k, v, o, [gate,] up,
    down. With an odd number of matmuls per layer the counter's parity flips every layer call, so the
    mean of both parities is used. Outputs of the row-parallel matmuls (o, down) are full width on every
    TP rank (replicated unless SP); the column-parallel ones are sharded.
    """
    # (output bytes per token, sharded by TP, FLOPs per token of the matmul)
    mms = [(2 * q_dim, True, hidden * q_dim), (2 * kv_dim, True, hidden * kv_dim),
           (2 * kv_dim, True, hidden * kv_dim), (2 * hidden, False, q_dim * hidden)]
    mlp_start = len(mms)
    mms += [(2 * ffn, True, hidden * ffn)] * (2 if gated else 1) + [(2 * hidden, False, ffn * hidden)]
    parities = [[i for i in range(len(mms)) if i % 2 == 0]]  # 1st, 3rd, ... (0-based even)
    if len(mms) % 2:
        parities.append([i for i in range(len(mms)) if i % 2 == 1])
    w = 1.0 / len(parities)
    sharded = 2 * q_dim + 4 * num_heads
    replicated = 2 * hidden
    mlp_sharded = mlp_replicated = 0.0
    total_flops = sum(f for _, _, f in mms)
    recomputed_flops = 0.0
    for saved in parities:
        for i, (b, is_sharded, f) in enumerate(mms):
            if i not in saved:
                recomputed_flops += w * f
                continue
            if is_sharded:
                sharded += w * b
                mlp_sharded += w * b if i >= mlp_start else 0.0
            else:
                replicated += w * b
                mlp_replicated += w * b if i >= mlp_start else 0.0
    return (ActivationItems(sharded=sharded, replicated=replicated),
            ActivationItems(sharded=mlp_sharded, replicated=mlp_replicated), recomputed_flops / total_flops)
