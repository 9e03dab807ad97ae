"""The ``cluster:`` section: one catalog GPU with its overrides, or heterogeneous ``pools`` (issue 21).

``costmodel/spec/spec.py`` re-exports :class:`ClusterSpec` and :class:`PoolSpec`; ``costmodel/evaluation/pools.py`` prices a plan
whose stages sit on pools."""

from __future__ import annotations

from typing import Any, ClassVar, Optional

from pydantic import Field, PositiveInt, field_validator, model_serializer, model_validator

from parplan.costmodel.spec.hardware import lookup_gpu
from parplan.costmodel.spec.spec_base import (MAX_BANDWIDTH_GBPS, MAX_GPUS_PER_NODE, MAX_LATENCY_US, MAX_MEMORY_GIB,
                                         MAX_NUM_GPUS, MAX_PEAK_TFLOPS, LimitedSection)


class GpuFields(LimitedSection):
    """A catalog GPU, its count and node size, and the per-field overrides of its catalog entry
    (costmodel.spec.hardware.GPU): the keys a plain cluster and each pool of a heterogeneous one share."""

    LIMITS: ClassVar[dict[str, float]] = {
        "num_gpus": MAX_NUM_GPUS, "gpus_per_node": MAX_GPUS_PER_NODE, "nvlink_domain_size": MAX_NUM_GPUS,
        "memory_gib": MAX_MEMORY_GIB, "peak_bf16_tflops": MAX_PEAK_TFLOPS, "peak_fp8_tflops": MAX_PEAK_TFLOPS,
        "intra_node_bandwidth_gbps": MAX_BANDWIDTH_GBPS, "inter_node_bandwidth_gbps": MAX_BANDWIDTH_GBPS,
        "intra_node_latency_us": MAX_LATENCY_US, "inter_node_latency_us": MAX_LATENCY_US}

    gpu: str
    num_gpus: PositiveInt
    gpus_per_node: PositiveInt = 8
    memory_gib: Optional[float] = Field(None, gt=0)
    peak_bf16_tflops: Optional[float] = Field(None, gt=0)
    peak_fp8_tflops: Optional[float] = Field(None, gt=0)
    nvlink_domain_size: Optional[PositiveInt] = None
    intra_node_bandwidth_gbps: Optional[float] = Field(None, gt=0, description="GB/s per GPU per direction")
    inter_node_bandwidth_gbps: Optional[float] = Field(None, gt=0, description="GB/s per GPU per direction")
    intra_node_latency_us: Optional[float] = Field(None, ge=0)
    inter_node_latency_us: Optional[float] = Field(None, ge=0)

    @field_validator("gpu")
    @classmethod
    def _known_gpu(cls, name: str) -> str:
        lookup_gpu(name)
        return name


class PoolSpec(GpuFields):
    """One pool of a heterogeneous cluster (issue 21): a catalog GPU, its count and node size, and the same
    per-field overrides as ``cluster.<field>``. A pool of more than one node is whole nodes."""


    @model_validator(mode="after")
    def _whole_nodes(self) -> "PoolSpec":
        n, g = self.num_gpus, self.gpus_per_node
        if n > g and n % g:
            raise ValueError(f"num_gpus: {n} GPUs are not whole nodes of gpus_per_node = {g}; a pool larger than "
                             f"one node must be a multiple of {g} GPUs")
        return self


# cluster keys that ``cluster.pools`` replaces: each pool gives its own (issue 21)
POOL_REPLACED_KEYS = ("gpu", "num_gpus", "gpus_per_node", "memory_gib", "peak_bf16_tflops", "peak_fp8_tflops",
                      "nvlink_domain_size", "intra_node_bandwidth_gbps", "inter_node_bandwidth_gbps",
                      "intra_node_latency_us", "inter_node_latency_us")


class ClusterSpec(GpuFields):
    """A catalog GPU plus optional per-field overrides (see costmodel.spec.hardware.GPU for the fields).

    A cluster of more than one node is whole nodes: ``num_gpus`` a multiple of ``gpus_per_node``
    (a cluster of at most one node may use part of it, e.g. 4 GPUs of an 8-GPU node).

    Or ``pools``: a heterogeneous cluster (issue 21), a list of :class:`PoolSpec`, instead of ``gpu`` and its
    keys. Then ``gpu`` and its keys read pool 0's and ``num_gpus`` the pools' total (derived, left out of
    dumps; a one-pool cluster is exactly the plain spec), and ``inter_pool_bandwidth_gbps`` (GB/s per GPU per direction; default: the slower pool's
    inter-node network, costmodel/evaluation/pools.py) links the pools. One pool is exactly ``gpu`` with its keys."""


    pools: Optional[list[PoolSpec]] = Field(None, min_length=1, description="heterogeneous GPU pools (issue 21)")
    inter_pool_bandwidth_gbps: Optional[float] = Field(
        None, gt=0, description="GB/s per GPU per direction between pools; default: the slower pool's inter-node")

    @model_validator(mode="before")
    @classmethod
    def _pools_replace_gpu(cls, data: Any) -> Any:
        if not isinstance(data, dict) or data.get("pools") is None:
            if isinstance(data, dict) and data.get("inter_pool_bandwidth_gbps") is not None:
                raise ValueError("inter_pool_bandwidth_gbps: links pools; give cluster.pools")
            return data
        pools = data["pools"]
        if not isinstance(pools, list) or not pools:
            return data  # the field's own validation says what is wrong
        for key in POOL_REPLACED_KEYS:
            if data.get(key) is not None:
                raise ValueError(f"{key}: give either cluster.{key} or cluster.pools (each pool has its own "
                                 f"{key}), not both")
        first = pools[0] if isinstance(pools[0], dict) else getattr(pools[0], "__dict__", {})
        counts = [p.get("num_gpus") if isinstance(p, dict) else getattr(p, "num_gpus", None) for p in pools]
        out = dict(data)
        if isinstance(first, dict) and "gpu" in first:
            out.update({key: first[key] for key in POOL_REPLACED_KEYS if first.get(key) is not None})
            out["gpus_per_node"] = first.get("gpus_per_node", 8)
        if all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in counts):
            out["num_gpus"] = sum(counts)
        return out

    @model_serializer(mode="wrap")
    def _derived_keys_left_out(self, handler):
        out = handler(self)
        if self.pools is not None and isinstance(out, dict):
            for key in POOL_REPLACED_KEYS:
                out.pop(key, None)
        return out

    @model_validator(mode="after")
    def _whole_nodes(self) -> "ClusterSpec":
        n, g = self.num_gpus, self.gpus_per_node
        if self.pools is not None:
            return self  # each pool is whole nodes (PoolSpec)
        if n > g and n % g:
            raise ValueError(f"cluster.num_gpus: {n} GPUs are not whole nodes of cluster.gpus_per_node = {g}; a "
                             f"cluster larger than one node must be a multiple of {g} GPUs")
        return self
