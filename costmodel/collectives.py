"""Alpha-beta timing of collectives (seed 001 §2.2-2.3).

A message of S bytes costs ``alpha + S / B``. Ring algorithms move 2(N-1)/N·S bytes per device for an
all-reduce in 2(N-1) steps, and (N-1)/N·S in N-1 steps for all-gather, reduce-scatter and all-to-all.
"""

from __future__ import annotations


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
