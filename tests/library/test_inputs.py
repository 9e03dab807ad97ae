"""Issue 9, inputs: every argument range-checked, silent spec cases made errors or warnings, a spec given as a
Spec, a path or a dict, one error base. Each reproduction of the issue is one test here."""

from __future__ import annotations

import copy
import importlib
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from parplan.library import api
from parplan.client.cli import app
from parplan.library.spec_io import SpecError, as_spec, load_spec, spec_from_data
from parplan.costmodel.spec import spec as spec_module
from parplan.costmodel.errors import ArgumentError, ParplanError
from parplan.costmodel.evaluation.evaluate import PlanError, evaluate
from parplan.costmodel.spec.hardware import UnknownGPU
from parplan.costmodel.spec.spec import PlanSpec, spec_warnings
from parplan.solver.arguments import MAX_SEED, MAX_TOP_K, MAX_WORKERS, check_optimize_arguments
from parplan.solver.cpsat import SolverControls
from parplan.solver.planner import optimize

ROOT = Path(__file__).resolve().parents[2]
LLAMA = ROOT / "examples" / "llama3-70b-64xh100.yaml"
runner = CliRunner()


def llama() -> dict[str, Any]:
    return yaml.safe_load(LLAMA.read_text())


def edited(base: dict[str, Any], **sections: dict[str, Any]) -> dict[str, Any]:
    """``base`` with keys set per section (``cluster={"gpus_per_node": 3}``); top-level keys via ``top=``."""
    data = copy.deepcopy(base)
    for section, values in sections.items():
        if section == "top":
            data.update(values)
        else:
            data.setdefault(section, {}).update(values)
    return data


def write(tmp_path: Path, data: dict[str, Any], name: str = "spec.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def run(*args: str):
    return runner.invoke(app, [str(a) for a in args])


def one_error_line(result, *fragments: str) -> str:
    """Exit 2, nothing on stdout, one stderr line ``error: ...`` with every fragment."""
    assert result.exit_code == 2, (result.exit_code, result.stdout[-500:], result.stderr, result.exception)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    assert result.stdout == ""
    return lines[0]


# ------------------------------------------------------------------------------------ error base


def test_user_errors_share_one_base():
    for cls in (SpecError, PlanError, UnknownGPU, ArgumentError):
        assert issubclass(cls, ParplanError) and issubclass(cls, ValueError), cls
    err = ArgumentError("top_k", "must be from 1 to 100", 0)
    assert err.field == "top_k" and str(err) == "top_k: must be from 1 to 100 (got 0)"
    assert SpecError("model.num_layers: Input should be greater than 0").field == "model.num_layers"
    assert PlanError("plan.vpp: must divide").field == "plan.vpp"
    with pytest.raises(SpecError) as info:
        load_spec("no-such-spec.yaml")
    assert info.value.field is None  # the message names a file, not a field


@pytest.mark.parametrize("module, name", [
    ("parplan.library.api", "optimize"), ("parplan.library.api", "evaluate"), ("parplan.library.spec_io", "SpecError"),
    ("parplan.library.spec_io", "as_spec"), ("parplan.costmodel.evaluation.evaluate", "PlanError"),
    ("parplan.costmodel.spec.spec", "PlanSpec"), ("parplan.costmodel.errors", "ParplanError"),
    ("parplan.costmodel.errors", "ArgumentError"), ("parplan.solver.cpsat", "SolverControls"),
])
def test_library_names_are_importable(module: str, name: str):
    """Issue 9: SolverControls, SpecError, PlanError were not importable from the library (the `parplan` facade
    re-exports these; its own test is elsewhere)."""
    assert hasattr(importlib.import_module(module), name)


# ------------------------------------------------------------------------------ library arguments


def test_top_k_zero_is_an_error_not_infeasible():
    """Issue 9: optimize(spec, top_k=0) answered INFEASIBLE."""
    with pytest.raises(ArgumentError, match=r"^top_k: must be from 1 to 100 \(got 0\)$") as info:
        optimize(load_spec(LLAMA), top_k=0)
    assert info.value.field == "top_k"


@pytest.mark.parametrize("argument, value", [
    ("top_k", 0), ("top_k", -1), ("top_k", MAX_TOP_K + 1), ("top_k", True), ("top_k", 1.0), ("top_k", "3"),
    ("method", "gurobi"), ("method", None), ("pareto", "time"), ("pareto", ""),
    ("time_limit_s", 0), ("time_limit_s", -1.0), ("time_limit_s", float("inf")), ("time_limit_s", float("nan")),
    ("time_limit_s", 86_401), ("time_limit_s", "60"), ("time_limit_s", None),
    ("workers", -1), ("workers", MAX_WORKERS + 1), ("workers", 100_000), ("workers", 2.0),
    ("seed", -1), ("seed", MAX_SEED + 1), ("seed", 99999999999999999999), ("seed", 1.5),
    ("deterministic", "yes"), ("deterministic", 1),
])
def test_every_optimize_argument_is_range_checked(argument: str, value: Any):
    arguments = dict(top_k=1, method="cpsat", pareto=None, time_limit_s=60.0, workers=0, seed=1, deterministic=False)
    check_optimize_arguments(**arguments)  # the defaults pass
    arguments[argument] = value
    with pytest.raises(ArgumentError) as info:
        check_optimize_arguments(**arguments)
    assert info.value.argument == argument and str(info.value).startswith(f"{argument}: ")


@pytest.mark.parametrize("controls", [dict(workers=100_000), dict(seed=99999999999999999999),
                                      dict(time_limit_s=0.0), dict(seed=-3)], ids=str)
def test_planner_checks_solver_controls_before_solving(controls: dict):
    """Issue 9: workers=100000 ran 14 s to a wrong INFEASIBLE; a 20-digit seed raised TypeError inside CP-SAT."""
    with pytest.raises(ArgumentError, match="^" + next(iter(controls))):
        optimize(load_spec(LLAMA), controls=SolverControls(**controls))


def test_largest_legal_arguments_pass():
    check_optimize_arguments(top_k=MAX_TOP_K, method="exhaustive", pareto="gpus", time_limit_s=86_400,
                             workers=MAX_WORKERS, seed=MAX_SEED, deterministic=True)
    check_optimize_arguments(top_k=1, method="cpsat", pareto="memory", time_limit_s=0.01, workers=0, seed=0,
                             deterministic=False)


# ----------------------------------------------------------------------------- CLI option checks


@pytest.mark.parametrize("option, value, rule", [
    ("--workers", "100000", "from 0 to 256"),
    ("--seed", "99999999999999999999", "from 0 to 2147483647"),
    ("--time-limit", "0", "0 < t ≤ 86400"),
    ("--time-limit", "nan", "0 < t ≤ 86400"),
    ("--top", "0", "from 1 to 100"),
    ("--top", "101", "from 1 to 100"),
])
def test_cli_options_out_of_range_exit_2_with_one_line(option: str, value: str, rule: str):
    """Issue 9: --workers 100000 gave INFEASIBLE after 14 s, --seed 99999999999999999999 'internal error
    (TypeError)' with exit 1; --top 0 / --time-limit 0 printed a multi-line usage error."""
    line = one_error_line(run("optimize", LLAMA, option, value), f"{option}: ", rule)
    assert value in line


# ------------------------------------------------------------------------- optimize / evaluate API


def test_optimize_accepts_a_path_or_a_dict():
    """Issue 9: optimize("path.yaml") or a dict raised a bare AttributeError."""
    reference = api.optimize(load_spec(LLAMA), method="exhaustive")
    assert reference.status == "OPTIMAL"
    for given in (str(LLAMA), LLAMA, llama()):
        result = api.optimize(given, method="exhaustive")
        assert result.status == "OPTIMAL"
        assert result.plans[0].plan == reference.plans[0].plan


def test_as_spec_is_as_strict_as_load_spec():
    assert as_spec(load_spec(LLAMA)) == load_spec(LLAMA)
    with pytest.raises(SpecError, match=r"^model\.num_layers: Input should be greater than 0"):
        as_spec(edited(llama(), model={"num_layers": 0}))
    with pytest.raises(SpecError, match=r"model\.num_layer: unknown key \(did you mean 'num_layers'\?\)"):
        as_spec(edited(llama(), model={"num_layer": 80}))
    with pytest.raises(SpecError, match="got int"):
        as_spec(42)
    with pytest.raises(SpecError, match="got list"):
        as_spec([llama()])
    with pytest.raises(SpecError, match="file not found"):
        api.optimize("no-such-spec.yaml")


def test_evaluate_accepts_a_spec_path_or_dict_and_a_plan_dict():
    data = edited(llama(), top={"plan": {"tp": 8, "pp": 4}})
    by_dict = api.evaluate(data)
    assert by_dict.plan.tp == 8 and by_dict.plan.pp == 4
    assert api.evaluate(LLAMA, {"tp": 8, "pp": 4}) == by_dict
    with pytest.raises(PlanError, match=r"^plan\.tp: Input should be greater than 0"):
        api.evaluate(LLAMA, {"tp": 0})


def test_evaluate_without_a_plan_is_an_error(tmp_path: Path):
    """Issue 9: `evaluate` of a spec without `plan:` evaluated TP1 PP1 and printed INFEASIBLE with exit 0."""
    one_error_line(run("evaluate", LLAMA), "plan: ", "no plan")
    one_error_line(run("evaluate", LLAMA, "--format", "json"), "plan: ")
    with pytest.raises(PlanError, match="^plan: ") as info:
        evaluate(load_spec(LLAMA))
    assert info.value.field == "plan"
    with pytest.raises(PlanError, match="^plan: "):
        api.evaluate(LLAMA)
    # an explicit empty plan still means every default
    assert run("evaluate", write(tmp_path, edited(llama(), top={"plan": {}}))).exit_code == 0


# ------------------------------------------------------------------------------- default stage split


def vpp_spec(num_layers: int) -> dict[str, Any]:
    return edited(llama(), model={"num_layers": num_layers}, cluster={"num_gpus": 128},
                  top={"plan": {"tp": 8, "pp": 16, "vpp": 2, "schedule": "interleaved"}})


def test_default_stage_layers_honour_vpp(tmp_path: Path):
    """Issue 9: pp 16, vpp 2, 126 layers failed with 'stage_layers[0] = 7 must be divisible by vpp'."""
    result = run("evaluate", write(tmp_path, vpp_spec(126)), "--format", "json")
    assert result.exit_code == 0, result.stderr
    layers = json.loads(result.stdout)["plans"][0]["plan"]["stage_layers"]
    assert len(layers) == 16 and sum(layers) == 126 and all(n % 2 == 0 and n > 0 for n in layers)
    assert max(layers) - min(layers) <= 2  # as even as whole chunks allow


def test_default_stage_layers_need_whole_chunks(tmp_path: Path):
    one_error_line(run("evaluate", write(tmp_path, vpp_spec(125))), "plan.vpp: ", "multiple of vpp (2)")
    one_error_line(run("evaluate", write(tmp_path, vpp_spec(30))), "plan.pp: ", "pp·vpp = 32")


# --------------------------------------------------------------------------- silent spec cases


def test_partial_nodes_are_an_error(tmp_path: Path):
    """Issue 9: gpus_per_node 3 with 64 GPUs was silently accepted."""
    data = edited(llama(), cluster={"gpus_per_node": 3})
    one_error_line(run("validate", write(tmp_path, data)), "cluster.num_gpus: ", "gpus_per_node = 3", "multiple of 3")
    with pytest.raises(SpecError, match=r"^cluster\.num_gpus: "):
        spec_from_data(data)
    # part of one node is a cluster
    assert run("validate", write(tmp_path, edited(llama(), cluster={"num_gpus": 4}))).exit_code == 0


def test_two_targets_are_an_error(tmp_path: Path):
    """Issue 9: both target_step_time_s and target_tokens_per_s were accepted (one was ignored)."""
    data = edited(llama(), top={"objective": "min_gpus", "target_step_time_s": 10.0, "target_tokens_per_s": 1e6})
    one_error_line(run("validate", write(tmp_path, data)), "target_tokens_per_s: ", "not both")


@pytest.mark.parametrize("name", ["ep", "etp"])
def test_expert_parallel_search_on_a_dense_model_is_an_error(tmp_path: Path, name: str):
    """Issue 9: search.ep on a dense model was accepted."""
    one_error_line(run("validate", write(tmp_path, edited(llama(), search={name: [2, 4]}))), f"search.{name}: ",
                   "MoE")
    assert run("validate", write(tmp_path, edited(llama(), search={name: [1]}))).exit_code == 0  # the only value


def test_max_num_gpus_outside_min_gpus_is_a_warning_on_stderr(tmp_path: Path):
    """Issue 9: search.max_num_gpus under max_throughput was silently ignored."""
    path = write(tmp_path, edited(llama(), search={"max_num_gpus": 128}))
    result = run("optimize", path, "--method", "exhaustive", "--format", "json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["status"] == "OPTIMAL"  # stdout stays JSON
    warnings = result.stderr.splitlines()
    assert len(warnings) == 1 and warnings[0].startswith("warning: search.max_num_gpus: ignored under objective "
                                                         "max_throughput"), result.stderr
    validate = run("validate", path)
    assert validate.stdout.strip() == "ok" and validate.stderr.startswith("warning: search.max_num_gpus")
    # the GPU-count frontier reads it: no warning then
    assert spec_warnings(load_spec(path), pareto="gpus") == []
    assert spec_warnings(load_spec(LLAMA)) == []


def test_targets_outside_min_gpus_are_warnings():
    spec = as_spec(edited(llama(), top={"target_step_time_s": 5.0}))
    assert spec_warnings(spec) == ["target_step_time_s: ignored under objective max_throughput (only objective "
                                   "min_gpus meets a target)"]


# ------------------------------------------------------------------------------------- size limits


def test_huge_seq_len_is_an_error_not_an_internal_error(tmp_path: Path):
    """Issue 9: seq_len 1099511627776 gave 'internal error (TypeError)' with exit 1."""
    path = write(tmp_path, edited(llama(), training={"seq_len": 1099511627776}))
    for command in ("validate", "optimize"):
        one_error_line(run(command, path), "training.seq_len: ", "out of range", "16777216 (2**24)")


LIMITS = [  # (section, field, documented maximum)
    ("model", "num_layers", spec_module.MAX_NUM_LAYERS),
    ("model", "hidden_size", spec_module.MAX_HIDDEN_SIZE),
    ("model", "ffn_hidden_size", spec_module.MAX_HIDDEN_SIZE),
    ("model", "vocab_size", spec_module.MAX_VOCAB_SIZE),
    ("model", "num_attention_heads", spec_module.MAX_ATTENTION_HEADS),
    ("training", "seq_len", spec_module.MAX_SEQ_LEN),
    ("training", "global_batch_size", spec_module.MAX_GLOBAL_BATCH_SIZE),
    ("cluster", "num_gpus", spec_module.MAX_NUM_GPUS),
    ("cluster", "gpus_per_node", spec_module.MAX_GPUS_PER_NODE),
    ("cluster", "memory_gib", spec_module.MAX_MEMORY_GIB),
    ("cluster", "inter_node_bandwidth_gbps", spec_module.MAX_BANDWIDTH_GBPS),
    ("search", "max_num_gpus", spec_module.MAX_NUM_GPUS),
]


@pytest.mark.parametrize("section, field, limit", LIMITS, ids=lambda v: v if isinstance(v, str) else "")
def test_documented_size_limits(section: str, field: str, limit: float):
    """The maximum validates (shapes adjusted to stay consistent); one above is an error naming the field."""
    def with_value(value):
        data = edited(llama(), **{section: {field: value}})
        if field == "num_attention_heads":
            data["model"].update(num_kv_heads=value, head_dim=128)
        if field == "gpus_per_node":
            data["cluster"]["num_gpus"] = int(value)
        return data
    assert getattr(spec_from_data(with_value(limit)), section).model_dump()[field] == limit
    above = limit + 1 if isinstance(limit, int) else limit * 2
    with pytest.raises(SpecError, match=rf"^{section}\.{field}: .* is out of range: the supported maximum is "):
        spec_from_data(with_value(above))


def test_the_issue_sizes_stay_legal():
    """The issue's property tests go to 1M GPUs, 1M layers and 10**7 sequences: all must validate."""
    spec_from_data(edited(llama(), model={"num_layers": 10**6}, training={"global_batch_size": 10**7},
                          cluster={"num_gpus": 2**20}))


def test_plan_and_search_values_are_bounded():
    with pytest.raises(SpecError, match=r"^search\.tp: .* out of range"):
        spec_from_data(edited(llama(), search={"tp": [8, 2**21]}))
    with pytest.raises(SpecError, match=r"^plan\.num_microbatches: .* out of range"):
        spec_from_data(edited(llama(), top={"plan": {"num_microbatches": 10**9}}))
    with pytest.raises(SpecError, match=r"^cluster\.memory_gib: must be a finite number"):
        spec_from_data(edited(llama(), cluster={"memory_gib": float("inf")}))
    assert PlanSpec(tp=8).tp == 8


TINY_AT_MAX_SEQ = {
    "model": {"name": "tiny", "num_layers": 4, "hidden_size": 1024, "ffn_hidden_size": 4096,
              "num_attention_heads": 16, "vocab_size": 32000},
    "training": {"seq_len": spec_module.MAX_SEQ_LEN, "global_batch_size": 8},
    "cluster": {"gpu": "H100", "num_gpus": 8},
}


@pytest.mark.parametrize("method", ["exhaustive", "cpsat"])  # cpsat overflowed int64 here before the per-problem scale
def test_the_largest_legal_seq_len_plans_without_an_internal_error(method: str):
    """A spec that validates never reaches an internal error: 'nothing fits' is an answer."""
    result = optimize(as_spec(TINY_AT_MAX_SEQ), method=method, controls=SolverControls(time_limit_s=10))
    assert result.status in ("OPTIMAL", "FEASIBLE", "INFEASIBLE", "UNKNOWN")


@pytest.mark.parametrize("args, fragment", [
    (("optimize", LLAMA, "--top", "abc"), "'--top'"),
    (("optimize", LLAMA, "--workers", "1.5"), "'--workers'"),
    (("optimize", LLAMA, "--method", "gurobi"), "'--method'"),
    (("evaluate", LLAMA, "--format", "xml"), "'--format'"),
    (("evaluate",), "SPEC.yaml"),
    (("no-such-command",), "no-such-command"),
])
def test_usage_errors_are_one_line(args: tuple, fragment: str):
    """A value the CLI framework cannot parse is bad input like any other: exit 2 and one line, not a usage screen."""
    one_error_line(run(*args), fragment)
