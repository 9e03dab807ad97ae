"""One layer of a choice on one GPU, per micro-batch: the dense :class:`LayerCost` and :class:`LayerTimes` (the pieces of
:func:`parplan.costmodel.evaluation.choice.choice_costs`; the MoE layer's: :mod:`moe_layer`), built from the
choice's context (:mod:`choice_context`), its GEMM rates (:mod:`gemm_rates`), its activations (:mod:`activations`,
Korthikanti et al. 2022) and its TP and CP communication (:mod:`layer_comm`, seed 001 §3, seed 003); a layer's
parameters on one GPU. FLOPs: :mod:`architecture`; the host's launch floor: :mod:`host_floor`.
"""

from __future__ import annotations

from dataclasses import dataclass

from parplan.costmodel.communication.mesh import layer_world_key
from parplan.costmodel.evaluation.activations import Activations
from parplan.costmodel.evaluation.choice_context import ChoiceContext
from parplan.costmodel.evaluation.gemm_rates import GemmRates
from parplan.costmodel.evaluation.layer_comm import LayerComm
from parplan.costmodel.memo import memoized
from parplan.costmodel.spec.host_floor import host_wait_s


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
    # the attention block's part of compute_s (its linear GEMMs and core, fwd+bwd; the rest is the MLP's) and the
    # dispatch's share of one pass's all-to-all: a paired schedule prices its pairs per component with them
    # (paired_overlap.component_phases_s); attn_s None: per chunk (Assumptions.paired_overlap_by_component off)
    attn_s: float | None = None
    dispatch_share: float = 0.5

    @property
    def time_s(self) -> float:
        return self.compute_s + self.tp_s + self.cp_s + self.ep_s + self.zero_s


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
        attn_s=t.attn_s,
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
    attn_s: float | None = None  # LayerCost.attn_s
    dispatch_share: float = 0.5  # LayerCost.dispatch_share
    host_sync_s: float = 0.0  # part of compute_s: the GPU idle after an MoE dispatcher's sync (host_floor.moe_sync_exposed_s)


def dense_layer_times(ctx: ChoiceContext, rates: GemmRates, acts: Activations, lc: LayerComm,
                      memo: dict | None = None) -> LayerTimes:
    """A dense layer's :class:`LayerTimes`: attention and MLP GEMMs at their shapes' rates, the attention core, the
    elementwise traffic, its TP collectives. With ``memo`` (:meth:`GemmRates.of`'s) shared by the choices of equal
    GemmRates key, SP, recompute granularity, world key and domain: all of the choice it reads (Activations' dense
    terms read no EP degree; the TP link follows from tp, the world key (mesh.layer_world_key) and domain)."""
    c = ctx.c
    key = ("DenseLayerTimes", c.tp, c.cp, c.micro_batch_size, c.cp_comm_type, ctx.comm.cp_a2a, ctx.sp, c.recompute,
           layer_world_key(c.num_gpus, ctx.domain, c.tp, c.cp), ctx.domain)
    return memoized(memo, key, lambda: _dense_layer_times(ctx, rates, acts, lc))


def _dense_layer_times(ctx: ChoiceContext, rates: GemmRates, acts: Activations, lc: LayerComm) -> LayerTimes:
    a, arch, tokens_gpu = ctx.a, ctx.arch, ctx.tokens_gpu
    dense_flops = tokens_gpu * (arch.dense_layer_linear_flops + arch.attention_core_flops(ctx.seq, a.attention_flops_causal_fraction))
    dense_linear = tokens_gpu * arch.dense_layer_linear_flops * rates.spf_dense
    gated_width = ctx.m.ffn_hidden_size / ctx.c.tp if ctx.m.gated_mlp else 0.0
    dense_compute = (dense_linear + rates.attn_core_s + rates.traffic_s(acts.traffic_per_token) + rates.fp8_transpose_s
                     + rates.eager_s(gated_width))
    # each block's TP collectives beside the block's own GEMMs (LayerComm.tp_block_s): attention, then the MLP
    attn_linear = tokens_gpu * arch.attention_linear_flops * rates.spf_dense
    tp_s, tp_fwd_s = lc.tp_blocks_s(ctx.comm, (attn_linear, dense_linear - attn_linear), ctx.fwd_share)
    # the host's launch floor: the layer takes max(GPU, host) (host_floor.py)
    gpu_s = dense_compute + acts.selective_s + tp_s + lc.cp.total_s
    host_wait = host_wait_s(a, gpu_s, a.host_kernels_per_dense_layer)
    return LayerTimes(model_flops=dense_flops, linear_s=dense_linear, window_s=dense_compute,
                      compute_s=dense_compute + acts.selective_s + host_wait, tp_s=tp_s, tp_fwd_s=tp_fwd_s,
                      ep_s=0.0, a2a_s=0.0,
                      act_bytes=ctx.tokens_tp_group * (acts.dense_per_token + 2 * acts.stored_gathered),
                      attn_s=attn_linear + rates.attn_core_s if a.paired_overlap_by_component else None)
