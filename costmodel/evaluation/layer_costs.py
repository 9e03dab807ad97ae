"""One layer of a choice on one GPU, per micro-batch: its GEMM rates, its activations, its TP and CP
communication, and the dense :class:`LayerCost` built from them (the pieces of
:func:`parplan.costmodel.evaluation.choice.choice_costs`; the MoE layer's: :mod:`moe_layer`).

:class:`ChoiceContext` holds what every piece reads (the spec, the choice, the GPU, the assumptions, the
architecture, the token counts and the choice's :class:`~parplan.costmodel.communication.comm.Comm` and
:class:`~parplan.costmodel.communication.data_parallel.DataParallel`); :class:`GemmRates` the seconds per FLOP of each
GEMM group and the attention core's time (:mod:`efficiency`); :class:`Activations` the bytes per token a
layer stores and moves (:mod:`memory`, Korthikanti et al. 2022); :class:`LayerComm` a layer's TP collectives
and CP attention communication (seed 001 §3, seed 003, :mod:`context_parallel`). FLOPs: :mod:`architecture`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from parplan.costmodel.moe import moe_dispatch
from parplan.costmodel.compute.architecture import Architecture
from parplan.costmodel.spec.assumptions import Assumptions, selective_policy
from parplan.costmodel.communication.comm import Comm, cp_attention_comm
from parplan.costmodel.communication.context_parallel import CpComm, attention_seq_len
from parplan.costmodel.communication.data_parallel import DataParallel
from parplan.costmodel.compute.efficiency import (attention_efficiency, hbm_bandwidth_gbps, linear_seconds_per_flop,
                                          max_linear_efficiency)
from parplan.costmodel.spec.hardware import GPU
from parplan.costmodel.compute.fp8_transpose import transpose_seconds
from parplan.costmodel.spec.host_floor import host_wait_s
from parplan.costmodel.memo import memoized
from parplan.costmodel.memory.memory import (alternate_matmul_activation_items, dense_layer_activation_items,
                                     mlp_activation_bytes)
from parplan.costmodel.spec.spec import ModelSpec, Spec

if TYPE_CHECKING:  # pragma: no cover  (the costs read a choice by attribute; no import cycle with costmodel.evaluation.choice)
    from parplan.costmodel.evaluation.choice import Choice


@dataclass(frozen=True)
class LayerCost:
    """Costs of one layer of a class on one GPU, per micro-batch (times) or resident (bytes)."""

    compute_s: float  # fwd+bwd FLOPs time
    tp_s: float  # exposed TP comm, fwd+bwd
    cp_s: float  # exposed CP ring comm
    ep_s: float  # exposed EP all-to-all
    zero_s: float  # exposed per-micro-batch ZeRO-2/3 traffic
    recompute_s: float  # extra time when this layer is fully recomputed
    recompute_comm: tuple[float, float, float]  # (tp, cp, ep) part of recompute_s
    selective_s: float  # extra time from selective recompute (already included in compute when chosen)
    states_bytes: float  # weights + grads + optimizer states
    act_bytes: float  # stored activations per in-flight micro-batch
    act_recomputed_bytes: float  # stored activations when fully recomputed
    dp_s: float  # exposed DP comm per step
    model_flops: float  # per micro-batch on this GPU, no recompute
    recompute_flops: float = 0.0  # extra FLOPs when fully recomputed (the forward again)
    linear_s: float = 0.0  # the linear GEMMs' part of compute_s (the only part with a weight gradient, ZB's W)
    a2a_s: float = 0.0  # EP all-to-all, fwd+bwd, none hidden: a paired schedule prices its exposure per rank
    #                     (costmodel/schedules/paired_overlap.py) and keeps ep_s 0

    @property
    def time_s(self) -> float:
        return self.compute_s + self.tp_s + self.cp_s + self.ep_s + self.zero_s


@dataclass(frozen=True)
class ChoiceContext:
    """What every piece of one choice's costs reads."""

    spec: Spec
    c: Choice
    gpu: GPU
    a: Assumptions
    arch: Architecture
    m: ModelSpec
    h: int  # hidden size
    seq: int  # sequence length
    domain: int  # NVLink domain size
    precision: str
    peak: float  # FLOP/s at the training precision's peak
    rate: float  # FLOP/s of large GEMMs at the training precision
    zero: int  # the ZeRO stage paid (effective_zero_stage)
    s_rank: int  # tokens of one sequence on a CP rank (seed 003: s = seq // cp)
    tokens_tp_group: int  # tokens a TP group processes per micro-batch
    tokens_gpu: float  # per-GPU share of token-FLOPs
    M: float  # GEMM rows: with or without SP, each TP rank multiplies every token
    sp: bool  # sequence parallelism on
    fwd_share: float  # F / (F + B)
    hbm_Bps: float
    comm: Comm
    dp: DataParallel

    @staticmethod
    def of(spec: Spec, c: Choice, gpu: GPU, a: Assumptions, arch: Architecture, domain: int,
           zero: int, memo: dict | None = None) -> "ChoiceContext":
        """``memo``: as :meth:`GemmRates.of`'s, shared with :meth:`Comm.of` (the links of equal degrees)."""
        precision = spec.training.precision
        peak = gpu.peak_tflops(precision) * 1e12
        rate = peak * max_linear_efficiency(a, gpu, precision)  # large GEMMs, at the training precision's peak
        seq = spec.training.seq_len
        s_rank = seq // c.cp
        tokens_tp_group = c.micro_batch_size * s_rank
        fwd_share = 1.0 / (1.0 + a.backward_to_forward_ratio)
        comm = Comm.of(c, gpu, a, domain, memo)
        return ChoiceContext(
            spec=spec, c=c, gpu=gpu, a=a, arch=arch, m=spec.model, h=spec.model.hidden_size, seq=seq, domain=domain,
            precision=precision, peak=peak, rate=rate, zero=zero, s_rank=s_rank, tokens_tp_group=tokens_tp_group,
            tokens_gpu=tokens_tp_group / c.tp, M=float(tokens_tp_group), sp=c.sequence_parallel_on,
            fwd_share=fwd_share, hbm_Bps=hbm_bandwidth_gbps(gpu, a) * 1e9, comm=comm,
            dp=DataParallel.of(spec, gpu, a, comm, zero, fwd_share))

    def recompute_comm(self, tp_fwd_s: float, cp_fwd_s: float, ep_s: float) -> tuple[float, float, float]:
        """The forward communication a fully recomputed layer repeats: its forward TP collectives, the CP
        attention communication's forward part, half of the all-to-all."""
        if not self.a.recompute_repeats_comm:
            return (0.0, 0.0, 0.0)
        return (tp_fwd_s, cp_fwd_s, ep_s / 2)


@dataclass(frozen=True)
class GemmRates:
    """Seconds per linear FLOP of each GEMM group, by its per-GPU shape (costmodel/compute/efficiency.py), the attention
    core's time per micro-batch, and the time of memory-bound elementwise traffic."""

    ctx: ChoiceContext
    up: int  # first MLP linear's width factor: 2 for a gated MLP (gate and up), else 1
    attn_gemms: list[tuple[float, float, float, float]]
    spf_dense: float  # seconds per linear FLOP of the dense layer (attention + MLP GEMMs)
    attn_core_s: float  # the attention core (QK^T, AV), fwd+bwd
    fp8_transpose_s: float = 0.0  # the dense layer's transposed FP8 copies on a TN-only generation (fp8_transpose.py)

    @staticmethod
    def of(ctx: ChoiceContext, memo: dict | None = None) -> "GemmRates":
        """The rates of ``ctx``'s choice; with ``memo`` (one per spec, GPU, assumptions and architecture: the
        solver's Problem) shared by the choices of equal (tp, cp, micro-batch size, CP comm type, CP a2a level),
        all of the choice it reads (the token counts and GEMM shapes follow from them)."""
        key = None
        if memo is not None:
            c = ctx.c
            key = ("GemmRates", c.tp, c.cp, c.micro_batch_size, c.cp_comm_type, ctx.comm.cp_a2a)
            hit = memo.get(key)
            if hit is not None:
                return GemmRates(ctx, *hit)
        out = GemmRates._of(ctx)
        if key is not None:
            memo[key] = (out.up, out.attn_gemms, out.spf_dense, out.attn_core_s, out.fp8_transpose_s)
        return out

    @staticmethod
    def _of(ctx: ChoiceContext) -> "GemmRates":
        a, gpu, c, m, arch, h, M = ctx.a, ctx.gpu, ctx.c, ctx.m, ctx.arch, ctx.h, ctx.M
        # CP comm type: the sequence one attention kernel call sees (context_parallel.py)
        # the attention core's mean head dim (d_qk + d_v)/2: the QKᵀ and PV widths per head (MLA: 192 and 128)
        head_dim = (arch.q_dim + arch.o_dim) / (2 * m.num_attention_heads)
        attn_eff = attention_efficiency(a, gpu, attention_seq_len(c.cp_comm_type, ctx.seq, c.cp, ctx.comm.cp_a2a), head_dim)
        attn_rate = gpu.peak_bf16_tflops * 1e12 * attn_eff if attn_eff is not None else ctx.rate  # BF16 FlashAttention
        sinks = m.attention is not None and m.attention.sinks
        # learned sinks keep FP8 attention off: under fp8_dpa Transformer Engine v2.14 disables every backend for
        # softmax_type != vanilla (attention/dot_product_attention/utils.py:728-736), so such a run attends in BF16
        if attn_eff is not None and a.fp8_attention and ctx.precision == "fp8" and not sinks:
            attn_rate *= a.fp8_attention_speedup  # FP8 dot-product attention (TE fp8_dpa, cuDNN FP8 fused attention)
        f_mlp = m.ffn_hidden_size
        up = 2 if m.gated_mlp else 1
        attn_gemms = arch.attention_gemms(M, c.tp)
        mlp_gemms = [(up * h * f_mlp, M, h, up * f_mlp / c.tp), (h * f_mlp, M, f_mlp / c.tp, h)]
        spf_dense = linear_seconds_per_flop(a, gpu, ctx.precision, ctx.peak, attn_gemms + mlp_gemms)
        if a.flash_attention:
            attn_core_s = ctx.tokens_gpu * arch.attention_core_flops(ctx.seq, a.attention_flops_causal_fraction) / attn_rate
        else:
            # unfused attention (before FlashAttention): batched GEMMs over the whole s x s score matrix, mask
            # applied afterwards, at the GEMM rate for their shapes (QK^T: s x d_head x s, AV: s x s x d_head);
            # the softmax/dropout passes over the scores are memory traffic (activation_traffic_passes)
            d_head, s_rank, seq = m.head_size, ctx.s_rank, ctx.seq
            attn_core_s = ctx.tokens_gpu * arch.attention_core_flops(seq, full_scores=True) * linear_seconds_per_flop(
                a, gpu, ctx.precision, ctx.peak, [(1.0, s_rank, d_head, seq), (1.0, s_rank, seq, d_head)])
        fp8_transpose_s = transpose_seconds(a, gpu, ctx.precision, ctx.hbm_Bps, attn_gemms + mlp_gemms)
        return GemmRates(ctx, up, attn_gemms, spf_dense, attn_core_s, fp8_transpose_s)

    def spf(self, gemms: list[tuple[float, float, float, float]]) -> float:
        ctx = self.ctx
        return linear_seconds_per_flop(ctx.a, ctx.gpu, ctx.precision, ctx.peak, gemms)

    def spf_bf16(self, gemms: list[tuple[float, float, float, float]]) -> float:
        """Seconds per FLOP of GEMMs that stay BF16 under FP8 training, the output head and the MoE router
        (DeepSeek-V3 §3.3.1: "the embedding module, the output head, MoE gating modules, normalization operators,
        and attention operators" keep BF16/FP32; Megatron-Core d98e8a64 megatron/core/models/gpt/gpt_model.py:272-277
        builds the output layer as tensor_parallel.ColumnParallelLinear, not a Transformer Engine FP8 layer, unless
        the MXFP8 output projection is on, and moe/router.py:111 runs the gating GEMM in the input or router dtype);
        the training precision's rate under BF16."""
        ctx = self.ctx
        if ctx.precision == "bf16":
            return self.spf(gemms)
        return linear_seconds_per_flop(ctx.a, ctx.gpu, "bf16", ctx.gpu.peak_bf16_tflops * 1e12, gemms)

    def traffic_s(self, per_token: float) -> float:
        """Memory-bound elementwise work (norms, activation functions, dropout, residual adds, unfused
        softmax): activation_traffic_passes x the layer's activation bytes (all of them in BF16, whatever is
        stored and in which format)."""
        ctx = self.ctx
        return ctx.a.activation_traffic_passes * ctx.tokens_tp_group * per_token / ctx.hbm_Bps


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
        return memoized(memo, key, lambda: Activations._of(ctx, rates))

    @staticmethod
    def _of(ctx: ChoiceContext, rates: GemmRates) -> "Activations":
        a, c, m, arch, h, sp = ctx.a, ctx.c, ctx.m, ctx.arch, ctx.h, ctx.sp
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
                recompute_norms=ds_selective, recompute_mla_up=ds_selective and mla is not None, **shape_kw)
            dense_act_per_token = items.per_token(c.tp, sp)
            attn_act_per_token = dense_act_per_token - mlp_activation_bytes(m.ffn_hidden_size, m.gated_mlp, lb) / c.tp
        rc_act_per_token = a.recomputed_layer_sbh_coefficient * h / (c.tp if (sp or a.activation_sbh_coefficient is not None) else 1)

        # all of a layer's activations, in BF16: the elementwise traffic's bytes
        if a.activation_sbh_coefficient is None:
            traffic_per_token = dense_layer_activation_items(
                h, arch.q_dim, arch.k_dim, m.ffn_hidden_size, m.gated_mlp, m.num_attention_heads, ctx.s_rank,
                a.flash_attention, a.dropout_masks, keep_scores=True, **shape_kw).per_token(c.tp, sp)
            attn_traffic_per_token = traffic_per_token - mlp_activation_bytes(m.ffn_hidden_size, m.gated_mlp) / c.tp
        else:
            traffic_per_token, attn_traffic_per_token = dense_act_per_token, attn_act_per_token
        # DTensor sequence parallelism saves the all-gathered inputs of the column-parallel matmuls (QKV and the
        # MLP's first linear), each 2·h per token unsharded instead of 2·h/TP; memory only, the time is unchanged
        gathered_per_token = 0.0
        if sp and a.sequence_parallel_saves_gathered_inputs and a.activation_sbh_coefficient is None:
            gathered_per_token = 2 * h * (1 - 1 / c.tp)
        stored_gathered = 0.0 if per_op_sac else gathered_per_token  # per-op SAC recomputes the all-gathers

        # a layer's activations, all of them (with DTensor SP, its gathered inputs too)
        tokens_tp_group = ctx.tokens_tp_group
        full_layer_bytes = [tokens_tp_group * (traffic_per_token + 2 * gathered_per_token)]
        moe = m.moe
        moe_act_per_token = moe_traffic_per_token = 0.0
        if moe is not None:
            if a.activation_sbh_coefficient is not None:
                moe_act_per_token = moe_traffic_per_token = a.activation_sbh_coefficient * h / c.tp
            else:
                stored, every = moe_mlp_activation_per_token(ctx, lb, ds_selective)
                moe_act_per_token, moe_traffic_per_token = attn_act_per_token + stored, attn_traffic_per_token + every
            full_layer_bytes.append(tokens_tp_group * (moe_traffic_per_token + gathered_per_token))

        tokens_gpu, fwd_share = ctx.tokens_gpu, ctx.fwd_share
        selective_dense = 0.0
        if per_op_sac:  # the forward of the matmuls not saved and of every elementwise op, again
            selective_dense = fwd_share * (sac_recompute_share * tokens_gpu * arch.dense_layer_linear_flops * rates.spf_dense
                                           + rates.traffic_s(traffic_per_token))
        elif c.recompute == "selective" and not a.flash_attention:
            selective_dense = rates.attn_core_s * fwd_share
        if ds_selective:  # the up-projections' forward again, and the two RMSNorms (read input, write output)
            up_params = 0.0 if mla is None else (mla.q_lora_rank * arch.q_dim
                                                 + mla.kv_lora_rank * m.num_attention_heads * (mla.qk_nope_head_dim + mla.v_head_dim))
            norm_bytes = 2 * 2 * (2 * h) / (c.tp if sp else 1)
            selective_dense += 2 * tokens_gpu * up_params * rates.spf_dense + tokens_tp_group * norm_bytes / ctx.hbm_Bps
        return Activations(per_op_sac, dense_act_per_token, traffic_per_token, moe_act_per_token, moe_traffic_per_token,
                           rc_act_per_token, stored_gathered, max(full_layer_bytes), selective_dense, ds_selective)


@dataclass(frozen=True)
class LayerComm:
    """A layer's tensor-parallel collectives and its CP attention communication, per micro-batch."""

    tp_block_collectives: int  # ring collectives per block (attention or MLP), fwd+bwd
    tp_one_s: float  # one of them, none hidden
    tp_overlap: float  # the share of a block's collectives its GEMMs may hide: tp_comm_overlap under SP, else 0
    cp: CpComm

    def tp_block_s(self, comm: Comm, gemm_s: float, collectives: int | None = None) -> float:
        """A block's TP collectives (``collectives``, default all of them, fwd+bwd) left exposed beside its linear
        GEMMs (``gemm_s``, the same passes): the ``tp_overlap`` share, at most what (tp-1)/tp of the GEMMs cover
        (``Comm.exposed``, the bound shared with the EP and DP overlaps). Transformer Engine's userbuffers overlap
        (what ``--tp-comm-overlap`` and AsyncTP run) splits the GEMM into tp chunks and runs one ring exchange
        beside each chunk but the last, whose input is the last to arrive (TransformerEngine@d0067d0d
        ``transformer_engine/common/comm_gemm_overlap/comm_gemm_overlap.cpp:1161-1199``,
        ``CommOverlapP2PBase::split_overlap_ag``; ``pytorch/module/base.py:350-387``: every collective of an
        attention or MLP block beside one of the block's GEMMs, the forward ones ring exchanges of tp chunks), so
        a collective longer than (tp-1)/tp of its GEMM leaves the rest exposed. The window is the block's GEMMs
        together (fwd+bwd), not each collective's own."""
        n, tp = self.tp_block_collectives if collectives is None else collectives, comm.c.tp
        return comm.exposed(n * self.tp_one_s, self.tp_overlap, gemm_s * (tp - 1) / tp)

    def tp_blocks_s(self, comm: Comm, block_gemms_s: tuple[float, ...], fwd_share: float) -> tuple[float, float]:
        """(fwd+bwd, what a recomputed forward repeats) of the TP collectives of a layer whose blocks' linear GEMMs
        take ``block_gemms_s`` (fwd+bwd each): :meth:`tp_block_s` per block, the recomputed forward's two collectives
        per block beside the forward share of its GEMMs."""
        return (sum(self.tp_block_s(comm, g) for g in block_gemms_s),
                sum(self.tp_block_s(comm, g * fwd_share, 2) for g in block_gemms_s))

    @staticmethod
    def of(ctx: ChoiceContext, rates: GemmRates, memo: dict | None = None) -> "LayerComm":
        """:meth:`_of`; with ``memo`` (:meth:`GemmRates.of`'s) shared by the choices of equal GemmRates key, SP,
        world size and domain, all of the choice it reads (the TP and CP links follow from tp, cp, the world size
        and the domain: comm.Comm.of)."""
        c = ctx.c
        key = ("LayerComm", c.tp, c.cp, c.micro_batch_size, c.cp_comm_type, ctx.comm.cp_a2a, ctx.sp, c.num_gpus,
               ctx.domain)
        return memoized(memo, key, lambda: LayerComm._of(ctx, rates))

    @staticmethod
    def _of(ctx: ChoiceContext, rates: GemmRates) -> "LayerComm":
        """Communication per layer per micro-batch (fwd+bwd), seed 001 §3 / seed 003.

        TP collectives per block (attention or MLP), each a ring all-gather / reduce-scatter of one b·s·h
        activation (an all-reduce counts two): without SP an all-reduce forward and one backward (4); with
        SP an all-gather and a reduce-scatter forward, their transposes backward, and the all-gather of the
        block's sequence-sharded input again for the column-parallel weight gradient (5; Megatron-LM
        megatron/core/tensor_parallel/layers.py at 32efeffd, LinearWithGradAccumulationAndAsyncCommunication
        .backward: ``if ctx.sequence_parallel: handle = dist_all_gather_func(all_gather_buffer, input, ...)``).
        TP-comm overlap only with SP (Megatron arguments.py asserts --sequence-parallel for --tp-comm-overlap).
        """
        a, c, arch, sp, comm = ctx.a, ctx.c, ctx.arch, ctx.sp, ctx.comm
        act_group_bytes = ctx.tokens_tp_group * ctx.h * 2  # one b·s·h bf16 activation of the TP group
        tp_block_collectives = 5 if (sp and a.tp_sp_weight_grad_regather) else 4
        tp_overlap = a.tp_comm_overlap if sp else 0.0
        tp_one = comm.ring_gather_s("tp", c.tp, act_group_bytes)
        kv_dims = arch.q_dim + arch.o_dim if a.cp_kv_heads_repeated else arch.k_dim + arch.v_dim  # repeat_kv: query heads
        kv_bytes = ctx.tokens_tp_group * kv_dims * 2 / (c.tp if a.cp_kv_sharded_by_tp else 1)  # K and V chunk
        cp = cp_attention_comm(c, a, ctx.gpu, comm.links, ctx.domain, c.num_gpus, kv_bytes, ctx.tokens_tp_group, arch,
                               rates.attn_core_s, ctx.fwd_share, comm.cp_a2a)
        return LayerComm(tp_block_collectives, tp_one, tp_overlap, cp)


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


def moe_busiest_load(ctx: ChoiceContext) -> float:
    """The busiest EP rank's routed tokens over the mean (costmodel/moe/moe_dispatch.py busiest_rank_load: 1 at EP 1,
    growing as √(ln ep), at most the capacity factor)."""
    return moe_dispatch.busiest_load(ctx.c.ep, ctx.a, ctx.m.moe)


def dense_layer_params_gpu(ctx: ChoiceContext) -> float:
    """A dense layer's parameters on one GPU (over TP)."""
    return ctx.arch.dense_layer_params / ctx.c.tp


def moe_params_gpu(ctx: ChoiceContext) -> tuple[float, float]:
    """An MoE layer's parameters on one GPU: (non-expert: attention, router, shared experts, over TP;
    routed experts, over EP x ETP)."""
    c, arch = ctx.c, ctx.arch
    return arch.moe_layer_nonexpert_params / c.tp, arch.expert_params_per_layer / (c.ep * c.etp)


def dense_layer_cost(ctx: ChoiceContext, rates: GemmRates, acts: Activations, lc: LayerComm,
                     memo: dict | None = None) -> LayerCost:
    """A dense layer: its :func:`dense_layer_times` (shared through ``memo``), its ZeRO-2/3 and DP exposure, its
    states, and what a full recompute repeats."""
    c, arch, dp, fwd_share = ctx.c, ctx.arch, ctx.dp, ctx.fwd_share
    t = dense_layer_times(ctx, rates, acts, lc, memo)
    dense_grp = ctx.comm.dense_group
    dense_params_gpu = dense_layer_params_gpu(ctx)
    rc_comm = ctx.recompute_comm(t.tp_fwd_s, lc.cp.fwd_s, 0.0)
    return LayerCost(
        compute_s=t.compute_s,
        tp_s=t.tp_s,
        cp_s=lc.cp.total_s,
        ep_s=0.0,
        zero_s=dp.zero_exposed([(dense_params_gpu, dense_grp)], t.window_s),
        recompute_s=t.window_s * fwd_share + sum(rc_comm),
        recompute_comm=rc_comm,
        selective_s=acts.selective_s,
        states_bytes=dp.states(dense_params_gpu, dense_grp)
        + dp.fp8_weight_cache(dense_params_gpu - arch.norm_params_per_layer / c.tp),
        act_bytes=t.act_bytes,
        act_recomputed_bytes=ctx.tokens_tp_group * acts.recomputed_per_token,
        dp_s=dp.dp_exposed([(dense_params_gpu, dense_grp)], t.window_s),
        model_flops=t.model_flops,
        recompute_flops=t.model_flops * fwd_share,
        linear_s=t.linear_s,
    )


@dataclass(frozen=True)
class LayerTimes:
    """A layer's FLOPs, times and activations before its ZeRO/DP and state terms: all that its token counts, GEMM
    and all-to-all shapes, links and the schedule's EP terms fix (:func:`dense_layer_times`,
    moe_layer.moe_layer_times), each as its :class:`LayerCost` holds it."""

    model_flops: float  # per micro-batch on this GPU, no recompute
    linear_s: float  # the linear GEMMs' part of window_s
    window_s: float  # the layer's compute without selective recompute: the window its ZeRO/DP traffic hides in
    compute_s: float  # LayerCost.compute_s: window_s and selective recompute's extra time
    tp_s: float  # TP (and ETP) collectives, fwd+bwd
    tp_fwd_s: float  # their forward part (what a recomputed forward repeats)
    ep_s: float  # exposed EP all-to-all (0 under a paired schedule)
    a2a_s: float  # the all-to-all, none hidden, under a paired schedule (else 0)
    act_bytes: float  # stored activations per in-flight micro-batch
    # (share of the layer's passes, share of the network it keeps busy) of the all-to-all beside the DP collectives
    # of groups off NVLink (costmodel/communication/shared_links.py, DataParallel.dp_exposed); none beside a dense layer's
    network_beside: tuple[float, float] = (0.0, 0.0)


def dense_layer_times(ctx: ChoiceContext, rates: GemmRates, acts: Activations, lc: LayerComm,
                      memo: dict | None = None) -> LayerTimes:
    """A dense layer's :class:`LayerTimes`: attention and MLP GEMMs at their shapes' rates, the attention core, the
    elementwise traffic, its TP collectives. With ``memo`` (:meth:`GemmRates.of`'s) shared by the choices of equal
    GemmRates key, SP, recompute granularity, world size and domain: all of the choice it reads (Activations' dense
    terms read no EP degree; the TP link follows from tp, the world size and the domain)."""
    c = ctx.c
    key = ("DenseLayerTimes", c.tp, c.cp, c.micro_batch_size, c.cp_comm_type, ctx.comm.cp_a2a, ctx.sp, c.recompute,
           c.num_gpus, ctx.domain)
    return memoized(memo, key, lambda: _dense_layer_times(ctx, rates, acts, lc))


def _dense_layer_times(ctx: ChoiceContext, rates: GemmRates, acts: Activations, lc: LayerComm) -> LayerTimes:
    a, arch, tokens_gpu = ctx.a, ctx.arch, ctx.tokens_gpu
    dense_flops = tokens_gpu * (arch.dense_layer_linear_flops + arch.attention_core_flops(ctx.seq, a.attention_flops_causal_fraction))
    dense_linear = tokens_gpu * arch.dense_layer_linear_flops * rates.spf_dense
    dense_compute = dense_linear + rates.attn_core_s + rates.traffic_s(acts.traffic_per_token) + rates.fp8_transpose_s
    # each block's TP collectives beside the block's own GEMMs (LayerComm.tp_block_s): attention, then the MLP
    attn_linear = tokens_gpu * arch.attention_linear_flops * rates.spf_dense
    tp_s, tp_fwd_s = lc.tp_blocks_s(ctx.comm, (attn_linear, dense_linear - attn_linear), ctx.fwd_share)
    # the host's launch floor: the layer takes max(GPU, host) (host_floor.py)
    gpu_s = dense_compute + acts.selective_s + tp_s + lc.cp.total_s
    host_wait = host_wait_s(a, gpu_s, a.host_kernels_per_dense_layer)
    return LayerTimes(model_flops=dense_flops, linear_s=dense_linear, window_s=dense_compute,
                      compute_s=dense_compute + acts.selective_s + host_wait, tp_s=tp_s, tp_fwd_s=tp_fwd_s,
                      ep_s=0.0, a2a_s=0.0,
                      act_bytes=ctx.tokens_tp_group * (acts.dense_per_token + 2 * acts.stored_gathered))
