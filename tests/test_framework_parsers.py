"""Our exports fed to the frameworks' own parsers (issue 24.8): DeepSpeed's ``DeepSpeedConfig``, torchtitan's
``ConfigManager`` + ``ParallelDims``, Megatron-Core's ``TransformerConfig`` and its layer-count helper, on the CPU,
with no process group (the world size is given to each parser as ``deepspeed.initialize`` / torchtitan's trainer
would see it). The values they derive must equal the plan's.

Needs the ``frameworks`` extra (``pip install -e ".[test,frameworks]"``: torch 2.13.0 CPU, deepspeed 0.19.8,
torchtitan 0.2.2, megatron-core 0.16.1; .ci/run installs it); each test skips, saying so, without it.
megatron-core 0.15.3 (the Megatron export's target) requires numpy < 2 and cannot be installed beside parplan's
numpy 2.4.6: 0.16.1 is the nearest release that can.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from export_cases import CASE_NAMES, load_case
from parplan.frameworks.export import export_plan
from parplan.frameworks.export_common import global_batch_size, model_chunk_layers
from parplan.frameworks.export_megatron import megatron_settings


def _need(module: str):
    return pytest.importorskip(module, reason=f"{module} is in the 'frameworks' extra: pip install -e \".[frameworks]\"")


# ------------------------------------------------------------------------------------------------- DeepSpeed


@pytest.mark.parametrize("case", CASE_NAMES)
def test_deepspeed_config_accepts_the_export(case, monkeypatch):
    """``DeepSpeedConfig(config, mpu)`` as ``deepspeed.initialize`` builds it (deepspeed/__init__.py: no mpu without
    pipeline parallelism, ``model.mpu()`` of the PipelineModule with it): its batch assertion passes and the micro
    batch, accumulation steps and ZeRO stage are the plan's."""
    _need("deepspeed")
    import deepspeed.runtime.config as ds_config
    from deepspeed.runtime.pipe.topology import PipeModelDataParallelTopology, PipelineParallelGrid  # noqa: F401

    spec, plan = load_case(case)
    cfg = json.loads(export_plan(spec, plan, "deepspeed").text)
    world = spec.cluster.num_gpus
    monkeypatch.setattr(ds_config.dist, "get_rank", lambda *a, **k: 0)
    monkeypatch.setattr(ds_config.dist, "get_world_size", lambda *a, **k: world)
    mpu = None
    if plan.pp > 1:  # the export's PipelineModule topology: pipe x data x model (tp)
        topo = PipeModelDataParallelTopology(num_pp=plan.pp, num_mp=plan.tp, num_dp=world // (plan.pp * plan.tp))

        class _Mpu:  # the two calls DeepSpeedConfig makes of PipelineParallelGrid
            def get_data_parallel_world_size(self):
                return topo.get_dim("data")

        mpu = _Mpu()
    ds = ds_config.DeepSpeedConfig(cfg, mpu)
    assert ds.train_micro_batch_size_per_gpu == plan.micro_batch_size
    assert ds.gradient_accumulation_steps == plan.num_microbatches
    assert ds.train_batch_size == cfg["train_batch_size"]
    assert ds.zero_optimization_stage == (min(plan.zero_stage, 1) if plan.pp > 1 else plan.zero_stage)
    sequences = ds.train_batch_size // (plan.tp if plan.pp == 1 else 1)  # AutoTP ranks share their micro-batches
    if plan.cp == 1 or plan.cp_comm_type == "a2a":
        assert sequences == global_batch_size(plan)


def test_deepspeed_config_rejects_the_old_batch_size(monkeypatch):
    """The parser can fail: the batch size the export wrote before issue 24.7 (DP only) is refused for a TP plan."""
    _need("deepspeed")
    import deepspeed.runtime.config as ds_config

    spec, plan = load_case("llama3-8b-fsdp")
    cfg = json.loads(export_plan(spec, plan, "deepspeed").text)
    assert plan.tp > 1 and plan.pp == 1
    monkeypatch.setattr(ds_config.dist, "get_rank", lambda *a, **k: 0)
    monkeypatch.setattr(ds_config.dist, "get_world_size", lambda *a, **k: spec.cluster.num_gpus)
    with pytest.raises(AssertionError, match="train_batch_size"):
        ds_config.DeepSpeedConfig({**cfg, "train_batch_size": global_batch_size(plan)})


# ------------------------------------------------------------------------------------------------ torchtitan


@pytest.mark.parametrize("case", CASE_NAMES)
def test_torchtitan_config_manager_and_parallel_dims_accept_the_export(case, tmp_path: Path):
    """torchtitan 0.2.2 ``ConfigManager().parse_args(["--job.config_file", ...])`` reads the TOML and
    ``ParallelDims`` (as its trainer builds it, torchtitan/train.py) validates the degrees; both equal the plan."""
    _need("torchtitan")
    from torchtitan.config import ConfigManager
    from torchtitan.distributed import ParallelDims

    spec, plan = load_case(case)
    text = export_plan(spec, plan, "torchtitan").text
    path = tmp_path / "torchtitan.toml"
    path.write_text(text)
    job = ConfigManager().parse_args(["--job.config_file", str(path)])
    par = job.parallelism
    dims = ParallelDims(dp_shard=par.data_parallel_shard_degree, dp_replicate=par.data_parallel_replicate_degree,
                        cp=par.context_parallel_degree, tp=par.tensor_parallel_degree,
                        pp=par.pipeline_parallel_degree, ep=par.expert_parallel_degree,
                        etp=par.expert_tensor_parallel_degree, world_size=spec.cluster.num_gpus)
    assert (dims.tp, dims.cp, dims.pp) == (plan.tp, plan.cp, plan.pp)
    assert dims.dp_shard * dims.dp_replicate == plan.dp
    assert job.training.seq_len == spec.training.seq_len
    tr = job.training
    if plan.pp == 1:  # gradient accumulation: global / (local x data-parallel degree) steps of local sequences
        assert tr.local_batch_size == plan.micro_batch_size
        assert tr.global_batch_size // (tr.local_batch_size * plan.dp) == plan.num_microbatches
    else:  # the pipeline splits the local batch into micro-batches
        assert tr.local_batch_size == plan.micro_batch_size * plan.num_microbatches
    assert tr.global_batch_size in (-1, global_batch_size(plan))
    if plan.pp > 1:
        assert job.parallelism.pipeline_parallel_microbatch_size == plan.micro_batch_size
        parts = job.parallelism.module_fqns_per_model_part
        doc = tomllib.loads(text)
        assert parts == doc["parallelism"]["module_fqns_per_model_part"]
        layers = [sum(name.startswith("layers.") for name in part) for part in parts]
        if plan.schedule not in ("dualpipe", "dualpipev"):
            assert layers == model_chunk_layers(plan)


# ------------------------------------------------------------------------------------------------ Megatron-Core


def _transformer_config(spec, plan):
    from megatron.core.transformer.transformer_config import TransformerConfig

    s = megatron_settings(spec, plan)
    m = spec.model
    kwargs = dict(num_layers=m.num_layers, hidden_size=m.hidden_size, ffn_hidden_size=m.ffn_hidden_size,
                  num_attention_heads=m.num_attention_heads, num_query_groups=m.kv_heads,
                  tensor_model_parallel_size=s.tp, pipeline_model_parallel_size=s.pp, context_parallel_size=s.cp,
                  sequence_parallel=s.sequence_parallel, pipeline_dtype=__import__("torch").bfloat16,
                  virtual_pipeline_model_parallel_size=plan.vpp if plan.vpp > 1 else None,
                  num_layers_in_first_pipeline_stage=s.first_stage_layers,
                  num_layers_in_last_pipeline_stage=s.last_stage_layers,
                  pipeline_model_parallel_layout=s.layout,
                  recompute_granularity=s.recompute_granularity, recompute_method=s.recompute_method,
                  recompute_num_layers=s.recompute_num_layers)
    if s.ep is not None:
        kwargs.update(num_moe_experts=m.moe.num_experts, moe_router_topk=m.moe.top_k,
                      expert_model_parallel_size=s.ep, expert_tensor_parallel_size=s.etp,
                      moe_ffn_hidden_size=m.moe.expert_ffn_hidden_size)
    return TransformerConfig(**kwargs), s


@pytest.mark.parametrize("case", CASE_NAMES)
def test_megatron_core_transformer_config_and_layer_counts(case):
    """megatron-core's ``TransformerConfig.__post_init__`` (its ModelParallelConfig checks included) accepts the
    export's settings, and ``get_num_layers_to_build`` gives every (pipeline rank, virtual stage) the plan's layers."""
    _need("megatron.core")
    from benchmarks.framework_parsers import megatron_core_layers_per_chunk

    spec, plan = load_case(case)
    config, s = _transformer_config(spec, plan)
    assert config.virtual_pipeline_model_parallel_size == (plan.vpp if plan.vpp > 1 else None)
    chunks = model_chunk_layers(plan)
    assert megatron_core_layers_per_chunk(config, plan) == chunks
    if s.recompute_method is not None:
        assert (config.recompute_method, config.recompute_num_layers) == (s.recompute_method, s.recompute_num_layers)


def test_megatron_core_rejects_a_broken_split():
    """The parser can fail: first/last stage sizes whose middle does not divide over the middle stages."""
    _need("megatron.core")
    spec, plan = load_case("llama3-70b-uneven-block")
    config, s = _transformer_config(spec, plan)
    assert s.first_stage_layers is not None
    from megatron.core.transformer.transformer_config import TransformerConfig

    with pytest.raises((AssertionError, ValueError)):
        TransformerConfig(num_layers=spec.model.num_layers, hidden_size=spec.model.hidden_size,
                          num_attention_heads=spec.model.num_attention_heads, pipeline_model_parallel_size=plan.pp,
                          pipeline_dtype=__import__("torch").bfloat16,
                          num_layers_in_first_pipeline_stage=s.first_stage_layers + 1,
                          num_layers_in_last_pipeline_stage=s.last_stage_layers)


def test_megatron_core_builds_each_stage_of_a_pool_plan():
    """A plan over two GPU pools (examples/pools/llama3-8b-h100-a100.yaml, solved): megatron-core's own
    ``TransformerConfig`` accepts the export's settings (its ``pipeline_model_parallel_layout``, one entry per stage)
    and ``get_num_layers_to_build`` gives every pipeline rank the layers of its stage on its pool."""
    _need("megatron.core")
    from parplan.client.spec_io import load_spec_file
    from parplan.solver.cpsat import SolverControls
    from parplan.solver.planner import optimize
    from benchmarks.framework_parsers import megatron_core_layers_per_chunk

    root = Path(__file__).resolve().parents[1]
    spec = load_spec_file(root / "examples" / "pools" / "llama3-8b-h100-a100.yaml")
    plan = optimize(spec, controls=SolverControls(workers=1, deterministic=True)).plans[0].plan
    assert plan.stage_pools is not None and len(set(plan.stage_pools)) > 1
    config, s = _transformer_config(spec, plan)
    assert s.layout is not None or len(set(plan.stage_layers)) == 1
    assert megatron_core_layers_per_chunk(config, plan) == model_chunk_layers(plan)
