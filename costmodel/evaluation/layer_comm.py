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
        kv_dims = arch.q_dim + arch.o_dim if a.cp_kv_heads_repeated else arch.k_dim + arch.v_dim  # repeat_kv: query heads
        kv_bytes = ctx.tokens_tp_group * kv_dims * 2 / (c.tp if a.cp_kv_sharded_by_tp else 1)  # K and V chunk
        cp = cp_attention_comm(c, a, ctx.gpu, comm.links, ctx.domain, c.num_gpus, kv_bytes, ctx.tokens_tp_group, arch,
                               rates.attn_core_s, ctx.fwd_share, comm.cp_a2a)
        return LayerComm(tp_block_collectives, tp_one, tp_overlap, cp)
