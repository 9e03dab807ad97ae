"""Per-layer and per-stage costs of one discrete choice of degrees (the cost model's core).

A *choice* fixes everything in a plan except how many layers each stage holds and how many of them
it recomputes. Given a choice, every per-stage quantity is affine in the stage's layer counts:

    time per micro-batch  = Σ_class n_class·t_class + r·t_recompute + [first]·t_first + [last]·t_last + t_p2p
    memory                = Σ_class n_class·(states_class + inflight·act_class) - r·inflight·act_saved
                            + [first]·mem_first + [last]·mem_last
    DP time per step      = Σ_class n_class·dp_class + [first]·dp_first + [last]·dp_last

(class = dense or MoE layer). The evaluator applies these to a plan's stage list; the solver encodes the
same coefficients, integer-scaled, so both always agree. Sources of every term are in the docstrings of
:mod:`architecture`, :mod:`memory`, :mod:`collectives`, :mod:`bubble` and :mod:`assumptions`.

:func:`choice_costs` composes them by concern, each piece in its module:

* the context every piece reads and the choice's links (:class:`~choice_context.ChoiceContext`,
  :class:`~comm.Comm`: tier links, the hierarchical DP/ZeRO collective, the ZeRO groups, the EP all-to-all,
  the TP/ETP rings, the overlap rule; :func:`~comm.cp_attention_comm`);
* the DP/ZeRO exposure, the optimizer offload and the model states (:class:`~data_parallel.DataParallel`);
* the GEMM rates and the attention core (:class:`~gemm_rates.GemmRates`), the activation bytes per token
  (:class:`~activations.Activations`), a layer's TP and CP communication (:class:`~layer_comm.LayerComm`);
* the dense and the MoE layer (:func:`~layer_costs.dense_layer_cost`, :func:`~moe_layer.moe_layer_cost`);
* the first / last stage extras with MTP, the stage boundary and the per-stage working set
  (:mod:`stage_extras`);
* post-passes that move terms between the stage extras and the layers (:func:`_spread_embedding`) or change
  the layers' terms (:func:`~activation_offload.apply_activation_offload`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from parplan.costmodel.schedules import dualpipev
from parplan.costmodel.evaluation.activation_offload import apply_activation_offload
from parplan.costmodel.compute.architecture import Architecture
from parplan.costmodel.spec.assumptions import Assumptions
from parplan.costmodel.communication.comm import Link, ZeroGroup, cp_attention_comm, link, tier_links
from parplan.costmodel.spec.degrees import Choice
from parplan.costmodel.spec.hardware import GIB, GPU
from parplan.costmodel.schedules.paired_overlap import (ChunkWork, counted_exposed_s, dualpipe_rank_exposed_s,
                                             dualpipe_step_counts, dualpipev_rank_exposed_s, pair_exposed_s)
from parplan.costmodel.evaluation.activations import Activations
from parplan.costmodel.evaluation.choice_context import ChoiceContext
from parplan.costmodel.evaluation.gemm_rates import GemmRates
from parplan.costmodel.evaluation.layer_comm import LayerComm
from parplan.costmodel.evaluation.layer_costs import LayerCost, dense_layer_cost, dense_layer_times
from parplan.costmodel.evaluation.moe_layer import moe_layer_cost, moe_layer_times
from parplan.costmodel.memo import bounded_put, recent
from parplan.costmodel.memory.runtime_memory import device_reserve, runtime_memory
from parplan.costmodel.schedules.schedule import PipelineUnits, Schedule
from parplan.costmodel.spec.spec import Spec
from parplan.costmodel.evaluation.stage_extras import end_stage_costs, pipeline_boundary, stage_workspace

# the names other modules import from here (Link, ZeroGroup, LayerCost, tier_links, link and cp_attention_comm live
# in comm.py and layer_costs.py, where the pieces of choice_costs read them)
__all__ = ["Choice", "ChoiceCosts", "LayerCost", "Link", "ZeroGroup", "bubble_factor", "choice_costs",
           "cp_attention_comm", "device_memory_bytes", "effective_zero_stage", "inflight_microbatches", "last_stage_inflight", "layer_pieces", "layer_times", "link",
           "nvlink_domain_size", "tier_links", "usable_memory_bytes", "with_schedule"]

def inflight_microbatches(c: Choice, stage: int) -> float:
    """Micro-batches whose activations stage ``stage`` holds at its peak (in whole-stage units)."""
    p, m, v = c.pp, c.num_microbatches, c.vpp
    schedule = c.schedule
    # interleaved: one more chunk forward before the combined 1F1B steps (moe_comm.py); pp 1 pairs layer by layer and
    # holds one more layer, not one more micro-batch (stage_extras.stage_workspace)
    extra = 1 if c.moe_a2a_overlap and schedule is Schedule.INTERLEAVED else 0
    if schedule.one_stage_per_rank:
        return float(min(p - stage + extra, m))
    if schedule is Schedule.INTERLEAVED:
        # Megatron: warmup = (p - i - 1)·2 + (v - 1)·p chunk micro-batches, plus the one in flight;
        # stage 0 gives p + (p-1)/v stages' worth, Megatron's theoretical-memory penalty.
        return min((p - stage - 1) * 2 + (v - 1) * p + 1 + extra, m * v) / v
    if schedule is Schedule.DUALPIPE:
        return float(min(p + 1, m))  # DeepSeek-V3 Table 2: PP + 1
    return dualpipev.inflight_microbatches(p)  # 2p + 1 half-rank chunks (DualPipe README: PP + 1)


def pipeline_buffer_counts(c: Choice, stage: int) -> list[tuple[float, float]]:
    """Per model chunk group of stage ``stage`` (two under DualPipeV, else one): (stage-boundary tensors of one
    micro-batch, last-stage outputs of one micro-batch) that ``torch.distributed.pipelining`` holds there
    (:meth:`ChoiceCosts.pipeline_buffer_bytes` prices them; its docstring gives the source of each count). They
    read only the choice's schedule, pp, vpp, micro-batch count and in-flight counts."""
    m, v = c.num_microbatches, c.vpp
    if c.schedule is Schedule.DUALPIPEV:  # rank r's two stages, r and 2p-1-r (the first and the last on rank 0),
        #                            each holding half the rank's in-flight micro-batches
        half = inflight_microbatches(c, stage)
        return [_chunk_buffer_counts(m, 1, first, last, half, input_grads=False) for first, last in
                ((stage == 0, False), (False, stage == 0))]
    first, last = stage == 0, stage == c.pp - 1
    return [_chunk_buffer_counts(m, v, first, last, inflight_microbatches(c, stage) * v,
                                 input_grads=not c.schedule.paired)]


def _chunk_buffer_counts(m: int, v: int, first: bool, last: bool, inflight_chunks: float,
                         input_grads: bool = True) -> tuple[float, float]:
    grad_recv = m * v - (m if last else 0)
    act_recv = max(0.0, m * v - (m if first else 0) - inflight_chunks)
    outputs = max(0.0, inflight_chunks - (1 if last else 0))
    # gradients of received inputs, one per backward done at the peak (the first chunk's come last)
    held_grads = max(0.0, m * v - inflight_chunks - (m if first else 0)) if input_grads else 0.0
    return grad_recv + act_recv + outputs + held_grads, (m - 1 if last else 0)


@dataclass(frozen=True)
class ChoiceCosts:
    choice: Choice
    dense: LayerCost
    moe: LayerCost | None
    first_extra_time_s: float
    last_extra_time_s: float
    last_extra_compute_s: float
    p2p_s: float
    first_extra_bytes: float
    last_extra_bytes: float  # head weights/states (resident)
    logits_bytes: float  # last stage, once (not per in-flight micro-batch)
    workspace_bytes: float  # every stage, once: ZeRO-3's gathered layers, a per-op checkpointed layer's regeneration
    stage_io_bytes: float  # one stage-boundary activation of one micro-batch (pipeline_runtime 'torch'; else 0)
    retained_output_bytes: float  # one micro-batch's bf16 output on the last stage (pipeline_runtime 'torch'; else 0)
    first_extra_dp_s: float
    last_extra_dp_s: float
    dp_const_s: float  # per-stage DP latency terms
    first_extra_flops: float
    last_extra_flops: float
    usable_memory_bytes: float
    peak_flops: float
    links: dict[str, Link] = field(default_factory=dict)
    # full recompute: a recomputed layer's activations regenerated for its backward, held once by a stage that
    # recomputes at least one layer (a stage that recomputes none checkpoints nothing and holds none)
    recompute_workspace_bytes: float = 0.0
    weight_grad_share: float = 1.0  # share of the layers' time in linear GEMMs (weight_grad_share(); ZB's W)
    fwd_share: float = 1.0 / 3.0  # F / (F + B): the forward's share of a layer's compute
    # memory outside the tensor ledger that the plan creates, every stage once (costmodel/memory/runtime_memory.py): NCCL's
    # buffers, Transformer Engine's userbuffers and cuBLAS workspaces
    runtime_bytes: float = 0.0
    nccl_bytes: float = 0.0
    userbuffer_bytes: float = 0.0
    te_workspace_bytes: float = 0.0

    def stage_workspace_bytes(self, recomputed_layers: int) -> float:
        """The working set of a stage that fully recomputes ``recomputed_layers`` layers."""
        return self.workspace_bytes + (self.recompute_workspace_bytes if recomputed_layers > 0 else 0.0)

    # ---- paired chunks (costmodel/schedules/paired_overlap.py)
    def chunk_work(self, dense: int, moe: int) -> ChunkWork:
        """A stage's (or DualPipeV chunk's) layers: their compute, their all-to-all, none of it hidden, and their
        attention blocks' compute, for per-component pairs (counts: ints, or arrays of candidate splits)."""
        d, m = self.dense, self.moe
        if m is None:
            return ChunkWork(dense * d.compute_s, 0.0 * dense, None if d.attn_s is None else dense * d.attn_s)
        attn = None if d.attn_s is None or m.attn_s is None else dense * d.attn_s + moe * m.attn_s
        return ChunkWork(dense * d.compute_s + moe * m.compute_s, moe * m.a2a_s, attn, m.dispatch_share)

    @property
    def paired_exposure(self) -> bool:
        """Whether a rank's all-to-all is priced beside its partner stage's compute (:meth:`rank_exposed_s`): a
        paired schedule (DualPipe, DualPipeV) on an MoE model whose all-to-all takes time."""
        return self.choice.schedule.paired and self.moe is not None and self.moe.a2a_s != 0.0

    def rank_exposed_s(self, rank: int, a: tuple[int, int], b: tuple[int, int]) -> float:
        """The EP all-to-all rank ``rank`` leaves exposed per micro-batch when its phase-0 and phase-1 stages
        (DualPipe: stages min(rank, p-1-rank) and max) or chunks (DualPipeV) hold ``a`` and ``b`` (dense, MoE)
        layers: what each pairing's compute cannot cover, the lone chunks' in full (costmodel/schedules/paired_overlap.py);
        0 for the other schedules, whose layers carry their own ``ep_s``."""
        if not self.paired_exposure:
            return 0.0
        c = self.choice
        pair = dualpipe_rank_exposed_s if c.schedule is Schedule.DUALPIPE else dualpipev_rank_exposed_s
        return pair(c.pp, rank, c.num_microbatches, self.chunk_work(*a), self.chunk_work(*b), self.fwd_share)

    def dualpipe_ranks_exposed_s(self, a: tuple, b: tuple, rank_class=None):
        """:meth:`rank_exposed_s` of every DualPipe rank 0..p/2-1 at once, the same floats element-wise as rank by
        rank (:func:`~parplan.costmodel.schedules.paired_overlap.dualpipe_step_counts`): ``a`` and ``b`` (dense, MoE) int
        arrays whose first axis is the rank, or with ``rank_class`` (an int array, one entry per rank) the rank's
        row of them (ranks of equal work share their pairings' exposure). DualPipe with an all-to-all only."""
        c = self.choice
        if c.schedule is not Schedule.DUALPIPE or not self.paired_exposure:
            raise ValueError("every rank at once: DualPipe with an EP all-to-all only")
        c0, c1 = self.chunk_work(*a), self.chunk_work(*b)
        p01, p10 = pair_exposed_s(c0, c1, self.fwd_share), pair_exposed_s(c1, c0, self.fwd_share)
        a0, a1 = np.asarray(c0.a2a_s), np.asarray(c1.a2a_s)
        if rank_class is not None:
            p01, p10, a0, a1 = (np.asarray(x)[rank_class] for x in (p01, p10, a0, a1))
        return counted_exposed_s(p01, p10, a0, a1, dualpipe_step_counts(c.pp, c.num_microbatches),
                                 c.num_microbatches)

    # ---- pipeline schedule terms
    def inflight(self, stage: int) -> float:
        """Micro-batches whose activations stage ``stage`` holds at its peak (in whole-stage units)."""
        return inflight_microbatches(self.choice, stage)

    def pipeline_buffer_bytes(self, stage: int) -> float:
        """Bytes the pipeline runtime holds on stage ``stage`` besides its layers' activations.

        ``torch.distributed.pipelining`` (``stage.py``, late 2024): ``_prepare_forward_infra`` and
        ``_prepare_backward_infra`` preallocate a receive buffer for every micro-batch's input activation
        (stages > 0) and output gradient (stages < p-1) of every model chunk; the input buffers of in-flight
        micro-batches are the first layer's saved input, already counted with the activations.
        ``fwd_cache`` keeps each in-flight micro-batch's output until its backward, and the last stage
        appends every micro-batch's output to ``output_chunks`` until the next step (the current one is the
        logits term). Megatron-LM holds none of these (zero bytes here). Versions: before PyTorch PR #153383
        (May 2025) every stage kept all its outputs in ``output_chunks``, not only the in-flight ones (the same
        count on the first stage when m = p, as in torchtitan's default); the last stage's retention is what
        pytorch/pytorch issue #159251 asks to make optional.

        Input gradients: a chunk that receives its input (every chunk but stage 0) runs its backward with
        ``torch.autograd.backward``, which accumulates the input's gradient into the ``.grad`` of the leaf
        receive buffer (torch v2.6.0 ``_backward.py:351-359`` ``stage_backward`` returns ``val.grad``);
        ``clear_runtime_states`` sets ``buffer.grad = None`` only at the start of the next step
        (``stage.py:507-525``), so every backward leaves one boundary-sized gradient held. At a 1F1B-type
        peak (the in-flight count holds through the steady state, so its last moment comes after the
        last forward) the backwards done are m·v minus the in-flight chunk micro-batches, the first chunk's
        (which receives nothing) counted last, as the depth-first order runs them. Not charged under
        DualPipe/DualPipeV, whose peak is not at the end of a steady state (torch v2.6.0 has no such
        schedule to read).
        """
        return sum(n * self.stage_io_bytes + r * self.retained_output_bytes
                   for n, r in pipeline_buffer_counts(self.choice, stage))  # both sizes 0 unless 'torch' and pp > 1

    def bubble_s(self, t_stage_s: float, a: Assumptions) -> float:
        """Bubble for the slowest stage's per-micro-batch time."""
        return t_stage_s * bubble_factor(self.choice, a, self.weight_grad_share)


# bubble_factor's answers by all it reads: schedule, pp, vpp, the assumptions (frozen, held by identity beside the
# answer) and, where the schedule's bubble reads W (Schedule.reads_weight_grad), the weight-gradient share: each
# choice's costs hold their own share, so keyed by it 1F1B's entries were one per choice (~480 per Llama-3 8B spec,
# never read again); an LRU of BUBBLE_CACHE_MAX entries (memo.bounded_put), ~0.35-0.6 KB each: ~2.4 MiB at most
_BUBBLE_CACHE: dict = {}
BUBBLE_CACHE_MAX = 1 << 12


def bubble_factor(c: Choice, a: Assumptions, weight_grad_share: float = 1.0) -> float:
    """The schedule's bubble in units of the slowest unit's per-micro-batch time
    (:meth:`~parplan.costmodel.schedules.schedule.PipelineUnits.bubble_beta`, which cites DualPipe's F&B); with the default
    ``weight_grad_share`` 1 the smallest ZB-H1/DualPipe bubble (the solver's lower bounds). Memoized on what it
    reads (the solver asks it for every choice)."""
    key = (c.schedule, c.pp, c.vpp, id(a), weight_grad_share if c.schedule.reads_weight_grad else None)
    hit = recent(_BUBBLE_CACHE, key)
    if hit is not None and hit[0] is a:
        return hit[1]
    return bounded_put(_BUBBLE_CACHE, key, (a, PipelineUnits.of(c).bubble_beta(a, weight_grad_share)),
                       BUBBLE_CACHE_MAX)[1]


def weight_grad_share(arch: Architecture, dense: LayerCost, moe: LayerCost | None) -> float:
    """Share of a layer stack's time in linear GEMMs, whose backward alone has a weight-gradient part W
    (ZB, arXiv 2401.10241 §2; :meth:`PipelineUnits.bubble_beta`): Σ n·linear_s / Σ n·time_s over the model's
    dense and MoE layers (the attention core, elementwise traffic and exposed communication have no W)."""
    n_moe, n_dense = (arch.num_moe_layers, arch.num_dense_layers) if moe is not None else (0, arch.spec.num_layers)
    total = n_dense * dense.time_s + (n_moe * moe.time_s if moe is not None else 0.0)
    linear = n_dense * dense.linear_s + (n_moe * moe.linear_s if moe is not None else 0.0)
    return linear / total if total > 0 else 1.0


def with_schedule(costs: ChoiceCosts, choice: Choice) -> ChoiceCosts:
    """The costs of ``choice``, which differs from ``costs.choice`` only in a non-DualPipe schedule and vpp.

    Only the stage-boundary p2p depends on them (it scales with vpp; inflight and bubble read the
    choice); DualPipe also changes the EP overlap and is computed in full.
    """
    base = costs.choice
    if choice.schedule.paired or base.schedule.paired:
        raise ValueError("DualPipe changes the EP overlap: compute its costs in full")
    out = object.__new__(ChoiceCosts)  # copy.copy without its reduce protocol (the search makes one per choice)
    out.__dict__.update(costs.__dict__, choice=choice, p2p_s=costs.p2p_s * choice.vpp / base.vpp)
    return out


def effective_zero_stage(zero_stage: int, pp: int, a: Assumptions) -> int:
    """The ZeRO stage whose memory and traffic a plan with ``zero_stage`` and ``pp`` stages pays.

    ZeRO-2/3 under pipeline parallelism, as PyTorch pipelining runs FSDP2 stages (torchtitan): the
    stage's weights stay unsharded after forward and its gradients accumulate unsharded until the last
    micro-batch, then reduce-scatter once; the sharded optimizer step and the next gather are once per
    step. That is ZeRO-1 (``zero_unsharded_across_microbatches_with_pp``); FSDP2's sharded fp32 copy of
    the weights (4/N bytes per parameter more than ZeRO-1's 12/N) is not counted.
    """
    if zero_stage >= 2 and pp > 1 and a.zero_unsharded_across_microbatches_with_pp:
        return 1
    return zero_stage


def device_memory_bytes(spec: Spec, gpu: GPU, a: Assumptions) -> float:
    """The GPU's memory in bytes (textbook: the nominal GB as 1e9 bytes)."""
    if a.memory_from_nominal_gb and spec.cluster.memory_gib is None:
        return gpu.memory_gb_nominal * 1e9
    return gpu.memory_gib * GIB


def usable_memory_bytes(spec: Spec, gpu: GPU, a: Assumptions) -> float:
    """The GPU's memory less the plan-independent terms outside the ledger (CUDA context, the allocator's
    fragmentation: costmodel/memory/runtime_memory.py) and the user's margin; the plan's own terms (NCCL, TE) are stage
    ledger lines."""
    total = device_memory_bytes(spec, gpu, a)
    return total - device_reserve(total, a).total - spec.search.memory_margin_gib * GIB


def nvlink_domain_size(spec: Spec, gpu: GPU) -> int:
    """NVLink domain: the override, a multi-node domain from the catalog (NVL72), else one node."""
    if spec.cluster.nvlink_domain_size is not None:
        return spec.cluster.nvlink_domain_size
    if gpu.nvlink_domain_size > 8:
        return gpu.nvlink_domain_size
    return min(gpu.nvlink_domain_size, spec.cluster.gpus_per_node)


def choice_costs(spec: Spec, choice: Choice, gpu: GPU, a: Assumptions, arch: Architecture | None = None,
                 memo: dict | None = None) -> ChoiceCosts:
    """Every coefficient of the stage-affine model for one choice, composed from its pieces (module docstring):
    the context and links, the GEMM rates, the activations, a layer's TP/CP communication, the dense and MoE
    layers, the first/last stage extras, the stage boundary, the working set, and the post-passes."""
    arch = arch or Architecture(spec.model)
    c = choice
    ctx, rates, acts, layer_comm, dense, moe = layer_pieces(spec, c, gpu, a, arch, memo)
    ends = end_stage_costs(ctx, rates, dense, moe, last_stage_inflight(c) if spec.model.num_mtp_layers else 0.0)
    p2p_s, stage_io_bytes = pipeline_boundary(ctx)
    workspace, recompute_workspace = stage_workspace(ctx, acts, layer_comm.cp)
    dense_grp = ctx.comm.dense_group
    costs = ChoiceCosts(
        choice=c,
        dense=dense,
        moe=moe,
        p2p_s=p2p_s,
        workspace_bytes=workspace,
        stage_io_bytes=stage_io_bytes,
        dp_const_s=ctx.dp.dp_latency(dense_grp),
        usable_memory_bytes=usable_memory_bytes(spec, gpu, a),
        peak_flops=ctx.peak,
        links=ctx.comm.links,
        recompute_workspace_bytes=recompute_workspace,
        weight_grad_share=weight_grad_share(arch, dense, moe),
        fwd_share=ctx.fwd_share,
        **_runtime_fields(spec, c, gpu, a),
        **ends,
    )
    # ---- post-passes: conventions that move terms between the stage extras and the layers
    if a.spread_embedding_evenly:
        costs = _spread_embedding(costs, arch, c, ctx.dp.states, ctx.dp.dp_per_param_s(dense_grp), spec, dense_grp)
    if c.activation_offload_layers:
        costs = apply_activation_offload(costs, spec, gpu, a)
    return costs


def layer_pieces(spec: Spec, c: Choice, gpu: GPU, a: Assumptions, arch: Architecture, memo: dict | None = None):
    """(context, GEMM rates, activations, layer communication, dense layer, MoE layer) of one choice: the first
    pieces of :func:`choice_costs`, before its stage extras and post-passes. ``memo``: pieces shared by the choices
    of one spec, GPU, assumptions and architecture (:meth:`GemmRates.of`, :meth:`Activations.of`,
    :meth:`~comm.Comm.of`, :meth:`LayerComm.of`, the layers' times), the same values as without it
    (tests/solver/test_layer_bound.py)."""
    ctx, rates, acts, layer_comm = _layer_context(spec, c, gpu, a, arch, memo)
    return (ctx, rates, acts, layer_comm, dense_layer_cost(ctx, rates, acts, layer_comm, memo),
            moe_layer_cost(ctx, rates, acts, layer_comm, memo))


def layer_times(spec: Spec, c: Choice, gpu: GPU, a: Assumptions, arch: Architecture, memo: dict | None = None):
    """(dense layer times, MoE layer times or None) of one choice (:class:`~layer_costs.LayerTimes`): the
    ``compute_s``, ``tp_s`` and ``ep_s`` that :func:`layer_pieces`' layers hold (the solver's layer bound reads them
    alone: solver/bounds.py ``layer_sum_s``), without the layers' ZeRO/DP and state terms."""
    ctx, rates, acts, layer_comm = _layer_context(spec, c, gpu, a, arch, memo)
    moe = moe_layer_times(ctx, rates, acts, layer_comm, memo) if spec.model.moe is not None else None
    return dense_layer_times(ctx, rates, acts, layer_comm, memo), moe


def _layer_context(spec: Spec, c: Choice, gpu: GPU, a: Assumptions, arch: Architecture, memo: dict | None):
    ctx = ChoiceContext.of(spec, c, gpu, a, arch, nvlink_domain_size(spec, gpu), effective_zero_stage(c.zero_stage, c.pp, a),
                           memo)
    rates = GemmRates.of(ctx, memo)
    return ctx, rates, Activations.of(ctx, rates, memo), LayerComm.of(ctx, rates, memo)


def _runtime_fields(spec: Spec, c: Choice, gpu: GPU, a: Assumptions) -> dict[str, float]:
    rt = runtime_memory(c, spec.training.seq_len, spec.model.hidden_size, spec.training.precision, gpu, a)
    return {"runtime_bytes": rt.total, "nccl_bytes": rt.nccl_bytes, "userbuffer_bytes": rt.userbuffer_bytes,
            "te_workspace_bytes": rt.te_workspace_bytes}


def last_stage_inflight(c: Choice) -> float:
    """Micro-batches whose activations the last stage holds at its peak, in its own units (DualPipeV: rank 0's,
    whose second chunk is the last stage; DualPipe: half a rank's, each rank holding two stages)."""
    units = PipelineUnits.of(c)
    return inflight_microbatches(c, units.last_stage) * units.stage_share


def _spread_embedding(costs: ChoiceCosts, arch: Architecture, c: Choice, states, dp_per_param: float,
                      spec: Spec, g) -> ChoiceCosts:
    """Textbook convention: embedding and head weights spread evenly over the layers (psi = N/(tp·pp))."""
    extra_params_per_layer = (arch.embedding_params + arch.head_params) / spec.model.num_layers / c.tp

    def bump(lc: LayerCost | None) -> LayerCost | None:
        if lc is None:
            return None
        return replace(lc, states_bytes=lc.states_bytes + states(extra_params_per_layer, g),
                       dp_s=lc.dp_s + extra_params_per_layer * dp_per_param)

    return replace(costs, dense=bump(costs.dense), moe=bump(costs.moe))

