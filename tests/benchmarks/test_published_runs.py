"""Smoke test of benchmarks/published_runs.py: every published run through the cost model, in seconds.

Bounds: at least 80 of the 93 rows are expressible, every unexpressible row says why, and no row is off by
more than 2x except the ones listed with a diagnosis in ``benchmarks.runs.KNOWN_OUT_OF_BAND`` (a listed
row that comes back inside 2x must be removed from that list). The median error stated in
benchmarks/README.md must match what the model gives now.
"""

from __future__ import annotations

import io
import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import published_runs, runs  # noqa: E402
from parplan.frameworks.layout import torchtitan_split_points  # noqa: E402


@pytest.fixture(scope="module")
def rows():
    return runs.load_runs()


@pytest.fixture(scope="module")
def results(rows):
    return runs.compare_all(rows)


@pytest.fixture(scope="module")
def summary(results):
    return runs.summarize(results)


def _by_id(results):
    return {r["id"]: r for r in results}


def test_repo_copy_of_the_data_is_used_and_complete(rows):
    assert runs.default_data_path() == runs.REPO_DATA
    assert len(rows) == 93
    assert len({r["id"] for r in rows}) == len(rows)


def test_at_least_80_rows_expressed(summary):
    assert summary["expressed"] >= 80, summary["not_expressed"]


def test_every_unexpressed_row_has_a_reason(results):
    for r in results:
        if not r["expressed"]:
            assert r["reason"], r["id"]


def test_no_row_off_by_more_than_2x_except_the_diagnosed_ones(results):
    off = {r["id"] for r in results if r["expressed"] and not 0.5 <= r["ratio"] <= 2.0}
    new = off - set(runs.KNOWN_OUT_OF_BAND)
    assert not new, f"rows off by more than 2x without a diagnosis: {sorted(new)}"
    back = set(runs.KNOWN_OUT_OF_BAND) - off
    assert not back, f"now within 2x, remove from KNOWN_OUT_OF_BAND: {sorted(back)}"
    assert set(runs.KNOWN_OUT_OF_BAND.values()) <= set(runs.OUT_OF_BAND_CAUSES)


def test_expressed_rows_evaluate_without_legality_violations(results):
    bad = {r["id"]: r["legality_violations"] for r in results if r["expressed"] and r["legality_violations"]}
    assert not bad


def test_row_to_spec_api(rows):
    by_id = {r["id"]: r for r in rows}
    spec, plan = runs.row_to_spec(by_id["korthikanti2022-175b-sp-selective"])
    assert (plan.tp, plan.pp, plan.vpp, plan.schedule) == (8, 8, 3, "interleaved")
    assert plan.recompute == "selective" and plan.sequence_parallel
    assert spec.cluster.gpu == "A100-SXM-80GB" and spec.training.precision == "bf16"
    assert spec.model.ffn_hidden_size == 4 * 12288 and not spec.model.gated_mlp
    assert runs.row_to_spec(by_id["mcore-readme2024-h100-gpt3-177b-strong-96gpu"]) is None
    assert "TP/PP" in runs.unexpressible_reason(by_id["mcore-readme2024-h100-gpt3-177b-strong-96gpu"])


def test_mapping_details(rows):
    by_id = {r["id"]: r for r in rows}
    # torchtitan's 96 GB parts: H100 compute, memory overridden, FSDP2 -> ZeRO-3, float8 linears -> fp8
    ex = runs.express(by_id["torchtitan-202412-t2-llama3-8b-8gpu-4"])
    assert ex.spec.cluster.gpu == "H100-SXM-80GB"
    assert ex.spec.cluster.memory_gib == pytest.approx(95.58, abs=0.01)
    assert ex.plan.zero_stage == 3 and ex.plan.cp == 2 and ex.plan.recompute == "full"
    assert ex.spec.training.precision == "fp8" and "precision" in ex.assumed
    assert ex.spec.model.gated_mlp and ex.spec.model.num_kv_heads == 8
    # torchtitan@9dec370 CP: the rotate method's default 'allgather', K,V repeated to the query heads before SDPA
    assert ex.plan.cp_comm_type == "allgather" and ex.overrides["cp_kv_heads_repeated"] is True
    ex = runs.express(by_id["torchtitan-202412-t1-llama3-8b-8gpu-0"])  # no CP: neither is set
    assert ex.plan.cp_comm_type == "p2p" and "cp_kv_heads_repeated" not in ex.overrides
    # PyTorch FSDP's ZeRO-3 (torchtitan, LLM Foundry) keeps only the fp32 shard; torchtitan's ZeRO-2-like PP rows
    # keep the unsharded bf16 weights and get no such override
    assert ex.overrides["zero3_resident_weight_bytes"] == 0.0
    assert runs.express(by_id["llmfoundry-mpt-30b-a100_80gb-8gpu-seq2048"]).overrides["zero3_resident_weight_bytes"] == 0.0
    assert "zero3_resident_weight_bytes" not in runs.express(by_id["torchtitan-202412-t6-llama31-405b-512gpu-14"]).overrides
    # torchtitan PP: micro-batches default to the pipeline-parallel degree (32 per DP rank / 8 = 4)
    ex = runs.express(by_id["torchtitan-202412-t5-llama31-405b-512gpu-13"])
    assert (ex.plan.schedule, ex.plan.vpp, ex.plan.micro_batch_size) == ("interleaved", 2, 4)
    # no split stated: torchtitan 9dec370's own generate_split_points, 16 stages of 7, 8 x 14, 7 (a framework
    # rule, frameworks/layout.py default_split), not the evaluator's even split
    assert ex.plan.pipeline_layout[0] == [7, 8] and ex.plan.pipeline_layout[-1] == [8, 7]
    assert ex.plan.pipeline_layout == torchtitan_split_points(126, 8, 2).decoder and "pipeline_layout" in ex.assumed
    # DeepSeek-V3: MoE, DualPipe, FP8 on H800, mbs recorded as derived
    ex = runs.express(by_id["deepseek-v3-production-2048xh800"])
    assert ex.spec.model.moe.num_experts == 256 and ex.spec.model.moe.first_dense_layers == 3
    assert ex.plan.schedule == "dualpipe" and ex.plan.ep == 64 and ex.spec.cluster.gpu == "H800"
    assert ex.spec.training.precision == "fp8" and ex.assumed["micro_batch_size"].startswith("1")
    # fp16 rows run at the BF16 peak; Narayanan's Table 1 uses full recompute without ZeRO
    ex = runs.express(by_id["narayanan2021-t1-gpt-145.6b"])
    assert ex.spec.training.precision == "bf16" and ex.plan.zero_stage == 0 and ex.plan.recompute == "full"
    # Nemotron-4 uses a squared-ReLU MLP (ffn = 4h), not SwiGLU
    ex = runs.express(by_id["nemo2407-h100-fp8-nemotron-340b-128gpu"])
    assert not ex.spec.model.gated_mlp
    # the GB200 rows' --pipeline-model-parallel-layout 'Et|(tt|)*30L' (stated in words in the row) is expressed
    ex = runs.express(by_id["mcore-dsv3-gb200-256gpu-final"])
    assert [sum(ch) for ch in ex.plan.pipeline_layout] == [7, 8, 8, 8, 8, 8, 8, 6] and ex.plan.vpp == 4
    assert ex.spec.cluster.nvlink_domain_size == 64  # 256 GPUs: four NVLink domains of 64
    # torchtitan without torch.compile runs its elementwise ops unfused; with it, fused (Table 6's heading states it)
    for i, eager in ((0, True), (1, False), (7, True), (8, False), (14, False)):
        row = next(r for r in rows if r["id"].startswith("torchtitan-202412-t") and r["id"].endswith(f"-{i}"))
        assert runs.express(row).overrides.get("eager_elementwise", False) is eager, row["id"]


def test_moe_recipe_facts_are_mapped():
    """The Megatron-Bridge recipe's MoE settings stated in the held-out rows: the EP all-to-all overlap
    (overlap_moe_expert_parallel_comm) becomes plan.moe_a2a_overlap, the dispatcher the MoE spec's, and
    moe_router_force_load_balancing (uniformly random routing) the moe_load_imbalance knob whose busiest rank at the
    row's EP size is the binomial spread (costmodel/moe/moe_dispatch.py random_routing_busiest_load)."""
    from parplan.costmodel.moe.moe_dispatch import busiest_rank_load, random_routing_busiest_load

    by_id = {r["id"]: r for r in runs.load_runs(runs.HELDOUT_DATA)}
    ex = runs.express(by_id["bridge260401-h100-qwen3-235b-a22b-256gpu-fp8"])
    assert ex.plan.moe_a2a_overlap and ex.spec.model.moe.dispatcher == "alltoall"
    ex = runs.express(by_id["bridge260401-h100-qwen3-30b-a3b-16gpu-fp8"])
    assert not ex.plan.moe_a2a_overlap
    assert (ex.spec.model.moe.dispatcher, ex.spec.model.moe.dispatcher_backend) == ("flex", "hybridep")
    # mbs 1 x 4,096 tokens x top-8 copies per rank, EP 16
    assert busiest_rank_load(16, ex.overrides["moe_load_imbalance"], 8) == pytest.approx(
        random_routing_busiest_load(4096 * 8, 16))
    assert "moe_router_force_load_balancing" in ex.assumed["moe_load_imbalance"]
    # the dispatcher's SMs the recipes set (perf_recipes/_common.py:88-89; qwen/b200/qwen3_moe.py:328-330)
    assert ex.spec.model.moe.dispatcher_sms == 32
    b200 = runs.express(by_id["bridge260401-b200-qwen3-30b-a3b-8gpu-mxfp8"])
    assert b200.plan.moe_a2a_overlap and b200.spec.model.moe.dispatcher_sms == 64
    row = dict(by_id["bridge260401-h100-qwen3-30b-a3b-16gpu-fp8"], moe_router_force_load_balancing=False)
    assert "moe_load_imbalance" not in runs.express(row).overrides


def test_metric_choice(results):
    by_id = _by_id(results)
    assert by_id["korthikanti2022-175b-sp-selective"]["metric"] == "mfu"  # has MFU and HFU: MFU first
    assert by_id["narayanan2021-t1-gpt-1.7b"]["metric"] == "hfu"
    r = by_id["narayanan2021-t2-zero3-174.6b-384gpu"]
    assert r["metric"] == "tflops" and r["tflops_accounting"].startswith("hardware")
    # the row's own accounting: hardware FLOPs (recompute forward, full s x s attention) per second per GPU
    spec, plan = runs.row_to_spec(runs.load_runs()[[x["id"] for x in runs.load_runs()].index(r["id"])])
    from parplan.costmodel.evaluation.evaluate import resolve_plan
    _, f_hw = runs.source_flops_per_step(spec, resolve_plan(spec, plan))
    assert r["predicted"] == pytest.approx(f_hw / (r["step_time_s"] * r["num_gpus"]) / 1e12)
    assert r["published_step_time_s"] == pytest.approx(f_hw / (r["published"] * 1e12 * r["num_gpus"]))
    r = by_id["nemo2407-h100-fp8-llama2-7b-8gpu"]
    assert r["metric"] == "tflops" and r["tflops_accounting"] == "model" and r["peak_tflops"] == 1979.0
    r = by_id["torchtitan-202412-t1-llama3-8b-8gpu-0"]
    assert r["metric"] == "tokens" and r["predicted"] == pytest.approx(r["predicted_tokens_per_gpu"])
    assert r["published_peak_memory_gib"] == 82.4
    for r in results:
        if r["expressed"] and r["metric"] in ("mfu", "hfu"):
            assert r["error_points"] == pytest.approx(r["predicted"] - r["published"])


def test_main_prints_the_table_and_summary(tmp_path):
    buf = io.StringIO()
    out = tmp_path / "rows.json"
    assert published_runs.main(["--json", str(out)], out=buf) == 0
    text = buf.getvalue()
    for needle in ("rows expressed:", "median |error|:", "90th percentile |error|:", "median |MFU/HFU error|:",
                   "worst ratio:", "rows off by more than 2x:", "Not expressible", "do not fit",
                   "korthikanti2022-530b-sp-selective"):
        assert needle in text, needle
    data = json.loads(out.read_text())
    assert len(data["rows"]) == 93 and data["summary"]["expressed"] >= 80


def test_readme_states_the_current_median_error(summary):
    readme = (ROOT / "benchmarks" / "README.md").read_text()
    m = re.search(r"median \|error\|[^0-9]*([0-9.]+) %", readme)
    assert m, "benchmarks/README.md must state the median |error|"
    stated = float(m.group(1))
    assert stated == pytest.approx(summary["median_abs_error_pct"], abs=1.0), (
        f"README says {stated} %, the model now gives {summary['median_abs_error_pct']:.1f} %: rerun "
        "python benchmarks/published_runs.py and update benchmarks/README.md and benchmarks/results/")


def test_torchtitan_publishes_the_allocators_reserved_peak_others_the_ledger(rows):
    # torchtitan's "memory:" log line is device_mem_stats.max_reserved_gib (torchtitan train.py; its
    # DeviceMemoryMonitor reads torch.cuda.memory_stats()["reserved_bytes.all.peak"])
    by_id = {r["id"]: r for r in rows}
    assert runs.published_peak_kind(by_id["torchtitan-202412-t1-llama3-8b-8gpu-0"]) == "reserved"
    assert runs.published_peak_kind(by_id["korthikanti2022-175b-sp-selective"]) == "allocated"


def test_reserved_peak_is_the_tensors_plus_the_allocators_fragmentation(results):
    # worked by hand for torchtitan's Llama 3 8B on 8 H100 96 GB (Table 1, row 0): one stage of 74.06 GiB, of which
    # NCCL's buffers are 0.125 GiB (FSDP's ring communicator: 2 x 4 MiB x 16 channels, allocated by NCCL, not by
    # PyTorch); fragmentation 5 % of the 95.58 GiB part = 4.779 GiB; reserved = 74.06 - 0.125 + 4.779 = 78.72
    r = _by_id(results)["torchtitan-202412-t1-llama3-8b-8gpu-0"]
    assert r["published_peak_kind"] == "reserved"
    tensors = r["predicted_peak_memory_gib"] - 0.125
    assert r["predicted_published_peak_gib"] == pytest.approx(tensors + 0.05 * 95.58, abs=1e-3)
    # a row whose source publishes no peak, or publishes what the ledger counts, is compared on the ledger's peak
    other = _by_id(results)["korthikanti2022-175b-sp-selective"]
    assert other["predicted_published_peak_gib"] == other["predicted_peak_memory_gib"]


def test_torchtitan_peaks_within_bounds(summary):
    # issue 20's target is every peak within 10 % and a median within 5 %; today the median is met and 16 of 18
    # are within 10 % (the 405B 1F1B row and the CP 8 row are 16 % and 13 % low: not explained, see benchmarks/README.md)
    mem = summary["memory_published"]
    assert len(mem) == 18
    assert summary["memory_published_median_abs_error_pct"] <= 5.0
    assert summary["memory_published_within_10pct"] >= 16
