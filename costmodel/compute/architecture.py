"""Parameter counts and FLOPs of a decoder-only transformer (dense or MoE) from its spec.

FLOP conventions (seed 003 ``parallel_plan.py``; Narayanan et al. 2021 eq. 3): a matmul costs 2 FLOPs
per multiply-accumulate in the forward pass and twice that in the backward pass, so 6 FLOPs per
parameter per token for fwd+bwd; causal attention costs 6·s·d_q per token per layer (QKᵀ and AV,
halved by the mask); the LM head costs 6·V·h per token.

Multi-head latent attention (``model.mla``, DeepSeek-V2 §2.1 / DeepSeek-V3 §2.1, config.json names):
queries go h -> q_lora_rank -> heads·(d_nope + d_rope), keys and values h -> kv_lora_rank (+ one shared
d_rope RoPE key) -> heads·(d_nope + d_v); the attention core multiplies queries and keys of width
d_nope + d_rope and values of width d_v: 6·s·heads·(d_qk + d_v)·causal per token fwd+bwd (= 6·s·h·2
for MHA's d_qk = d_v = h/heads). Multi-token prediction (``model.num_mtp_layers``, DeepSeek-V3 §2.2):
each module adds an RMSNorm pair, a 2h x h projection and one transformer layer, and reuses the
embedding and the output head (whose FLOPs it pays again).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from parplan.costmodel.spec.spec import ModelSpec


def mlp_params(hidden: int, ffn: int, gated: bool) -> int:
    """Weights of one MLP: 3·h·f for a gated (SwiGLU) MLP, 2·h·f otherwise."""
    return (3 if gated else 2) * hidden * ffn


@dataclass(frozen=True)
class Architecture:
    """Derived sizes of a model; all counts are exact integers."""

    spec: ModelSpec

    # ---- shapes
    @cached_property
    def hidden(self) -> int:
        return self.spec.hidden_size

    @cached_property
    def q_dim(self) -> int:
        """Width of one Q row: heads × query/key head dim (MLA: d_nope + d_rope)."""
        mla = self.spec.mla
        if mla is not None:
            return self.spec.num_attention_heads * (mla.qk_nope_head_dim + mla.qk_rope_head_dim)
        return self.spec.num_attention_heads * self.spec.head_size

    @cached_property
    def kv_dim(self) -> int:
        """Width of one K (or V) row for MHA/GQA: kv heads × head dim (seed 003: KV); MLA: the K row."""
        if self.spec.mla is not None:
            return self.k_dim
        return self.spec.kv_heads * self.spec.head_size

    @cached_property
    def k_dim(self) -> int:
        """Width of one K row as the attention core reads it (MLA: every head's d_nope + d_rope)."""
        return self.q_dim if self.spec.mla is not None else self.kv_dim

    @cached_property
    def v_dim(self) -> int:
        """Width of one V row (MLA: heads × d_v)."""
        mla = self.spec.mla
        return self.spec.num_attention_heads * mla.v_head_dim if mla is not None else self.kv_dim

    @cached_property
    def o_dim(self) -> int:
        """Width of the attention core's output, the output projection's input (MLA: heads × d_v)."""
        mla = self.spec.mla
        return self.spec.num_attention_heads * mla.v_head_dim if mla is not None else self.q_dim

    def attention_gemms(self, tokens: float, tp: int) -> list[tuple[float, float, float, float]]:
        """The attention block's GEMMs on one TP rank as (weights, M, K, N) for the efficiency model.

        MHA/GQA: fused QKV (N sharded by TP) and the output projection (K sharded). MLA: query down- and
        up-projection, key/value down-projection (with the RoPE key), key/value up-projection, output
        projection; all up-projections column-parallel, the down-projections counted as sharded too
        (Megatron-Core keeps them duplicated over TP ranks: under TP this undercounts them).
        """
        h = self.hidden
        mla = self.spec.mla
        if mla is None:
            qkv = self.q_dim + 2 * self.kv_dim
            return [(h * qkv, tokens, h, qkv / tp), (self.q_dim * h, tokens, self.q_dim / tp, h)]
        heads = self.spec.num_attention_heads
        kv_down = mla.kv_lora_rank + mla.qk_rope_head_dim
        kv_up = heads * (mla.qk_nope_head_dim + mla.v_head_dim)
        q = ([(h * mla.q_lora_rank, tokens, h, mla.q_lora_rank),
              (mla.q_lora_rank * self.q_dim, tokens, mla.q_lora_rank, self.q_dim / tp)]
             if mla.q_lora_rank else [(h * self.q_dim, tokens, h, self.q_dim / tp)])
        return q + [(h * kv_down, tokens, h, kv_down), (mla.kv_lora_rank * kv_up, tokens, mla.kv_lora_rank, kv_up / tp),
                    (self.o_dim * h, tokens, self.o_dim / tp, h)]

    @cached_property
    def num_moe_layers(self) -> int:
        moe = self.spec.moe
        return 0 if moe is None else self.spec.num_layers - moe.first_dense_layers

    @cached_property
    def num_dense_layers(self) -> int:
        return self.spec.num_layers - self.num_moe_layers

    # ---- parameters
    @cached_property
    def attention_params(self) -> int:
        """Attention weights (matmuls only): the sum of :meth:`attention_gemms`' weights."""
        return int(sum(w for w, *_ in self.attention_gemms(1.0, 1)))

    @cached_property
    def norm_params_per_layer(self) -> int:
        """Two RMSNorms of width h; MLA adds the query and key/value latent norms."""
        mla = self.spec.mla
        return 2 * self.hidden + (0 if mla is None else mla.q_lora_rank + mla.kv_lora_rank)

    @cached_property
    def mtp_module_params(self) -> int:
        """One MTP module without its transformer layer: two RMSNorms (h each), the 2h x h projection and
        the final RMSNorm before the shared head (DeepSeek-V3 §2.2)."""
        return 3 * self.hidden + 2 * self.hidden * self.hidden

    @cached_property
    def mtp_layer_is_moe(self) -> bool:
        """DeepSeek-V3's MTP layer is a MoE layer like the last main layer (config: layer 61)."""
        return self.spec.moe is not None and self.num_moe_layers > 0

    @cached_property
    def dense_layer_params(self) -> int:
        s = self.spec
        return self.attention_params + mlp_params(s.hidden_size, s.ffn_hidden_size, s.gated_mlp) + self.norm_params_per_layer

    @cached_property
    def expert_params_per_layer(self) -> int:
        """Routed-expert weights of one MoE layer (sharded by EP × expert-TP)."""
        moe = self.spec.moe
        if moe is None:
            return 0
        return moe.num_experts * mlp_params(self.hidden, moe.expert_ffn_hidden_size, self.spec.gated_mlp)

    @cached_property
    def shared_expert_ffn(self) -> int:
        moe = self.spec.moe
        return 0 if moe is None else (moe.shared_expert_ffn_hidden_size or moe.expert_ffn_hidden_size)

    @cached_property
    def moe_layer_nonexpert_params(self) -> int:
        """Attention, router, shared experts and norms of one MoE layer (sharded by TP like a dense layer)."""
        moe = self.spec.moe
        if moe is None:
            return 0
        return self.attention_params + self.hidden * moe.num_experts + self.shared_expert_params + self.norm_params_per_layer

    @cached_property
    def shared_expert_params(self) -> int:
        """The shared experts' weights of one MoE layer (0 without them; sharded by TP)."""
        moe = self.spec.moe
        return 0 if moe is None else moe.num_shared_experts * mlp_params(self.hidden, self.shared_expert_ffn,
                                                                          self.spec.gated_mlp)

    @cached_property
    def embedding_params(self) -> int:
        return self.spec.vocab_size * self.hidden

    @cached_property
    def head_params(self) -> int:
        """Output projection (0 when tied to the embedding) plus the final norm."""
        return (0 if self.spec.tie_embeddings else self.spec.vocab_size * self.hidden) + self.hidden

    @cached_property
    def mtp_layer_params(self) -> int:
        """The transformer layer of one MTP module."""
        if self.mtp_layer_is_moe:
            return self.moe_layer_nonexpert_params + self.expert_params_per_layer
        return self.dense_layer_params

    @cached_property
    def total_params(self) -> int:
        return (
            self.num_dense_layers * self.dense_layer_params
            + self.num_moe_layers * (self.moe_layer_nonexpert_params + self.expert_params_per_layer)
            + self.embedding_params
            + self.head_params
            + self.spec.num_mtp_layers * (self.mtp_module_params + self.mtp_layer_params)
        )

    @cached_property
    def active_params(self) -> int:
        """Parameters one token touches (top-k routed experts only)."""
        moe = self.spec.moe
        if moe is None:
            return self.total_params
        active_experts = moe.top_k * mlp_params(self.hidden, moe.expert_ffn_hidden_size, self.spec.gated_mlp)
        return (
            self.num_dense_layers * self.dense_layer_params
            + self.num_moe_layers * (self.moe_layer_nonexpert_params + active_experts)
            + self.embedding_params
            + self.head_params
        )

    # ---- FLOPs per token, forward + backward (model FLOPs: no recomputation)
    @cached_property
    def windowed_layer_fraction(self) -> float:
        """Share of the layers with sliding-window attention (``model.attention``): Megatron-Core 2a75ac12
        transformer/utils.py:531-542 ``is_layer_window_attention``, layer_number (1-indexed) windowed iff
        ``layer_number % window_attn_skip_freq != 0`` (every layer when the frequency is None); 0 without a window."""
        att = self.spec.attention
        if att is None or att.sliding_window is None:
            return 0.0
        n, every = self.spec.num_layers, att.full_attention_every
        return 1.0 if every is None else sum(1 for layer in range(1, n + 1) if layer % every) / n

    @staticmethod
    def window_keys_per_query(seq_len: int, window: int) -> float:
        """Mean keys a query attends to under a causal sliding window of ``window`` keys (itself included;
        Megatron-Core window_size (window - 1, 0)): query i (1-indexed) sees min(i, window) keys, so the mean is
        (w(w+1)/2 + (s - w)·w) / s for w <= s, and (s + 1)/2 (plain causal) for w >= s."""
        s, w = seq_len, min(window, seq_len)
        return (w * (w + 1) / 2 + (s - w) * w) / s

    def attention_core_flops(self, seq_len: int, causal_fraction: float = 0.5, full_scores: bool = False) -> float:
        """QKᵀ and AV, fwd+bwd, per token, mean over the layers: 3 · 2 · keys · (d_q + d_o), keys = s ·
        causal_fraction for full causal attention (= 6·s·h for MHA, d_q = d_o = h; MLA: d_q = heads·(d_nope +
        d_rope), d_o = heads·d_v) and :meth:`window_keys_per_query` (at most s · causal_fraction) in the
        sliding-window layers (:attr:`windowed_layer_fraction`): a kernel that skips the masked blocks (FlashAttention,
        cuDNN fused attention) computes about ``window`` keys per query, not s/2 (GPT-OSS: 128 of 4096).
        ``full_scores``: the whole s x s score matrix (unfused attention masks after the GEMMs; Transformer Engine
        v2.14 attention/dot_product_attention/utils.py:879-884 turns a window into an 'arbitrary' mask there)."""
        width = 6.0 * (self.q_dim + self.o_dim)
        if full_scores:
            return width * seq_len
        full = width * seq_len * causal_fraction
        f = self.windowed_layer_fraction
        if f == 0.0:
            return full
        windowed = width * min(self.window_keys_per_query(seq_len, self.spec.attention.sliding_window),
                               seq_len * causal_fraction)
        return (1.0 - f) * full + f * windowed

    @cached_property
    def dense_layer_linear_flops(self) -> float:
        s = self.spec
        return 6.0 * (self.attention_params + mlp_params(s.hidden_size, s.ffn_hidden_size, s.gated_mlp))

    @cached_property
    def attention_linear_flops(self) -> float:
        """The attention block's matmuls per token, fwd+bwd (a TP block: layer_comm.LayerComm.tp_block_s)."""
        return 6.0 * self.attention_params

    @cached_property
    def shared_expert_linear_flops(self) -> float:
        """The shared experts' matmuls per token, fwd+bwd (an MoE layer's second TP block)."""
        return 6.0 * self.shared_expert_params

    @cached_property
    def moe_layer_dense_linear_flops(self) -> float:
        """Attention, router and shared-expert matmuls of one MoE layer."""
        return 6.0 * (self.moe_layer_nonexpert_params - self.norm_params_per_layer)

    @cached_property
    def moe_layer_expert_flops(self) -> float:
        """The top-k routed experts one token visits."""
        moe = self.spec.moe
        if moe is None:
            return 0.0
        return 6.0 * moe.top_k * mlp_params(self.hidden, moe.expert_ffn_hidden_size, self.spec.gated_mlp)

    @cached_property
    def head_flops(self) -> float:
        """LM head, fwd+bwd, per token: 6·V·h (seed 003: f_head)."""
        return 6.0 * self.spec.vocab_size * self.hidden

    def mtp_flops(self, seq_len: int, causal_fraction: float = 0.5) -> float:
        """One MTP module per token, fwd+bwd: projection, its transformer layer and the shared head again."""
        attn = self.attention_core_flops(seq_len, causal_fraction)
        layer = (self.moe_layer_dense_linear_flops + self.moe_layer_expert_flops if self.mtp_layer_is_moe
                 else self.dense_layer_linear_flops)
        return 6.0 * 2 * self.hidden * self.hidden + layer + attn + self.head_flops

    def model_flops_per_token(self, seq_len: int, causal_fraction: float = 0.5, expert_kept_share: float = 1.0) -> float:
        """Per token, fwd+bwd; the routed experts' FLOPs for the ``expert_kept_share`` of the copies a capacity factor
        keeps (costmodel/moe/moe_dispatch.py kept_share)."""
        attn = self.attention_core_flops(seq_len, causal_fraction)
        dense = self.num_dense_layers * (self.dense_layer_linear_flops + attn)
        moe = self.num_moe_layers * (self.moe_layer_dense_linear_flops + self.moe_layer_expert_flops * expert_kept_share
                                     + attn)
        return dense + moe + self.head_flops + self.spec.num_mtp_layers * self.mtp_flops(seq_len, causal_fraction)
