"""Activation CPU offload: N transformer layers keep their saved activations in host memory between their
forward and their backward.

A choice's ``activation_offload_layers`` N (0: nothing offloaded, today) is Megatron-Core's
``cpu_offloading_num_layers`` with ``cpu_offloading_activations`` on and ``cpu_offloading_weights`` off
(Megatron-LM d98e8a64 megatron/core/model_parallel_config.py:458-473; megatron/training/arguments.py:1950-1951:
``--cpu-offloading-num-layers N`` > 0 turns ``cpu_offloading`` on; megatron/core/transformer/transformer_block.py:
304-320 hands both to Transformer Engine's ``get_cpu_offload_context(enabled, num_layers, model_layers, ...)``).

Rules (:func:`activation_offload_violations`), Megatron-Core's own checks, the same from core_v0.9.0
(transformer_config.py:372-388) to d98e8a64 (transformer_config.py:1884-1898):

* 0 <= N < num_layers ("CPU offloading can be done only for layers less than num_layers"; Transformer Engine
  d0067d0d transformer_engine/pytorch/cpu_offload.py:843-847 refuses N > model_layers - 1 too);
* pp = 1 ("Currently there is no support for Pipeline parallelism with CPU offloading");
* no activation recomputation, neither full nor selective ("CPU offloading does not work when activation
  recomputation is enabled": ``recompute_granularity`` must be None);
* not with the EP all-to-all overlap (``moe_a2a_overlap``): that schedule holds two micro-batches' activations at
  once, and TE's layer count (below) is for one forward followed by its backward; parplan does not model the pair.

Which layers and how much stays on the GPU: Transformer Engine d0067d0d
transformer_engine/pytorch/cpu_offload.py:602-626 (``DefaultOffloadSynchronizer._init_offload_synchronization_dicts``)
offloads layers 0 .. N-1; layer i's offload must finish before the forward of layer L - N + i and its reload starts
after the backward of layer L - N + i, "so that ... peak memory usage of saving activations is (num_layers -
num_offloaded_layers) * T"; docs/features/other_optimizations/cpu_offloading/cpu_offloading.rst ("Default
Offloading Scheduling"): "At most (model_layers - num_layers) sets of activations are on GPU at any time; both
compute and reload may be stalled to enforce this limit". So at the peak (the end of the forward) the GPU holds the
saved activations of the L - N layers it does not offload and none of the N it does: nothing of the offloaded layers
is kept in flight beyond that cap. Memory (per micro-batch, pp = 1 holds one): each offloaded layer's ``act_bytes``
leaves the GPU.

Time per micro-batch of one offloaded layer (:func:`exposed_transfer_s`): its saved bytes go device-to-host during
the forward and host-to-device during the backward, over the GPU's host link (:func:`parplan.costmodel.memory.offload.
host_bandwidth_Bps`, ``HOST_BANDWIDTH_GBPS``: GB200 NVLink-C2C 450 GB/s per direction), on TE's own stream,
overlapped with the compute of the neighbouring layer: exposed = max(0, transfer - overlap·compute) for the forward
and for the backward half. The rule is Transformer Engine's own statement of when the copies are free: "D2h and h2d
copying are completely hidden behind computation if computation time of a layer is longer than host-device
communication time" (d0067d0d transformer_engine/pytorch/cpu_offload_v1.py:316-321,
``AsyncDoubleBufferGroupOffloadHandler``); the layer-by-layer bound ignores the slack of TE's window of L - N - 1
layers (cpu_offload.py:610-611), so when transfer > compute it may overstate the stall. With N = L - 1 the window is
empty: one set on the GPU, "compute and transfers cannot overlap" (cpu_offloading.rst; cpu_offload.py:848-852 warns)
and the whole transfer is exposed. The share of the compute that hides the copies is the knob
``activation_offload_overlap`` (default 1: all of it, TE's statement; not fitted). The copies also take HBM
bandwidth from the compute (cpu_offloading.rst: "Offloading/reloading consumes HBM bandwidth"), not modelled.

Stage-affine form: with pp = 1 the only stage holds every layer, so the first N layers are min(N, k) of the k leading
dense layers (MoE models put them first) and N - min(N, k) MoE layers; each class's per-layer terms are scaled by its
offloaded share (offloaded count / class count), so Σ_class n_class·share_class·x_class is exactly the offloaded
layers' total: per-layer terms, exact for the only stage, and the solver's tables stay the evaluator's numbers.
The exposed time is reported in the layers' ``compute_s`` (the compute stream waits for the copy engine).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from parplan.costmodel.memory.offload import host_bandwidth_Bps

if TYPE_CHECKING:
    from parplan.costmodel.spec.assumptions import Assumptions
    from parplan.costmodel.evaluation.choice import ChoiceCosts, LayerCost
    from parplan.costmodel.spec.hardware import GPU
    from parplan.costmodel.spec.spec import Spec


def activation_offload_violations(spec: "Spec", c: Any) -> list[str]:
    """The rules above for a Choice or a Plan (one sentence each, naming the field and the rule)."""
    n = getattr(c, "activation_offload_layers", 0)
    if not n:
        return []
    L = spec.model.num_layers
    out: list[str] = []
    if not 0 <= n < L:
        out.append(f"activation_offload_layers ({n}) must lie in [0, model.num_layers - 1 = {L - 1}] "
                   "(Megatron-Core: CPU offloading only for fewer layers than num_layers)")
    if c.pp > 1:
        out.append(f"activation_offload_layers ({n}) needs pp = 1 (Megatron-Core has no CPU offloading with "
                   f"pipeline parallelism; got pp {c.pp})")
    if c.recompute != "none":
        out.append(f"activation_offload_layers ({n}) needs recompute none (Megatron-Core's CPU offloading does not "
                   f"work with activation recomputation; got {c.recompute})")
    if getattr(c, "moe_a2a_overlap", False):
        out.append(f"activation_offload_layers ({n}) with moe_a2a_overlap is not modelled (the overlapped schedule "
                   "holds two micro-batches' activations)")
    return out


def offloaded_shares(spec: "Spec", n: int) -> tuple[float, float]:
    """(dense, MoE) share of each class's layers among the first ``n`` layers of the model (pp = 1: the stage)."""
    L = spec.model.num_layers
    k = L if spec.model.moe is None else spec.model.moe.first_dense_layers
    dense_off = min(n, k)
    moe_off = n - dense_off
    return (dense_off / k if k else 0.0), (moe_off / (L - k) if L - k else 0.0)


def exposed_transfer_s(act_bytes: float, host_Bps: float, fwd_s: float, bwd_s: float, overlap: float,
                       window: bool = True) -> float:
    """Exposed seconds per micro-batch of one offloaded layer: max(0, D2H - overlap·fwd) + max(0, H2D - overlap·bwd),
    each copy ``act_bytes / host_Bps``; without a ``window`` (N = L - 1) the copies hide behind nothing."""
    t = act_bytes / host_Bps
    if not window:
        return 2 * t
    return max(0.0, t - overlap * fwd_s) + max(0.0, t - overlap * bwd_s)


def apply_activation_offload(costs: "ChoiceCosts", spec: "Spec", gpu: "GPU", a: "Assumptions") -> "ChoiceCosts":
    """The costs with ``costs.choice.activation_offload_layers`` layers offloading their activations."""
    n = costs.choice.activation_offload_layers
    if not n:
        return costs
    host_Bps = host_bandwidth_Bps(gpu.name, a.host_bandwidth_gbps, a.host_bandwidth_efficiency)
    fwd_share = 1.0 / (1.0 + a.backward_to_forward_ratio)
    window = spec.model.num_layers - n >= 2

    def offload(lc: "LayerCost | None", share: float) -> "LayerCost | None":
        if lc is None or share == 0.0:
            return lc
        t = lc.time_s
        stall = exposed_transfer_s(lc.act_bytes, host_Bps, t * fwd_share, t * (1.0 - fwd_share),
                                   a.activation_offload_overlap, window)
        act = lc.act_bytes * (1.0 - share)
        return replace(lc, compute_s=lc.compute_s + share * stall, act_bytes=act,
                       act_recomputed_bytes=min(lc.act_recomputed_bytes, act))

    dense_share, moe_share = offloaded_shares(spec, n)
    return replace(costs, dense=offload(costs.dense, dense_share), moe=offload(costs.moe, moe_share))
