"""Golden files for every exporter and job emitter (frameworks/export*.py, frameworks/jobs.py).

Each case in tests/data/exports/cases/ is exported to every target; the text must equal
tests/data/exports/<case>/<file> byte for byte, and the warnings must equal the golden
``<case>/warnings.txt``. To regenerate after an intended change (then review the diff line by line):

    PARPLAN_REGENERATE_GOLDEN=1 /work/venvs/exports/bin/python -m pytest -q tests/test_export.py
"""

from __future__ import annotations

import os

import pytest

from export_cases import CASE_NAMES, DATA, load_case
import memory_dims_cases as memory_dims
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
             ("gpt-1.7b-ddp", "deepspeed", "slurm"), ("llama3-8b-fsdp", "bridge", "pytorchjob")]


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
    for schedule in ("zb-h1", "dualpipe"):
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
