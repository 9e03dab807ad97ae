"""Tile and wave quantisation of a GEMM on the GPU's streaming multiprocessors.

A GEMM's output of M x N elements is cut into tiles of tm x tn, one thread block (CTA) each; the GPU runs them in
*waves* of one tile per SM. A tile is computed whole even where the matrix ends inside it (tile quantisation), and
the last wave runs whatever is left on a part of the SMs (wave quantisation). NVIDIA's "Matrix Multiplication
Background User's Guide" (docs.nvidia.com/deeplearning/performance/dl-performance-matrix-multiplication, sections
"Tile Quantization" and "Wave Quantization") states both and works an A100 example (108 SMs, 256 x 128 tiles): a
GEMM whose tile count is just past a multiple of 108 pays a whole extra wave. The time of the GEMM is that of

    waves x SMs x tm x tn  output elements  against  M x N  useful ones,  waves = ceil(ceil(M/tm)·ceil(N/tn) / SMs),

so its time multiplier over the ideal is ``waves·SMs·tm·tn / (M·N)`` >= 1. cuBLAS picks a tile per shape by its
heuristics; the model takes the least multiplier over the tiles of the BF16/FP8 GEMM kernels cuBLAS and CUTLASS
ship for Ampere and Hopper (:data:`TILE_SHAPES`): CUTLASS's default 128 x 256 / 256 x 128 threadblock tiles
(NVIDIA/cutlass include/cutlass/gemm/device/default_gemm_configuration.h, Sm80 tensor-op) and the 128 x 128,
128 x 64 and 64 x 128 ones that cuBLAS's kernel names carry in profiles (e.g. ampere_bf16_s16816gemm_bf16_128x64_...,
sm90_xmma_gemm_..._tilesize64x128x64_...). Each tile is taken at the large-GEMM efficiency: a smaller tile's lower
operand reuse is not priced, so the multiplier is a lower bound of the quantisation. Large training GEMMs (many
waves, or a tile that divides the shape) come out within a percent or two of 1; a GEMM whose tiles fill a fraction
of one wave, what a small micro-batch or a wide TP leaves, pays the idle SMs (a few dozen tiles on 132 SMs: over 2x). The multiplier is per GEMM shape,
so a choice's rates stay per-choice constants. Knob ``gemm_wave_quantization`` (costmodel/spec/assumptions.py): False
(the default until the coordinated refit, and textbook) gives 1; a GPU whose SM count the catalog does not hold (costmodel/spec/hardware.py SM_COUNT) gives 1.
"""

from __future__ import annotations

import math

# (tm, tn) output tiles of one CTA (module docstring: cuBLAS's and CUTLASS's Ampere and Hopper GEMM tiles)
TILE_SHAPES: tuple[tuple[int, int], ...] = ((64, 128), (128, 64), (128, 128), (128, 256), (256, 128))


def wave_multiplier(m: float, n: float, sm_count: int | None,
                    tiles: tuple[tuple[int, int], ...] = TILE_SHAPES) -> float:
    """Time multiplier of an M x N GEMM output from tile and wave quantisation: the least over ``tiles`` of
    ``ceil(ceil(M/tm)·ceil(N/tn) / SMs)·SMs·tm·tn / (M·N)``; 1 without an SM count or for an empty shape."""
    if not sm_count or m <= 0 or n <= 0:
        return 1.0
    best = math.inf
    for tm, tn in tiles:
        ctas = math.ceil(m / tm) * math.ceil(n / tn)
        waves = math.ceil(ctas / sm_count)
        best = min(best, waves * sm_count * tm * tn / (m * n))
    return max(1.0, best)


__all__ = ["TILE_SHAPES", "wave_multiplier"]
