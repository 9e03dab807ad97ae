"""Data-parallel and ZeRO costs of one choice, per parameter on a GPU: the once-per-step DP traffic, ZeRO-2/3's
per-micro-batch traffic, their latencies, the optimizer CPU offload, and the resident model states.

Each method takes the :class:`~parplan.costmodel.communication.comm.ZeroGroup` its parameters are sharded in (the dense DP·CP
group or the expert-DP group, under HSDP one shard group and its replicas). Sources: ZeRO (Rajbhandari et al.
2020), Megatron's distributed optimizer and HSDP (Megatron-LM param_and_grad_buffer.py at d98e8a64), the
optimizer offload in :mod:`offload`, the state bytes in :mod:`memory` and :mod:`optimizer_states`.
"""

from __future__ import annotations

from dataclasses import dataclass

from parplan.costmodel.spec.assumptions import Assumptions
from parplan.costmodel.communication.comm import Comm, ZeroGroup
from parplan.costmodel.spec.hardware import GPU
from parplan.costmodel.memory.memory import model_state_bytes
from parplan.costmodel.memory.offload import host_bandwidth_Bps, offload_seconds_per_param
from parplan.costmodel.spec.optimizer_states import optimizer_state_bytes
from parplan.costmodel.schedules.schedule import Schedule
from parplan.costmodel.communication.shared_links import stretched_s
from parplan.costmodel.spec.spec import Spec


@dataclass(frozen=True)
class DataParallel:
    """The DP/ZeRO terms of a choice at (effective) ZeRO stage ``zero``; ``fwd_share`` = F / (F + B) of a
    layer's compute, the window its weight gather hides behind (the rest, its backward, hides the gradients)."""

    a: Assumptions
    comm: Comm
    zero: int
    fwd_share: float
    fp8: bool  # FP8 training (the GEMM weights' FP8 cache)
    opt_bytes: float  # optimizer state bytes per parameter (costmodel/spec/optimizer_states.py)
    offload_fraction: float
    offload_per_param_s: float  # exposed host round trip per offloaded parameter of this GPU's, before sharding

    @staticmethod
    def of(spec: Spec, gpu: GPU, a: Assumptions, comm: Comm, zero: int, fwd_share: float) -> "DataParallel":
        c = comm.c
        # optimizer CPU offload (costmodel/memory/offload.py): per parameter of this GPU, the offloaded share of its
        # optimizer shard (1/shards of it under ZeRO >= 1) goes to the host and back and steps on the CPU
        off = c.optimizer_offload_fraction
        offload_per_param_s = 0.0
        if off > 0:
            host_Bps = host_bandwidth_Bps(gpu.name, a.host_bandwidth_gbps, a.host_bandwidth_efficiency)
            sharing = max(1, min(spec.cluster.gpus_per_node, spec.cluster.num_gpus))  # GPUs sharing a host's CPUs
            offload_per_param_s = off * offload_seconds_per_param(
                host_Bps, a.host_adam_params_per_s / sharing, a.optimizer_offload_d2h_bytes,
                a.optimizer_offload_h2d_bytes, a.optimizer_offload_overlap)
        return DataParallel(a, comm, zero, fwd_share, spec.training.precision == "fp8",
                            optimizer_state_bytes(c.optimizer_states, a.optimizer_bytes), off, offload_per_param_s)

    # ---- data-parallel / ZeRO traffic per parameter on this GPU
    def replica_reduce_per_param(self, grp: ZeroGroup) -> float:
        """HSDP: seconds per parameter on this GPU of the all-reduce of its gradient shard (1/shards of it)
        across the replicas (Megatron-Core param_and_grad_buffer.py:684-700 and 815-830 at d98e8a64: after
        the reduce-scatter in the shard group, an all-reduce over the inter-instance group; FSDP2 HSDP:
        reduce-scatter over dp_shard, all-reduce over dp_replicate), ring 2(R-1)/R."""
        if grp.replicas <= 1:
            return 0.0
        R = grp.replicas
        return 2 * (R - 1) / R * self.a.grad_reduce_bytes / grp.shards / grp.replica_link.bandwidth_Bps

    @property
    def mirrored(self) -> bool:
        """DualPipe keeps two copies of every stage: rank r runs stages r and p-1-r, rank p-1-r the same two
        (DeepSeek-V3 §3.2.1, "two copies of the model parameters"; deepseek-ai/DualPipe@3da1bbe README, "Parameter
        Per Device 2x"). DualPipeV's ranks hold one copy."""
        c = self.comm.c
        return c.schedule is Schedule.DUALPIPE and c.pp > 1

    def mirror_reduce_per_param(self, grp: ZeroGroup) -> float:
        """DualPipe: seconds per parameter on this GPU of summing its gradient with its copy's once per step
        (deepseek-ai/DualPipe@3da1bbe examples/example_dualpipe.py:167-174 adds each stage's gradient from the
        mirrored rank p-1-r after the step): an all-reduce of the gradient shard (1/shards of it) between the two
        copies, ring 2(2-1)/2 = 1 x its bytes, over the pipeline group's link (the copies are pipeline ranks
        apart); 0 for other schedules."""
        if not self.mirrored:
            return 0.0
        return self.a.grad_reduce_bytes / grp.shards / self.comm.links["pp"].bandwidth_Bps

    @property
    def overlap(self) -> float:
        """The share of the once-per-step DP traffic hidden: ``dp_comm_overlap``, or 0 below the framework's
        ``dp_overlap_min_zero_stage`` (DeepSpeed's ZeRO-0/1 reduce after the backward: no gradient hooks,
        microsoft/DeepSpeed#1246; its pipeline engine reduces after the flush, deepspeed/runtime/pipe/schedule.py
        TrainSchedule's ReduceGrads)."""
        return self.a.dp_comm_overlap if self.zero >= self.a.dp_overlap_min_zero_stage else 0.0

    def dp_comm_per_param(self, grp: ZeroGroup) -> tuple[float, float]:
        """Seconds per step per parameter on this GPU of the once-per-step DP traffic, before overlap:
        (gradient part, weight part).

        ZeRO-0 all-reduces gradients (2(n-1)/n); ZeRO-1 (Megatron's distributed optimizer) reduce-scatters
        them and all-gathers the updated weights; ZeRO-2 reduce-scatters every micro-batch (see
        zero_comm_per_param) and gathers weights once; ZeRO-3 keeps weights sharded. The gradient part
        hides behind the last micro-batch's backward (--overlap-grad-reduce), the weight part behind the
        next step's first forward (--overlap-param-gather). HSDP (``zero_replicas`` R > 1): the collectives
        run in the shard group of n = DP·CP/R ranks, and ZeRO-1 all-reduces the gradient shard across the R
        replicas once per step (ZeRO-2/3: every micro-batch, zero_comm_per_param). DualPipe then sums each
        gradient shard with its copy's, once per step at every ZeRO stage (:meth:`mirror_reduce_per_param`).
        """
        a, zero = self.a, self.zero
        n, link_ = grp.shards, grp.link
        mirror_s = self.mirror_reduce_per_param(grp)
        if n <= 1 and grp.replicas <= 1:
            return mirror_s, 0.0
        f = (n - 1) / n / link_.bandwidth_Bps if n > 1 else 0.0
        grad = (2 * a.grad_reduce_bytes, a.grad_reduce_bytes, 0.0, 0.0)[zero]  # by ZeRO stage
        gathered = a.param_gather_bytes if a.param_gather_bytes is not None else a.weight_bytes
        weight = (0.0, gathered, gathered, 0.0)[zero]
        grad_s = grad * f
        if zero <= 1:
            grad_s += self.replica_reduce_per_param(grp)
        return grad_s + mirror_s, weight * f

    def offload_per_param(self, grp: ZeroGroup) -> float:
        """Exposed offload seconds per step per parameter on this GPU (its optimizer shard is 1/shards)."""
        s = self.offload_per_param_s
        return s / (grp.shards if self.zero >= 1 else 1) if s else 0.0

    def dp_exposed(self, parts: list[tuple[float, ZeroGroup]], layer_compute_s: float,
                   network_beside: tuple[float, float] = (0.0, 0.0)) -> float:
        """Exposed per-step DP time of the (params, group) parts of one layer, with the optimizer offload's
        host round trip (never hidden by compute: it runs between the last backward and the next forward).
        The gradient reduce-scatter runs on its own stream through the last micro-batch's backward, the parameter
        all-gather through the first one's forward, so both share the NIC with what the layer's passes send there:
        ``network_beside`` (share of the passes, share of the network kept busy; the MoE all-to-all's IB sends)
        stretches the collectives of groups off NVLink (costmodel/communication/shared_links.py stretched_s)."""
        fwd_share, exposed = self.fwd_share, self.comm.exposed
        nic = lambda g_: 1.0 if g_.link.nvlink else stretched_s(1.0, *network_beside)  # noqa: E731
        # each group's (gradient, weight) once
        per_param = [(p_ * nic(g_), self.dp_comm_per_param(g_)) for p_, g_ in parts]
        grad_s = sum(p_ * s[0] for p_, s in per_param)
        weight_s = sum(p_ * s[1] for p_, s in per_param)
        out = (exposed(grad_s, self.overlap, layer_compute_s * (1.0 - fwd_share))
               + exposed(weight_s, self.overlap, layer_compute_s * fwd_share))
        if self.offload_per_param_s:
            out += sum(p_ * self.offload_per_param(g_) for p_, g_ in parts)
        return out

    def dp_per_param_s(self, grp: ZeroGroup) -> float:
        """Exposed per-step DP seconds per parameter at the fixed overlap share, the offload included (the
        textbook spread of the embedding and head over the layers, which hides behind no one layer)."""
        return sum(self.dp_comm_per_param(grp)) * (1 - self.overlap) + self.offload_per_param(grp)

    def dp_latency(self, grp: ZeroGroup) -> float:
        """Per step: the ring latency 2(n-1)·alpha of the DP collectives, HSDP's replica all-reduce
        2(R-1)·alpha, DualPipe's copies' all-reduce 2·alpha, each hidden by the DP overlap share."""
        n, link_ = grp.shards, grp.link
        out = 2 * (n - 1) * link_.latency_s * (1 - self.overlap) if n > 1 else 0.0
        if grp.replicas > 1:
            out += 2 * (grp.replicas - 1) * grp.replica_link.latency_s * (1 - self.overlap)
        if self.mirrored:
            out += 2 * self.comm.links["pp"].latency_s * (1 - self.overlap)
        return out

    def zero_comm_per_param(self, grp: ZeroGroup) -> float:
        """Per micro-batch, before overlap: ZeRO-2 reduce-scatters gradients; ZeRO-3 also gathers the
        weights for forward and for backward (in the shard group); HSDP all-reduces the gradient shard
        across the replicas."""
        a, zero = self.a, self.zero
        n, link_ = grp.shards, grp.link
        if zero < 2 or (n <= 1 and grp.replicas <= 1):
            return 0.0
        mb_bytes = a.grad_reduce_bytes + (2 * a.weight_bytes if zero == 3 else 0.0)
        out = (n - 1) / n * mb_bytes / link_.bandwidth_Bps if n > 1 else 0.0
        return out + self.replica_reduce_per_param(grp)

    def zero_latency(self, grp: ZeroGroup) -> float:
        """Per layer and micro-batch: the ring latency (n-1)·alpha of each of the layer's ZeRO-2/3
        collectives (ZeRO-2: the gradient reduce-scatter; ZeRO-3: ``zero3_collectives_per_layer``, by
        default two parameter all-gathers and the reduce-scatter); HSDP: the replicas' all-reduce 2(R-1)·alpha."""
        a, zero = self.a, self.zero
        n, link_ = grp.shards, grp.link
        if zero < 2:
            return 0.0
        out = (a.zero3_collectives_per_layer if zero == 3 else 1) * (n - 1) * link_.latency_s if n > 1 else 0.0
        if grp.replicas > 1:
            out += 2 * (grp.replicas - 1) * grp.replica_link.latency_s
        return out

    def zero_exposed(self, parts: list[tuple[float, ZeroGroup]], layer_compute_s: float) -> float:
        """Exposed per-micro-batch ZeRO-2/3 time of the (params, group) parts of one layer: their traffic
        (parameters in the order given) and then their latencies, hidden behind the layer's compute."""
        comm_s = sum(p_ * self.zero_comm_per_param(g_) for p_, g_ in parts)
        for _, g_ in parts:  # added one by one after the traffic (the sum's order, bit for bit)
            comm_s += self.zero_latency(g_)
        return self.comm.exposed(comm_s, self.a.zero_microbatch_comm_overlap, layer_compute_s)

    # ---- resident bytes
    def states(self, params_gpu: float, grp: ZeroGroup) -> float:
        """Weights, gradients and optimizer states sharded over the group's shard (HSDP: not its replicas),
        the offloaded share of the optimizer states on the host (costmodel/memory/offload.py)."""
        a = self.a
        return model_state_bytes(params_gpu, self.zero, grp.shards, a.weight_bytes, a.grad_bytes, self.opt_bytes,
                                 self.offload_fraction, a.zero3_resident_weight_bytes)

    def fp8_weight_cache(self, matmul_params_gpu: float) -> float:
        """FP8 training keeps each GEMM weight's FP8 copy and its transpose across micro-batches
        (Transformer Engine caches them from the first micro-batch: ``is_first_microbatch``; Hopper's FP8
        GEMMs take both operands K-major, so the weight-gradient path needs the transpose); ZeRO-3 gathers
        weights per use and caches none. Norms, the router, embedding and head stay in BF16 (DeepSeek-V3
        §3.3.1)."""
        if not self.fp8 or self.zero == 3:
            return 0.0
        return matmul_params_gpu * self.a.fp8_weight_cache_bytes
