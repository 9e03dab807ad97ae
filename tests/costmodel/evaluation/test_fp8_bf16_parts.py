"""Under FP8 training the output head and the MoE router stay BF16 (issue 19 item 4; DeepSeek-V3 §3.3.1: "the
embedding module, the output head, MoE gating modules, normalization operators, and attention operators" keep
their precision; Megatron-Core builds the output layer as a non-TE ColumnParallelLinear), worked by hand with the
GEMM shape penalty off so that a GEMM's seconds per FLOP is exactly 1 / (peak x efficiency)."""

from __future__ import annotations

import pytest

from parplan.costmodel.compute.architecture import Architecture
from parplan.costmodel.schedules.schedule import Schedule
from parplan.costmodel.spec.assumptions import resolve_assumptions
from parplan.costmodel.evaluation.choice import Choice, choice_costs
from parplan.costmodel.compute.efficiency import max_linear_efficiency
from parplan.costmodel.spec.hardware import resolve_gpu
from parplan.frameworks.loader import validate_spec

MODEL = dict(name="dsv3-like", num_layers=8, hidden_size=7168, ffn_hidden_size=18432, num_attention_heads=128,
             vocab_size=129280, moe=dict(num_experts=256, top_k=8, expert_ffn_hidden_size=2048, num_shared_experts=1,
                                         first_dense_layers=1))


def _costs(precision: str):
    spec = validate_spec(dict(model=MODEL, training=dict(seq_len=4096, global_batch_size=64, precision=precision),
                                    cluster=dict(gpu="H800", num_gpus=8),
                                    assumptions=dict(matmul_shape_penalty=0.0)))
    a = resolve_assumptions(spec.assumptions)
    gpu = resolve_gpu(spec.cluster)
    c = Choice(tp=1, cp=1, pp=2, dp=4, ep=1, micro_batch_size=1, num_microbatches=16, schedule=Schedule.ONE_F_ONE_B)
    return choice_costs(spec, c, gpu, a), a, gpu


def test_head_at_bf16_under_fp8_by_hand():
    """Head: 6 · 129,280 · 7,168 FLOPs per token x 4,096 tokens = 2.2774e13 FLOPs per micro-batch, at 989 TFLOPS x
    the BF16 efficiency under both precisions (it was at 1,979 x the FP8 efficiency under FP8)."""
    fp8, a, gpu = _costs("fp8")
    bf16, _, _ = _costs("bf16")
    flops = 4096 * 6 * 129280 * 7168
    assert flops == pytest.approx(2.2774e13, rel=1e-4)
    expected = flops / (989e12 * max_linear_efficiency(a, gpu, "bf16"))
    assert fp8.last_extra_compute_s == pytest.approx(expected)
    assert bf16.last_extra_compute_s == pytest.approx(expected)


def test_router_at_bf16_the_other_moe_gemms_at_fp8_by_hand():
    """MoE layer, EP 1 (no imbalance): the router's 6 · 7,168 · 256 FLOPs per token at the BF16 rate, the rest of the
    non-expert GEMMs (attention projections, the shared expert) and the routed experts at the FP8 rate."""
    fp8, a, gpu = _costs("fp8")
    arch = Architecture(validate_spec(dict(model=MODEL, training=dict(seq_len=4096, global_batch_size=64),
                                                 cluster=dict(gpu="H800", num_gpus=8))).model)
    r8, r16 = 1979e12 * max_linear_efficiency(a, gpu, "fp8"), 989e12 * max_linear_efficiency(a, gpu, "bf16")
    router = 6 * 7168 * 256
    other = arch.moe_layer_dense_linear_flops - router + arch.moe_layer_expert_flops
    assert fp8.moe.linear_s == pytest.approx(4096 * (other / r8 + router / r16))
    # all at the FP8 rate would be faster by the router's difference only
    assert fp8.moe.linear_s - 4096 * (other + router) / r8 == pytest.approx(4096 * router * (1 / r16 - 1 / r8))
