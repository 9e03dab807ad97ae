"""DeepSeek-V3 as users meet it (issue 19 item 7): the preset and the example carry MLA, MTP (and the example FP8,
node-limited routing and the flex dispatcher), and DeepSeek-V3's published plan (TP1 PP16 EP64 DP128, DualPipe,
FP8, selective recompute; report §3.2-3.3) fits from its config.json with default knobs, because an MLA model's
'selective' is DeepSeek's / Megatron-Core's MLA recompute (--recompute-modules mla_up_proj layernorm moe_act)."""

from __future__ import annotations

from pathlib import Path

import yaml

from parplan.library.huggingface import model_from_hf_config, preset_model, read_hf_config
from parplan.costmodel.compute.architecture import Architecture
from parplan.costmodel.evaluation.evaluate import evaluate
from parplan.costmodel.spec.spec import ModelSpec, PlanSpec, Spec
from parplan.frameworks.loader import validate_spec

ROOT = Path(__file__).resolve().parents[2]
PUBLISHED = dict(tp=1, pp=16, ep=64, micro_batch_size=1, schedule="dualpipe", recompute="selective", zero_stage=1,
                 stage_layers=[3] + [4] * 14 + [2])  # the last stage also holds the head and the MTP module


def _hf_spec(**assumptions) -> Spec:
    hf = model_from_hf_config(read_hf_config(str(ROOT / "tests" / "data" / "hf" / "deepseek-v3.json"))).fields
    return validate_spec(dict(model=hf, training=dict(seq_len=4096, global_batch_size=15360, precision="fp8"),
                                    cluster=dict(gpu="H800", num_gpus=2048, gpus_per_node=8), framework="any",
                                    assumptions=assumptions))


def test_preset_and_example_have_mla_and_mtp():
    preset = ModelSpec.model_validate(preset_model("deepseek-v3"))
    assert preset.mla is not None and preset.num_mtp_layers == 1 and preset.moe.max_nodes_per_token == 4
    example = validate_spec(yaml.safe_load((ROOT / "examples" / "deepseek-v3-2048xh800.yaml").read_text()))
    assert example.model.mla == preset.mla and example.model.num_mtp_layers == 1
    assert example.training.precision == "fp8" and example.model.moe.dispatcher == "flex"
    # MLA's attention core against the old 128-head width-56 MHA approximation: 2.857 x the FLOPs (issue 19)
    mha = Architecture(preset.model_copy(update={"mla": None}))
    assert Architecture(preset).attention_core_flops(4096) / mha.attention_core_flops(4096) > 2.8


def test_published_plan_fits_from_config_json_with_default_knobs():
    """Default knobs: peak 68.6 GiB of H800's 73.7 usable; with Megatron-Core's default core_attn selective
    (policy 'attention', a no-op under FlashAttention) the MoE ranks need about 121 GiB and it does not fit."""
    ev = evaluate(_hf_spec(), PlanSpec(**PUBLISHED))
    assert ev.metrics.fits and ev.violations == []
    assert 60 < ev.metrics.peak_memory_gib < ev.metrics.usable_memory_gib
    core_attn = evaluate(_hf_spec(selective_recompute_policy="attention"), PlanSpec(**PUBLISHED))
    assert not core_attn.metrics.fits and core_attn.metrics.peak_memory_gib > 110
