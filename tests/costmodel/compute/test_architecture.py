"""The model's shape (costmodel/compute/architecture.py), worked by hand: MLA parameters and attention FLOPs
(DeepSeek-V3 config.json), the MTP module on the last stage.
"""

from __future__ import annotations

import pytest

from parplan.costmodel.compute.architecture import Architecture
from parplan.costmodel.spec.spec import ModelSpec

from tests import physics_cases as physics


def test_mla_parameters_and_attention_flops_by_hand():
    """DeepSeek-V3 MLA (config.json): q 7168 -> 1536 -> 128 x (128 + 64); kv 7168 -> 512 + 64, 512 ->
    128 x (128 + 128); output 128 x 128 -> 7168.
    Weights: 7168·1536 = 11,010,048; 1536·24,576 = 37,748,736; 7168·576 = 4,128,768; 512·32,768 =
    16,777,216; 16,384·7168 = 117,440,512; total 187,105,280 per layer (plus the two latent norms,
    1536 + 512). Attention core per token, fwd+bwd, causal, s = 4096: 6 · 4096 · (24,576 + 16,384) · 0.5
    = 503,316,480 FLOPs, 2.857 x the MHA approximation with head dim 7168/128 = 56 (12 · 4096 · 7168 ·
    0.5 = 176,160,768)."""
    arch = Architecture(ModelSpec.model_validate(physics.DSV3))
    assert arch.attention_params == 11_010_048 + 37_748_736 + 4_128_768 + 16_777_216 + 117_440_512 == 187_105_280
    assert arch.norm_params_per_layer == 2 * 7168 + 1536 + 512
    assert arch.attention_core_flops(4096) == 503_316_480
    mha = Architecture(ModelSpec.model_validate({**physics.DSV3, "mla": None}))
    assert mha.attention_core_flops(4096) == 176_160_768
    assert arch.attention_core_flops(4096) / mha.attention_core_flops(4096) == pytest.approx(2.857, abs=1e-3)
    # active parameters: the DeepSeek-V3 report's 37B
    assert arch.active_params == pytest.approx(37.5e9, rel=0.02)


def test_mtp_layer_on_the_last_stage():
    """One MTP module (DeepSeek-V3 §2.2): the last stage pays an extra MoE layer, the 2h x h projection
    and the shared head again, per micro-batch; the FLOPs per token add 6 · 2 · 7168² + the layer + the
    head (6 · 129,280 · 7168)."""
    spec, c = physics.dsv3()
    with_mtp = physics.spec({**physics.DSV3, "num_mtp_layers": 1}, 2048, seq=4096, gbs=15360, precision="fp8")
    base, mtp = physics.costs(spec, c), physics.costs(with_mtp, c)
    assert mtp.first_extra_time_s == base.first_extra_time_s
    extra = mtp.last_extra_time_s - base.last_extra_time_s
    head = base.last_extra_compute_s
    assert extra > base.moe.time_s + head  # the layer, the projection and the head again
    assert extra < base.moe.time_s + 1.2 * head + 0.05 * base.moe.time_s
    arch = Architecture(with_mtp.model)
    per_token = 6 * 2 * 7168 ** 2 + arch.moe_layer_dense_linear_flops + arch.moe_layer_expert_flops \
        + arch.attention_core_flops(4096) + 6 * 129_280 * 7168
    assert arch.mtp_flops(4096) == pytest.approx(per_token)
    assert mtp.last_extra_flops - base.last_extra_flops == pytest.approx(4096 * per_token)
    assert mtp.last_extra_bytes > base.last_extra_bytes + base.moe.states_bytes


def test_sliding_window_attention_flops_by_hand():
    """Window 128 at s = 4096: query i sees min(i, 128) keys, mean (128·129/2 + (4096 - 128)·128) / 4096 =
    (8256 + 507,904) / 4096 = 126.015625 (Megatron-Bridge 067f987d training/utils/flop_utils.py:762-763 counts
    128 - 128·127/(2·4096), the same). Layers 1, 3, ..., 35 are windowed (layer % 2 != 0): 18 of 36. Per token
    fwd+bwd, width 6 · (4096 + 4096) = 49,152: full causal 49,152 · 2048 = 100,663,296; windowed 49,152 ·
    126.015625 = 6,193,920; the mean over the layers 53,428,608."""
    arch = Architecture(ModelSpec.model_validate(physics.GPT_OSS))
    assert Architecture.window_keys_per_query(4096, 128) == 126.015625
    assert arch.windowed_layer_fraction == 0.5
    assert arch.attention_core_flops(4096) == 53_428_608
    full = Architecture(ModelSpec.model_validate({**physics.GPT_OSS, "attention": None}))
    assert full.attention_core_flops(4096) == 100_663_296
    # unfused attention computes every score whatever the mask: no saving
    assert arch.attention_core_flops(4096, full_scores=True) == full.attention_core_flops(4096, full_scores=True) \
        == 49_152 * 4096
    # the whole model: 18 layers save 100,663,296 - 6,193,920 = 94,469,376 FLOPs per token each
    saved = full.model_flops_per_token(4096) - arch.model_flops_per_token(4096)
    assert saved == 18 * 94_469_376


@pytest.mark.parametrize("window, every, fraction", [(4096, None, 1.0), (8192, 2, 0.5), (128, 4, 27 / 36),
                                                     (128, 37, 1.0), (1, 1, 0.0)])
def test_window_pattern_and_a_window_past_the_sequence(window, every, fraction):
    """A window of at least s is plain causal attention ((s + 1)/2 keys, capped at s·causal_fraction = s/2: no
    change); window_attn_skip_freq N windows the layers l with l % N != 0 (N = 4: 27 of 36; N = 1: none; N past
    the layer count: all)."""
    arch = Architecture(ModelSpec.model_validate({**physics.GPT_OSS, "attention": dict(sliding_window=window,
                                                                                 full_attention_every=every)}))
    assert arch.windowed_layer_fraction == pytest.approx(fraction)
    full = Architecture(ModelSpec.model_validate({**physics.GPT_OSS, "attention": None}))
    if window >= 4096 or fraction == 0.0:
        assert arch.attention_core_flops(4096) == full.attention_core_flops(4096)
    else:
        assert arch.attention_core_flops(4096) < full.attention_core_flops(4096)
