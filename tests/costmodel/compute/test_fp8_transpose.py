"""The transposed FP8 copies (costmodel/compute/fp8_transpose.py), worked by hand on Llama-3 8B.

Hopper's FP8 GEMMs take only the TN layout, so FP8 training writes a one-byte transposed copy of every GEMM input and
output gradient (Transformer Engine: Float8Quantizer::create_tensor allocates the transpose only when
``columnwise_usage && !is_non_tn_fp8_gemm_supported``, quantizer.cpp:361-375 at TransformerEngine@d0067d0d);
Blackwell's take either layout and no copy is written.
"""

from __future__ import annotations

import pytest

from parplan.costmodel.compute.architecture import Architecture
from parplan.costmodel.schedules.schedule import Schedule
from parplan.costmodel.spec.assumptions import resolve_assumptions
from parplan.costmodel.evaluation.choice import Choice, layer_pieces
from parplan.costmodel.compute.fp8_transpose import needs_transposes, transpose_bytes, transpose_seconds
from parplan.costmodel.spec.hardware import resolve_gpu
from parplan.frameworks.loader import validate_spec

LLAMA8B = dict(name="llama3-8b", num_layers=32, hidden_size=4096, ffn_hidden_size=14336, num_attention_heads=32,
               num_kv_heads=8, vocab_size=128256)
# Llama-3 8B's dense-layer GEMMs at TP 1 as (weight, M, K, N), M = 8192 tokens: fused QKV 4096 -> 4096 + 2 x 1024,
# output projection 4096 -> 4096, gated MLP up 4096 -> 2 x 14336, down 14336 -> 4096
M = 8192
GEMMS = [(1.0, M, 4096, 6144), (1.0, M, 4096, 4096), (1.0, M, 4096, 28672), (1.0, M, 14336, 4096)]
# sum of K + N: 10240 + 8192 + 32768 + 18432 = 69632 one-byte elements per token
BYTES = M * 69632  # 570,425,344


def spec(gpu: str, precision: str = "fp8", **assumptions):
    return validate_spec(dict(model=LLAMA8B, training=dict(seq_len=M, global_batch_size=8, precision=precision),
                              cluster=dict(gpu=gpu, num_gpus=8), assumptions=assumptions))


def dense(s):
    """The dense layer's cost of TP 1, DP 8, one sequence per micro-batch."""
    c = Choice(tp=1, cp=1, pp=1, dp=8, micro_batch_size=1, num_microbatches=1)
    return layer_pieces(s, c, resolve_gpu(s.cluster), resolve_assumptions(s.assumptions), Architecture(s.model))[4]


def test_transpose_bytes_by_hand():
    """M·(K + N) one-byte elements per GEMM: 8192 x 69632 = 570,425,344 bytes for the layer."""
    assert transpose_bytes(GEMMS) == BYTES == 570_425_344


def test_which_runs_write_the_copies():
    """FP8 on Hopper with a per-tensor recipe only: not on Blackwell, not in BF16, not under MXFP8, not in textbook."""
    a = resolve_assumptions(None)
    h100, b200 = resolve_gpu(spec("H100-SXM-80GB").cluster), resolve_gpu(spec("B200").cluster)
    assert needs_transposes(a, h100, "fp8")
    assert not needs_transposes(a, b200, "fp8")
    assert not needs_transposes(a, h100, "bf16")
    assert not needs_transposes(a.model_copy(update={"fp8_recipe": "mxfp8"}), h100, "fp8")
    assert not needs_transposes(resolve_assumptions({"preset": "textbook"}), h100, "fp8")
    assert transpose_seconds(a, b200, "fp8", 8e12, GEMMS) == 0.0


def test_h100_fp8_dense_layer_pays_the_copies_at_hbm_bandwidth():
    """H100 SXM, 3.35 TB/s: 570,425,344 B / 3.35e12 B/s = 170.27 us more per layer and micro-batch than with the
    knob off; the GEMMs, attention and elementwise terms are unchanged."""
    on, off = dense(spec("H100-SXM-80GB")), dense(spec("H100-SXM-80GB", fp8_transpose_copies=False))
    assert on.compute_s - off.compute_s == pytest.approx(570_425_344 / 3.35e12, rel=1e-9)
    assert on.compute_s - off.compute_s == pytest.approx(170.27e-6, rel=1e-4)
    assert on.linear_s == pytest.approx(off.linear_s)


def test_blackwell_and_bf16_layers_unchanged():
    """B200 in FP8 and H100 in BF16: the knob changes nothing."""
    for s_on, s_off in ((spec("B200"), spec("B200", fp8_transpose_copies=False)),
                        (spec("H100-SXM-80GB", "bf16"), spec("H100-SXM-80GB", "bf16", fp8_transpose_copies=False))):
        assert dense(s_on).compute_s == dense(s_off).compute_s


def test_h800_moe_layer_pays_the_copies_of_its_routed_tokens():
    """DeepSeek-V3 on H800 in FP8 (tests/physics_cases.py), TP 1, 4096 tokens per micro-batch, 1F1B (no SMs reserved
    for the all-to-all). Per token, K + N of the non-expert GEMMs: MLA q down 7168 + 1536, q up 1536 + 24576 (128 heads
    x 192), kv down 7168 + 576, kv up 512 + 32768 (128 x (128 + 128)), output 16384 + 7168 = 99,392; the shared expert
    (gated, 2048 wide) 7168 + 4096 and 2048 + 7168 = 20,480; together 119,872. Each of the top-8 routed copies of a token
    adds the expert's 20,480 (its rows: 4 experts per EP-64 rank x 8192 rows = 32,768 = 4096 x 8, times the busiest
    rank's load). At 3.35 TB/s: 4096 x (119,872 + 8 x 20,480 x load) bytes more than with the knob off."""
    from dataclasses import replace

    from tests import physics_cases as physics
    from parplan.costmodel.evaluation.choice_context import moe_busiest_load

    spec_on, c = physics.dsv3()
    spec_off, _ = physics.dsv3(fp8_transpose_copies=False)
    c = replace(c, schedule=Schedule.ONE_F_ONE_B)
    on, off = physics.costs(spec_on, c), physics.costs(spec_off, c)
    gpu, a = resolve_gpu(spec_on.cluster), resolve_assumptions(spec_on.assumptions)
    ctx = layer_pieces(spec_on, c, gpu, a, Architecture(spec_on.model))[0]
    load = moe_busiest_load(ctx)
    assert on.moe.compute_s - off.moe.compute_s == pytest.approx(4096 * (119_872 + 8 * 20_480 * load) / 3.35e12, rel=1e-9)
