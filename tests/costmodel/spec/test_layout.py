"""Pipeline layouts (costmodel/spec/layout.py, frameworks/layout.py): Megatron's layout strings and splits,
torchtitan's split, per-chunk in-flight memory, and the three published layouts evaluated through
``solver-cli evaluate``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from parplan.client.cli import app
from parplan.costmodel.spec.assumptions import resolve_assumptions
from parplan.costmodel.evaluation.choice import choice_costs
from parplan.costmodel.evaluation.evaluate import PlanError, evaluate
from parplan.costmodel.spec.hardware import resolve_gpu
from parplan.costmodel.spec.layout import chunk_recomputed_layers
from parplan.costmodel.spec.spec import PlanSpec, Spec
from parplan.frameworks.layout import (
    LayoutError,
    expand_megatron_string,
    interleaved_inflight_chunks,
    megatron_split,
    resolve_layout,
    to_megatron_string,
    default_split,
    torchtitan_split,
    torchtitan_split_points,
)
from parplan.frameworks.loader import validate_spec
from parplan.frameworks.profiles import profile

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
BRIDGE_405B = EXAMPLES / "llama31-405b-1024xh100-megatron-bridge-evaluate.yaml"
META_405B = EXAMPLES / "llama31-405b-8192xh100-meta-split-evaluate.yaml"
DSV3_GB200 = EXAMPLES / "deepseek-v3-256xgb200-megatron-layout-evaluate.yaml"
runner = CliRunner()


def test_megatron_docs_example_rank_map():
    """docs/user-guide/features/pipeline_parallel_layout.md: 'Et*3|(tt|)*29,m|L' at PP 16 (so VPP 2):
    rank 0 = E + 3 decoders | 2, ranks 1-13 = 2 | 2, rank 14 = 2 | mtp, rank 15 = 2 | loss."""
    stages = expand_megatron_string("Et*3|(tt|)*29,m|L")
    assert len(stages) == 32 and stages[0] == "Ettt" and stages[30] == "m" and stages[31] == "L"
    lay = resolve_layout("Et*3|(tt|)*29,m|L", pp=16, num_layers=61)
    assert lay.vpp == 2 and lay.mtp_layers == 1
    assert lay.decoder[0] == [3, 2] and all(lay.decoder[r] == [2, 2] for r in range(1, 14))
    assert lay.decoder[14] == [2, 0] and lay.decoder[15] == [2, 0]


def test_megatron_bridge_405b_split_is_account_for_embedding_and_loss():
    """126 layers + E + L at PP 8 x VPP 8: [15, 16 x 6, 15]; the layout string and Megatron's own split agree."""
    split = megatron_split(126, 8, 8, account_for_embedding=True, account_for_loss=True)
    assert split.stage_layers == [15, 16, 16, 16, 16, 16, 16, 15]
    assert split.decoder[0] == [1] + [2] * 7 and split.decoder[-1] == [2] * 7 + [1]
    assert resolve_layout("Et|(tt|)*62,tL", 8, 126).decoder == split.decoder
    assert resolve_layout(to_megatron_string(split), 8, 126).decoder == split.decoder


def test_meta_405b_split_first_and_last_stage_one_layer_short():
    lay = resolve_layout("E|(t|)*126,L", 16, 126)
    assert lay.stage_layers == [7] + [8] * 14 + [7]
    assert lay.decoder[0][0] == 0 and lay.decoder[-1][-1] == 0  # first chunk: embedding only; last: loss only
    spec = yaml.safe_load(META_405B.read_text())
    assert resolve_layout(spec["plan"]["pipeline_layout"], 16, 126).decoder == lay.decoder


def test_megatron_list_form_with_layer_type_names():
    """Megatron-Bridge's DeepSeek-V3 layout for PP 8 x VPP 2 (recipes/deepseek/h100/deepseek_v3.py:50-68), as a list."""
    stages = ([["embedding"] + ["decoder"] * 4] + [["decoder"] * 4] * 14 + [["decoder", "mtp", "loss"]])
    lay = resolve_layout(stages, 8, 61)
    assert lay.decoder[0] == [4, 4] and lay.decoder[-1] == [4, 1] and lay.mtp_layers == 1
    assert resolve_layout("Et*4|(t*4|)*14,tmL", 8, 61) == lay
    spec = _spec(DSV3_GB200)
    ev = evaluate(spec, PlanSpec(tp=1, pp=8, ep=32, micro_batch_size=1, recompute="selective", pipeline_layout=stages))
    assert [s.layers for s in ev.stages] == [8, 8, 8, 8, 8, 8, 8, 5]


def test_deepseek_v3_gb200_layout():
    lay = resolve_layout("Et|(tt|)*30L", 8, 61)
    assert lay.vpp == 4 and lay.stage_layers == [7, 8, 8, 8, 8, 8, 8, 6]


def test_megatron_uneven_first_last():
    assert megatron_split(126, 16, 1, first_stage_layers=7, last_stage_layers=7).stage_layers == [7] + [8] * 14 + [7]
    with pytest.raises(LayoutError, match="middle"):
        megatron_split(125, 16, 1, first_stage_layers=7, last_stage_layers=7)
    with pytest.raises(LayoutError, match="divide by pp"):
        megatron_split(126, 8, 1, account_for_embedding=True)  # 127 layers


def test_torchtitan_default_split_405b():
    """generate_llm_fqn_per_model_part with one layer less on the first and last stage (the session note's
    [15, 16 x 6, 15] for 1F1B, and per rank for two stages per rank)."""
    assert torchtitan_split(126, 8).stage_layers == [15, 16, 16, 16, 16, 16, 16, 15]
    two = torchtitan_split(126, 8, stages_per_rank=2)
    assert two.stage_layers == [15, 16, 16, 16, 16, 16, 16, 15]
    assert two.decoder[0] == [7, 8] and two.decoder[-1] == [8, 7]


@pytest.mark.parametrize("bad, pp, match", [
    ("tt|tL", 2, "embedding"), ("Ett|tt", 2, "loss"), ("Etx|tL", 2, "unknown layer letter"),
    ("Et|t|tL", 2, "multiple of pp"), ("Et|tL", 2, "decoder layers"), ("EmL|tt", 2, "loss"),
    ([[1, 2], [3]], 2, "same number"), ([[1], [1], [1]], 2, "stages for pp"),
])
def test_bad_layouts_name_the_rule(bad, pp, match):
    with pytest.raises(LayoutError, match=match):
        resolve_layout(bad, pp, num_layers=4)


@settings(max_examples=60, deadline=None)
@given(p=st.integers(1, 8), v=st.integers(1, 6), m=st.integers(1, 40), data=st.data())
def test_inflight_chunks_total_matches_megatron_warmup(p, v, m, data):
    rank = data.draw(st.integers(0, p - 1))
    counts = interleaved_inflight_chunks(p, v, m, rank)
    assert sum(counts) == min((p - rank - 1) * 2 + (v - 1) * p + 1, m * v)
    assert counts == sorted(counts, reverse=True)  # earlier chunks fill first


def _spec(path: Path) -> Spec:
    return validate_spec(yaml.safe_load(path.read_text()))


def test_equal_chunk_layout_evaluates_as_plain_interleaving():
    spec = _spec(BRIDGE_405B)
    base = dict(tp=8, pp=8, cp=2, micro_batch_size=1)
    plain = evaluate(spec, PlanSpec(**base, schedule="interleaved", vpp=2, stage_layers=[16] * 7 + [14]))
    equal = evaluate(spec, PlanSpec(**base, pipeline_layout=[[8, 8]] * 7 + [[7, 7]]))
    assert equal.plan.schedule == "interleaved" and equal.plan.vpp == 2
    assert [s.memory_gib for s in equal.stages] == pytest.approx([s.memory_gib for s in plain.stages], rel=1e-12)
    assert equal.metrics.step_time_s == pytest.approx(plain.metrics.step_time_s, rel=1e-12)
    with pytest.raises(PlanError, match="same number"):
        evaluate(spec, PlanSpec(**base, pipeline_layout=[[8, 8]] * 7 + [[14]]))
    # an uneven last stage leaves the other stages' memory as it was; its own follows its chunks
    uneven = evaluate(spec, PlanSpec(**base, pipeline_layout=[[8, 8]] * 7 + [[10, 4]]))
    assert [s.memory_gib for s in uneven.stages[:7]] == pytest.approx([s.memory_gib for s in plain.stages[:7]])
    assert uneven.stages[7].activations_gib > plain.stages[7].activations_gib  # the larger first chunk is in flight


def test_uneven_first_chunk_changes_first_stage_activations():
    """Rank 0's in-flight forwards are mostly of chunk 0 (Megatron's warm-up order): a one-layer first chunk
    holds fewer activations than the same stage total split evenly."""
    spec = _spec(BRIDGE_405B)
    ev = evaluate(spec)
    first = ev.stages[0]
    even_share = first.inflight_microbatches
    counts = interleaved_inflight_chunks(8, 8, ev.plan.num_microbatches, 0)
    assert even_share == pytest.approx(sum(n * l for n, l in zip(counts, [1] + [2] * 7)) / 15)
    assert even_share < sum(counts) / 8  # what equal chunks of 15/8 layers would give


@pytest.mark.parametrize("path, stage_layers, runs_on", [
    (BRIDGE_405B, [15, 16, 16, 16, 16, 16, 16, 15], ["megatron-core", "megatron-bridge"]),
    (META_405B, [7] + [8] * 14 + [7], ["megatron-core", "megatron-bridge"]),
    (DSV3_GB200, [7, 8, 8, 8, 8, 8, 8, 6], ["megatron-core", "megatron-bridge"]),
], ids=["bridge-405b", "meta-405b", "dsv3-gb200"])
def test_published_layouts_evaluate_through_the_cli(path, stage_layers, runs_on):
    result = runner.invoke(app, ["evaluate", str(path), "-f", "json"])
    assert result.exit_code == 0, result.stderr
    entry = json.loads(result.stdout)["plans"][0]
    assert entry["plan"]["stage_layers"] == stage_layers
    assert [sum(ch) for ch in entry["plan"]["pipeline_layout"]] == stage_layers
    assert [s["layers"] for s in entry["stages"]] == stage_layers
    assert entry["runs_on"] == runs_on
    assert not [v for v in entry["violations"] if "GiB" not in v]  # legal; memory may be over (reported)
    table = runner.invoke(app, ["evaluate", str(path)])
    assert table.exit_code == 0 and "pipeline_layout" in table.stdout


def test_bridge_405b_throughput_near_published():
    """326 tokens/s/GPU published (Megatron-Bridge 26.06, DGX-H100 FP8); the model's figure, within 15 %."""
    ev = evaluate(_spec(BRIDGE_405B))
    assert ev.metrics.tokens_per_s / 1024 == pytest.approx(326, rel=0.15)


def test_layout_errors_are_cli_errors(tmp_path: Path):
    data = yaml.safe_load(BRIDGE_405B.read_text())
    data["plan"]["pipeline_layout"] = "Et|(tt|)*61,tL"
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    result = runner.invoke(app, ["evaluate", str(path)])
    assert result.exit_code == 2
    assert "pipeline_layout" in (result.stderr or result.stdout)
    data["plan"]["pipeline_layout"] = "Et|(tt|)*62,tL"
    data["plan"]["vpp"] = 4
    path.write_text(yaml.safe_dump(data))
    result = runner.invoke(app, ["evaluate", str(path)])
    assert result.exit_code == 2 and "vpp" in (result.stderr or result.stdout)


def test_full_recompute_on_uneven_chunks_holds_each_chunks_checkpoints():
    """Every layer recomputed, chunks uneven ([10, 4] on the last rank): each in-flight chunk forward keeps only
    its own layers' checkpointed inputs, so the last rank holds (8·10 + 1·4)·act_recomputed, by hand: pp 8, vpp 2,
    the last rank runs (8-7-1)·2 + (2-1)·8 + 1 = 9 chunk forwards before its first backward, 8 of chunk 0 (the
    first group of pp micro-batches) and 1 of chunk 1 (costmodel/spec/layout.py interleaved_inflight_chunks)."""
    spec = _spec(BRIDGE_405B)
    plan = PlanSpec(tp=8, pp=8, cp=2, micro_batch_size=1, recompute="full",
                    pipeline_layout=[[8, 8]] * 7 + [[10, 4]])
    ev = evaluate(spec, plan)
    assert ev.plan.recompute_layers == ev.plan.stage_layers and ev.plan.num_microbatches >= 8
    costs = choice_costs(spec, ev.plan.to_choice(), resolve_gpu(spec.cluster), resolve_assumptions(spec.assumptions))
    per_layer = costs.dense.act_recomputed_bytes
    assert ev.stages[7].activations_gib == pytest.approx((8 * 10 + 1 * 4) * per_layer / 2**30, rel=1e-9)
    # rank 0, equal chunks: (8-0-1)·2 + 8 + 1 = 23 chunk forwards of 8 layers each (at most 2m)
    first = min(23, 2 * ev.plan.num_microbatches)
    assert ev.stages[0].activations_gib == pytest.approx(first * 8 * per_layer / 2**30, rel=1e-9)


@settings(max_examples=60, deadline=None)
@given(chunks=st.lists(st.integers(0, 12), min_size=1, max_size=5), data=st.data())
def test_chunk_recompute_spreads_evenly_and_fills_small_chunks(chunks, data):
    """Megatron's block method: each chunk recomputes min(N, l_c); the shares add up to the stage's count."""
    assume(sum(chunks) > 0)
    r = data.draw(st.integers(0, sum(chunks)))
    rec = chunk_recomputed_layers(chunks, r)
    assert sum(rec) == pytest.approx(r)
    assert all(0 <= x <= l + 1e-12 for x, l in zip(rec, chunks))
    n = max(rec)
    assert all(x == pytest.approx(min(n, l)) for x, l in zip(rec, chunks))


def test_torchtitan_split_points_before_v010():
    """torchtitan@9dec370 generate_split_points, by hand: 126 layers on 8 x 2 stages are 7 each with 14 left, one
    each to stages 1..14, the last takes 126 - 7 - 14·8 = 7; stage s on rank s % 8. 9 layers on 4 stages: 2, 3
    (the one extra), 2, 2, where the later rule (embedding and output as layers) gives 2, 3, 3, 1."""
    two = torchtitan_split_points(126, 8, stages_per_rank=2)
    assert two.decoder == [[7, 8]] + [[8, 8]] * 6 + [[8, 7]]
    assert torchtitan_split_points(126, 8).stage_layers == [15, 16, 16, 16, 16, 16, 16, 15]
    assert torchtitan_split_points(9, 4).stage_layers == [2, 3, 2, 2]
    assert torchtitan_split(9, 4).stage_layers == [2, 3, 3, 1]
    with pytest.raises(LayoutError, match="cannot be more"):
        torchtitan_split_points(7, 4, stages_per_rank=2)


def test_default_split_is_the_profiles_rule():
    """A framework's own split where the plan states none: torchtitan's by its version, Megatron's even split."""
    assert default_split(profile("torchtitan", "2024-12-26"), 126, 8, 2).decoder == \
        torchtitan_split_points(126, 8, 2).decoder
    assert default_split(profile("torchtitan", None), 9, 4).stage_layers == [2, 3, 3, 1]
    assert default_split(profile("megatron-core", None), 126, 8, 2) is None
    assert default_split(profile("torchtitan", "2024-12-26"), 126, 1) is None  # no pipeline
