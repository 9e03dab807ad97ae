"""The proto and its edge mapping: generated code is fresh, every library field has a proto field, enums
cover the library's values, and spec/result dicts survive the round trip through the messages."""

from __future__ import annotations

import filecmp
import json
import shutil
import subprocess
import sys
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

from parplan.library.contract import entry_fields, plan_result_to_dict
from parplan.library.spec_io import load_spec_file, spec_from_data
from parplan.costmodel.spec.assumptions import KNOBS
from parplan.costmodel.evaluation.ledger import Evaluation, Metrics, StageReport
from parplan.costmodel.spec.spec import (AttentionSpec, ClusterSpec, FrameworkSpec, MLASpec, ModelSpec, MoESpec, Plan, PlanSpec, SearchSpec,
                                    Spec, TrainingSpec)
from parplan.costmodel.spec.plan_fields import FIELDS_BY_NAME, ON_PLAN, REQUIRED, spec_fields
from parplan.wire import convert
from parplan.frameworks.loader import validate_spec
from parplan.costmodel.evaluation.prediction_band import BandSource, PlanBand, StepTimeBin
from parplan.solver.result import Explanation, PlanResult, Relaxation, SolveStats, Timing
from parplan.v1 import planner_pb2 as pb

from tests import memory_dims_cases as memory_dims
from tests import moe_schedule_cases as moe_dims

REPO = Path(__file__).resolve().parents[2]
GENERATED = REPO / "proto" / "parplan" / "v1"


def test_generated_code_is_fresh(tmp_path):
    """``python proto/generate.py`` into a temporary folder gives the committed files byte for byte."""
    run = subprocess.run([sys.executable, str(REPO / "proto" / "generate.py"), "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    fresh = sorted((tmp_path / "parplan" / "v1").glob("planner_pb2*"))
    assert [p.name for p in fresh] == ["planner_pb2.py", "planner_pb2.pyi", "planner_pb2_grpc.py"]
    stale = [p.name for p in fresh if not filecmp.cmp(p, GENERATED / p.name, shallow=False)]
    assert not stale, f"regenerate with `python proto/generate.py` and commit: {stale} differ"


# model -> message: every field of the library's types has a proto field of the same name
PAIRS = [(Spec, pb.Spec, {"assumptions"}), (ModelSpec, pb.ModelSpec, {"preset", "hf_config_json"}), (MoESpec, pb.MoESpec, set()),
         (MLASpec, pb.MLASpec, set()), (AttentionSpec, pb.AttentionSpec, set()), (FrameworkSpec, pb.FrameworkSpec, set()), (Timing, pb.Timing, set()),
         (TrainingSpec, pb.TrainingSpec, set()), (ClusterSpec, pb.ClusterSpec, set()),
         (SearchSpec, pb.SearchSpec, set()), (PlanSpec, pb.PlanSpec, set()), (Plan, pb.Plan, {"num_gpus"}),  # num_gpus: derived
         (Metrics, pb.Metrics, set()), (StageReport, pb.StageReport, {"headroom_gib"}),  # headroom_gib: the JSON's, derived
         (Evaluation, pb.Evaluation, {"band"}),  # band: the JSON's, from the answer's band_source (derived)
         (BandSource, pb.BandSource, set()), (PlanBand, pb.PredictionBand, set()), (StepTimeBin, pb.StepTimeBin, set()),
         (Relaxation, pb.Relaxation, set()), (Explanation, pb.Explanation, set()), (SolveStats, pb.SolveStats, set())]


@pytest.mark.parametrize("model, message, special", PAIRS, ids=[p[0].__name__ for p in PAIRS])
def test_every_library_field_has_a_proto_field(model: type[BaseModel], message, special):
    missing = set(model.model_fields) - set(message.DESCRIPTOR.fields_by_name) - special
    assert not missing, f"{message.DESCRIPTOR.full_name} lacks {sorted(missing)}: add them to planner.proto"
    # deprecated fields stay for released clients (buf breaking forbids deleting a field) and are not mapped
    kept = {f.name for f in message.DESCRIPTOR.fields if f.GetOptions().deprecated}
    extra = set(message.DESCRIPTOR.fields_by_name) - set(model.model_fields) - kept - special
    assert not extra, f"{message.DESCRIPTOR.full_name} has fields the library lacks: {sorted(extra)}"


def test_plan_response_carries_the_cli_json():
    result_fields = set(PlanResult.model_fields) - {"stats"} | {"solver"}
    assert result_fields | {"parameters", "admission", "parplan_version", "contract_json"} == set(
        pb.PlanResponse.DESCRIPTOR.fields_by_name)


def test_enums_cover_the_library_values_and_nothing_else():
    for full_name, values in convert.ENUM_VALUES.items():
        enum = pb.DESCRIPTOR.enum_types_by_name[full_name.rsplit(".", 1)[1]]
        names = {v.name for v in enum.values}
        prefix = convert.enum_value_name(enum, "")
        assert names == {prefix + "UNSPECIFIED"} | {convert.enum_value_name(enum, v) for v in values}
        assert enum.values_by_name[prefix + "UNSPECIFIED"].number == 0
    from parplan.solver.planner import Method  # the one place the test needs OR-Tools' planner module
    assert convert.METHODS == typing.get_args(Method)
    assert set(convert.PARETO_AXES) == set(typing.get_args(typing.get_args(PlanResult.model_fields["pareto_axis"].annotation)[0]))


@pytest.mark.parametrize("name", sorted(p.name for p in (REPO / "examples").glob("*.yaml")))
def test_spec_round_trip(name):
    spec = load_spec_file(REPO / "examples" / name)
    data = spec.model_dump(mode="json", exclude_none=True)
    message = convert.spec_to_message(data)
    wire = pb.Spec.FromString(message.SerializeToString())
    assert spec_from_data(convert.spec_dict_from_message(wire)) == spec


def test_knob_overrides_keep_their_types():
    spec = load_spec_file(REPO / "examples" / "llama3-70b-64xh100.yaml")
    data = spec.model_dump(mode="json", exclude_none=True)
    data["assumptions"] = {"preset": "textbook", "min_tokens_per_cp_rank": 2048, "include_latency": True,
                           "matmul_efficiency": 0.55}
    message = convert.spec_to_message(data)
    overrides = message.assumptions.overrides
    assert overrides["min_tokens_per_cp_rank"].WhichOneof("kind") == "integer_value"
    assert overrides["include_latency"].WhichOneof("kind") == "bool_value"
    assert overrides["matmul_efficiency"].WhichOneof("kind") == "number_value"
    assert set(overrides) <= set(KNOBS)
    assert spec_from_data(convert.spec_dict_from_message(message)).assumptions == spec_from_data(data).assumptions


def test_unknown_enum_number_is_a_conversion_error_naming_the_field():
    message = pb.Spec(training=pb.TrainingSpec(precision=7))
    with pytest.raises(convert.ConversionError) as err:
        convert.spec_dict_from_message(message)
    assert err.value.field_path == "spec.training.precision"


def test_result_round_trip_infeasible_with_explanation():
    """An INFEASIBLE result with relaxations (patches of ints, floats, booleans, null) maps back exactly."""
    from parplan.solver.cpsat import SolverControls
    from parplan.solver.planner import optimize

    spec = load_spec_file(REPO / "examples" / "infeasible" / "8b-gbs-below-pp.yaml")
    result = optimize(spec, controls=SolverControls(deterministic=True))
    assert result.status == "INFEASIBLE" and result.explanation is not None
    data = plan_result_to_dict(result)
    message = pb.PlanResponse.FromString(convert.plan_response(data, {"time_limit_s": 1.0}).SerializeToString())
    assert convert.plan_result_dict(message) == data


@pytest.mark.skipif(shutil.which("buf") is None, reason="buf not on PATH (CI installs it: npm install @bufbuild/buf)")
def test_buf_lint_and_breaking():
    lint = subprocess.run(["buf", "lint"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    breaking = subprocess.run(["buf", "breaking", "--against", "proto/released/parplan-v1.binpb"], cwd=REPO,
                              capture_output=True, text=True, timeout=120)
    assert breaking.returncode == 0, breaking.stdout + breaking.stderr


# the shapes the generic walk maps specially: the spec's unions (framework, pipeline_layout), the lists of lists,
# keys left out when unset (plan.pipeline_layout, timing), and the deprecated SolveStats.wall_time_s
LAYOUT_SPEC = REPO / "examples" / "deepseek-v3-256xgb200-megatron-layout-evaluate.yaml"
LAYOUT_STRING = "Et|(tt|)*30L"
LAYOUTS = {"megatron": LAYOUT_STRING,
           "letters": [["E", "t"]] + [["t", "t"]] * 30 + [["L"]],
           "layer_type_names": [["embedding", "decoder"]] + [["decoder", "decoder"]] * 30 + [["loss"]],
           "decoder_layers": [[2, 2, 2, 2]] * 7 + [[1, 2, 2, 2]]}
FRAMEWORKS = {"name": "megatron-core", "name_only_object": {"name": "megatron-core"},
              "name_and_version": {"name": "megatron-core", "version": "0.13.0"}}


def _round_trip_spec(data: dict) -> Spec:
    message = pb.Spec.FromString(convert.spec_to_message(data).SerializeToString())
    return spec_from_data(convert.spec_dict_from_message(message))


@pytest.mark.parametrize("form", sorted(LAYOUTS))
def test_pipeline_layout_forms_round_trip(form):
    data = load_spec_file(LAYOUT_SPEC).model_dump(mode="json", exclude_none=True)
    data["plan"]["pipeline_layout"] = LAYOUTS[form]
    spec = spec_from_data(data)
    assert _round_trip_spec(spec.model_dump(mode="json", exclude_none=True)) == spec
    kind = convert.spec_to_message(data).plan.pipeline_layout.WhichOneof("kind")
    assert kind == {"megatron": "megatron", "decoder_layers": "decoder_layers"}.get(form, "layers")


@pytest.mark.parametrize("form", sorted(FRAMEWORKS))
def test_framework_forms_round_trip(form):
    data = load_spec_file(LAYOUT_SPEC).model_dump(mode="json", exclude_none=True)
    data["framework"] = FRAMEWORKS[form]
    spec = spec_from_data(data)
    back = _round_trip_spec(spec.model_dump(mode="json", exclude_none=True))
    assert back == spec and type(back.framework) is type(spec.framework)  # a name stays a name, an object an object


def test_new_model_and_search_fields_round_trip():
    data = load_spec_file(LAYOUT_SPEC).model_dump(mode="json", exclude_none=True)
    data["model"].update(num_mtp_layers=1, mla={"q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
                                                 "qk_rope_head_dim": 64, "v_head_dim": 128})
    data["model"]["moe"]["max_nodes_per_token"] = 4
    data["search"] = {"stage_split": "first_last"}
    spec = spec_from_data(data)
    assert _round_trip_spec(spec.model_dump(mode="json", exclude_none=True)) == spec
    assert convert.spec_to_message(data).search.stage_split == pb.STAGE_SPLIT_FIRST_LAST


@pytest.mark.parametrize("attention", [dict(sliding_window=128, full_attention_every=2, sinks=True),
                                       dict(sliding_window=4096), dict(sinks=False)])
def test_attention_fields_round_trip(attention):
    data = load_spec_file(LAYOUT_SPEC).model_dump(mode="json", exclude_none=True)
    data["model"]["attention"] = attention
    spec = spec_from_data(data)
    assert spec.model.attention is not None
    assert _round_trip_spec(spec.model_dump(mode="json", exclude_none=True)) == spec


@pytest.mark.parametrize("moe", [dict(dispatcher="flex", dispatcher_backend="hybridep", capacity_factor=1.25),
                                 dict(dispatcher="allgather"), dict(dispatcher="alltoall", capacity_factor=1.0)])
def test_moe_dispatcher_fields_round_trip(moe):
    """model.moe.dispatcher / dispatcher_backend (enums MoeDispatcher, MoeDispatcherBackend) and capacity_factor."""
    data = load_spec_file(LAYOUT_SPEC).model_dump(mode="json", exclude_none=True)
    data["model"]["moe"].update(moe)
    spec = spec_from_data(data)
    assert _round_trip_spec(spec.model_dump(mode="json", exclude_none=True)) == spec
    message = convert.spec_to_message(data).model.moe
    assert message.dispatcher == {"alltoall": pb.MOE_DISPATCHER_ALLTOALL, "allgather": pb.MOE_DISPATCHER_ALLGATHER,
                                  "flex": pb.MOE_DISPATCHER_FLEX}[moe["dispatcher"]]


@pytest.mark.parametrize("message, path", [
    (pb.Spec(framework=pb.FrameworkChoice()), "spec.framework"),
    (pb.Spec(plan=pb.PlanSpec(pipeline_layout=pb.PipelineLayout())), "spec.plan.pipeline_layout"),
    (pb.Spec(framework=pb.FrameworkChoice(name=9)), "spec.framework.name"),
])
def test_unset_oneofs_and_unknown_frameworks_are_conversion_errors(message, path):
    with pytest.raises(convert.ConversionError) as err:
        convert.spec_dict_from_message(message)
    assert err.value.field_path == path


def test_evaluation_with_layout_and_runs_on_round_trips():
    from parplan.library.contract import evaluation_to_dict
    from parplan.library.evaluation import evaluate_spec

    entry = evaluation_to_dict(evaluate_spec(load_spec_file(LAYOUT_SPEC)))["plans"][0]
    assert entry["plan"]["pipeline_layout"] and entry["runs_on"]
    message = pb.Evaluation.FromString(convert.fill_message(pb.Evaluation(), entry).SerializeToString())
    assert convert.message_to_dict(message, omit_unset=False) == entry
    assert Evaluation.model_validate(entry_fields(convert.message_to_dict(message, omit_unset=False))) == evaluate_spec(
        load_spec_file(LAYOUT_SPEC))


def test_result_round_trip_with_timing_and_the_deprecated_wall_time():
    from parplan.solver.cpsat import SolverControls
    from parplan.solver.planner import optimize

    spec = load_spec_file(REPO / "examples" / "seed-textbook-70b-8k.yaml")
    result = optimize(spec, controls=SolverControls(workers=1))
    data = plan_result_to_dict(result)
    assert "timing" in data and "pipeline_layout" not in data["plans"][0]["plan"]
    message = pb.PlanResponse.FromString(convert.plan_response(data, {"time_limit_s": 1.0}).SerializeToString())
    assert convert.plan_result_dict(message) == data
    assert message.solver.wall_time_s == message.timing.wall_time_s == data["timing"]["wall_time_s"] > 0


def test_framework_any_travels_as_its_own_value():
    """``framework: any`` (the research space) is FRAMEWORK_ANY on the wire, distinct from unset (megatron-core)."""
    data = load_spec_file(REPO / "examples" / "llama3-70b-64xh100.yaml").model_dump(mode="json", exclude_none=True)
    data["framework"] = "any"
    wire = pb.Spec.FromString(convert.spec_to_message(data).SerializeToString())
    assert wire.framework.name == pb.FRAMEWORK_ANY
    assert spec_from_data(convert.spec_dict_from_message(wire)).framework == "any"
    del data["framework"]
    unset = pb.Spec.FromString(convert.spec_to_message(data).SerializeToString())
    assert not unset.HasField("framework")
    assert spec_from_data(convert.spec_dict_from_message(unset)).framework == "megatron-core"


def test_stage_pools_round_trip_and_stay_out_of_one_pool_plans():
    """``plan.stage_pools`` (issue 21): a plan on pools carries it through the message and back; a one-pool plan's
    dict and message have none (field 200, empty when unset)."""
    from parplan.library.contract import evaluation_to_dict
    from parplan.costmodel.evaluation.evaluate import evaluate

    pools = [{"gpu": "H100-SXM-80GB", "num_gpus": 4, "gpus_per_node": 4},
             {"gpu": "A100-SXM-80GB", "num_gpus": 4, "gpus_per_node": 4}]
    spec = spec_from_data({"framework": "any", "model": {"preset": "llama3-8b"},
                           "training": {"seq_len": 2048, "global_batch_size": 16},
                           "cluster": {"pools": pools}})
    ev = evaluate(spec, PlanSpec(tp=2, pp=2, dp=2, stage_layers=[20, 12], stage_pools=[0, 1]))
    entry = evaluation_to_dict(ev)["plans"][0]
    assert entry["plan"]["stage_pools"] == [0, 1]
    message = pb.Evaluation.FromString(convert.fill_message(pb.Evaluation(), entry).SerializeToString())
    assert list(message.plan.stage_pools) == [0, 1]
    assert convert.message_to_dict(message, omit_unset=False) == entry
    one = evaluate(spec_from_data({"framework": "any", "model": {"preset": "llama3-8b"},
                                   "training": {"seq_len": 2048, "global_batch_size": 16},
                                   "cluster": pools[0]}), PlanSpec(tp=2, pp=2))
    plain = evaluation_to_dict(one)["plans"][0]
    assert "stage_pools" not in plain["plan"]
    message = pb.Evaluation.FromString(convert.fill_message(pb.Evaluation(), plain).SerializeToString())
    assert "stage_pools" not in convert.message_to_dict(message, omit_unset=False)["plan"]
    spec_msg = convert.spec_to_message({**spec.model_dump(mode="json", exclude_none=True),
                                        "plan": {"tp": 2, "pp": 2, "stage_pools": [1, 0]}})
    assert list(spec_msg.plan.stage_pools) == [1, 0]
    assert convert.plan_spec_dict_from_message(spec_msg.plan)["stage_pools"] == [1, 0]


def test_proto_carries_the_new_dimensions():
    """The service's messages (proto field numbers 140-141, enum value SCHEDULE_DUALPIPEV = 140) map the new
    search keys, plan keys and schedule both ways."""
    from parplan.wire import convert
    from parplan.v1 import planner_pb2 as pb
    data = moe_dims.spec(moe_dims.MOE, precision="fp8", search=dict(schedules=["dualpipev", "1f1b"], moe_fp8_dispatch=[False, True],
                                                   moe_a2a_overlap=[True]),
                 plan=dict(pp=4, ep=2, schedule="dualpipev", moe_fp8_dispatch=True),
                 framework="megatron-core").model_dump(mode="json",  # the proto has no 'any' (server/ owns it)
                                                                                                exclude_none=True)
    message = pb.Spec.FromString(convert.spec_to_message(data).SerializeToString())
    assert message.plan.schedule == pb.SCHEDULE_DUALPIPEV == 140
    back = validate_spec(convert.spec_dict_from_message(message))
    assert back.search.schedules == ["dualpipev", "1f1b"] and back.search.moe_fp8_dispatch == [False, True]
    assert back.search.moe_a2a_overlap == [True]
    assert back.plan.schedule == "dualpipev" and back.plan.moe_fp8_dispatch and not back.plan.moe_a2a_overlap


def test_proto_round_trip_of_the_new_fields():
    pytest.importorskip("grpc")
    from parplan.library.contract import plan_to_dict
    from parplan.wire import convert
    from parplan.v1 import planner_pb2 as pb

    spec = memory_dims.spec(search=dict(zero_replicas=[1, 2], optimizer_states=["fp32/bf16/bf16"],
                             optimizer_offload_fractions=[0.0, 0.5]), framework="megatron-core")  # the proto has no 'any'
    data = json.loads(spec.model_dump_json(exclude_defaults=True))
    back = convert.spec_dict_from_message(convert.spec_to_message(data))
    assert validate_spec(back).search == spec.search
    plan = memory_dims.plan(spec, zero_replicas=2, optimizer_states="fp32/bf16/bf16", optimizer_offload_fraction=0.5)
    d = plan_to_dict(plan)
    assert d["zero_replicas"] == 2 and d["optimizer_offload_fraction"] == 0.5
    msg = convert.fill_message(pb.Plan(), d)
    assert convert.message_to_dict(msg, omit_unset=False) == d
    today = plan_to_dict(memory_dims.plan(spec))
    assert "zero_replicas" not in today  # the default plan's dict (and golden outputs) are unchanged
    assert convert.message_to_dict(convert.fill_message(pb.Plan(), today), omit_unset=False) == today


def test_dualpipe_evaluation_round_trips_with_its_step_order_step():
    """A DualPipe plan's ``metrics.step_order_step_s`` (costmodel/schedules/dualpipe_steps.py) goes onto the proto's optional
    field and back; a 1F1B plan's stays unset both ways."""
    from parplan.library.contract import plan_entry
    from parplan.costmodel.evaluation.evaluate import evaluate

    spec = moe_dims.spec()
    for plan, has_it in ((PlanSpec(pp=4, dp=2, schedule="dualpipe", num_microbatches=16), True),
                         (PlanSpec(pp=4, dp=2, num_microbatches=8), False)):
        ev = evaluate(spec, plan)
        entry = plan_entry(ev)
        message = pb.Evaluation.FromString(convert.fill_message(pb.Evaluation(), entry).SerializeToString())
        assert message.metrics.HasField("step_order_step_s") is has_it
        back = convert.message_to_dict(message, omit_unset=False)
        assert back == entry
        assert Evaluation.model_validate(entry_fields(back)).metrics.step_order_step_s == ev.metrics.step_order_step_s


def _other_than(annotation, default):
    """A valid value of ``annotation`` other than ``default``, read off the type (costmodel/spec/plan_fields.py)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _other_than(args[0], default)
    if origin is typing.Literal:
        return next(v for v in reversed(args) if v != default)
    if origin is typing.Union:  # Optional[X] or the layout's forms: the last member, a list
        return _other_than([a for a in args if a is not type(None)][-1], default)
    if origin is list:
        return [*(default or [_other_than(args[0], None)]), _other_than(args[0], None)]
    return {bool: lambda: not default, int: lambda: (default or 1) + 1,
            float: lambda: 0.5 if default != 0.5 else 0.25}[annotation]()


def _spec_default_of(field):
    annotation, default = field.spec_definition()
    return annotation, getattr(default, "default", default)


def _plan_of(**changes):
    return Plan(**{f.name: _other_than(f.type, None) for f in ON_PLAN if f.default is REQUIRED}, **changes)


@pytest.mark.parametrize("field", [f.name for f in ON_PLAN], ids=str)
def test_each_plan_field_maps_to_the_proto_field_of_its_name_and_back(field):
    """Field by field against the declaration: a plan that differs from the base plan in one declared field
    differs on the wire in the proto field of that name only, and comes back as the same plan."""
    from parplan.library.contract import plan_to_dict
    declared = FIELDS_BY_NAME[field]
    base = _plan_of()
    plan = base.model_copy(update={field: getattr(Plan.model_validate({**base.model_dump(), field: _other_than(
        declared.type, getattr(base, field))}), field)})
    base_msg, msg = (convert.fill_message(pb.Plan(), plan_to_dict(p)) for p in (base, plan))
    changed = {f.name for f in pb.Plan.DESCRIPTOR.fields if getattr(base_msg, f.name) != getattr(msg, f.name)}
    assert changed == {field} if field not in ("tp", "cp", "pp", "dp") else changed == {field, "num_gpus"}
    back = convert.message_to_dict(pb.Plan.FromString(msg.SerializeToString()), omit_unset=False)
    assert Plan.model_validate(entry_fields({"plan": back})["plan"]) == plan


def test_the_proto_plan_messages_hold_the_declared_fields_and_nothing_else():
    """pb.PlanSpec's fields are the PlanSpec's, pb.Plan's the Plan's and the derived num_gpus; the chunk trims a
    Choice alone holds travel in the plan's pipeline_layout; a PlanSpec setting every field survives the trip."""
    assert set(pb.PlanSpec.DESCRIPTOR.fields_by_name) == {f.name for f in spec_fields()}
    assert set(pb.Plan.DESCRIPTOR.fields_by_name) == {f.name for f in ON_PLAN} | {"num_gpus"}
    spec_plan = PlanSpec(**{f.name: _other_than(*_spec_default_of(f)) for f in spec_fields()})
    message = convert.fill_message(pb.PlanSpec(), spec_plan.model_dump(mode="json", exclude_none=True))
    back = convert.plan_spec_dict_from_message(pb.PlanSpec.FromString(message.SerializeToString()))
    assert PlanSpec.model_validate(back) == spec_plan and set(back) == set(PlanSpec.model_fields)
