"""Memory a training process takes outside the tensor ledger, term by term, each from its own knobs
(:class:`~parplan.costmodel.spec.assumptions.Assumptions`, section "memory outside the ledger") and source.

Two kinds, by what they depend on:

* **per GPU, whatever the plan** (they lower the usable memory, :func:`device_reserve`):

  - the CUDA context (``cuda_context_gib``): the driver's context, the loaded kernel images of PyTorch, cuBLAS,
    cuDNN, NCCL and Transformer Engine. pytorch/pytorch PR #86509 measured a bare ``torch`` context at 666,632,192
    bytes with eager module loading and 287,047,680 with ``CUDA_MODULE_LOADING=LAZY`` (the default since PyTorch
    1.13 and, in the driver, CUDA 12.2: CUDA C Programming Guide, "Lazy Loading"); a training process loads the
    kernels of its libraries on top, about 500-600 MiB on H100 with CUDA 12 (default 0.5 GiB);
  - the PyTorch caching allocator's fragmentation (``allocator_fragmentation``, or
    ``allocator_fragmentation_expandable`` with ``expandable_segments``): memory reserved in segments that the
    ledger's tensors cannot use, as a share of the GPU's memory, taken where it matters: near the limit, where
    reserved memory is the GPU's. Without expandable segments the 5 % the cost model has always kept; PyTorch's
    CUDA semantics notes ("Optimizing memory usage with PYTORCH_CUDA_ALLOC_CONF", ``expandable_segments``) say
    expandable segments reduce it (2 %: an assumption, not a measurement).

* **per plan** (a line of every stage's ledger, counted in its memory, :func:`runtime_bytes`):

  - NCCL's buffers, per communicator the plan creates (:func:`communicators`): a ring collective's communicator
    keeps a send and a receive buffer of ``NCCL_BUFFSIZE`` (4 MiB default, NCCL environment variables docs) per
    channel (``nccl_channels``); an all-to-all or point-to-point communicator keeps them per peer on
    ``NCCL_NCHANNELS_PER_NET_PEER`` channels (default 2, same docs); NVLink SHARP (NVLS) communicators add
    ``nccl_nvls_mib`` where NVLS is used (0: not counted; many Megatron recipes run with ``NCCL_NVLS_ENABLE=0``);
  - Transformer Engine's userbuffers when TP communication overlaps the GEMMs (``--tp-comm-overlap``): Megatron-LM
    (d98e8a64 megatron/training/initialize.py:194-250 ``_initialize_tp_communicators``) passes the shape
    ``(seq_length·micro_batch_size/context_parallel_size, hidden_size)`` to TE's ``initialize_ub``, which makes one
    buffer of it per overlapped GEMM: 4 ring-exchange, 2 pipelined and 4 bulk (``userbuffer_count`` 10), in BF16,
    the all-gather ones in FP8 under FP8 training (6 of 10);
  - Transformer Engine's cuBLAS workspaces: ``get_cublas_workspace_size_bytes`` is 32 MiB on Hopper and newer,
    4 MiB before; one for the main stream and one per grouped-GEMM stream (4), and 3 more with userbuffers
    (``_NUM_MAX_UB_STREAMS``) (``te_cublas_workspaces`` 5).

The textbook preset sets all of them to 0 but its 10 % fragmentation (seed 003's 0.9 usable share).
"""

from __future__ import annotations

from dataclasses import dataclass

from parplan.costmodel.spec.assumptions import Assumptions
from parplan.costmodel.spec.degrees import Choice
from parplan.costmodel.spec.hardware import GIB, GPU

MIB = 2**20
UB_STREAMS = 3  # Transformer Engine _NUM_MAX_UB_STREAMS: cuBLAS workspaces added with userbuffers
UB_ALL_GATHER_BUFFERS = 6  # of the 10: qkv_fprop, qkv_dgrad, proj_dgrad, fc1_fprop, fc1_dgrad, fc2_dgrad (FP8 under FP8)


@dataclass(frozen=True)
class Communicator:
    name: str
    size: int
    kind: str  # 'ring' (all-reduce, reduce-scatter, all-gather) or 'p2p' (all-to-all, pipeline send/recv)


def communicators(c: Choice) -> list[Communicator]:
    """The NCCL communicators of more than one rank a Megatron-Core-style run of ``c`` creates and uses every step
    (``parallel_state.initialize_model_parallel``): TP, CP, the DP×CP gradient group (and, with HSDP, the
    inter-replica group), PP, EP and the expert-DP group. The embedding group (first and last stage only) and the
    model-parallel group of the gradient norm are not counted."""
    out = []
    if c.tp > 1:
        out.append(Communicator("tp", c.tp, "ring"))
    if c.cp > 1:
        out.append(Communicator("cp", c.cp, "p2p" if c.cp_comm_type == "p2p" else "ring"))
    if c.dense_dp > 1:
        out.append(Communicator("dp", c.dense_shard, "ring"))
        if c.zero_replicas > 1:
            out.append(Communicator("dp_replicas", c.zero_replicas, "ring"))
    if c.pp > 1:
        out.append(Communicator("pp", c.pp, "p2p"))
    if c.ep > 1:
        out.append(Communicator("ep", c.ep, "p2p"))
        if c.expert_dp > 1:
            out.append(Communicator("expert_dp", c.expert_dp, "ring"))
    return out


def nccl_buffer_bytes(c: Choice, a: Assumptions) -> float:
    """NCCL's send and receive buffers over the plan's communicators (module docstring)."""
    buf = a.nccl_buffsize_mib * MIB
    total = 0.0
    for comm in communicators(c):
        if comm.kind == "ring":
            total += 2 * buf * a.nccl_channels
        else:  # each peer its own connection: pipeline stages talk to their two neighbours
            peers = min(comm.size - 1, 2) if comm.name in ("pp", "cp") else comm.size - 1
            total += 2 * buf * a.nccl_p2p_channels_per_peer * peers
        if comm.name == "tp" and a.nccl_nvls_mib:
            total += a.nccl_nvls_mib * MIB
    return total


def userbuffer_bytes(c: Choice, seq_len: int, hidden: int, precision: str, a: Assumptions) -> float:
    """Transformer Engine's userbuffers for TP communication overlap (TP > 1 with sequence parallelism and a TP
    overlap share above 0); 0 otherwise."""
    if c.tp <= 1 or not c.sequence_parallel or a.tp_comm_overlap <= 0 or not a.userbuffer_count:
        return 0.0
    elements = seq_len * c.micro_batch_size // c.cp * hidden
    n = a.userbuffer_count
    if precision == "fp8":
        fp8 = min(n, UB_ALL_GATHER_BUFFERS)
        return elements * (fp8 * 1 + (n - fp8) * 2)
    return elements * n * 2


def te_workspace_bytes(c: Choice, gpu: GPU, a: Assumptions, userbuffers: bool) -> float:
    """Transformer Engine's cuBLAS workspaces: 32 MiB each on Hopper and newer, 4 MiB before."""
    each = (4 if gpu.generation == "ampere" else 32) * MIB
    return each * (a.te_cublas_workspaces + (UB_STREAMS if userbuffers else 0))


@dataclass(frozen=True)
class RuntimeMemory:
    """The plan's terms outside the tensor ledger, bytes per GPU (every stage holds them)."""

    nccl_bytes: float
    userbuffer_bytes: float
    te_workspace_bytes: float

    @property
    def total(self) -> float:
        return self.nccl_bytes + self.userbuffer_bytes + self.te_workspace_bytes


def runtime_memory(c: Choice, seq_len: int, hidden: int, precision: str, gpu: GPU, a: Assumptions) -> RuntimeMemory:
    ub = userbuffer_bytes(c, seq_len, hidden, precision, a)
    return RuntimeMemory(nccl_buffer_bytes(c, a), ub, te_workspace_bytes(c, gpu, a, ub > 0))


@dataclass(frozen=True)
class DeviceReserve:
    """The plan-independent terms, bytes per GPU: what the usable memory leaves out besides the user's margin."""

    cuda_context_bytes: float
    fragmentation_bytes: float

    @property
    def total(self) -> float:
        return self.cuda_context_bytes + self.fragmentation_bytes


def fragmentation_share(a: Assumptions) -> float:
    return a.allocator_fragmentation_expandable if a.expandable_segments else a.allocator_fragmentation


def device_reserve(total_bytes: float, a: Assumptions) -> DeviceReserve:
    return DeviceReserve(a.cuda_context_gib * GIB, total_bytes * fragmentation_share(a))


def memory_for_usable(usable_gib: float, a: Assumptions) -> float:
    """The GPU memory (GiB) whose usable memory is ``usable_gib`` (no margin): the inverse of the reserve."""
    return (usable_gib + a.cuda_context_gib) / (1.0 - fragmentation_share(a))


def outside_ledger_gib(spec, costs, a: Assumptions) -> dict[str, float]:
    """Every term outside the ledger, GiB per GPU, for the answer's ``memory_outside_ledger_gib``: the device terms
    from the GPU memory behind ``costs.usable_memory_bytes`` (usable = total - context - share·total - margin), the
    plan's from ``costs`` (a :class:`~parplan.costmodel.evaluation.choice.ChoiceCosts`)."""
    margin = spec.search.memory_margin_gib * GIB
    total = (costs.usable_memory_bytes + margin + a.cuda_context_gib * GIB) / (1.0 - fragmentation_share(a))
    dev = device_reserve(total, a)
    return {"cuda_context": dev.cuda_context_bytes / GIB, "allocator_fragmentation": dev.fragmentation_bytes / GIB,
            "nccl_buffers": costs.nccl_bytes / GIB, "userbuffers": costs.userbuffer_bytes / GIB,
            "te_workspaces": costs.te_workspace_bytes / GIB}
