"""Read an exported file back into a spec: the Megatron-LM arguments, torchtitan TOML and DeepSpeed JSON
that frameworks/export_*.py write (and hand-edited variants of them).

``spec_from_export(text, target, base)`` returns ``base`` with the plan (and whatever model or training
fields the file states) replaced by what the file says; the cluster, the assumptions and every field the
file does not state come from ``base``. ``solver-cli import`` prints that spec, so
``solver-cli evaluate`` can price the file a framework will actually run.

The reading rules mirror the frameworks' own (sources as cited in the exporter modules):

* Megatron-LM: ``dp = world / (tp·pp·cp)`` (on several ``cluster.pools`` the world and each stage's pool from
  the ``PARPLAN_HOST_ORDER`` array, frameworks/pool_placement.py); virtual stages from whichever of
  ``--num-layers-per-virtual-pipeline-stage`` / ``--num-virtual-stages-per-pipeline-rank`` /
  ``--pipeline-model-parallel-layout`` is given; ``--recompute-method block --recompute-num-layers n``
  recomputes ``vpp·min(n, chunk)`` layers per stage, ``uniform`` every layer; sequence parallelism is
  forced off at TP = 1 (``validate_args``), where it changes nothing, so it is read as the plan default;
* torchtitan: frameworks/import_torchtitan.py;
* DeepSpeed: ``dp = train_batch_size / (micro × accumulation)``; ``pipeline.stages`` and
  ``tensor_parallel.autotp_size`` give PP and TP; stages split as evenly as possible (PipelineModule's
  ``uniform`` partition), AutoTP runs without sequence parallelism.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import shlex
from typing import Any, Optional

from parplan.costmodel.schedules.schedule import Schedule
from parplan.costmodel.spec.spec import Spec
from parplan.costmodel.spec.spec_base import MAX_NUM_LAYERS
from parplan.frameworks.export_megatron import block_recompute_layers
from parplan.frameworks.import_common import ImportPlanError, divide_exactly, spec_with
from parplan.frameworks.import_torchtitan import spec_from_torchtitan
from parplan.frameworks.pool_placement import (HOST_ORDER_ARRAY, read_host_order, several_pools,
                                               stage_pools_from_host_order)


# ------------------------------------------------------------------------------------------ Megatron


_ARRAY = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)=\((.*?)^\s*\)", re.S | re.M)


def megatron_tokens(text: str) -> list[str]:
    """The argv tokens of every ``NAME=( ... )`` bash array except the one that only concatenates others."""
    tokens: list[str] = []
    for match in _ARRAY.finditer(text):
        body = match.group(2)
        if "${" in body or match.group(1) == HOST_ORDER_ARRAY:  # concatenations; the pools' host order
            continue
        tokens += shlex.split(body, comments=True)
    if not tokens:  # a bare command line
        tokens = [t for t in shlex.split(text, comments=True) if t.startswith("-") or not t.endswith(".py")]
    return tokens


def _megatron_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    for flag in ("--num-layers", "--hidden-size", "--ffn-hidden-size", "--num-attention-heads", "--num-query-groups",
                 "--kv-channels", "--seq-length", "--max-position-embeddings", "--num-experts", "--moe-router-topk",
                 "--moe-ffn-hidden-size", "--moe-shared-expert-intermediate-size",
                 "--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--context-parallel-size",
                 "--expert-model-parallel-size", "--expert-tensor-parallel-size",
                 "--num-layers-per-virtual-pipeline-stage", "--num-virtual-stages-per-pipeline-rank",
                 "--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers",
                 "--recompute-num-layers", "--micro-batch-size", "--global-batch-size",
                 "--num-distributed-optimizer-instances", "--cpu-offloading-num-layers", "--moe-deepep-num-sms",
                 "--moe-hybridep-num-sms", "--moe-flex-dispatcher-num-sms"):
        p.add_argument(flag, type=int)
    p.add_argument("--optimizer-offload-fraction", type=float)
    p.add_argument("--moe-expert-capacity-factor", type=float)
    for flag in ("--moe-layer-freq", "--pipeline-model-parallel-layout", "--recompute-granularity",
                 "--recompute-method", "--data-parallel-sharding-strategy", "--fp8-format", "--main-params-dtype",
                 "--exp-avg-dtype", "--exp-avg-sq-dtype", "--moe-token-dispatcher-type", "--moe-flex-dispatcher-backend"):
        p.add_argument(flag, type=str)
    p.add_argument("--cp-comm-type", type=str, nargs="+")  # one for all layers, or one per layer
    p.add_argument("--hierarchical-context-parallel-sizes", type=int, nargs="+")
    for flag in ("--group-query-attention", "--swiglu", "--untie-embeddings-and-output-weights", "--sequence-parallel",
                 "--use-distributed-optimizer", "--use-megatron-fsdp", "--bf16", "--use-precision-aware-optimizer",
                 "--optimizer-cpu-offload", "--overlap-cpu-optimizer-d2h-h2d",
                 "--overlap-moe-expert-parallel-comm", "--moe-enable-deepep"):
        p.add_argument(flag, action="store_true")
    return p


def _moe_dispatch(args: argparse.Namespace) -> dict[str, Any]:
    """model.moe's dispatcher, backend, capacity factor and dispatcher SMs from Megatron's flags (Megatron's default
    dispatcher, allgather, when none is given; flex's backend deepep unless --moe-flex-dispatcher-backend hybridep)."""
    out: dict[str, Any] = {"dispatcher": args.moe_token_dispatcher_type or "allgather"}
    if args.moe_flex_dispatcher_backend in ("deepep", "hybridep"):
        out["dispatcher_backend"] = args.moe_flex_dispatcher_backend
    if args.moe_expert_capacity_factor is not None and args.moe_expert_capacity_factor > 0:
        out["capacity_factor"] = args.moe_expert_capacity_factor
    # the flex dispatcher's SMs: the unified flag first (core_v0.19.0), else the backend's own
    backend_sms = args.moe_hybridep_num_sms if out.get("dispatcher_backend") == "hybridep" else args.moe_deepep_num_sms
    sms = args.moe_flex_dispatcher_num_sms or backend_sms
    if sms:
        out["dispatcher_sms"] = sms
    return out


def layout_chunks(layout: str) -> list[int]:
    """Decoder layers per stage of a ``--pipeline-model-parallel-layout`` string (the unrolling rules of
    ``PipelineParallelLayerLayout.parse_str_to_list``)."""
    text = layout.replace(",", "")

    def repeat(m: re.Match) -> str:  # checked before the string is built: "t*99999999999" allocates nothing
        if len(m.group(2)) > 7 or len(m.group(1)) * int(m.group(2)) > MAX_NUM_LAYERS:
            raise ImportPlanError(f"--pipeline-model-parallel-layout: {m.group(0)[:40]!r} unrolls to more than "
                                  f"{MAX_NUM_LAYERS} layers")
        return m.group(1) * int(m.group(2))

    text = re.sub(r"\(([^)]+)\)\*(\d+)", repeat, text)
    if len(text) > 2 * MAX_NUM_LAYERS:
        raise ImportPlanError(f"--pipeline-model-parallel-layout: unrolls to more than {MAX_NUM_LAYERS} layers")
    text = re.sub(r"(.)\*(\d+)", repeat, text)
    stages = text.split("|")
    bad = set(text) - set("ELtm|")
    if bad:
        raise ImportPlanError(f"--pipeline-model-parallel-layout: unknown layer characters {sorted(bad)}")
    return [stage.count("t") for stage in stages]


def _moe_dense_prefix(expression: str, num_layers: int) -> int:
    """Leading dense layers of a ``--moe-layer-freq`` list expression such as ``([0]*3+[1]*58)``."""
    def value(node):
        if isinstance(node, ast.List):
            return [value(e) for e in node.elts]
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mult)):
            left, right = value(node.left), value(node.right)
            return left + right if isinstance(node.op, ast.Add) else left * right
        raise ImportPlanError(f"--moe-layer-freq: {expression!r} is not a list expression of 0/1")
    try:
        pattern = value(ast.parse(expression, mode="eval").body)
    except SyntaxError:
        raise ImportPlanError(f"--moe-layer-freq: {expression!r} is not a Python list expression") from None
    if isinstance(pattern, int):
        if pattern == 1:
            return 0
        raise ImportPlanError("--moe-layer-freq: an interleaving ratio > 1 has no form in model.moe")
    k = next((i for i, x in enumerate(pattern) if x), len(pattern))
    if len(pattern) != num_layers or any(x != 1 for x in pattern[k:]):
        raise ImportPlanError(f"--moe-layer-freq: {expression!r} must be dense layers followed by MoE layers over "
                              f"{num_layers} layers (model.moe.first_dense_layers)")
    return k


def spec_from_megatron(text: str, base: Spec) -> Spec:
    """The spec a Megatron-LM command line describes, over ``base`` (its cluster and what the flags omit)."""
    args, _unknown = _megatron_parser().parse_known_args(megatron_tokens(text))
    L = args.num_layers or base.model.num_layers
    tp, pp, cp = (args.tensor_model_parallel_size or 1, args.pipeline_model_parallel_size or 1,
                  args.context_parallel_size or 1)
    order = _host_order(text, base)
    world = base.cluster.num_gpus if order is None else sum(nodes * per_node for _, nodes, per_node in order)
    dp = divide_exactly(world, tp * pp * cp, "cluster.num_gpus / (tp·pp·cp)" if order is None else
                 f"{HOST_ORDER_ARRAY} ranks / (tp·pp·cp)")
    mbs = args.micro_batch_size or 1
    gbs = args.global_batch_size or mbs * dp
    m = divide_exactly(gbs, dp * mbs, "--global-batch-size / (dp·--micro-batch-size)")
    stage_layers, vpp, layout = _megatron_stages(args, L, pp)
    plan: dict[str, Any] = {"tp": tp, "cp": cp, "pp": pp, "dp": dp, "micro_batch_size": mbs, "num_microbatches": m,
                            "vpp": vpp, "schedule": Schedule.INTERLEAVED if vpp > 1 else Schedule.ONE_F_ONE_B, "stage_layers": stage_layers}
    if order is not None:  # several cluster.pools: the pool of each stage from the host order
        plan["stage_pools"] = stage_pools_from_host_order(order, tp * cp * dp, pp)
    if layout is not None and any(len(set(stage)) > 1 for stage in layout):
        plan["pipeline_layout"] = layout  # chunks that differ within a stage (e.g. an 'E' or 'L' chunk alone)
    if args.sequence_parallel or tp > 1:
        plan["sequence_parallel"] = bool(args.sequence_parallel)
    if args.cp_comm_type and cp > 1:
        if len(set(args.cp_comm_type)) > 1:
            raise ImportPlanError(f"--cp-comm-type {' '.join(args.cp_comm_type)}: one type per layer has no plan "
                                  "form (plan.cp_comm_type is one for all layers)")
        plan["cp_comm_type"] = args.cp_comm_type[0]
    if args.overlap_moe_expert_parallel_comm:  # costmodel/moe/moe_comm.py
        plan["moe_a2a_overlap"] = True
    if args.cpu_offloading_num_layers:  # activation CPU offload (costmodel/evaluation/activation_offload.py)
        plan["activation_offload_layers"] = args.cpu_offloading_num_layers
    plan.update(_megatron_recompute(args, stage_layers, vpp, layout))
    plan.update(_megatron_optimizer(args))
    model = _megatron_model(args, base, L, tp, plan)
    training: dict[str, Any] = {"global_batch_size": gbs}
    if args.seq_length:
        training["seq_len"] = args.seq_length
    if args.fp8_format:
        training["precision"] = "fp8"
    elif args.bf16:
        training["precision"] = "bf16"
    return spec_with(base, plan=plan, model=model, training=training)


def _host_order(text: str, base: Spec) -> Optional[list[tuple[int, int, int]]]:
    """The ``PARPLAN_HOST_ORDER`` blocks when ``base`` has several pools (required there), else None."""
    if not several_pools(base):
        return None
    order = read_host_order(text)
    if order is None:
        raise ImportPlanError(f"plan.stage_pools: a spec on {len(base.cluster.pools)} cluster.pools needs the host "
                              f"order ({HOST_ORDER_ARRAY}=( pool<k>:<nodes>x<gpus> ... ) in rank order) to read "
                              f"which pool runs each stage")
    return order


def _megatron_stages(args: argparse.Namespace, L: int, pp: int) -> tuple[list[int], int, Optional[list[list[int]]]]:
    """(stage_layers, vpp, per-chunk layout or None) from the layout string, the first/last stage counts or an
    even split with virtual stages."""
    layout = None
    if args.pipeline_model_parallel_layout:
        chunks = layout_chunks(args.pipeline_model_parallel_layout)
        vpp = divide_exactly(len(chunks), pp, "--pipeline-model-parallel-layout stages / pp")
        layout = [[chunks[v * pp + r] for v in range(vpp)] for r in range(pp)]
        stage_layers = [sum(stage) for stage in layout]
    elif args.decoder_first_pipeline_num_layers or args.decoder_last_pipeline_num_layers:
        first = args.decoder_first_pipeline_num_layers
        last = args.decoder_last_pipeline_num_layers
        rest, middle_stages = L - (first or 0) - (last or 0), pp - (first is not None) - (last is not None)
        mid = divide_exactly(rest, middle_stages, "middle pipeline layers / middle stages") if middle_stages else 0
        stage_layers = ([first] if first is not None else []) + [mid] * middle_stages + ([last] if last is not None else [])
        vpp = args.num_virtual_stages_per_pipeline_rank or 1
    else:
        per_stage = divide_exactly(L, pp, "--num-layers / pp")
        stage_layers = [per_stage] * pp
        if args.num_layers_per_virtual_pipeline_stage:
            vpp = divide_exactly(per_stage, args.num_layers_per_virtual_pipeline_stage, "layers per stage / "
                          "--num-layers-per-virtual-pipeline-stage")
        else:
            vpp = args.num_virtual_stages_per_pipeline_rank or 1
    return stage_layers, vpp, layout


def _megatron_recompute(args: argparse.Namespace, stage_layers: list[int], vpp: int,
                        layout: Optional[list[list[int]]]) -> dict[str, Any]:
    """``recompute`` and ``recompute_layers`` from --recompute-granularity / -method / -num-layers."""
    plan: dict[str, Any] = {}
    granularity = args.recompute_granularity
    if granularity == "selective":
        plan["recompute"] = "selective"
    elif granularity == "full":
        plan["recompute"] = "full"
        if args.recompute_method == "block":
            plan["recompute_layers"] = block_recompute_layers(stage_layers, vpp, args.recompute_num_layers or 0,
                                                              layout)
        else:
            plan["recompute_layers"] = list(stage_layers)
    elif granularity is not None:
        raise ImportPlanError(f"--recompute-granularity: {granularity!r} is neither full nor selective")
    return plan


def _megatron_optimizer(args: argparse.Namespace) -> dict[str, Any]:
    """ZeRO stage (distributed optimizer or Megatron-FSDP), replicas, precision-aware states and CPU offload."""
    plan: dict[str, Any] = {}
    if args.use_megatron_fsdp:
        strategy = args.data_parallel_sharding_strategy or "optim_grads_params"
        zero = {"no_shard": 0, "optim": 1, "optim_grads": 2, "optim_grads_params": 3}.get(strategy)
        if zero is None:
            raise ImportPlanError(f"--data-parallel-sharding-strategy: unknown value {strategy!r}")
        plan["zero_stage"] = zero
    else:
        plan["zero_stage"] = 1 if args.use_distributed_optimizer else 0
    if (args.num_distributed_optimizer_instances or 1) > 1:
        plan["zero_replicas"] = args.num_distributed_optimizer_instances
    if args.use_precision_aware_optimizer:  # Megatron's defaults: fp32 for each (arguments.py:3671-3685)
        plan["optimizer_states"] = "/".join(v or "fp32" for v in (args.main_params_dtype, args.exp_avg_dtype,
                                                                  args.exp_avg_sq_dtype))
    if args.optimizer_cpu_offload:  # --optimizer-offload-fraction defaults to 1.0 (arguments.py:2922)
        fraction = 1.0 if args.optimizer_offload_fraction is None else args.optimizer_offload_fraction
        plan["optimizer_offload_fraction"] = float(fraction)
    return plan


def _megatron_model(args: argparse.Namespace, base: Spec, L: int, tp: int, plan: dict[str, Any]) -> dict[str, Any]:
    """The ``model:`` keys the flags give; for an MoE model also the plan's ``ep`` and ``etp``."""
    model: dict[str, Any] = {"num_layers": L}
    for key, value in (("hidden_size", args.hidden_size), ("ffn_hidden_size", args.ffn_hidden_size),
                       ("num_attention_heads", args.num_attention_heads), ("head_dim", args.kv_channels)):
        if value is not None:
            model[key] = value
    if args.num_attention_heads is not None:
        model["num_kv_heads"] = args.num_query_groups if args.group_query_attention else None  # None: MHA
        model["gated_mlp"] = bool(args.swiglu)
        model["tie_embeddings"] = not args.untie_embeddings_and_output_weights
    if args.num_experts:
        plan["ep"] = args.expert_model_parallel_size or 1
        plan["etp"] = args.expert_tensor_parallel_size or tp
        shared_total = args.moe_shared_expert_intermediate_size or 0
        n_shared = (base.model.moe.num_shared_experts if base.model.moe and base.model.moe.num_shared_experts
                    else 1) if shared_total else 0
        moe: dict[str, Any] = {"num_experts": args.num_experts, "top_k": args.moe_router_topk or 2,
                               "expert_ffn_hidden_size": args.moe_ffn_hidden_size or args.ffn_hidden_size,
                               "num_shared_experts": n_shared,
                               "first_dense_layers": _moe_dense_prefix(args.moe_layer_freq or "1", L)}
        if n_shared:
            moe["shared_expert_ffn_hidden_size"] = divide_exactly(shared_total, n_shared,
                                                           "--moe-shared-expert-intermediate-size / shared experts")
        moe.update(_moe_dispatch(args))
        model["moe"] = moe
    return model


# ----------------------------------------------------------------------------------------- DeepSpeed


def spec_from_deepspeed(text: str, base: Spec) -> Spec:
    try:
        cfg = json.loads(text)
    except (ValueError, RecursionError) as err:  # JSONDecodeError, or an int past Python's 4,300-digit limit
        raise ImportPlanError(f"DeepSpeed JSON: {' '.join(str(err).split())[:200]}") from None
    if not isinstance(cfg, dict):
        raise ImportPlanError("DeepSpeed JSON: the top level must be an object")
    mbs = cfg.get("train_micro_batch_size_per_gpu", 1)
    m = cfg.get("gradient_accumulation_steps", 1)
    gbs = cfg.get("train_batch_size")
    if gbs is None:
        raise ImportPlanError("train_batch_size: required")
    counted = divide_exactly(gbs, mbs * m, "train_batch_size / (micro × accumulation)")
    pipe = cfg.get("pipeline", {})
    pp = pipe.get("stages", 1)
    if not isinstance(pp, int):
        raise ImportPlanError(f"pipeline.stages: {pp!r}; the stage count must be an integer to read a plan")
    tp = cfg.get("tensor_parallel", {}).get("autotp_size", 1)
    # DeepSpeed counts AutoTP ranks as data parallel without pipeline parallelism (export_deepspeed.deepspeed_dp_ranks)
    dp = counted if pp > 1 else divide_exactly(counted, tp, "train_batch_size / (micro × accumulation × autotp_size)")
    gbs = mbs * m * dp
    sp = cfg.get("sequence_parallel_size", 1)  # DeepSpeed-Ulysses (runtime/config.py:721-722)
    if tp * pp * dp * sp != base.cluster.num_gpus:
        raise ImportPlanError(f"tp·pp·dp·sp = {tp * pp * dp * sp} (autotp_size·pipeline.stages·data-parallel ranks·"
                              f"sequence_parallel_size) must equal cluster.num_gpus = "
                              f"{base.cluster.num_gpus}")
    plan: dict[str, Any] = {"tp": tp, "cp": sp, "pp": pp, "dp": dp, "micro_batch_size": mbs, "num_microbatches": m,
                            "zero_stage": cfg.get("zero_optimization", {}).get("stage", 0)}
    if sp > 1:
        plan["cp_comm_type"] = "a2a"
    if tp > 1:
        plan["sequence_parallel"] = False
    zero_cfg = cfg.get("zero_optimization", {})
    mics = zero_cfg.get("mics_shard_size", -1)
    if isinstance(mics, int) and 0 < mics < dp:  # MiCS: shard groups of mics_shard_size (profiles 'deepspeed.mics')
        plan["zero_replicas"] = divide_exactly(dp, mics, "data-parallel ranks / zero_optimization.mics_shard_size")
    offload = zero_cfg.get("offload_optimizer") or {}
    if offload.get("device") in ("cpu", "nvme"):
        plan["optimizer_offload_fraction"] = float(offload.get("ratio", 1.0))
    interval = pipe.get("activation_checkpoint_interval", 0)
    if (pp > 1 and interval) or (pp == 1 and "activation_checkpointing" in cfg):
        if pp > 1 and interval != 1:
            raise ImportPlanError("pipeline.activation_checkpoint_interval: only 0 or 1 has a per-stage plan form")
        plan["recompute"] = "full"
    return spec_with(base, plan=plan, training={"global_batch_size": gbs})


READERS = {"megatron": spec_from_megatron, "torchtitan": spec_from_torchtitan, "deepspeed": spec_from_deepspeed}


def spec_from_export(text: str, target: str, base: Spec) -> Spec:
    """``base`` with the plan (and the model/training fields the file states) read from an exported file."""
    if target not in READERS:
        raise ImportPlanError(f"import: {target!r} has no reader; known: {', '.join(READERS)}")
    return READERS[target](text, base)


__all__ = ["spec_from_export", "spec_from_megatron", "spec_from_torchtitan", "spec_from_deepspeed", "READERS",
           "ImportPlanError", "megatron_tokens", "layout_chunks"]
