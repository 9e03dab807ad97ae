"""The model section of a spec (``model:``): the transformer's shape, its mixture of experts, multi-head latent
attention and attention variants. Strict and limit-checked as every section (``costmodel/spec/spec_base.py``); the
names follow Megatron-LM and the models' config.json files, cited per field."""

from __future__ import annotations

from typing import ClassVar, Literal, Optional

from pydantic import Field, PositiveInt, model_validator

from parplan.costmodel.spec.spec_base import (MAX_ATTENTION_HEADS, MAX_EXPERTS, MAX_HIDDEN_SIZE, MAX_NUM_LAYERS,
                                              MAX_SEQ_LEN, MAX_VOCAB_SIZE, LimitedSection, StrictModel)


class MoESpec(LimitedSection):
    """Mixture-of-experts layers (Megatron naming: --num-experts, --moe-router-topk, ...)."""

    LIMITS: ClassVar[dict[str, float]] = {
        "num_experts": MAX_EXPERTS, "num_shared_experts": MAX_EXPERTS,
        "expert_ffn_hidden_size": MAX_HIDDEN_SIZE, "shared_expert_ffn_hidden_size": MAX_HIDDEN_SIZE}

    num_experts: PositiveInt
    top_k: PositiveInt
    expert_ffn_hidden_size: PositiveInt
    num_shared_experts: int = Field(0, ge=0)
    shared_expert_ffn_hidden_size: Optional[PositiveInt] = Field(
        None, description="width of one shared expert; default: expert_ffn_hidden_size"
    )
    first_dense_layers: int = Field(0, ge=0, description="leading layers that are dense, not MoE")
    max_nodes_per_token: Optional[PositiveInt] = Field(
        None, description="node-limited routing: a token's experts lie on at most this many nodes, reached "
        "once each over the network and fanned out over NVLink (DeepSeek-V3 §3.2.2: 4); None: unrestricted. It "
        "saves network crossings only under dispatcher flex (DeepEP/HybridEP), and only where it binds (fewer than "
        "the EP group's nodes; costmodel/moe/moe_dispatch.py)")
    dispatcher: Literal["alltoall", "allgather", "flex"] = Field(
        "alltoall", description="token dispatcher (Megatron-Core --moe-token-dispatcher-type): 'alltoall' (NCCL "
        "all-to-all: one network copy per remote expert; torchtitan expert_parallel_comm_backend 'standard', "
        "DeepSpeed-MoE's _AllToAll), 'flex' (DeepEP/HybridEP: one network copy per remote node holding one of the "
        "token's experts), 'allgather' (every rank gathers the EP group's tokens); costmodel/moe/moe_dispatch.py")
    dispatcher_backend: Literal["deepep", "hybridep"] = Field(
        "deepep", description="backend of dispatcher 'flex' (Megatron-Core --moe-flex-dispatcher-backend; "
        "torchtitan expert_parallel_comm_backend 'deepep' | 'hybridep'); both send a token once per remote node")
    capacity_factor: Optional[float] = Field(
        None, gt=0, description="expert capacity factor (Megatron-Core --moe-expert-capacity-factor, DeepSpeed-MoE "
        "capacity_factor): tokens beyond this x the mean per expert are dropped, so the busiest EP rank receives at "
        "most this x the mean; None: no token dropping")
    dispatcher_sms: Optional[PositiveInt] = Field(
        None, le=1024, description="SMs the dispatch/combine kernels hold while they run beside compute under an "
        "overlapped schedule (DualPipe, DualPipeV, plan.moe_a2a_overlap): Megatron-Core --moe-deepep-num-sms / "
        "--moe-hybridep-num-sms (--moe-flex-dispatcher-num-sms from core_v0.19.0), DeepEP Buffer.num_sms; None: 20, "
        "DeepEP's default and DeepSeek-V3's (§3.2.2). Of the GPU's SMs (costmodel/moe/moe_comm.py sm_fraction)")
    activation_clamp: Optional[float] = Field(
        None, gt=0, le=1e6, description="the experts' gated activation clamps its inputs to this value (GPT-OSS: "
        "7.0, config.json swiglu_limit; Megatron-Core activation_func_clamp_value, set by Megatron-Bridge "
        "models/gpt_oss/gpt_oss_bridge.py:83 at 067f987d): Megatron-Core runs the clamp as separate elementwise "
        "kernels before its fused activation (costmodel/moe/expert_elementwise.py); None: no clamp")
    expert_bias: bool = Field(
        False, description="the routed experts' linear layers carry biases (GPT-OSS; Megatron-Core add_bias_linear): "
        "the second one is added per expert, scaled by the routing weight, by separate elementwise kernels "
        "(costmodel/moe/expert_elementwise.py); the first is fused into the activation")

    @model_validator(mode="after")
    def _top_k_fits(self) -> "MoESpec":
        if self.top_k > self.num_experts:
            raise ValueError(f"top_k ({self.top_k}) must not exceed num_experts ({self.num_experts})")
        return self


class MLASpec(StrictModel):
    """Multi-head latent attention (DeepSeek-V2/V3; names as in DeepSeek-V3's config.json).

    Queries: h -> q_lora_rank (0: no query compression) -> heads x (qk_nope_head_dim + qk_rope_head_dim);
    keys/values: h -> kv_lora_rank + qk_rope_head_dim, then kv_lora_rank -> heads x (qk_nope_head_dim +
    v_head_dim); output: heads x v_head_dim -> h.
    """

    q_lora_rank: int = Field(ge=0, description="query compression rank (DeepSeek-V3: 1536); 0: none")
    kv_lora_rank: PositiveInt = Field(description="key/value compression rank (DeepSeek-V3: 512)")
    qk_nope_head_dim: PositiveInt = Field(description="per-head query/key width without RoPE (128)")
    qk_rope_head_dim: int = Field(ge=0, description="per-head decoupled RoPE width, key shared by heads (64)")
    v_head_dim: PositiveInt = Field(description="per-head value width (128)")


class AttentionSpec(LimitedSection):
    """Attention variants that change the attention core's work, not its weights (GPT-OSS: every other layer a
    128-token sliding window, learned per-head sink logits).

    Megatron-Core names (3rdparty/Megatron-LM of Megatron-Bridge 067f987d = Megatron-LM 2a75ac12): ``window_size``
    (w - 1, 0) and ``window_attn_skip_freq`` N, "one full attention layer after (N-1) SWA layers"
    (transformer/transformer_config.py:244-247; transformer/utils.py:531-542: layer_number, 1-indexed, is windowed
    iff ``layer_number % N != 0``); sinks are ``softmax_type: learnable`` (Megatron-Bridge 067f987d
    models/gpt_oss/gpt_oss_bridge.py:86-88 sets all three for GPT-OSS from its config.json)."""

    LIMITS: ClassVar[dict[str, float]] = {"sliding_window": MAX_SEQ_LEN, "full_attention_every": MAX_NUM_LAYERS}

    sliding_window: Optional[PositiveInt] = Field(
        None, description="keys a windowed layer's query attends to, itself included (config.json sliding_window; "
        "Megatron-Core window_size = (sliding_window - 1, 0)); None: every layer full causal attention")
    full_attention_every: Optional[PositiveInt] = Field(
        None, description="Megatron-Core window_attn_skip_freq N: layer l (1-indexed) has full attention iff "
        "l % N == 0 (GPT-OSS: 2); None: every layer windowed")
    sinks: bool = Field(False, description="learned per-head sink logits in the softmax (GPT-OSS; Megatron-Core "
                        "softmax_type 'learnable'): keeps the attention core off FlashAttention and FP8 attention "
                        "(Transformer Engine v2.14 attention/dot_product_attention/utils.py:728-736); runs on "
                        "cuDNN fused attention in BF16 (cuDNN >= 9.13.1, common/fused_attn/fused_attn.cpp:460-465)")

    @model_validator(mode="after")
    def _pattern_needs_window(self) -> "AttentionSpec":
        if self.full_attention_every is not None and self.sliding_window is None:
            raise ValueError("attention.full_attention_every needs attention.sliding_window")
        return self


class ModelSpec(LimitedSection):
    LIMITS: ClassVar[dict[str, float]] = {
        "num_layers": MAX_NUM_LAYERS, "hidden_size": MAX_HIDDEN_SIZE, "ffn_hidden_size": MAX_HIDDEN_SIZE,
        "head_dim": MAX_HIDDEN_SIZE, "num_attention_heads": MAX_ATTENTION_HEADS,
        "num_kv_heads": MAX_ATTENTION_HEADS, "vocab_size": MAX_VOCAB_SIZE}

    name: str = "model"
    num_layers: PositiveInt
    hidden_size: PositiveInt
    ffn_hidden_size: PositiveInt
    num_attention_heads: PositiveInt
    num_kv_heads: Optional[PositiveInt] = Field(None, description="GQA groups; default: num_attention_heads (MHA)")
    head_dim: Optional[PositiveInt] = Field(None, description="default: hidden_size / num_attention_heads")
    vocab_size: PositiveInt
    gated_mlp: bool = True
    tie_embeddings: bool = False
    moe: Optional[MoESpec] = None
    mla: Optional[MLASpec] = Field(None, description="multi-head latent attention; None: MHA/GQA")
    attention: Optional[AttentionSpec] = Field(None, description="sliding-window layers and attention sinks; None: "
                                               "full causal attention in every layer")
    num_mtp_layers: int = Field(0, ge=0, description="multi-token prediction modules on the last stage "
                                "(DeepSeek-V3 §2.2: 1), each a projection and one transformer layer sharing "
                                "the embedding and the output head")

    @model_validator(mode="after")
    def _shapes_consistent(self) -> "ModelSpec":
        kv = self.num_kv_heads or self.num_attention_heads
        if self.num_attention_heads % kv:
            raise ValueError(
                f"num_attention_heads ({self.num_attention_heads}) must be divisible by num_kv_heads ({kv})"
            )
        if self.head_dim is None and self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"hidden_size ({self.hidden_size}) must be divisible by num_attention_heads "
                f"({self.num_attention_heads}) unless head_dim is given"
            )
        if self.moe is not None and self.moe.first_dense_layers > self.num_layers:
            raise ValueError("moe.first_dense_layers must not exceed num_layers")
        return self

    @property
    def kv_heads(self) -> int:
        return self.num_kv_heads or self.num_attention_heads

    @property
    def head_size(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads
