"""The GEMM rates of one choice's layer on one GPU: seconds per linear FLOP of each GEMM group by its per-GPU shape
(:mod:`parplan.costmodel.compute.efficiency`), the attention core's time per micro-batch (FlashAttention at the
attention efficiency, or unfused batched GEMMs over the score matrix), FP8's transposed copies
(:mod:`parplan.costmodel.compute.fp8_transpose`) and the time of memory-bound elementwise traffic. FLOPs:
:mod:`parplan.costmodel.compute.architecture`; the sequence one attention kernel call sees under CP:
:mod:`parplan.costmodel.communication.context_parallel`.
"""

from __future__ import annotations

from dataclasses import dataclass

from parplan.costmodel.communication.context_parallel import attention_seq_len
from parplan.costmodel.compute.eager_elementwise import eager_extra_bytes_per_token, layer_widths
from parplan.costmodel.compute.efficiency import attention_efficiency, linear_seconds_per_flop
from parplan.costmodel.compute.fp8_transpose import transpose_seconds
from parplan.costmodel.evaluation.choice_context import ChoiceContext


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

    def eager_s(self, swiglu_width: float) -> float:
        """The extra HBM time of unfused elementwise ops per micro-batch, forward + backward
        (``assumptions.eager_elementwise``, costmodel/compute/eager_elementwise.py); 0 under fused kernels.
        ``swiglu_width``: the gated MLP's branch width per token of the TP group on this GPU (0: no gated MLP)."""
        ctx = self.ctx
        if not ctx.a.eager_elementwise:
            return 0.0
        fwd, bwd = eager_extra_bytes_per_token(layer_widths(ctx.arch, ctx.c.tp, ctx.sp, swiglu_width))
        return ctx.tokens_tp_group * (fwd + bwd) / ctx.hbm_Bps
