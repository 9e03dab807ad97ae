"""The dated ``megatron-lm`` profile (Megatron-LM 2021-2022, before Megatron-Core): legality at each version,
each fact from the main-branch merge that added it (frameworks/profiles.py MEGATRON_LM_COMMITS, read with
``git log --first-parent main -S<flag>`` in NVIDIA/Megatron-LM), and the published-run mapping rule that
gives Megatron-LM 2021/2022 rows their dated profile (benchmarks/runs.py framework_version)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from pydantic import ValidationError

from benchmarks import runs
from parplan.costmodel.evaluation.evaluate import evaluate
from parplan.costmodel.schedules.schedule import Schedule
from parplan.costmodel.spec.spec import PlanSpec, Spec
from parplan.frameworks.profiles import (
    CITATIONS,
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


def _llama(version=None, **extra) -> Spec:
    data = yaml.safe_load(LLAMA.read_text())
    data["framework"] = {"name": "megatron-lm", "version": version} if version else "megatron-lm"
    data.update(extra)
    return validate_spec(data)


def test_versions_by_date_and_tag():
    jan, feb = profile("megatron-lm", "2021-01-11"), profile("megatron-lm", "2021-02-17")
    assert jan.schedules == ("1f1b",) and feb.schedules == ("1f1b", "interleaved")  # 76e3fca0 (2021-02-17)
    assert profile("megatron-lm", "2021-02-16").schedules == ("1f1b",)
    for p in (jan, feb):
        assert p.zero_stages == (0,) and p.zero_stages_with_pp == (0,) and p.recompute == ("none", "full")
        assert not p.context_parallel and not p.sequence_parallel and p.stage_split == "even"
        assert p.full_recompute_counts == "all"  # --checkpoint-activations: every layer
    # tags: v2.5 is 2021-08-10 (before the block/uniform merge 23266c57 of 2021-08-19), v2.6 2021-08-27 (after)
    assert profile("megatron-lm", "v2.5").full_recompute_counts == "all"
    assert profile("megatron-lm", "v2.6").full_recompute_counts == "chunk_block"
    may, june = profile("megatron-lm", "2022-05-20"), profile("megatron-lm", "2022-06-08")
    assert profile("megatron-lm", "2022-05-19").recompute == ("none", "full")
    assert may.recompute == ("none", "selective", "full") and may.sequence_parallel and may.zero_stages == (0,)
    assert june.zero_stages == (0, 1) and june.zero_stages_with_pp == (0, 1)  # --use-distributed-optimizer
    assert not june.context_parallel
    assert profile("megatron-lm") is june  # no version: the newest
    for p in (jan, feb, may, june):
        assert p.citations and all("NVIDIA/Megatron-LM@" in CITATIONS[k] for k in p.citations)


def test_versions_outside_the_profile_are_errors_naming_the_rule():
    with pytest.raises(UnknownFramework, match="predates the oldest profile \\(2021-01-11\\)"):
        profile("megatron-lm", "2020-12-31")
    with pytest.raises(UnknownFramework, match="megatron-core"):
        profile("megatron-lm", "2023-01-11")  # flash attention merged: no longer this profile
    with pytest.raises(UnknownFramework, match="YYYY-MM-DD"):
        profile("megatron-lm", "2021-08")
    with pytest.raises(ValidationError, match="framework"):
        _llama("main")
    assert spec_profile(_llama("2021-08-10")).schedules == ("1f1b", "interleaved")


def test_legality_at_each_version_by_hand():
    """Korthikanti 2022's plan (SP, selective recompute) cannot run on 2021's Megatron-LM; ZeRO-1 needs 2022-06-08;
    CP never (this profile ends before --context-parallel-size); interleaving needs 2021-02-17."""
    plan = evaluate(_llama(), PlanSpec(tp=8, pp=4, vpp=2, schedule="interleaved", micro_batch_size=1,
                                       recompute="selective", zero_stage=1, sequence_parallel=True)).plan
    v21, v22 = profile("megatron-lm", "2021-08-10"), profile("megatron-lm", "2022-06-08")
    msgs = choice_rule_violations(v21, plan)
    assert any("no recompute granularity 'selective'" in m for m in msgs)
    assert any("no Megatron-style sequence parallelism" in m for m in msgs)
    assert any("cannot run ZeRO-1" in m for m in msgs)
    assert choice_rule_violations(v22, plan) == []
    assert any("ZeRO-1" in m for m in choice_rule_violations(profile("megatron-lm", "2022-06-07"), plan))
    assert any("schedule interleaved" in m for m in choice_rule_violations(profile("megatron-lm", "2021-01-11"), plan))
    # interleaving needs pp > 2 from 2f3a2d68 (2021-03-23; de7dc40f arguments.py:118-121)
    pp2 = plan.model_copy(update={"pp": 2, "dp": plan.dp * 2, "recompute": "full", "zero_stage": 0,
                                  "sequence_parallel": False})
    assert any("pp > 2" in m for m in choice_rule_violations(v21, pp2))
    assert choice_rule_violations(profile("megatron-lm", "2021-03-22"), pp2) == []
    assert choice_rule_violations(v21, pp2.model_copy(update={"schedule": Schedule.ONE_F_ONE_B, "vpp": 1})) == []
    cp = plan.model_copy(update={"cp": 2})
    assert any("context parallelism" in m for m in choice_rule_violations(v22, cp))
    # stage split: num_layers divisible by PP (transformer.py:551-553 at de7dc40f)
    assert stage_rule_violations(v21, plan, [20, 20, 20, 20], [0] * 4) == []
    assert stage_rule_violations(v21, plan, [18, 22, 22, 18], [0] * 4)
    # full recompute: every layer before 2021-08-19; the first N of each chunk after it
    full = plan.model_copy(update={"recompute": "full", "vpp": 1, "schedule": Schedule.ONE_F_ONE_B})
    assert stage_rule_violations(profile("megatron-lm", "2021-08-10"), full, [20] * 4, [20] * 4) == []
    assert stage_rule_violations(profile("megatron-lm", "2021-08-10"), full, [20] * 4, [5] * 4)
    assert stage_rule_violations(profile("megatron-lm", "2021-08-19"), full, [20] * 4, [5] * 4) == []


def test_space_and_runs_on():
    opts = SpaceOptions.from_spec(_llama("2021-08-10"))
    assert opts.schedules == ("1f1b", "interleaved") and opts.zero_stages == (0,) and opts.cp == (1,)
    assert opts.sequence_parallel == (False,) and opts.recompute == ("none", "full") and opts.stage_split == "even"
    with pytest.raises(ValidationError, match="search.zero_stages"):
        _llama("2021-08-10", search={"zero_stages": [1]})
    plan = evaluate(_llama(), PlanSpec(tp=8, pp=2, micro_batch_size=1, zero_stage=0, sequence_parallel=False)).plan
    neutral = yaml.safe_load(LLAMA.read_text())
    assert "megatron-lm" not in runs_on(validate_spec(neutral), plan)  # historical: only when named
    assert runs_on(_llama("2021-08-10"), plan)[-1] == "megatron-lm"
    sp = plan.model_copy(update={"sequence_parallel": True})
    assert "megatron-lm" not in runs_on(_llama("2021-08-10"), sp)


SPECS = settings(max_examples=15, deadline=None, derandomize=True,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


@pytest.mark.parametrize("version", ["2021-01-11", "2021-08-10", "2022-06-08"])
@SPECS
@given(spec=small_specs())
def test_planner_returns_only_plans_megatron_lm_ran(version, spec):
    """No returned plan (top 3) uses what Megatron-LM lacked at that date: schedule, ZeRO, SP, CP, recompute
    granularity or counts, uneven stages."""
    spec = with_framework(spec, "megatron-lm", version)
    prof = profile("megatron-lm", version)
    for e in optimize(spec, method="exhaustive", top_k=3).plans:
        assert framework_violations(prof, e.plan) == [], e.plan
        assert "megatron-lm" in e.runs_on


def test_mapping_rule_dates_megatron_lm_rows():
    rows = {r["id"]: r for r in runs.load_runs()}
    sc21, readme = rows["narayanan2021-t1-gpt-18.4b"], rows["megatron-readme2021-gpt3-175b-1024gpu"]
    assert runs.profile_family(sc21) == "megatron-lm"
    assert runs.framework_version(sc21) == "2021-08-10"  # mapping_facts: scripts at de7dc40f
    assert runs.framework_version(readme) == "2021-01-11"  # README at 152aab30
    ex = runs.express(rows["korthikanti2022-175b-sp-selective"])
    assert ex.framework == "megatron-lm" and ex.framework_version == "2022-12-31"  # the year's end: widest
    assert "framework_version" in ex.assumed
    assert runs.framework_version(rows["nemo2407-h100-fp8-llama2-7b-8gpu"]) is None
    assert runs.framework_version({"framework": "Megatron-LM", "source": "someone 2021"}) == "2021-12-31"


def test_every_megatron_lm_row_runs_on_its_dated_profile():
    """Every expressible Megatron-LM 2021/2022 row's published plan is legal in the profile at its date: a profile
    fact that forbade what a run did would fail here."""
    checked = 0
    for row in runs.load_runs():
        ex = runs.express(row)
        if not ex.ok or ex.framework != "megatron-lm":
            continue
        prof = profile("megatron-lm", ex.framework_version)
        plan = evaluate(ex.spec, ex.plan).plan
        assert framework_violations(prof, plan) == [], (ex.row_id, plan)
        checked += 1
    assert checked >= 20


# ------------------------------------------------------------------------------------------- LLM Foundry


def _foundry(**extra) -> Spec:
    data = yaml.safe_load(LLAMA.read_text())
    data["framework"] = "llm-foundry"
    data.update(extra)
    return validate_spec(data)


def test_llm_foundry_is_fsdp_only():
    """llm-foundry@061f2c7 (2023-10-17): PyTorch FSDP through Composer 0.16 (NO_SHARD, SHARD_GRAD_OP, FULL_SHARD),
    every MPTBlock checkpointed or none; no TP (ee456002, v0.13.0), PP or CP."""
    prof = profile("llm-foundry")
    assert prof.zero_stages == (0, 2, 3) and prof.recompute == ("none", "full") and prof.full_recompute_counts == "all"
    assert profile("llm-foundry", "0.12.0") is prof
    with pytest.raises(UnknownFramework, match="0.13.0"):
        profile("llm-foundry", "v0.13.0")
    opts = SpaceOptions.from_spec(_foundry())
    assert opts.tp == (1,) and opts.pp == (1,) and opts.cp == (1,) and opts.zero_stages == (0, 2, 3)
    assert opts.recompute_all_layers and opts.sequence_parallel == (False,)
    with pytest.raises(ValidationError, match="search.tp"):
        _foundry(search={"tp": [2, 4]})
    plan = evaluate(_foundry(), PlanSpec(tp=8, pp=2, micro_batch_size=1, zero_stage=1, sequence_parallel=False)).plan
    msgs = choice_rule_violations(prof, plan)
    assert any("no tensor parallelism" in m for m in msgs) and any("no pipeline parallelism" in m for m in msgs)
    assert any("ZeRO-1" in m for m in msgs)
    dp = evaluate(_foundry(), PlanSpec(tp=1, pp=1, micro_batch_size=1, zero_stage=3, recompute="full",
                                       sequence_parallel=False)).plan
    assert framework_violations(prof, dp) == [] and "llm-foundry" in runs_on(_foundry(), dp)
    assert resolve_grad_reduce_bytes(_foundry()) == 2.0  # mixed_precision PURE


def resolve_grad_reduce_bytes(spec: Spec) -> float:
    from parplan.costmodel.spec.assumptions import resolve_assumptions
    return resolve_assumptions(spec.assumptions).grad_reduce_bytes


@SPECS
@given(spec=small_specs())
def test_planner_returns_only_plans_llm_foundry_runs(spec):
    spec = with_framework(spec, "llm-foundry")
    prof = profile("llm-foundry")
    for e in optimize(spec, method="exhaustive", top_k=3).plans:
        assert e.plan.tp == 1 and e.plan.pp == 1 and e.plan.cp == 1
        assert framework_violations(prof, e.plan) == [], e.plan
        assert "llm-foundry" in e.runs_on


def test_every_llm_foundry_row_runs_on_its_profile():
    checked = 0
    for row in runs.load_runs():
        ex = runs.express(row)
        if not ex.ok or ex.framework != "llm-foundry":
            continue
        assert framework_violations(profile("llm-foundry"), evaluate(ex.spec, ex.plan).plan) == [], ex.row_id
        checked += 1
    assert checked >= 8


# ------------------------------------------------------------------------------- torchtitan main 2024-12


def test_torchtitan_main_2024_12_by_date():
    """torchtitan@9dec370 (2024-12-26): FSDP reshards after forward without PP (ZeRO-3) and not under PP (ZeRO-2),
    no option (until 5940ddeb, 2025-02-06); DDP only 1-D; TP always with SP (until aa68af18, 2026-03-29)."""
    prof = profile("torchtitan", "2024-12-26")
    assert prof.zero_stages == (0, 3) and prof.zero_stages_with_pp == (0, 2)
    assert prof.sequence_parallel_with_tp and prof.ddp_one_dimensional and prof.full_recompute_counts == "all_or_every_nth"
    assert profile("torchtitan", "0.2.2").sequence_parallel_with_tp and not profile("torchtitan").sequence_parallel_with_tp
    with pytest.raises(UnknownFramework, match="predates"):
        profile("torchtitan", "2024-12-01")
    with pytest.raises(UnknownFramework, match="name a release"):
        profile("torchtitan", "2025-02-06")
    spec = validate_spec({**yaml.safe_load(LLAMA.read_text()),
                                "framework": {"name": "torchtitan", "version": "2024-12-26"}})
    base = evaluate(spec, PlanSpec(tp=8, pp=1, micro_batch_size=1, zero_stage=3, sequence_parallel=True)).plan
    ok = lambda **kw: choice_rule_violations(prof, base.model_copy(update=kw)) == []  # noqa: E731
    assert ok() and not ok(sequence_parallel=False)  # no TP without SP
    assert not ok(zero_stage=2)  # no ZeRO-2 without PP
    assert not ok(zero_stage=0)  # DDP with TP: 'DDP has not supported > 1D parallelism'
    assert ok(tp=1, sequence_parallel=False, zero_stage=0, dp=base.dp * 8)  # 1-D DDP
    pp = base.model_copy(update={"pp": 2, "dp": base.dp // 2})
    assert choice_rule_violations(prof, pp.model_copy(update={"zero_stage": 2})) == []
    assert choice_rule_violations(prof, pp.model_copy(update={"zero_stage": 3}))  # resharded under PP: not then
    opts = SpaceOptions.from_spec(spec)
    assert opts.zero_stages == (0, 2, 3) and opts.zero_stages_with_pp == (0, 2)


@SPECS
@given(spec=small_specs())
def test_planner_returns_only_plans_torchtitan_2024_12_runs(spec):
    spec = with_framework(spec, "torchtitan", "2024-12-26")
    prof = profile("torchtitan", "2024-12-26")
    for e in optimize(spec, method="exhaustive", top_k=3).plans:
        assert choice_rule_violations(prof, e.plan) == [], e.plan


def test_torchtitan_2024_12_rows_run_on_their_profile():
    checked = 0
    for row in runs.load_runs():
        ex = runs.express(row)
        if not ex.ok or ex.framework != "torchtitan" or ex.framework_version != "2024-12-26":
            continue
        assert framework_violations(profile("torchtitan", "2024-12-26"), evaluate(ex.spec, ex.plan).plan) == [], ex.row_id
        checked += 1
    assert checked >= 15


# ------------------------------------------------------------------------ --recompute-modules mapping rule


def test_recompute_modules_map_to_the_policy_that_models_them():
    """Megatron-Core --recompute-modules layernorm moe_act (+ mla_up_proj with MLA) is parplan's deepseek_v3
    policy; other module sets (mlp, up_proj, ...) keep the attention policy. The B200 GPT-OSS row's recipe states it
    (Megatron-Bridge@067f987d perf_recipes/gpt_oss/b200/gpt_oss.py:39-40) and with it the row fits (it ran)."""
    held = {r["id"]: r for r in runs.load_runs(runs.HELDOUT_DATA)}
    row = held["bridge260401-b200-gptoss-120b-64gpu-bf16"]
    ex = runs.express(row)
    assert ex.plan.recompute == "selective" and ex.overrides["selective_recompute_policy"] == "deepseek_v3"
    assert runs.compare(row)["fits"]
    plain = runs.express({**row, "recompute": "selective: --recompute-modules mlp moe_act"})
    assert "selective_recompute_policy" not in plain.overrides
    attention_only = runs.express({**row, "recompute": "selective"})
    assert "selective_recompute_policy" not in attention_only.overrides
    with_mla = runs.express({**row, "recompute": "selective: --recompute-modules layernorm mla_up_proj moe_act"})
    assert "selective_recompute_policy" not in with_mla.overrides  # GPT-OSS has no MLA: not the modelled set


def test_cli_table_names_the_past_release_profiles(tmp_path: Path):
    from typer.testing import CliRunner

    from parplan.client.cli import app

    data = yaml.safe_load(LLAMA.read_text())
    for fw, short in (({"name": "megatron-lm", "version": "2022-06-08"}, "ml"), ("llm-foundry", "lf")):
        data["framework"] = fw
        path = tmp_path / "spec.yaml"
        path.write_text(yaml.safe_dump(data))
        result = CliRunner().invoke(app, ["optimize", str(path), "--top", "2", "--no-per-framework"])
        assert result.exit_code == 0, result.stdout + str(result.exception)
        name = fw["name"] if isinstance(fw, dict) else fw
        assert name in result.stdout and f" {short} " in result.stdout  # the runs-on column and its caption
