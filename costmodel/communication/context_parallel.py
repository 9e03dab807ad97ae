"""Context parallelism's attention communication, per layer and micro-batch: one function per CP comm type.

Megatron-Core's ``--cp-comm-type`` (NVIDIA/Megatron-LM@d98e8a64 megatron/training/arguments.py:3221) selects
one of Transformer Engine's CP attention implementations (NVIDIA/TransformerEngine@d0067d0d
transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py, "TE" below):

* ``p2p`` -- ``AttnFuncWithCPAndKVP2P`` (ring attention, Liu et al., arXiv 2310.01889 §3): each rank keeps
  its queries and passes its K,V block around the ring; every step's transfer runs while the step's
  attention block computes (:func:`ring_exposed_s`).
* ``a2a`` -- ``AttnFuncWithCPAndQKVOA2A`` (DeepSpeed-Ulysses, Jacobs et al., arXiv 2309.14509 §3): all-to-all
  of Q, K, V from sequence-sharded to head-sharded before attention, and of the output back after it; the
  attention kernel sees the whole sequence for heads/cp heads (:func:`ulysses_all_to_all_s`).
* ``allgather`` -- ``AttnFuncWithCPAndKVAllGather`` (Llama 3 paper, arXiv 2407.21783 §3.3.2): K,V
  all-gathered before attention ("KV all-gather between CP ranks is exposed", the class docstring),
  gathered again in backward and the K,V gradients reduce-scattered.
* ``a2a+p2p`` -- hierarchical CP (``AttnFuncWithCPAndKVP2P`` with ``cp_group_a2a``; LongVILA arXiv
  2408.10188, USP arXiv 2405.07719): a2a over heads within the low-level group, a p2p ring across the
  high-level groups; Megatron needs ``--hierarchical-context-parallel-sizes`` (arguments.py:583-585). parplan
  takes the low-level group to be the CP members that share an NVLink domain (so the a2a stays on NVLink).

Byte counts are per GPU; times are exposed seconds (what the layer's stage time carries), forward and
backward separately so that a recomputed layer repeats only the forward part.
"""

from __future__ import annotations

from dataclasses import dataclass

from parplan.costmodel.communication.collectives import all_to_all_time_s, ring_gather_time_s

CP_COMM_TYPES: tuple[str, ...] = ("p2p", "a2a", "allgather", "a2a+p2p")


@dataclass(frozen=True)
class CpComm:
    """Exposed CP communication of one layer and micro-batch, and what it holds besides the activations."""

    fwd_s: float
    bwd_s: float
    workspace_bytes: float = 0.0  # held once per stage while one layer's attention runs

    @property
    def total_s(self) -> float:
        return self.fwd_s + self.bwd_s


def ring_exposed_s(cp: int, kv_bytes: float, latency_s: float, bandwidth_Bps: float, attn_fwd_s: float,
                   attn_bwd_s: float) -> CpComm:
    """Exposed time of the p2p KV ring of ``cp`` ranks, each holding ``kv_bytes`` of K and V.

    Forward (TE ``AttnFuncWithCPAndKVP2P.forward``, ``for i in range(cp_size + 1)``): step i waits for KV
    block i, posts the send/receive of block i+1 and computes block i, so the cp - 1 transfers each run
    alongside one block's compute (step 0 computes on the local block while block 1 arrives; nothing is
    exposed before it). Each step lasts max(compute, transfer): exposed = (cp - 1)·max(0, T - C_f).

    Backward (``.backward``, ``for i in range(cp_size)``): step i posts one message, computes block i and
    waits for the message before correcting dK,dV; step 0 sends K,V only, steps 1..cp-2 send K,V and the
    partial dK,dV together (one message of twice the bytes), step cp-1 sends dK,dV only (the same
    size as K,V in BF16): exposed = max(0, T - C_b) + (cp - 2)·max(0, T2 - C_b) + max(0, T - C_b).

    With the causal load balancing both use (each rank holds chunks i and 2cp-1-i), every step computes
    the same share of the rank's attention core, so C = attention time / cp (forward and backward
    apart). T = alpha + kv_bytes / B and T2 = alpha + 2·kv_bytes / B: one message per step (NCCL
    ``batch_isend_irecv``; the send to the next rank and the receive from the previous one use the two
    directions of the link). Bytes moved: (cp - 1) + 2(cp - 1) = 3(cp - 1) blocks, as before; only their
    overlap is physical now (no fitted share: when each step's compute outlasts its transfer the ring is
    free, as Liu et al. §3 state).
    """
    if cp <= 1:
        return CpComm(0.0, 0.0)
    t1 = latency_s + kv_bytes / bandwidth_Bps
    t2 = latency_s + 2 * kv_bytes / bandwidth_Bps
    c_f, c_b = attn_fwd_s / cp, attn_bwd_s / cp
    fwd = (cp - 1) * max(0.0, t1 - c_f)
    bwd = 2 * max(0.0, t1 - c_b) + (cp - 2) * max(0.0, t2 - c_b)
    return CpComm(fwd, bwd)


def ring_aggregate_s(cp: int, kv_bytes: float, latency_s: float, bandwidth_Bps: float, attn_s: float,
                     overlap: float, overlaps_attention: bool) -> CpComm:
    """Seed 003's ring pricing (the ``textbook`` preset, ``cp_ring_model: aggregate``): 3(cp - 1) block
    transfers, a share ``overlap`` of them hidden but never more than the whole attention core; one third
    of it is the forward's."""
    if cp <= 1:
        return CpComm(0.0, 0.0)
    ring = 3 * (cp - 1) * (latency_s + kv_bytes / bandwidth_Bps)
    total = max(ring * (1 - overlap), ring - attn_s) if overlaps_attention else ring
    return CpComm(total / 3, total * 2 / 3)


def ulysses_all_to_all_s(tensor_bytes: float, group: int, local_members: int, nvlink: tuple[float, float],
                         network: tuple[float, float], hierarchical: bool, ring_link: tuple[float, float]) -> float:
    """One all-to-all over the CP group that re-shards ``tensor_bytes`` (this GPU's share of one tensor)
    between the sequence and the head dimension: each GPU keeps 1/group of it and sends 1/group to every
    other member (Jacobs et al. §3.1: the message per link is N·h/P² of each GPU's N·h/P).

    The tiers are chosen as the EP all-to-all's (:func:`collectives.all_to_all_time_s` with one copy per
    token, destinations uniform over the group: members in the sender's NVLink domain over NVLink, the
    rest over the network, both at once); ``hierarchical`` False (textbook) is a ring over the group's link.
    ``nvlink``/``network``/``ring_link`` are (bandwidth B/s, latency s).
    """
    if group <= 1:
        return 0.0
    if not hierarchical:
        return ring_gather_time_s(tensor_bytes, group, ring_link[1], ring_link[0])
    return all_to_all_time_s(tensor_bytes, 1.0, group, local_members, nvlink[0], nvlink[1], network[0], network[1])


def ulysses_comm(qkv_bytes: float, out_bytes: float, a2a) -> CpComm:
    """``a2a``: forward re-shards Q,K,V (one all-to-all call for the three, TE ``flash_attn_a2a_communicate``)
    and the output; backward re-shards dO and dQ,dK,dV (TE ``AttnFuncWithCPAndQKVOA2A.backward``): four
    all-to-alls per attention forward as in Jacobs et al. §3 (Q, K, V, O), the same volume backward. None
    overlaps the attention kernel (it needs the re-sharded tensors; exposed). ``a2a(bytes)`` prices one.

    Memory: the attention core saves Q, K, V and O for the whole sequence of heads/cp heads instead of
    seq/cp tokens of every head (TE saves the re-sharded tensors): the same bytes per GPU (Jacobs et al.
    §3.2: activation memory per GPU falls with the SP degree as with sequence sharding), so no term
    differs from the ring's; the all-to-all buffers are freed with the pre-shard tensors."""
    fwd = a2a(qkv_bytes) + a2a(out_bytes)
    return CpComm(fwd, fwd)


def allgather_comm(cp: int, kv_bytes: float, latency_s: float, bandwidth_Bps: float) -> CpComm:
    """``allgather``: forward all-gathers K,V (each rank's ``kv_bytes``; ring all-gather, (cp-1)·alpha +
    (cp-1)·kv_bytes/B); backward gathers them again (TE saves only the local K,V) and reduce-scatters the
    full-length dK,dV; all of it exposed (TE ``AttnFuncWithCPAndKVAllGather`` docstring). Working set: the
    gathered K,V and, in backward, the full-length dK,dV beside them, 2·cp·kv_bytes, held once."""
    if cp <= 1:
        return CpComm(0.0, 0.0)
    one = ring_gather_time_s(cp * kv_bytes, cp, latency_s, bandwidth_Bps)
    return CpComm(one, 2 * one, workspace_bytes=2 * cp * kv_bytes)


def a2a_group_size(comm_type: str, cp: int, members_per_domain: int) -> int:
    """Ranks of the all-to-all (head-sharding) level: cp for ``a2a``, the CP members in one NVLink domain
    for ``a2a+p2p``, 1 otherwise."""
    if comm_type == "a2a":
        return cp
    if comm_type == "a2a+p2p":
        return max(1, min(cp, members_per_domain))
    return 1


def attention_seq_len(comm_type: str, seq_len: int, cp: int, a2a_size: int) -> int:
    """Sequence length one attention kernel call sees (the short-sequence efficiency penalty reads it):
    seq/cp for the ring and all-gather (a rank's query block), the whole sequence under ``a2a`` (heads
    are sharded instead), seq/(cp/a2a_size) under ``a2a+p2p``."""
    return seq_len // (cp // a2a_size)
