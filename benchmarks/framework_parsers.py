"""Our exports through the frameworks' own parsers, at scale (issue 24.8).

    python benchmarks/framework_parsers.py [--out benchmarks/results/framework_parsers.txt]

Needs the ``frameworks`` extra (torch 2.13.0 CPU, deepspeed 0.19.8, torchtitan 0.2.2, megatron-core 0.16.1).
For each spec (the solver-speed scenarios that solve in seconds, the main example, the uneven-stage example) and
each framework setting (megatron-core, megatron-bridge, torchtitan, deepspeed, any), the top 3 plans are
exported and each export whose target parser is installed is parsed (the golden export cases' specs too, their
plans dropped) (tests/test_framework_parsers.py holds the
same checks for the golden cases; the parsers are run the same way):

* DeepSpeed ``DeepSpeedConfig`` (``deepspeed.initialize``'s world size; with PP the pipeline topology's data axis):
  accepted, micro-batch, accumulation and ZeRO stage equal to the plan;
* torchtitan ``ConfigManager`` + ``ParallelDims``: accepted, degrees, batch and per-part layers equal;
* megatron-core ``TransformerConfig`` + ``get_num_layers_to_build``: accepted, layers per (rank, chunk) equal.

Under a framework setting a plan goes to that framework's parser (megatron-bridge: megatron-core's, the same
TransformerConfig); under ``any`` to all three. A row counts "runs_on" when the plan's ``runs_on`` lists the
parser's framework: those must all be accepted with equal values; the others are parsed too and reported.
With ``--megatron-lm DIR`` (Megatron-LM's ``megatron/`` at core_v0.15.3, taken from a fetched snapshot at run time,
never copied into this repository) megatron-core's parser is replaced by Megatron-LM's ``parse_args`` +
``validate_args``: accepted, DP, virtual stages and micro-batches per step equal to the plan. Not run (left for
later): Megatron-Bridge's override path.
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

SETTINGS = ["megatron-core", "megatron-bridge", "torchtitan", "deepspeed", "any"]
PARSER_OF = {"megatron-core": ["megatron-core"], "megatron-bridge": ["megatron-core"], "torchtitan": ["torchtitan"],
             "deepspeed": ["deepspeed"], "any": ["megatron-core", "torchtitan", "deepspeed"]}
RUNS_ON = {"megatron-core": ("megatron-core", "megatron-bridge"), "torchtitan": ("torchtitan",),
           "deepspeed": ("deepspeed",)}


def specs():
    import yaml

    from parplan.client.spec_io import parse_spec
    from solver_speed import SCENARIOS

    out = [(name, dict(raw)) for name, raw in SCENARIOS if raw["cluster"]["num_gpus"] <= 256]
    for path in ("llama3-70b-64xh100.yaml", "uneven-stages-large-vocab.yaml"):
        out.append((path, yaml.safe_load((ROOT / "examples" / path).read_text())))
    for path in sorted((ROOT / "tests" / "data" / "exports" / "cases").glob("*.yaml")):  # the golden cases' specs
        spec = parse_spec(path.read_text())  # model presets resolved
        out.append((path.name, spec.model_copy(update={"plan": None})))
    return out


def check_deepspeed(spec, plan) -> list[str]:
    import deepspeed.runtime.config as ds_config
    from deepspeed.runtime.pipe.topology import PipeModelDataParallelTopology

    from parplan.frameworks.export import export_plan
    from parplan.frameworks.export_common import global_batch_size

    cfg = json.loads(export_plan(spec, plan, "deepspeed").text)
    world = spec.cluster.num_gpus
    saved = ds_config.dist.get_rank, ds_config.dist.get_world_size
    ds_config.dist.get_rank, ds_config.dist.get_world_size = (lambda *a, **k: 0), (lambda *a, **k: world)
    try:
        mpu = None
        if plan.pp > 1:
            topo = PipeModelDataParallelTopology(num_pp=plan.pp, num_mp=plan.tp, num_dp=world // (plan.pp * plan.tp))

            class _Mpu:
                def get_data_parallel_world_size(self):
                    return topo.get_dim("data")

            mpu = _Mpu()
        try:
            ds = ds_config.DeepSpeedConfig(cfg, mpu)
        except AssertionError as err:
            return [f"rejected: {str(err).splitlines()[0]}"]
    finally:
        ds_config.dist.get_rank, ds_config.dist.get_world_size = saved
    out = []
    if (ds.train_micro_batch_size_per_gpu, ds.gradient_accumulation_steps) != (plan.micro_batch_size,
                                                                              plan.num_microbatches):
        out.append("micro-batch or accumulation differ")
    if ds.zero_optimization_stage != (min(plan.zero_stage, 1) if plan.pp > 1 else plan.zero_stage):
        out.append("ZeRO stage differs")
    if (plan.cp == 1 or plan.cp_comm_type == "a2a") and not (plan.pp > 1 and plan.cp > 1):
        if ds.train_batch_size // (plan.tp if plan.pp == 1 else 1) != global_batch_size(plan):
            out.append("sequences per step differ")
    return out


def check_torchtitan(spec, plan) -> list[str]:
    from torchtitan.config import ConfigManager
    from torchtitan.distributed import ParallelDims

    from parplan.frameworks.export import export_plan
    from parplan.frameworks.export_common import model_chunk_layers

    text = export_plan(spec, plan, "torchtitan").text
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
        f.write(text)
    try:
        job = ConfigManager().parse_args(["--job.config_file", f.name])
        par = job.parallelism
        dims = ParallelDims(dp_shard=par.data_parallel_shard_degree, dp_replicate=par.data_parallel_replicate_degree,
                            cp=par.context_parallel_degree, tp=par.tensor_parallel_degree,
                            pp=par.pipeline_parallel_degree, ep=par.expert_parallel_degree,
                            etp=par.expert_tensor_parallel_degree, world_size=spec.cluster.num_gpus)
    except (AssertionError, ValueError, SystemExit) as err:
        return [f"rejected: {str(err).splitlines()[0] if str(err) else type(err).__name__}"]
    finally:
        Path(f.name).unlink()
    out = []
    if (dims.tp, dims.cp, dims.pp, dims.dp_shard * dims.dp_replicate) != (plan.tp, plan.cp, plan.pp, plan.dp):
        out.append("degrees differ")
    tr = job.training
    if plan.pp == 1 and (tr.local_batch_size != plan.micro_batch_size
                         or tr.global_batch_size // (tr.local_batch_size * plan.dp) != plan.num_microbatches):
        out.append("batch differs")
    if plan.pp > 1:
        if tr.local_batch_size != plan.micro_batch_size * plan.num_microbatches:
            out.append("batch differs")
        layers = [sum(n.startswith("layers.") for n in part) for part in par.module_fqns_per_model_part]
        if plan.schedule not in ("dualpipe", "dualpipev") and layers != model_chunk_layers(plan):
            out.append("layers per model part differ")
    return out


def check_megatron_core(spec, plan) -> list[str]:
    import torch
    from megatron.core.transformer.transformer_config import TransformerConfig

    from parplan.frameworks.export_common import model_chunk_layers
    from parplan.frameworks.export_megatron import megatron_settings

    s, m = megatron_settings(spec, plan), spec.model
    kwargs = dict(num_layers=m.num_layers, hidden_size=m.hidden_size, ffn_hidden_size=m.ffn_hidden_size,
                  num_attention_heads=m.num_attention_heads, num_query_groups=m.kv_heads,
                  tensor_model_parallel_size=s.tp, pipeline_model_parallel_size=s.pp, context_parallel_size=s.cp,
                  sequence_parallel=s.sequence_parallel, pipeline_dtype=torch.bfloat16,
                  virtual_pipeline_model_parallel_size=plan.vpp if plan.vpp > 1 else None,
                  num_layers_in_first_pipeline_stage=s.first_stage_layers,
                  num_layers_in_last_pipeline_stage=s.last_stage_layers, pipeline_model_parallel_layout=s.layout,
                  recompute_granularity=s.recompute_granularity, recompute_method=s.recompute_method,
                  recompute_num_layers=s.recompute_num_layers)
    if s.ep is not None:
        kwargs.update(num_moe_experts=m.moe.num_experts, moe_router_topk=m.moe.top_k, expert_model_parallel_size=s.ep,
                      expert_tensor_parallel_size=s.etp, moe_ffn_hidden_size=m.moe.expert_ffn_hidden_size)
    try:
        config = TransformerConfig(**kwargs)
    except (AssertionError, ValueError, NameError) as err:
        return [f"rejected: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"]
    chunks, out = model_chunk_layers(plan), []
    built = megatron_core_layers_per_chunk(config, plan)
    out += [f"layers of rank {i % plan.pp} chunk {i // plan.pp} differ" for i, (got, want) in enumerate(zip(built, chunks))
            if got != want]
    return out


def megatron_core_layers_per_chunk(config, plan) -> list[int]:
    """megatron-core's ``get_num_layers_to_build`` for every (virtual stage v, pipeline rank), in
    ``model_chunk_layers`` order (v·pp + rank). Its layout path reads the rank from ``parallel_state`` even when
    ``pp_rank`` is given (megatron/core/transformer/pipeline_parallel_layer_layout.py:159-160 in 0.16.1): set, as
    a rank would, then reset."""
    from megatron.core import parallel_state as ps
    from megatron.core.transformer.transformer_block import get_num_layers_to_build

    built = [0] * (plan.pp * plan.vpp)
    ps.set_pipeline_model_parallel_world_size(plan.pp)
    ps.set_virtual_pipeline_model_parallel_world_size(plan.vpp if plan.vpp > 1 else None)
    try:
        for rank in range(plan.pp):
            ps.set_pipeline_model_parallel_rank(rank)
            for v in range(plan.vpp):
                built[v * plan.pp + rank] = get_num_layers_to_build(config, vp_stage=v if plan.vpp > 1 else None,
                                                                    pp_rank=rank)
    finally:
        ps.set_pipeline_model_parallel_rank(None)
        ps.set_pipeline_model_parallel_world_size(None)
        ps.set_virtual_pipeline_model_parallel_world_size(None)
    return built


def check_megatron_lm(spec, plan) -> list[str]:
    """Megatron-LM ``pretrain_gpt.py``'s ``parse_args`` + ``validate_args`` (megatron/training/arguments.py) from a
    snapshot on ``sys.path`` (``--megatron-lm``), on the exported argv; WORLD_SIZE the plan's GPUs, the device
    architecture H100's (sm_90: validate_args asks torch.cuda, and this machine has no GPU)."""
    import contextlib
    import io
    import os

    import megatron.training.arguments as arguments

    from parplan.frameworks.export_megatron import megatron_argv

    arguments.get_device_arch_version = lambda: 9
    os.environ.update(WORLD_SIZE=str(spec.cluster.num_gpus), RANK="0", LOCAL_RANK="0")
    # the export's own environment line: CUDA_DEVICE_MAX_CONNECTIONS=1 except under Megatron-FSDP (export_megatron.render)
    if plan.zero_stage in (2, 3):
        os.environ.pop("CUDA_DEVICE_MAX_CONNECTIONS", None)
    else:
        os.environ["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"
    argv = megatron_argv(spec, plan) + ["--tokenizer-type", "NullTokenizer", "--vocab-size",
                                        str(spec.model.vocab_size), "--mock-data", "--train-iters", "1", "--lr", "1e-4"]
    saved = sys.argv
    sys.argv = ["pretrain_gpt.py", *argv]
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            args = arguments.validate_args(arguments.parse_args(), {})
    except (AssertionError, ValueError, NameError, SystemExit) as err:
        return [f"rejected: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"]
    finally:
        sys.argv = saved
    out = []
    if args.data_parallel_size != plan.dp:
        out.append(f"data_parallel_size {args.data_parallel_size} != dp {plan.dp}")
    if args.virtual_pipeline_model_parallel_size != (plan.vpp if plan.vpp > 1 else None):
        out.append(f"virtual stages {args.virtual_pipeline_model_parallel_size} != vpp {plan.vpp}")
    if args.global_batch_size // (args.micro_batch_size * args.data_parallel_size) != plan.num_microbatches:
        out.append("micro-batches per step differ")
    return out


CHECKS = {"deepspeed": check_deepspeed, "torchtitan": check_torchtitan, "megatron-core": check_megatron_core,
          "megatron-lm": check_megatron_lm}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "framework_parsers.txt")
    parser.add_argument("--top", type=int, default=3)
    parser.add_argument("--megatron-lm", type=Path, metavar="DIR", help="a directory holding Megatron-LM's megatron/ "
                        "at core_v0.15.3 (e.g. `git --git-dir <fetched snapshot> archive core_v0.15.3 megatron | tar -x "
                        "-C DIR`): run its validate_args in place of megatron-core's parser (the snapshot's megatron "
                        "package shadows the installed one)")
    args = parser.parse_args()
    if args.megatron_lm is not None:
        sys.path.insert(0, str(args.megatron_lm.resolve()))
        for setting in ("megatron-core", "megatron-bridge", "any"):
            PARSER_OF[setting] = ["megatron-lm" if t == "megatron-core" else t for t in PARSER_OF[setting]]
        RUNS_ON["megatron-lm"] = RUNS_ON["megatron-core"]
    from parplan.costmodel.spec import Spec
    from parplan.frameworks.loader import validate_spec
    from parplan.frameworks.compare import spec_for_framework
    from parplan.solver.cpsat import SolverControls
    from parplan.solver.planner import optimize

    controls = SolverControls(deterministic=True, time_limit_s=60)
    tally: dict[tuple[str, bool], list[int]] = {}  # (parser, runs_on) -> [parsed, accepted with equal values]
    failures, exports, t0 = [], 0, time.perf_counter()
    for name, raw in specs():
        for setting in SETTINGS:
            base = raw if isinstance(raw, Spec) else validate_spec(raw)
            spec = spec_for_framework(base, setting)  # the base's own profile knobs taken back out
            result = optimize(spec, top_k=args.top, controls=controls)
            for rank, ev in enumerate(result.plans, 1):
                exports += 1
                for target in PARSER_OF[setting]:
                    runs = any(f in ev.runs_on for f in RUNS_ON[target])
                    problems = CHECKS[target](spec, ev.plan)
                    row = tally.setdefault((target, runs), [0, 0])
                    row[0] += 1
                    row[1] += not problems
                    if problems:
                        failures.append(f"{name} | {setting} #{rank} -> {target} (runs_on {ev.runs_on}): "
                                        + "; ".join(problems))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    command = "python benchmarks/framework_parsers.py" + (f" --megatron-lm {args.megatron_lm}" if args.megatron_lm else "")
    lines = [f"# Command: {command}",
             f"# Date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%dT%H:%MZ} (commit {commit or '?'}); "
             f"{time.perf_counter() - t0:.0f} s",
             f"# {len(specs())} specs x {len(SETTINGS)} framework settings x top {args.top}: {exports} exported plans", "",
             f"{'parser':<16}{'plan runs there':<18}{'parsed':>8}{'accepted, values equal':>26}"]
    for (target, runs), (parsed, ok) in sorted(tally.items()):
        lines.append(f"{target:<16}{'yes' if runs else 'no':<18}{parsed:>8}{ok:>26}")
    lines += ["", f"not accepted or values differing ({len(failures)}):"] + [f"  {f}" for f in failures]
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
