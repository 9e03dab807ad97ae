"""Compute time: the model's shape and FLOPs, achieved kernel efficiency, GEMM wave quantization, and the FP8
transposed copies."""
