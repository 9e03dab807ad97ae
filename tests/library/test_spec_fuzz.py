"""Property tests: no input text makes spec loading, evaluation or the CLI raise anything but a clean error.

``load_spec`` may only raise ``SpecError``; ``evaluate_spec`` only ``SpecError``/``PlanError``; a
successful evaluation always serializes to strict JSON and renders; ``solver-cli validate/evaluate``
always exit 0 or 2, and on 2 print exactly one ``error: ...`` line on stderr; any ``solver-cli
optimize`` option values give exit 2 with one line, and ``check_optimize_arguments`` raises only
``ArgumentError``.
"""

from __future__ import annotations

import copy
import io
import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich.console import Console
from typer.testing import CliRunner

from parplan.client.cli import app
from parplan.library.evaluation import COST_MODEL_FAILED, evaluate_spec
from parplan.client.report import evaluation_to_dict, render_evaluation, to_json
from parplan.library.spec_io import SpecError, load_spec, parse_spec, spec_from_data
from parplan.costmodel.spec.assumptions import Assumptions
from parplan.costmodel.errors import ArgumentError
from parplan.costmodel.evaluation.evaluate import PlanError
from parplan.costmodel.spec.spec import PlanSpec
from parplan.solver.arguments import check_optimize_arguments

from tests.conftest import sized

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
BASES = {p.name: yaml.safe_load(p.read_text()) for p in sorted(EXAMPLES.glob("*.yaml"))}
# a small MoE spec whose default plan is legal, so mutations reach the MoE paths of the cost model
BASES["small-moe"] = {
    "model": {"name": "tiny-moe", "num_layers": 8, "hidden_size": 1024, "ffn_hidden_size": 4096,
              "num_attention_heads": 16, "num_kv_heads": 4, "vocab_size": 32000,
              "moe": {"num_experts": 16, "top_k": 2, "expert_ffn_hidden_size": 512, "num_shared_experts": 1,
                      "first_dense_layers": 1}},
    "training": {"seq_len": 4096, "global_batch_size": 64, "precision": "fp8"},
    "cluster": {"gpu": "H100", "num_gpus": 16, "gpus_per_node": 8},
    "plan": {"tp": 2, "pp": 2, "ep": 4, "schedule": "dualpipe", "recompute": "full", "recompute_layers": [1, 1]},
}

# example counts: about a third of the thorough profile's in the default run (tests/conftest.py: sized)
SETTINGS = dict(deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow,
                                                                          HealthCheck.function_scoped_fixture])
MARKER = "internal error"  # load_spec's last-resort message: a handler is missing if it ever shows


def check_message(err: Exception) -> None:
    text = str(err)
    assert text and "\n" not in text and "\r" not in text and len(text.splitlines()) == 1, repr(text)
    assert MARKER not in text, text
    assert COST_MODEL_FAILED not in text, text  # an arithmetic error inside the cost model: guard or fix it


def load_and_evaluate(source: Any, render: bool = False) -> None:
    """The library pipeline behind `solver-cli evaluate`; only clean errors may escape.

    ``source`` is YAML text (through ``load_spec``) or already-parsed data (through ``spec_from_data``,
    which skips the YAML round trip that dominates the run time)."""
    try:
        spec = load_spec(source) if isinstance(source, str) else spec_from_data(source)
    except SpecError as err:
        check_message(err)
        return
    try:  # a spec without `plan:` is evaluated at every default (`plan: {}`), so those cost-model paths run too
        evaluation = evaluate_spec(spec, spec.plan or PlanSpec())
    except (SpecError, PlanError) as err:
        check_message(err)
        return
    data = evaluation_to_dict(evaluation)
    assert data["status"] in ("FEASIBLE", "INFEASIBLE")
    json.loads(to_json(data))  # strict: no NaN / Infinity
    metrics = data["plans"][0]["metrics"]
    assert all(math.isfinite(v) for v in metrics["breakdown_s"].values())
    assert len(metrics["stage_memory_gib"]) == len(evaluation.stages)
    if render:  # rich rendering costs ~30 ms: done for a sample only
        render_evaluation(evaluation, Console(file=io.StringIO(), width=100), spec=spec)


# ------------------------------------------------------------------------------------- strategies

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20),
    st.sampled_from([0, -1, 1, 2, 3, 7, 8, 64, 10**6, 2**16, 2**20, 2**24, 10**8, 2**31, 2**53, 2**53 + 1, 2**63, 10**18, 10**400, -(10**18),
                     0.0, -0.0, 0.5, 1e-320, 1e308, float("inf"), float("-inf"), float("nan"),
                     "", "1f1b", "full", "H100", "bf16", "fp8", "none", "textbook", "80", "true", "null"]),
)
keys = st.one_of(st.text(max_size=12), st.sampled_from(["model", "training", "cluster", "plan", "assumptions",
                                                        "search", "moe", "tp", "pp", "num_layers", "preset"]),
                 st.integers(-3, 3), st.none(), st.booleans())
nested = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(keys, inner, max_size=4)), max_leaves=12)

nasty_values = st.one_of(
    scalars,
    st.lists(scalars, max_size=4),
    st.dictionaries(st.text(max_size=8), scalars, max_size=3),
    st.integers(min_value=-(2**70), max_value=2**70),
)


def paths(data: Any, prefix: tuple = ()) -> list[tuple]:
    out = []
    if isinstance(data, dict):
        for k, v in data.items():
            out.append(prefix + (k,))
            out.extend(paths(v, prefix + (k,)))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            out.append(prefix + (i,))
            out.extend(paths(v, prefix + (i,)))
    return out


def containers(data: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix] if isinstance(data, dict) else []
    if isinstance(data, dict):
        for k, v in data.items():
            out.extend(containers(v, prefix + (k,)))
    return out


def get(data: Any, path: tuple) -> Any:
    for p in path:
        data = data[p]
    return data


# sampled_from leans towards early entries: good values first, a few bad ones at the end
small_ints = st.sampled_from([1, 2, 4, 8, 1, 2, 4, 8, 16, 32, 64, 128] * 4 + [0, -1, 3, 5, 10**9, 2**40, 2**53])


@st.composite
def plan_sections(draw, num_layers: int = 80) -> dict:
    """Mostly well-typed plans (so they reach the cost model), some ill-typed or inconsistent ones."""
    plan: dict[str, Any] = {}
    for key in ("tp", "cp", "ep", "etp", "micro_batch_size", "vpp"):
        if draw(st.booleans()):
            plan[key] = draw(small_ints)
    pp = draw(st.one_of(st.sampled_from([1, 2, 4, 8]), small_ints))
    plan["pp"] = pp
    if draw(st.integers(0, 4)) == 0:
        plan["dp"] = draw(small_ints)
    if draw(st.integers(0, 4)) == 0:
        plan["num_microbatches"] = draw(small_ints)
    if draw(st.booleans()):
        plan["schedule"] = draw(st.sampled_from(["1f1b", "interleaved", "zb-h1", "dualpipe"] * 3 + ["gpipe"]))
    layer_choice = draw(st.integers(0, 3))
    layers: list[int] | None = None
    if layer_choice == 1 and 0 < pp <= num_layers and pp <= 64:  # a random partition of the layers
        cuts = sorted(draw(st.lists(st.integers(1, num_layers - 1), min_size=pp - 1, max_size=pp - 1, unique=True))) \
            if pp > 1 and num_layers > pp else list(range(1, pp))
        bounds = [0, *cuts, num_layers]
        layers = [b - a for a, b in zip(bounds, bounds[1:])]
    elif layer_choice == 2:
        layers = draw(st.lists(st.integers(-1, 90), max_size=9))
    if layers is not None:
        plan["stage_layers"] = layers
    if draw(st.booleans()):
        plan["recompute"] = draw(st.sampled_from(["none", "selective", "full", "full"] * 3 + ["some"]))
        if plan["recompute"] == "full" and draw(st.booleans()):
            base = layers if layers is not None and len(layers) <= 64 else [num_layers // max(1, min(pp, 64))] * min(max(pp, 0), 64)
            plan["recompute_layers"] = [draw(st.integers(-1, max(0, n))) for n in base]
    if draw(st.integers(0, 3)) == 0:
        plan["zero_stage"] = draw(st.sampled_from([0, 1, 2, 3] * 3 + [-1, 4]))
    if draw(st.integers(0, 3)) == 0:
        plan["sequence_parallel"] = draw(st.booleans())
    return plan


def _knob_strategy(name: str):
    field = Assumptions.model_fields[name]
    annotation = field.annotation
    if annotation is bool:
        return st.booleans()
    if annotation is int:
        return st.one_of(st.integers(1, 8192), st.sampled_from([0, -1, 2**53]))
    choices = getattr(annotation, "__args__", ())
    if choices and all(isinstance(c, str) for c in choices):  # Literal[...] knobs: a valid value or junk
        return st.one_of(st.sampled_from(choices), st.sampled_from(["", "other", 1]))
    typical = st.floats(min_value=0.0, max_value=1.0) if field.default is not None and 0 < field.default <= 1 \
        else st.floats(min_value=0.0, max_value=64.0)
    return st.one_of(typical, typical, typical, typical, st.sampled_from([0.0, 1e-320, 1e-9, 1e9, 1e308, -1.0, 2.0]),
                     st.none())


assumption_sections = st.fixed_dictionaries(
    {}, optional={"preset": st.sampled_from(["default", "textbook"] * 4 + ["other"]),
                  **{name: _knob_strategy(name) for name in Assumptions.model_fields}})


@st.composite
def mutated_specs(draw) -> dict:
    data = copy.deepcopy(BASES[draw(st.sampled_from(sorted(BASES)))])
    for _ in range(draw(st.integers(1, 3))):
        action = draw(st.sampled_from(["delete", "set", "set", "add", "plan", "plan", "assumptions", "cluster"]))
        if action in ("delete", "set"):
            options = paths(data)
            if not options:
                continue
            path = draw(st.sampled_from(options))
            parent = get(data, path[:-1])
            if action == "delete":
                del parent[path[-1]]
            else:
                parent[path[-1]] = draw(nasty_values)
        elif action == "add":
            where = draw(st.sampled_from(containers(data)))
            get(data, where)[draw(keys)] = draw(nasty_values)
        elif action == "plan":
            data["plan"] = draw(plan_sections())
        elif action == "assumptions":
            data["assumptions"] = draw(assumption_sections)
        elif action == "cluster" and isinstance(data.get("cluster"), dict):
            field = draw(st.sampled_from(["memory_gib", "peak_bf16_tflops", "peak_fp8_tflops", "nvlink_domain_size",
                                          "intra_node_bandwidth_gbps", "inter_node_bandwidth_gbps",
                                          "intra_node_latency_us", "inter_node_latency_us", "gpus_per_node",
                                          "num_gpus"]))
            data["cluster"][field] = draw(st.one_of(small_ints, st.floats(min_value=1e-300, max_value=1e300),
                                                    nasty_values))
    return data


_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def dump(data: Any) -> str:
    return yaml.dump(data, Dumper=_DUMPER, sort_keys=False, allow_unicode=True)


# ------------------------------------------------------------------------------------------ tests


@settings(max_examples=sized(600, 2000), **SETTINGS)
@given(st.text(max_size=300))
def test_random_text(text: str):
    try:
        parse_spec(text)
    except SpecError as err:
        check_message(err)


@settings(max_examples=sized(200, 500), **SETTINGS)
@given(st.binary(max_size=200))
def test_random_bytes(raw: bytes):
    try:
        parse_spec(raw)
    except SpecError as err:
        check_message(err)


@settings(max_examples=sized(150, 400), **SETTINGS)
@given(st.lists(st.sampled_from(["model:", "  num_layers: 80", "- 1", "  - [", "]", "{", "}", "a: &x [1]",
                                 "b: *x", "<<: *x", "? [1]", ": 2", "'", '"', "|", ">", "---", "...", "%YAML 1.1",
                                 "!!binary x", "!!python/tuple [1]", "\t", "#", "x: 1e400", "plan: {tp: 4}",
                                 "  tp: .inf", "  pp: -.nan", "  y: 0x1F", "  z: 2001-12-14", "cluster: ~"]),
                max_size=12))
def test_yaml_fragments(lines: list[str]):
    load_and_evaluate("\n".join(lines) + "\n")


@settings(max_examples=sized(200, 600), **SETTINGS)
@given(nested)
def test_random_structures(data: Any):
    load_and_evaluate(data)
    try:
        text = dump(data)
    except yaml.YAMLError:
        return
    load_and_evaluate(text)


@settings(max_examples=sized(500, 1700), **SETTINGS)
@given(mutated_specs())
def test_mutated_specs(data: dict):
    load_and_evaluate(data)


@settings(max_examples=sized(150, 400), **SETTINGS)
@given(mutated_specs())
def test_mutated_specs_yaml(data: dict):
    load_and_evaluate(dump(data))


@settings(max_examples=sized(40, 80), **SETTINGS)
@given(mutated_specs())
def test_mutated_specs_render(data: dict):
    load_and_evaluate(dump(data), render=True)


@settings(max_examples=sized(450, 1400), **SETTINGS)
@given(st.sampled_from(sorted(BASES)).flatmap(
    lambda base: st.tuples(st.just(base), plan_sections(BASES[base]["model"]["num_layers"]))),
    st.one_of(st.none(), st.none(), assumption_sections))
def test_random_plans(base_and_plan: tuple[str, dict], assumptions: dict | None):
    base, plan = base_and_plan
    data = copy.deepcopy(BASES[base])
    data["plan"] = plan
    if assumptions is not None:
        data["assumptions"] = assumptions
    load_and_evaluate(data)


runner = CliRunner()


def check_cli(args: list[str], input_text: str | None = None) -> None:
    result = runner.invoke(app, args, input=input_text)
    assert result.exit_code in (0, 2), (args, result.exit_code, result.stderr, result.exception)
    if result.exit_code == 2:
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
        assert MARKER not in lines[0] and COST_MODEL_FAILED not in lines[0]
    elif "json" in args:
        json.loads(result.stdout)


@pytest.fixture(scope="module")
def spec_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


@settings(max_examples=sized(60, 150), **SETTINGS)
@given(st.one_of(mutated_specs(), mutated_specs(), nested), st.sampled_from(["validate", "evaluate", "json"]))
def test_cli_never_crashes(spec_dir: Path, data: Any, command: str):
    path = spec_dir / "spec.yaml"
    if command != "validate" and isinstance(data, dict) and "plan" not in data:
        data = {**data, "plan": {}}  # evaluate needs a plan: every default, as before plan-less specs were refused
    try:
        path.write_text(dump(data), encoding="utf-8")
    except (yaml.YAMLError, UnicodeEncodeError):
        return
    args = ["evaluate", str(path), "--format", "json"] if command == "json" else [command, str(path)]
    check_cli(args)


@settings(max_examples=sized(50, 100), **SETTINGS)
@given(st.text(max_size=200), st.sampled_from(["validate", "evaluate"]))
def test_cli_random_stdin(text: str, command: str):
    check_cli([command, "-"], input_text=text)


option_values = st.one_of(st.integers(min_value=-(10**25), max_value=10**25).map(str), st.text(max_size=12),
                          st.floats(allow_nan=True, allow_infinity=True).map(repr),
                          st.sampled_from(["0", "1", "100", "101", "256", "257", "2147483647", "2147483648", "-1",
                                           "1e9", "inf", "-inf", "nan", "0.001", "86400", "86400.5", ""]))


@settings(max_examples=sized(60, 150), **SETTINGS)
@given(st.lists(st.tuples(st.sampled_from(["--top", "--workers", "--seed", "--time-limit", "--method", "--pareto"]),
                          option_values), min_size=1, max_size=3))
def test_cli_optimize_options_never_crash(spec_dir: Path, options: list[tuple[str, str]]):
    """Any option values: exit 2 with one line (an option out of range, or the missing spec once they pass)."""
    args = ["optimize", str(spec_dir / "missing.yaml")]
    for option, value in options:
        args += [option, value]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, (args, result.exit_code, result.stderr, result.exception)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), (args, result.stderr)
    assert MARKER not in lines[0]


@settings(max_examples=sized(150, 400), **SETTINGS)
@given(st.fixed_dictionaries({name: st.one_of(scalars, st.lists(scalars, max_size=2))
                              for name in ("top_k", "method", "pareto", "time_limit_s", "workers", "seed",
                                           "deterministic")}))
def test_optimize_arguments_raise_only_argument_error(arguments: dict):
    try:
        check_optimize_arguments(**arguments)
    except ArgumentError as err:
        check_message(err)
        assert str(err).startswith(f"{err.argument}: ")
