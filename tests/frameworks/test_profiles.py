"""Framework profiles: the spec field, the memory conventions, the legal space, runs_on, and the planner
never returning a plan its framework cannot run (random small specs, exhaustive method, top-K included)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from pydantic import ValidationError
from typer.testing import CliRunner

from parplan.client.cli import app
from parplan.costmodel.schedules.schedule import Schedule
from parplan.costmodel.spec.assumptions import resolve_assumptions
from parplan.costmodel.evaluation.evaluate import evaluate
from parplan.costmodel.spec.spec import PlanSpec, Spec
from parplan.frameworks.profiles import (
    CITATIONS,
    FRAMEWORKS,
    UnknownFramework,
    choice_rule_violations,
    framework_violations,
    profile,
    runs_on,
    spec_profile,
    stage_rule_violations,
)
from parplan.solver.planner import optimize
from parplan.solver.space import SpaceOptions
from parplan.frameworks.loader import validate_spec

from tests.solver_checks import with_framework
from tests.conftest import small_specs

ROOT = Path(__file__).resolve().parents[2]
LLAMA = ROOT / "examples" / "llama3-70b-64xh100.yaml"
runner = CliRunner()


def _llama(**extra) -> Spec:
    data = yaml.safe_load(LLAMA.read_text())
    data.update(extra)
    return validate_spec(data)


def test_every_profile_cites_its_facts():
    for name in FRAMEWORKS:
        prof = profile(name)
        assert prof.citations and all(key in CITATIONS for key in prof.citations)
        assert all("@" in CITATIONS[key] or "benchmarks/runs.py" in CITATIONS[key] for key in prof.citations)


def test_framework_field_forms_and_versions():
    assert spec_profile(_llama(framework="any")) is None
    # omitted: Megatron-Core (issue 24.2) at the version its export writes for (issue 40: search, runs_on and export
    # apply one profile); any framework named without a version likewise; version main: the newest
    assert spec_profile(_llama()) is profile("megatron-core", "core_v0.15.3") is not profile("megatron-core")
    assert spec_profile(_llama(framework="torchtitan")) is profile("torchtitan", "v0.2.2")
    assert spec_profile(_llama(framework={"name": "megatron-core", "version": "main"})) is profile("megatron-core")
    assert _llama(assumptions={"preset": "textbook"}).framework == "any"  # the seeds' neutral conventions
    assert spec_profile(_llama(framework="megatron-core")).stage_split == "any"
    old = spec_profile(_llama(framework={"name": "megatron-core", "version": "0.12.1"}))
    assert old.stage_split == "first_last"  # before --pipeline-model-parallel-layout (core_v0.13.0)
    assert spec_profile(_llama(framework={"name": "torchtitan", "version": "v0.2.2"})).full_recompute_counts \
        == "all_or_every_nth"
    assert spec_profile(_llama(framework={"name": "torchtitan", "version": "main"})).full_recompute_counts == "all"
    with pytest.raises(ValidationError, match="framework"):
        _llama(framework="jax")
    with pytest.raises(ValidationError, match="predates"):
        _llama(framework={"name": "megatron-core", "version": "0.4"})
    with pytest.raises(UnknownFramework):
        profile("megatron-core", "banana")


def test_memory_conventions_under_the_users_assumptions():
    tt = resolve_assumptions(_llama(framework="torchtitan").assumptions)
    assert tt.pipeline_runtime == "torch" and tt.sequence_parallel_saves_gathered_inputs
    assert tt.selective_recompute_policy == "alternate_matmuls" and tt.logits_bytes_per_element == 16
    mine = _llama(framework="torchtitan", assumptions={"pipeline_runtime": "megatron", "preset": "textbook"})
    a = resolve_assumptions(mine.assumptions)
    assert a.pipeline_runtime == "megatron"  # the user's value wins
    assert a.activation_sbh_coefficient == 34.0  # the preset underlies both
    tp1 = _llama(framework="torchtitan", search={"tp": [1]})
    assert resolve_assumptions(tp1.assumptions).logits_bytes_per_element == 12
    ds = resolve_assumptions(_llama(framework="deepspeed").assumptions)
    assert ds.grad_reduce_bytes == 2.0


def test_search_pins_the_framework_cannot_run_are_spec_errors(tmp_path: Path):
    with pytest.raises(ValidationError, match="search.schedules"):
        _llama(framework="megatron-core", search={"schedules": ["zb-h1", "dualpipe"]})
    with pytest.raises(ValidationError, match="search.zero_stages"):
        _llama(framework="torchtitan", search={"zero_stages": [1]})
    data = yaml.safe_load(LLAMA.read_text())
    data["framework"] = "deepspeed"
    data["search"] = {"cp": [2]}
    path = tmp_path / "bad-framework.yaml"
    path.write_text(yaml.safe_dump(data))
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 2 and "search.cp" in (result.stderr or result.stdout)


def ds_split(spec) -> str:
    return SpaceOptions.from_spec(spec).stage_split


def test_space_is_intersected():
    opts = SpaceOptions.from_spec(_llama(framework="megatron-core"))
    assert opts.schedules == ("1f1b", "interleaved") and opts.uniform_recompute
    opts = SpaceOptions.from_spec(_llama(framework="deepspeed", search={"zero_stages": [1, 3]}))
    assert opts.schedules == ("1f1b",) and opts.zero_stages == (1, 3) and opts.cp == (1,)
    assert opts.sequence_parallel == (False,) and not opts.uneven_stages and opts.recompute == ("none", "full")
    opts = SpaceOptions.from_spec(_llama(framework={"name": "torchtitan", "version": "main"}))
    assert opts.zero_stages == (0, 2, 3) and opts.etp == (1,) and opts.uneven_stages
    opts = SpaceOptions.from_spec(_llama(framework="torchtitan"))  # v0.2.2, its export's: ETP 1 or TP
    assert opts.zero_stages == (0, 2, 3) and opts.etp is None and opts.uneven_stages
    old = SpaceOptions.from_spec(_llama(framework={"name": "megatron-core", "version": "0.12.0"}))
    assert old.uneven_stages and old.stage_split == "first_last"  # Megatron-Core < 0.13: first/last stages only
    assert opts.stage_split == "per_stage" and ds_split(_llama(framework="deepspeed")) == "even"
    ds = SpaceOptions.from_spec(_llama(framework="deepspeed"))
    assert ds.zero_stages_with_pp == (0, 1)


def test_evaluator_reports_what_the_framework_cannot_run():
    plan = PlanSpec(tp=4, pp=4, schedule="zb-h1", micro_batch_size=1, zero_stage=3)
    neutral = evaluate(_llama(framework="any"), plan)
    assert not [v for v in neutral.violations if "cannot" in v]
    assert neutral.runs_on == []  # no profiled framework runs ZB-H1 (torchtitan: only interleaved)
    mc = evaluate(_llama(framework="megatron-core"), plan)
    assert any("megatron-core cannot run schedule zb-h1" in v for v in mc.violations)
    ds = evaluate(_llama(framework="deepspeed"), PlanSpec(tp=4, pp=4, micro_batch_size=1, zero_stage=3,
                                                          sequence_parallel=False))
    assert any("ZeRO-3 with pipeline parallelism" in v for v in ds.violations)
    assert "deepspeed" not in ds.runs_on and "megatron-core" in ds.runs_on


def test_runs_on_rules_by_hand():
    base = evaluate(_llama(), PlanSpec(tp=8, pp=2, micro_batch_size=1, zero_stage=1, sequence_parallel=False)).plan
    assert runs_on(_llama(), base) == ["megatron-core", "megatron-bridge", "deepspeed"]  # torchtitan: no ZeRO-1
    interleaved = base.model_copy(update={"schedule": Schedule.INTERLEAVED, "vpp": 2, "num_microbatches": 64})
    assert runs_on(_llama(), interleaved) == ["megatron-core", "megatron-bridge"]
    fsdp = base.model_copy(update={"zero_stage": 3})
    # torchtitan is judged at v0.2.2, the version its export writes for: TP only with SP (the export switches it on)
    assert runs_on(_llama(), fsdp) == ["megatron-core", "megatron-bridge"]
    sp = fsdp.model_copy(update={"sequence_parallel": True})
    assert runs_on(_llama(), sp) == ["megatron-core", "megatron-bridge", "torchtitan"]
    assert runs_on(_llama(framework="torchtitan"), sp) == ["megatron-core", "megatron-bridge", "torchtitan"]
    tt = profile("torchtitan")
    assert choice_rule_violations(tt, base.model_copy(update={"zero_stage": 2})) == []


def test_runs_on_is_judged_at_the_exports_version():
    """Issue 40: a plan using what only Megatron-Core main runs (FP8 expert dispatch) is not listed for megatron-core,
    whose export writes core_v0.15.3 flags (it warns it cannot), even when the spec plans for main; and the
    megatron-core plans of a main spec without it are listed."""
    from tests import moe_schedule_cases as moe_dims

    main = {"name": "megatron-core", "version": "main"}
    spec = moe_dims.spec(moe_dims.MOE, precision="fp8", framework=main, search=dict(moe_fp8_dispatch=[True]))
    plans = [e.plan for e in optimize(spec, method="exhaustive", top_k=3).plans]
    assert plans and all(p.moe_fp8_dispatch for p in plans)
    assert all(framework_violations(profile("megatron-core"), p, spec.model) == [] for p in plans)  # main runs them
    assert all("megatron-core" not in runs_on(spec, p) for p in plans)  # its export (core_v0.15.3) would not
    off = [p.model_copy(update={"moe_fp8_dispatch": False}) for p in plans]
    assert all("megatron-core" in runs_on(spec, p) for p in off)


def test_recompute_count_rules():
    mc, tt, tt22, ds = (profile("megatron-core"), profile("torchtitan"), profile("torchtitan", "0.2.2"),
                        profile("deepspeed"))
    c = evaluate(_llama(), PlanSpec(tp=4, pp=4, micro_batch_size=1, recompute="full")).plan
    ok = lambda prof, layers, rc, v=1: not stage_rule_violations(  # noqa: E731
        prof, c.model_copy(update={"vpp": v}), layers, rc)
    assert ok(mc, [20] * 4, [3] * 4) and ok(mc, [18, 22, 22, 18], [18, 22, 22, 18])
    assert not ok(mc, [20] * 4, [3, 3, 2, 2])  # one --recompute-num-layers for every stage
    assert ok(mc, [18, 22, 22, 18], [18, 20, 20, 18])  # block N = 20: min(N, layers)
    assert ok(mc, [20] * 4, [6] * 4, v=2) and not ok(mc, [20] * 4, [5] * 4, v=2)  # N per chunk: 2 chunks x 3
    assert ok(tt, [20] * 4, [20] * 4) and not ok(tt, [20] * 4, [10] * 4)
    assert ok(tt22, [20] * 4, [10] * 4) and ok(tt22, [21, 20, 20, 19], [7, 6, 6, 6])  # every 3rd layer
    assert not ok(ds, [20] * 4, [19] * 4)


FRAMEWORK_SPECS = settings(max_examples=40, deadline=None, derandomize=True,
                           suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


@pytest.mark.parametrize("name", ["megatron-core", "torchtitan", "deepspeed"])
@FRAMEWORK_SPECS
@given(spec=small_specs())
def test_planner_returns_only_plans_the_framework_runs(name, spec):
    """Acceptance: with a framework given, no returned plan (top 3 included) uses a schedule, ZeRO stage,
    recompute granularity, CP/ETP/SP option or stage split that framework cannot run."""
    spec = with_framework(spec, name)
    prof = spec_profile(spec)
    result = optimize(spec, method="exhaustive", top_k=3)
    for e in result.plans:
        p = e.plan
        assert choice_rule_violations(prof, p) == [], (p, spec.search)
        split = [v for v in stage_rule_violations(prof, p, p.stage_layers, p.recompute_layers) if "recompute" not in v]
        assert split == [], (p, spec.search)
        assert not [v for v in e.violations if v.startswith(name)] or p.recompute == "full"


@pytest.mark.parametrize("name", ["megatron-core", "torchtitan"])
@FRAMEWORK_SPECS
@given(spec=small_specs())
def test_planner_recompute_counts_are_the_frameworks(name, spec):
    """The per-stage full-recompute counts too (Megatron: one --recompute-num-layers, via uniform_recompute)."""
    spec = with_framework(spec, name)
    prof = spec_profile(spec)
    for e in optimize(spec, method="exhaustive", top_k=3).plans:
        assert framework_violations(prof, e.plan) == [], e.plan
        assert name in e.runs_on


def test_torchtitan_70b_example_plan_runs_on_torchtitan():
    """Was a known gap (the solver chose 71 of 80 layers to recompute; torchtitan's full AC recomputes every layer):
    SpaceOptions.recompute_all_layers folds every layer's recomputation into the stage table."""
    best = optimize(_llama(framework="torchtitan"), method="exhaustive").plans[0]
    assert "torchtitan" in best.runs_on and not best.violations
    assert any(v.startswith("torchtitan cannot recompute") for v in best.violations) is False


EXAMPLES = ROOT / "examples"


@pytest.mark.parametrize("path, name", [
    (EXAMPLES / "llama3-70b-64xh100.yaml", "megatron-core"), (EXAMPLES / "llama3-70b-64xh100.yaml", "torchtitan"),
    (EXAMPLES / "seed-textbook-70b-8k.yaml", "megatron-core"),
    (EXAMPLES / "uneven-stages-large-vocab.yaml", "megatron-core"),
    (EXAMPLES / "deepseek-v3-2048xh800.yaml", "megatron-core"), (EXAMPLES / "deepseek-v3-2048xh800.yaml", "torchtitan"),
], ids=lambda v: v.stem if isinstance(v, Path) else v)
def test_examples_optimized_for_a_framework(path, name):
    """The examples' top 3 under a framework: nothing its framework cannot run (Megatron-Core: the whole plan;
    torchtitan: everything but the per-stage recompute counts, the known gap above)."""
    data = yaml.safe_load(path.read_text())
    data["framework"] = name
    if name == "torchtitan":  # torchtitan v0.2.2 has no MTP module (test_a_framework_without_mtp_refuses_an_mtp_model)
        data["model"]["num_mtp_layers"] = 0
    spec = validate_spec(data)
    prof = spec_profile(spec)
    result = optimize(spec, top_k=3)
    assert result.plans, result.status
    for e in result.plans:
        assert choice_rule_violations(prof, e.plan) == []
        if name == "megatron-core":
            assert framework_violations(prof, e.plan) == [] and name in e.runs_on


def test_cli_json_carries_runs_on(tmp_path: Path):
    data = yaml.safe_load(LLAMA.read_text())
    data["framework"] = "megatron-core"
    path = tmp_path / "mc.yaml"
    path.write_text(yaml.safe_dump(data))
    result = runner.invoke(app, ["optimize", str(path), "--top", "2", "-f", "json"])
    assert result.exit_code == 0, result.stderr

    plans = json.loads(result.stdout)["plans"]
    assert len(plans) == 2 and all("megatron-core" in p["runs_on"] for p in plans)
    assert all(p["plan"]["schedule"] in ("1f1b", "interleaved") for p in plans)
    table = runner.invoke(app, ["optimize", str(path), "--top", "2"])
    assert "runs on" in table.stdout and "mc mb" in table.stdout


def test_megatron_bridge_recipes_keep_bf16_gradients():
    """perf_recipes/_common.py:72-74: the Bridge 405B recipe on 1024 H100 fits in 80 GB with bf16 gradient buffers;
    Megatron-LM's fp32 main grads (the user's explicit value wins) add 2 bytes per parameter (before the issue-10
    terms were merged that no longer fit; with them it fits at 67.6 GiB)."""
    path = ROOT / "examples" / "llama31-405b-1024xh100-megatron-bridge-evaluate.yaml"
    data = yaml.safe_load(path.read_text())
    bridge = evaluate(validate_spec(data))
    # 62.5 GiB before the issue-10 cost-model terms were merged, 55.7 GiB with them: the FP8 recipe's saved linear
    # inputs in FP8 (fp8_activation_bytes 1: Transformer Engine saves the FP8-cast inputs for the backward GEMMs);
    # with them in BF16 the activations are the old 34.3 GiB on stage 1 again. Issue 20 item 2 adds 1.42 GiB per
    # stage of memory outside the tensor ledger (costmodel/memory/runtime_memory.py: NCCL 0.30, TE userbuffers 0.875 at
    # TP 8 / CP 2 / 8K, cuBLAS workspaces 0.25): 55.7 -> 57.1 and 62.5 -> 63.9
    assert bridge.metrics.fits and bridge.metrics.peak_memory_gib == pytest.approx(57.1, abs=0.5)
    assert bridge.stages[0].runtime_buffers_gib == pytest.approx(1.42, abs=0.01)
    bf16 = evaluate(validate_spec({**data, "assumptions": {"fp8_activation_bytes": 2.0}}))
    assert bf16.metrics.peak_memory_gib == pytest.approx(63.9, abs=0.5)
    data["assumptions"] = {"grad_bytes": 4.0}
    fp32 = evaluate(validate_spec(data))
    # 2 bytes more per parameter: 16 layers of (2h² + 2h·1024 + 3h·f) parameters over TP 8 on stage 1
    h, f = 16384, 53248
    per_gpu_params = 16 * (2 * h * h + 2 * h * 1024 + 3 * h * f) / 8
    extra_gib = fp32.stages[1].model_states_gib - bridge.stages[1].model_states_gib
    assert extra_gib == pytest.approx(2 * per_gpu_params / 2**30, rel=0.01)


@pytest.mark.parametrize("method", ["cpsat", "exhaustive"])
def test_megatron_recompute_counts_per_chunk_long_sequences(method):
    """Issue 24.7: Llama-3 70B at seq 131072, 32 sequences, 128 H100 under megatron-core returned interleaved
    plans recomputing [1, 1] / [2, 2] layers with vpp 20 / 10 (Megatron's --recompute-num-layers is per chunk:
    a stage of vpp chunks recomputes a multiple of vpp). Every plan of the top 3 now runs on Megatron-Core."""
    spec = _llama(training={"seq_len": 131072, "global_batch_size": 32, "precision": "bf16"},
                  cluster={"gpu": "H100-SXM-80GB", "num_gpus": 128, "gpus_per_node": 8}, framework="megatron-core")
    prof = spec_profile(spec)
    result = optimize(spec, method=method, top_k=3)
    assert result.status == "OPTIMAL" and len(result.plans) == 3
    for e in result.plans:
        p = e.plan
        assert framework_violations(prof, p) == [] and "megatron-core" in e.runs_on, p
        if p.recompute == "full":
            assert all(r % max(1, p.vpp) == 0 for r in p.recompute_layers), p


def test_default_framework_is_megatron_core_and_any_is_the_research_space(tmp_path: Path):
    """Issue 24.2: omitted, `framework` is Megatron-Core (at the version its export writes for, issue 40), so the main
    example's best plan runs on it; `framework: any` still reaches ZB-H1/DualPipe; the JSON lists the best plan on
    each other framework."""
    data = yaml.safe_load(LLAMA.read_text())
    assert "framework" not in data and validate_spec(data).framework == "megatron-core"
    assert spec_profile(validate_spec(data)) is profile("megatron-core", "core_v0.15.3")
    assert spec_profile(validate_spec({**data, "framework": "any"})) is None
    path = tmp_path / "default.yaml"
    path.write_text(yaml.safe_dump(data))
    result = runner.invoke(app, ["optimize", str(path), "-f", "json", "--deterministic"])
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    best = out["plans"][0]
    assert "megatron-core" in best["runs_on"] and best["violations"] == []
    others = {e["framework"]: e for e in out["per_framework"]}
    assert list(others) == ["megatron-bridge", "torchtitan", "deepspeed", "any"]
    for name, e in others.items():
        assert e["status"] == "OPTIMAL" and e["vs_best"] == pytest.approx(e["step_time_s"] / best["metrics"]["step_time_s"] - 1)
        if name != "any":
            assert name in e["runs_on"]
    assert others["any"]["plan"]["schedule"] in ("zb-h1", "dualpipe", "dualpipev")
    assert others["any"]["vs_best"] <= 0  # the research space contains Megatron-Core's
    # why each differs: Bridge is faster from its bf16 gradients (a convention), then its plan's choices
    bridge = others["megatron-bridge"]["differs"]
    mine, theirs = best["plan"], others["megatron-bridge"]["plan"]
    assert bridge[0] == "grad_bytes 4 -> 2", bridge  # the conventions first, then each plan degree that differs
    for key in ("tp", "cp", "pp", "dp"):
        assert (f"{key.upper()} {mine[key]} -> {theirs[key]}" in bridge) == (mine[key] != theirs[key]), (key, bridge)
    free_schedule = others["any"]["plan"]["schedule"]
    assert any(d.startswith(f"schedule {mine['schedule']} -> {free_schedule}") for d in others["any"]["differs"])
    assert not any(d.startswith(("grad_bytes", "grad_reduce_bytes")) for d in others["any"]["differs"])
    assert any(d.startswith("ZeRO stage 1 -> ") for d in others["torchtitan"]["differs"])
    table = runner.invoke(app, ["optimize", str(path), "--deterministic"])
    assert "Best on each other framework" in table.stdout and "any: -" in table.stdout
    assert "differs in gradient buffer precision (bytes per element) (grad_bytes 4 -> 2)" in " ".join(table.stdout.split())
    free = optimize(validate_spec({**data, "framework": "any"}))
    assert free.plans[0].plan.schedule in ("zb-h1", "dualpipe", "dualpipev")
    assert free.plans[0].metrics.step_time_s == pytest.approx(others["any"]["step_time_s"])


def test_per_framework_solves_share_what_the_call_has_left(monkeypatch):
    """The per-framework solves run within the call's limit: each gets an equal share of the time left before the
    deadline as its controls' time limit, and a framework reached with no time left is UNKNOWN and not solved."""
    import time

    from parplan.frameworks.compare import best_per_framework
    from parplan.solver import planner
    from parplan.solver.cpsat import SolverControls

    spec = validate_spec(yaml.safe_load(LLAMA.read_text()))
    result = optimize(spec)
    controls = SolverControls(time_limit_s=60, workers=1, deterministic=True)
    calls: list[tuple[float, float]] = []  # (time left at the call, its time limit)
    real = planner.optimize

    def recording(spec, deadline_at, **kwargs):
        calls.append((deadline_at - time.monotonic(), kwargs["controls"].time_limit_s))
        return real(spec, **kwargs)

    spent = best_per_framework(spec, result, deadline=time.monotonic() - 1, controls=controls)
    assert [e.status for e in spent] == ["UNKNOWN"] * 4 and all("time limit" in e.reason for e in spent)
    deadline = time.monotonic() + 40
    monkeypatch.setattr(planner, "optimize", lambda spec, **kw: recording(spec, deadline, **kw))
    got = best_per_framework(spec, result, deadline=deadline, controls=controls)
    assert [e.status for e in got] == ["OPTIMAL"] * 4 and len(calls) == 4
    for i, (left, limit) in enumerate(calls):  # an equal share of what is left among the frameworks still to run
        assert limit == pytest.approx(left / (4 - i), rel=0.05)


def test_user_overrides_leave_out_the_profiles_conventions():
    """The report's header counts the knobs the user set, not those the framework profile fills (issue 42)."""
    from parplan.client.report import spec_summary
    from parplan.frameworks.profiles import user_overrides

    plain = _llama()
    assert spec_profile(plain).assumptions and user_overrides(plain) == []
    assert spec_summary(plain).endswith("assumptions default + megatron-core memory conventions")
    knob, value = next(iter(spec_profile(plain).assumptions.items()))
    mine = _llama(assumptions={"cuda_context_gib": 0.75, knob: value})  # the profile's own value: no override
    assert user_overrides(mine) == ["cuda_context_gib"]
    assert spec_summary(mine).endswith("megatron-core memory conventions + 1 override")
    neutral = _llama(framework="any", assumptions={"cuda_context_gib": 0.75})
    assert spec_summary(neutral).endswith("assumptions default + 1 override")


def test_every_convention_a_profile_sets_has_words():
    """The per-framework table names each differing convention in words before its knob (frameworks/compare.py
    CONVENTION_WORDS): every cost-model knob any framework profile sets, at every version, has its words."""
    from parplan.frameworks.compare import CONVENTION_WORDS, in_words
    from parplan.frameworks.profile_data import VERSIONED
    from parplan.frameworks.profiles import framework_assumptions

    knobs = {k for versions in VERSIONED.values() for _, profile in versions for tps in ([1], [1, 2, 4, 8])
             for k in framework_assumptions(profile, tps)}
    assert knobs and knobs <= set(CONVENTION_WORDS), sorted(knobs - set(CONVENTION_WORDS))
    assert in_words("grad_bytes 4 -> 2") == "gradient buffer precision (bytes per element) (grad_bytes 4 -> 2)"
    assert in_words("PP 4 -> 1") == "PP 4 -> 1"


def test_a_framework_without_mtp_refuses_an_mtp_model():
    """torchtitan v0.2.2 has no multi-token prediction module ('titan.no_mtp_022'): a spec asking torchtitan for
    DeepSeek-V3 with its MTP module is refused naming the field, its plans never list torchtitan, and the
    per-framework comparison says why (main after f59c215e has one: 'titan.mtp')."""
    from parplan.costmodel.errors import ParplanError
    from parplan.frameworks.compare import best_per_framework

    data = yaml.safe_load((EXAMPLES / "deepseek-v3-2048xh800.yaml").read_text())
    assert data["model"]["num_mtp_layers"] == 1
    with pytest.raises((ParplanError, ValueError), match="model.num_mtp_layers 1: torchtitan <= 0.2.2 has no multi-token"):
        validate_spec({**data, "framework": "torchtitan"})
    assert validate_spec({**data, "framework": {"name": "torchtitan", "version": "main"}}).model.num_mtp_layers == 1
    spec = validate_spec(data)
    result = optimize(spec)  # one solve for both checks (it was solved twice)
    best = result.plans[0]
    assert "torchtitan" not in best.runs_on and "megatron-core" in best.runs_on
    line = next(o for o in best_per_framework(spec, result, frameworks=["torchtitan"]))
    assert line.status == "INVALID" and "multi-token prediction" in line.reason
