"""Unfused elementwise ops: the HBM traffic a layer's norms, rotary embedding, KV-head repeat, attention-output copy
and SwiGLU add when every PyTorch op is its own kernel (eager mode), over fused kernels (Transformer Engine's and
Megatron-Core's, or what torch.compile generates: one read of the inputs and one write of the output per op group).

The op lists are torchtitan's Llama at pytorch/torchtitan@9dec370 (the code of its 2024-12 H100 benchmark, whose
FSDP-only rows ran without torch.compile: ``train_configs/llama3_8b.toml:21,37`` ``norm_type = "rmsnorm"``,
``compile = false``). Bytes per element: BF16 activations 2, FP32 upcasts 4; each op reads its inputs and writes its
output once; backward is autograd's kernels of the same ops in reverse. Extra = eager minus fused, per element:

* RMSNorm, twice a layer (``models/llama/model.py:323-324``; ``models/norms.py:96-101``). Forward: ``x.float()`` 2+4,
  ``pow(2)`` 4+4, ``mean`` 4, ``x * rsqrt`` 4+4, ``type_as`` 4+2, ``* weight`` 2+2 = 36 against a fused 2+2: 32.
  Backward: ``* weight`` 2+2+2 and its weight gradient 2+2, ``type_as`` 2+4, ``x * rsqrt`` 8+8, ``mean`` 4,
  ``pow`` 4+4+4, the two gradients of x added 4+4+4, ``float`` 4+2 = 62 against a fused 6+4: 52.
* Rotary embedding on the queries and the keys (``model.py:108-113``: upcast, complex multiply, cast back): forward
  ``float`` 2+4, complex multiply 4+4, ``type_as`` 4+2 = 20 against 4: 16; backward the same three, 16.
* The KV-head repeat before SDPA (``model.py:116-125, 201-202``, GQA only): K and V each read at the KV width and
  written at the query width, forward 2 + 2 per element of each; backward the sum over the repeats, the same.
* The attention output's ``transpose(1, 2).contiguous()`` (``model.py:210-212``): a copy, 2+2, forward and backward.
* SwiGLU (``model.py:253`` ``F.silu(w1(x)) * w3(x)``): forward ``silu`` 2+2 and the product 2+2+2 = 10 against a
  fused 6: 4; backward the product's two gradients 2+2+2+2+2 and ``silu``'s 2+2+2 = 16 against a fused 10: 6.
* The residual adds run one kernel either way (Megatron-Core's bias-dropout-add): nothing extra.

Not counted: the elementwise ops a recompute repeats, the loss, and torchtitan v0.2.2's ``torch.nn.RMSNorm`` (whose
eager CUDA path depends on the PyTorch version); MLA's norms on its low-rank latents."""

from __future__ import annotations

from dataclasses import dataclass

from parplan.costmodel.compute.architecture import Architecture

# (forward, backward) extra bytes per element of the width each op runs over
RMSNORM_BYTES = (32, 52)  # per element of the hidden state, each of the layer's two norms
ROPE_BYTES = (16, 16)  # per element of the rotated queries and keys
KV_REPEAT_BYTES = (4, 4)  # K and V, 2 bytes each, per element at the KV width and again at the query width (GQA)
OUTPUT_COPY_BYTES = (4, 4)  # per element of the attention output
SWIGLU_BYTES = (4, 6)  # per element of one of the two MLP branches (the FFN width)
NORMS_PER_LAYER = 2


@dataclass(frozen=True)
class LayerWidths:
    """Per-token widths one GPU holds of a layer: the hidden state its norms run over (all of it without sequence
    parallelism under TP, else its share), the queries and keys RoPE rotates, K/V at the KV and the query width
    (0, 0 without a repeat), the attention output and the gated MLP's branch width (0 without a gated MLP)."""

    norm: float
    rope: float
    kv_repeat: tuple[float, float]
    attention_out: float
    swiglu: float


def layer_widths(arch: Architecture, tp: int, sp: bool, swiglu_width: float) -> LayerWidths:
    """One GPU's :class:`LayerWidths` of ``arch``'s layers under TP ``tp`` (``sp``: sequence parallelism, the norms
    over the GPU's share of the tokens). RoPE turns the queries and keys (MLA: every head's rope dimensions and the
    shared rope key); the KV repeat runs where KV heads are fewer than query heads (not under MLA);
    ``swiglu_width``: the gated MLP's branch width per token of the TP group on this GPU."""
    m = arch.spec
    if m.mla is not None:
        rope = m.num_attention_heads * m.mla.qk_rope_head_dim + m.mla.qk_rope_head_dim
        repeat = (0.0, 0.0)
    else:
        rope = arch.q_dim + arch.kv_dim
        repeat = (arch.kv_dim / tp, arch.q_dim / tp) if m.kv_heads < m.num_attention_heads else (0.0, 0.0)
    return LayerWidths(norm=arch.hidden / tp if sp else arch.hidden, rope=rope / tp, kv_repeat=repeat,
                       attention_out=arch.o_dim / tp, swiglu=swiglu_width)


def eager_extra_bytes_per_token(w: LayerWidths) -> tuple[float, float]:
    """(forward, backward) HBM bytes per token one layer's unfused elementwise ops move beyond fused kernels
    (module docstring)."""
    kv, q = w.kv_repeat

    def side(i: int) -> float:
        return (NORMS_PER_LAYER * RMSNORM_BYTES[i] * w.norm + ROPE_BYTES[i] * w.rope
                + KV_REPEAT_BYTES[i] * (kv + q) + OUTPUT_COPY_BYTES[i] * w.attention_out
                + SWIGLU_BYTES[i] * w.swiglu)
    return side(0), side(1)


__all__ = ["LayerWidths", "layer_widths", "eager_extra_bytes_per_token", "RMSNORM_BYTES", "ROPE_BYTES", "KV_REPEAT_BYTES",
           "OUTPUT_COPY_BYTES", "SWIGLU_BYTES", "NORMS_PER_LAYER"]
