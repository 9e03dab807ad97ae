"""What torchtitan and DeepSpeed derive from our exports, through their own code (issue 40 item 3).

Each function parses the exported file with the framework's own parser and returns the values the framework runs,
in the plan's terms (:func:`planned` gives the plan's own), or raises :class:`Rejected` with the framework's message.
Needs the ``frameworks`` extra (torchtitan 0.2.2, deepspeed 0.19.8, torch CPU); nothing here needs a GPU or a process
group: where the framework's code needs one, the rule it applies is named by file and line instead.

torchtitan 0.2.2 (``torchtitan/``, the installed wheel):

* ``ConfigManager().parse_args(["--job.config_file", toml])`` (config/manager.py) reads the file; ``ParallelDims``
  (distributed/parallel_dims.py) the degrees, as the trainer builds it;
* recompute: ``apply_ac`` (distributed/activation_checkpoint.py:194-249), which every model's ``parallelize`` calls
  when ``activation_checkpoint.mode != "none"`` (models/llama3/infra/parallelize.py:111-118,
  models/deepseek_v3/infra/parallelize.py:148), run on each pipeline rank's model parts (a stand-in block per
  decoder layer; its process-wide layer-SAC counter reset per rank, one process per rank): the layers it wraps in a
  ``CheckpointWrapper``, op-level selective when the wrapper carries a ``context_fn`` (``_apply_op_sac``, 130-137);
  the parts a rank holds are pipeline_parallel.py:446-471's (``loop`` style, or ``v`` for ZBV / DualPipeV);
* sequence parallelism: ``apply_tp`` runs whenever ``parallel_dims.tp_enabled`` (``tp > 1``, parallel_dims.py:338-339;
  models/llama3/infra/parallelize.py:76-99, models/deepseek_v3/infra/parallelize.py:75) and shards the norms along
  the sequence (``SequenceParallel()`` for ``norm``, ``attention_norm``, ``ffn_norm``: llama3 parallelize.py:181,
  219, 233; deepseek_v3 parallelize.py:230, 258, 277): SP is on exactly when TP > 1;
* FSDP: ``apply_fsdp`` when ``parallel_dims.fsdp_enabled`` (dp_shard > 1 or cp > 1, parallel_dims.py:334-335),
  resharding after forward per ``fsdp_reshard_after_forward`` (llama3 parallelize.py:319-330: ``default`` is
  ``not pp_enabled``).

DeepSpeed 0.19.8 (the export writes for 0.19.6; ``deepspeed/``, the installed wheel):

* ``DeepSpeedConfig(config, mpu)`` (runtime/config.py) as ``deepspeed.initialize`` builds it, with the pipeline
  topology's data axis as the mpu under PP; the batch, ZeRO stage, Ulysses degree;
* recompute: under PP the engine takes the parsed ``pipeline.activation_checkpoint_interval`` into the
  ``PipelineModule`` (runtime/pipe/engine.py:217-218), which checkpoints every layer in groups of that many
  (runtime/pipe/module.py:373-382; 0: none); without PP the parsed ``activation_checkpointing`` section configures
  ``deepspeed.checkpointing.checkpoint``, which the export's code note has every transformer layer call;
* expert parallelism: ``deepspeed.moe.layer.MoE(...)`` built with the arguments the export's code note gives
  (moe/layer.py:38-82): its ``ep_size``, its ``num_local_experts`` and whether it shards experts over the TP group
  (``enable_expert_tensor_parallelism``: etp = tp);
* AutoTP has no sequence parallelism (profiles.py 'deepspeed.tp'): SP off.
"""

from __future__ import annotations

import ast
import json
import re
import tempfile
from pathlib import Path


class Rejected(Exception):
    """The framework's own code refused the exported file."""


def planned(spec, plan) -> dict:
    """The plan's values in the form :func:`torchtitan_derived` / :func:`deepspeed_derived` return."""
    from parplan.frameworks.export_common import global_batch_size

    out = dict(tp=plan.tp, cp=plan.cp, pp=plan.pp, dp=plan.dp, micro_batch_size=plan.micro_batch_size,
               num_microbatches=plan.num_microbatches, sequences_per_step=global_batch_size(plan),
               sequence_parallel=plan.sequence_parallel, cp_comm_type=plan.cp_comm_type, recompute=plan.recompute,
               recompute_layers=list(plan.recompute_layers) if plan.recompute == "full" else [0] * plan.pp)
    if spec.model.moe is not None:
        out.update(ep=plan.ep, etp=plan.etp, local_experts=spec.model.moe.num_experts // plan.ep)
    return normal(out)


def planned_torchtitan(spec, plan) -> dict:
    """:func:`planned` and torch.compile of the model: on unless the plan is priced with unfused elementwise ops
    (``assumptions.eager_elementwise``, costmodel/compute/eager_elementwise.py)."""
    from parplan.costmodel.spec.assumptions import resolve_assumptions

    return dict(planned(spec, plan), compiled=not resolve_assumptions(spec.assumptions).eager_elementwise)


def normal(values: dict) -> dict:
    """Values that change nothing the framework runs made equal: SP at TP 1, the CP comm type at CP 1, full
    recompute of no layer (no recompute)."""
    out = dict(values)
    if out["tp"] == 1:
        out["sequence_parallel"] = None
    if out["cp"] == 1:
        out["cp_comm_type"] = None
    if out["recompute"] == "full" and not any(out["recompute_layers"]):
        out["recompute"] = "none"
    if out["recompute"] != "full":
        out["recompute_layers"] = [0] * out["pp"]
    return out


def differences(derived: dict, wanted: dict) -> list[str]:
    """One line per value the framework derives differently from the plan."""
    return [f"{key} {derived.get(key)!r} != {value!r}" for key, value in wanted.items() if derived.get(key) != value]


# ------------------------------------------------------------------------------------------------ torchtitan


def torchtitan_derived(spec, plan) -> dict:
    """torchtitan 0.2.2's values for the plan's TOML export (module docstring); the parts' layers and the FSDP
    resharding under ``parts`` / ``reshard_after_forward``."""
    from torchtitan.config import ConfigManager
    from torchtitan.distributed import ParallelDims

    from parplan.frameworks.export import export_plan

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
        raise Rejected(str(err).splitlines()[0] if str(err) else type(err).__name__) from None
    finally:
        Path(f.name).unlink()
    tr, dp = job.training, dims.dp_shard * dims.dp_replicate
    parts = ([sum(n.startswith("layers.") for n in part) for part in par.module_fqns_per_model_part]
             if dims.pp > 1 else [spec.model.num_layers])
    # torchtitan/train.py: the pipeline splits the local batch into micro-batches; without it, gradient accumulation
    micro = par.pipeline_parallel_microbatch_size if dims.pp > 1 else tr.local_batch_size
    steps = tr.global_batch_size // (tr.local_batch_size * dp) * (tr.local_batch_size // micro)
    rotate = {"alltoall": "p2p", "allgather": "allgather"}[par.context_parallel_rotate_method]
    recompute, done = _torchtitan_recompute(job, parts, dims.pp)
    out = dict(tp=dims.tp, cp=dims.cp, pp=dims.pp, dp=dp, micro_batch_size=micro, num_microbatches=steps,
               sequences_per_step=micro * steps * dp, sequence_parallel=dims.tp_enabled, cp_comm_type=rotate,
               recompute=recompute, recompute_layers=done, seq_len=tr.seq_len, parts=parts,
               reshard_after_forward=_reshard(par.fsdp_reshard_after_forward, dims) if dims.fsdp_enabled else None,
               compiled=job.compile.enable and "model" in job.compile.components)
    if spec.model.moe is not None:
        out.update(ep=dims.ep, etp=dims.etp, local_experts=spec.model.moe.num_experts // dims.ep)
    out.update(_torchtitan_model(job, text))
    return normal(out)


def _torchtitan_model(job, text: str) -> dict:
    """MLA and MTP of the model the TOML names (``[model] name`` / ``flavor``, read from torchtitan's own train spec
    table: ``get_train_spec(name).model_args[flavor]``); none when the file names no model (no v0.2.2 flavour is the
    spec's model: the export says so and the user's model runs)."""
    import tomllib

    from torchtitan.protocols.train_spec import get_train_spec

    if "name" not in tomllib.loads(text).get("model", {}):
        return {}
    args = get_train_spec(job.model.name).model_args[job.model.flavor]
    # no v0.2.2 model has multi-token prediction (models/deepseek_v3/model/args.py has no MTP field)
    return dict(mla=getattr(args, "kv_lora_rank", 0) > 0, mtp_num_layers=0)


def _reshard(policy: str, dims) -> bool:
    """llama3 parallelize.py:319-330 (``apply_fsdp``)."""
    return {"always": True, "never": False, "default": not dims.pp_enabled}[policy]


def _rank_parts(job, parts: list[int], pp: int) -> list[list[int]]:
    """The model parts (their decoder-layer counts) each pipeline rank builds: pipeline_parallel.py:446-471."""
    if pp == 1:
        return [parts]
    from torch.distributed.pipelining.schedules import ScheduleDualPipeV, ScheduleZBVZeroBubble, get_schedule_class

    schedule = get_schedule_class(job.parallelism.pipeline_parallel_schedule)
    per_rank = len(parts) // pp
    if schedule in (ScheduleZBVZeroBubble, ScheduleDualPipeV):
        return [[parts[r], parts[len(parts) - 1 - r]] for r in range(pp)]
    return [[parts[r + s * pp] for s in range(per_rank)] for r in range(pp)]


def _torchtitan_recompute(job, parts: list[int], pp: int) -> tuple[str, list[int]]:
    """``apply_ac`` on stand-in model parts per rank: ('full' | 'selective' | 'none', layers wrapped per rank)."""
    import torch.nn as nn
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointWrapper
    from torchtitan.distributed import activation_checkpoint

    ac = job.activation_checkpoint
    if ac.mode == "none":  # parallelize.py:111: apply_ac is not called
        return "none", [0] * pp
    wrapped, op_level = [], False
    for rank_parts in _rank_parts(job, parts, pp):
        activation_checkpoint._layer_sac_count = 0  # one process per rank: its counter starts at 0
        count = 0
        for layers in rank_parts:
            part = nn.Module()
            part.layers = nn.ModuleDict({str(i): nn.Identity() for i in range(layers)})
            try:
                activation_checkpoint.apply_ac(part, ac)
            except ValueError as err:
                raise Rejected(str(err)) from None
            blocks = [b for b in part.layers.values() if isinstance(b, CheckpointWrapper)]
            count += len(blocks)
            op_level |= any("context_fn" in getattr(b.checkpoint_fn, "keywords", {}) for b in blocks)
        wrapped.append(count)
    return ("selective" if op_level else "full"), wrapped


# ------------------------------------------------------------------------------------------------- DeepSpeed


def deepspeed_derived(spec, plan) -> dict:
    """DeepSpeed's values for the plan's JSON export (module docstring), and ``zero_stage``."""
    import deepspeed.runtime.config as ds_config
    from deepspeed.runtime.pipe.topology import PipeModelDataParallelTopology

    from parplan.frameworks.export import export_plan

    export = export_plan(spec, plan, "deepspeed")
    cfg, world = json.loads(export.text), spec.cluster.num_gpus
    saved = ds_config.dist.get_rank, ds_config.dist.get_world_size
    ds_config.dist.get_rank, ds_config.dist.get_world_size = (lambda *a, **k: 0), (lambda *a, **k: world)
    try:
        mpu = None
        if plan.pp > 1:  # the export's PipelineModule topology: pipe x data x model (tp)
            topo = PipeModelDataParallelTopology(num_pp=plan.pp, num_mp=plan.tp, num_dp=world // (plan.pp * plan.tp))

            class _Mpu:  # the call DeepSpeedConfig makes of PipelineParallelGrid
                def get_data_parallel_world_size(self):
                    return topo.get_dim("data")

            mpu = _Mpu()
        try:
            ds = ds_config.DeepSpeedConfig(cfg, mpu)
        except AssertionError as err:
            raise Rejected(str(err).splitlines()[0]) from None
    finally:
        ds_config.dist.get_rank, ds_config.dist.get_world_size = saved
    autotp = plan.tp if plan.pp == 1 else 1  # AutoTP ranks count as data parallel and share their micro-batches
    tp = cfg.get("tensor_parallel", {}).get("autotp_size", 1) if plan.pp == 1 else plan.tp  # PP: the topology's
    cp = cfg.get("sequence_parallel_size", 1)
    interval = ds.pipeline["activation_checkpoint_interval"] if plan.pp > 1 else None
    every_layer = interval > 0 if plan.pp > 1 else "activation_checkpointing" in cfg
    if "activation_checkpointing" in cfg:
        ds.activation_checkpointing_config  # noqa: B018 - the section as deepspeed.checkpointing.configure reads it
    layers = list(plan.stage_layers)
    out = dict(tp=tp, cp=cp, pp=ds.pipeline["stages"] if plan.pp > 1 else 1, dp=int(ds.world_size) // autotp,
               micro_batch_size=ds.train_micro_batch_size_per_gpu, num_microbatches=ds.gradient_accumulation_steps,
               sequences_per_step=ds.train_batch_size // autotp, sequence_parallel=False,
               cp_comm_type="a2a" if cp > 1 else None, recompute="full" if every_layer else "none",
               recompute_layers=layers if every_layer else [0] * plan.pp, zero_stage=ds.zero_optimization_stage)
    if spec.model.moe is not None:
        out.update(_deepspeed_moe(spec, export.warnings, tp))
    return normal(out)


def _deepspeed_moe(spec, warnings, tp: int) -> dict:
    """``deepspeed.moe.layer.MoE`` built with the arguments of the export's code note (a one-expert stand-in of
    width 8: the degrees do not depend on the width)."""
    import torch.nn as nn
    from deepspeed.moe.layer import MoE

    note = next((w for w in warnings if "deepspeed.moe.layer.MoE(" in w), None)
    kwargs = {}
    if note is not None:
        args = re.search(r"deepspeed\.moe\.layer\.MoE\(([^)]*)\)", note).group(1)
        kwargs = {k: ast.literal_eval(v) for k, v in (a.strip().split("=") for a in args.split(","))}
    m = spec.model.moe
    try:
        layer = MoE(hidden_size=8, expert=nn.Linear(8, 8), num_experts=m.num_experts, k=m.top_k, **kwargs)
    except AssertionError as err:
        raise Rejected(str(err)) from None
    return dict(ep=layer.ep_size, etp=tp if layer.enable_expert_tensor_parallelism else 1,
                local_experts=layer.num_local_experts)


__all__ = ["Rejected", "planned", "normal", "differences", "torchtitan_derived", "deepspeed_derived"]
