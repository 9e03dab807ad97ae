"""One MoE layer of a choice on one GPU, per micro-batch (a piece of :func:`parplan.costmodel.evaluation.choice.choice_costs`,
beside :func:`~parplan.costmodel.evaluation.layer_costs.dense_layer_cost`): the non-expert and routed-expert GEMMs, the EP
all-to-all and the expert-TP collectives (:func:`moe_layer_times`, shared by the choices whose layer shapes, links
and schedule terms agree), then its ZeRO/DP and state terms over the dense and the expert-DP groups
(:func:`moe_layer_cost`). Sources: DeepSeek-V3 §3.2.2 (the SMs an overlapped schedule's all-to-all holds), Megatron-Core
moe/token_dispatcher.py (the expert-TP collectives), :mod:`moe_comm`, :mod:`moe_dispatch`, :mod:`paired_overlap`.
"""

from __future__ import annotations

import functools

from parplan.costmodel.moe import moe_comm, moe_dispatch
from parplan.costmodel.communication import shared_links
from parplan.costmodel.communication.mesh import layer_world_key
from parplan.costmodel.moe.expert_elementwise import expert_elementwise_bytes
from parplan.costmodel.compute.fp8_transpose import transpose_seconds
from parplan.costmodel.memo import memoized
from parplan.costmodel.spec import host_floor
from parplan.costmodel.evaluation.activations import Activations
from parplan.costmodel.evaluation.choice_context import ChoiceContext, moe_busiest_load
from parplan.costmodel.evaluation.gemm_rates import GemmRates
from parplan.costmodel.evaluation.layer_comm import LayerComm
from parplan.costmodel.evaluation.layer_costs import LayerCost, LayerTimes, moe_params_gpu
from parplan.costmodel.schedules.paired_overlap import (ChunkWork, combined_1f1b_exposed_s, combined_1f1b_key,
                                              combined_1f1b_lone_share)


def moe_layer_times(ctx: ChoiceContext, rates: GemmRates, acts: Activations, lc: LayerComm,
                    memo: dict | None = None) -> LayerTimes:
    """An MoE layer's :class:`~layer_costs.LayerTimes`; with ``memo`` (gemm_rates.GemmRates.of's) shared by the
    choices of equal Activations key, schedule terms (paired, and the all-to-all overlap: together whether it hides
    the all-to-all, moe_comm.overlaps_all_to_all), FP8 dispatch, world key and domain: all of the choice it
    reads (the EP, ETP and TP links follow from the degrees, the world key and the domain: comm.Comm.of)."""
    c = ctx.c
    key = ("MoeLayerTimes", c.tp, c.cp, c.micro_batch_size, c.cp_comm_type, ctx.comm.cp_a2a, ctx.sp, c.recompute,
           c.ep, c.etp, c.schedule.paired, c.moe_a2a_overlap, c.moe_fp8_dispatch,
           layer_world_key(c.num_gpus, ctx.domain, c.tp, c.cp, c.ep, c.etp), ctx.domain,
           lone_share_key(combined_1f1b_key(c)))
    return memoized(memo, key, lambda: _moe_layer_times(ctx, rates, acts, lc, memo))


@functools.lru_cache(maxsize=None)
def lone_share_key(combined: tuple | None) -> float | None:
    """Combined 1F1B's share of lone passes from the (pp, vpp, m) of paired_overlap.combined_1f1b_key (None without
    the all-to-all overlap): all of the three :func:`_moe_layer_times` reads, so the layer times of the choices of
    one share are one (a cache key's part: :func:`moe_layer_times`', solver/bounds.py ``layer_key``'s)."""
    return None if combined is None else combined_1f1b_lone_share(*combined)


def _moe_layer_times(ctx: ChoiceContext, rates: GemmRates, acts: Activations, lc: LayerComm,
                     memo: dict | None) -> LayerTimes:
    a, c, moe = ctx.a, ctx.c, ctx.m.moe
    moe_model_flops, moe_linear, moe_compute, a2a, etp_one, tp_blocks, busy, dispatch, held = _moe_shape_terms(
        ctx, rates, acts, memo)
    overlapped = moe_comm.overlaps_all_to_all(c.schedule, c.moe_a2a_overlap)
    paired = c.schedule.paired
    expert_linear = moe_linear - sum(tp_blocks)  # the routed experts' GEMMs (and the router's), before SM sharing
    # how much of the all-to-all runs beside the compute (and so beside its TP collectives): all of it under the
    # overlapped schedules (combined 1F1B: less its lone passes), the hidden share of ep_comm_overlap otherwise
    if paired or not overlapped:
        lone = 0.0 if paired else 1.0
    else:
        lone = combined_1f1b_lone_share(c.pp, c.vpp, c.num_microbatches)
    hidden_alone = 0.0 if overlapped else 2 * a2a - ctx.comm.exposed(2 * a2a, a.ep_comm_overlap, moe_compute)
    lc, etp_one, a2a = _shared_links(ctx, lc, etp_one, a2a, tp_blocks, moe_compute,
                                     2 * a2a * (1.0 - lone) + hidden_alone, busy)
    # the attention block's part of the compute, for the per-component pairs (paired_overlap.component_phases_s)
    attn = tp_blocks[0] + rates.attn_core_s
    if c.ep > 1 and overlapped:  # the dispatch/combine kernels beside the compute hold SMs while they run, and only
        # the overlapped schedules run them beside it (DeepSeek-V3 §3.2.2; moe_comm.reserved_sm_time_s)
        slowed = 1.0 + moe_comm.reserved_sm_time_s(moe_compute, 2 * a2a, held) / moe_compute
        moe_compute *= slowed
        moe_linear *= slowed
        attn *= slowed
    # dispatch + combine, forward and backward: paired schedules (DualPipe, DualPipeV) price what the partner
    # stage's compute leaves exposed per rank (evaluate.paired_exposure); Megatron-Core's combined 1F1B pairs a
    # layer with itself, its warm-up forwards and cool-down backwards alone; otherwise the ep_comm_overlap share,
    # bounded by the layer's compute
    if paired:
        ep_layer = 0.0
    elif c.moe_a2a_overlap:
        ep_layer = combined_1f1b_exposed_s(ChunkWork(moe_compute + acts.selective_s, 2 * a2a,
                                                     attn if a.paired_overlap_by_component else None, dispatch),
                                           ctx.fwd_share, lone)
    else:
        ep_layer = ctx.comm.exposed(2 * a2a, a.ep_comm_overlap, moe_compute)
        if c.ep > 1 and ep_layer < 2 * a2a:  # the hidden share runs beside the compute: it holds the dispatcher's
            # SMs for as long as it runs, as the overlapped schedules' all-to-all does (moe_comm.reserved_sm_time_s)
            slowed = 1.0 + moe_comm.reserved_sm_time_s(moe_compute, 2 * a2a - ep_layer, held) / moe_compute
            moe_compute *= slowed
            moe_linear *= slowed
            attn *= slowed
    # the attention block's and the shared experts' TP collectives, each beside its block's GEMMs
    # (layer_comm.LayerComm.tp_block_s); the expert-TP ones are not overlapped
    tp_s, tp_fwd_s = lc.tp_blocks_s(ctx.comm, tp_blocks, ctx.fwd_share)
    # the DP collectives run through a whole pass, its all-to-all included wherever it runs: 2·a2a of the passes'
    # compute, TP collectives and exposed all-to-all keep the network busy[1] of that time (DataParallel.dp_exposed)
    passes_s = moe_compute + tp_s + 4 * etp_one + ep_layer
    sync_s = _dispatch_sync_s(ctx, rates.up, (expert_linear, moe_compute + tp_s), a2a, dispatch)
    network_beside = (min(1.0, 2 * a2a / passes_s), busy[1]) if c.ep > 1 and busy[1] > 0 else (0.0, 0.0)
    return LayerTimes(
        model_flops=moe_model_flops, linear_s=moe_linear, window_s=moe_compute,
        compute_s=moe_compute + acts.selective_s + sync_s,
        tp_s=tp_s + 4 * etp_one,
        tp_fwd_s=tp_fwd_s + 2 * etp_one,
        ep_s=ep_layer, a2a_s=2 * a2a if paired else 0.0,
        act_bytes=ctx.tokens_tp_group * (acts.moe_per_token + acts.stored_gathered), network_beside=network_beside,
        attn_s=attn if a.paired_overlap_by_component else None, dispatch_share=dispatch,
        host_sync_s=sync_s)


def _dispatch_sync_s(ctx: ChoiceContext, up: int, experts_and_layer_s: tuple[float, float], a2a_s: float,
                     dispatch: float) -> float:
    """The GPU's idle time after the dispatcher's sync, per MoE layer and micro-batch (host_floor.moe_sync_exposed_s;
    0 where it does not sync, host_floor.moe_dispatch_syncs), from the forward share of (the routed experts' GEMMs, the
    layer's compute and TP collectives): the dispatch and combine halves of one all-to-all, the experts' GEMMs split
    fc1 : fc2 as their widths, up : 1, and the rest of the layer's forward."""
    moe = ctx.m.moe
    if not host_floor.moe_dispatch_syncs(ctx.a, moe.dispatcher, moe.dispatcher_backend):
        return 0.0
    experts_fwd_s, layer_fwd_s = (s * ctx.fwd_share for s in experts_and_layer_s)
    gpu_s = {"dispatch": a2a_s * dispatch, "combine": a2a_s * (1.0 - dispatch), "fc1": experts_fwd_s * up / (up + 1),
             "fc2": experts_fwd_s / (up + 1), "rest": max(0.0, layer_fwd_s - experts_fwd_s)}
    return host_floor.moe_sync_exposed_s(ctx.a, moe.num_experts / ctx.c.ep, ctx.precision == "fp8", gpu_s)


def _shared_links(ctx: ChoiceContext, lc: LayerComm, etp_one: float, a2a: float, tp_blocks: tuple[float, ...],
                  compute_s: float, beside_s: float, busy: tuple[float, float]) -> tuple[LayerComm, float, float]:
    """(the layer's TP collectives, one ETP collective, one all-to-all) as they cost when ``beside_s`` of the layer's
    all-to-all runs beside its compute and so beside its TP and ETP collectives (costmodel/communication/shared_links.py): each
    collective on a tier the all-to-all keeps busy (DeepEP's NVLink forwarding for TP inside a domain, its IB sends
    for TP across domains) is stretched over the share of it that runs beside the all-to-all, beside_s over the
    layer's compute and raw collectives (the all-to-all spread evenly over the window), and the all-to-all loses
    what they displace (``busy``: Comm.all_to_all_busy). A dense layer's or an all-to-all run between computations
    shares nothing with them."""
    c, comm = ctx.c, ctx.comm
    if beside_s <= 0 or c.ep <= 1:
        return lc, etp_one, a2a
    busy = {True: busy[0], False: busy[1]}
    tp_raw = lc.tp_block_collectives * lc.tp_one_s * len(tp_blocks) if c.tp > 1 else 0.0
    etp_raw = 4 * etp_one if c.etp > 1 else 0.0
    share = min(1.0, beside_s / (compute_s + tp_raw + etp_raw))
    u_tp, u_etp = busy[comm.links["tp"].nvlink], busy[comm.links["etp"].nvlink]
    lost = shared_links.displaced_s(tp_raw, share, u_tp) + shared_links.displaced_s(etp_raw, share, u_etp)
    shared = object.__new__(LayerComm)  # dataclasses.replace without re-running the frozen __init__
    shared.__dict__.update(lc.__dict__)
    shared.__dict__["tp_one_s"] = shared_links.stretched_s(lc.tp_one_s, share, u_tp)
    return (shared,
            shared_links.stretched_s(etp_one, share, u_etp) if c.etp > 1 else etp_one, a2a + lost / 2)


def _moe_shape_terms(ctx: ChoiceContext, rates: GemmRates, acts: Activations,
                     memo: dict | None) -> tuple:
    """(model FLOPs, linear GEMM time, compute time, one all-to-all, one ETP collective, the linear GEMM time of
    each TP block: attention, and the shared experts where the model has them; the all-to-all's (NVLink, network)
    busy shares and its dispatch's share, Comm.all_to_all_shares; the SMs an overlapped schedule's all-to-all
    holds, moe_comm.sm_fraction) of an MoE layer before the schedule's terms (the SMs an overlapped schedule's all-to-all holds, its exposure): with ``memo``, shared by
    the choices of equal Activations key, FP8 dispatch, world key and domain (moe_layer_times' key less the
    schedule terms)."""
    c = ctx.c
    key = ("MoeShapeTerms", c.tp, c.cp, c.micro_batch_size, c.cp_comm_type, ctx.comm.cp_a2a, ctx.sp, c.recompute,
           c.ep, c.etp, c.moe_fp8_dispatch,
           layer_world_key(c.num_gpus, ctx.domain, c.tp, c.cp, c.ep, c.etp), ctx.domain)
    return memoized(memo, key, lambda: _moe_shape_terms_of(ctx, rates, acts, memo))


def _nonexpert_gemms(ctx: ChoiceContext, rates: GemmRates) -> tuple[list, float, float]:
    """(the non-expert GEMMs: attention and shared experts, their seconds per FLOP, the router's): what an MoE
    layer's GEMM terms read of the choice but its EP and ETP (the GemmRates key)."""
    moe, h, M, up, c = ctx.m.moe, ctx.h, ctx.M, rates.up, ctx.c
    f_s = ctx.arch.shared_expert_ffn
    shared_gemms = [(up * h * f_s * moe.num_shared_experts, M, h, up * f_s / c.tp),
                    (h * f_s * moe.num_shared_experts, M, f_s / c.tp, h)] if moe.num_shared_experts else []
    nonexpert = rates.attn_gemms + shared_gemms
    return nonexpert, rates.spf(nonexpert), rates.spf_bf16([(1.0, M, h, moe.num_experts)])


def _moe_shape_terms_of(ctx: ChoiceContext, rates: GemmRates, acts: Activations,
                        memo: dict | None = None) -> tuple:
    c = ctx.c
    moe = ctx.m.moe
    a, arch, comm, h, M = ctx.a, ctx.arch, ctx.comm, ctx.h, ctx.M
    tokens_gpu, up, spf = ctx.tokens_gpu, rates.up, rates.spf
    nonexpert, spf_nonexpert, spf_router = memoized(
        memo, ("MoeNonexpertGemms", c.tp, c.cp, c.micro_batch_size, c.cp_comm_type, ctx.comm.cp_a2a),
        lambda: _nonexpert_gemms(ctx, rates))
    # the routed experts' model FLOPs count the copies a capacity factor keeps (moe_dispatch.kept_share)
    moe_model_flops = tokens_gpu * (arch.moe_layer_dense_linear_flops
                                    + arch.moe_layer_expert_flops * moe_dispatch.kept_share(a, moe)
                                    + arch.attention_core_flops(ctx.seq, a.attention_flops_causal_fraction))
    f_e, f_s = moe.expert_ffn_hidden_size, arch.shared_expert_ffn
    # routed experts: each expert of an EP rank sees top_k/num_experts of the EP group's tokens
    M_e = max(1.0, M * c.ep * c.etp / c.tp * moe.top_k / moe.num_experts)
    router_flops = 6.0 * h * moe.num_experts  # the gating GEMM, BF16 under FP8 (GemmRates.spf_bf16)
    expert_gemms = [(up * h * f_e, M_e, h, up * f_e / c.etp), (h * f_e, M_e, f_e / c.etp, h)]
    busiest = moe_busiest_load(ctx)
    moe_linear = tokens_gpu * ((arch.moe_layer_dense_linear_flops - router_flops) * spf_nonexpert
                               + router_flops * spf_router
                               + arch.moe_layer_expert_flops * busiest * spf(expert_gemms))
    # the transposed FP8 copies (fp8_transpose.py): the non-expert GEMMs' rows, and the routed experts' on this
    # GPU (experts/ep experts of M_e rows each, the busiest rank's load)
    expert_rows = M_e * moe.num_experts / c.ep * busiest
    transposes = transpose_seconds(a, ctx.gpu, ctx.precision, ctx.hbm_Bps,
                                   nonexpert + [(w, expert_rows, k, n) for w, _, k, n in expert_gemms])
    # the clamp and the fc2 bias kernels outside the fused ones (GPT-OSS under Megatron-Core): their HBM passes
    # over this GPU's routed rows (expert_elementwise.py)
    eager_bytes = expert_elementwise_bytes(a, moe, expert_rows, up * f_e / c.etp, h, acts.moe_act_recomputed)
    # unfused elementwise ops (assumptions.eager_elementwise): the SwiGLU over this GPU's routed rows and shared experts
    gated_width = (expert_rows * f_e / c.etp / ctx.tokens_tp_group + f_s * moe.num_shared_experts / c.tp
                   if up == 2 else 0.0)
    moe_compute = (moe_linear + rates.attn_core_s + rates.traffic_s(acts.moe_traffic_per_token) + transposes
                   + eager_bytes / ctx.hbm_Bps + rates.eager_s(gated_width))
    a2a = comm.all_to_all_s(tokens_gpu * h, moe)
    # expert tensor parallelism: ETP > 1 all-gathers the dispatched tokens of the ETP group before the
    # experts and reduce-scatters their outputs (and the transposes backward): four collectives of
    # top_k x the tokens; ETP = 1 has no TP collective in the expert MLP (Megatron-Core
    # moe/token_dispatcher.py, MoEAlltoAllTokenDispatcher: gather/reduce-scatter over the expert-TP group)
    etp_one = comm.ring_gather_s("etp", c.etp, tokens_gpu * c.etp * moe.top_k * h * 2)
    tp_blocks = (tokens_gpu * arch.attention_linear_flops * spf_nonexpert,) + (
        (tokens_gpu * arch.shared_expert_linear_flops * spf_nonexpert,) if moe.num_shared_experts else ())
    # ((NVLink, network) busy shares, the dispatch's share) of the all-to-all; the SMs its kernels hold
    busy, dispatch = comm.all_to_all_shares(tokens_gpu * h, moe) if c.ep > 1 else ((0.0, 0.0), 0.5)
    held = moe_comm.sm_fraction(a, ctx.gpu, moe) if c.ep > 1 else 0.0
    return moe_model_flops, moe_linear, moe_compute, a2a, etp_one, tp_blocks, busy, dispatch, held


def moe_layer_cost(ctx: ChoiceContext, rates: GemmRates, acts: Activations, lc: LayerComm,
                   memo: dict | None = None) -> LayerCost | None:
    """An MoE layer (None for a dense model): its :func:`moe_layer_times` (shared through ``memo``), ZeRO/DP over the
    dense and the expert-DP groups, its states, and what a full recompute repeats."""
    moe = ctx.m.moe
    if moe is None:
        return None
    t = moe_layer_times(ctx, rates, acts, lc, memo)
    c, arch, dp, h, fwd_share = ctx.c, ctx.arch, ctx.dp, ctx.h, ctx.fwd_share
    nonexpert_gpu, expert_gpu = moe_params_gpu(ctx)
    rc_comm_m = ctx.recompute_comm(t.tp_fwd_s, lc.cp.fwd_s, t.ep_s)
    parts = [(nonexpert_gpu, ctx.comm.dense_group), (expert_gpu, ctx.comm.expert_group)]
    return LayerCost(
        compute_s=t.compute_s,
        tp_s=t.tp_s,
        cp_s=lc.cp.total_s,
        ep_s=t.ep_s,
        zero_s=dp.zero_exposed(parts, t.window_s),
        recompute_s=t.window_s * fwd_share + sum(rc_comm_m),
        recompute_comm=rc_comm_m,
        selective_s=acts.selective_s,
        states_bytes=(dp.states(nonexpert_gpu, ctx.comm.dense_group) + dp.states(expert_gpu, ctx.comm.expert_group)
                      + dp.fp8_weight_cache(nonexpert_gpu - (arch.norm_params_per_layer + h * moe.num_experts) / c.tp
                                            + expert_gpu)),
        act_bytes=t.act_bytes,
        act_recomputed_bytes=ctx.tokens_tp_group * acts.recomputed_per_token,
        dp_s=dp.dp_exposed(parts, t.window_s, t.network_beside),
        model_flops=t.model_flops,
        recompute_flops=t.model_flops * fwd_share,
        linear_s=t.linear_s,
        a2a_s=t.a2a_s,
        attn_s=t.attn_s,
        dispatch_share=t.dispatch_share,
    )
