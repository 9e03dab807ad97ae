"""A layer's tensor-parallel collectives and its context-parallel attention communication, per micro-batch
(seed 001 §3, seed 003): the TP ring collectives of each block and what of them the block's GEMMs hide
(Transformer Engine's userbuffers overlap), and the CP attention communication
(:func:`parplan.costmodel.communication.comm.cp_attention_comm`, :mod:`parplan.costmodel.communication.context_parallel`).
"""

from __future__ import annotations

from dataclasses import dataclass

from parplan.costmodel.communication.comm import Comm, cp_attention_comm
from parplan.costmodel.communication.mesh import layer_world_key
from parplan.costmodel.communication.context_parallel import CpComm
from parplan.costmodel.evaluation.choice_context import ChoiceContext
from parplan.costmodel.evaluation.gemm_rates import GemmRates
from parplan.costmodel.memo import memoized
from parplan.costmodel.moe.moe_comm import REFERENCE_SM_COUNT, reserved_sm_time_s


@dataclass(frozen=True)
class LayerComm:
    """A layer's tensor-parallel collectives and its CP attention communication, per micro-batch."""

    tp_block_collectives: int  # ring collectives per block (attention or MLP), fwd+bwd
    tp_one_s: float  # one of them, none hidden
    tp_overlap: float  # the share of a block's collectives its GEMMs may hide: tp_comm_overlap under SP, else 0
    cp: CpComm
    pairs: bool = False  # tp_overlap_pairs: each collective beside its own GEMM (else the block's pooled window)
    row_shares: tuple[float, float] = (0.5, 0.5)  # (attention, MLP): the row-parallel GEMM's share of the block's FLOPs
    sm_fraction: float = 0.0  # tp_overlap_comm_sms / the GPU's SMs, 0 without the overlap
    sm_margin: bool = True  # tp_overlap_sm_margin: the GEMMs beside SM-based kernels run on the rest the whole time
    rs_splits: int = 0  # tp_overlap_rs_splits: chunks of the pipelined forward reduce-scatter (0: a ring exchange)

    def tp_block_s(self, comm: Comm, gemm_s: float, fwd_share: float, row_share: float,
                   forward_only: bool = False) -> float:
        """A block's TP collectives (all, fwd+bwd; ``forward_only``: a recomputed forward's two) left exposed beside its
        linear GEMMs (``gemm_s``, fwd+bwd): with ``pairs`` (knob ``tp_overlap_pairs``) :meth:`paired_s`; else the
        ``tp_overlap`` share, at most what (tp-1)/tp of the block's GEMMs (of the forward's: ``fwd_share``) cover
        together (``Comm.exposed``), the window pooled over the block's collectives, no SM held, no chunk exposed."""
        if self.pairs:
            return self.paired_s(comm, gemm_s, fwd_share, row_share, forward_only)
        n, window = (2, gemm_s * fwd_share) if forward_only else (self.tp_block_collectives, gemm_s)
        return comm.exposed(n * self.tp_one_s, self.tp_overlap, window * (comm.c.tp - 1) / comm.c.tp)

    def paired_s(self, comm: Comm, gemm_s: float, fwd_share: float, row_share: float,
                 forward_only: bool = False) -> float:
        """A block's TP collectives left exposed, each beside its own GEMM (``gemm_s``: the block's linear GEMMs, fwd+bwd,
        ``row_share`` of them in the row-parallel one; ``forward_only``: a recomputed forward's two), plus the time the
        SM-based overlap kernels take from the GEMMs beside them. Transformer Engine's userbuffers (what
        ``--tp-comm-overlap`` runs; TransformerEngine@d0067d0d ``pytorch/module/base.py:350-395`` initialize_ub's
        methods) pair each collective with one GEMM and wait for both (``cudaStreamWaitEvent(stream_main, ...)``):
        the forward all-gather with the column-parallel GEMM and the output gradient's with the row-parallel input
        gradient (ring exchange: tp chunks, tp-1 exchanges on copy engines beside them, so at most (tp-1)/tp of the GEMM
        hides it, ``common/comm_gemm_overlap/comm_gemm_overlap.cpp:1161-1199`` split_overlap_ag); the forward
        reduce-scatter with the row-parallel GEMM (``tp_overlap_rs_splits`` chunks, each reduce-scattered after its
        GEMM chunk: the last chunk's 1/n is never hidden, cpp:611-760 split_overlap_rs; 0: a ring exchange as the
        all-gathers); the re-gathered input and the input gradient's reduce-scatter ('bulk') with the column-parallel
        input- and weight-gradient GEMMs, whole. The pipelined and bulk kernels hold ``tp_overlap_comm_sms`` of the SMs
        (x of them): with ``tp_overlap_sm_margin`` (TE >= 2.0) their GEMMs run on the rest the whole time (cpp:143
        ``_math_sms``), x/(1-x) more; without (TE < 2.0) only while the collective runs
        (moe_comm.reserved_sm_time_s, as the EP dispatcher's SMs). Each pair's exposure is
        ``Comm.exposed`` (the share ``tp_overlap``, at most what its window covers); with ``tp_overlap`` 0 every
        collective is exposed whole and no SM is held. Backward passes split the GEMMs' backward share evenly between
        the input and the weight gradient (B = 2F)."""
        x, ov, tp, n = self.tp_one_s, self.tp_overlap, comm.c.tp, self.tp_block_collectives
        ring = (tp - 1) / tp
        col_f, row_f = (1 - row_share) * fwd_share * gemm_s, row_share * fwd_share * gemm_s
        col_b, row_b = (1 - row_share) * (1 - fwd_share) * gemm_s / 2, row_share * (1 - fwd_share) * gemm_s / 2
        s = self.rs_splits
        rs_f = max(comm.exposed(x, ov, row_f * (s - 1) / s), x / s) if s > 0 and ov > 0 else comm.exposed(x, ov, ring * row_f)
        out = comm.exposed(x, ov, ring * col_f) + rs_f
        held = [row_f] if s > 0 else []  # the pipelined reduce-scatter's GEMM; a ring exchange holds 1 SM, priced 0
        if not forward_only:
            out += comm.exposed(x, ov, ring * row_b) + comm.exposed(x, ov, col_b)  # output grad's AG; input grad's RS
            held += [col_b, col_b] if n >= 5 else [col_b]
            if n >= 5:  # SP re-gathers the column-parallel input for the weight gradient, beside the input gradient
                out += comm.exposed(x, ov, col_b)
        f = self.sm_fraction if ov > 0 else 0.0
        if f <= 0:
            return out
        if self.sm_margin:  # the GEMM launched on the SMs less the kernels', the whole time
            return out + sum(held) * f / (1.0 - f)
        return out + sum(reserved_sm_time_s(g, x, f) for g in held)  # the kernels' SMs, only while they run

    def tp_blocks_s(self, comm: Comm, block_gemms_s: tuple[float, ...], fwd_share: float) -> tuple[float, float]:
        """(fwd+bwd, what a recomputed forward repeats) of the TP collectives of a layer whose blocks' linear GEMMs
        take ``block_gemms_s`` (fwd+bwd each; attention first, then the MLP or shared experts): :meth:`tp_block_s` per
        block, the recomputed forward's two collectives per block beside the forward's GEMMs."""
        shares = self.row_shares
        return (sum(self.tp_block_s(comm, g, fwd_share, shares[min(i, 1)]) for i, g in enumerate(block_gemms_s)),
                sum(self.tp_block_s(comm, g, fwd_share, shares[min(i, 1)], True) for i, g in enumerate(block_gemms_s)))

    @staticmethod
    def of(ctx: ChoiceContext, rates: GemmRates, memo: dict | None = None) -> "LayerComm":
        """:meth:`_of`; with ``memo`` (:meth:`GemmRates.of`'s) shared by the choices of equal GemmRates key, SP,
        world key and domain, all of the choice it reads (the TP and CP links follow from tp, cp, the world key
        and the domain: comm.Comm.of)."""
        c = ctx.c
        key = ("LayerComm", c.tp, c.cp, c.micro_batch_size, c.cp_comm_type, ctx.comm.cp_a2a, ctx.sp,
               layer_world_key(c.num_gpus, ctx.domain, c.tp, c.cp), ctx.domain)
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
        # the row-parallel GEMM's share of each block: the output projection of the attention's, FC2 of the MLP's
        row_shares = (arch.o_dim * ctx.h / arch.attention_params, 1.0 / (3.0 if ctx.m.gated_mlp else 2.0))
        pairs = a.tp_overlap_pairs and tp_overlap > 0
        sms = ctx.gpu.sm_count or REFERENCE_SM_COUNT
        sm_fraction = min(a.tp_overlap_comm_sms, sms - 1) / sms if tp_overlap > 0 else 0.0
        kv_dims = arch.q_dim + arch.o_dim if a.cp_kv_heads_repeated else arch.k_dim + arch.v_dim  # repeat_kv: query heads
        kv_bytes = ctx.tokens_tp_group * kv_dims * 2 / (c.tp if a.cp_kv_sharded_by_tp else 1)  # K and V chunk
        cp = cp_attention_comm(c, a, ctx.gpu, comm.links, ctx.domain, c.num_gpus, kv_bytes, ctx.tokens_tp_group, arch,
                               rates.attn_core_s, ctx.fwd_share, comm.cp_a2a)
        return LayerComm(tp_block_collectives, tp_one, tp_overlap, cp, pairs, row_shares, sm_fraction,
                         a.tp_overlap_sm_margin, a.tp_overlap_rs_splits)
