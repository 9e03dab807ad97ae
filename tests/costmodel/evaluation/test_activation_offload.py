"""Activation CPU offload as a search dimension (issue 10): ``activation_offload_layers`` N, Megatron-Core's
``cpu_offloading_num_layers`` (costmodel/evaluation/activation_offload.py holds the derivation and its sources).

* term by term, numbers worked by hand: the exposed copy time max(0, D2H - fwd) + max(0, H2D - bwd), the whole
  copy without TE's window (N = L - 1), the offloaded share of each layer class (dense-first MoE models), and
  the choice's memory and time against today's coefficients;
* legality: pp > 1, recompute (full, selective), the EP all-to-all overlap, N >= num_layers; per framework
  (Megatron-Core and Bridge run it, torchtitan, DeepSpeed and the 2021-22 Megatron-LM do not);
* bad input: the spec error names the field (and the CLI exits 2);
* the space: unset is today's space exactly; offloading choices only where legal, 'none' coming back for them;
* oracles: CP-SAT vs exhaustive vs the brute force over the evaluator with the dimension always drawn;
* the exports (Megatron flag read back, Bridge keys, torchtitan and DeepSpeed refuse), the proto fields, and the
  held-out GB200 row that ran with 40 offloaded layers.

The model of the hand-worked cases: 4 layers, h = 1024, MLP 4096 (not gated), 8 heads, seq 2048 on one H100.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from pydantic import ValidationError
from typer.testing import CliRunner

from parplan.costmodel.memory.runtime_memory import memory_for_usable
from parplan.costmodel.evaluation.activation_offload import exposed_transfer_s, offloaded_shares
from parplan.costmodel.spec.assumptions import resolve_assumptions
from parplan.costmodel.evaluation.choice import Choice, choice_costs, nvlink_domain_size
from parplan.costmodel.evaluation.evaluate import evaluate
from parplan.costmodel.spec.hardware import GIB, resolve_gpu
from parplan.costmodel.evaluation.legality import choice_violations
from parplan.costmodel.spec.spec import Plan, PlanSpec, Spec
from parplan.frameworks.profiles import choice_rule_violations, profile
from parplan.solver.planner import optimize
from parplan.solver.space import enumerate_choices
from parplan.frameworks.loader import validate_spec

from tests.brute_force import brute_force
from tests.conftest import small_specs
from tests.solver_checks import CPSAT, REL_TOL, PlanTally, check_plan, cpsat_matches_exhaustive

# No test here reads an infeasible result's explanation (test_explain.py does): skipped, as in the other oracle
# modules (a module mark, so the hypothesis tests' sources and derandomized examples stay as they were).
pytestmark = pytest.mark.usefixtures("no_explanations")

ROOT = Path(__file__).resolve().parents[3]
MODEL = dict(name="m", num_layers=4, hidden_size=1024, ffn_hidden_size=4096, num_attention_heads=8,
             vocab_size=32000, gated_mlp=False)
MOE_MODEL = {**MODEL, "moe": dict(num_experts=4, top_k=1, expert_ffn_hidden_size=1024, first_dense_layers=1)}


def _spec(gpus: int = 1, assumptions: dict | None = None, search: dict | None = None, framework="any",
          model: dict | None = None, plan: dict | None = None) -> Spec:
    data = dict(model=model or MODEL, training=dict(seq_len=2048, global_batch_size=8),
                cluster=dict(gpu="H100-SXM-80GB", num_gpus=gpus), assumptions=assumptions or {}, search=search or {})
    if framework is not None:
        data["framework"] = framework
    if plan is not None:
        data["plan"] = plan
    return validate_spec(data)


def _costs(spec: Spec, **choice):
    c = Choice(**{"tp": 1, "cp": 1, "pp": 1, "dp": spec.cluster.num_gpus, "micro_batch_size": 1,
                  "num_microbatches": 8 // spec.cluster.num_gpus, **choice})
    return choice_costs(spec, c, resolve_gpu(spec.cluster), resolve_assumptions(spec.assumptions))


# ------------------------------------------------------------------------------------------ terms by hand
def test_exposed_copy_time_by_hand():
    """TE's rule (cpu_offload_v1.py:316-321 at d0067d0d): a copy is free when the neighbouring layer's compute
    is longer. 9 GB at 450 GB/s (GB200 NVLink-C2C per direction) is 20 ms each way; a 15 ms forward leaves
    5 ms of the D2H exposed, a 30 ms backward hides the H2D: 5 ms. Half the compute hiding it (overlap 0.5):
    20 - 7.5 = 12.5 ms and 20 - 15 = 5 ms, 17.5 ms. No window (N = L - 1, cpu_offloading.rst: 'compute and
    transfers cannot overlap'): both copies, 40 ms."""
    assert exposed_transfer_s(9e9, 450e9, 0.015, 0.030, 1.0) == pytest.approx(0.005)
    assert exposed_transfer_s(9e9, 450e9, 0.015, 0.030, 0.5) == pytest.approx(0.0175)
    assert exposed_transfer_s(9e9, 450e9, 0.015, 0.030, 1.0, window=False) == pytest.approx(0.040)
    assert exposed_transfer_s(9e9, 450e9, 0.030, 0.060, 1.0) == 0.0  # compute longer both ways: hidden


def test_offloaded_shares_by_hand():
    """TE offloads layers 0..N-1 (cpu_offload.py:616-626 at d0067d0d); MoE models put their dense layers first.
    4 layers, 1 leading dense: N = 1 is the dense layer (share 1 of 1, MoE 0 of 3); N = 3 is the dense layer and
    2 of the 3 MoE layers. A dense model: N/L."""
    moe = _spec(model=MOE_MODEL)
    assert offloaded_shares(moe, 1) == (1.0, 0.0)
    assert offloaded_shares(moe, 3) == (1.0, pytest.approx(2 / 3))
    assert offloaded_shares(_spec(), 3) == (0.75, 0.0)


def test_memory_and_time_of_an_offloading_choice():
    """Against today's coefficients of the same choice (A = a layer's saved bytes, t = its time, f = the forward's
    share 1/(1 + backward_to_forward_ratio)): N = 2 of 4 layers leave A·2/4 per layer on the GPU (TE's cap of
    L - N sets, cpu_offload.py:612-614); at a 1 GB/s host link both copies outlast the compute, so each layer's
    time grows by its share 2/4 of (A/B - f·t) + (A/B - (1 - f)·t) = 2A/B - t; at a 2 TB/s link they hide (both
    copies shorter than the compute: checked below) and the time is today's. (This small layer, h = 1024, saves
    67 MB for 0.58 ms of compute: on the H100's own 64 GB/s, 1.05 ms per copy, the copies would be exposed.)"""
    slow = _spec(assumptions=dict(host_bandwidth_gbps=1.0))
    base, off = _costs(slow).dense, _costs(slow, activation_offload_layers=2).dense
    A, t, B = base.act_bytes, base.time_s, 1e9
    assert 2 * A / B > t  # the slow link: the copies are exposed
    assert off.act_bytes == pytest.approx(A * 2 / 4)
    assert off.compute_s - base.compute_s == pytest.approx(2 / 4 * (2 * A / B - t))
    assert off.states_bytes == base.states_bytes and off.tp_s == base.tp_s and off.dp_s == base.dp_s

    fast = _spec(assumptions=dict(host_bandwidth_gbps=2000.0))
    a = resolve_assumptions(fast.assumptions)
    base, off = _costs(fast).dense, _costs(fast, activation_offload_layers=2).dense
    f = 1 / (1 + a.backward_to_forward_ratio)
    assert base.act_bytes / 2000e9 < f * base.time_s  # the D2H hides behind the forward (the H2D behind more)
    assert off.compute_s == base.compute_s and off.act_bytes == pytest.approx(base.act_bytes / 2)

    # N = L - 1 = 3: no window, the whole round trip 2A/B is exposed for the 3 offloaded layers' share 3/4
    three = _costs(fast, activation_offload_layers=3).dense
    assert three.compute_s - base.compute_s == pytest.approx(3 / 4 * 2 * base.act_bytes / 2000e9)


def test_the_stage_ledger_loses_exactly_the_offloaded_layers_activations():
    """The evaluator's stage: activations (one micro-batch in flight at pp 1) drop by N/L; the step time by the
    per-layer stall; model states, logits and workspace unchanged. The MoE model: N = 3 offloads the dense layer
    and two MoE layers, whatever their sizes."""
    for model, n in ((MODEL, 2), (MOE_MODEL, 3)):
        spec = _spec(model=model, assumptions=dict(host_bandwidth_gbps=4.0))
        e0, e1 = (evaluate(spec, PlanSpec(activation_offload_layers=k)) for k in (0, n))
        s0, s1 = e0.stages[0], e1.stages[0]
        costs = _costs(spec)
        layers = [costs.dense] + ([costs.moe] * 3 if model is MOE_MODEL else [costs.dense] * 3)
        offloaded = sum(lc.act_bytes for lc in layers[:n])
        assert (s0.activations_gib - s1.activations_gib) * GIB == pytest.approx(offloaded, rel=1e-9)
        assert s1.model_states_gib == s0.model_states_gib and s1.logits_gib == s0.logits_gib
        assert e1.metrics.step_time_s > e0.metrics.step_time_s  # 4 GB/s: the copies are exposed
        assert e1.plan.activation_offload_layers == n and e0.plan.activation_offload_layers == 0


# ------------------------------------------------------------------------------------------------ legality
def _why(spec: Spec, **choice) -> list[str]:
    c = Choice(**{"tp": 1, "cp": 1, "pp": 1, "dp": spec.cluster.num_gpus, "micro_batch_size": 1,
                  "num_microbatches": 8 // spec.cluster.num_gpus, "activation_offload_layers": 2, **choice})
    gpu = resolve_gpu(spec.cluster)
    return choice_violations(spec, c, resolve_assumptions(spec.assumptions), nvlink_domain_size(spec, gpu))


def test_legality_follows_megatron_core():
    """transformer_config.py:1884-1898 at d98e8a64: fewer layers than num_layers, pp 1, no recompute
    granularity; the EP all-to-all overlap holds two micro-batches (not modelled)."""
    spec = _spec(gpus=2)
    assert _why(spec) == []
    assert any("needs pp = 1" in w for w in _why(spec, pp=2, dp=1, num_microbatches=8))
    assert any("needs recompute none" in w for w in _why(spec, recompute="full"))
    assert any("needs recompute none" in w for w in _why(spec, recompute="selective"))
    assert any("must lie in [0" in w for w in _why(spec, activation_offload_layers=4))
    moe = _spec(gpus=2, model=MOE_MODEL)
    assert any("moe_a2a_overlap is not modelled" in w for w in _why(moe, ep=2, moe_a2a_overlap=True))
    ev = evaluate(spec, PlanSpec(pp=2, activation_offload_layers=1))
    assert any("needs pp = 1" in v for v in ev.violations)


@pytest.mark.parametrize("name,version,runs", [
    ("megatron-core", None, True), ("megatron-core", "0.10.0", True), ("megatron-bridge", None, True),
    ("torchtitan", None, False), ("deepspeed", None, False), ("megatron-lm", "2022-06-08", False)])
def test_framework_rules(name, version, runs):
    c = Choice(tp=1, cp=1, pp=1, dp=1, activation_offload_layers=2)
    why = choice_rule_violations(profile(name, version), c)
    assert (why == []) == runs, why
    if not runs:
        assert any("no activation CPU offload" in w for w in why)
        with pytest.raises(ValidationError, match="search.activation_offload_layers .* no activation CPU offload"):
            _spec(framework=name if version is None else dict(name=name, version=version),
                  search=dict(activation_offload_layers=[2]))


# ---------------------------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("search,plan,match", [
    (dict(activation_offload_layers=[0, 4]), None, "search.activation_offload_layers: 4 layers offloaded"),
    (dict(activation_offload_layers=[-1]), None, "search.activation_offload_layers"),
    (dict(activation_offload_layers=[]), None, "search.activation_offload_layers must not be an empty list"),
    (None, dict(activation_offload_layers=7), "plan.activation_offload_layers: 7 layers offloaded"),
    (None, dict(activation_offload_layers=-2), "plan.activation_offload_layers"),
])
def test_bad_input_names_the_field(search, plan, match, tmp_path):
    with pytest.raises(ValidationError, match=match.replace("[", r"\[")):
        _spec(search=search, plan=plan)
    from parplan.client.cli import app

    data = dict(model=MODEL, training=dict(seq_len=2048, global_batch_size=8),
                cluster=dict(gpu="H100-SXM-80GB", num_gpus=1), search=search or {})
    if plan is not None:
        data["plan"] = plan
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(data))
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 2 and "activation_offload_layers" in result.stderr, (result.exit_code, result.stderr)


# ------------------------------------------------------------------------------------------------ the space
def _space(spec: Spec):
    return enumerate_choices(spec, resolve_gpu(spec.cluster), resolve_assumptions(spec.assumptions)).choices


def test_unset_is_todays_space_and_offloading_choices_are_only_where_legal():
    spec = _spec(gpus=4)
    today = _space(spec)
    assert _space(_spec(gpus=4, search=dict(activation_offload_layers=[0]))) == today
    assert all(c.activation_offload_layers == 0 for c in today)
    both = _space(_spec(gpus=4, search=dict(activation_offload_layers=[0, 2])))
    off = [c for c in both if c.activation_offload_layers]
    assert [c for c in both if not c.activation_offload_layers] == today
    assert off and all(c.pp == 1 and c.recompute == "none" for c in off)
    # 'none' is pruned in favour of 'full' in today's space (full with no recomputed layer is none); every
    # pp-1 choice comes back once as an offloading 'none' choice
    twins = {c.but(activation_offload_layers=0, recompute="full") for c in off}
    assert twins == {c for c in today if c.pp == 1 and c.recompute == "full"}
    assert not [c for c in _space(_spec(gpus=4, search=dict(activation_offload_layers=[2], recompute=["full"])))]


# -------------------------------------------------------------------------------------------------- oracles
class OffloadTally(PlanTally):
    offloading = 0

    @classmethod
    def count(cls, plan) -> None:
        cls.offloading += plan.activation_offload_layers > 0


@settings(max_examples=50, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(spec=small_specs(activation_offload=True))
def test_cpsat_matches_exhaustive_with_activation_offload(spec):
    """CP-SAT and the exhaustive search agree with search.activation_offload_layers always drawn."""
    OffloadTally.add(cpsat_matches_exhaustive(spec))


@settings(max_examples=40, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(spec=small_specs(tiny=True, activation_offload=True))
def test_cpsat_matches_brute_force_with_activation_offload(spec):
    """Tiny specs: no plan the brute force finds over the evaluator (offload counts included) beats the solver's."""
    res = optimize(spec, method="cpsat", controls=CPSAT)
    OffloadTally.add(res)
    below = None
    if res.plans:
        check_plan(spec, res.plans[0])
        below = res.plans[0].metrics.step_time_s * (1 - REL_TOL)
    found = brute_force(spec, below)
    assert found is None, (res.status, res.plans[0].plan if res.plans else None, found.plan)


def test_activation_offload_oracle_examples_were_mixed():
    """The examples above reach best plans that offload, and infeasible ones (not only today's space)."""
    t = OffloadTally
    if t.feasible + t.infeasible == 0:
        pytest.skip("run together with the two oracle tests above")
    print(f"\nactivation offload: {t.feasible} feasible, {t.infeasible} infeasible, {t.offloading} offloading best plans")
    assert t.feasible >= 30 and t.infeasible >= 10 and t.offloading >= 3, vars(t)


def test_offload_makes_an_otherwise_infeasible_spec_fit():
    """Memory just below the no-offload plan's peak: only offloading fits (recompute would too; it is not allowed
    here), and the solver finds it."""
    base = _spec(search=dict(recompute=["none"], micro_batch_size=[8], memory_band=False))  # ledger peaks set it
    a = resolve_assumptions(base.assumptions)
    peak = evaluate(base, PlanSpec(micro_batch_size=8)).metrics.peak_memory_gib
    data = json.loads(base.model_dump_json(exclude_none=True))
    data["cluster"]["memory_gib"] = memory_for_usable(peak - 0.05, a)
    tight = validate_spec(data)
    assert optimize(tight, method="exhaustive").status == "INFEASIBLE"
    data["search"]["activation_offload_layers"] = [0, 1, 2]
    res = optimize(validate_spec(data), method="cpsat", controls=CPSAT)
    assert res.plans and res.plans[0].plan.activation_offload_layers == 1  # the fewest layers that fit: fastest


# -------------------------------------------------------------------------------------------------- exports
def _plan(spec: Spec, **kw) -> Plan:
    return evaluate(spec, PlanSpec(**kw)).plan


def test_megatron_export_round_trips():
    from parplan.frameworks.export import export_plan
    from parplan.frameworks.import_plan import spec_from_export

    spec = _spec(gpus=2, assumptions=dict(host_bandwidth_gbps=4.0))
    plan = _plan(spec, activation_offload_layers=3)
    export = export_plan(spec, plan, "megatron")
    assert "--cpu-offloading-num-layers 3" in export.text
    assert [w for w in export.warnings if not w.startswith("code:")] == [
        w for w in export.warnings if "core_v0.16.0" in w] and export.warnings
    reread = spec_from_export(export.text, "megatron", spec)
    again, original = evaluate(reread), evaluate(spec, plan)
    assert again.plan == original.plan and again.metrics == original.metrics
    assert "--cpu-offloading" not in export_plan(spec, _plan(spec), "megatron").text


def test_bridge_keys_and_refusals():
    from parplan.frameworks.export_bridge import bridge_overrides
    from parplan.frameworks.export_deepspeed import deepspeed_config
    from parplan.frameworks.export_torchtitan import torchtitan_sections

    spec = _spec(gpus=2)
    plan = _plan(spec, activation_offload_layers=2)
    keys = dict(bridge_overrides(spec, plan)[0])
    assert keys["model.cpu_offloading"] is True and keys["model.cpu_offloading_num_layers"] == 2
    assert keys["model.cpu_offloading_weights"] is False
    none = dict(bridge_overrides(spec, _plan(spec))[0])  # no offload: the recipe's offload reset (GB200 70B has 20)
    assert none["model.cpu_offloading"] is False and "model.cpu_offloading_num_layers" not in none
    cfg, warns = deepspeed_config(spec, plan)
    assert any("activation_offload_layers 2" in w and "not exported" in w for w in warns)
    assert "offload" not in json.dumps(cfg.get("activation_checkpointing", {}))
    sections, warns = torchtitan_sections(spec, plan)
    assert any("activation_offload_layers 2" in w and "not exported" in w for w in warns)


def test_proto_round_trip():
    pytest.importorskip("grpc")
    from parplan.library.contract import plan_to_dict
    from parplan.wire import convert
    from parplan.v1 import planner_pb2 as pb

    spec = _spec(search=dict(activation_offload_layers=[0, 3]), plan=dict(activation_offload_layers=2), framework="megatron-core")  # the proto has no 'any'
    data = json.loads(spec.model_dump_json(exclude_defaults=True))
    back = validate_spec(convert.spec_dict_from_message(convert.spec_to_message(data)))
    assert back.search == spec.search and back.plan == spec.plan
    d = plan_to_dict(_plan(spec, activation_offload_layers=2))
    assert d["activation_offload_layers"] == 2
    assert convert.message_to_dict(convert.fill_message(pb.Plan(), d), omit_unset=False) == d
    today = plan_to_dict(_plan(spec))
    assert "activation_offload_layers" not in today  # default plans' dicts (golden outputs) unchanged
    assert convert.message_to_dict(convert.fill_message(pb.Plan(), today), omit_unset=False) == today


# -------------------------------------------------------------------------------------------- published row
def test_the_gb200_heldout_row_offloads_its_recipes_layers():
    """bridge260401-gb200-llama3-70b-64gpu-fp8-fsdp ran with cpu_offloading_num_layers = 40 (the row's mapping
    fact, from its recipe): the mapped plan carries it, and the stage's activations are 40/80 of the plan's
    without it."""
    import sys

    sys.path.insert(0, str(ROOT))
    from benchmarks.runs import express, load_runs

    row = next(r for r in load_runs(ROOT / "benchmarks" / "data" / "heldout-runs.yaml")
               if r["id"] == "bridge260401-gb200-llama3-70b-64gpu-fp8-fsdp")
    ex = express(row)
    assert ex.plan.activation_offload_layers == 40 and "activation_offload_layers" in ex.assumed
    with_, without = (evaluate(ex.spec, ex.plan.model_copy(update={"activation_offload_layers": k})) for k in (40, 0))
    assert with_.stages[0].activations_gib == pytest.approx(without.stages[0].activations_gib * 40 / 80)
