"""Achieved kernel efficiency: the share of a GPU's peak that a GEMM or the attention core reaches.

**Linear layers.** A GEMM with M rows (tokens), reduction width K and output width N on one GPU takes

    t = 2·M·K·N / (P · e_max) · (1 + κ · R · (1/M + 1/K + 1/N)) · w,

so its efficiency is ``e_max / ((1 + κ·R·(1/M + 1/K + 1/N))·w)``. P is the dense peak of the precision and
e_max the share of P that large GEMMs reach on the GPU's generation (knobs ``matmul_efficiency_<gen>``,
``fp8_matmul_efficiency_<gen>``); w >= 1 the tile and wave quantisation of its outputs on the GPU's SMs
(:mod:`gemm_waves`, knob ``gemm_wave_quantization``; textbook 1). CDNA3 (MI300X) has no published runs to fit:
its knobs are measured kernel rates (:mod:`parplan.costmodel.spec.cdna3_rates`: AMD's hipBLASLt Max-Achievable
FLOPs for the GEMMs, AMD's FlashAttention-2 claim against H100 for the attention core).
The bracket is the additive roofline: a GEMM moves at least the
2·(MK + KN + MN) bytes of its operands and result, so at HBM bandwidth W it also costs
2(MK + KN + MN)/W = 2MKN/P · R·(1/M + 1/K + 1/N) with R = P/W, the roofline ridge point in FLOP per
byte (A100 153, H100 295, H200 206, B200 281 in BF16). κ (``matmul_shape_penalty``) scales that
traffic term for what kernels hide or add: operand reuse and prefetching make κ < 1, tile and wave
quantisation and launch overheads make it larger. TP shrinks K or N (hidden/tp, ffn/tp), CP and small
micro-batches shrink M (micro_batch_size·seq_len/cp tokens), and efficiency drops accordingly. FP8
GEMMs double P and halve the bytes per element, so they use the same R.

**Attention core** (QKᵀ and AV, FlashAttention, BF16 even under FP8 training):

    efficiency = e_attn / (1 + s0 / s_rank),

with s_rank = seq_len/cp the keys and queries of one sequence on a CP rank (each ring step works on
blocks of that length) and s0 (``attention_seq_penalty``) the length at which half of e_attn is reached:
FlashAttention's throughput grows with sequence length (Dao 2023, FlashAttention-2 Fig. 4-6; Shah et
al. 2024, FlashAttention-3 Fig. 5) because short sequences leave SMs idle and pay fixed per-block costs.

**Head dimension** (``head_dim_factor``): per score element the attention core does 2·(d_qk + d_v) matmul FLOPs
(QKᵀ and PV, forward) and a fixed amount of non-matmul work (the online softmax's exponential, max and rescale,
which run on the SFUs/CUDA cores at a small fraction of the tensor-core rate: Shah et al. 2024, FlashAttention-3,
arXiv:2407.08608 §3.2: the H100's 989 TFLOPS of BF16 matmul against 3.9 TFLOPS of exponentials). With
d = (d_qk + d_v)/2 the time per score element is ∝ d + d0, so the efficiency is ∝ d/(d + d0) and narrow heads
run slower. d0 = 64 (``ATTENTION_HEAD_DIM_D0``) is what FlashAttention-3's own measurements give (its Figure 5,
H100 SXM5 BF16 forward, no causal mask, sequence 4k: 476 TFLOPS/s at head dim 64, 638 at 128, 736 at 256;
(128 + d0)/(2(64 + d0)) = 0.75 = 476/638 at d0 = 64, which then predicts 1.2 x 638 = 766 at 256 against the
measured 736). The factor is normalised to 1 at head dim 128, the head of nearly every fitted row, so the fitted
``attention_efficiency`` stays the 128-wide value; it is capped at 1 (wider heads, e.g. MLA's (192 + 128)/2, are
not credited): the solver's lower bounds (solver/bounds.py) take ``attention_efficiency`` as the fastest attention
rate.

**Parts of one die at different clocks** (:func:`sustained_fraction`): the per-generation knobs are fitted on
the generation's reference part (B200 for Blackwell); a part rated at a higher clock (GB200: 2.5 PF dense BF16 at
1,200 W against B200's 2.25 PF at 1,000 W) gets its rates times ``GPU.sustained_rate_fraction``, the measured
ratio of the two parts on one job over the ratio of their rated peaks (costmodel/spec/hardware.py
SUSTAINED_RATE_FRACTION: NVIDIA's Megatron-Bridge 25.11 table, Llama 3 8B on 8 GPUs, GB200 1.019x B200 for
1.11x the rated peak, so 0.917). MFU stays quoted against the rated peak.

**MXFP8** (``fp8_recipe: mxfp8``): Blackwell's 1x32 block-scaled FP8 recipe; the FP8 linear layers take
:data:`MXFP8_LINEAR_TIME_FACTOR` (1.110) times their tensorwise time, from NVIDIA's measurement of one plan in both
recipes (the constant's comment).

Every value above is a per-choice constant, so the model stays stage-affine. The fitted defaults live in
:mod:`parplan.costmodel.spec.calibration` (written by ``python benchmarks/fit.py``); the knobs are in
:mod:`parplan.costmodel.spec.assumptions`. Under the ``textbook`` preset κ = s0 = 0 and every efficiency is
the flat ``matmul_efficiency`` (seed 003: 0.6).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from parplan.costmodel.compute.gemm_waves import wave_multiplier
from parplan.costmodel.memo import bounded_put, recent

if TYPE_CHECKING:  # pragma: no cover
    from parplan.costmodel.spec.assumptions import Assumptions
    from parplan.costmodel.spec.hardware import GPU

# HBM bandwidth per GPU in GB/s (datasheets), for the roofline ridge R = peak / bandwidth.
HBM_BANDWIDTH_GBPS: dict[str, float] = {
    "A100-SXM-80GB": 2039.0,  # NVIDIA A100 datasheet: 2,039 GB/s HBM2e (80 GB SXM)
    "A100-SXM-40GB": 1555.0,  # NVIDIA A100 datasheet: 1,555 GB/s HBM2 (40 GB)
    "H100-SXM-80GB": 3350.0,  # NVIDIA H100 datasheet: 3.35 TB/s HBM3 (SXM)
    "H800": 3350.0,  # H100 SXM memory system
    "H200-SXM-141GB": 4800.0,  # NVIDIA H200 datasheet: 4.8 TB/s HBM3e
    "B200": 8000.0,  # NVIDIA DGX B200 datasheet: 64 TB/s for 8 GPUs
    "GB200-NVL72": 8000.0,  # NVIDIA GB200 NVL72 datasheet: 576 TB/s for 72 GPUs
    "GB300-NVL72": 8000.0,  # verda.com/blog/gb300-nvl72-architecture: 8 TB/s per GPU, 576 TB/s for 72 GPUs
    "MI300X": 5300.0,  # AMD Instinct MI300X datasheet: 5.3 TB/s HBM3
}
_GENERATION_BANDWIDTH = {"ampere": 2039.0, "hopper": 3350.0, "blackwell": 8000.0, "cdna3": 5300.0}

GENERATIONS = ("ampere", "hopper", "blackwell", "cdna3")  # generations with their own knobs (cdna3: measured, not fitted)


def hbm_bandwidth_gbps(gpu: "GPU", a: Optional["Assumptions"] = None) -> float:
    """HBM bandwidth in GB/s: the ``hbm_bandwidth_gbps`` knob, else the datasheet value of the GPU."""
    if a is not None and a.hbm_bandwidth_gbps is not None:
        return a.hbm_bandwidth_gbps
    if gpu.name in HBM_BANDWIDTH_GBPS:
        return HBM_BANDWIDTH_GBPS[gpu.name]
    return _GENERATION_BANDWIDTH.get(gpu.generation, 3350.0)


def ridge_flops_per_byte(gpu: "GPU", a: Optional["Assumptions"] = None) -> float:
    """Roofline ridge point in BF16: dense BF16 peak over HBM bandwidth (FLOP per byte)."""
    return gpu.peak_bf16_tflops * 1e12 / (hbm_bandwidth_gbps(gpu, a) * 1e9)


# MXFP8 (1x32 block-scaled FP8, Transformer Engine MXFP8BlockScaling) against tensorwise FP8 on Blackwell, the same
# Llama 3 8B plan (8 GPUs, GBS 128, MBS 2, seq 8192, TP1 PP1 CP1) in both recipes in NVIDIA's Megatron-Bridge 25.11
# performance summary (NVIDIA-NeMo/Megatron-Bridge@00b7660b docs/performance-summary.md): DGX-B200 29521 vs 30624
# tokens/s/GPU, DGX-GB200 29789 vs 31508, a mean throughput ratio r = (0.96398 + 0.94545)/2 = 0.95471, i.e. 4.74 % more
# step time. The recipe changes only the FP8 linear layers (their quantization and block-scaled GEMMs; attention, the
# BF16 head and communication are the same), which are s = 0.43 of that step in the model (the committed calibration
# of 0fd9c7a prices the B200 plan at 30749 tokens/s/GPU, 0.43 of it in the FP8 linear layers): their time grows by
# 1 + (1/r - 1)/s = 1 + 0.04744/0.43 = 1.110.
MXFP8_LINEAR_TIME_FACTOR = 1.0 + (2.0 / (29521 / 30624 + 29789 / 31508) - 1.0) / 0.43


def sustained_fraction(gpu: "GPU", generation_knob: Optional[float]) -> float:
    """The part's sustained share of its rated peak relative to its generation's reference part
    (``GPU.sustained_rate_fraction``, costmodel/spec/hardware.py SUSTAINED_RATE_FRACTION: GB200 0.917 of its 2.5 PF,
    i.e. B200's measured rate x 1.019, Megatron-Bridge 25.11), applied where a per-generation knob sets the rate
    (the knob was fitted on the reference part); 1 where no such knob applies (textbook's flat efficiency)."""
    return 1.0 if generation_knob is None else gpu.sustained_rate_fraction


def _by_generation(a: "Assumptions", stem: str, gpu: "GPU") -> Optional[float]:
    if gpu.generation in GENERATIONS:
        return getattr(a, f"{stem}_{gpu.generation}", None)
    return None


def max_linear_efficiency(a: "Assumptions", gpu: "GPU", precision: str) -> float:
    """e_max of the linear layers: the share of the precision's dense peak that large GEMMs reach.

    Never above the ceiling knob (``matmul_efficiency``, or ``fp8_matmul_efficiency`` under FP8), which
    the solver's lower bounds use as the fastest rate.
    """
    if precision == "fp8" and a.fp8_matmul_efficiency is not None:
        cap = a.fp8_matmul_efficiency
        gen = _by_generation(a, "fp8_matmul_efficiency", gpu)
    else:
        cap = a.matmul_efficiency
        gen = _by_generation(a, "matmul_efficiency", gpu)
    e = cap if gen is None else min(cap, gen) * sustained_fraction(gpu, gen)
    return e / MXFP8_LINEAR_TIME_FACTOR if precision == "fp8" and a.fp8_recipe == "mxfp8" else e


def shape_factor(a: "Assumptions", gpu: "GPU", m: float, k: float, n: float) -> float:
    """Time multiplier ``(1 + κ·R·(1/M + 1/K + 1/N))·w`` of one GEMM, forward and backward: w is the mean wave
    multiplier (:func:`parplan.costmodel.compute.gemm_waves.wave_multiplier`) of its three GEMMs' outputs, M x N (forward),
    M x K (input gradient) and K x N (weight gradient), each a third of the FLOPs (``gemm_wave_quantization``;
    1 when off). 1 when κ = 0 and the waves are off."""
    if min(m, k, n) <= 0:
        return 1.0
    waves = 1.0
    if a.gemm_wave_quantization and gpu.sm_count:
        waves = (wave_multiplier(m, n, gpu.sm_count) + wave_multiplier(m, k, gpu.sm_count)
                 + wave_multiplier(k, n, gpu.sm_count)) / 3.0
    if a.matmul_shape_penalty == 0:
        return waves
    return (1.0 + a.matmul_shape_penalty * ridge_flops_per_byte(gpu, a) * (1.0 / m + 1.0 / k + 1.0 / n)) * waves


# linear_seconds_per_flop's answers by their arguments (a pure function of them; Assumptions and GPU are frozen,
# held by identity beside the answer so an id is never reused for another object while its entry lives): the
# solver asks it for the same GEMM shapes across thousands of choices (one cold request: Llama-3 8B / 8 H100 50
# shapes, 70B / 64 H100 62, DeepSeek-V3 / 2,048 H800 412 over 11k reads). Each spec's Assumptions object is another
# key, so a warm service that plans many specs kept every one's shapes (~47 a spec in benchmarks/warm_service.py's
# RSS run, up to the old 65,536-entry cap: ~45 MiB): an LRU of SPF_CACHE_MAX entries (costmodel/memo.py
# bounded_put), ~0.7 KB each (tracemalloc: the bytes freed by dropping those three requests' entries), so ~3 MiB
_SPF_CACHE: dict = {}
SPF_CACHE_MAX = 1 << 12


def linear_seconds_per_flop(a: "Assumptions", gpu: "GPU", precision: str, peak_flops: float,
                            gemms: list[tuple[float, float, float, float]]) -> float:
    """Seconds per FLOP of a group of GEMMs, each ``(flops_weight, M, K, N)``: the FLOP-weighted mean of
    ``shape_factor / (P·e_max)``. With κ = 0 it is exactly ``1 / (P·e_max)``. Memoized on its arguments
    (:data:`_SPF_CACHE`): the same floats in the same order, so the same answer bit for bit."""
    key = (id(a), id(gpu), precision, peak_flops, tuple(tuple(g) for g in gemms))
    hit = recent(_SPF_CACHE, key)
    if hit is not None and hit[0] is a and hit[1] is gpu:
        return hit[2]
    out = _linear_seconds_per_flop(a, gpu, precision, peak_flops, gemms)
    bounded_put(_SPF_CACHE, key, (a, gpu, out), SPF_CACHE_MAX)
    return out


def _linear_seconds_per_flop(a: "Assumptions", gpu: "GPU", precision: str, peak_flops: float,
                             gemms: list[tuple[float, float, float, float]]) -> float:
    base = 1.0 / (peak_flops * max_linear_efficiency(a, gpu, precision))
    if a.matmul_shape_penalty == 0 and not (a.gemm_wave_quantization and gpu.sm_count):
        return base
    total = sum(w for w, *_ in gemms)
    if total <= 0:
        return base
    return base * sum(w * shape_factor(a, gpu, m, k, n) for w, m, k, n in gemms) / total


ATTENTION_HEAD_DIM_D0 = 64.0  # head dim at which half the tensor-core rate goes to softmax work (FA3 Fig. 5; docstring)
ATTENTION_REFERENCE_HEAD_DIM = 128.0  # the fitted attention_efficiency's head dim (the calibration rows' heads)


def head_dim_factor(head_dim: float) -> float:
    """Attention-core efficiency at mean head dim ``head_dim`` ((d_qk + d_v)/2) relative to head dim 128:
    ``[d/(d + d0)] / [128/(128 + d0)]`` with d0 = :data:`ATTENTION_HEAD_DIM_D0` (module docstring): 0.75 at 64, 0.9
    at 96, at most 1 (128 and wider)."""
    d, d0, ref = max(head_dim, 1.0), ATTENTION_HEAD_DIM_D0, ATTENTION_REFERENCE_HEAD_DIM
    return min(1.0, (d / (d + d0)) / (ref / (ref + d0)))


def attention_efficiency(a: "Assumptions", gpu: "GPU", s_rank: float,
                         head_dim: float = ATTENTION_REFERENCE_HEAD_DIM) -> Optional[float]:
    """Share of the BF16 peak that the attention core reaches for ``s_rank`` tokens per CP rank and mean head dim
    ``head_dim`` (:func:`head_dim_factor`), or None (``attention_efficiency`` None: the attention core runs at the
    linear layers' rate, textbook)."""
    if a.attention_efficiency is None:
        return None
    gen = _by_generation(a, "attention_efficiency", gpu)
    if a.attention_kernel == "flash2" and gpu.generation in ("hopper", "blackwell") and a.attention_efficiency_flash2:
        gen = a.attention_efficiency_flash2
    e = a.attention_efficiency if gen is None else min(a.attention_efficiency, gen)
    if a.attention_seq_penalty > 0:
        e = e / (1.0 + a.attention_seq_penalty / max(s_rank, 1.0))
    return e * head_dim_factor(head_dim) * sustained_fraction(gpu, gen)


__all__ = [
    "HBM_BANDWIDTH_GBPS",
    "GENERATIONS",
    "hbm_bandwidth_gbps",
    "ridge_flops_per_byte",
    "max_linear_efficiency",
    "shape_factor",
    "linear_seconds_per_flop",
    "attention_efficiency",
    "head_dim_factor",
    "sustained_fraction",
    "MXFP8_LINEAR_TIME_FACTOR",
    "ATTENTION_HEAD_DIM_D0",
]
