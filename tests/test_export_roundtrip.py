"""An exported plan round-trips: the spec re-read from the exported Megatron-LM arguments, torchtitan TOML
or DeepSpeed JSON (frameworks/import_plan.py, ``solver-cli import``) evaluates to the same plan and the
same metrics, whenever the export expressed the plan (no warning other than "code:" notes about settings
that live in model code). Where a target cannot express a plan, the warning says so and the re-read plan
is the one the framework would run instead (checked for the DeepSpeed uneven-stage case)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from export_cases import CASES_DIR, load_case
from parplan.client.cli import app
from parplan.client.evaluation import evaluate_spec
from parplan.costmodel.spec import PlanSpec
from parplan.frameworks.export import export_plan
from parplan.frameworks.import_plan import ImportPlanError, spec_from_export

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
