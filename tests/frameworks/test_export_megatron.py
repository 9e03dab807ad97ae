"""The exported Megatron-LM arguments pass Megatron-LM's own argument rules, re-implemented here.

Source: NVIDIA/Megatron-LM at core_v0.15.3 (commit 309ffca6a40553362d44fd17efc56b772fa1aa44):

* ``megatron/training/arguments.py`` ``validate_args``: world size divisible by tp·pp·cp; at most one of
  the three virtual-pipeline forms; the layout's stage count divisible by pp; the per-virtual-stage form
  excludes first/last stage sizes and needs layers % pp == 0 and per-stage % layers-per-chunk == 0;
  without any of them and without first/last sizes, layers % pp == 0; interleaving needs pp > 1
  (p2p overlap on, the default); ``--overlap-param-gather`` needs the distributed optimizer or
  Megatron-FSDP and ``--overlap-grad-reduce``; selective recompute takes no method; ``--tp-comm-overlap``
  needs ``--sequence-parallel``; TP or CP > 1 without FSDP needs CUDA_DEVICE_MAX_CONNECTIONS=1 (before
  Blackwell); Megatron-FSDP needs ``--ckpt-format fsdp_dtensor`` and CUDA_DEVICE_MAX_CONNECTIONS != 1;
  seq_length % 2·cp == 0 for CP; max_position_embeddings >= seq_length; EP needs num_experts % ep == 0;
* ``megatron/core/transformer/transformer_config.py`` ``TransformerConfig.__post_init__``: full recompute
  needs method uniform|block and recompute_num_layers; first/last stage sizes > 0 and divisible by vpp,
  the middle layers divisible by the middle stages and per middle rank by vpp; heads and query groups
  divisible by tp;
* ``megatron/core/transformer/pipeline_parallel_layer_layout.py`` ``validate_layer_layout``: E first and
  once, L last and once, as many ``t`` as layers;
* ``megatron/core/num_microbatches_calculator.py``: global batch % (micro batch · dp) == 0;
* the family flags' defaults (``--normalization`` LayerNorm, ``--position-embedding-type`` learned_absolute,
  linear biases on) and two rules on them: MTP is refused with learned_absolute position embeddings
  (``validate_args``), biases in MoE layers with ETP > 1 (``TransformerConfig.__post_init__``);
* ``megatron/core/tensor_parallel/layers.py``: column-parallel output sizes (ffn) divisible by tp.
"""

from __future__ import annotations

import argparse
import re
import shlex

import pytest

from tests.export_cases import CASE_NAMES, load_case
from parplan.costmodel.schedules.schedule import Schedule
from parplan.library.spec_io import parse_spec
from parplan.frameworks.export import export_plan
from parplan.frameworks.export_megatron import megatron_argv
from parplan.frameworks.import_plan import layout_chunks, megatron_tokens


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False, allow_abbrev=False, exit_on_error=False)
    ints = ["num-layers", "hidden-size", "ffn-hidden-size", "num-attention-heads", "num-query-groups", "kv-channels",
            "seq-length", "max-position-embeddings", "num-experts", "moe-router-topk", "moe-ffn-hidden-size",
            "moe-shared-expert-intermediate-size", "tensor-model-parallel-size", "pipeline-model-parallel-size",
            "context-parallel-size", "expert-model-parallel-size", "expert-tensor-parallel-size",
            "num-layers-per-virtual-pipeline-stage", "num-virtual-stages-per-pipeline-rank",
            "decoder-first-pipeline-num-layers", "decoder-last-pipeline-num-layers", "recompute-num-layers",
            "micro-batch-size", "global-batch-size", "q-lora-rank", "kv-lora-rank", "qk-head-dim",
            "qk-pos-emb-head-dim", "v-head-dim", "mtp-num-layers"]
    for name in ints:
        p.add_argument("--" + name, type=int)
    p.add_argument("--recompute-granularity", choices=["full", "selective"])
    p.add_argument("--recompute-method", choices=["uniform", "block"])
    p.add_argument("--data-parallel-sharding-strategy", choices=["no_shard", "optim", "optim_grads", "optim_grads_params"])
    p.add_argument("--ckpt-format", default="torch_dist")
    p.add_argument("--fp8-format", choices=["e4m3", "hybrid"])
    p.add_argument("--moe-layer-freq", default="1")
    # core_v0.15.3 arguments.py:3131-3142
    p.add_argument("--moe-token-dispatcher-type", choices=["allgather", "alltoall", "flex"], default="allgather")
    p.add_argument("--moe-expert-capacity-factor", type=float)
    p.add_argument("--moe-deepep-num-sms", type=int)  # core_v0.15.3 arguments.py:3137
    # core_v0.16.0 (3df20090): the config dataclass's flags for HybridEP
    p.add_argument("--moe-flex-dispatcher-backend", choices=["deepep", "hybridep"])
    p.add_argument("--moe-hybridep-num-sms", type=int)
    p.add_argument("--pipeline-model-parallel-layout")
    # core_v0.15.3 arguments.py:1571-1580 (window size: tuple_type "a,b"; skip frequency: moe_freq_type)
    p.add_argument("--softmax-type", choices=["learnable", "vanilla", "off-by-one"], default="vanilla")
    p.add_argument("--window-size", type=lambda x: tuple(int(v) for v in x.strip("()").split(",")))
    p.add_argument("--window-attn-skip-freq")
    # core_v0.15.3 _add_network_size_args: the family flags and their defaults
    p.add_argument("--normalization", choices=["LayerNorm", "RMSNorm"], default="LayerNorm")
    p.add_argument("--position-embedding-type", choices=["learned_absolute", "rope", "mrope", "relative", "none"],
                   default="learned_absolute")
    for name in ("group-query-attention", "swiglu", "untie-embeddings-and-output-weights", "sequence-parallel",
                 "tp-comm-overlap", "use-distributed-optimizer", "use-megatron-fsdp", "overlap-grad-reduce",
                 "overlap-param-gather", "bf16", "moe-enable-deepep", "disable-bias-linear", "qk-layernorm",
                 "multi-latent-attention"):
        p.add_argument("--" + name, action="store_true")
    return p


def megatron_violations(argv: list[str], world_size: int, env: dict[str, str]) -> list[str]:
    """The rules of the module docstring; an unknown flag is itself a violation (argparse would exit)."""
    args, unknown = _parser().parse_known_args(argv)
    out = [f"unknown argument {u}" for u in unknown if u.startswith("--")]
    tp, pp, cp = args.tensor_model_parallel_size or 1, args.pipeline_model_parallel_size or 1, args.context_parallel_size or 1
    ep = args.expert_model_parallel_size or 1
    L = args.num_layers
    if world_size % (tp * pp * cp):
        out.append("world size not divisible by tp*pp*cp")
        return out
    dp = world_size // (tp * pp * cp)
    forms = [args.num_layers_per_virtual_pipeline_stage, args.num_virtual_stages_per_pipeline_rank,
             args.pipeline_model_parallel_layout]
    if sum(f is not None for f in forms) > 1:
        out.append("more than one virtual-pipeline form")
    first, last = args.decoder_first_pipeline_num_layers, args.decoder_last_pipeline_num_layers
    vpp = None
    if args.pipeline_model_parallel_layout is not None:
        chunks = layout_chunks(args.pipeline_model_parallel_layout)
        if len(chunks) % pp:
            out.append("layout stages not divisible by pp")
        vpp = len(chunks) // pp if len(chunks) // pp > 1 else None
        flat = re.sub(r"(.)\*(\d+)", lambda m: m.group(1) * int(m.group(2)),
                      re.sub(r"\(([^)]+)\)\*(\d+)", lambda m: m.group(1) * int(m.group(2)),
                             args.pipeline_model_parallel_layout.replace(",", ""))).replace("|", "")
        if not flat.startswith("E") or flat.count("E") != 1:
            out.append("layout: embedding must come first, once")
        if not flat.endswith("L") or flat.count("L") != 1:
            out.append("layout: loss must come last, once")
        if flat.count("t") != L:
            out.append("layout: decoder layer count differs from num_layers")
        if first is not None or last is not None:
            out.append("layout with first/last stage sizes")
    elif args.num_layers_per_virtual_pipeline_stage is not None or args.num_virtual_stages_per_pipeline_rank is not None:
        if args.num_virtual_stages_per_pipeline_rank is None:
            if first is not None or last is not None:
                out.append("--num-layers-per-virtual-pipeline-stage with uneven first/last stages")
            if L % pp:
                out.append("num_layers not divisible by pp")
            elif (L // pp) % args.num_layers_per_virtual_pipeline_stage:
                out.append("layers per stage not divisible by layers per virtual stage")
            else:
                vpp = (L // pp) // args.num_layers_per_virtual_pipeline_stage
        else:
            vpp = args.num_virtual_stages_per_pipeline_rank
        vpp = vpp if vpp and vpp > 1 else None
    elif first is None and last is None and L % pp:
        out.append("num_layers not divisible by pp")
    if vpp is not None and pp <= 1:
        out.append("interleaving needs pp > 1")
    if first is not None or last is not None:
        rest, middle = L, pp
        for n in (first, last):
            if n is not None:
                if n <= 0:
                    out.append("first/last stage layers must be > 0")
                if vpp and n % vpp:
                    out.append("first/last stage layers not divisible by vpp")
                rest, middle = rest - n, middle - 1
        if middle and rest % middle:
            out.append("middle layers not divisible by middle stages")
        elif middle and vpp and (rest // middle) % vpp:
            out.append("middle stage layers not divisible by vpp")
    # TransformerConfig.__post_init__ (core_v0.16.0 transformer_config.py:1063-1068): DeepEP only under flex, and
    # not beside another backend
    if args.moe_enable_deepep and args.moe_token_dispatcher_type != "flex":
        out.append("--moe-enable-deepep without --moe-token-dispatcher-type flex")
    if args.moe_enable_deepep and args.moe_flex_dispatcher_backend == "hybridep":
        out.append("--moe-enable-deepep beside --moe-flex-dispatcher-backend hybridep (only one backend)")
    if args.overlap_param_gather and not (args.use_distributed_optimizer or args.use_megatron_fsdp):
        out.append("--overlap-param-gather without distributed optimizer / Megatron-FSDP")
    if args.overlap_param_gather and not args.overlap_grad_reduce:
        out.append("--overlap-param-gather without --overlap-grad-reduce")
    if args.recompute_granularity == "selective" and (args.recompute_method or args.recompute_num_layers is not None):
        out.append("selective recompute takes no method or layer count")
    if args.recompute_granularity == "full" and (args.recompute_method is None or args.recompute_num_layers is None):
        out.append("full recompute needs --recompute-method and --recompute-num-layers")
    sp = args.sequence_parallel and tp > 1
    if args.tp_comm_overlap and not sp:
        out.append("--tp-comm-overlap needs sequence parallelism")
    if args.use_megatron_fsdp:
        if args.ckpt_format != "fsdp_dtensor":
            out.append("Megatron-FSDP needs --ckpt-format fsdp_dtensor")
        if env.get("CUDA_DEVICE_MAX_CONNECTIONS") == "1":
            out.append("Megatron-FSDP with CUDA_DEVICE_MAX_CONNECTIONS=1")
    elif (tp > 1 or cp > 1) and env.get("CUDA_DEVICE_MAX_CONNECTIONS") != "1":
        out.append("TP/CP without CUDA_DEVICE_MAX_CONNECTIONS=1")
    if cp > 1 and args.seq_length % (2 * cp):
        out.append("seq_length not divisible by 2*cp")
    if args.max_position_embeddings is None or args.max_position_embeddings < args.seq_length:
        out.append("max_position_embeddings < seq_length")
    if ep > 1 and (not args.num_experts or args.num_experts % ep):
        out.append("num_experts not divisible by ep")
    if args.num_attention_heads % tp:
        out.append("num_attention_heads not divisible by tp")
    groups = args.num_query_groups if args.group_query_attention else args.num_attention_heads
    if groups % tp or args.num_attention_heads % groups:
        out.append("query groups not divisible by tp (or heads by groups)")
    if args.ffn_hidden_size % tp:
        out.append("ffn_hidden_size not divisible by tp")
    # validate_args (arguments.py:1186-1190 at core_v0.15.3): MTP needs a position embedding other than the default
    if args.mtp_num_layers and args.position_embedding_type == "learned_absolute":
        out.append("Multi-Token Prediction (MTP) is not supported with learned_absolute position embedding type")
    # TransformerConfig.__post_init__: add_bias_linear (on unless --disable-bias-linear) with MoE needs ETP 1 (ETP
    # defaults to TP, validate_args)
    etp = args.expert_tensor_parallel_size or tp
    if args.num_experts and not args.disable_bias_linear and etp != 1:
        out.append("Bias in Moe is only supported when ETP==1")
    mbs = args.micro_batch_size
    if args.global_batch_size % (mbs * dp):
        out.append("global batch not divisible by micro batch * dp")
    return out


def _env(script: str) -> dict[str, str]:
    return dict(re.findall(r"^export (\w+)=(\S+)$", script, re.M))


def _check(spec, plan):
    export = export_plan(spec, plan, "megatron")
    argv = megatron_tokens(export.text)
    assert argv == megatron_argv(spec, plan)
    return megatron_violations(argv, spec.cluster.num_gpus, _env(export.text))


@pytest.mark.parametrize("case", CASE_NAMES)
def test_exported_arguments_pass_megatron_validation(case):
    spec, plan = load_case(case)
    assert _check(spec, plan) == []


def test_variants_pass_megatron_validation():
    """Every pipeline form (equal, per-virtual-stage, first/last with and without vpp, layout with vpp)."""
    spec, plan = load_case("llama3-70b-uneven-block")
    variants = [
        dict(stage_layers=[20, 20, 20, 20], recompute="none", recompute_layers=[0, 0, 0, 0]),
        dict(stage_layers=[20, 20, 20, 20], vpp=5, schedule=Schedule.INTERLEAVED),
        dict(stage_layers=[18, 22, 22, 18], vpp=2, schedule=Schedule.INTERLEAVED, recompute_layers=[2, 2, 2, 2]),
        dict(stage_layers=[16, 24, 20, 20], vpp=2, schedule=Schedule.INTERLEAVED, recompute_layers=[16, 24, 20, 20]),
        dict(zero_stage=2), dict(zero_stage=0), dict(sequence_parallel=False),
    ]
    for update in variants:
        p = plan.model_copy(update=update)
        assert _check(spec, p) == [], update


def test_layout_string_puts_chunks_in_virtual_stage_order():
    spec, plan = load_case("llama3-70b-uneven-block")
    p = plan.model_copy(update=dict(stage_layers=[16, 24, 20, 20], vpp=2, schedule=Schedule.INTERLEAVED,
                                    recompute_layers=[0, 0, 0, 0], recompute="none"))
    text = export_plan(spec, p, "megatron").text
    layout = shlex.split(text.split("--pipeline-model-parallel-layout", 1)[1].split("\n", 1)[0])[0]
    assert layout == "Et*8|t*12|t*10|t*10|t*8|t*12|t*10|t*10L"


def test_the_validator_rejects_broken_arguments():
    """The re-implemented rules can fail: each broken argv is caught."""
    spec, plan = load_case("llama3-70b-uneven-block")
    argv = megatron_argv(spec, plan)
    env = {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}
    assert megatron_violations(argv, 64, env) == []
    assert megatron_violations(argv, 48, env)  # world size
    assert megatron_violations(argv, 64, {})  # TP without CUDA_DEVICE_MAX_CONNECTIONS=1
    broken = list(argv)
    i = broken.index("--decoder-first-pipeline-num-layers")
    broken[i + 1] = "17"  # the middle 43 layers no longer split over 2 stages
    assert "middle layers not divisible by middle stages" in megatron_violations(broken, 64, env)
    assert megatron_violations(argv + ["--num-layers-per-virtual-pipeline-stage", "5"], 64, env)
    assert megatron_violations([t for t in argv if t != "--sequence-parallel"], 64, env)  # tp-comm-overlap needs SP
    assert megatron_violations(argv + ["--tensor-model-parallel-size", "16"], 64, env)  # 8 query groups over TP 16


def test_kv_heads_not_divisible_by_tp_is_caught():
    """A TP degree that does not divide the KV heads (the published-recipe mistake) fails the rules."""
    spec = parse_spec("model: {preset: llama3-70b}\ntraining: {seq_len: 8192, global_batch_size: 512}\n"
                      "cluster: {gpu: H100-SXM-80GB, num_gpus: 64}\n")
    _, plan = load_case("llama3-70b-uneven-block")
    argv = megatron_argv(spec, plan)
    argv[argv.index("--num-query-groups") + 1] = "6"
    assert "query groups not divisible by tp (or heads by groups)" in megatron_violations(
        argv, 64, {"CUDA_DEVICE_MAX_CONNECTIONS": "1"})


def test_solver_plans_pass_megatron_validation():
    """The three best plans the planner finds for the Llama-3 70B example (with their warnings)."""
    from pathlib import Path

    from parplan.library.spec_io import load_spec_file
    from parplan.solver.cpsat import SolverControls
    from parplan.solver.planner import optimize

    spec = load_spec_file(Path(__file__).parents[2] / "examples" / "llama3-70b-64xh100.yaml")
    result = optimize(spec, top_k=3, controls=SolverControls(time_limit_s=20, deterministic=True))
    assert len(result.plans) == 3
    for evaluation in result.plans:
        assert _check(spec, evaluation.plan) == [], evaluation.plan


def _deepseek(plan_yaml: str):
    from parplan.library.spec_io import parse_spec
    from parplan.costmodel.evaluation.evaluate import evaluate

    spec = parse_spec("model: {preset: deepseek-v3, num_mtp_layers: 1, mla: {q_lora_rank: 1536, kv_lora_rank: 512, "
                      "qk_nope_head_dim: 128, qk_rope_head_dim: 64, v_head_dim: 128}}\ntraining: {seq_len: 4096, global_batch_size: 1024}\n"
                      "cluster: {gpu: H100-SXM-80GB, num_gpus: 256}\nplan: " + plan_yaml + "\n")
    return spec, evaluate(spec, spec.plan).plan


def test_mla_and_mtp_are_exported_never_dropped():
    """Issue 24.7: DeepSeek-V3's MLA and MTP were dropped silently (Megatron accepted the file and built a different
    model). The MLA widths go out as _add_mla_args' flags, MTP as --mtp-num-layers and an 'm' before the loss."""
    spec, plan = _deepseek("{tp: 1, pp: 4, ep: 8, micro_batch_size: 1, schedule: 1f1b, stage_layers: [14, 16, 17, 14]}")
    m = spec.model
    assert m.mla is not None and m.num_mtp_layers == 1
    argv = megatron_argv(spec, plan)
    value = lambda flag: argv[argv.index(flag) + 1]  # noqa: E731
    assert "--multi-latent-attention" in argv
    assert value("--q-lora-rank") == str(m.mla.q_lora_rank) and value("--kv-lora-rank") == str(m.mla.kv_lora_rank)
    assert value("--qk-head-dim") == str(m.mla.qk_nope_head_dim)
    assert value("--qk-pos-emb-head-dim") == str(m.mla.qk_rope_head_dim)
    assert value("--v-head-dim") == str(m.mla.v_head_dim) and value("--mtp-num-layers") == "1"
    layout = value("--pipeline-model-parallel-layout")
    assert layout == "Et*14|t*16|t*17|t*14mL" and layout_chunks(layout) == [14, 16, 17, 14]
    from parplan.frameworks.layout import resolve_layout

    assert resolve_layout(layout, 4, 61).mtp_layers == 1  # parplan's reading of Megatron's layout rules


def test_tp_with_ep_gets_sequence_parallelism():
    """Megatron-Core core_v0.15.3 stops on a NameError for TP > 1 with EP > 1 without SP: the export adds
    --sequence-parallel and says so."""
    spec, plan = load_case("mixtral-8x7b-ep")
    export = export_plan(spec, plan.model_copy(update={"sequence_parallel": False}), "megatron")
    assert "--sequence-parallel" in megatron_tokens(export.text)
    assert any("--sequence-parallel when TP and EP" in w for w in export.warnings)


def test_pool_plans_pass_megatron_validation():
    """Plans on several cluster.pools (issue 21): the world is the plan's GPUs (the host order's), the layout string
    gives each stage its own layers and passes the layout rules."""
    from pathlib import Path

    from parplan.library.spec_io import load_spec_file
    from parplan.solver.cpsat import SolverControls
    from parplan.solver.planner import optimize

    spec = load_spec_file(Path(__file__).parents[2] / "examples" / "pools" / "llama3-8b-h100-a100.yaml")
    result = optimize(spec, top_k=3, controls=SolverControls(deterministic=True))
    assert result.plans and any(len(set(e.plan.stage_pools)) > 1 for e in result.plans)
    for evaluation in result.plans:
        plan = evaluation.plan
        export = export_plan(spec, plan, "megatron")
        argv = megatron_tokens(export.text)
        assert argv == megatron_argv(spec, plan) and "PARPLAN_HOST_ORDER" not in " ".join(argv)
        assert megatron_violations(argv, plan.num_gpus, _env(export.text)) == [], plan


def test_sliding_window_and_sinks_are_exported_never_dropped():
    """model.attention goes out as Megatron's own flags (core_v0.15.3 arguments.py:1571-1580): --softmax-type
    learnable, --window-size w-1,0 (window_size (127, 0) for GPT-OSS's 128 keys, as Megatron-Bridge 067f987d
    gpt_oss_bridge.py:87 sets it) and --window-attn-skip-freq N; the arguments still pass Megatron's validation."""
    from parplan.library.spec_io import parse_spec
    from parplan.costmodel.evaluation.evaluate import evaluate

    spec = parse_spec("model: {num_layers: 36, hidden_size: 2880, ffn_hidden_size: 2880, num_attention_heads: 64, "
                      "num_kv_heads: 8, head_dim: 64, vocab_size: 201088, moe: {num_experts: 128, top_k: 4, "
                      "expert_ffn_hidden_size: 2880}, attention: {sliding_window: 128, full_attention_every: 2, "
                      "sinks: true}}\ntraining: {seq_len: 4096, global_batch_size: 1280}\n"
                      "cluster: {gpu: H100-SXM-80GB, num_gpus: 64}\n"
                      "plan: {tp: 1, pp: 4, ep: 8, micro_batch_size: 1, schedule: 1f1b}\n")
    plan = evaluate(spec, spec.plan).plan
    argv = megatron_argv(spec, plan)
    value = lambda flag: argv[argv.index(flag) + 1]  # noqa: E731
    assert value("--softmax-type") == "learnable"
    assert value("--window-size") == "127,0" and value("--window-attn-skip-freq") == "2"
    assert _check(spec, plan) == []
    plain = spec.model_copy(update={"model": spec.model.model_copy(update={"attention": None})})
    assert not {"--softmax-type", "--window-size", "--window-attn-skip-freq"} & set(megatron_argv(plain, plan))


def test_expert_clamp_has_no_flag_and_is_a_warning():
    """Megatron-LM 2a75ac12 has no flag for activation_func_clamp_value (training/arguments.py): GPT-OSS's clamp is a
    warning of the Megatron-LM export; its biases are Megatron's default (no --disable-bias-linear), a warning only
    beside ETP > 1, which Megatron-Core refuses; the Megatron-Bridge export, whose model provider sets them, names
    them once, its own way."""
    from tests import physics_cases as physics
    from parplan.costmodel.evaluation.evaluate import evaluate
    from parplan.costmodel.spec.spec import PlanSpec
    from parplan.frameworks.export_bridge import bridge_overrides
    from parplan.frameworks.export_megatron import megatron_argument_groups

    spec = physics.spec(physics.GPT_OSS, 64)
    plan = evaluate(spec, PlanSpec(tp=1, pp=4, ep=8, micro_batch_size=1, schedule="1f1b")).plan
    warnings = megatron_argument_groups(spec, plan)[1]
    assert any(w.startswith("model.moe.activation_clamp 7.0: Megatron-LM has no command-line flag") for w in warnings)
    assert not any(w.startswith("model.moe.expert_bias") for w in warnings)  # expressed: biases left on
    assert "--disable-bias-linear" not in megatron_argv(spec, plan)
    etp = plan.model_copy(update={"tp": 2, "etp": 2, "dp": plan.dp // 2})  # Megatron-Core refuses biases with ETP > 1
    assert any(w.startswith("model.moe.expert_bias with etp 2") for w in megatron_argument_groups(spec, etp)[1])
    plain = physics.spec({**physics.GPT_OSS, "moe": dict(physics.GPT_OSS["moe"], activation_clamp=None,
                                                          expert_bias=False)}, 64)
    assert not any(w.startswith("model.moe.") for w in megatron_argument_groups(plain, plan)[1])
    bridge = bridge_overrides(spec, plan)[1]
    assert not any("Megatron-LM has no command-line flag" in w for w in bridge)
    assert sum(w.startswith("model.moe") for w in bridge) == 1


def test_model_family_flags_come_from_the_model():
    """Issue 40 item 2: the architecture the cost model prices is written in Megatron-LM's own flags (RMSNorm, rotary
    position embeddings, no linear biases, SwiGLU for a gated MLP, untied output weights, GQA groups, MLA with its
    latent norms, MTP), not left to the user; biases stay on for a model with expert biases."""
    spec, plan = load_case("mixtral-8x7b-ep")
    argv = megatron_argv(spec, plan)
    value = lambda flag: argv[argv.index(flag) + 1]  # noqa: E731
    assert value("--normalization") == "RMSNorm" and value("--position-embedding-type") == "rope"
    assert {"--disable-bias-linear", "--swiglu", "--untie-embeddings-and-output-weights",
            "--group-query-attention"} <= set(argv)
    assert value("--num-query-groups") == str(spec.model.kv_heads)
    assert "family flags such as" not in export_plan(spec, plan, "megatron").text  # nothing left to the user
    gelu = spec.model_copy(update={"model": spec.model.model_copy(update={"gated_mlp": False, "tie_embeddings": True})})
    assert not {"--swiglu", "--untie-embeddings-and-output-weights"} & set(megatron_argv(gelu, plan))
    spec3, plan3 = _deepseek("{tp: 1, pp: 4, ep: 8, micro_batch_size: 1, schedule: 1f1b, stage_layers: [14, 16, 17, 14]}")
    assert {"--multi-latent-attention", "--qk-layernorm"} <= set(megatron_argv(spec3, plan3))


@pytest.mark.parametrize("plan_yaml", [
    "{tp: 1, pp: 4, ep: 8, micro_batch_size: 1, schedule: 1f1b, stage_layers: [14, 16, 17, 14]}",
    "{tp: 2, pp: 8, ep: 8, micro_batch_size: 1, schedule: 1f1b, sequence_parallel: true}",
    "{tp: 1, pp: 4, ep: 16, micro_batch_size: 1, schedule: interleaved, vpp: 2, recompute: full, "
    "pipeline_layout: [[7, 8], [8, 8], [8, 8], [7, 7]]}",
    "{tp: 4, pp: 4, ep: 16, etp: 2, cp: 2, micro_batch_size: 1, schedule: 1f1b, sequence_parallel: true}",
])
def test_deepseek_v3_mtp_plans_pass_megatron_validation(plan_yaml):
    """Megatron-LM core_v0.15.3 refused every MTP plan as exported ('not supported with learned_absolute position
    embedding type'): with the model's rotary embeddings written, DeepSeek-V3 plans with MTP pass every rule."""
    spec, plan = _deepseek(plan_yaml)
    assert spec.model.num_mtp_layers == 1
    assert _check(spec, plan) == []
    argv = megatron_argv(spec, plan)
    i = argv.index("--position-embedding-type")
    without = argv[:i] + argv[i + 2:]  # the rule can fail: Megatron's default position embedding
    assert "Multi-Token Prediction (MTP) is not supported with learned_absolute position embedding type" in \
        megatron_violations(without, plan.num_gpus, {"CUDA_DEVICE_MAX_CONNECTIONS": "1"})


def test_mixtral_with_expert_tensor_parallelism_passes_megatron_validation():
    """A Mixtral plan with ETP 2 failed 'Bias in Moe is only supported when ETP==1' (Megatron's biases on by
    default): the model has no biases and the export says so (--disable-bias-linear)."""
    spec, plan = load_case("mixtral-8x7b-ep")
    p = plan.model_copy(update={"etp": 2, "ep": 4})
    assert p.tp == 2 and _check(spec, p) == []
    argv = [t for t in megatron_argv(spec, p) if t != "--disable-bias-linear"]
    assert "Bias in Moe is only supported when ETP==1" in megatron_violations(
        argv, spec.cluster.num_gpus, {"CUDA_DEVICE_MAX_CONNECTIONS": "1"})
