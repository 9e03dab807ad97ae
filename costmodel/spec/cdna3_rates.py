"""Kernel efficiencies of AMD CDNA3 (MI300X): measured by others, not fitted (no MI300X rows in
benchmarks/data/published-runs.yaml), so the per-generation knobs ``*_cdna3`` are set from these figures.

**Large GEMMs** (``matmul_efficiency_cdna3``, ``fp8_matmul_efficiency_cdna3``): AMD's Max-Achievable FLOPs (MAF),
hipBLASLt-bench on MI300X (750 W), ROCm 6.3.0, hipBLASLt@db8e93b4fd6c785d4ce6cac11cc3b0ad613ece8b, trig_float
inputs: 708 TFLOP/s BF16 (M=4096, N=4864, K=32896, median clock 1207 MHz) and 1273 TFLOP/s FP8 (M=4096, N=3648,
K=32896); Sander et al., "Measuring Max-Achievable FLOPs - Part 2", 28 Feb 2025,
rocm.blogs.amd.com/software-tools-optimization/measuring-max-achievable-flops-part2 (ROCm/rocm-blogs@8e01195
blogs/software-tools-optimization/measuring-max-achievable-flops-part2/README.md, Table 1; its footnote 4 says
1223.6 TFLOP/s for FP8 instead, 4 % lower). Shares of the datasheet dense peaks (1307.4 BF16, 2614.9 FP8,
costmodel/spec/hardware.py): 0.5415 and 0.4868. They are e_max, the large-GEMM share, read as the fitted knobs
are: Hopper's fitted 0.768 is 0.956 of H100's measured best GEMM share (794.5 of 989 TFLOP/s, 0.803) and Ampere's
0.824 is 0.948 of A100's (271.2 of 312, 0.869), both by stas00/ml-engineering's mamf-finder ("Maximum Achievable
Matmul FLOPS comparison table", compute/accelerator/README.md); the same table has MI300X at 668.4 TFLOP/s BF16
(0.511, torch 2.5.1 + ROCm 6.3, TunableOp), 6 % under AMD's own figure. The shape's roofline term
(``matmul_shape_penalty``) applies on top, as for every generation.

**Attention core** (``attention_efficiency_cdna3``): no independent forward+backward measurement of MI300X's
FlashAttention against H100's in one harness was found. The one public comparison is AMD's launch claim
(6 Dec 2023), FlashAttention-2 forward on one MI300X against one H100 (both FA2, neither with Hopper's
asynchronous tensor-core kernels): 1.1-1.2x the H100's throughput (SemiAnalysis, "AMD MI300 Performance - Faster
Than H100, But How Much?", semianalysis.substack.com/p/amd-mi300-performance-faster-than: "forward pass only ...
The performance advantage is 10% to 20%"). So the CDNA3 attention core runs at 1.15x (the middle) the
throughput of an FA2-class kernel on H100, the fitted ``attention_efficiency_flash2`` of H100's 989.4 TFLOP/s,
as a share of MI300X's 1307.4: 1.15 x 989.4 / 1307.4 x attention_efficiency_flash2. It is a vendor's
forward-only figure, not an independent forward+backward measurement: replace it when one is published.
"""

from __future__ import annotations

from parplan.costmodel.spec.calibration import FITTED

MI300X_PEAK_BF16_TFLOPS = 1307.4  # AMD Instinct MI300X datasheet (costmodel/spec/hardware.py CATALOG)
MI300X_PEAK_FP8_TFLOPS = 2614.9
H100_PEAK_BF16_TFLOPS = 989.4  # NVIDIA H100 SXM datasheet, dense

MI300X_MAF_BF16_TFLOPS = 708.0  # AMD MAF, hipBLASLt-bench, M=4096 N=4864 K=32896 (docstring)
MI300X_MAF_BF16_SHAPE = (4096.0, 32896.0, 4864.0)  # (M, K, N) of that measurement
MI300X_MAF_FP8_TFLOPS = 1273.0  # AMD MAF, hipBLASLt-bench, M=4096 N=3648 K=32896 (docstring)
MI300X_FA2_FORWARD_VS_H100 = 1.15  # AMD launch claim: MI300X FA2 forward 1.1-1.2x H100 FA2 (docstring)

MATMUL_EFFICIENCY_CDNA3 = round(MI300X_MAF_BF16_TFLOPS / MI300X_PEAK_BF16_TFLOPS, 4)
FP8_MATMUL_EFFICIENCY_CDNA3 = round(MI300X_MAF_FP8_TFLOPS / MI300X_PEAK_FP8_TFLOPS, 4)
ATTENTION_EFFICIENCY_CDNA3 = round(MI300X_FA2_FORWARD_VS_H100 * H100_PEAK_BF16_TFLOPS / MI300X_PEAK_BF16_TFLOPS
                                   * FITTED["attention_efficiency_flash2"], 4)

CDNA3_KNOBS: dict[str, float] = {
    "matmul_efficiency_cdna3": MATMUL_EFFICIENCY_CDNA3,
    "fp8_matmul_efficiency_cdna3": FP8_MATMUL_EFFICIENCY_CDNA3,
    "attention_efficiency_cdna3": ATTENTION_EFFICIENCY_CDNA3,
}

__all__ = ["CDNA3_KNOBS", "MATMUL_EFFICIENCY_CDNA3", "FP8_MATMUL_EFFICIENCY_CDNA3", "ATTENTION_EFFICIENCY_CDNA3",
           "MI300X_MAF_BF16_TFLOPS", "MI300X_MAF_BF16_SHAPE", "MI300X_MAF_FP8_TFLOPS"]
