"""A layer's activations, per token: the bytes it stores (memory) and all of them (elementwise traffic, the working
set), by the choice's recompute and the assumptions' activation model, and the extra time of selective recompute.

Stored activations: Korthikanti et al. 2022, "Reducing Activation Recomputation" (Table 2), itemized in
:mod:`parplan.costmodel.memory.memory`; selective recompute's policies (:func:`~parplan.costmodel.spec.assumptions.selective_policy`):
Megatron's attention core, per-op checkpointing of alternate matmuls, and DeepSeek-V3's (§3.2.3 / §3.3.2: RMSNorm
outputs and the MLA up-projections recomputed, the experts' SwiGLU inputs cached in FP8); DTensor sequence
parallelism's saved all-gathered inputs; the MoE layer's experts at the busiest EP rank's load.
"""

from __future__ import annotations

from dataclasses import dataclass

from parplan.costmodel.evaluation.choice_context import ChoiceContext, moe_busiest_load
from parplan.costmodel.evaluation.gemm_rates import GemmRates
from parplan.costmodel.memo import memoized
from parplan.costmodel.memory.memory import (alternate_matmul_activation_items, dense_layer_activation_items,
                                             mlp_activation_bytes)
from parplan.costmodel.spec.assumptions import selective_policy


@dataclass(frozen=True)
class Activations:
    """Activation bytes per token of a layer: what is stored (memory) and all of it (elementwise traffic,
    working set), by the choice's recompute and the assumptions' activation model; and the extra time of
    selective recompute."""

    per_op_sac: bool  # selective recompute checkpoints per op (alternate_matmuls)
    dense_per_token: float  # stored by a dense layer
    traffic_per_token: float  # all of a dense layer's activations
    moe_per_token: float  # stored by an MoE layer (0 without MoE)
    moe_traffic_per_token: float  # all of an MoE layer's activations (0 without MoE)
    recomputed_per_token: float  # stored by a fully recomputed layer
    stored_gathered: float  # DTensor SP's saved all-gathered inputs, per token (per-op SAC: none)
    full_layer_bytes: float  # the largest layer's activations, all of them, one micro-batch
    selective_s: float  # extra time from selective recompute, per layer and micro-batch
    moe_act_recomputed: bool  # selective recompute runs the experts' activation again (the deepseek_v3 policy)

    @staticmethod
    def of(ctx: ChoiceContext, rates: GemmRates, memo: dict | None = None) -> "Activations":
        """The activations of ``ctx``'s choice; with ``memo`` (:meth:`GemmRates.of`'s) shared by the choices of
        equal GemmRates key, SP, recompute granularity, EP and ETP, all of the choice it reads (the busiest EP
        rank's load and the routed experts' widths: :func:`moe_mlp_activation_per_token`)."""
        c = ctx.c
        key = ("Activations", c.tp, c.cp, c.micro_batch_size, c.cp_comm_type, ctx.comm.cp_a2a, ctx.sp, c.recompute,
               c.ep, c.etp)
        return memoized(memo, key, lambda: Activations._of(ctx, rates, memo))

    @staticmethod
    def _of(ctx: ChoiceContext, rates: GemmRates, memo: dict | None = None) -> "Activations":
        """The MoE layer's terms over the dense layer's (:func:`_dense_terms`: with ``memo``, shared by the choices of
        equal GemmRates key, SP and recompute granularity, all of the choice they read)."""
        c = ctx.c
        key = ("DenseActivations", c.tp, c.cp, c.micro_batch_size, c.cp_comm_type, ctx.comm.cp_a2a, ctx.sp, c.recompute)
        (per_op_sac, ds_selective, lb, dense_act_per_token, attn_act_per_token, rc_act_per_token, traffic_per_token,
         attn_traffic_per_token, gathered_per_token, stored_gathered, selective_dense) = memoized(
            memo, key, lambda: _dense_terms(ctx, rates))
        # a layer's activations, all of them (with DTensor SP, its gathered inputs too)
        tokens_tp_group = ctx.tokens_tp_group
        full_layer_bytes = [tokens_tp_group * (traffic_per_token + 2 * gathered_per_token)]
        moe_act_per_token = moe_traffic_per_token = 0.0
        if ctx.m.moe is not None:
            moe_act_per_token, moe_traffic_per_token = _moe_layer_per_token(ctx, lb, ds_selective, attn_act_per_token,
                                                                            attn_traffic_per_token)
            full_layer_bytes.append(tokens_tp_group * (moe_traffic_per_token + gathered_per_token))
        return Activations(per_op_sac, dense_act_per_token, traffic_per_token, moe_act_per_token, moe_traffic_per_token,
                           rc_act_per_token, stored_gathered, max(full_layer_bytes), selective_dense, ds_selective)


def _dense_terms(ctx: ChoiceContext, rates: GemmRates) -> tuple:
    """(per-op SAC, DeepSeek-V3's selective recompute, bytes per saved linear input, a dense layer's stored, its
    attention block's stored, a recomputed layer's stored, the dense layer's and its attention block's traffic, the
    gathered inputs', the stored gathered inputs' bytes per token, selective recompute's extra seconds): what
    :class:`Activations` reads of the choice but its EP and ETP."""
    a, c, m, arch = ctx.a, ctx.c, ctx.m, ctx.arch
    policy = selective_policy(a, m.mla is not None)
    per_op_sac = (c.recompute == "selective" and policy == "alternate_matmuls"
                  and a.activation_sbh_coefficient is None)
    # DeepSeek-V3 §3.2.3 / §3.3.2: RMSNorm outputs and the MLA up-projections recomputed, the experts'
    # SwiGLU inputs cached in FP8 and its output recomputed (Megatron-Core --recompute-modules layernorm
    # mla_up_proj moe_act)
    ds_selective = (c.recompute == "selective" and policy == "deepseek_v3"
                    and a.activation_sbh_coefficient is None)
    fp8 = ctx.precision == "fp8"
    lb = a.fp8_activation_bytes if fp8 else 2.0  # saved linear-layer inputs (TE keeps the FP8-cast input)
    mla = m.mla
    shape_kw = dict(v_dim=arch.v_dim, o_dim=arch.o_dim,
                    mla_latents=None if mla is None else (mla.q_lora_rank, mla.kv_lora_rank + mla.qk_rope_head_dim))
    dense_act_per_token, attn_act_per_token, sac_recompute_share = _stored_dense_per_token(
        ctx, per_op_sac, ds_selective, lb, shape_kw)
    rc_act_per_token = a.recomputed_layer_sbh_coefficient * ctx.h / (c.tp if (ctx.sp or a.activation_sbh_coefficient is not None) else 1)
    traffic_per_token, attn_traffic_per_token = _dense_traffic_per_token(ctx, shape_kw, dense_act_per_token,
                                                                         attn_act_per_token)
    gathered_per_token = _gathered_inputs_per_token(ctx)
    stored_gathered = 0.0 if per_op_sac else gathered_per_token  # per-op SAC recomputes the all-gathers
    selective_dense = _selective_recompute_s(ctx, rates, per_op_sac, ds_selective, sac_recompute_share,
                                             traffic_per_token)
    return (per_op_sac, ds_selective, lb, dense_act_per_token, attn_act_per_token, rc_act_per_token, traffic_per_token,
            attn_traffic_per_token, gathered_per_token, stored_gathered, selective_dense)


def _stored_dense_per_token(ctx: ChoiceContext, per_op_sac: bool, ds_selective: bool, lb: float,
                            shape_kw: dict) -> tuple[float, float, float]:
    """(a dense layer's, its attention block's, the share of the dense linear FLOPs per-op SAC recomputes) of the
    activation bytes per token a layer stores: the assumptions' sbh coefficient where one is set, else the itemized
    activations (memory.py) of per-op SAC or of the choice's recompute; ``lb`` bytes per saved linear input."""
    a, c, m, arch, h, sp = ctx.a, ctx.c, ctx.m, ctx.arch, ctx.h, ctx.sp
    sac_recompute_share = 0.0
    if a.activation_sbh_coefficient is not None:
        dense_act_per_token = a.activation_sbh_coefficient * h / c.tp
        attn_act_per_token = dense_act_per_token * 0.5
    elif per_op_sac:
        items, sac_mlp_items, sac_recompute_share = alternate_matmul_activation_items(
            h, arch.q_dim, arch.kv_dim, m.ffn_hidden_size, m.gated_mlp, m.num_attention_heads)
        dense_act_per_token = items.per_token(c.tp, sp)
        attn_act_per_token = dense_act_per_token - sac_mlp_items.per_token(c.tp, sp)
    else:
        items = dense_layer_activation_items(
            h, arch.q_dim, arch.k_dim, m.ffn_hidden_size, m.gated_mlp, m.num_attention_heads, ctx.s_rank,
            a.flash_attention, a.dropout_masks, keep_scores=(c.recompute != "selective"), linear_input_bytes=lb,
            recompute_norms=ds_selective, recompute_mla_up=ds_selective and m.mla is not None, **shape_kw)
        dense_act_per_token = items.per_token(c.tp, sp)
        attn_act_per_token = dense_act_per_token - mlp_activation_bytes(m.ffn_hidden_size, m.gated_mlp, lb) / c.tp
    return dense_act_per_token, attn_act_per_token, sac_recompute_share


def _dense_traffic_per_token(ctx: ChoiceContext, shape_kw: dict, dense_act_per_token: float,
                             attn_act_per_token: float) -> tuple[float, float]:
    """(a dense layer's, its attention block's) activation bytes per token, all of them, in BF16: the elementwise
    traffic's bytes (the stored ones where the assumptions set an sbh coefficient)."""
    a, c, m, arch, h = ctx.a, ctx.c, ctx.m, ctx.arch, ctx.h
    if a.activation_sbh_coefficient is not None:
        return dense_act_per_token, attn_act_per_token
    traffic_per_token = dense_layer_activation_items(
        h, arch.q_dim, arch.k_dim, m.ffn_hidden_size, m.gated_mlp, m.num_attention_heads, ctx.s_rank,
        a.flash_attention, a.dropout_masks, keep_scores=True, **shape_kw).per_token(c.tp, ctx.sp)
    return traffic_per_token, traffic_per_token - mlp_activation_bytes(m.ffn_hidden_size, m.gated_mlp) / c.tp


def _gathered_inputs_per_token(ctx: ChoiceContext) -> float:
    """DTensor sequence parallelism saves the all-gathered inputs of the column-parallel matmuls (QKV and the MLP's
    first linear), each 2·h per token unsharded instead of 2·h/TP: the bytes per token beyond the sharded ones;
    memory only, the time is unchanged."""
    a, c = ctx.a, ctx.c
    if ctx.sp and a.sequence_parallel_saves_gathered_inputs and a.activation_sbh_coefficient is None:
        return 2 * ctx.h * (1 - 1 / c.tp)
    return 0.0


def _moe_layer_per_token(ctx: ChoiceContext, lb: float, ds_selective: bool, attn_act_per_token: float,
                         attn_traffic_per_token: float) -> tuple[float, float]:
    """(stored, all) activation bytes per token of an MoE layer: its attention block's and its experts'
    (:func:`moe_mlp_activation_per_token`), or the assumptions' sbh coefficient where one is set."""
    a = ctx.a
    if a.activation_sbh_coefficient is not None:
        per_token = a.activation_sbh_coefficient * ctx.h / ctx.c.tp
        return per_token, per_token
    stored, every = moe_mlp_activation_per_token(ctx, lb, ds_selective)
    return attn_act_per_token + stored, attn_traffic_per_token + every


def _selective_recompute_s(ctx: ChoiceContext, rates: GemmRates, per_op_sac: bool, ds_selective: bool,
                           sac_recompute_share: float, traffic_per_token: float) -> float:
    """The extra time of selective recompute per dense layer and micro-batch: per-op SAC runs the forward of the
    matmuls not saved and of every elementwise op again; Megatron's recomputes the unfused attention core's forward
    (FlashAttention recomputes inside its kernel: nothing extra); DeepSeek-V3's adds the MLA up-projections' forward
    and the two RMSNorms (read input, write output)."""
    a, c, m, arch, h = ctx.a, ctx.c, ctx.m, ctx.arch, ctx.h
    tokens_gpu, fwd_share = ctx.tokens_gpu, ctx.fwd_share
    selective_dense = 0.0
    if per_op_sac:  # the forward of the matmuls not saved and of every elementwise op, again
        selective_dense = fwd_share * (sac_recompute_share * tokens_gpu * arch.dense_layer_linear_flops * rates.spf_dense
                                       + rates.traffic_s(traffic_per_token))
    elif c.recompute == "selective" and not a.flash_attention:
        selective_dense = rates.attn_core_s * fwd_share
    if ds_selective:  # the up-projections' forward again, and the two RMSNorms (read input, write output)
        mla = m.mla
        up_params = 0.0 if mla is None else (mla.q_lora_rank * arch.q_dim
                                             + mla.kv_lora_rank * m.num_attention_heads * (mla.qk_nope_head_dim + mla.v_head_dim))
        norm_bytes = 2 * 2 * (2 * h) / (c.tp if ctx.sp else 1)
        selective_dense += 2 * tokens_gpu * up_params * rates.spf_dense + ctx.tokens_tp_group * norm_bytes / ctx.hbm_Bps
    return selective_dense


def moe_mlp_activation_per_token(ctx: ChoiceContext, lb: float, ds_selective: bool) -> tuple[float, float]:
    """(stored, all) activation bytes per token of an MoE layer's shared and routed experts (memory.py
    mlp_activation_bytes): the routed ones at the busiest EP rank's load; ``lb`` bytes per saved linear input."""
    c, m, h, moe = ctx.c, ctx.m, ctx.h, ctx.m.moe
    gated, f_e, f_s = m.gated_mlp, moe.expert_ffn_hidden_size, ctx.arch.shared_expert_ffn
    shared = moe.num_shared_experts * mlp_activation_bytes(f_s, gated, lb) / c.tp
    shared_all = moe.num_shared_experts * mlp_activation_bytes(f_s, gated) / c.tp
    routed = moe.top_k * (lb * h * c.etp + mlp_activation_bytes(
        f_e, gated, lb, swiglu_inputs_bytes=lb if ds_selective else 2.0, recompute_activation=ds_selective)) / c.tp
    routed_all = moe.top_k * (2 * h * c.etp + mlp_activation_bytes(f_e, gated)) / c.tp
    busiest = moe_busiest_load(ctx)
    return shared + routed * busiest, shared_all + routed_all * busiest
