"""Optimizer CPU offload: the offloaded share of the optimizer states leaves GPU memory, and every step pays
the host round trip of that share.

A choice's ``optimizer_offload_fraction`` f (0: nothing offloaded, today) is the share of a rank's optimizer
shard whose master weights and Adam moments live in host memory and whose Adam step runs on the CPU:
Megatron-Core's HybridDeviceOptimizer (``--optimizer-cpu-offload --optimizer-offload-fraction f``;
Megatron-LM d98e8a64 megatron/training/arguments.py:2918-2927, megatron/core/optimizer/cpu_offloading/
hybrid_optimizer.py:251-258 splits the shard by element count at ``offload_fraction``), DeepSpeed ZeRO-Offload
(``zero_optimization.offload_optimizer: {device: cpu, ratio: f}``; DeepSpeed edaa7221
deepspeed/runtime/zero/offload_config.py:55-61 and 99).

Memory (:func:`parplan.costmodel.memory.memory.model_state_bytes`): the optimizer term o/N becomes o·(1-f)/N.

Time per step (:func:`offload_seconds_per_param`), per parameter of the rank's optimizer shard, times f:
the gradient copied to the host (``optimizer_offload_d2h_bytes``), the CPU Adam step
(1 / the rank's share of ``host_adam_params_per_s``) and the updated parameter copied back
(``optimizer_offload_h2d_bytes``), over the GPU's host link (:data:`HOST_BANDWIDTH_GBPS`, per direction).
These run after the last micro-batch's gradients are reduced and before the next step's first forward
(hybrid_optimizer.py:150-180 ``step``: copy grads, CPU step, copy params back), so nothing hides them but each
other: in sequence (D2H + CPU + H2D), or with ``optimizer_offload_overlap`` (Megatron's
``--overlap-cpu-optimizer-d2h-h2d``, arguments.py:2926: the copies of one parameter group overlap the CPU step
of another) the slowest of the three pipelined phases: max(D2H + H2D, CPU) — the copies share the one link
only in opposite directions, so this is the bound of an ideal pipeline over many groups.
"""

from __future__ import annotations

# Host link per GPU, per direction, GB/s (catalog name -> value, source). The GPU's own PCIe/C2C line rate.
HOST_BANDWIDTH_GBPS: dict[str, tuple[float, str]] = {
    "A100-SXM-80GB": (32.0, "NVIDIA A100 datasheet: PCIe Gen4 64 GB/s (bidirectional, x16) -> 32 per direction"),
    "A100-SXM-40GB": (32.0, "NVIDIA A100 datasheet: PCIe Gen4 64 GB/s -> 32 per direction"),
    "H100-SXM-80GB": (64.0, "NVIDIA H100 datasheet: PCIe Gen5 128 GB/s (bidirectional, x16) -> 64 per direction"),
    "H800": (64.0, "H100 board: PCIe Gen5 x16, 64 GB/s per direction"),
    "H200-SXM-141GB": (64.0, "NVIDIA H200 datasheet: PCIe Gen5 128 GB/s -> 64 per direction"),
    "B200": (64.0, "NVIDIA DGX B200: GPUs attach to the hosts over PCIe Gen5 x16 -> 64 GB/s per direction"),
    "GB200-NVL72": (450.0, "NVIDIA GB200 NVL72 datasheet: NVLink-C2C 900 GB/s bidirectional Grace-Blackwell "
                    "link -> 450 per direction"),
    "GB300-NVL72": (450.0, "GB300 NVL72: the GB200's Grace CPU and NVLink-C2C (900 GB/s bidirectional) -> 450 per "
                    "direction (verda.com/blog/gb300-nvl72-architecture: Grace CPU unified memory, 36 Grace CPUs)"),
    "MI300X": (64.0, "AMD Instinct MI300X datasheet: PCIe Gen5 x16 128 GB/s -> 64 per direction"),
}
DEFAULT_HOST_BANDWIDTH_GBPS = 32.0  # a GPU missing above: PCIe Gen4 x16


def host_bandwidth_Bps(gpu_name: str, override_gbps: float | None, efficiency: float) -> float:
    """Achieved host-link bytes/s per direction: the override or the catalog value, times ``efficiency``."""
    gbps = override_gbps if override_gbps is not None else HOST_BANDWIDTH_GBPS.get(
        gpu_name, (DEFAULT_HOST_BANDWIDTH_GBPS, ""))[0]
    return gbps * 1e9 * efficiency


def offload_seconds_per_param(host_Bps: float, cpu_params_per_s: float, d2h_bytes: float, h2d_bytes: float,
                              overlap: bool) -> float:
    """Exposed seconds per step per offloaded parameter: D2H + CPU Adam + H2D, or with ``overlap``
    max(D2H + H2D, CPU Adam)."""
    pcie = (d2h_bytes + h2d_bytes) / host_Bps
    cpu = 1.0 / cpu_params_per_s
    return max(pcie, cpu) if overlap else pcie + cpu
