"""Tile and wave quantisation (costmodel/compute/gemm_waves.py, costmodel/compute/efficiency.py shape_factor), worked by hand.

A100 (108 SMs), a 4096 x 4096 output: 128 x 128 tiles make 32·32 = 1024 CTAs, ceil(1024/108) = 10 waves, so
10·108·128·128 / 4096² = 1080/1024 = 1.0547 (128 x 256 and 256 x 128: 512 CTAs, 5 waves, the same); 64 x 128 and
128 x 64 make 2048 CTAs, 19 waves: 19·108·8192 / 4096² = 1.00195, the least (NVIDIA's Matrix Multiplication
Background guide works this kind of example). H100 (132 SMs), 1024 x 1024: 128 CTAs of 64 x 128 fill 128 of one
wave's 132 slots: 132·8192 / 1024² = 1.03125 (128 x 128: 64 CTAs, 2.0625). A shape whose CTAs fill whole waves pays
nothing: 128·132 x 128 on 132 SMs is one full wave, 1.
"""

from __future__ import annotations

import pytest

from parplan.costmodel.spec.assumptions import resolve_assumptions
from parplan.costmodel.compute.efficiency import shape_factor
from parplan.costmodel.compute.gemm_waves import wave_multiplier
from parplan.costmodel.spec.hardware import lookup_gpu


def test_wave_multiplier_by_hand():
    assert wave_multiplier(4096, 4096, 108) == pytest.approx(19 * 108 * 8192 / 4096**2)
    assert wave_multiplier(4096, 4096, 108, tiles=((128, 128),)) == pytest.approx(1080 / 1024)
    assert wave_multiplier(1024, 1024, 132) == pytest.approx(1.03125)
    assert wave_multiplier(1024, 1024, 132, tiles=((128, 128),)) == pytest.approx(2.0625)
    assert wave_multiplier(128 * 132, 128, 132) == pytest.approx(1.0)
    assert wave_multiplier(4096, 4096, None) == 1.0  # no SM count in the catalog: neutral


def test_shape_factor_is_the_mean_of_the_three_outputs_waves():
    """Forward M x N, input gradient M x K, weight gradient K x N, each a third of the FLOPs; κ off to isolate it.
    M = K = N = 4096 on A100: all three 1.00195."""
    a = resolve_assumptions({"matmul_shape_penalty": 0.0, "gemm_wave_quantization": True})
    a100 = lookup_gpu("A100-SXM-80GB")
    assert shape_factor(a, a100, 4096, 4096, 4096) == pytest.approx(19 * 108 * 8192 / 4096**2)
    # M = 1024, K = N = 4096 on H100: forward 1024 x 4096 (256 CTAs of 128², 2 waves: 264·16384/4194304 = 1.03125;
    # 512 of 64 x 128, 4 waves: the same), input gradient the same, weight gradient 4096 x 4096 (2048 CTAs of
    # 64 x 128, 16 waves: 16·132·8192/16777216 = 1.03125)
    h100 = lookup_gpu("H100-SXM-80GB")
    assert shape_factor(a, h100, 1024, 4096, 4096) == pytest.approx(1.03125)


def test_textbook_has_no_wave_quantisation():
    t = resolve_assumptions({"preset": "textbook"})
    assert not t.gemm_wave_quantization
    assert shape_factor(t, lookup_gpu("A100-SXM-80GB"), 1024, 1024, 1024) == 1.0


def test_smaller_micro_batch_costs_more_per_flop():
    """Halving M (micro-batch 2 -> 1 at 4K) on B200 cannot make a GEMM cheaper per FLOP, and at a shape that
    leaves a partial wave it makes it dearer."""
    a = resolve_assumptions({"matmul_shape_penalty": 0.0, "gemm_wave_quantization": True})
    b200 = lookup_gpu("B200")
    big, small = shape_factor(a, b200, 8192, 4096, 1792), shape_factor(a, b200, 4096, 4096, 1792)
    assert small > big >= 1.0
