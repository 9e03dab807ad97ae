"""Model input from a Hugging Face config.json and from the preset catalog (library/huggingface.py).

The config.json files in tests/data/hf are the published ones (Hugging Face hub, the repositories named
below), trimmed of nothing the mapping reads. The published parameter totals are the checkpoints' own
counts: ``metadata.total_size`` of each repository's ``model.safetensors.index.json`` divided by the bytes
per parameter (2 for bf16), as quoted on the model cards, and for GPT-NeoX-20B Table 1 of Black et al. 2022
("GPT-NeoX-20B", arXiv 2204.06745: 20,554,567,680). They are quoted, not fetched here; for the Llama,
Mistral and Mixtral rows the closed-form count of costmodel/compute/architecture.py reproduces them with no term
left out, for the others the named terms the cost model does not count (:func:`omitted_parameters`:
biases, QK norms, Gemma-2's extra norms) make up the difference exactly.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from parplan.client.cli import app
from parplan.library.huggingface import load_presets, model_from_hf_config, omitted_parameters
from parplan.library.spec_io import SpecError, parse_spec
from parplan.costmodel.compute.architecture import Architecture
from parplan.costmodel.spec.spec import ModelSpec

HF = Path(__file__).parents[1] / "data" / "hf"
ROOT = Path(__file__).parents[2]

# file: (repository, published total parameters, dimensions the spec must hold)
PUBLISHED = {
    "llama-3-8b": ("meta-llama/Meta-Llama-3-8B", 8_030_261_248,
                   dict(num_layers=32, hidden_size=4096, ffn_hidden_size=14336, num_attention_heads=32, num_kv_heads=8,
                        vocab_size=128256, gated_mlp=True, tie_embeddings=False)),
    "llama-3-70b": ("meta-llama/Meta-Llama-3-70B", 70_553_706_496,
                    dict(num_layers=80, hidden_size=8192, ffn_hidden_size=28672, num_attention_heads=64, num_kv_heads=8,
                         vocab_size=128256)),
    "llama-3.1-405b": ("meta-llama/Llama-3.1-405B", 405_853_388_800,
                       dict(num_layers=126, hidden_size=16384, ffn_hidden_size=53248, num_attention_heads=128,
                            num_kv_heads=8, vocab_size=128256)),
    "mistral-7b-v0.1": ("mistralai/Mistral-7B-v0.1", 7_241_732_096,
                        dict(num_layers=32, hidden_size=4096, ffn_hidden_size=14336, num_kv_heads=8, vocab_size=32000)),
    "mixtral-8x7b-v0.1": ("mistralai/Mixtral-8x7B-v0.1", 46_702_792_704,
                          dict(num_layers=32, hidden_size=4096, num_kv_heads=8, vocab_size=32000,
                               moe=dict(num_experts=8, top_k=2, expert_ffn_hidden_size=14336))),
    "qwen2.5-72b": ("Qwen/Qwen2.5-72B", 72_706_203_648,
                    dict(num_layers=80, hidden_size=8192, ffn_hidden_size=29568, num_attention_heads=64, num_kv_heads=8,
                         vocab_size=152064, tie_embeddings=False)),
    "qwen3-30b-a3b": ("Qwen/Qwen3-30B-A3B", 30_532_122_624,
                      dict(num_layers=48, hidden_size=2048, num_attention_heads=32, num_kv_heads=4, head_dim=128,
                           vocab_size=151936, moe=dict(num_experts=128, top_k=8, expert_ffn_hidden_size=768))),
    "gpt-neox-20b": ("EleutherAI/gpt-neox-20b", 20_554_567_680,
                     dict(num_layers=44, hidden_size=6144, ffn_hidden_size=24576, num_attention_heads=64,
                          vocab_size=50432, gated_mlp=False, tie_embeddings=False)),
    # published as 116.83B (the gpt-oss model card, arXiv 2508.10925 Table 1: the checkpoint is MXFP4, so no bf16
    # total_size): compared to that rounding in test_gpt_oss_maps_moe_clamp_and_biases, not exactly here
    "gemma-2-9b": ("google/gemma-2-9b", 9_241_705_984,
                   dict(num_layers=42, hidden_size=3584, ffn_hidden_size=14336, num_attention_heads=16, num_kv_heads=8,
                        head_dim=256, vocab_size=256000, tie_embeddings=True)),
}


def _model(name: str) -> tuple[dict, ModelSpec, list[str]]:
    cfg = json.loads((HF / f"{name}.json").read_text())
    mapped = model_from_hf_config(cfg)
    return cfg, ModelSpec.model_validate(mapped.fields), mapped.warnings


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_dimensions_and_parameter_count_match_the_published_model(name):
    _, total, dims = PUBLISHED[name]
    cfg, model, warnings = _model(name)
    for key, value in dims.items():
        got = getattr(model, key)
        if isinstance(value, dict):
            for k, v in value.items():
                assert getattr(got, k) == v, (name, key, k)
        else:
            assert got == value, (name, key)
    omitted = omitted_parameters(cfg)
    assert Architecture(model).total_params + sum(omitted.values()) == total
    assert bool(omitted) == any("does not count" in w for w in warnings)


def test_llama_mistral_mixtral_need_no_correction_term():
    for name in ("llama-3-8b", "llama-3-70b", "llama-3.1-405b", "mistral-7b-v0.1", "mixtral-8x7b-v0.1"):
        cfg, model, _ = _model(name)
        assert omitted_parameters(cfg) == {} and Architecture(model).total_params == PUBLISHED[name][1]


def test_deepseek_v3_maps_moe_and_reports_mla_and_mtp():
    cfg, model, warnings = _model("deepseek-v3")
    assert (model.num_layers, model.hidden_size, model.ffn_hidden_size, model.num_attention_heads,
            model.vocab_size) == (61, 7168, 18432, 128, 129280)
    assert model.moe.model_dump() == dict(num_experts=256, top_k=8, expert_ffn_hidden_size=2048, num_shared_experts=1,
                                          shared_expert_ffn_hidden_size=None, first_dense_layers=3,
                                          max_nodes_per_token=None,  # n_group/topk_group are groups, not nodes
                                          # config.json names no dispatcher or capacity: the defaults
                                          dispatcher="alltoall", dispatcher_backend="deepep", capacity_factor=None,
                                          dispatcher_sms=None, activation_clamp=None, expert_bias=False)
    for field in ("mla", "num_mtp_layers"):
        if field in ModelSpec.model_fields:  # once costmodel/spec/spec.py has the field, the mapping fills it
            assert getattr(model, field)
        else:
            assert any(w.startswith(f"model.{field}:") for w in warnings)


def test_gpt_oss_maps_moe_clamp_and_biases():
    """openai/gpt-oss-120b's config.json: 128 experts top-4 of width 2880 on every layer (was read as a dense model
    before ``gpt_oss`` was an MoE type), the experts' clamp (``swiglu_limit`` 7.0) and biases, the window and sinks;
    the counted parameters plus the omitted biases and sinks are the model card's 116.83B total."""
    cfg, model, warnings = _model("gpt-oss-120b")
    assert (model.num_layers, model.hidden_size, model.num_attention_heads, model.num_kv_heads, model.head_dim,
            model.vocab_size) == (36, 2880, 64, 8, 64, 201088)
    assert (model.moe.num_experts, model.moe.top_k, model.moe.expert_ffn_hidden_size, model.moe.first_dense_layers,
            model.moe.activation_clamp, model.moe.expert_bias) == (128, 4, 2880, 0, 7.0, True)
    assert model.attention.model_dump() == dict(sliding_window=128, full_attention_every=2, sinks=True)
    omitted = omitted_parameters(cfg)
    assert omitted["expert_biases"] == 36 * 128 * (2 * 2880 + 2880) and omitted["attention_sinks"] == 36 * 64
    assert round((Architecture(model).total_params + sum(omitted.values())) / 1e9, 2) == 116.83
    assert not any("not one of the mapped families" in w for w in warnings)
    preset = ModelSpec.model_validate(load_presets()["gpt-oss-120b"]["model"])
    assert preset.model_dump(exclude={"name"}) == model.model_dump(exclude={"name"})


def test_presets_cover_every_architecture_of_the_published_runs():
    rows = yaml.safe_load((ROOT / "benchmarks" / "data" / "published-runs.yaml").read_text())
    presets = [ModelSpec.model_validate(p["model"]) for p in load_presets().values()]
    uncovered = []
    for row in rows:
        if row.get("num_layers") is None:  # the Nemotron-8B rows give no shape
            continue
        stated = {k: row[k] for k in ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads")
                  if row[k] is not None}  # null: the source does not say
        matches = [p for p in presets if all(getattr(p, k) == v for k, v in stated.items())
                   and (row["num_kv_heads"] is None or p.kv_heads == row["num_kv_heads"])]
        if not matches:
            uncovered.append(row["id"])
    assert uncovered == []
    assert all(entry.get("source") for entry in load_presets().values())


def test_preset_and_hf_config_in_a_spec(tmp_path):
    spec = parse_spec("model: {preset: llama3-70b, name: mine}\ntraining: {seq_len: 8192, global_batch_size: 512}\n"
                      "cluster: {gpu: H100-SXM-80GB, num_gpus: 64}\n")
    assert spec.model.name == "mine" and spec.model.num_layers == 80
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "config.json").write_text((HF / "qwen3-30b-a3b.json").read_text())
    path = tmp_path / "spec.yaml"
    path.write_text("model: {hf_config: cfg/config.json, vocab_size: 152064}\n"
                    "training: {seq_len: 4096, global_batch_size: 256}\ncluster: {gpu: H100-SXM-80GB, num_gpus: 64}\n")
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 0 and "ok" in result.stdout
    assert "qk_norm 12,288" in result.stderr  # what the cost model leaves out is said, not hidden


@pytest.mark.parametrize("model,message", [
    ("{preset: lama3-70b}", "model.preset: unknown preset 'lama3-70b'; did you mean 'llama3-70b'"),
    ("{hf_config: missing/config.json}", "model.hf_config: file not found"),
    ("{hf_config: x.json, preset: llama3-8b}", "model: give hf_config or preset, not both"),
    ("{preset: [llama3-8b]}", "model.preset: must be a preset name"),  # not a TypeError of the preset cache
])
def test_bad_model_sources_are_field_path_errors(model, message):
    text = f"model: {model}\ntraining: {{seq_len: 8192, global_batch_size: 512}}\ncluster: {{gpu: H100-SXM-80GB, num_gpus: 64}}\n"
    with pytest.raises(SpecError, match=message.replace("(", r"\(").replace("'", "'")):
        parse_spec(text)


def test_cli_hf_config_to_megatron_command_line(tmp_path):
    """docs/exports.md's one command: a config.json and a training/cluster spec to Megatron-LM arguments."""
    train = tmp_path / "train.yaml"
    train.write_text("training: {seq_len: 8192, global_batch_size: 512}\ncluster: {gpu: H100-SXM-80GB, num_gpus: 64}\n")
    result = CliRunner().invoke(app, ["optimize", str(train), "--hf-config", str(HF / "llama-3-70b.json"),
                                      "--export", "megatron", "--deterministic", "--time-limit", "20"])
    assert result.exit_code == 0, result.output
    assert "--num-layers 80" in result.stdout and "--tensor-model-parallel-size" in result.stdout
    bad = CliRunner().invoke(app, ["optimize", str(train), "--hf-config", str(tmp_path / "nope.json")])
    assert bad.exit_code == 2 and "model.hf_config: file not found" in bad.stderr


def test_a_config_without_required_fields_is_an_error():
    with pytest.raises(ValueError, match="missing field 'num_hidden_layers'"):
        model_from_hf_config({"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32, "vocab_size": 10})


def test_gpt_neox_attention_biases_counted_once():
    """Issue 24.7: a GPT-NeoX config.json written by a recent transformers carries ``attention_bias: true``
    (GPTNeoXConfig's default); its attention biases were reported twice (as attention_bias and in linear_biases).
    The total stays the published 20,554,567,680 with or without the key; with it false they are absent."""
    cfg, model, _ = _model("gpt-neox-20b")
    total = PUBLISHED["gpt-neox-20b"][1]
    for extra in ({}, {"attention_bias": True}):
        omitted = omitted_parameters({**cfg, **extra})
        assert "attention_bias" not in omitted
        assert Architecture(model).total_params + sum(omitted.values()) == total
    h, L = cfg["hidden_size"], cfg["num_hidden_layers"]
    without = omitted_parameters({**cfg, "attention_bias": False})
    assert sum(omitted_parameters(cfg).values()) - sum(without.values()) == L * 4 * h


@pytest.mark.parametrize("types, expected", [
    # GPT-OSS (openai/gpt-oss-120b config.json): sliding, full, sliding, ... over 36 layers
    (["sliding_attention", "full_attention"] * 18, dict(sliding_window=128, full_attention_every=2, sinks=True)),
    # Gemma-3's 5:1 pattern: every sixth layer full
    ((["sliding_attention"] * 5 + ["full_attention"]) * 6, dict(sliding_window=128, full_attention_every=6, sinks=True)),
    (["sliding_attention"] * 36, dict(sliding_window=128, full_attention_every=None, sinks=True)),
    # a pattern Megatron's window_attn_skip_freq integer cannot state: left full (sinks still mapped)
    (["full_attention", "sliding_attention"] * 18, dict(sliding_window=None, full_attention_every=None, sinks=True)),
])
def test_layer_types_map_to_model_attention(types, expected):
    cfg = dict(model_type="gpt_oss", num_hidden_layers=36, hidden_size=2880, intermediate_size=2880,
               num_attention_heads=64, num_key_value_heads=8, head_dim=64, vocab_size=201088, num_local_experts=128,
               num_experts_per_tok=4, sliding_window=128, layer_types=types)
    model = ModelSpec.model_validate(model_from_hf_config(cfg).fields)
    assert model.attention.model_dump() == expected


def test_configs_without_layer_types_keep_full_attention():
    """Mistral-7B v0.1 and Gemma-2 state a sliding_window but no layer_types; Qwen2.5 turns it off: all stay full."""
    for name in ("mistral-7b-v0.1", "gemma-2-9b", "qwen2.5-72b", "qwen3-30b-a3b"):
        _, model, _ = _model(name)
        assert model.attention is None, name


# ------------------------------------- issue 36, finding 3: every field read is type- and range-checked first

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from parplan.library.hf_fields import RULES, HFFieldError, parse_json_int  # noqa: E402
from parplan.costmodel.errors import ParplanError  # noqa: E402

FAMILIES = sorted(HF.glob("*.json"))
BAD_VALUES = {"int": ["80", 80.0, True, 0 - 1, 10**40, None], "float": [float("inf"), float("nan"), "1", -1.0, False],
              "bool": [1, "true"], "str": [1, "x" * 10_000], "int_list": [3, [True], ["0"], [-1]],
              "str_list": ["sliding_attention", [1]]}


def _bad_cases():
    for key, (kind, lo, hi) in sorted(RULES.items()):
        for value in BAD_VALUES[kind]:
            if value is None or (kind == "int" and isinstance(value, int) and not isinstance(value, bool)
                                 and lo <= value <= hi):
                continue
            yield key, value
        if kind == "int" and lo > 0:
            yield key, 0


@pytest.mark.parametrize("key,value", list(_bad_cases()), ids=lambda v: repr(v)[:20])
def test_each_bad_field_is_refused_naming_it(key, value):
    cfg = json.loads((HF / "llama-3-70b.json").read_text())
    cfg[key] = value
    with pytest.raises(HFFieldError) as err:
        model_from_hf_config(cfg, where="spec.model.hf_config_json")
    assert err.value.field_path in (f"spec.model.hf_config_json.{key}", f"spec.model.hf_config_json.{key}[0]")
    assert str(err.value).startswith(f"{err.value.field_path}: ")


def test_a_number_of_thousands_of_digits_names_its_field():
    text = (HF / "llama-3-70b.json").read_text().replace('"num_hidden_layers": 80', '"num_hidden_layers": ' + "7" * 5000)
    assert "7" * 5000 in text
    with pytest.raises(HFFieldError, match="5000 digits") as err:
        model_from_hf_config(json.loads(text, parse_int=parse_json_int))
    assert err.value.field_path == "model.hf_config.num_hidden_layers"


JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner,
                                                                                        max_size=4), max_leaves=8)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(family=st.sampled_from(FAMILIES), changes=st.dictionaries(st.sampled_from(sorted(RULES) + ["text_config"]),
                                                                 JSON_VALUES, min_size=1, max_size=4))
def test_random_field_values_give_a_mapping_or_a_parplan_error(family, changes):
    cfg = {**json.loads(family.read_text()), **changes}
    try:
        mapped = model_from_hf_config(cfg)
    except ParplanError as err:
        assert str(err).startswith("model.hf_config")
    else:
        assert mapped.fields["num_layers"] >= 1
        omitted_parameters(cfg)
