"""The transposed FP8 copies of FP8 training on GPUs whose FP8 GEMMs take only the TN layout.

cuBLASLt's FP8 GEMMs on Hopper (sm90) take only the TN layout: both operands contiguous along the reduction
dimension. The forward GEMM Y = X·Wᵀ reads X and W as stored; the weight-gradient GEMM dW = dYᵀ·X reduces over the
tokens, so it needs Xᵀ and dYᵀ; the data-gradient GEMM dX = dY·W reduces over W's output dimension, so it needs Wᵀ.
Transformer Engine therefore writes every quantized GEMM input and output gradient twice on Hopper, row-wise and
transposed (its cast-transpose kernels), and once on Blackwell, whose FP8 tensor cores take either layout:
``Float8Quantizer::create_tensor`` allocates the transpose only when ``columnwise_usage &&
!is_non_tn_fp8_gemm_supported`` (transformer_engine/pytorch/csrc/quantizer.cpp:361-375 at
TransformerEngine@d0067d0d; the same rule for current scaling at :544-547), and ``is_non_tn_fp8_gemm_supported()`` is
true for compute capability 10.x and 11.x (B200, GB200, GB300) and false for 9.0 (transformer_engine/pytorch/utils.py:
658-663; transformer_engine/common/comm_gemm/comm_gemm.cpp:271-279: "Hopper: only TN FP8 GEMMs are supported").

Per micro-batch one GEMM of M rows, input width K and output width N (the efficiency model's ``(weight, M, K, N)``)
thus writes M·(K + N) more bytes on a TN-only generation: the one-byte E4M3/E5M2 transposes of X and dY, at HBM
bandwidth (the same cast kernel reads its input once for both outputs, so only the write is extra). The weights'
transposes, once per step and cached across micro-batches, are left out. Per-tensor recipes only: MXFP8 (Blackwell
only) quantizes along both axes whatever the layout support, and its cost against tensorwise is the measured
``MXFP8_LINEAR_TIME_FACTOR`` (costmodel/compute/efficiency.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:  # pragma: no cover
    from parplan.costmodel.spec.assumptions import Assumptions
    from parplan.costmodel.spec.hardware import GPU

# generations whose FP8 GEMMs take only the TN layout (module docstring); Ampere has no FP8 tensor cores
FP8_TN_ONLY_GENERATIONS = frozenset({"hopper"})

FP8_ELEMENT_BYTES = 1.0  # E4M3 / E5M2


def transpose_bytes(gemms: Sequence[tuple[float, float, float, float]]) -> float:
    """Bytes of the transposed FP8 copies of the inputs and output gradients of ``gemms`` ``(weight, M, K, N)``:
    M·(K + N) one-byte elements each."""
    return sum(m * (k + n) for _, m, k, n in gemms) * FP8_ELEMENT_BYTES


def needs_transposes(a: "Assumptions", gpu: "GPU", precision: str) -> bool:
    """Whether FP8 training on ``gpu`` writes the transposed copies: FP8 on a TN-only generation, a per-tensor
    recipe, and the ``fp8_transpose_copies`` knob on (textbook: off)."""
    return (a.fp8_transpose_copies and precision == "fp8" and gpu.generation in FP8_TN_ONLY_GENERATIONS
            and a.fp8_recipe != "mxfp8")


def transpose_seconds(a: "Assumptions", gpu: "GPU", precision: str, hbm_Bps: float,
                      gemms: Sequence[tuple[float, float, float, float]]) -> float:
    """Seconds per micro-batch of writing the transposed copies of ``gemms`` at ``hbm_Bps`` (0 where none are
    written: :func:`needs_transposes`)."""
    return transpose_bytes(gemms) / hbm_Bps if needs_transposes(a, gpu, precision) else 0.0
