"""Plans on several pools through every door (issue 21): ``optimize``/``evaluate`` in Python, ``solver-cli optimize``
and ``evaluate`` (exit 0 with ``stage_pools``; exit 2 with one line naming the field for what stays unsupported:
a memory frontier, torchtitan and DeepSpeed, exports other than Megatron's), and the gRPC ``Plan``/``Evaluate`` calls (INVALID_ARGUMENT likewise)."""

from __future__ import annotations

import json
from pathlib import Path

import grpc
import pytest
import yaml
from typer.testing import CliRunner

from parplan.client.cli import app
from parplan.library.spec_io import load_spec_file
from parplan.costmodel.evaluation.evaluate import evaluate
from parplan.costmodel.evaluation.prediction_band import with_memory_band
from parplan.costmodel.evaluation.pools import evaluate_pools
from parplan.solver.cpsat import SolverControls
from parplan.solver.planner import optimize
from parplan.v1 import planner_pb2 as pb
from parplan.v1 import planner_pb2_grpc as pb_grpc

from tests.solver.pools.test_space import A100, H100, SEARCH, spec_of

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pools" / "llama3-8b-h100-a100.yaml"
runner = CliRunner()


def small_spec_file(tmp_path: Path, **extra) -> Path:
    data = spec_of([H100, A100]).model_dump(mode="json", exclude_none=True)
    data.update(extra)
    path = tmp_path / "pools.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_optimize_on_pools_is_optimal_and_equals_the_exhaustive_method():
    spec = spec_of([H100, A100])
    got = optimize(spec, top_k=3, controls=SolverControls(deterministic=True))
    exhaustive = optimize(spec, method="exhaustive", top_k=3, controls=SolverControls(deterministic=True))
    assert got.status == "OPTIMAL" and exhaustive.status == "OPTIMAL"
    assert [e.metrics.step_time_s for e in got.plans] == pytest.approx(
        [e.metrics.step_time_s for e in exhaustive.plans], rel=1e-6)
    best = got.plans[0]
    assert best.plan.stage_pools is not None and set(best.plan.stage_pools) == {0, 1}
    assert evaluate(spec, best.plan) == evaluate_pools(spec, best.plan)  # the evaluator's own ledger
    assert got.stats.best_bound == pytest.approx(got.stats.objective_value) and got.stats.gap == pytest.approx(0)
    for e in got.plans:  # full recompute of zero layers reads as none (the same ledger)
        assert not (e.plan.recompute == "full" and not any(e.plan.recompute_layers))


def test_nothing_fits_on_pools_is_infeasible_with_an_explanation():
    spec = spec_of([{**H100, "memory_gib": 0.5}, {**A100, "memory_gib": 0.5}])
    got = optimize(spec, controls=SolverControls(deterministic=True))
    assert got.status == "INFEASIBLE" and not got.plans and "cluster.pools" in got.explanation.conflicting


def test_cli_optimize_and_evaluate_a_pools_spec(tmp_path):
    run = runner.invoke(app, ["optimize", str(small_spec_file(tmp_path)), "--deterministic", "--format", "json"])
    assert run.exit_code == 0, run.output
    data = json.loads(run.stdout)
    assert data["status"] == "OPTIMAL"
    others = {e["framework"]: e for e in data["per_framework"]}  # one pool solve per framework that runs pools
    assert others["megatron-core"]["status"] == "OPTIMAL" and others["megatron-core"]["plan"]["schedule"] == "1f1b"
    assert set(others["megatron-core"]["plan"]["stage_pools"]) <= {0, 1}
    assert others["deepspeed"]["status"] == "INVALID" and others["deepspeed"]["reason"].startswith(
        "framework: deepspeed: plans on several cluster.pools run on megatron-core or megatron-bridge only")
    plan = data["plans"][0]["plan"]
    assert set(plan["stage_pools"]) == {0, 1}
    fixed = small_spec_file(tmp_path, plan={k: plan[k] for k in ("tp", "pp", "dp", "micro_batch_size", "schedule",
                                                                "stage_layers", "recompute", "recompute_layers",
                                                                "stage_pools")})
    run = runner.invoke(app, ["evaluate", str(fixed), "--format", "json"])
    assert run.exit_code == 0, run.output
    assert json.loads(run.stdout)["plans"][0]["metrics"]["step_time_s"] == pytest.approx(
        data["plans"][0]["metrics"]["step_time_s"], rel=1e-12)
    table = runner.invoke(app, ["optimize", str(EXAMPLE), "--deterministic"])
    assert table.exit_code == 0, table.output
    assert "OPTIMAL" in table.stdout


@pytest.mark.parametrize("args, extra, words", [
    (["--pareto", "memory"], {}, "error: --pareto: memory is not available on several cluster.pools"),
    (["--export", "torchtitan"], {}, "error: plan.stage_pools: torchtitan cannot be given a per-stage placement"),
    (["--export", "deepspeed"], {}, "error: plan.stage_pools: deepspeed cannot be given a per-stage placement"),
    ([], {"framework": "torchtitan", "search": {**SEARCH, "zero_stages": [2]}},
     "error: framework: torchtitan: plans on several cluster.pools run on"),
    ([], {"framework": "deepspeed"}, "error: framework: deepspeed: plans on several cluster.pools run on"),
    ([], {"objective": "min_memory"}, "error: objective: min_memory on several cluster.pools"),
    ([], {"plan": {"stage_pools": [0, 1]}}, "error: plan.stage_pools"),
])
def test_cli_refuses_what_pools_do_not_support_with_exit_2(tmp_path, args, extra, words):
    run = runner.invoke(app, ["optimize", str(small_spec_file(tmp_path, **extra)), "--deterministic", *args])
    assert run.exit_code == 2, run.output
    lines = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and lines[0].startswith(words), run.stderr


def test_cli_exports_a_pools_plan_to_megatron_and_imports_it_back(tmp_path):
    spec_file = small_spec_file(tmp_path)
    run = runner.invoke(app, ["optimize", str(spec_file), "--deterministic", "--export", "megatron"])
    assert run.exit_code == 0, run.output
    assert "PARPLAN_HOST_ORDER=( pool" in run.stdout and "--pipeline-model-parallel-layout" in run.stdout
    args = tmp_path / "megatron_args.sh"
    args.write_text(run.stdout)
    imported = runner.invoke(app, ["import", str(args), "--from", "megatron", "--spec", str(spec_file)])
    assert imported.exit_code == 0, imported.output
    assert set(yaml.safe_load(imported.stdout)["plan"]["stage_pools"]) == {0, 1}
    job = runner.invoke(app, ["optimize", str(spec_file), "--deterministic", "--emit", "slurm"])
    assert job.exit_code == 0 and job.stdout.count("#SBATCH hetjob") >= 1, job.output


def test_cli_evaluate_without_stage_pools_names_the_field(tmp_path):
    run = runner.invoke(app, ["evaluate", str(small_spec_file(tmp_path, plan={"tp": 2, "pp": 2, "dp": 2}))])
    assert run.exit_code == 2 and "error: plan.stage_pools" in run.stderr


@pytest.fixture(scope="module")
def stub(channel):
    return pb_grpc.PlannerServiceStub(channel)


def test_grpc_plan_on_pools_returns_stage_pools(stub, tmp_path):
    text = small_spec_file(tmp_path).read_text()
    got = stub.Plan(pb.PlanRequest(spec_text=text, top_k=2, solver=pb.SolverParameters(workers=1, time_limit_s=60,
                                                                                         deterministic=True)),
                    timeout=120)
    assert got.status == pb.PLAN_STATUS_OPTIMAL and set(got.plans[0].plan.stage_pools) == {0, 1}
    with pytest.raises(grpc.RpcError) as err:
        stub.Plan(pb.PlanRequest(spec_text=small_spec_file(tmp_path, framework="deepspeed").read_text()),
                  timeout=60)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "cluster.pools" in err.value.details()


def test_placement_explains_each_stage_and_an_idle_pool():
    mixed = optimize(spec_of([H100, A100]), controls=SolverControls(deterministic=True))
    sp = mixed.plans[0].plan.stage_pools
    text = "\n".join(mixed.placement)
    assert f"pool 1 (A100-SXM-80GB, 4 of 4 GPUs): stage {sp.index(1)} with" in text
    assert "the slower pool 1's stages get fewer layers" in text and "× pool 0's" in text
    order = [x for x in mixed.placement if x.startswith("stage order: the reverse order (pools ")]
    assert len(order) == 1 and float(order[0].split(" %")[0].rsplit(", ", 1)[1]) >= 0  # the answer's order is best
    idle = optimize(spec_of([H100, {**A100, "peak_bf16_tflops": 30.0}]), controls=SolverControls(deterministic=True))
    line = [x for x in idle.placement if x.startswith("pool 1 (A100-SXM-80GB) is left idle: its best use")]
    assert len(line) == 1 and "(proven)" in line[0]
    slower = float(line[0].split(" %")[0].rsplit(", ", 1)[1])
    assert slower > 0  # its best use is slower than leaving it idle
    one = optimize(spec_of([H100]), controls=SolverControls(deterministic=True))
    assert one.placement is None


def test_placement_travels_in_the_json_and_the_plan_response():
    from parplan.library.contract import plan_result_to_dict
    from parplan.wire import convert

    result = optimize(spec_of([H100, A100]), controls=SolverControls(deterministic=True))
    data = plan_result_to_dict(result)
    assert data["placement"] == result.placement and data["plans"][0]["plan"]["stage_pools"]
    message = pb.PlanResponse.FromString(convert.plan_response(data, {}).SerializeToString())
    assert list(message.placement) == result.placement
    assert convert.plan_result_dict(message) == data


def test_grpc_evaluate_a_plan_on_pools(stub, tmp_path):
    from parplan.costmodel.spec.spec import PlanSpec

    text = small_spec_file(tmp_path).read_text()
    got = stub.Evaluate(pb.EvaluateRequest(spec_text=text, plan=pb.PlanSpec(tp=2, pp=2, dp=2, stage_layers=[5, 1],
                                                                            stage_pools=[0, 1])), timeout=60)
    assert list(got.evaluation.plan.stage_pools) == [0, 1]
    spec = spec_of([H100, A100])
    want = evaluate(spec, PlanSpec(tp=2, pp=2, dp=2, stage_layers=[5, 1], stage_pools=[0, 1]))
    assert got.evaluation.metrics.step_time_s == pytest.approx(want.metrics.step_time_s, rel=1e-12)
    with pytest.raises(grpc.RpcError) as err:
        stub.Evaluate(pb.EvaluateRequest(spec_text=text, plan=pb.PlanSpec(tp=2, pp=2, dp=2)), timeout=60)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "plan.stage_pools" in err.value.details()


def test_a_short_time_limit_answers_without_a_proof():
    """Out of time: FEASIBLE with a bound, or UNKNOWN without a plan; never an error."""
    from parplan import load_spec

    got = optimize(load_spec(str(EXAMPLE)), controls=SolverControls(time_limit_s=0.05, workers=1))
    assert got.status in ("FEASIBLE", "UNKNOWN")
    assert (got.status == "UNKNOWN") == (not got.plans)


def test_a_pools_spec_without_a_framework_plans_on_megatron_core_and_exports_to_it(tmp_path):
    """The default framework (megatron-core) on pools: its space (1F1B, no ZB-H1), its memory conventions (the
    loader's grad_bytes 4), a plan that runs on it and exports with its layout and host order."""
    data = yaml.safe_load(small_spec_file(tmp_path).read_text())
    del data["framework"]
    spec_file = tmp_path / "default.yaml"
    spec_file.write_text(yaml.safe_dump(data))
    spec = load_spec_file(str(spec_file))
    assert spec.framework == "megatron-core" and spec.assumptions.grad_bytes == 4.0
    got = optimize(spec, top_k=3, controls=SolverControls(deterministic=True))
    assert got.status == "OPTIMAL" and any(len(set(e.plan.stage_pools)) > 1 for e in got.plans)
    for e in got.plans:
        # the planner's evaluation is the evaluator's under the planner's spec (the memory band's margin)
        assert e.plan.schedule == "1f1b" and "megatron-core" in e.runs_on and e == evaluate(with_memory_band(spec), e.plan)
    run = runner.invoke(app, ["optimize", str(spec_file), "--deterministic", "--export", "megatron"])
    assert run.exit_code == 0, run.output
    assert "PARPLAN_HOST_ORDER=( pool" in run.stdout and "--pipeline-model-parallel-layout" in run.stdout
    assert "zb" not in run.stdout.lower()


def test_grpc_pareto_on_pools_is_the_libraries_frontier(stub, tmp_path):
    """The gRPC Pareto call on pools (axis GPUS) answers optimize's frontier of step time against each pool's GPUs."""
    text = small_spec_file(tmp_path).read_text()
    got = stub.Pareto(pb.ParetoRequest(spec_text=text, axis=pb.PARETO_AXIS_GPUS, solver=pb.SolverParameters(
        workers=1, time_limit_s=60, deterministic=True)), timeout=120)
    want = optimize(spec_of([H100, A100]), pareto="gpus", controls=SolverControls(deterministic=True)).pareto
    assert got.status == pb.PLAN_STATUS_OPTIMAL and len(got.points) == len(want) > 1
    assert [list(p.plan.stage_pools) for p in got.points] == [e.plan.stage_pools for e in want]
    assert [p.metrics.step_time_s for p in got.points] == pytest.approx([e.metrics.step_time_s for e in want])
