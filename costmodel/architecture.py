"""Parameter counts and FLOPs of a decoder-only transformer (dense or MoE) from its spec.

FLOP conventions (seed 003 ``parallel_plan.py``; Narayanan et al. 2021 eq. 3): a matmul costs 2 FLOPs
per multiply-accumulate in the forward pass and twice that in the backward pass, so 6 FLOPs per
parameter per token for fwd+bwd; causal attention costs 6·s·d_q per token per layer (QKᵀ and AV,
halved by the mask); the LM head costs 6·V·h per token.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from parplan.costmodel.spec import ModelSpec


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
        return self.spec.num_attention_heads * self.spec.head_size

    @cached_property
    def kv_dim(self) -> int:
        """Width of one K (or V) row: kv heads × head dim (seed 003: KV)."""
        return self.spec.kv_heads * self.spec.head_size

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
        h = self.hidden
        return h * self.q_dim + 2 * h * self.kv_dim + self.q_dim * h

    @cached_property
    def norm_params_per_layer(self) -> int:
        return 2 * self.hidden

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
        shared = moe.num_shared_experts * mlp_params(self.hidden, self.shared_expert_ffn, self.spec.gated_mlp)
        return self.attention_params + self.hidden * moe.num_experts + shared + self.norm_params_per_layer

    @cached_property
    def embedding_params(self) -> int:
        return self.spec.vocab_size * self.hidden

    @cached_property
    def head_params(self) -> int:
        """Output projection (0 when tied to the embedding) plus the final norm."""
        return (0 if self.spec.tie_embeddings else self.spec.vocab_size * self.hidden) + self.hidden

    @cached_property
    def total_params(self) -> int:
        return (
            self.num_dense_layers * self.dense_layer_params
            + self.num_moe_layers * (self.moe_layer_nonexpert_params + self.expert_params_per_layer)
            + self.embedding_params
            + self.head_params
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
    def attention_core_flops(self, seq_len: int, causal_fraction: float = 0.5) -> float:
        """QKᵀ and AV, fwd+bwd, per token: 3 · 4 · s · d_q · causal_fraction (= 6·s·h when causal)."""
        return 12.0 * seq_len * self.q_dim * causal_fraction

    @cached_property
    def dense_layer_linear_flops(self) -> float:
        s = self.spec
        return 6.0 * (self.attention_params + mlp_params(s.hidden_size, s.ffn_hidden_size, s.gated_mlp))

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

    def model_flops_per_token(self, seq_len: int, causal_fraction: float = 0.5) -> float:
        attn = self.attention_core_flops(seq_len, causal_fraction)
        dense = self.num_dense_layers * (self.dense_layer_linear_flops + attn)
        moe = self.num_moe_layers * (self.moe_layer_dense_linear_flops + self.moe_layer_expert_flops + attn)
        return dense + moe + self.head_flops
