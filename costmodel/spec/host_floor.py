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

Zero where the framework captures CUDA graphs (``cuda_graphs``): a captured layer is one launch. The MoE layers'
synchronising dispatchers, pipeline p2p waits and the optimizer step are not priced here (issue 38 item 1).
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


__all__ = ["DENSE_LAYER_OPS", "DENSE_LAYER_KERNELS", "host_layer_s", "host_wait_s"]
