"""GPU names as people write them, and the published-runs mapping's general rules on synthetic rows."""

from __future__ import annotations

import copy

import pytest
from pydantic import ValidationError

from benchmarks import runs
from parplan.costmodel.spec.hardware import UnknownGPU, lookup_gpu, resolve_gpu_name
from parplan.costmodel.spec.spec import ClusterSpec


@pytest.mark.parametrize("name, catalog", [
    ("H200", "H200-SXM-141GB"), ("B200 (DGX-B200)", "B200"), ("H100 SXM5 80GB", "H100-SXM-80GB"),
    ("H100 (DGX-H100)", "H100-SXM-80GB"), ("GB200 (NVL72)", "GB200-NVL72"), ("A100-SXM4-80GB", "A100-SXM-80GB"),
    ("A100 40GB", "A100-SXM-40GB"), ("NVIDIA H200 141GB", "H200-SXM-141GB"), ("H800 (80GB)", "H800"),
    ("MI300X", "MI300X"),
])
def test_aliases_and_partial_names(name, catalog):
    assert lookup_gpu(name).name == catalog
    ClusterSpec(gpu=name, num_gpus=8)  # the spec accepts it too


def test_unknown_gpus_list_near_names():
    with pytest.raises(UnknownGPU, match=r"near: .*B200"):
        lookup_gpu("B300")
    with pytest.raises(UnknownGPU, match="PCIe parts are not in the catalog"):
        lookup_gpu("H100 PCIe")
    with pytest.raises(UnknownGPU, match="has 80 GB, not 96 GB"):
        lookup_gpu("H100 96GB")
    assert resolve_gpu_name("H100 96GB HBM2e (500W)") == ("H100-SXM-80GB", 96.0)  # the mapping overrides memory
    with pytest.raises(ValidationError, match="near"):
        ClusterSpec(gpu="V100", num_gpus=8)


BASE = {
    "id": "synthetic", "framework": "Megatron-Core", "model": "GPT test", "num_layers": 24, "hidden_size": 2048,
    "num_attention_heads": 16, "vocab_size": 50304, "seq_len": 2048, "gpu": "H100 SXM5 80GB", "num_gpus": 64,
    "global_batch_size": 256, "micro_batch_size": 1, "tp": 2, "pp": 4, "tokens_per_sec_per_gpu": 1000.0,
}


def _row(**kw):
    row = copy.deepcopy(BASE)
    for k, v in kw.items():
        if v is None:
            row.pop(k, None)
        else:
            row[k] = v
    return row


def test_defaults_are_recorded():
    ex = runs.express(_row())
    assert ex.ok, ex.reason
    assert ex.spec.model.ffn_hidden_size == 4 * 2048 and "ffn_hidden_size" in ex.assumed  # 4h for GPT-style
    assert ex.spec.cluster.gpu == "H100-SXM-80GB"
    assert runs.express(_row(vocab_size=None, tp=1)).spec.model.vocab_size == 50304  # GPT-2 BPE padded to 128·TP
    assert runs.express(_row(vocab_size=None)).spec.model.vocab_size == 50432


def test_tp_pp_from_the_model_parallel_size():
    ex = runs.express(_row(tp=None, pp=None, model_parallel_size=32, gpus_per_node=8))
    assert (ex.plan.tp, ex.plan.pp) == (8, 4) and "Takeaway" in ex.assumed["tp"]
    assert not runs.express(_row(tp=None, pp=None)).ok  # nothing published: refused with the reason


def test_moe_without_dense_ffn():
    ex = runs.express(_row(model="Qwen3 test", num_experts=8, moe_top_k=2, expert_ffn_hidden_size=768,
                           moe_dense_layers=0, ep=4, num_kv_heads=4, head_dim=128))
    assert ex.ok, ex.reason
    assert ex.spec.model.moe.first_dense_layers == 0 and "no dense FFN" in ex.assumed["ffn_hidden_size"]
    assert ex.spec.model.head_dim == 128 and ex.spec.model.gated_mlp


@pytest.mark.parametrize("text, stage", [
    ("Megatron-FSDP (optim_grads_params)", 3), ("FSDP over 64 GPUs", 3), ("Megatron-FSDP optim_grads", 2),
    ("distributed optimizer (ZeRO-1)", 1), ("none (DDP)", 0),
])
def test_sharding_words(text, stage):
    assert runs.express(_row(zero_or_sharding=text, pp=1)).plan.zero_stage == stage


def test_stage_layouts_in_words_and_strings():
    ex = runs.express(_row(num_layers=30, pp=4, vpp=2, first_stage_layers="one layer fewer (embedding)",
                           last_stage_layers="one transformer layer fewer"))
    assert [sum(c) for c in ex.plan.pipeline_layout] == [7, 8, 8, 7] and ex.plan.schedule == "interleaved"
    ex = runs.express(_row(num_layers=30, pp=4, vpp=2,
                           first_stage_layers="embedding counted as a layer (account_for_embedding_in_pipeline_split)",
                           last_stage_layers="loss counted as a layer"))
    assert [sum(c) for c in ex.plan.pipeline_layout] == [7, 8, 8, 7]
    ex = runs.express(_row(num_layers=6, pp=2, vpp=2, first_stage_layers="E + 1 layer (layout Et|tt|tt|tL)"))
    assert ex.plan.pipeline_layout == [[1, 2], [2, 1]] and ex.plan.vpp == 2
    ex = runs.express(_row(num_layers=7, pp=2, pipeline_layout="Et|tt|ttt|tL"))
    assert ex.plan.pipeline_layout == [[1, 3], [2, 1]]
    bad = runs.express(_row(first_stage_layers="the first few"))
    assert not bad.ok and "words" in bad.reason
    assert not runs.express(_row(num_layers=7, pp=2, pipeline_layout="Et|tt|tL")).ok  # 3 stages, pp 2


def test_mapping_facts_fill_unpublished_fields():
    ex = runs.express(_row(num_attention_heads=None,
                           mapping_facts={"num_attention_heads": {"value": 32, "why": "the model card"}}))
    assert ex.spec.model.num_attention_heads == 32 and ex.assumed["num_attention_heads"] == "32 (the model card)"


def test_nvl72_jobs_that_do_not_fill_racks():
    ex = runs.express(_row(gpu="GB200 (NVL72)", num_gpus=256, gpus_per_node=None, global_batch_size=512))
    assert ex.spec.cluster.gpus_per_node == 4 and ex.spec.cluster.nvlink_domain_size == 64
    assert runs.express(_row(gpu="GB200 (NVL72)", num_gpus=144,
                                                                      global_batch_size=288)).spec.cluster.nvlink_domain_size is None


def test_unknown_gpu_row_names_near_parts():
    ex = runs.express(_row(gpu="B300 (HGX)"))  # Blackwell Ultra's HGX part: not in the catalog
    assert not ex.ok and "near: " in ex.reason and "B200" in ex.reason


def test_gb300_is_a_catalog_part_with_the_gb200_rates_and_its_own_memory():
    # verda.com/blog/gb300-nvl72-architecture (per-GPU, without sparsity): FP8 5 PF, BF16 2.5 PF, 8 TB/s, as GB200
    # NVL72's 720 / 360 PF sparse for 72 GPUs; 288 GB HBM3e (12-high stacks) against the GB200's 186 GB
    gb300, gb200 = lookup_gpu("GB300 (NVL72)"), lookup_gpu("GB200")
    assert gb300.name == "GB300-NVL72" and gb300.generation == gb200.generation == "blackwell"
    assert (gb300.peak_bf16_tflops, gb300.peak_fp8_tflops) == (2500.0, 5000.0)
    assert gb300.nvlink_domain_size == 72 and gb300.memory_gb_nominal == 288
    assert gb300.memory_gib == pytest.approx(288e9 / 2**30, abs=0.05)  # the nominal bytes: a lower bound
    assert gb300.board_power_w == 1400.0
    ex = runs.express(_row(gpu="GB300 (NVL72)", num_gpus=256, gpus_per_node=None, global_batch_size=512))
    assert ex.ok and ex.spec.cluster.gpu == "GB300-NVL72" and ex.spec.cluster.gpus_per_node == 4


def test_heldout_rows_are_apart_and_mostly_expressed():
    held = runs.load_runs(runs.HELDOUT_DATA)
    fitted = {r["id"] for r in runs.load_runs()}
    assert not fitted & {r["id"] for r in held}  # the fit reads load_runs(), never the held-out file
    done = [r for r in held if runs.express(r).ok]
    assert len(done) >= 0.8 * len(held) and len(held) >= 15


def test_profile_family_per_row():
    assert runs.profile_family(_row(framework="torchtitan (2024-12)")) == "torchtitan"
    assert runs.profile_family(_row(framework="Megatron-Bridge (NeMo 26.06)")) == "megatron-bridge"
    assert runs.profile_family(_row(zero_or_sharding="ZeRO-3 (DeepSpeed)")) == "deepspeed"
    assert runs.profile_family(_row(framework="LLM Foundry")) == "llm-foundry"  # FSDP only (frameworks/profiles.py)
    assert runs.profile_family(_row(framework="HAI-LLM (DeepSeek internal)")) is None
