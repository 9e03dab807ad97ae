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
"""

from __future__ import annotations

from copy import copy
from dataclasses import dataclass, field

from parplan.costmodel import dualpipev, moe_comm
from parplan.costmodel.activation_offload import apply_activation_offload
from parplan.costmodel.architecture import Architecture
from parplan.costmodel.assumptions import Assumptions
from parplan.costmodel.collectives import all_to_all_time_s, ring_gather_time_s
from parplan.costmodel.context_parallel import (a2a_group_size, allgather_comm, attention_seq_len, ring_aggregate_s,
                                                ring_exposed_s, ulysses_all_to_all_s, ulysses_comm)
from parplan.costmodel.efficiency import (attention_efficiency, hbm_bandwidth_gbps, linear_seconds_per_flop,
                                          max_linear_efficiency)
from parplan.costmodel.hardware import GIB, GPU
from parplan.costmodel.memory import (alternate_matmul_activation_items, dense_layer_activation_items,
                                     mlp_activation_bytes, model_state_bytes)
from parplan.costmodel.mesh import ep_members_per_domain, span_within_domain
from parplan.costmodel.offload import host_bandwidth_Bps, offload_seconds_per_param
from parplan.costmodel.optimizer_states import optimizer_state_bytes
from parplan.costmodel.spec import Spec


@dataclass(frozen=True)
class Choice:
    tp: int
    cp: int
    pp: int
    dp: int
    ep: int = 1
    etp: int = 1
    micro_batch_size: int = 1
    num_microbatches: int = 1
    vpp: int = 1
    schedule: str = "1f1b"
    recompute: str = "none"  # granularity; 'full' uses per-stage recompute counts
    zero_stage: int = 1
    sequence_parallel: bool = True
    cp_comm_type: str = "p2p"  # --cp-comm-type p2p | a2a | allgather | a2a+p2p (costmodel/context_parallel.py)
    # interleaved: decoder layers fewer in stage 0's first model chunk and in the last stage's last chunk than
    # in their other chunks (Meta's Llama 3 405B split, Megatron's --pipeline-model-parallel-layout); the plan
    # carries them as its pipeline_layout. A search key of the stage split: the costs do not depend on them.
    first_chunk_trim: int = 0
    last_chunk_trim: int = 0
    # memory-side dimensions (defaults: today's plan): HSDP replica groups of the ZeRO group, the optimizer
    # states' dtypes (costmodel/optimizer_states.py; None: assumptions.optimizer_bytes), the share of the
    # optimizer states offloaded to the host (costmodel/offload.py)
    zero_replicas: int = 1
    optimizer_states: str | None = None
    optimizer_offload_fraction: float = 0.0
    moe_fp8_dispatch: bool = False  # FP8 token dispatch (1 B + an fp32 scale per 128 elements), BF16 combine
    moe_a2a_overlap: bool = False  # Megatron-Core --overlap-moe-expert-parallel-comm (costmodel/moe_comm.py)
    activation_offload_layers: int = 0  # --cpu-offloading-num-layers: layers whose activations go to the host
    #                                     (costmodel/activation_offload.py; pp 1, no recompute)

    def but(self, **changes) -> "Choice":
        """A copy with ``changes``: ``dataclasses.replace`` without re-running ``__init__`` (the space's hot loop
        makes one per candidate; a Choice is a plain record with no validation of its own)."""
        unknown = changes.keys() - self.__dataclass_fields__.keys()
        if unknown:
            raise TypeError(f"Choice has no field(s) {sorted(unknown)}")
        new = object.__new__(Choice)
        new.__dict__.update(self.__dict__)
        new.__dict__.update(changes)
        return new

    # ---- degree arithmetic, in one place (as torchtitan's ParallelDims)
    @property
    def num_gpus(self) -> int:
        return self.tp * self.cp * self.pp * self.dp

    @property
    def stage_ranks(self) -> int:
        """GPUs of one pipeline stage: TP x CP x DP (the p2p stride in the mesh order tp-cp-dp-pp)."""
        return self.tp * self.cp * self.dp

    @property
    def dense_dp(self) -> int:
        """The gradient / ZeRO group of the dense parameters: DP x CP (Megatron's distributed optimizer)."""
        return self.dp * self.cp

    @property
    def expert_dp(self) -> int:
        """The gradient / ZeRO group of the routed experts: a stage's ranks folded as ETP x EP x EDP."""
        return self.stage_ranks // (self.ep * self.etp)

    @property
    def dense_shard(self) -> int:
        """HSDP: the ranks one dense ZeRO shard spans, DP·CP / zero_replicas (the whole group when 1).
        Megatron-Core's intra-partial DP group: consecutive ranks of the DP×CP group (parallel_state.py:922-929,
        984-992 at d98e8a64); torchtitan's dp_shard × cp mesh inside dp_replicate."""
        return max(1, self.dense_dp // self.zero_replicas)

    @property
    def expert_shard(self) -> int:
        """HSDP: the ranks one expert ZeRO shard spans, EDP / zero_replicas (parallel_state.py:1447-1452)."""
        return max(1, self.expert_dp // self.zero_replicas)

    @property
    def sequence_parallel_on(self) -> bool:
        return self.sequence_parallel and self.tp > 1


@dataclass(frozen=True)
class Link:
    """One communication group's tier: bandwidth in B/s and latency in s."""

    nvlink: bool
    bandwidth_Bps: float
    latency_s: float


@dataclass(frozen=True)
class ZeroGroup:
    """The group a ZeRO/DP collective runs in: ``shards`` ranks over ``link`` (the whole DP·CP or expert-DP
    group, or under HSDP one shard group), and ``replicas`` copies of it over ``replica_link`` (HSDP)."""

    link: Link
    shards: int
    replica_link: Link | None = None
    replicas: int = 1


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

    @property
    def time_s(self) -> float:
        return self.compute_s + self.tp_s + self.cp_s + self.ep_s + self.zero_s


def inflight_microbatches(c: Choice, stage: int) -> float:
    """Micro-batches whose activations stage ``stage`` holds at its peak (in whole-stage units)."""
    p, m, v = c.pp, c.num_microbatches, c.vpp
    extra = 1 if c.moe_a2a_overlap else 0  # one more forward before the combined 1F1B steps (moe_comm.py)
    if c.schedule in ("1f1b", "zb-h1"):
        return float(min(p - stage + extra, m))
    if c.schedule == "interleaved":
        # Megatron: warmup = (p - i - 1)·2 + (v - 1)·p chunk micro-batches, plus the one in flight;
        # stage 0 gives p + (p-1)/v stages' worth, Megatron's theoretical-memory penalty.
        return min((p - stage - 1) * 2 + (v - 1) * p + 1 + extra, m * v) / v
    if c.schedule == "dualpipe":
        return float(min(p + 1, m))  # DeepSeek-V3 Table 2: PP + 1
    if c.schedule == "dualpipev":
        return dualpipev.inflight_microbatches(p)  # 2p + 1 half-rank chunks (DualPipe README: PP + 1)
    raise ValueError(c.schedule)


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

    def stage_workspace_bytes(self, recomputed_layers: int) -> float:
        """The working set of a stage that fully recomputes ``recomputed_layers`` layers."""
        return self.workspace_bytes + (self.recompute_workspace_bytes if recomputed_layers > 0 else 0.0)

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
        """
        c = self.choice  # both byte sizes are 0 unless pipeline_runtime is 'torch' and pp > 1
        m, v = c.num_microbatches, c.vpp
        if c.schedule == "dualpipev":  # rank r's two stages, r and 2p-1-r (the first and the last on rank 0),
            #                            each holding half the rank's in-flight micro-batches
            half = self.inflight(stage)
            return sum(self._chunk_buffer_bytes(m, 1, first, last, half) for first, last in
                       ((stage == 0, False), (False, stage == 0)))
        first, last = stage == 0, stage == c.pp - 1
        return self._chunk_buffer_bytes(m, v, first, last, self.inflight(stage) * v)

    def _chunk_buffer_bytes(self, m: int, v: int, first: bool, last: bool, inflight_chunks: float) -> float:
        grad_recv = m * v - (m if last else 0)
        act_recv = max(0.0, m * v - (m if first else 0) - inflight_chunks)
        outputs = max(0.0, inflight_chunks - (1 if last else 0))
        retained = (m - 1) * self.retained_output_bytes if last else 0.0
        return (grad_recv + act_recv + outputs) * self.stage_io_bytes + retained

    def bubble_s(self, t_stage_s: float, a: Assumptions) -> float:
        """Bubble for the slowest stage's per-micro-batch time."""
        return t_stage_s * bubble_factor(self.choice, a)


def bubble_factor(c: Choice, a: Assumptions) -> float:
    """The schedule's bubble in units of the slowest stage's per-micro-batch time, F : B = 1 : ratio.

    DualPipe's paired chunk F&B (DeepSeek-V3 §3.2.1, Table 2) runs one micro-batch's forward and another's
    backward together so that each one's all-to-all and p2p hide behind the other's *compute*; the two
    computations still share the SMs, so F&B = F + B - (communication the pairing hides). The stage time
    t = F + B already carries only the exposed communication (the EP term's ``exposed()`` credits what
    the pairing hides, :func:`choice_costs`), so in units of t, F&B = F + B - x·F with x =
    ``dualpipe_chunk_overlap`` (default 0: no compute hidden by compute; the DualPipe repository,
    dualpipe/dualpipe.py at 030ce43, hands each pair to the model's own ``overlapped_forward_backward``
    hook, whose reference example runs the two chunks one after the other).
    """
    from parplan.costmodel.bubble import bubble_time

    r = a.backward_to_forward_ratio
    F, B = 1 / (1 + r), r / (1 + r)
    W = a.zb_weight_grad_fraction * B
    FandB = F + B - a.dualpipe_chunk_overlap * F
    return bubble_time(c.schedule, c.pp, F, B, W, FandB, c.vpp)


def with_schedule(costs: ChoiceCosts, choice: Choice) -> ChoiceCosts:
    """The costs of ``choice``, which differs from ``costs.choice`` only in a non-DualPipe schedule and vpp.

    Only the stage-boundary p2p depends on them (it scales with vpp; inflight and bubble read the
    choice); DualPipe also changes the EP overlap and is computed in full.
    """
    base = costs.choice
    if {"dualpipe", "dualpipev"} & {choice.schedule, base.schedule}:
        raise ValueError("DualPipe changes the EP overlap: compute its costs in full")
    out = copy(costs)
    object.__setattr__(out, "choice", choice)
    object.__setattr__(out, "p2p_s", costs.p2p_s * choice.vpp / base.vpp)
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


def usable_memory_bytes(spec: Spec, gpu: GPU, a: Assumptions) -> float:
    if a.memory_from_nominal_gb and spec.cluster.memory_gib is None:
        total = gpu.memory_gb_nominal * 1e9
    else:
        total = gpu.memory_gib * GIB
    return total * a.memory_usable_fraction - a.memory_reserve_gib * GIB


def nvlink_domain_size(spec: Spec, gpu: GPU) -> int:
    """NVLink domain: the override, a multi-node domain from the catalog (NVL72), else one node."""
    if spec.cluster.nvlink_domain_size is not None:
        return spec.cluster.nvlink_domain_size
    if gpu.nvlink_domain_size > 8:
        return gpu.nvlink_domain_size
    return min(gpu.nvlink_domain_size, spec.cluster.gpus_per_node)


def tier_links(gpu: GPU, a: Assumptions) -> tuple[Link, Link]:
    """(NVLink, network) tiers as achieved: line rate x efficiency, catalog latency x factor."""
    on = a.include_latency
    nv = Link(True, gpu.intra_node_bandwidth_gbps * 1e9 * a.intra_node_bandwidth_efficiency,
              gpu.intra_node_latency_us * 1e-6 * a.intra_node_latency_factor if on else 0.0)
    net = Link(False, gpu.inter_node_bandwidth_gbps * 1e9 * a.inter_node_bandwidth_efficiency,
               gpu.inter_node_latency_us * 1e-6 * a.inter_node_latency_factor if on else 0.0)
    return nv, net


def link(stride: int, size: int, domain: int, gpu: GPU, a: Assumptions, num_gpus: int | None = None) -> Link:
    nv, net = tier_links(gpu, a)
    return nv if span_within_domain(stride, size, domain, num_gpus) else net


def choice_costs(spec: Spec, choice: Choice, gpu: GPU, a: Assumptions, arch: Architecture | None = None) -> ChoiceCosts:
    """Every coefficient of the stage-affine model for one choice."""
    arch = arch or Architecture(spec.model)
    m = spec.model
    c = choice
    h = m.hidden_size
    seq = spec.training.seq_len
    domain = nvlink_domain_size(spec, gpu)
    precision = spec.training.precision
    peak = gpu.peak_tflops(precision) * 1e12
    rate = peak * max_linear_efficiency(a, gpu, precision)  # large GEMMs, at the training precision's peak

    n = c.num_gpus
    zero = effective_zero_stage(c.zero_stage, c.pp, a)
    links = {
        "tp": link(1, c.tp, domain, gpu, a, n),
        "cp": link(c.tp, c.cp, domain, gpu, a, n),
        "dp_cp": link(c.tp, c.cp * c.dp, domain, gpu, a, n),
        "pp": link(c.stage_ranks, c.pp, domain, gpu, a, n),
        "ep": link(c.etp, c.ep, domain, gpu, a, n),
        "edp": link(c.etp * c.ep, c.expert_dp, domain, gpu, a, n),
    }

    # DP/ZeRO collectives (ring reduce-scatter / all-gather) of a group with k members in each NVLink
    # domain: the ring crosses the network once per domain and the k members share the domain's NICs, so
    # each GPU moves 1/k of its ring bytes over its NIC (NVLink carries the rest): k x the NIC bandwidth
    # ideally, 1 + (k-1)·hierarchical_collective_efficiency as achieved, at most NVLink's
    # (hierarchical_collectives; textbook: every GPU's bytes over its own NIC)
    def collective(name: str, stride: int) -> Link:
        L_ = links[name]
        if L_.nvlink or not a.hierarchical_collectives:
            return L_
        k = max(1, domain // stride) if stride < domain else 1
        nv_bw = gpu.intra_node_bandwidth_gbps * 1e9 * a.intra_node_bandwidth_efficiency
        speedup = 1 + (k - 1) * a.hierarchical_collective_efficiency
        return Link(False, min(L_.bandwidth_Bps * speedup, max(nv_bw, L_.bandwidth_Bps)), L_.latency_s)

    coll = {"dp_cp": collective("dp_cp", c.tp), "edp": collective("edp", c.etp * c.ep)}
    R = c.zero_replicas
    if R > 1:  # HSDP: shard groups of consecutive ranks, their replicas strided by a shard group's span
        links["dp_shard"] = link(c.tp, c.dense_shard, domain, gpu, a, n)
        links["dp_replica"] = link(c.tp * c.dense_shard, R, domain, gpu, a, n)
        links["edp_shard"] = link(c.etp * c.ep, c.expert_shard, domain, gpu, a, n)
        links["edp_replica"] = link(c.etp * c.ep * c.expert_shard, R, domain, gpu, a, n)
        dense_grp = ZeroGroup(collective("dp_shard", c.tp), c.dense_shard,
                              collective("dp_replica", c.tp * c.dense_shard), R)
        expert_grp = ZeroGroup(collective("edp_shard", c.etp * c.ep), c.expert_shard,
                               collective("edp_replica", c.etp * c.ep * c.expert_shard), R)
    else:
        dense_grp = ZeroGroup(coll["dp_cp"], c.dense_dp)
        expert_grp = ZeroGroup(coll["edp"], c.expert_dp)
    links["etp"] = link(1, c.etp, domain, gpu, a, n)
    ep_sms_reserved = c.ep > 1 and a.ep_comm_sm_fraction > 0
    dispatch_bytes = moe_comm.dispatch_bytes_per_element(c.moe_fp8_dispatch, a.ep_dispatch_bytes)

    def all_to_all_s(token_bytes: float) -> float:
        """One dispatch plus one combine of ``token_bytes`` per routed token copy and element byte."""
        if c.ep <= 1:
            return 0.0
        if not a.hierarchical_all_to_all:  # textbook: a ring over the EP link, (ep-1)·alpha in sequence
            Le = links["ep"]
            return sum(ring_gather_time_s(token_bytes * moe.top_k * b, c.ep, Le.latency_s, Le.bandwidth_Bps)
                       for b in (dispatch_bytes, 2.0))
        local = ep_members_per_domain(c.etp, c.ep, domain, n)
        nv, net = tier_links(gpu, a)
        return sum(all_to_all_time_s(token_bytes * b, moe.top_k, c.ep, local, nv.bandwidth_Bps, nv.latency_s,
                                     net.bandwidth_Bps, net.latency_s, moe.max_nodes_per_token)
                   for b in (dispatch_bytes, 2.0))

    s_rank = seq // c.cp  # tokens of one sequence on a CP rank (seed 003: s = seq // cp)
    tokens_tp_group = c.micro_batch_size * s_rank  # tokens a TP group processes per micro-batch
    tokens_gpu = tokens_tp_group / c.tp  # per-GPU share of token-FLOPs
    # CP comm type: the a2a level's size, and the sequence one attention kernel call sees (context_parallel.py)
    cp_a2a = a2a_group_size(c.cp_comm_type, c.cp, ep_members_per_domain(c.tp, c.cp, domain, n)) if c.cp > 1 else 1
    attn_eff = attention_efficiency(a, gpu, attention_seq_len(c.cp_comm_type, seq, c.cp, cp_a2a))  # BF16 FlashAttention
    attn_rate = gpu.peak_bf16_tflops * 1e12 * attn_eff if attn_eff is not None else rate
    hbm_Bps = hbm_bandwidth_gbps(gpu, a) * 1e9

    # ---- seconds per linear FLOP of each GEMM group, by its per-GPU shape (costmodel/efficiency.py)
    def spf(gemms: list[tuple[float, float, float, float]]) -> float:
        return linear_seconds_per_flop(a, gpu, precision, peak, gemms)

    sp = c.sequence_parallel_on
    M = float(tokens_tp_group)  # GEMM rows: with or without SP, each TP rank multiplies every token
    f_mlp = m.ffn_hidden_size
    up = 2 if m.gated_mlp else 1
    attn_gemms = arch.attention_gemms(M, c.tp)
    mlp_gemms = [(up * h * f_mlp, M, h, up * f_mlp / c.tp), (h * f_mlp, M, f_mlp / c.tp, h)]
    spf_dense = spf(attn_gemms + mlp_gemms)
    fwd_share = 1.0 / (1.0 + a.backward_to_forward_ratio)

    # ---- communication per layer per micro-batch (fwd+bwd), seed 001 §3 / seed 003
    # TP collectives per block (attention or MLP), each a ring all-gather / reduce-scatter of one b·s·h
    # activation (an all-reduce counts two): without SP an all-reduce forward and one backward (4); with
    # SP an all-gather and a reduce-scatter forward, their transposes backward, and the all-gather of the
    # block's sequence-sharded input again for the column-parallel weight gradient (5; Megatron-LM
    # megatron/core/tensor_parallel/layers.py at 32efeffd, LinearWithGradAccumulationAndAsyncCommunication
    # .backward: ``if ctx.sequence_parallel: handle = dist_all_gather_func(all_gather_buffer, input, ...)``).
    # TP-comm overlap only with SP (Megatron arguments.py asserts --sequence-parallel for --tp-comm-overlap).
    act_group_bytes = tokens_tp_group * h * 2  # one b·s·h bf16 activation of the TP group
    L = links["tp"]
    tp_block_collectives = 5 if (sp and a.tp_sp_weight_grad_regather) else 4
    tp_overlap = a.tp_comm_overlap if sp else 0.0
    tp_one = ring_gather_time_s(act_group_bytes, c.tp, L.latency_s, L.bandwidth_Bps) * (1 - tp_overlap)
    tp_layer = 2 * tp_block_collectives * tp_one
    tp_layer_fwd = 2 * 2 * tp_one  # what a recomputed forward repeats
    kv_bytes = tokens_tp_group * (arch.k_dim + arch.v_dim) * 2 / (c.tp if a.cp_kv_sharded_by_tp else 1)  # K and V chunk
    if a.flash_attention:
        attn_core_s = tokens_gpu * arch.attention_core_flops(seq, a.attention_flops_causal_fraction) / attn_rate
    else:
        # unfused attention (before FlashAttention): batched GEMMs over the whole s x s score matrix, mask
        # applied afterwards, at the GEMM rate for their shapes (QK^T: s x d_head x s, AV: s x s x d_head);
        # the softmax/dropout passes over the scores are memory traffic (activation_traffic_passes)
        d_head = m.head_size
        attn_core_s = tokens_gpu * arch.attention_core_flops(seq, 1.0) * spf(
            [(1.0, s_rank, d_head, seq), (1.0, s_rank, seq, d_head)])
    cp = cp_attention_comm(c, a, gpu, links, domain, n, kv_bytes, tokens_tp_group, arch, attn_core_s, fwd_share, cp_a2a)
    cp_layer, cp_layer_fwd = cp.total_s, cp.fwd_s

    # ---- data-parallel / ZeRO traffic per parameter on this GPU
    def replica_reduce_per_param(grp: ZeroGroup) -> float:
        """HSDP: seconds per parameter on this GPU of the all-reduce of its gradient shard (1/shards of it)
        across the replicas (Megatron-Core param_and_grad_buffer.py:684-700 and 815-830 at d98e8a64: after
        the reduce-scatter in the shard group, an all-reduce over the inter-instance group; FSDP2 HSDP:
        reduce-scatter over dp_shard, all-reduce over dp_replicate), ring 2(R-1)/R."""
        if grp.replicas <= 1:
            return 0.0
        R = grp.replicas
        return 2 * (R - 1) / R * a.grad_reduce_bytes / grp.shards / grp.replica_link.bandwidth_Bps

    def dp_comm_per_param(grp: ZeroGroup) -> tuple[float, float]:
        """Seconds per step per parameter on this GPU of the once-per-step DP traffic, before overlap:
        (gradient part, weight part).

        ZeRO-0 all-reduces gradients (2(n-1)/n); ZeRO-1 (Megatron's distributed optimizer) reduce-scatters
        them and all-gathers the updated weights; ZeRO-2 reduce-scatters every micro-batch (see
        zero_comm_per_param) and gathers weights once; ZeRO-3 keeps weights sharded. The gradient part
        hides behind the last micro-batch's backward (--overlap-grad-reduce), the weight part behind the
        next step's first forward (--overlap-param-gather). HSDP (``zero_replicas`` R > 1): the collectives
        run in the shard group of n = DP·CP/R ranks, and ZeRO-1 all-reduces the gradient shard across the R
        replicas once per step (ZeRO-2/3: every micro-batch, zero_comm_per_param).
        """
        n, link_ = grp.shards, grp.link
        if n <= 1 and grp.replicas <= 1:
            return 0.0, 0.0
        f = (n - 1) / n / link_.bandwidth_Bps if n > 1 else 0.0
        grad = {0: 2 * a.grad_reduce_bytes, 1: a.grad_reduce_bytes, 2: 0.0, 3: 0.0}[zero]
        weight = {0: 0.0, 1: a.weight_bytes, 2: a.weight_bytes, 3: 0.0}[zero]
        grad_s = grad * f
        if zero <= 1:
            grad_s += replica_reduce_per_param(grp)
        return grad_s, weight * f

    # optimizer CPU offload (costmodel/offload.py): per parameter of this GPU, the offloaded share of its
    # optimizer shard (1/shards of it under ZeRO >= 1) goes to the host and back and steps on the CPU
    off = c.optimizer_offload_fraction
    offload_per_param_s = 0.0
    if off > 0:
        host_Bps = host_bandwidth_Bps(gpu.name, a.host_bandwidth_gbps, a.host_bandwidth_efficiency)
        sharing = max(1, min(spec.cluster.gpus_per_node, spec.cluster.num_gpus))  # GPUs sharing a host's CPUs
        offload_per_param_s = off * offload_seconds_per_param(
            host_Bps, a.host_adam_params_per_s / sharing, a.optimizer_offload_d2h_bytes,
            a.optimizer_offload_h2d_bytes, a.optimizer_offload_overlap)

    def offload_per_param(grp: ZeroGroup) -> float:
        """Exposed offload seconds per step per parameter on this GPU (its optimizer shard is 1/shards)."""
        return offload_per_param_s / (grp.shards if zero >= 1 else 1) if offload_per_param_s else 0.0

    def dp_exposed(parts: list[tuple[float, ZeroGroup]], layer_compute_s: float) -> float:
        """Exposed per-step DP time of the (params, group) parts of one layer, with the optimizer offload's
        host round trip (never hidden by compute: it runs between the last backward and the next forward)."""
        grad_s = sum(p_ * dp_comm_per_param(g_)[0] for p_, g_ in parts)
        weight_s = sum(p_ * dp_comm_per_param(g_)[1] for p_, g_ in parts)
        out = (exposed(grad_s, a.dp_comm_overlap, layer_compute_s * (1.0 - fwd_share))
               + exposed(weight_s, a.dp_comm_overlap, layer_compute_s * fwd_share))
        if offload_per_param_s:
            out += sum(p_ * offload_per_param(g_) for p_, g_ in parts)
        return out

    def dp_latency(grp: ZeroGroup) -> float:
        n, link_ = grp.shards, grp.link
        out = 2 * (n - 1) * link_.latency_s * (1 - a.dp_comm_overlap) if n > 1 else 0.0
        if grp.replicas > 1:
            out += 2 * (grp.replicas - 1) * grp.replica_link.latency_s * (1 - a.dp_comm_overlap)
        return out

    def zero_comm_per_param(grp: ZeroGroup) -> float:
        """Per micro-batch, before overlap: ZeRO-2 reduce-scatters gradients; ZeRO-3 also gathers the
        weights for forward and for backward (in the shard group); HSDP all-reduces the gradient shard
        across the replicas."""
        n, link_ = grp.shards, grp.link
        if zero < 2 or (n <= 1 and grp.replicas <= 1):
            return 0.0
        mb_bytes = a.grad_reduce_bytes + (2 * a.weight_bytes if zero == 3 else 0.0)
        out = (n - 1) / n * mb_bytes / link_.bandwidth_Bps if n > 1 else 0.0
        return out + replica_reduce_per_param(grp)

    def zero_latency(grp: ZeroGroup) -> float:
        """Per layer and micro-batch: the ring latency (n-1)·alpha of each of the layer's ZeRO-2/3
        collectives (ZeRO-2: the gradient reduce-scatter; ZeRO-3: ``zero3_collectives_per_layer``, by
        default two parameter all-gathers and the reduce-scatter); HSDP: the replicas' all-reduce 2(R-1)·alpha."""
        n, link_ = grp.shards, grp.link
        if zero < 2:
            return 0.0
        out = (a.zero3_collectives_per_layer if zero == 3 else 1) * (n - 1) * link_.latency_s if n > 1 else 0.0
        if grp.replicas > 1:
            out += 2 * (grp.replicas - 1) * grp.replica_link.latency_s
        return out

    def exposed(comm_s: float, overlap: float, window_s: float) -> float:
        """Traffic left on the critical path: the fixed fraction, or more when the compute it can hide
        behind (``window_s``) is shorter than the traffic."""
        hidden_share = comm_s * (1 - overlap)
        if a.overlap_limited_by_compute:
            return max(hidden_share, comm_s - window_s)
        return hidden_share

    opt_bytes = optimizer_state_bytes(c.optimizer_states, a.optimizer_bytes)

    def states(params_gpu: float, grp: ZeroGroup) -> float:
        """Weights, gradients and optimizer states sharded over the group's shard (HSDP: not its replicas),
        the offloaded share of the optimizer states on the host (costmodel/offload.py)."""
        return model_state_bytes(params_gpu, zero, grp.shards, a.weight_bytes, a.grad_bytes, opt_bytes, off)

    def fp8_weight_cache(matmul_params_gpu: float) -> float:
        """FP8 training keeps each GEMM weight's FP8 copy and its transpose across micro-batches
        (Transformer Engine caches them from the first micro-batch: ``is_first_microbatch``; Hopper's FP8
        GEMMs take both operands K-major, so the weight-gradient path needs the transpose); ZeRO-3 gathers
        weights per use and caches none. Norms, the router, embedding and head stay in BF16 (DeepSeek-V3
        §3.3.1)."""
        if not fp8 or zero == 3:
            return 0.0
        return matmul_params_gpu * a.fp8_weight_cache_bytes

    # ---- activations per layer: what is stored (memory) and all of it (elementwise traffic, working set)
    per_op_sac = (c.recompute == "selective" and a.selective_recompute_policy == "alternate_matmuls"
                  and a.activation_sbh_coefficient is None)
    # DeepSeek-V3 §3.2.3 / §3.3.2: RMSNorm outputs and the MLA up-projections recomputed, the experts'
    # SwiGLU inputs cached in FP8 and its output recomputed (Megatron-Core --recompute-modules layernorm
    # mla_up_proj moe_act)
    ds_selective = (c.recompute == "selective" and a.selective_recompute_policy == "deepseek_v3"
                    and a.activation_sbh_coefficient is None)
    fp8 = precision == "fp8"
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
            h, arch.q_dim, arch.k_dim, m.ffn_hidden_size, m.gated_mlp, m.num_attention_heads, s_rank,
            a.flash_attention, a.dropout_masks, keep_scores=(c.recompute != "selective"), linear_input_bytes=lb,
            recompute_norms=ds_selective, recompute_mla_up=ds_selective and mla is not None, **shape_kw)
        dense_act_per_token = items.per_token(c.tp, sp)
        attn_act_per_token = dense_act_per_token - mlp_activation_bytes(m.ffn_hidden_size, m.gated_mlp, lb) / c.tp
    rc_act_per_token = a.recomputed_layer_sbh_coefficient * h / (c.tp if (sp or a.activation_sbh_coefficient is not None) else 1)

    # ---- memory-bound elementwise work (norms, activation functions, dropout, residual adds, unfused
    # softmax): activation_traffic_passes x the layer's activation bytes (all of them in BF16, whatever is
    # stored and in which format)
    if a.activation_sbh_coefficient is None:
        traffic_per_token = dense_layer_activation_items(
            h, arch.q_dim, arch.k_dim, m.ffn_hidden_size, m.gated_mlp, m.num_attention_heads, s_rank,
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

    def traffic_s(per_token: float) -> float:
        return a.activation_traffic_passes * tokens_tp_group * per_token / hbm_Bps

    selective_dense = 0.0
    if per_op_sac:  # the forward of the matmuls not saved and of every elementwise op, again
        selective_dense = fwd_share * (sac_recompute_share * tokens_gpu * arch.dense_layer_linear_flops * spf_dense
                                       + traffic_s(traffic_per_token))
    elif c.recompute == "selective" and not a.flash_attention:
        selective_dense = attn_core_s * fwd_share
    if ds_selective:  # the up-projections' forward again, and the two RMSNorms (read input, write output)
        up_params = 0.0 if mla is None else (mla.q_lora_rank * arch.q_dim
                                             + mla.kv_lora_rank * m.num_attention_heads * (mla.qk_nope_head_dim + mla.v_head_dim))
        norm_bytes = 2 * 2 * (2 * h) / (c.tp if sp else 1)
        selective_dense += 2 * tokens_gpu * up_params * spf_dense + tokens_tp_group * norm_bytes / hbm_Bps

    def recompute_comm(tp_fwd_s: float, cp_fwd_s: float, ep_s: float) -> tuple[float, float, float]:
        """The forward communication a fully recomputed layer repeats: its forward TP collectives, the CP
        attention communication's forward part, half of the all-to-all."""
        if not a.recompute_repeats_comm:
            return (0.0, 0.0, 0.0)
        return (tp_fwd_s, cp_fwd_s, ep_s / 2)

    # ---- dense layer
    dense_params_gpu = arch.dense_layer_params / c.tp
    dense_flops = tokens_gpu * (arch.dense_layer_linear_flops + arch.attention_core_flops(seq, a.attention_flops_causal_fraction))
    dense_compute = tokens_gpu * arch.dense_layer_linear_flops * spf_dense + attn_core_s + traffic_s(traffic_per_token)
    rc_comm = recompute_comm(tp_layer_fwd, cp_layer_fwd, 0.0)
    dense = LayerCost(
        compute_s=dense_compute + selective_dense,
        tp_s=tp_layer,
        cp_s=cp_layer,
        ep_s=0.0,
        zero_s=exposed(dense_params_gpu * zero_comm_per_param(dense_grp)
                       + zero_latency(dense_grp), a.zero_microbatch_comm_overlap, dense_compute),
        recompute_s=dense_compute * fwd_share + sum(rc_comm),
        recompute_comm=rc_comm,
        selective_s=selective_dense,
        states_bytes=states(dense_params_gpu, dense_grp)
        + fp8_weight_cache(dense_params_gpu - arch.norm_params_per_layer / c.tp),
        act_bytes=tokens_tp_group * (dense_act_per_token + 2 * stored_gathered),
        act_recomputed_bytes=tokens_tp_group * rc_act_per_token,
        dp_s=dp_exposed([(dense_params_gpu, dense_grp)], dense_compute),
        model_flops=dense_flops,
        recompute_flops=dense_flops * fwd_share,
    )

    # a layer's activations, all of them (with DTensor SP, its gathered inputs too)
    full_layer_bytes = [tokens_tp_group * (traffic_per_token + 2 * gathered_per_token)]
    moe_cost = None
    moe = m.moe
    if moe is not None:
        nonexpert_gpu = arch.moe_layer_nonexpert_params / c.tp
        expert_gpu = arch.expert_params_per_layer / (c.ep * c.etp)
        moe_model_flops = tokens_gpu * (arch.moe_layer_dense_linear_flops + arch.moe_layer_expert_flops
                                        + arch.attention_core_flops(seq, a.attention_flops_causal_fraction))
        f_e, f_s = moe.expert_ffn_hidden_size, arch.shared_expert_ffn
        # routed experts: each expert of an EP rank sees top_k/num_experts of the EP group's tokens
        M_e = max(1.0, M * c.ep * c.etp / c.tp * moe.top_k / moe.num_experts)
        shared_gemms = [(up * h * f_s * moe.num_shared_experts, M, h, up * f_s / c.tp),
                        (h * f_s * moe.num_shared_experts, M, f_s / c.tp, h)] if moe.num_shared_experts else []
        nonexpert = attn_gemms + shared_gemms + [(h * moe.num_experts, M, h, moe.num_experts)]
        expert_gemms = [(up * h * f_e, M_e, h, up * f_e / c.etp), (h * f_e, M_e, f_e / c.etp, h)]
        moe_compute = (tokens_gpu * (arch.moe_layer_dense_linear_flops * spf(nonexpert)
                                     + arch.moe_layer_expert_flops * a.moe_load_imbalance * spf(expert_gemms))
                       + attn_core_s)
        if a.activation_sbh_coefficient is not None:
            moe_act_per_token = moe_traffic_per_token = a.activation_sbh_coefficient * h / c.tp
        else:
            gated = m.gated_mlp
            shared = moe.num_shared_experts * mlp_activation_bytes(f_s, gated, lb) / c.tp
            shared_all = moe.num_shared_experts * mlp_activation_bytes(f_s, gated) / c.tp
            routed = moe.top_k * (lb * h * c.etp + mlp_activation_bytes(
                f_e, gated, lb, swiglu_inputs_bytes=lb if ds_selective else 2.0, recompute_activation=ds_selective)) / c.tp
            routed_all = moe.top_k * (2 * h * c.etp + mlp_activation_bytes(f_e, gated)) / c.tp
            moe_act_per_token = attn_act_per_token + shared + routed * a.moe_load_imbalance
            moe_traffic_per_token = attn_traffic_per_token + shared_all + routed_all * a.moe_load_imbalance
        moe_compute += traffic_s(moe_traffic_per_token)
        full_layer_bytes.append(tokens_tp_group * (moe_traffic_per_token + gathered_per_token))
        if ep_sms_reserved:  # SMs reserved for the dispatch/combine kernels compute nothing (DeepSeek-V3 §3.2.2)
            moe_compute /= 1.0 - a.ep_comm_sm_fraction
        a2a = all_to_all_s(tokens_gpu * h)
        ep_overlap = moe_comm.ep_overlap_share(c.schedule, c.moe_a2a_overlap, a)
        # dispatch + combine, forward and backward, hidden at most behind the paired micro-batch's compute
        # of this layer (DualPipe's F&B chunk, Megatron-Core's --overlap-moe-expert-parallel-comm)
        ep_layer = exposed(2 * a2a, ep_overlap, moe_compute)
        # expert tensor parallelism: ETP > 1 all-gathers the dispatched tokens of the ETP group before the
        # experts and reduce-scatters their outputs (and the transposes backward): four collectives of
        # top_k x the tokens; ETP = 1 has no TP collective in the expert MLP (Megatron-Core
        # moe/token_dispatcher.py, MoEAlltoAllTokenDispatcher: gather/reduce-scatter over the expert-TP group)
        Lt = links["etp"]
        etp_one = ring_gather_time_s(tokens_gpu * c.etp * moe.top_k * h * 2, c.etp, Lt.latency_s, Lt.bandwidth_Bps)
        shared_blocks = 1 if moe.num_shared_experts else 0
        tp_moe = (1 + shared_blocks) * tp_block_collectives * tp_one + 4 * etp_one
        tp_moe_fwd = (1 + shared_blocks) * 2 * tp_one + 2 * etp_one
        rc_comm_m = recompute_comm(tp_moe_fwd, cp_layer_fwd, ep_layer)
        moe_cost = LayerCost(
            compute_s=moe_compute + selective_dense,
            tp_s=tp_moe,
            cp_s=cp_layer,
            ep_s=ep_layer,
            zero_s=exposed(nonexpert_gpu * zero_comm_per_param(dense_grp)
                           + expert_gpu * zero_comm_per_param(expert_grp)
                           + zero_latency(dense_grp) + zero_latency(expert_grp),
                           a.zero_microbatch_comm_overlap, moe_compute),
            recompute_s=moe_compute * fwd_share + sum(rc_comm_m),
            recompute_comm=rc_comm_m,
            selective_s=selective_dense,
            states_bytes=(states(nonexpert_gpu, dense_grp) + states(expert_gpu, expert_grp)
                          + fp8_weight_cache(nonexpert_gpu - (arch.norm_params_per_layer + h * moe.num_experts) / c.tp
                                             + expert_gpu)),
            act_bytes=tokens_tp_group * (moe_act_per_token + stored_gathered),
            act_recomputed_bytes=tokens_tp_group * rc_act_per_token,
            dp_s=dp_exposed([(nonexpert_gpu, dense_grp), (expert_gpu, expert_grp)],
                            moe_compute),
            model_flops=moe_model_flops,
            recompute_flops=moe_model_flops * fwd_share,
        )

    # ---- first / last stage extras: embedding, LM head, logits
    emb_gpu = arch.embedding_params / c.tp
    head_gpu = arch.head_params / c.tp
    if m.tie_embeddings and c.pp > 1:
        head_gpu += arch.embedding_params / c.tp  # the last stage keeps its own copy for the output layer
    if a.spread_embedding_evenly:
        first_params = last_params = 0.0  # textbook: folded into the per-layer weights below
    else:
        first_params, last_params = emb_gpu, head_gpu
    head_flops = tokens_gpu * arch.head_flops
    head_s = head_flops * spf([(1.0, M, h, m.vocab_size / c.tp)])
    logit_elements = tokens_tp_group * m.vocab_size / c.tp  # per micro-batch, vocabulary-sharded by TP
    logits = logit_elements * a.logits_bytes_per_element

    # ---- multi-token prediction on the last stage (DeepSeek-V3 §2.2; its §3.2.3 puts the MTP modules
    # with the output head): per module the 2h -> h projection, one transformer layer and the shared head
    # again, with their logits. Its time is all reported as the last stage's compute (the stage-affine
    # interface has no per-stage communication slot); its activations are held for the last stage's
    # in-flight micro-batches (a DualPipe rank weighs each of its two stages' activations by 1/2).
    n_mtp = m.num_mtp_layers
    mtp_time = mtp_flops = mtp_bytes = mtp_dp = 0.0
    if n_mtp:
        mtp_layer = moe_cost if (arch.mtp_layer_is_moe and moe_cost is not None) else dense
        proj_gpu = 2 * h * h / c.tp
        proj_s = tokens_gpu * 6 * 2 * h * h * spf([(1.0, M, 2 * h, h / c.tp)])
        mtp_time = n_mtp * (mtp_layer.time_s + proj_s + head_s)
        mtp_flops = n_mtp * tokens_gpu * arch.mtp_flops(seq, a.attention_flops_causal_fraction)
        # the last stage's in-flight micro-batches (DualPipeV: rank 0's, whose second chunk is the last stage)
        held = inflight_microbatches(c, 0 if c.schedule == "dualpipev" else c.pp - 1) * (
            0.5 if c.schedule == "dualpipe" else 1.0)
        mtp_act = mtp_layer.act_bytes + tokens_tp_group * 2 * (2 * h) / (c.tp if sp else 1)
        mtp_bytes = n_mtp * (mtp_layer.states_bytes + states(arch.mtp_module_params / c.tp, dense_grp)
                             + fp8_weight_cache(proj_gpu) + held * mtp_act)
        mtp_dp = n_mtp * (mtp_layer.dp_s + dp_exposed([(proj_gpu, dense_grp)], proj_s))
        logits *= 1 + n_mtp

    Lp = links["pp"]
    p2p_bytes = tokens_tp_group * h * 2 / c.tp  # seed 003: act_bytes / tp each way
    p2p = 0.0
    if c.pp > 1:
        chunks = 2 if c.schedule == "dualpipev" else c.vpp  # model chunks per rank, each sends both ways
        p2p = 2 * chunks * (Lp.latency_s + p2p_bytes / Lp.bandwidth_Bps) * (1 - a.pp_comm_overlap)

    torch_pipelining = c.pp > 1 and a.pipeline_runtime == "torch"
    stage_io = tokens_tp_group * h * 2 / (c.tp if sp else 1)  # the boundary tensor (sequence-sharded under SP)

    dp_lat = dp_latency(dense_grp)

    # ---- per-stage working set, held once whatever the layer count: a fully recomputed layer's
    # activations regenerated for its backward, and ZeRO-3's gathered weights and unreduced gradients
    workspace = recompute_workspace = 0.0
    if c.recompute == "full" and not per_op_sac:
        recompute_workspace = a.recompute_workspace_layers * max(full_layer_bytes)
    elif per_op_sac:  # every layer checkpoints per op: the regenerated layer is always there
        workspace += a.recompute_workspace_layers * max(full_layer_bytes)
    workspace += cp.workspace_bytes  # CP all-gather: the gathered K,V (and dK,dV) of the layer in flight
    if zero == 3:
        layer_params_gpu = dense_params_gpu if moe is None else max(dense_params_gpu, nonexpert_gpu + expert_gpu)
        workspace += a.zero3_unsharded_layers * layer_params_gpu * (a.weight_bytes + a.grad_bytes)

    costs = ChoiceCosts(
        choice=c,
        dense=dense,
        moe=moe_cost,
        first_extra_time_s=exposed(first_params * zero_comm_per_param(dense_grp),
                                   a.zero_microbatch_comm_overlap, 0.0),
        last_extra_time_s=head_s + mtp_time + exposed(last_params * zero_comm_per_param(dense_grp),
                                                      a.zero_microbatch_comm_overlap, head_s),
        last_extra_compute_s=head_s + mtp_time,
        p2p_s=p2p,
        first_extra_bytes=states(first_params, dense_grp),
        last_extra_bytes=states(last_params, dense_grp) + mtp_bytes,
        logits_bytes=logits,
        workspace_bytes=workspace,
        stage_io_bytes=stage_io if torch_pipelining else 0.0,
        retained_output_bytes=logit_elements * 2 if torch_pipelining else 0.0,  # bf16 outputs
        first_extra_dp_s=dp_exposed([(first_params, dense_grp)], 0.0),
        last_extra_dp_s=dp_exposed([(last_params, dense_grp)], head_s) + mtp_dp,
        dp_const_s=dp_lat,
        first_extra_flops=0.0,
        last_extra_flops=head_flops + mtp_flops,
        usable_memory_bytes=usable_memory_bytes(spec, gpu, a),
        peak_flops=peak,
        links=links,
        recompute_workspace_bytes=recompute_workspace,
    )
    if a.spread_embedding_evenly:
        costs = _spread_embedding(costs, arch, c, states,
                                  sum(dp_comm_per_param(dense_grp)) * (1 - a.dp_comm_overlap)
                                  + offload_per_param(dense_grp), spec, dense_grp)
    if c.activation_offload_layers:
        costs = apply_activation_offload(costs, spec, gpu, a)
    return costs


def cp_attention_comm(c: Choice, a: Assumptions, gpu: GPU, links: dict[str, Link], domain: int, n: int,
                      kv_bytes: float, tokens_tp_group: float, arch: Architecture, attn_core_s: float,
                      fwd_share: float, cp_a2a: int):
    """Exposed CP communication of one layer and micro-batch for the choice's CP comm type
    (costmodel/context_parallel.py holds the derivations and sources)."""
    from parplan.costmodel.context_parallel import CpComm

    if c.cp <= 1:
        return CpComm(0.0, 0.0)
    attn_fwd, attn_bwd = attn_core_s * fwd_share, attn_core_s * (1 - fwd_share)
    kind = c.cp_comm_type
    if kind == "allgather":
        Lc = links["cp"]
        return allgather_comm(c.cp, kv_bytes, Lc.latency_s, Lc.bandwidth_Bps)
    ring_cp, ring_link = c.cp, links["cp"]
    comm = CpComm(0.0, 0.0)
    if kind in ("a2a", "a2a+p2p"):
        # the a2a level: cp_a2a members with stride tp (innermost after TP in the mesh order tp-cp-dp-pp)
        nv, net = tier_links(gpu, a)
        local = ep_members_per_domain(c.tp, cp_a2a, domain, n)
        La = link(c.tp, cp_a2a, domain, gpu, a, n)

        def a2a(tensor_bytes: float) -> float:
            return ulysses_all_to_all_s(tensor_bytes, cp_a2a, local, (nv.bandwidth_Bps, nv.latency_s),
                                        (net.bandwidth_Bps, net.latency_s), a.hierarchical_all_to_all,
                                        (La.bandwidth_Bps, La.latency_s))

        # this GPU's Q, K, V and output before the re-shard: its tokens, its TP rank's heads, BF16
        qkv_bytes = tokens_tp_group * (arch.q_dim + arch.k_dim + arch.v_dim) * 2 / c.tp
        out_bytes = tokens_tp_group * arch.o_dim * 2 / c.tp
        comm = ulysses_comm(qkv_bytes, out_bytes, a2a)
        if kind == "a2a":
            return comm
        ring_cp = c.cp // cp_a2a  # the p2p level: stride tp·cp_a2a
        ring_link = link(c.tp * cp_a2a, ring_cp, domain, gpu, a, n)
    if a.cp_ring_model == "aggregate":
        ring = ring_aggregate_s(ring_cp, kv_bytes, ring_link.latency_s, ring_link.bandwidth_Bps, attn_core_s,
                                a.cp_comm_overlap, a.cp_comm_overlaps_attention)
    else:
        ring = ring_exposed_s(ring_cp, kv_bytes, ring_link.latency_s, ring_link.bandwidth_Bps,
                              attn_fwd if a.cp_comm_overlaps_attention else 0.0,
                              attn_bwd if a.cp_comm_overlaps_attention else 0.0)
    return CpComm(comm.fwd_s + ring.fwd_s, comm.bwd_s + ring.bwd_s, comm.workspace_bytes + ring.workspace_bytes)


def _spread_embedding(costs: ChoiceCosts, arch: Architecture, c: Choice, states, dp_per_param: float,
                      spec: Spec, g) -> ChoiceCosts:
    """Textbook convention: embedding and head weights spread evenly over the layers (psi = N/(tp·pp))."""
    from dataclasses import replace

    extra_params_per_layer = (arch.embedding_params + arch.head_params) / spec.model.num_layers / c.tp

    def bump(lc: LayerCost | None) -> LayerCost | None:
        if lc is None:
            return None
        return replace(lc, states_bytes=lc.states_bytes + states(extra_params_per_layer, g),
                       dp_s=lc.dp_s + extra_params_per_layer * dp_per_param)

    return replace(costs, dense=bump(costs.dense), moe=bump(costs.moe))

