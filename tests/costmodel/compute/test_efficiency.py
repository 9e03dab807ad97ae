"""Achieved kernel efficiency (costmodel/compute/efficiency.py): parts of one die rated at different clocks.

Worked by hand (costmodel/spec/hardware.py SUSTAINED_RATE_FRACTION): NVIDIA's Megatron-Bridge 25.11 table runs Llama 3 8B
on 8 GPUs with the same plan at 31508 (GB200) vs 30624 (B200) tokens/s/GPU in FP8-CS and 29789 vs 29521 in MXFP8:
GB200 / B200 = (1.028866 + 1.009078) / 2 = 1.018972, for rated dense peaks of 2.5 vs 2.25 PF (1.111x). So GB200's
rates are 2.25/2.5 x 1.018972 = 0.917075 of its rated peak times the Blackwell knob, and a GB200 GEMM or attention
core runs 1.018972x as fast as the same one on B200, not 1.111x.
"""

from __future__ import annotations

import pytest

from parplan.costmodel.compute import efficiency
from parplan.costmodel.spec.assumptions import resolve_assumptions
from parplan.costmodel.spec.hardware import lookup_gpu


def test_gb200_sustains_its_measured_rate_not_its_rated_peak():
    a = resolve_assumptions(None)
    b200, gb200 = lookup_gpu("B200"), lookup_gpu("GB200-NVL72")
    assert b200.sustained_rate_fraction == 1.0
    assert gb200.sustained_rate_fraction == pytest.approx(0.917075, abs=1e-6)
    # the share of GB200's own rated peak: the Blackwell knob x 0.917075
    assert efficiency.max_linear_efficiency(a, gb200, "fp8") == pytest.approx(a.fp8_matmul_efficiency_blackwell * 0.917075, rel=1e-6)
    # achieved FLOP/s: GB200 / B200 = 1.018972 for the GEMMs (BF16 and FP8) and the attention core
    for precision in ("bf16", "fp8"):
        ratio = (gb200.peak_tflops(precision) * efficiency.max_linear_efficiency(a, gb200, precision)) / (
            b200.peak_tflops(precision) * efficiency.max_linear_efficiency(a, b200, precision))
        assert ratio == pytest.approx(1.018972, rel=1e-5)
    s = 8192
    attn = (gb200.peak_bf16_tflops * efficiency.attention_efficiency(a, gb200, s)) / (
        b200.peak_bf16_tflops * efficiency.attention_efficiency(a, b200, s))
    assert attn == pytest.approx(1.018972, rel=1e-5)


def test_sustained_fraction_applies_only_where_a_generation_knob_sets_the_rate():
    """The flat textbook efficiency (seed 003: 0.6 of whatever peak the catalog states) is not a per-generation
    knob fitted on the reference part, so it keeps every part at its rated peak; Hopper parts are 1."""
    t = resolve_assumptions({"preset": "textbook"})
    gb200 = lookup_gpu("GB200-NVL72")
    assert efficiency.max_linear_efficiency(t, gb200, "bf16") == 0.6
    assert efficiency.sustained_fraction(gb200, None) == 1.0
    assert efficiency.sustained_fraction(gb200, 0.5) == pytest.approx(0.917075, abs=1e-6)
    assert lookup_gpu("H100-SXM-80GB").sustained_rate_fraction == 1.0


def test_mxfp8_recipe_slows_only_the_fp8_linear_layers_by_the_measured_factor():
    """Worked by hand (costmodel/compute/efficiency.py MXFP8_LINEAR_TIME_FACTOR): Megatron-Bridge 25.11, one Llama 3 8B plan in
    both recipes: MXFP8 / tensorwise throughput 29521/30624 = 0.963982 (B200) and 29789/31508 = 0.945442 (GB200), mean
    r = 0.954712, 1/r - 1 = 0.047436 more step time, carried by the FP8 linear layers' share 0.43 of that step:
    1 + 0.047436/0.43 = 1.110316. BF16 GEMMs and the attention core do not change."""
    a = resolve_assumptions(None)
    mx = a.model_copy(update={"fp8_recipe": "mxfp8"})
    b200 = lookup_gpu("B200")
    assert efficiency.MXFP8_LINEAR_TIME_FACTOR == pytest.approx(1.110316, abs=1e-6)
    gemms = [(1.0, 16384.0, 4096.0, 28672.0), (1.0, 16384.0, 14336.0, 4096.0)]
    fp8 = [efficiency.linear_seconds_per_flop(x, b200, "fp8", 4500e12, gemms) for x in (a, mx)]
    assert fp8[1] / fp8[0] == pytest.approx(1.110316, rel=1e-6)
    bf16 = [efficiency.linear_seconds_per_flop(x, b200, "bf16", 2250e12, gemms) for x in (a, mx)]
    assert bf16[1] == bf16[0]
    assert efficiency.attention_efficiency(mx, b200, 8192) == efficiency.attention_efficiency(a, b200, 8192)
    assert a.fp8_recipe == "tensorwise"


def test_rows_that_train_in_mxfp8_carry_the_recipe():
    """A published row with precision MXFP8 (the DeepSeek-V3 GB200 rows) maps to fp8 training with fp8_recipe mxfp8;
    a tensorwise FP8 row (MLPerf v5.1, FP8_RECIPE=tensorwise) keeps the default."""
    from benchmarks import row_mapping, runs

    rows = list(runs.load_runs())
    mx = [r for r in rows if (r.get("precision") or "").lower() == "mxfp8"]
    assert mx
    for r in mx:
        ex = row_mapping.express(r)
        if ex.ok:
            assert ex.spec.training.precision == "fp8" and ex.overrides.get("fp8_recipe") == "mxfp8", r["id"]
    plain = next(r for r in rows if (r.get("precision") or "").lower() == "fp8")
    assert "fp8_recipe" not in row_mapping.express(plain).overrides


def test_mi300x_gemm_is_priced_at_amds_measured_rate():
    """Worked by hand (costmodel/spec/cdna3_rates.py): AMD's Max-Achievable FLOPs on MI300X, hipBLASLt-bench, is
    708 TFLOP/s BF16 at M=4096, N=4864, K=32896 and 1273 TFLOP/s FP8 at M=4096, N=3648, K=32896. With the roofline
    term off (κ = 0) the model prices those GEMMs at exactly those rates: e_max = 708/1307.4 = 0.5415 and
    1273/2614.9 = 0.4868 of the datasheet peaks. Under the default κ the same roofline term as on every generation
    applies: R = 1307.4 TFLOP/s / 5.3 TB/s = 246.68 FLOP/byte, 1/4096 + 1/32896 + 1/4864 = 4.8013e-4, so at
    κ = 1.2586 the bracket is 1 + 1.2586·246.68·4.8013e-4 = 1.1491 and the GEMM runs at 0.5415·1307.4/1.1491 =
    616.1 TFLOP/s."""
    mi300x = lookup_gpu("MI300X")
    flat = resolve_assumptions({"matmul_shape_penalty": 0.0})
    bf16 = efficiency.linear_seconds_per_flop(flat, mi300x, "bf16", 1307.4e12, [(1.0, 4096, 32896, 4864)])
    fp8 = efficiency.linear_seconds_per_flop(flat, mi300x, "fp8", 2614.9e12, [(1.0, 4096, 32896, 3648)])
    assert 1 / bf16 == pytest.approx(708e12, rel=1e-4)  # e_max rounded to 4 places: 0.5415 x 1307.4 = 707.96
    assert 1 / fp8 == pytest.approx(1273e12, rel=1e-4)
    a = resolve_assumptions(None)
    bracket = 1 + a.matmul_shape_penalty * (1307.4 / 5.3) * (1 / 4096 + 1 / 32896 + 1 / 4864)
    spf = efficiency.linear_seconds_per_flop(a, mi300x, "bf16", 1307.4e12, [(1.0, 4096, 32896, 4864)])
    assert 1 / spf == pytest.approx(0.5415 * 1307.4e12 / bracket, rel=1e-9)
    if a.matmul_shape_penalty == 1.2586:  # the committed calibration: the number worked above
        assert 1 / spf == pytest.approx(616.1e12, rel=1e-3)


def test_mi300x_attention_runs_at_amds_fa2_claim_over_h100_fa2():
    """AMD's launch claim (SemiAnalysis, Dec 2023): FlashAttention-2 forward on MI300X at 1.1-1.2x H100's FA2.
    At any sequence length the MI300X attention core's FLOP/s are 1.15x those of an FA2-class kernel on H100
    (``attention_kernel: flash2``): 0.2152 x 1.15 x 989.4/1307.4 = 0.1873 of MI300X's peak (4 places)."""
    a = resolve_assumptions(None)
    h100_fa2 = resolve_assumptions({"attention_kernel": "flash2"})
    mi300x, h100 = lookup_gpu("MI300X"), lookup_gpu("H100-SXM-80GB")
    assert a.attention_efficiency_cdna3 == pytest.approx(a.attention_efficiency_flash2 * 1.15 * 989.4 / 1307.4, abs=5e-5)
    for s in (2048, 8192, 32768):
        ratio = (mi300x.peak_bf16_tflops * efficiency.attention_efficiency(a, mi300x, s)) / (
            h100.peak_bf16_tflops * efficiency.attention_efficiency(h100_fa2, h100, s))
        assert ratio == pytest.approx(1.15, abs=1e-3)


def test_no_gpu_runs_faster_than_the_ceilings_the_bounds_use():
    """solver/bounds.py fastest_flops_per_s prices every FLOP at the ceiling knobs (matmul_efficiency,
    fp8_matmul_efficiency, attention_efficiency): every catalog GPU's GEMM and attention rates, the measured CDNA3
    ones included, stay at or under them, at any sequence length and head dimension."""
    from parplan.costmodel.spec.hardware import CATALOG

    a = resolve_assumptions(None)
    for gpu in CATALOG.values():
        assert efficiency.max_linear_efficiency(a, gpu, "bf16") <= a.matmul_efficiency
        assert efficiency.max_linear_efficiency(a, gpu, "fp8") <= a.fp8_matmul_efficiency
        for s in (512, 8192, 131072):
            for d in (64, 128, 160):
                assert efficiency.attention_efficiency(a, gpu, s, d) <= a.attention_efficiency
