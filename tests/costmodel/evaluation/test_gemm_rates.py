"""The GEMM rates of a choice's layer (costmodel/evaluation/gemm_rates.py): the attention core's time by its head width,
its sliding windows and its learned sinks.
"""

from __future__ import annotations

import pytest

from parplan.costmodel.compute.architecture import Architecture
from parplan.costmodel.evaluation.choice_context import ChoiceContext
from parplan.costmodel.evaluation.gemm_rates import GemmRates
from parplan.costmodel.spec.assumptions import resolve_assumptions
from parplan.costmodel.spec.degrees import Choice
from parplan.costmodel.spec.hardware import resolve_gpu

from tests import physics_cases as physics


def test_narrow_heads_slow_the_attention_core():
    """Llama-3 70B's 64 heads of 128 against the same widths as 128 heads of 64 (GPT-OSS's head dim): the same
    attention-core FLOPs, at 0.75 x the efficiency (costmodel/compute/efficiency.py head_dim_factor: (64/128)/(128/192)),
    so 4/3 x the attention core's time; the GEMMs are unchanged."""
    c = Choice(tp=4, cp=1, pp=1, dp=2, num_microbatches=4, sequence_parallel=True)

    def rates(model):
        spec = physics.spec(model, 8, seq=8192, gbs=8)
        arch = Architecture(spec.model)
        ctx = ChoiceContext.of(spec, c, resolve_gpu(spec.cluster), resolve_assumptions(spec.assumptions), arch, 8, 1)
        return arch, GemmRates.of(ctx)

    arch_w, wide = rates(physics.LLAMA70B)
    arch_n, narrow = rates(dict(physics.LLAMA70B, num_attention_heads=128, num_kv_heads=16, head_dim=64))
    assert arch_n.attention_core_flops(8192) == pytest.approx(arch_w.attention_core_flops(8192))
    assert narrow.spf_dense == pytest.approx(wide.spf_dense)
    assert narrow.attn_core_s == pytest.approx(wide.attn_core_s * 4 / 3)


def test_sliding_window_and_sinks_in_the_attention_core_time():
    """GPT-OSS 120B (physics_cases.GPT_OSS). The windowed layers' attention core is timed at its FLOPs (the
    mean over the layers 53,428,608 per token against 100,663,296 full causal, tests/costmodel/compute/test_architecture.py); learned
    sinks keep FP8 attention off (Transformer Engine v2.14 attention/dot_product_attention/utils.py:728-736: under
    fp8_dpa every backend is disabled for softmax_type != vanilla, so a run with sinks attends in BF16), so the
    fp8_attention speed-up does not apply: with sinks the FP8 run's attention core takes fp8_attention_speedup x
    as long as without them."""
    c = Choice(tp=1, cp=1, pp=1, dp=8, ep=8, num_microbatches=4)

    def attn_s(attention, precision="bf16", **assumptions):
        spec = physics.spec({**physics.GPT_OSS, "attention": attention}, 8, gbs=32, precision=precision, **assumptions)
        a = resolve_assumptions(spec.assumptions)
        ctx = ChoiceContext.of(spec, c, resolve_gpu(spec.cluster), a, Architecture(spec.model), 8, 1)
        return GemmRates.of(ctx).attn_core_s, a

    windowed, _ = attn_s(dict(sliding_window=128, full_attention_every=2))
    full, _ = attn_s(None)
    assert windowed / full == pytest.approx(53_428_608 / 100_663_296)
    with_sinks, a = attn_s(dict(sinks=True), "fp8", fp8_attention=True)
    without, _ = attn_s(None, "fp8", fp8_attention=True)
    assert a.fp8_attention_speedup > 1
    assert with_sinks == pytest.approx(without * a.fp8_attention_speedup)
    # BF16 attention: sinks change nothing (cuDNN fused attention runs them, fused_attn.cpp:460-465)
    assert attn_s(dict(sinks=True))[0] == pytest.approx(full)
