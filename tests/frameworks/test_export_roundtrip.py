"""An exported plan round-trips: the spec re-read from the exported Megatron-LM arguments, torchtitan TOML
or DeepSpeed JSON (frameworks/import_plan.py, ``solver-cli import``) evaluates to the same plan and the
same metrics, whenever the export expressed the plan (no warning other than "code:" notes about settings
that live in model code). Where a target cannot express a plan, the warning says so and the re-read plan
is the one the framework would run instead (checked for the DeepSpeed uneven-stage case)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.export_cases import CASES_DIR, load_case
from parplan.client.cli import app
from parplan.library.evaluation import evaluate_spec
from parplan.library.spec_io import load_spec_file
from parplan.costmodel.spec.spec import PlanSpec
from parplan.frameworks.export import export_plan
from parplan.frameworks.import_plan import ImportPlanError, spec_from_export
from parplan.frameworks.loader import retarget, validate_spec
from parplan.solver.cpsat import SolverControls
from parplan.solver.planner import optimize

# (case, plan changes, target): each expressible exactly by its target
EXACT = [
    ("llama3-70b-interleaved", {}, "megatron"),
    ("llama3-70b-layout", {}, "megatron"),
    ("mixtral-8x7b-ep", {}, "megatron"),
    ("gpt-1.7b-ddp", {}, "megatron"),
    ("llama3-8b-fsdp", {}, "megatron"),
    ("llama3-70b-uneven-block", {"recompute_layers": [2, 2, 2, 2]}, "megatron"),
    ("llama3-70b-uneven-block", {"vpp": 2, "schedule": "interleaved", "stage_layers": [18, 22, 22, 18],
                                 "recompute_layers": [4, 4, 4, 4]}, "megatron"),
    # trimmed end chunks (the solver's trims; Meta's 405B split): the layout string, with an 'E'-only chunk too
    ("llama3-70b-interleaved", {"vpp": 3, "stage_layers": [20, 21, 21, 18],
                                "pipeline_layout": [[6, 7, 7], [7, 7, 7], [7, 7, 7], [6, 6, 6]]}, "megatron"),
    ("llama3-70b-interleaved", {"vpp": 3, "stage_layers": [2, 27, 27, 24],
                                "pipeline_layout": [[0, 1, 1], [9, 9, 9], [9, 9, 9], [8, 8, 8]]}, "megatron"),
    ("llama3-70b-interleaved", {"vpp": 3, "stage_layers": [20, 21, 21, 18], "zero_stage": 3, "recompute": "none",
                                "pipeline_layout": [[6, 7, 7], [7, 7, 7], [7, 7, 7], [6, 6, 6]]}, "torchtitan"),
    ("gpt-1.7b-ddp", {}, "torchtitan"),
    ("llama3-8b-fsdp", {}, "torchtitan"),
    ("llama3-70b-layout", {"zero_stage": 2}, "torchtitan"),
    ("llama3-70b-interleaved", {"zero_stage": 3, "recompute": "none"}, "torchtitan"),
    ("mixtral-8x7b-ep", {"zero_stage": 2, "recompute_layers": [16, 16]}, "torchtitan"),
    ("gpt-1.7b-ddp", {}, "deepspeed"),
    ("llama3-70b-uneven-block", {"tp": 1, "dp": 16, "num_microbatches": 32, "stage_layers": [20, 20, 20, 20],
                                 "recompute_layers": [20, 20, 20, 20]}, "deepspeed"),
]


def _same(spec, plan, target):
    export = export_plan(spec, plan, target)
    assert [w for w in export.warnings if not w.startswith("code:")] == [] or target == "torchtitan"
    reread = spec_from_export(export.text, target, spec)
    assert reread.model == spec.model and reread.training == spec.training
    original, again = evaluate_spec(spec, plan), evaluate_spec(reread)
    assert again.plan == original.plan
    assert again.metrics == original.metrics
    return export


@pytest.mark.parametrize("eager", [False, True])
def test_torchtitan_compile_round_trips_as_the_elementwise_pricing(eager):
    """``[compile]`` carries ``assumptions.eager_elementwise`` both ways: the plan priced eager exports without
    compiling and re-reads eager (the same metrics); a TOML without ``[compile]`` is torchtitan's default, eager."""
    spec, plan = load_case("llama3-8b-fsdp")
    spec = spec.model_copy(update={"assumptions": spec.assumptions.model_copy(update={"eager_elementwise": eager})})
    export = _same(spec, plan, "torchtitan")
    assert (f"[compile]\nenable = {'false' if eager else 'true'}\n") in export.text
    without = export.text.split("\n[compile]")[0]
    reread = spec_from_export(without, "torchtitan", spec)
    assert reread.assumptions.eager_elementwise is True
    assert evaluate_spec(reread).metrics.step_time_s > evaluate_spec(spec, plan).metrics.step_time_s or eager


@pytest.mark.parametrize("case,changes,target", EXACT)
def test_export_round_trips_to_the_same_plan_and_metrics(case, changes, target):
    spec, plan = load_case(case)
    plan = evaluate_spec(spec, PlanSpec(**{**plan.model_dump(), **changes})).plan  # canonical, as the solver's
    export = _same(spec, plan, target)
    if target == "torchtitan":  # only the cost-model note on TP overlap may remain: no plan field is lost
        assert all("tp_comm_overlap" in w for w in export.warnings), export.warnings


def test_a_plan_deepspeed_cannot_express_reads_back_as_what_deepspeed_runs():
    spec, plan = load_case("llama3-70b-layout")
    export = export_plan(spec, plan, "deepspeed")
    assert any("stage_layers [19, 21, 20, 20]" in w for w in export.warnings)
    reread = evaluate_spec(spec_from_export(export.text, "deepspeed", spec)).plan
    assert reread.stage_layers == [20, 20, 20, 20] and reread.sequence_parallel is False


def test_hand_edited_files_with_bad_values_are_errors_naming_the_key():
    spec, plan = load_case("llama3-70b-interleaved")
    toml = export_plan(spec, plan, "torchtitan").text.replace("data_parallel_shard_degree = 2",
                                                                 "data_parallel_shard_degree = 3")
    with pytest.raises(ImportPlanError, match="dp_replicate·dp_shard·cp·tp·pp"):
        spec_from_export(toml, "torchtitan", spec)
    args = export_plan(spec, plan, "megatron").text.replace("--global-batch-size 512", "--global-batch-size 513")
    with pytest.raises(ImportPlanError, match="global-batch-size"):
        spec_from_export(args, "megatron", spec)
    with pytest.raises(ImportPlanError, match="DeepSpeed JSON"):
        spec_from_export("{not json", "deepspeed", spec)


def test_cli_export_import_evaluate_round_trip(tmp_path):
    runner = CliRunner()
    case = CASES_DIR / "llama3-70b-layout.yaml"
    exported = runner.invoke(app, ["export", str(case), "--to", "megatron"])
    assert exported.exit_code == 0, exported.output
    args = tmp_path / "megatron_args.sh"
    args.write_text(exported.stdout)
    imported = runner.invoke(app, ["import", str(args), "--from", "megatron", "--spec", str(case)])
    assert imported.exit_code == 0, imported.output
    reread = tmp_path / "reread.yaml"
    reread.write_text(imported.stdout)
    before = json.loads(runner.invoke(app, ["evaluate", str(case), "--format", "json"]).stdout)
    after = json.loads(runner.invoke(app, ["evaluate", str(reread), "--format", "json"]).stdout)
    assert after["plans"][0]["plan"] == before["plans"][0]["plan"]
    assert after["plans"][0]["metrics"] == before["plans"][0]["metrics"]


# ------------------------------------------------------------------------ several cluster.pools (issue 21)

POOLS_EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pools" / "llama3-8b-h100-a100.yaml"
SMALL = dict(name="small", num_layers=6, hidden_size=1024, ffn_hidden_size=4096, num_attention_heads=16,
             num_kv_heads=4, vocab_size=32000, gated_mlp=True, tie_embeddings=False)


def _small_pools_spec(pools: list[dict]):
    return validate_spec({"framework": "any", "model": SMALL, "cluster": {"pools": pools},
                          "training": {"seq_len": 2048, "global_batch_size": 16, "precision": "bf16"}})


def _pools_round_trip(spec, plan, target="megatron"):
    """Export, re-import (layout + PARPLAN_HOST_ORDER), evaluate: the same stage_layers, stage_pools, step time."""
    export = export_plan(spec, plan, target)
    reread = spec_from_export(export.text, "megatron", spec)
    original, again = evaluate_spec(spec, plan), evaluate_spec(reread)
    return export, original, again


def test_the_solvers_best_pool_plans_round_trip_through_megatron():
    data = load_spec_file(str(POOLS_EXAMPLE)).model_dump(mode="json", exclude_none=True)
    data["search"]["schedules"] = ["1f1b"]  # ZB-H1 has no upstream Megatron-LM schedule (a warning; below)
    spec = validate_spec(data)
    got = optimize(spec, top_k=3, controls=SolverControls(deterministic=True))
    assert got.plans and any(len(set(e.plan.stage_pools)) > 1 for e in got.plans)
    for e in got.plans:
        export, original, again = _pools_round_trip(spec, e.plan)
        assert export.warnings == () and "--pipeline-model-parallel-layout" in export.text
        assert again.plan == original.plan == e.plan  # stage_layers, stage_pools and every other field
        assert again.metrics == original.metrics and again.metrics.step_time_s == e.metrics.step_time_s


@pytest.mark.parametrize("pools, plan", [
    # pool 0 used twice around pool 1: three host-order blocks
    ([dict(gpu="H100-SXM-80GB", num_gpus=8, gpus_per_node=4), dict(gpu="A100-SXM-80GB", num_gpus=4, gpus_per_node=4)],
     dict(tp=2, pp=3, dp=2, num_microbatches=8, stage_layers=[3, 1, 2], recompute_layers=[0, 0, 0],
          stage_pools=[0, 1, 0])),
    # half of each pool idle: the world is the host order's 8 GPUs, not the cluster's 16
    ([dict(gpu="H100-SXM-80GB", num_gpus=8, gpus_per_node=8), dict(gpu="A100-SXM-80GB", num_gpus=8, gpus_per_node=8)],
     dict(tp=2, pp=2, dp=2, num_microbatches=8, stage_layers=[4, 2], recompute="full", recompute_layers=[4, 2],
          stage_pools=[0, 1])),
])
def test_hand_placed_pool_plans_round_trip_with_their_host_order(pools, plan):
    spec = _small_pools_spec(pools)
    fixed = evaluate_spec(spec, PlanSpec(micro_batch_size=1, **plan)).plan
    export, original, again = _pools_round_trip(spec, fixed)
    assert export.warnings == ()
    assert again.plan == original.plan and again.plan.stage_pools == plan["stage_pools"]
    assert again.metrics == original.metrics


def test_a_zb_h1_pool_plan_reads_back_as_the_1f1b_megatron_runs():
    spec = retarget(load_spec_file(str(POOLS_EXAMPLE)), "any")  # the research space plans ZB-H1 (megatron-core: no)
    best = optimize(spec, controls=SolverControls(deterministic=True)).plans[0].plan
    assert best.schedule == "zb-h1"
    export, _, again = _pools_round_trip(spec, best)
    assert any("schedule 'zb-h1'" in w for w in export.warnings)
    assert again.plan == evaluate_spec(spec, PlanSpec(**{**best.model_dump(), "schedule": "1f1b"})).plan


def test_a_pool_export_without_its_host_order_names_stage_pools():
    spec = load_spec_file(str(POOLS_EXAMPLE))
    best = optimize(spec, controls=SolverControls(deterministic=True)).plans[0].plan
    text = export_plan(spec, best, "megatron").text
    cut = "\n".join(line for line in text.splitlines() if not line.startswith("PARPLAN_HOST_ORDER"))
    with pytest.raises(ImportPlanError, match=r"^plan\.stage_pools: a spec on 2 cluster\.pools needs the host order"):
        spec_from_export(cut, "megatron", spec)
