"""The cost model's and the frameworks' house rules (issue 18), checked on the source as
``tests/solver/test_solver_house.py`` does for solver/:

* ``costmodel/`` is the bottom floor: of the third-party packages it imports only NumPy, pydantic and PyYAML (that
  it imports no other parplan package is the import-linter contract's, tests/test_layers.py).
  The framework rules and the ``Profile`` type are the cost model's (costmodel/spec/framework_rules.py); the lookup of
  profile data is the loader's (frameworks/loader.py), which binds the spec's profiles to the Spec as data
  (costmodel/spec/framework_binding.py): a Spec validated without it is refused;
* in ``costmodel/``, ``frameworks/``, ``library/``, ``wire/``, ``client/`` and ``server/`` no function is longer
  than 80 lines and no module longer than 500 lines, data modules (profile data and citations) excepted (solver/: ``tests/solver/test_solver_house.py``);
* ``Plan`` and ``Choice`` share one degree vocabulary and convert both ways.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from parplan.costmodel.spec.degrees import Choice, ParallelDims
from parplan.costmodel.schedules.schedule import PipelineUnits, Schedule
from parplan.costmodel.spec.spec import ALL_SCHEDULES, SCHEDULES, Plan, Spec
from parplan.frameworks.loader import retarget, validate_spec
from parplan.frameworks.profile_citations import FRAMEWORKS as FRAMEWORK_NAMES

ROOT = Path(__file__).resolve().parents[2]
COSTMODEL = sorted((ROOT / "costmodel").rglob("*.py"))  # the root and its rooms (sub-packages)
FRAMEWORKS = sorted((ROOT / "frameworks").glob("*.py"))
CLIENT_AND_SERVER = [path for folder in ("library", "wire", "client", "server")
                     for path in sorted((ROOT / folder).rglob("*.py"))]
THIRD_PARTY = {"numpy", "pydantic", "yaml"}
MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 500
DATA_MODULES = {"frameworks/profile_citations.py", "frameworks/profile_data.py"}


def _imports(path: Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append(node.module)
    return out


def _allowed(module: str) -> bool:
    top = module.split(".")[0]
    return module.startswith("parplan.") or top in THIRD_PARTY or top in sys.stdlib_module_names or top == "__future__"


def test_costmodel_imports_only_three_libraries():
    """Which ``parplan.`` packages it may import is the floors contract's (pyproject ``[tool.importlinter]``)."""
    other = {(_relative(p), m) for p in COSTMODEL for m in _imports(p) if not _allowed(m)}
    assert other == set(), "costmodel/ imports a library it does not declare"


def test_a_spec_is_validated_by_the_loader():
    """Without the loader in the validation context a Spec is refused (its framework unresolved), never evaluated
    without its framework's conventions; the loader's Spec carries its profiles, and a copy keeps them."""
    data = yaml.safe_load((ROOT / "examples" / "llama3-70b-64xh100.yaml").read_text())
    with pytest.raises(ValidationError, match="validated by the loader"):
        Spec.model_validate(data)
    spec = validate_spec(data)
    assert spec.framework == "megatron-core" and spec.bound_framework.profile.name == "megatron-core"
    assert spec.model_copy(update={"objective": "min_memory"}).bound_framework == spec.bound_framework
    assert retarget(spec, "any").bound_framework.profile is None
    assert [name for name, _ in spec.bound_framework.runs_on_profiles] == list(FRAMEWORK_NAMES)


def _relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


@pytest.mark.parametrize("path", COSTMODEL + FRAMEWORKS + CLIENT_AND_SERVER, ids=_relative)
def test_function_and_module_sizes(path):
    source = path.read_text()
    long = [f"{node.name}: {node.end_lineno - node.lineno + 1} lines" for node in ast.walk(ast.parse(source))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]
    assert long == []
    if _relative(path) not in DATA_MODULES:
        assert len(source.splitlines()) <= MAX_MODULE_LINES, f"{_relative(path)}: {len(source.splitlines())} lines"


def test_the_size_rules_see_client_and_server():
    """The sizes are checked in library/ (its sweep package too), wire/, client/ and server/ (issue 18 item 2)."""
    names = {_relative(p) for p in CLIENT_AND_SERVER}
    assert {"client/cli.py", "server/service.py", "library/sweep/run.py", "wire/convert.py"} <= names


def test_schedule_values_are_the_spec_strings():
    assert SCHEDULES == ("1f1b", "interleaved", "zb-h1", "dualpipe")
    assert ALL_SCHEDULES == SCHEDULES + ("dualpipev",)
    assert Schedule("zb-h1") is Schedule.ZB_H1 and Schedule.ZB_H1 == "zb-h1" and f"{Schedule.DUALPIPE}" == "dualpipe"


def test_pipeline_units_per_schedule():
    dual = PipelineUnits(Schedule.DUALPIPE, 8)
    assert (dual.count, dual.stages_per_unit, dual.stage_pairs[0], dual.stage_pairs[-1]) == (4, 2, (0, 7), (3, 4))
    assert dual.last_stage == 7 and dual.ends_on_unit_zero and dual.least_layers_per_unit == 2
    v = PipelineUnits(Schedule.DUALPIPEV, 4)
    assert (v.count, v.last_stage, v.chunks_per_stage, v.least_layers_per_unit) == (4, 0, 2, 2)
    inter = PipelineUnits(Schedule.INTERLEAVED, 4, vpp=3)
    assert (inter.count, inter.last_stage, inter.least_layers_per_unit, inter.ends_on_unit_zero) == (4, 3, 3, False)
    # the DualPipe units' sum weight is the rows' doubled (each unit stands for two mirrored ranks)
    assert dual.unit_bubble_weights(3.0, True) == (-3.0 / 7, 6.0 / 7)


def test_plan_and_choice_share_degrees_and_convert():
    plan = Plan(tp=2, cp=2, pp=2, dp=4, ep=4, etp=1, micro_batch_size=1, num_microbatches=8, vpp=2,
                schedule=Schedule.INTERLEAVED, stage_layers=[6, 6], recompute="full", recompute_layers=[2, 0],
                zero_stage=1, sequence_parallel=True, pipeline_layout=[[2, 4], [4, 2]], zero_replicas=2)
    c = plan.to_choice()
    assert (c.first_chunk_trim, c.last_chunk_trim) == (2, 2)
    for name in ("num_gpus", "model_parallel_size", "stage_ranks", "dense_dp", "expert_dp", "dense_shard",
                 "expert_shard", "sequence_parallel_on"):
        assert getattr(plan, name) == getattr(c, name), name
    assert (plan.num_gpus, plan.dense_dp, plan.expert_dp, plan.dense_shard) == (32, 8, 4, 4)
    back = Plan.from_choice(c, plan.stage_layers, plan.recompute_layers, plan.pipeline_layout)
    assert back == plan and isinstance(c, ParallelDims) and isinstance(c, Choice)
    assert Plan.from_choice(c, [6, 6], [0, 0], recompute="none").recompute == "none"
