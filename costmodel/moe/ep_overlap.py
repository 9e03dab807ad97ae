"""When can expert-parallel all-to-all hide under expert compute? (seed 000 §6, after DeepSeek-V4)

One token-expert pair of a SwiGLU expert with width d costs 6·h·d FLOPs (gate, up, down) and moves
3·h bytes (FP8 dispatch h + BF16 combine 2h), so communication hides iff compute/bandwidth
``C/B <= 6hd / 3h = 2d`` FLOPs per byte.
"""

from __future__ import annotations


def required_flops_per_byte(expert_ffn_hidden_size: int) -> float:
    """The C/B threshold 2·d (6144 for d=3072, 4096 for d=2048, 22016 for d=11008)."""
    return 2.0 * expert_ffn_hidden_size


def achieved_flops_per_byte(peak_tflops: float, bandwidth_gbps: float, mfu: float) -> float:
    return peak_tflops * mfu * 1e12 / (bandwidth_gbps * 1e9)


def can_fully_overlap(peak_tflops: float, bandwidth_gbps: float, mfu: float, expert_ffn_hidden_size: int) -> bool:
    return achieved_flops_per_byte(peak_tflops, bandwidth_gbps, mfu) <= required_flops_per_byte(expert_ffn_hidden_size)
