"""Golden files for every exporter and job emitter (frameworks/export*.py, frameworks/jobs.py).

Each case in tests/data/exports/cases/ is exported to every target; the text must equal
tests/data/exports/<case>/<file> byte for byte, and the warnings must equal the golden
``<case>/warnings.txt``. To regenerate after an intended change (then review the diff line by line):

    PARPLAN_REGENERATE_GOLDEN=1 /work/venvs/exports/bin/python -m pytest -q tests/frameworks/test_export.py
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tests.conftest import small_specs
from tests.export_cases import CASE_NAMES, DATA, load_case
from tests.runs_on_cases import listed_plan
from tests import memory_dims_cases as memory_dims
from parplan.costmodel.schedules.schedule import Schedule
from parplan.frameworks.export import TARGETS, export_plan
from parplan.frameworks.export_bridge import bridge_overrides
from parplan.frameworks.export_deepspeed import deepspeed_config
from parplan.frameworks.export_megatron import megatron_argv
from parplan.frameworks.export_torchtitan import torchtitan_sections
from parplan.frameworks.export_common import ExportError
from parplan.frameworks.jobs import emit_job

REGENERATE = os.environ.get("PARPLAN_REGENERATE_GOLDEN") == "1"
JOB_CASES = [("llama3-70b-uneven-block", "megatron", "slurm"), ("llama3-70b-uneven-block", "megatron", "pytorchjob"),
             ("llama3-70b-interleaved", "torchtitan", "slurm"), ("llama3-70b-interleaved", "torchtitan", "pytorchjob"),
             ("gpt-1.7b-ddp", "deepspeed", "slurm"), ("llama3-8b-fsdp", "bridge", "pytorchjob"),
             ("llama3-70b-interleaved", "torchtitan", "volcano")]


def _check_golden(path, text: str) -> None:
    if REGENERATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"missing golden file {path}; regenerate (see module docstring)"
    assert text == path.read_text(encoding="utf-8"), f"{path} differs from the export"


def test_every_case_has_golden_files():
    assert len(CASE_NAMES) >= 6
    for name in CASE_NAMES:
        assert (DATA / name / "warnings.txt").exists() or REGENERATE


@pytest.mark.parametrize("case", CASE_NAMES)
def test_exports_match_golden_files(case):
    spec, plan = load_case(case)
    warnings = []
    for target in TARGETS:
        export = export_plan(spec, plan, target)
        _check_golden(DATA / case / export.filename, export.text)
        warnings += [f"[{target}] {w}" for w in export.warnings]
    _check_golden(DATA / case / "warnings.txt", "".join(w + "\n" for w in warnings))


@pytest.mark.parametrize("case,target,launcher", JOB_CASES)
def test_jobs_match_golden_files(case, target, launcher):
    spec, plan = load_case(case)
    job = emit_job(spec, plan, export_plan(spec, plan, target), launcher)
    _check_golden(DATA / case / f"{launcher}-{target}.{job.filename.split('.')[-1]}", job.text)


def test_every_plan_feature_is_written_or_warned():
    """Per target, a plan feature it cannot express appears as a warning (never silently dropped)."""
    spec, plan = load_case("llama3-70b-uneven-block")
    for target in TARGETS:
        export = export_plan(spec, plan, target)
        assert any("recompute_layers [2, 1, 1, 0]" in w for w in export.warnings), target
    spec, plan = load_case("llama3-70b-layout")
    megatron = export_plan(spec, plan, "megatron")
    assert "--pipeline-model-parallel-layout 'Et*19|t*21|t*20|t*20L'" in megatron.text
    assert not megatron.warnings
    deepspeed = export_plan(spec, plan, "deepspeed")
    assert any("stage_layers [19, 21, 20, 20]" in w for w in deepspeed.warnings)


def test_zero_bubble_and_dualpipe_are_warned_for_megatron_and_deepspeed():
    spec, plan = load_case("llama3-70b-uneven-block")
    for schedule in (Schedule.ZB_H1, Schedule.DUALPIPE):
        p = plan.model_copy(update={"schedule": schedule})
        for target in ("megatron", "bridge", "torchtitan", "deepspeed"):
            assert any(f"'{schedule}'" in w for w in export_plan(spec, p, target).warnings), (schedule, target)


def test_a_plan_for_another_spec_is_refused():
    spec, plan = load_case("llama3-70b-uneven-block")
    other, _ = load_case("llama3-8b-fsdp")
    with pytest.raises(ExportError, match="cluster.num_gpus"):
        export_plan(other, plan, "megatron")
    with pytest.raises(ExportError, match="unknown"):
        export_plan(spec, plan, "nemo1")


def test_megatron_and_bridge_exports():
    spec = memory_dims.spec()
    plan = memory_dims.plan(spec, zero_replicas=2, optimizer_states="fp32/bf16/fp8", optimizer_offload_fraction=0.5)
    argv = megatron_argv(spec, plan)
    joined = " ".join(argv)
    for piece in ("--use-distributed-optimizer", "--num-distributed-optimizer-instances 2",
                  "--use-precision-aware-optimizer", "--main-params-dtype fp32", "--exp-avg-dtype bf16",
                  "--exp-avg-sq-dtype fp8", "--optimizer-cpu-offload", "--optimizer-offload-fraction 0.5"):
        assert piece in joined, piece
    assert "--overlap-cpu-optimizer-d2h-h2d" not in argv
    over = memory_dims.spec(assumptions=dict(optimizer_offload_overlap=True))
    assert "--overlap-cpu-optimizer-d2h-h2d" in megatron_argv(over, plan)
    assert "--num-distributed-optimizer-instances" not in megatron_argv(spec, memory_dims.plan(spec))
    keys, warnings = bridge_overrides(spec, plan)
    keys = dict(keys)
    assert keys["ddp.num_distributed_optimizer_instances"] == 2
    assert keys["optimizer.use_precision_aware_optimizer"] is True
    assert keys["optimizer.optimizer_cpu_offload"] is True and keys["optimizer.optimizer_offload_fraction"] == 0.5
    assert any("torch.bfloat16" in w and "torch.uint8" in w for w in warnings)


def test_torchtitan_and_deepspeed_exports():
    spec = memory_dims.spec()
    par = torchtitan_sections(spec, memory_dims.plan(spec, zero_stage=3, zero_replicas=2))[0]["parallelism"]
    assert (par["data_parallel_replicate_degree"], par["data_parallel_shard_degree"]) == (2, 4)
    _, warns = torchtitan_sections(spec, memory_dims.plan(spec, zero_stage=2, optimizer_states="fp16/fp8/fp8"))
    assert any("no precision-aware optimizer" in w for w in warns)
    z = deepspeed_config(spec, memory_dims.plan(spec, zero_stage=3, zero_replicas=2, optimizer_offload_fraction=0.5))[0]
    assert z["zero_optimization"]["mics_shard_size"] == 4
    assert z["zero_optimization"]["offload_optimizer"] == {"device": "cpu", "pin_memory": True, "ratio": 0.5}
    cfg, warns = deepspeed_config(spec, memory_dims.plan(spec, zero_stage=1, zero_replicas=2))
    assert "mics_shard_size" not in cfg["zero_optimization"] and any("ZeRO-3 only" in w for w in warns)


def test_exports_read_back():
    """solver-cli import reads the new flags and keys back into the same plan (frameworks/import_plan.py)."""
    from parplan.frameworks.export import export_plan
    from parplan.frameworks.import_plan import spec_from_export

    spec = memory_dims.spec()
    cases = [("megatron", memory_dims.plan(spec, zero_replicas=2, optimizer_states="fp16/bf16/fp8",
                                optimizer_offload_fraction=0.25)),
             ("torchtitan", memory_dims.plan(spec, zero_stage=3, zero_replicas=4)),
             ("deepspeed", memory_dims.plan(spec, zero_stage=3, zero_replicas=2, optimizer_offload_fraction=0.5))]
    for target, plan in cases:
        text = export_plan(spec, plan, target).text
        back = spec_from_export(text, target, spec).plan
        for key in ("zero_stage", "zero_replicas", "optimizer_states", "optimizer_offload_fraction"):
            assert getattr(back, key, None) == getattr(plan, key), (target, key, getattr(back, key, None))


# ------------------------------------------------------------------------- runs_on and the exports agree (issue 40)


def _derived(spec, plan, target: str) -> dict:
    """What the framework runs, read back from the exported file (frameworks/import_plan.py, the frameworks' reading
    rules) or, for Megatron-Bridge, from its overrides (the Megatron-Core settings the Bridge keys set)."""
    from parplan.library.evaluation import evaluate_spec
    from parplan.frameworks.export_megatron import block_recompute_layers
    from parplan.frameworks.import_plan import spec_from_export

    if target != "bridge":
        export = export_plan(spec, plan, target)
        out = _planned(evaluate_spec(spec_from_export(export.text, target, spec)).plan)
        if target == "deepspeed":  # EP is model code (deepspeed.moe.layer.MoE(ep_size=...)): the export's code note
            import re

            note = next((w for w in export.warnings if "deepspeed.moe.layer.MoE(" in w), "")
            found = re.search(r"is deepspeed\.moe\.layer\.MoE\(ep_size=(\d+)(, enable_expert_tensor_parallelism=True)?\)",
                              note)
            if found:  # enable_expert_tensor_parallelism shards the experts over the TP group (moe/layer.py)
                out.update(ep=int(found.group(1)), etp=out["tp"] if found.group(2) else 1)
        return out
    keys = dict(bridge_overrides(spec, plan)[0])
    tp, pp, cp = keys["model.tensor_model_parallel_size"], keys["model.pipeline_model_parallel_size"], \
        keys["model.context_parallel_size"]
    dp = spec.cluster.num_gpus // (tp * pp * cp)
    granularity = keys["model.recompute_granularity"]
    if granularity == "full":
        done = (list(plan.stage_layers) if keys["model.recompute_method"] == "uniform" else
                block_recompute_layers(list(plan.stage_layers), plan.vpp, keys["model.recompute_num_layers"],
                                       plan.pipeline_layout))
    else:
        done = [0] * pp
    zero = ({"optim_grads": 2, "optim_grads_params": 3}[keys["ddp.data_parallel_sharding_strategy"]]
            if keys["ddp.use_megatron_fsdp"] else 1 if keys["ddp.use_distributed_optimizer"] else 0)
    return dict(tp=tp, cp=cp, pp=pp, dp=dp, ep=keys.get("model.expert_model_parallel_size", 1), zero_stage=zero,
                etp=keys.get("model.expert_tensor_parallel_size", 1),
                vpp=keys["model.virtual_pipeline_model_parallel_size"] or 1,
                micro_batch_size=keys["train.micro_batch_size"],
                num_microbatches=keys["train.global_batch_size"] // (keys["train.micro_batch_size"] * dp),
                stage_layers=list(plan.stage_layers), sequence_parallel=keys["model.sequence_parallel"],
                cp_comm_type=keys.get("model.cp_comm_type", "p2p"), recompute=granularity or "none",
                recompute_layers=done)


def _planned(plan) -> dict:
    return {k: getattr(plan, k) for k in ("tp", "cp", "pp", "dp", "ep", "etp", "vpp", "zero_stage",
                                          "micro_batch_size", "num_microbatches", "stage_layers", "sequence_parallel", "cp_comm_type",
                                          "recompute", "recompute_layers")}


def _normal(values: dict) -> dict:
    """Values that change nothing the framework runs made equal: SP at TP 1, the CP comm type at CP 1, full
    recompute of no layer (no recompute)."""
    out = dict(values, stage_layers=list(values["stage_layers"]), recompute_layers=list(values["recompute_layers"]))
    if out["tp"] == 1:
        out["sequence_parallel"] = None
    if out["cp"] == 1:
        out["cp_comm_type"] = None
    if out["recompute"] == "full" and not any(out["recompute_layers"]):
        out["recompute"] = "none"
    return out


@pytest.mark.parametrize("target", TARGETS)
@settings(max_examples=120, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
@given(spec=small_specs(), data=st.data())
def test_a_plan_runs_on_lists_is_exported_unchanged(spec, target, data):
    """Issue 40 item 1: a plan drawn from a framework's own space (the framework-restricted search's choices, at the
    version the export writes for) that ``runs_on`` lists for that framework is exported with every degree, the
    batch split, the stage split, ZeRO, SP, the CP comm type and recompute as planned (read back from the exported file):
    the export refuses or changes only what the shared rules keep out of ``runs_on``."""
    spec, plan = listed_plan(data.draw, spec, target)
    assert _normal(_derived(spec, plan, target)) == _normal(_planned(plan)), (target, plan)
