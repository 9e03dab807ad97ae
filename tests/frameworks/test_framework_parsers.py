"""Our exports fed to the frameworks' own parsers (issue 24.8): DeepSpeed's ``DeepSpeedConfig``, torchtitan's
``ConfigManager`` + ``ParallelDims``, Megatron-Core's ``TransformerConfig`` and its layer-count helper, on the CPU,
with no process group (the world size is given to each parser as ``deepspeed.initialize`` / torchtitan's trainer
would see it). The values they derive must equal the plan's.

Needs the ``frameworks`` extra (``pip install -e ".[test,frameworks]"``: torch 2.13.0 CPU, deepspeed 0.19.8,
torchtitan 0.2.2, megatron-core 0.16.1; .ci/run installs it); each test skips, saying so, without it.
megatron-core 0.15.3 (the Megatron export's target) requires numpy < 2 and cannot be installed beside parplan's
numpy 2.4.6: 0.16.1 is the nearest release that can. The two differ in the files these checks run
(transformer_config.py, model_parallel_config.py, transformer_block.py, pipeline_parallel_layer_layout.py: 861
changed lines between core_v0.15.3 and the 0.16.1 wheel), so the target's own code is run too:
``benchmarks/framework_parsers.py --megatron-lm DIR`` parses every exported argv with Megatron-LM core_v0.15.3's
``parse_args`` + ``validate_args`` + ``core_transformer_config_from_args`` and compares the same values
(benchmarks/results/framework_parsers_megatron_lm.txt).
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import sized, small_specs
from tests.export_cases import CASE_NAMES, load_case
from tests.runs_on_cases import listed_plan
from parplan.costmodel.spec.layout import model_chunk_layers
from parplan.frameworks.export import export_plan
from parplan.frameworks.export_common import global_batch_size


def _need(module: str):
    return pytest.importorskip(module, reason=f"{module} is in the 'frameworks' extra: pip install -e \".[frameworks]\"")


# ------------------------------------------------------------------------------------------------- DeepSpeed


# context parallelism beside the cases' plans: Ulysses (a2a) with and without AutoTP, which DeepSpeed runs; the KV ring
# and CP beside the pipeline, which it cannot (runs_on leaves DeepSpeed out; the export says what it wrote instead)
CP_VARIANTS = {
    "llama3-8b-fsdp+ulysses": ("llama3-8b-fsdp", dict(cp=2, dp=4, cp_comm_type="a2a", sequence_parallel=False)),
    "gpt-1.7b-ddp+ulysses": ("gpt-1.7b-ddp", dict(cp=2, dp=4, cp_comm_type="a2a")),
    "llama3-8b-fsdp+ring": ("llama3-8b-fsdp", dict(cp=2, dp=4, cp_comm_type="p2p")),
    "llama3-70b-uneven-block+ulysses-pp": ("llama3-70b-uneven-block", dict(cp=2, dp=2, cp_comm_type="a2a",
                                                                         zero_stage=0)),
}


def _deepspeed_case(case: str):
    """A case, or a CP variant of one (its global batch kept: the micro-batches per step follow DP)."""
    if case not in CP_VARIANTS:
        return load_case(case)
    name, update = CP_VARIANTS[case]
    spec, plan = load_case(name)
    update = dict(update, num_microbatches=spec.training.global_batch_size // (plan.micro_batch_size * update["dp"]))
    return spec, plan.model_copy(update=update)


@pytest.mark.parametrize("case", CASE_NAMES + sorted(CP_VARIANTS))
def test_deepspeed_config_accepts_the_export(case, monkeypatch):
    """``DeepSpeedConfig(config, mpu)`` as ``deepspeed.initialize`` builds it (deepspeed/__init__.py: no mpu without
    pipeline parallelism, ``model.mpu()`` of the PipelineModule with it): its batch assertion passes and the micro
    batch, accumulation steps and ZeRO stage are the plan's; for every plan ``runs_on`` lists DeepSpeed for, the data
    parallel ranks it counts (its ``world_size`` without the AutoTP ranks), the Ulysses degree
    (``sequence_parallel_size``) and the sequences per step are the plan's DP, CP and global batch, CP > 1 included."""
    _need("deepspeed")
    import deepspeed.runtime.config as ds_config
    from deepspeed.runtime.pipe.topology import PipeModelDataParallelTopology, PipelineParallelGrid  # noqa: F401

    from parplan.costmodel.spec.framework_binding import runs_on

    spec, plan = _deepspeed_case(case)
    export = export_plan(spec, plan, "deepspeed")
    cfg = json.loads(export.text)
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
    autotp = plan.tp if plan.pp == 1 else 1  # AutoTP ranks count as data parallel and share their micro-batches
    derived = (int(ds.world_size) // autotp, cfg.get("sequence_parallel_size", 1), ds.train_batch_size // autotp)
    planned = (plan.dp, plan.cp, global_batch_size(plan))
    listed = "deepspeed" in runs_on(spec, plan)
    if plan.cp == 1 or listed:
        assert derived == planned, (listed, derived, planned)
    elif derived != planned:  # CP DeepSpeed cannot run as planned: the export says what it runs instead
        assert any("cp = " in w and ("refused" in w or "not exported" in w) for w in export.warnings)
    assert listed == (case not in ("llama3-8b-fsdp+ring", "llama3-70b-uneven-block+ulysses-pp")) or plan.cp == 1


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


# ------------------------------------------------------- every derived value, over each framework's space


@pytest.mark.parametrize("target", ["torchtitan", "deepspeed", "megatron"])
@settings(max_examples=sized(25, 100), deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
@given(spec=small_specs(), data=st.data())
def test_a_listed_plan_is_what_the_framework_derives(spec, target, data):
    """Issue 40: a plan drawn from torchtitan's, DeepSpeed's or megatron-core's own space that ``runs_on`` lists for it
    is what the framework's own code derives from the export (benchmarks/framework_derived.py: torchtitan's
    ``ConfigManager``, ``ParallelDims`` and ``apply_ac``; DeepSpeed's ``DeepSpeedConfig`` and
    ``deepspeed.moe.layer.MoE``; benchmarks/megatron_derived.py: megatron-core's ``TransformerConfig`` and
    ``get_num_layers_to_build``): degrees, EP and ETP, the batch split, SP, the CP comm type, recompute and the layers
    it recomputes per stage; torchtitan's torch.compile of the model."""
    _need({"torchtitan": "torchtitan", "deepspeed": "deepspeed", "megatron": "megatron.core"}[target])
    from benchmarks.framework_derived import (deepspeed_derived, differences, planned, planned_torchtitan,
                                              torchtitan_derived)
    from benchmarks.megatron_derived import config_differences, megatron_core_config

    spec, plan = listed_plan(data.draw, spec, target)
    if target == "megatron":
        assert not config_differences(megatron_core_config(spec, plan)[0], spec, plan), plan
        return
    derived = (torchtitan_derived if target == "torchtitan" else deepspeed_derived)(spec, plan)
    wanted = (planned_torchtitan if target == "torchtitan" else planned)(spec, plan)
    assert not differences(derived, wanted), (plan, differences(derived, wanted))


def test_the_derived_values_can_differ():
    """The comparison can fail: torchtitan's ``apply_ac`` on the export of a plan recomputing two of every stage's
    layers in a way it cannot (not every n-th) wraps every layer, and DeepSpeed's pipeline checkpoints every layer."""
    _need("torchtitan")
    _need("deepspeed")
    from benchmarks.framework_derived import deepspeed_derived, differences, planned, torchtitan_derived

    spec, plan = load_case("llama3-70b-uneven-block")
    assert plan.recompute == "full" and list(plan.recompute_layers) != list(plan.stage_layers)
    for derive in (torchtitan_derived, deepspeed_derived):
        assert (f"recompute_layers {list(plan.stage_layers)!r} != {list(plan.recompute_layers)!r}"
                in differences(derive(spec, plan), planned(spec, plan)))


@pytest.mark.parametrize("eager", [False, True])
def test_torchtitan_compiles_the_model_unless_priced_eager(eager):
    """The plan's pricing of elementwise ops (``assumptions.eager_elementwise``) is torchtitan's ``[compile]``:
    torchtitan's own ``ConfigManager`` reads the export as compiling the model exactly when the plan is priced fused."""
    _need("torchtitan")
    from benchmarks.framework_derived import differences, planned_torchtitan, torchtitan_derived

    spec, plan = load_case("llama3-70b-uneven-block")
    spec = spec.model_copy(update={"assumptions": spec.assumptions.model_copy(update={"eager_elementwise": eager})})
    derived = torchtitan_derived(spec, plan)
    assert derived["compiled"] is (not eager)
    assert not [d for d in differences(derived, planned_torchtitan(spec, plan)) if d.startswith("compiled")]


# ------------------------------------------------------------------------------------------------ Megatron-Core


def _transformer_config(spec, plan):
    from benchmarks.megatron_derived import megatron_core_config

    return megatron_core_config(spec, plan)


@pytest.mark.parametrize("case", CASE_NAMES)
def test_megatron_core_transformer_config_and_layer_counts(case):
    """megatron-core's ``TransformerConfig.__post_init__`` (its ModelParallelConfig checks included) accepts the
    export's settings, and ``get_num_layers_to_build`` gives every (pipeline rank, virtual stage) the plan's layers."""
    _need("megatron.core")
    from benchmarks.megatron_derived import megatron_core_layers_per_chunk

    from benchmarks.megatron_derived import config_differences
    from parplan.costmodel.spec.framework_binding import runs_on

    spec, plan = load_case(case)
    config, s = _transformer_config(spec, plan)
    assert config.virtual_pipeline_model_parallel_size == (plan.vpp if plan.vpp > 1 else None)
    if "megatron-core" in runs_on(spec, plan):  # every value megatron-core derives is the plan's
        assert not config_differences(config, spec, plan)
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
    from parplan.library.spec_io import load_spec_file
    from parplan.solver.cpsat import SolverControls
    from parplan.solver.planner import optimize
    from benchmarks.megatron_derived import megatron_core_layers_per_chunk

    root = Path(__file__).resolve().parents[2]
    spec = load_spec_file(root / "examples" / "pools" / "llama3-8b-h100-a100.yaml")
    plan = optimize(spec, controls=SolverControls(workers=1, deterministic=True)).plans[0].plan
    assert plan.stage_pools is not None and len(set(plan.stage_pools)) > 1
    config, s = _transformer_config(spec, plan)
    assert s.layout is not None or len(set(plan.stage_layers)) == 1
    assert megatron_core_layers_per_chunk(config, plan) == model_chunk_layers(plan)


def test_megatron_core_accepts_mixtral_with_expert_tensor_parallelism():
    """Issue 40: a Mixtral plan with ETP 2 exported with Megatron's default biases failed megatron-core's own
    ``TransformerConfig.__post_init__`` ('Bias in Moe is only supported when ETP==1'); the export now writes the
    model's --disable-bias-linear, and the config builds. With biases on (the old file) it still fails."""
    _need("megatron.core")
    spec, plan = load_case("mixtral-8x7b-ep")
    p = plan.model_copy(update={"etp": 2, "ep": 4})
    config, _ = _transformer_config(spec, p)
    assert (config.expert_tensor_parallel_size, config.add_bias_linear) == (2, False)
    from megatron.core.transformer.transformer_config import TransformerConfig
    import dataclasses

    fields = {f.name: getattr(config, f.name) for f in dataclasses.fields(config) if f.init}
    with pytest.raises(AssertionError, match="Bias in Moe"):
        TransformerConfig(**{**fields, "add_bias_linear": True})


def test_megatron_core_builds_deepseek_v3_with_mla_and_mtp():
    """DeepSeek-V3 with MLA and one MTP layer: megatron-core's ``MLATransformerConfig`` accepts the exported widths,
    latent norms and MTP depth, and gives every stage the plan's layers (the layout's 'm' before the loss)."""
    _need("megatron.core")
    from benchmarks.megatron_derived import megatron_core_layers_per_chunk
    from parplan.library.spec_io import parse_spec
    from parplan.costmodel.evaluation.evaluate import evaluate

    spec = parse_spec("model: {preset: deepseek-v3, num_mtp_layers: 1}\ntraining: {seq_len: 4096, global_batch_size: "
                      "1024}\ncluster: {gpu: H100-SXM-80GB, num_gpus: 256}\nplan: {tp: 1, pp: 4, ep: 8, "
                      "micro_batch_size: 1, schedule: 1f1b, stage_layers: [14, 16, 17, 14]}\n")
    plan = evaluate(spec, spec.plan).plan
    config, _ = _transformer_config(spec, plan)
    assert spec.model.mla is not None and config.multi_latent_attention and config.qk_layernorm
    assert (config.mtp_num_layers, config.normalization, config.add_bias_linear) == (1, "RMSNorm", False)
    assert megatron_core_layers_per_chunk(config, plan) == model_chunk_layers(plan)


def test_megatron_core_accepts_the_bridge_family_keys():
    """The Megatron-Bridge export's family keys that are ``TransformerConfig`` fields (normalization, biases, gated MLP,
    query groups) build megatron-core's config for a Mixtral plan with ETP 2, which the recipe's biases would not."""
    _need("megatron.core")
    import dataclasses

    from megatron.core.transformer.transformer_config import TransformerConfig
    from parplan.frameworks.export_bridge import bridge_overrides

    spec, plan = load_case("mixtral-8x7b-ep")
    p = plan.model_copy(update={"etp": 2, "ep": 4})
    keys = {k.removeprefix("model."): v for k, v in bridge_overrides(spec, p)[0] if k.startswith("model.")}
    config, _ = _transformer_config(spec, p)
    names = {f.name for f in dataclasses.fields(TransformerConfig) if f.init}
    fields = {f.name: getattr(config, f.name) for f in dataclasses.fields(config) if f.init}
    family = {k: v for k, v in keys.items() if k in ("normalization", "add_bias_linear", "gated_linear_unit",
                                                      "num_query_groups") and k in names}
    assert len(family) == 4 and keys["position_embedding_type"] == "rope"
    built = TransformerConfig(**{**fields, **family})
    assert (built.expert_tensor_parallel_size, built.add_bias_linear) == (2, False)


@pytest.mark.parametrize("preset,flavor", [("llama3-8b", ("llama3", "8B")), ("llama3-70b", ("llama3", "70B")),
                                           ("llama3.1-405b", ("llama3", "405B")), ("deepseek-v3", ("deepseek_v3", "671B")),
                                           ("mixtral-8x7b", None)])
def test_torchtitan_model_flavor_is_the_specs_model(preset, flavor, tmp_path: Path):
    """Issue 40 item 2: the torchtitan export names the v0.2.2 model flavour whose args are the spec's model (MLA
    included), read back by ``ConfigManager`` and checked against torchtitan's own flavour table; a model no flavour
    builds gets none (and says so)."""
    _need("torchtitan")
    from torchtitan.config import ConfigManager
    from torchtitan.protocols.train_spec import get_train_spec

    from parplan.library.spec_io import parse_spec
    from parplan.costmodel.evaluation.evaluate import evaluate

    spec = parse_spec(f"model: {{preset: {preset}}}\ntraining: {{seq_len: 4096, global_batch_size: 256}}\n"
                      "cluster: {gpu: H100-SXM-80GB, num_gpus: 64}\nplan: {tp: 8, pp: 1, micro_batch_size: 1}\n")
    plan = evaluate(spec, spec.plan).plan
    export = export_plan(spec, plan, "torchtitan")
    path = tmp_path / "torchtitan.toml"
    path.write_text(export.text)
    job = ConfigManager().parse_args(["--job.config_file", str(path)])
    if flavor is None:
        assert "name" not in tomllib.loads(export.text).get("model", {})
        assert "no v0.2.2 flavour is this model" in export.text
        return
    assert (job.model.name, job.model.flavor) == flavor
    args, m = get_train_spec(job.model.name).model_args[job.model.flavor], spec.model
    assert (args.dim, args.n_layers, args.n_heads, args.vocab_size) == (m.hidden_size, m.num_layers,
                                                                       m.num_attention_heads, m.vocab_size)
    if m.mla is not None:
        assert (args.q_lora_rank, args.kv_lora_rank, args.qk_nope_head_dim, args.qk_rope_head_dim, args.v_head_dim) == (
            m.mla.q_lora_rank, m.mla.kv_lora_rank, m.mla.qk_nope_head_dim, m.mla.qk_rope_head_dim, m.mla.v_head_dim)
        assert (args.moe_args.num_experts, args.moe_args.top_k, args.n_dense_layers) == (
            m.moe.num_experts, m.moe.top_k, m.moe.first_dense_layers)
        assert not any(w.startswith("model.mla ") for w in export.warnings)
    else:
        assert args.n_kv_heads == m.kv_heads
