"""Alpha-beta timing of collectives (seed 001 §2.2-2.3).

A message of S bytes costs ``alpha + S / B``. Ring algorithms move 2(N-1)/N·S bytes per device for an
all-reduce in 2(N-1) steps, and (N-1)/N·S in N-1 steps for all-gather, reduce-scatter and all-to-all.
"""

from __future__ import annotations

import math


def ring_allreduce_bytes(size_bytes: float, n: int) -> float:
    """Bytes each device sends in a ring all-reduce: 2(N-1)/N · S."""
    return 2.0 * (n - 1) / n * size_bytes if n > 1 else 0.0


def ring_allreduce_time_s(size_bytes: float, n: int, alpha_s: float, bandwidth_Bps: float) -> float:
    """T = 2(N-1)·alpha + 2(N-1)/N · S / B (seed 001: 8 GPUs, 64 MiB: 0.85 ms on NVLink, 5.1 ms across nodes)."""
    if n <= 1:
        return 0.0
    return 2 * (n - 1) * alpha_s + ring_allreduce_bytes(size_bytes, n) / bandwidth_Bps


def ring_gather_time_s(size_bytes: float, n: int, alpha_s: float, bandwidth_Bps: float) -> float:
    """All-gather, reduce-scatter or all-to-all of S bytes (total per device): (N-1)·alpha + (N-1)/N·S/B."""
    if n <= 1:
        return 0.0
    return (n - 1) * alpha_s + (n - 1) / n * size_bytes / bandwidth_Bps


def all_to_all_time_s(token_bytes: float, copies: float, group: int, local_members: int, nvlink_Bps: float,
                      nvlink_latency_s: float, network_Bps: float, network_latency_s: float,
                      remote_nodes: float | None = None) -> float:
    """One expert-parallel all-to-all of ``copies`` routed copies of each token (``token_bytes`` per
    token and GPU in total, i.e. tokens x bytes per token) over an EP group of ``group`` GPUs, of which
    ``local_members`` share the sender's NVLink domain; destinations uniform over the group.

    The NVLink and network tiers run concurrently and every peer's send is posted at once (NCCL groups
    the point-to-point sends; DeepEP likewise), so the time is the slower tier's bytes over its bandwidth
    plus one latency, not (group - 1) latencies in sequence. Copies to the sender itself move nothing.

    * Per-expert sends (``remote_nodes`` None: a plain NCCL all-to-all): a copy for a GPU in another domain
      crosses the network: copies x (1 - local/group) per token; local copies go over NVLink: copies x
      (local - 1)/group.
    * Per-node sends (DeepEP/HybridEP, costmodel/moe/moe_dispatch.py): the token crosses the network
      ``remote_nodes`` times (the expected distinct remote nodes holding its experts) and is forwarded over
      NVLink inside each destination: every copy not for the receiving GPU itself moves once over NVLink,
      copies x (local - 1)/local.
    """
    return max(all_to_all_tiers_s(token_bytes, copies, group, local_members, nvlink_Bps, nvlink_latency_s,
                                  network_Bps, network_latency_s, remote_nodes))


def all_to_all_tiers_s(token_bytes: float, copies: float, group: int, local_members: int, nvlink_Bps: float,
                       nvlink_latency_s: float, network_Bps: float, network_latency_s: float,
                       remote_nodes: float | None = None) -> tuple[float, float]:
    """(NVLink, network) time of :func:`all_to_all_time_s`'s two concurrent tiers, each alone on its link: the
    all-to-all takes the larger; the smaller is how long it keeps the other tier busy (costmodel/communication/shared_links.py)."""
    if group <= 1 or copies <= 0:
        return 0.0, 0.0
    local = max(1, min(local_members, group))
    domains = math.ceil(group / local)
    if domains <= 1:
        nv_copies, net_copies = copies * (group - 1) / group, 0.0
    elif remote_nodes is not None:
        nv_copies = copies * (local - 1) / local
        net_copies = remote_nodes
    else:
        nv_copies = copies * (local - 1) / group
        net_copies = copies * (1 - local / group)
    t_nv = nvlink_latency_s + nv_copies * token_bytes / nvlink_Bps if nv_copies > 0 else 0.0
    t_net = network_latency_s + net_copies * token_bytes / network_Bps if net_copies > 0 else 0.0
    return t_nv, t_net


def p2p_time_s(size_bytes: float, alpha_s: float, bandwidth_Bps: float) -> float:
    return alpha_s + size_bytes / bandwidth_Bps


def tp_comm_bytes_per_step(batch: int, seq_len: int, hidden: int, dtype_bytes: int, tp: int, num_layers: int,
                           steps: int = 1) -> float:
    """Seed 001 ``estimate_tp_comm``: per-GPU bytes of the four ring all-reduces per layer (2 fwd + 2 bwd)."""
    size = batch * seq_len * hidden * dtype_bytes
    return ring_allreduce_bytes(size, tp) * 4 * num_layers * steps


def per_layer_comm_bytes(batch: int, seq_len: int, hidden: int, top_k: int, tp: int = 1,
                         dtype_bytes: int = 2) -> tuple[float, float, float]:
    """Seed 000 ``comm_ledger.py``, forward pass of one layer: (TP, EP, PP) bytes.

    TP: two all-reduces of the b·s·h activation (ring factor 2(t-1)/t); EP: dispatch plus combine of
    top_k copies of every token; PP: one activation sent across the stage boundary.
    """
    act = batch * seq_len * hidden * dtype_bytes
    tp_bytes = 2 * ring_allreduce_bytes(act, tp)
    ep_bytes = 2.0 * batch * seq_len * top_k * hidden * dtype_bytes
    return tp_bytes, ep_bytes, float(act)
