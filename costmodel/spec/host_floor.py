"""The host's launch floor: a layer takes max(GPU time, host time).

Eager PyTorch issues every kernel and collective from the host: Python, autograd, the ATen dispatcher and
``cudaLaunchKernel`` cost about 5-25 us per op whatever the op's size (jiahuanglin.xyz, "From PyTorch op to kernel
launch", the dispatch chain's costs; NVIDIA's CUDA Graph guide, docs.nvidia.com/dl-cuda-graph: "kernel launch
overhead can significantly impact GPU performance, especially when the CPU cannot keep up"). The host runs ahead of
the GPU while it can; once a layer's GPU work is shorter than the time the host takes to issue it, the GPU waits
and the layer takes the host's time. For identical layers in sequence the steady state is exactly
max(GPU, host) per layer, so the floor is per layer and micro-batch, a per-choice constant (the solver's tables
stay affine in the stage's layers).

Host time of a dense layer = ``host_kernels_per_dense_layer`` x ``host_seconds_per_kernel``. The count is an
estimate from the op list of Megatron-Core's TransformerLayer with Transformer Engine modules and sequence
parallelism (:data:`DENSE_LAYER_OPS`), not a count from a profile or from a pinned file: the sources to pin it
(Megatron-LM's transformer_layer.py, TE's LayerNormLinear) were not at hand in this session. Forward, 16:
norm + all-gather + QKV GEMM, RoPE on q and k, fused attention, output GEMM + reduce-scatter, bias-dropout-add,
norm + all-gather + fc1 GEMM, SwiGLU, fc2 GEMM + reduce-scatter, bias-dropout-add. Backward, 27: the four GEMMs'
input and weight gradients (8), the two all-gathers' reduce-scatters and two reduce-scatters' all-gathers and
the weight-gradient re-gathers under SP (6), two norms' backward and their weight-gradient reductions (4), RoPE
(2), attention's preprocessing and backward (2), SwiGLU (1), the two residual branches' gradient adds and
bias-dropout-add backward (4). Total 43.

Zero where the framework captures CUDA graphs (``cuda_graphs``): a captured layer is one launch. Pipeline p2p waits
and the optimizer step are not priced here (issue 38 item 1).

An MoE layer's dispatcher blocks the host once per forward (:func:`moe_sync_exposed_s`, ``moe_dispatch_sync``):
dropless routing leaves the per-expert token counts on the GPU, and the host needs them to size the all-to-all and the
grouped GEMMs, so it waits for the GPU to drain. Megatron-Core's alltoall dispatcher synchronises on the D2H copy of
the counts (NVIDIA/Megatron-LM@d98e8a64 megatron/core/transformer/moe/token_dispatcher.py:921-958,
``d2h_event.synchronize()`` at ``before_ep_alltoall``, set at :596), its allgather dispatcher on ``.cpu()`` (:320),
HybridEP in its blocking metadata preprocessing when no token budget is set (:1111-1112; fused_a2a.py:417,
``non_blocking = num_permuted_tokens is not None``; deepseek-ai/DeepEP@94a9f8f hybrid-ep branch
deep_ep/hybrid_ep_buffer.py:321, :370-379), DeepEP's normal dispatch busy-waits on
the host for the received counts (deepseek-ai/DeepEP@dd758caf csrc/legacy buffer.hpp:579-597) and its permutation
reads their sum (token_dispatcher.py:1450 ``.item()``); torchtitan's all-to-all reads its output splits on the host
(pytorch/torchtitan@b5bcd76c torchtitan/models/common/token_dispatcher.py:300-308). Padding every expert to its
capacity fixes the sizes on the host: Megatron-Core's drop-and-pad skips the sync (token_dispatcher.py:927,
:1113-1127) and so does DeepSpeed-MoE's capacity-shaped einsum (``moe_pad_to_capacity``), except DeepEP's, which
waits whatever the capacity. The backward has no sync.

After the sync the GPU's queue is empty, and it waits for every kernel the host issues until the host runs ahead
again: with kernels issued every ``host_seconds_per_kernel`` and each taking its share of its group's GPU time, the
GPU's idle time is the largest lead the host's clock keeps over the GPU's work, max over kernels k of
(k x host_seconds_per_kernel - GPU time of the kernels before k) (:func:`host_lag_s`), plus the sync's own round
trip (``moe_dispatch_sync_round_trip_s``). The kernels after the sync, in issue order, are :data:`MOE_SYNC_OPS`
(Megatron-Core with fused permutation, ``moe_permute_fusion``, and Transformer Engine's GroupedLinear experts: one
cuBLASLt GEMM per local expert, NVIDIA/TransformerEngine@d0067d0d transformer_engine/pytorch/module/grouped_linear.py
:875, after one quantisation per local expert under FP8, :820), beside the dispatch all-to-all's, the experts' and
the combine all-to-all's GPU time, then the rest of one layer's forward up to the next sync (the residual add, the
next layer's attention block, its router and the dispatcher's preprocessing, whose GPU time is the rest of the
layer's forward): the sync every layer keeps the host from carrying a lead built in the backward into the forward,
so a forward whose kernels take the host longer than the GPU waits for the difference. The counts of the router and
the preprocessing are estimates from the code with fused routing (``moe_router_fusion``), not a profile; flex
dispatchers (HybridEP, DeepEP) fuse the permutations into the dispatch and are taken the same.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from parplan.costmodel.spec.assumptions import Assumptions

# (op, forward kernels, backward kernels) of one dense layer under Megatron-Core + Transformer Engine with SP
DENSE_LAYER_OPS: tuple[tuple[str, int, int], ...] = (
    ("input norm", 1, 2), ("SP all-gather / its reduce-scatter and weight-gradient re-gather", 1, 2),
    ("QKV GEMM", 1, 2), ("RoPE q, k", 2, 2), ("fused attention", 1, 2), ("output GEMM", 1, 2),
    ("TP reduce-scatter / its all-gather", 1, 1), ("bias-dropout-add", 1, 2),
    ("pre-MLP norm", 1, 2), ("SP all-gather / its reduce-scatter and weight-gradient re-gather", 1, 2),
    ("fc1 GEMM", 1, 2), ("SwiGLU", 1, 1), ("fc2 GEMM", 1, 2), ("TP reduce-scatter / its all-gather", 1, 1),
    ("bias-dropout-add", 1, 2),
)
DENSE_LAYER_KERNELS = sum(f + b for _, f, b in DENSE_LAYER_OPS)  # 43


def host_layer_s(a: "Assumptions", kernels: float) -> float:
    """Host seconds to issue ``kernels`` launches: kernels x ``host_seconds_per_kernel``; 0 with ``cuda_graphs``."""
    return 0.0 if a.cuda_graphs else kernels * a.host_seconds_per_kernel


def host_wait_s(a: "Assumptions", gpu_s: float, kernels: float) -> float:
    """GPU idle time of a layer whose GPU work takes ``gpu_s``: max(0, host - GPU), so the layer takes
    max(GPU, host)."""
    return max(0.0, host_layer_s(a, kernels) - gpu_s)


# (op, kernels, kernels per local expert, kernels per local expert under FP8, GPU work it runs) of an MoE layer's
# forward from its dispatcher's sync to the next layer's, in issue order (Megatron-LM@d98e8a64
# megatron/core/transformer/moe/; the GPU work: 'dispatch' and 'combine' are the all-to-all's two halves, 'fc1' and
# 'fc2' the routed experts' GEMMs, 'rest' the rest of the layer's forward)
MOE_SYNC_OPS: tuple[tuple[str, int, int, int, str], ...] = (
    ("dispatch all-to-all, tokens and probs (token_dispatcher.py:705-723)", 2, 0, 0, "dispatch"),
    ("sort by local expert, fused (token_dispatcher.py:782)", 1, 0, 0, ""),
    ("fc1: a quantisation and a GEMM per local expert (experts.py TEGroupedMLP, TE GroupedLinear)", 0, 1, 1, "fc1"),
    ("weighted gated activation, fused (experts.py weighted_bias_swiglu_impl)", 1, 0, 0, ""),
    ("fc2: a quantisation and a GEMM per local expert", 0, 1, 1, "fc2"),
    ("unsort, fused (token_dispatcher.py:817)", 1, 0, 0, ""),
    ("combine all-to-all (token_dispatcher.py:864-870)", 1, 0, 0, "combine"),
    ("unpermute, fused (token_dispatcher.py:891-899)", 1, 0, 0, ""),
    ("bias-dropout-add after the MoE block", 1, 0, 0, ""),
    ("the next layer's attention block and pre-MLP norm (DENSE_LAYER_OPS' first eight forward, and a norm)",
     sum(f for _, f, _ in DENSE_LAYER_OPS[:8]) + 1, 0, 0, "rest"),
    ("router, fused (router.py:859 gating; :779 top-k; :806-830 aux-loss scores, loss, its all-reduce "
     "and attach; :835 expert-bias counts)", 8, 0, 0, ""),
    ("preprocess: counts, splits, all-gather of the counts, local sums (token_dispatcher.py:501-622), five D2H "
     "copies (:935-954), permutation 1 (:671)", 14, 0, 0, ""),
)


def host_lag_s(host_s: float, groups: "list[tuple[float, float]]") -> float:
    """GPU idle time while the host issues ``groups`` of (kernels, GPU seconds) in order from an empty queue, each
    kernel ``host_s`` after the last and taking its equal share of its group's GPU seconds: the GPU starts kernel k at
    max(k x host_s, end of kernel k-1), so it idles max over k of (k x host_s - GPU time of kernels 1..k-1). Within a
    group the lead is largest at its first or last kernel."""
    lag, issued_s, done_s = 0.0, 0.0, 0.0
    for kernels, gpu_s in groups:
        if kernels <= 0:  # no kernel, no GPU work
            continue
        per_s = gpu_s / kernels
        lag = max(lag, issued_s + host_s - done_s, issued_s + kernels * host_s - done_s - (kernels - 1) * per_s)
        issued_s += kernels * host_s
        done_s += gpu_s
    return lag


def moe_dispatch_syncs(a: "Assumptions", dispatcher: str, backend: str) -> bool:
    """Whether an MoE layer's forward waits for the host at its dispatcher (the module docstring's sources): always
    but under CUDA graphs, capacity-padded experts (``moe_pad_to_capacity``) with another dispatcher than DeepEP's,
    or ``moe_dispatch_sync`` off."""
    if not a.moe_dispatch_sync or a.cuda_graphs:
        return False
    return not a.moe_pad_to_capacity or (dispatcher == "flex" and backend == "deepep")


def moe_sync_kernels(local_experts: float, fp8: bool) -> list[tuple[int, str]]:
    """(kernels, GPU work) of :data:`MOE_SYNC_OPS` for ``local_experts`` experts on the rank."""
    return [(int(n + local_experts * (e + (q if fp8 else 0))), work) for _, n, e, q, work in MOE_SYNC_OPS]


def moe_sync_exposed_s(a: "Assumptions", local_experts: float, fp8: bool, gpu_s: "dict[str, float]") -> float:
    """The GPU's idle time per MoE layer and micro-batch after the dispatcher's sync: the round trip plus
    :func:`host_lag_s` over :func:`moe_sync_kernels` with the forward's GPU seconds by work (``gpu_s``: 'dispatch',
    'fc1', 'fc2', 'combine', and the 'rest' of the layer's forward). The caller decides whether the layer syncs (:func:`moe_dispatch_syncs`)."""
    groups = [(k, gpu_s.get(work, 0.0)) for k, work in moe_sync_kernels(local_experts, fp8)]
    return a.moe_dispatch_sync_round_trip_s + host_lag_s(a.host_seconds_per_kernel, groups)


__all__ = ["DENSE_LAYER_OPS", "DENSE_LAYER_KERNELS", "MOE_SYNC_OPS", "host_layer_s", "host_wait_s", "host_lag_s",
           "moe_dispatch_syncs", "moe_sync_kernels", "moe_sync_exposed_s"]
