"""What the cost model predicts for a probe's kernel rows and for measured collectives, knob by knob.

Each function returns (predicted, measured, candidate knobs) for one row, both in the same unit, from the cost
model's own rate functions, so that ``calibrate`` fits the very knobs those functions read:

* GEMM ``M x K x N``: the share of the peak the model gives one GEMM of that shape
  (costmodel/compute/efficiency.py ``linear_seconds_per_flop``: e_gen / (1 + kappa·R·(1/M + 1/K + 1/N))) against the
  measured ``2·M·K·N / (seconds · peak)``; knobs ``matmul_efficiency_<generation>`` (``fp8_...`` for FP8) and
  ``matmul_shape_penalty``;
* attention (batch, heads, seq, head_dim, causal): ``attention_efficiency`` (the model's share for ``seq`` tokens
  per rank at that head dim) against the measured ``4·b·h·s²·d·(1/2 if causal) / (seconds · peak)`` of the forward
  pass (the model prices forward and backward at one share: an assumption the probe cannot test);
  knobs ``attention_efficiency_<generation>`` and ``attention_seq_penalty``;
* HBM: ``hbm_bandwidth_gbps`` (costmodel/compute/efficiency.py) against the probe's copy bandwidth (bytes read + written
  per second);
* a collective of ``op`` over ``ranks`` GPUs, ``k`` per node: the bus bandwidth the model's links give
  (costmodel/communication/comm.py ``tier_links``, ``with_busbw`` inside one node, ``hierarchical_collective_link`` across nodes)
  against nccl-tests' busbw; knobs ``nvlink_busbw_scale`` (where the GPU has a measured NVLink busbw prior) or
  ``intra_node_bandwidth_efficiency``, and ``inter_node_bandwidth_efficiency`` /
  ``hierarchical_collective_efficiency`` across nodes. Only rows of at least :data:`BANDWIDTH_ROW_BYTES` are used
  (below it latency dominates), or the largest one.
"""

from __future__ import annotations

from typing import Any, Optional

from parplan.costmodel.communication.comm import hierarchical_collective_link, tier_links, with_busbw
from parplan.costmodel.compute.efficiency import attention_efficiency, hbm_bandwidth_gbps, linear_seconds_per_flop
from parplan.costmodel.spec.hardware import lookup_gpu, nvlink_busbw_gbps

BANDWIDTH_ROW_BYTES = 32 * 2**20
FP8_DTYPES = ("fp8", "float8", "float8_e4m3fn", "e4m3")


def gpu_of(name: str):
    return lookup_gpu(name)


def kernel_prediction(kind: str, gpu_name: str, shape: dict[str, Any], seconds: float, peak_tflops: Optional[float],
                      a) -> tuple[float, float, tuple[str, ...]]:
    """(predicted, measured, knobs) of one probe row (module docstring); shares of the peak, or GB/s for hbm."""
    gpu = gpu_of(gpu_name)
    gen = gpu.generation
    if kind == "hbm":
        return hbm_bandwidth_gbps(gpu, a), float(shape["bytes"]) / seconds / 1e9, ("hbm_bandwidth_gbps",)
    fp8 = str(shape.get("dtype", "bf16")).lower() in FP8_DTYPES
    precision = "fp8" if fp8 and kind == "gemm" else "bf16"
    peak = gpu.peak_tflops(precision) * 1e12
    measured_peak = (peak_tflops or peak / 1e12) * 1e12
    if kind == "gemm":
        m, k, n = (float(shape[x]) for x in ("m", "k", "n"))
        predicted = 1.0 / (peak * linear_seconds_per_flop(a, gpu, precision, peak, [(1.0, m, k, n)]))
        stem = "fp8_matmul_efficiency" if fp8 else "matmul_efficiency"
        return predicted, 2 * m * k * n / (seconds * measured_peak), (f"{stem}_{gen}", "matmul_shape_penalty")
    b, h, s, d = (float(shape[x]) for x in ("batch", "heads", "seq", "head_dim"))
    flops = 4 * b * h * s * s * d * (0.5 if shape.get("causal", True) else 1.0)
    predicted = attention_efficiency(a, gpu, s, d) or 0.0
    return predicted, flops / (seconds * measured_peak), (f"attention_efficiency_{gen}", "attention_seq_penalty")


def collective_prediction(gpu_name: str, op: str, ranks: int, ranks_per_node: int,
                          a) -> tuple[float, tuple[str, ...]]:
    """(predicted bus bandwidth in GB/s, knobs) of a collective (module docstring)."""
    gpu = gpu_of(gpu_name)
    nv, net = tier_links(gpu, a)
    if ranks <= ranks_per_node:
        prior = nvlink_busbw_gbps(gpu, op, a.nvlink_sharp_all_reduce)
        knob = "nvlink_busbw_scale" if prior is not None and a.collective_busbw_priors else "intra_node_bandwidth_efficiency"
        return with_busbw(nv, gpu, a, op).bandwidth_Bps / 1e9, (knob,)
    domain = gpu.nvlink_domain_size
    stride = max(1, domain // max(1, ranks_per_node))
    nv_bw = with_busbw(nv, gpu, a, op).bandwidth_Bps
    link = hierarchical_collective_link(net, stride, domain, nv_bw, a)
    knobs = ("inter_node_bandwidth_efficiency",) + (("hierarchical_collective_efficiency",) if ranks_per_node > 1 else ())
    return link.bandwidth_Bps / 1e9, knobs


def bandwidth_rows(rows: list) -> list:
    """The rows in the bandwidth regime (module docstring), per (op, ranks, ranks per node)."""
    groups: dict[tuple, list] = {}
    for gpu, row in rows:
        groups.setdefault((gpu, row.op, row.ranks, row.ranks_per_node), []).append((gpu, row))
    out = []
    for group in groups.values():
        big = [x for x in group if x[1].size_bytes >= BANDWIDTH_ROW_BYTES]
        out += big or [max(group, key=lambda x: x[1].size_bytes)]
    return out


def hbm_datasheet_gbps(gpu_name: str) -> float:
    return hbm_bandwidth_gbps(gpu_of(gpu_name), None)


__all__ = ["kernel_prediction", "collective_prediction", "bandwidth_rows", "hbm_datasheet_gbps", "gpu_of",
           "BANDWIDTH_ROW_BYTES"]
