"""A published training run as cost-model input, section by section: model, cluster, training and plan
(:func:`express`), each section applying the field rules of :mod:`benchmarks.row_facts` and recording what it
assumed, in order; family facts come from the model presets (library/model_presets.yaml) and DeepSeek-V3's
published config.json. The conventions are in :mod:`benchmarks.runs`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

from benchmarks.row_facts import (GPUS_PER_NODE, H100_SXM_TDP_W, Expression, NotExpressible, as_int, catalog_gpu,
                                  framework_version, nvlink_domain, padded_vocab, profile_family, row_family,
                                  row_framework, row_pipeline_layout, row_precision, row_recompute, row_value,
                                  row_zero_stage, stage_layers_of, tp_pp_from_model_parallel)
from benchmarks.row_rules import (FAMILY_SHAPES, family_heads, gpu_from_family, megatron_account_for_split,
                                  require_seq_len, sharding_phrase)
from parplan.library.huggingface import load_presets, model_from_hf_config, read_hf_config
from parplan.costmodel.compute.architecture import Architecture
from parplan.costmodel.spec.assumptions import resolve_assumptions
from parplan.costmodel.evaluation.evaluate import PlanError
from parplan.costmodel.spec.hardware import lookup_gpu
from parplan.costmodel.moe.moe_dispatch import imbalance_knob_for, random_routing_busiest_load
from parplan.costmodel.spec.spec import AttentionSpec, ClusterSpec, MLASpec, ModelSpec, MoESpec, PlanSpec, Spec, TrainingSpec
from parplan.frameworks.layout import LayoutError, default_split, megatron_split
from parplan.frameworks.loader import validate_spec
from parplan.frameworks.profiles import profile

HERE = Path(__file__).resolve().parent


def express(row: dict) -> Expression:
    """Map one published row to (Spec, PlanSpec), recording every assumption; never raises."""
    rid = row.get("id", "?")
    ex = Expression(row_id=rid)
    try:
        _express(row, ex)
    except NotExpressible as e:
        ex.spec = ex.plan = None
        ex.reason = str(e)
    except (PlanError, ValueError) as e:  # pydantic ValidationError is a ValueError
        ex.spec = ex.plan = None
        ex.reason = f"invalid spec: {str(e).splitlines()[0]}"
    return ex


def _express(row: dict, ex: Expression) -> None:
    """The row section by section (model, cluster, training, plan); each records what it assumed, in order."""
    get = lambda key: row_value(row, key, ex)  # noqa: E731  (a field, or the row's mapping_facts entry)
    require_seq_len(row)
    if get("num_layers") is None or get("hidden_size") is None:
        raise NotExpressible("architecture not published (no layer count / hidden size)")
    if row.get("num_gpus") is None:
        raise NotExpressible("GPU count not published")
    try:
        catalog, stated_gb = catalog_gpu(row)
    except NotExpressible:
        catalog, stated_gb = gpu_from_family(row.get("gpu") or "", ex.assumed), None
        if catalog is None:
            raise
    gpn = as_int(row.get("gpus_per_node"))
    if gpn is None:
        gpn = GPUS_PER_NODE.get(catalog, 8)
        ex.assumed["gpus_per_node"] = f"{gpn} (not stated; {catalog} nodes)"
    tp, pp = as_int(get("tp")), as_int(get("pp"))
    if tp is None or pp is None:
        tp, pp = tp_pp_from_model_parallel(row, tp, pp, gpn, ex.assumed)
    model = _model_section(row, ex, tp)
    cluster = _cluster_section(row, ex, catalog, stated_gb, gpn)
    precision = row_precision(row, ex.assumed)
    if precision == "fp8" and lookup_gpu(catalog).peak_fp8_tflops is None:
        raise NotExpressible(f"{catalog} has no FP8 peak")
    _plan_section(row, ex, model, cluster, precision, tp, pp)


# ---- model section


# the preset (library/model_presets.yaml) whose gated MLP and tied embeddings a row's family (and, for GPT, its
# framework: Megatron-LM 2021/22 and NeMo GPT-3 tie them, the 2024 Megatron-Core table is consistent with untied
# ones, row note) shares; gpt-oss has no preset: openai/gpt-oss-120b config.json (SwiGLU experts,
# tie_word_embeddings false)
FAMILY_PRESETS: dict[tuple[str, Optional[str]], str] = {
    ("llama", None): "llama3-70b", ("deepseek", None): "deepseek-v3", ("qwen", None): "qwen2.5-72b",
    ("nemotron", None): "nemotron4-340b", ("mpt", None): "mpt-7b", ("gpt", "megatron-legacy"): "megatron-gpt-1.7b",
    ("gpt", "nemo"): "nemo-gpt3-5b", ("gpt", None): "mcore-gpt-1.7b",
}
FAMILY_FACTS_WITHOUT_PRESET: dict[str, dict[str, bool]] = {
    "gpt-oss": {"gated_mlp": True, "tie_embeddings": False},
    **{fam: {k: shape[k] for k in ("gated_mlp", "tie_embeddings")} for fam, shape in FAMILY_SHAPES.items()}}
# DeepSeek-V3's published config.json (the source of the deepseek-v3 preset, whose model section approximates MLA)
DEEPSEEK_V3_CONFIG = HERE.parent / "tests" / "data" / "hf" / "deepseek-v3.json"


def family_facts(fam: str, fw: str) -> dict[str, bool]:
    """``gated_mlp`` and ``tie_embeddings`` of a row's family, from its preset (:data:`FAMILY_PRESETS`)."""
    name = FAMILY_PRESETS.get((fam, fw)) or FAMILY_PRESETS.get((fam, None))
    if name is None:
        if fam in FAMILY_FACTS_WITHOUT_PRESET:
            return FAMILY_FACTS_WITHOUT_PRESET[fam]
        raise NotExpressible(f"unknown model family {fam!r}")
    model = load_presets()[name]["model"]
    return {"gated_mlp": model["gated_mlp"], "tie_embeddings": model["tie_embeddings"]}


def _model_section(row: dict, ex: Expression, tp: int) -> ModelSpec:
    """``model:``: the row's shape, the defaults of its family where the row is silent (recorded), MoE, and
    DeepSeek's MLA / MTP / node-limited routing from its config.json."""
    a, rid = ex.assumed, row["id"]
    fam, fw = row_family(row), row_framework(row)
    get = lambda key: row_value(row, key, ex)  # noqa: E731
    L, h = as_int(get("num_layers")), as_int(get("hidden_size"))
    heads = as_int(get("num_attention_heads"))
    if heads is None:
        heads = family_heads(fam, fw, h, a)
    if heads is None:
        raise NotExpressible("attention heads not published")
    kv = as_int(get("num_kv_heads"))
    if kv is None:
        kv = heads
        a["num_kv_heads"] = f"{heads} (not stated; {fam.upper()} uses multi-head attention)"
    ffn = _ffn_hidden_size(row, ex, fam, h)
    vocab = _vocab_size(row, ex, fam, fw, tp)
    try:
        facts = family_facts(fam, fw)
    except NotExpressible:
        raise NotExpressible(f"unknown model family for {row.get('model')!r}") from None
    moe = None
    if row.get("num_experts"):
        moe = MoESpec(num_experts=as_int(row["num_experts"]), top_k=as_int(row["moe_top_k"]),
                      expert_ffn_hidden_size=as_int(row["expert_ffn_hidden_size"]),
                      num_shared_experts=as_int(row.get("num_shared_experts")) or 0,
                      first_dense_layers=as_int(row.get("moe_dense_layers")) or 0,
                      # the token dispatcher where the source's recipe names it (Megatron-Core's
                      # --moe-token-dispatcher-type / --moe-flex-dispatcher-backend / its SMs), else the spec's
                      # default; the experts' activation clamp and biases where the model has them (GPT-OSS)
                      **{key: row[f"moe_{key}"] for key in ("dispatcher", "dispatcher_backend", "dispatcher_sms",
                                                            "activation_clamp", "expert_bias")
                         if row.get(f"moe_{key}")})
    mla, mtp = None, 0
    if fam == "deepseek":
        mla, mtp, moe = _deepseek_attention(ex, fw, moe)
    # sliding-window layers and sinks where the row's recipe states them (Megatron-Core window_size,
    # window_attn_skip_freq, softmax_type 'learnable'; costmodel/spec/spec.py AttentionSpec)
    attention = None
    if row.get("sliding_window") or row.get("attention_sinks"):
        attention = AttentionSpec(sliding_window=as_int(row.get("sliding_window")),
                                  full_attention_every=as_int(row.get("full_attention_every")),
                                  sinks=bool(row.get("attention_sinks")))
    return ModelSpec(name=row.get("model") or rid, num_layers=L, hidden_size=h, ffn_hidden_size=ffn,
                     num_attention_heads=heads, num_kv_heads=kv, vocab_size=vocab, moe=moe,
                     head_dim=as_int(get("head_dim")), mla=mla, num_mtp_layers=mtp, attention=attention, **facts)


def _ffn_hidden_size(row: dict, ex: Expression, fam: str, h: int) -> int:
    ffn = as_int(row_value(row, "ffn_hidden_size", ex))
    if ffn is not None:
        return ffn
    if fam in ("gpt", "mpt"):
        ffn = 4 * h
        ex.assumed["ffn_hidden_size"] = f"{ffn} (4h, the Megatron/GPT default; not stated)"
    elif fam in FAMILY_SHAPES:
        shape = FAMILY_SHAPES[fam]
        ffn = shape["ffn_multiple"] * h
        ex.assumed["ffn_hidden_size"] = f"{ffn} ({shape['ffn_multiple']}h MLP, {shape['why']}; not stated)"
    elif row.get("num_experts") and not as_int(row.get("moe_dense_layers")):
        ffn = as_int(row["expert_ffn_hidden_size"])
        ex.assumed["ffn_hidden_size"] = (f"{ffn} (every layer is MoE: no dense FFN; the field is unused, set to the "
                                         "expert width)")
    else:
        raise NotExpressible("ffn_hidden_size not published")
    return ffn


def _vocab_size(row: dict, ex: Expression, fam: str, fw: str, tp: int) -> int:
    vocab = as_int(row_value(row, "vocab_size", ex))
    if vocab is not None:
        return vocab
    if fw == "megatron-legacy":
        vocab = 51200
        ex.assumed["vocab_size"] = "51200 (GPT-2 BPE padded, as the other Megatron-LM 2021/22 rows; not stated)"
    elif fam == "gpt":
        vocab = padded_vocab(50257, tp)
        ex.assumed["vocab_size"] = f"{vocab} (GPT-2 BPE 50257 padded to 128·TP; not stated)"
    elif fam in FAMILY_SHAPES and "vocab_size" in FAMILY_SHAPES[fam]:
        vocab = FAMILY_SHAPES[fam]["vocab_size"]
        ex.assumed["vocab_size"] = f"{vocab} ({FAMILY_SHAPES[fam]['why']}; not stated)"
    else:
        raise NotExpressible("vocab_size not published")
    return vocab


def _deepseek_attention(ex: Expression, fw: str, moe: Optional[MoESpec]) -> tuple[MLASpec, int, Optional[MoESpec]]:
    """(MLA, MTP modules, MoE) of a DeepSeek-V3 row from its config.json (DeepSeek-V3 §4.2): latent attention
    always; the production run (HAI-LLM) also trains its ``num_nextn_predict_layers`` MTP module (§4.2: D = 1) and
    routes each token to at most ``topk_group`` = 4 nodes (§3.2.2)."""
    config = read_hf_config(str(DEEPSEEK_V3_CONFIG))
    hf = model_from_hf_config(config).fields
    mla = MLASpec(**hf["mla"])
    ex.assumed["attention"] = (f"MLA (DeepSeek-V3 §4.2 / config.json: q_lora_rank {mla.q_lora_rank}, kv_lora_rank "
                               f"{mla.kv_lora_rank}, head dims {mla.qk_nope_head_dim}+{mla.qk_rope_head_dim}, v "
                               f"{mla.v_head_dim})")
    if fw == "hai-llm" and moe is not None:
        # DeepSeek's own cross-node all-to-all kernels (§3.2.2, released as DeepEP): one IB copy per remote node
        return mla, hf["num_mtp_layers"], moe.model_copy(update={"max_nodes_per_token": config["topk_group"],
                                                                 "dispatcher": "flex"})
    return mla, 0, moe


# ---- cluster section


def _cluster_section(row: dict, ex: Expression, catalog: str, stated_gb: Optional[float], gpn: int) -> ClusterSpec:
    """``cluster:``: the catalog GPU, a part's own memory, a power-capped part's peaks, the NVLink domain, and
    a stated HBM bandwidth (an assumption override)."""
    a = ex.assumed
    gpu_name = row.get("gpu") or ""
    cat = lookup_gpu(catalog)
    gpus = as_int(row["num_gpus"])
    mem_override = None
    mem_gb = row.get("gpu_memory_gb") or stated_gb
    if mem_gb is not None and float(mem_gb) != cat.memory_gb_nominal:
        mem_override = round(float(mem_gb) * cat.memory_gib / cat.memory_gb_nominal, 2)
        a["memory_gib"] = f"{mem_override} ({mem_gb} GB part)"
    peaks = {}
    watts = re.search(r"\b([0-9]{3})\s*W\b", gpu_name)
    if watts and cat.name.startswith("H100") and float(watts.group(1)) < H100_SXM_TDP_W:
        # power-capped part: first-order DVFS (dynamic power ~ f·V², V ~ f, so P ~ f³): clock and peak
        # scale as (P / TDP)^(1/3)
        f = (float(watts.group(1)) / H100_SXM_TDP_W) ** (1.0 / 3.0)
        peaks = {"peak_bf16_tflops": round(cat.peak_bf16_tflops * f, 1), "peak_fp8_tflops": round(cat.peak_fp8_tflops * f, 1)}
        a["peak_tflops"] = (f"{peaks['peak_bf16_tflops']} BF16 / {peaks['peak_fp8_tflops']} FP8 (the {watts.group(1)} W cap "
                            f"of a {H100_SXM_TDP_W:g} W part: clock x (P/TDP)^(1/3) = x{f:.3f}; MFU stays against "
                            f"the {cat.peak_bf16_tflops:g} TFLOP/s SXM peak, as the source reports it)")
    domain = nvlink_domain(cat, gpus, gpn, a)
    cluster = ClusterSpec(gpu=catalog, num_gpus=gpus, gpus_per_node=gpn, memory_gib=mem_override,
                          nvlink_domain_size=domain, **peaks)
    hbm = re.search(r"HBM2e, ([0-9.]+) TB/s", row.get("interconnect") or "")
    if hbm:  # torchtitan's 96 GB HBM2e parts: the row states their memory bandwidth
        ex.override("hbm_bandwidth_gbps", float(hbm.group(1)) * 1000.0, f"stated in the row: HBM2e at {hbm.group(1)} TB/s")
    return cluster


# ---- training and plan sections


def _plan_section(row: dict, ex: Expression, model: ModelSpec, cluster: ClusterSpec, precision: str, tp: int,
                  pp: int) -> None:
    """``training:`` and the plan: degrees, schedule, batch split, stage split, recompute, ZeRO, SP; sets
    ``ex.spec``, the row's technique overrides and ``ex.plan``."""
    a, fw = ex.assumed, row_framework(row)
    get = lambda key: row_value(row, key, ex)  # noqa: E731
    L, gpus = model.num_layers, cluster.num_gpus
    seq = require_seq_len(row)
    gbs = as_int(get("global_batch_size"))
    mbs = as_int(get("micro_batch_size"))
    cp = as_int(row.get("cp")) or 1
    ep = as_int(row.get("ep")) or 1
    etp = as_int(row.get("etp")) or 1
    vpp = as_int(get("vpp")) or 1
    dp = as_int(row.get("dp"))
    layout = row_pipeline_layout(row, L, pp, vpp, a)
    if layout is None and row.get("first_stage_layers") is None and row.get("last_stage_layers") is None:
        flags = megatron_account_for_split(L, pp, vpp, fw, a)
        if flags is not None:
            layout = megatron_split(L, pp, vpp, account_for_embedding=flags[0], account_for_loss=flags[1]).decoder
    if layout is not None:
        vpp = len(layout[0])
    if gbs is None:
        raise NotExpressible("global batch size not published")
    schedule, vpp = _schedule(row, fw, vpp, a)
    if layout is None and schedule in ("1f1b", "interleaved") and row.get("first_stage_layers") is None \
            and row.get("last_stage_layers") is None:
        layout = _framework_default_split(row, L, pp, vpp, a)
    dp = _data_parallel(dp, gpus, tp, pp, cp, a)
    mbs = _micro_batch_size(mbs, fw, pp, gbs, dp, a)
    stage_layers = _row_stage_layers(row, L, pp, vpp, layout, a)
    recompute = row_recompute(row, a)
    phrase = sharding_phrase(row.get("zero_or_sharding") or "", dp * cp, gpus, tp, pp)
    replicas = 1
    if phrase is not None:
        zero, replicas, why = phrase
        a["zero_stage"] = f"{zero} ({why})"
    else:
        zero = row_zero_stage(row, fw, a)
    sp = _sequence_parallel(row, fw, tp, a)
    ex.framework = profile_family(row)
    ex.framework_version = framework_version(row, ex)
    if ex.framework == "torchtitan" and pp > 1 and zero == 3 and ex.framework_version is not None \
            and 3 not in profile(ex.framework, ex.framework_version).zero_stages_with_pp:
        zero = 2
        a["zero_stage"] = (f"2 (FSDP2 under PP: torchtitan {ex.framework_version} does not reshard after forward "
                           "with PP, parallelize_llama.py apply_fsdp; ZeRO-2-like)")
    training = TrainingSpec(seq_len=seq, global_batch_size=gbs, precision=precision)
    ex.spec = validate_spec({"model": model, "training": training, "cluster": cluster, "framework": "any"})  # as published: no profile's rules
    _techniques(row, fw, tp, pp, zero, recompute, Architecture(model), ex)
    # activation CPU offload (Megatron-Core cpu_offloading_num_layers): the row's own count, where its source has one
    offload = as_int(row_value(row, "activation_offload_layers", ex)) or 0
    # the EP all-to-all overlapped with another micro-batch where the source's recipe turns it on (Megatron-Core
    # --overlap-moe-expert-parallel-comm, Megatron-Bridge comm_overlap.overlap_moe_expert_parallel_comm)
    a2a_overlap = bool(row.get("moe_a2a_overlap"))
    if model.moe is not None and row.get("moe_router_force_load_balancing"):
        _random_routing(ex, model.moe, mbs * seq // cp // tp, ep)
    cp_comm = {"cp_comm_type": "allgather"} if cp > 1 and fw == "torchtitan" else {}
    if cp_comm:
        a["cp_comm_type"] = ("allgather (torchtitan@9dec370 torchtitan/config_manager.py:364-367: "
                             "context_parallel_rotate_method defaults to 'allgather', torch's _AllGatherRotater)")
    ex.plan = PlanSpec(tp=tp, cp=cp, pp=pp, dp=dp, ep=ep, etp=etp, micro_batch_size=mbs, vpp=vpp,
                       schedule=schedule, stage_layers=stage_layers, recompute=recompute, zero_stage=zero, zero_replicas=replicas,
                       sequence_parallel=bool(sp), pipeline_layout=layout, activation_offload_layers=offload,
                       moe_a2a_overlap=a2a_overlap, **cp_comm)
    ex.unstated = unstated_plan_fields(row, tp, pp, schedule, layout is not None or stage_layers is not None)


def _random_routing(ex: Expression, moe: MoESpec, tokens_per_rank: int, ep: int) -> None:
    """A recipe with ``moe_router_force_load_balancing`` routes uniformly at random (costmodel/moe/moe_dispatch.py
    random_routing_busiest_load): the busiest EP rank's excess is the binomial spread of its copies, set as the
    ``moe_load_imbalance`` knob that gives it at the row's EP size."""
    ref = resolve_assumptions(None).moe_load_imbalance_reference_ep
    busiest = random_routing_busiest_load(tokens_per_rank * moe.top_k, ep)
    ex.override("moe_load_imbalance", imbalance_knob_for(busiest, ep, ref),
                f"moe_router_force_load_balancing: uniformly random routing, busiest of {ep} EP ranks "
                f"{busiest:.4f} x the mean of {tokens_per_rank * moe.top_k} copies", shown=f"{imbalance_knob_for(busiest, ep, ref):.4f}")


def unstated_plan_fields(row: dict, tp: int, pp: int, schedule: str, split_given: bool) -> list[str]:
    """The plan fields the row's source leaves unstated (a field absent from the row; a ``mapping_facts`` entry is
    the mapping's reasoning, not the source's word): micro-batch size, virtual stages with the schedule (pp > 1,
    not DualPipe), recompute and its per-stage counts, ZeRO stage, SP (tp > 1), and the stage split when the row
    gives none or gives one that rests on an unstated vpp. Fields that do nothing in the row's plan (vpp at pp 1,
    SP at tp 1) are not listed. Degrees stay as published (dp is arithmetic on stated counts)."""
    out = []
    if row.get("micro_batch_size") is None:
        out.append("micro_batch_size")
    vpp_unstated = row.get("vpp") is None and pp > 1 and schedule not in ("dualpipe", "dualpipev")
    if vpp_unstated:
        out += ["vpp", "schedule"]
    if row.get("recompute") is None:
        out += ["recompute", "recompute_layers"]
    if row.get("zero_or_sharding") is None:
        out.append("zero_stage")
    if row.get("sequence_parallel") is None and tp > 1:
        out.append("sequence_parallel")
    if pp > 1 and (not split_given or vpp_unstated):
        out += ["stage_layers", "pipeline_layout"]
    return out


def _framework_default_split(row: dict, L: int, pp: int, vpp: int,
                             a: dict[str, str]) -> Optional[list[list[int]]]:
    """The split the row's framework builds itself when the row states none (its profile's ``default_split``,
    parplan.frameworks.layout.default_split: torchtitan's generate_split_points at 9dec370), else None."""
    family = profile_family(row)
    if family is None or pp < 2:
        return None
    prof = profile(family, framework_version(row))
    try:
        split = default_split(prof, L, pp, vpp)
    except LayoutError as e:
        raise NotExpressible(f"pipeline layout: {e}") from None
    if split is None:
        return None
    a["pipeline_layout"] = (f"{split.decoder} (not stated; {family} {prof.versions}'s own default split, "
                            f"{prof.default_split})")
    return split.decoder


def _schedule(row: dict, fw: str, vpp: int, a: dict[str, str]) -> tuple[str, int]:
    """(schedule, vpp): DualPipe for DeepSeek's HAI-LLM, interleaved with virtual stages, torchtitan's
    Interleaved 1F1B at its default 2 stages per rank, else 1F1B."""
    notes = (row.get("notes") or "")
    if fw == "hai-llm" or "dualpipe" in (row.get("framework") or "").lower():
        return "dualpipe", vpp
    if vpp > 1:
        return "interleaved", vpp
    if fw == "torchtitan" and "interleaved 1f1b" in notes.lower():
        a["vpp"] = "2 (Interleaved 1F1B, virtual stages not stated; torchtitan's default of 2 stages per rank)"
        return "interleaved", 2
    return "1f1b", vpp


def _data_parallel(dp: Optional[int], gpus: int, tp: int, pp: int, cp: int, a: dict[str, str]) -> int:
    if dp is None:
        if gpus % (tp * pp * cp):
            raise NotExpressible(f"tp·pp·cp = {tp * pp * cp} does not divide {gpus} GPUs")
        dp = gpus // (tp * pp * cp)
        a["dp"] = f"{dp} (GPUs / (TP·PP·CP))"
    if tp * pp * cp * dp != gpus:
        raise NotExpressible(f"tp·pp·cp·dp = {tp * pp * cp * dp} differs from {gpus} GPUs")
    return dp


def _micro_batch_size(mbs: Optional[int], fw: str, pp: int, gbs: int, dp: int, a: dict[str, str]) -> int:
    if mbs is None:
        if fw == "torchtitan" and pp > 1:
            local = gbs // dp
            # torchtitan (pipelining_utils.build_pipeline_schedule, late 2024): n_microbatches defaults to
            # the pipeline-parallel degree, for interleaved schedules too
            n_mb = pp
            if local % n_mb:
                raise NotExpressible(f"local batch {local} not divisible by torchtitan's {n_mb} micro-batches")
            mbs = local // n_mb
            a["micro_batch_size"] = (f"{mbs} (not stated; torchtitan splits the local batch {local} into "
                                     f"pipeline_parallel_degree = {n_mb} micro-batches by default)")
        else:
            mbs = 1
            a["micro_batch_size"] = "1 (not stated)"
    if gbs % (dp * mbs):
        raise NotExpressible(f"dp·mbs = {dp * mbs} does not divide the global batch {gbs}")
    return mbs


def _row_stage_layers(row: dict, L: int, pp: int, vpp: int, layout: Optional[list[list[int]]],
                      a: dict[str, str]) -> Optional[list[int]]:
    first = row.get("first_stage_layers")
    last = row.get("last_stage_layers")
    if layout is not None:
        return None
    if isinstance(first, str) or isinstance(last, str):
        raise NotExpressible(f"stage layout in words not understood: {first!r} / {last!r}")
    return stage_layers_of(L, pp, vpp, as_int(first), as_int(last), a)


def _sequence_parallel(row: dict, fw: str, tp: int, a: dict[str, str]) -> bool:
    sp = row.get("sequence_parallel")
    if sp is None:
        if fw in ("nemo", "mcore", "torchtitan") and tp > 1:
            sp = True
            a["sequence_parallel"] = "true (not stated; NeMo/MCore use SP with TP>1, --tp-comm-overlap needs it)"
        else:
            sp = False
            if tp > 1:
                a["sequence_parallel"] = "false (not stated)"
    return sp


def _techniques(row: dict, fw: str, tp: int, pp: int, zero: int, recompute: str, arch: Architecture,
                ex: Expression) -> None:
    """Overlap techniques the row's framework did not have: their knobs are set to 0 for the row.

    * Megatron-LM 2021/2022 (Narayanan 2021, its README, Korthikanti 2022) had no TP communication
      overlap (userbuffers/--tp-comm-overlap arrived with Transformer Engine in 2023) and blocking
      pipeline p2p; its default ``--DDP-impl local`` all-reduces gradients after the backward pass
      (``allreduce_gradients()`` in ``train_step``), so nothing hides DP traffic. Rows run with
      ``--DDP-impl torch`` (PyTorch DDP buckets overlap the all-reduce) and DeepSpeed ZeRO-3 rows keep
      the overlap.
    * torchtitan overlaps TP communication only with AsyncTP (named in the row's notes).
    * LLM Foundry's FSDP ``mixed_precision PURE`` reduces gradients in bf16 (2 bytes, not fp32).
    * PyTorch FSDP's ZeRO-3 (torchtitan, LLM Foundry) keeps only the fp32 shard: ``zero3_resident_weight_bytes`` 0.
    * DeepSpeed ZeRO-3 as of early 2021: :func:`_deepspeed_zero3_2021`.
    * torchtitan's loss, checkpointing, sequence parallelism and pipelining: :func:`_torchtitan_techniques`.
    """
    set_ = ex.override
    sharding = (row.get("zero_or_sharding") or "").lower()
    notes = (row.get("notes") or "").lower()
    if fw == "megatron-legacy":
        set_("flash_attention", False, "Megatron-LM 2021/2022 predates FlashAttention: unfused softmax over the "
                                       "stored s x s scores")
        set_("dropout_masks", True, "Megatron-LM 2021/2022: GPT-3 dropout masks")
        if tp > 1:
            set_("tp_comm_overlap", 0.0, "Megatron-LM 2021/2022: no TP communication overlap")
        if pp > 1:
            set_("pp_comm_overlap", 0.0, "Megatron-LM 2021/2022: blocking pipeline p2p")
        if zero == 0 and "ddp-impl torch" not in sharding:
            set_("dp_comm_overlap", 0.0, "Megatron-LM 2021/2022 local DDP: gradients all-reduced after the backward pass")
    if row.get("source_id") == "mlperf-training-v5.1":
        set_("grad_reduce_bytes", 2.0, "MLPerf v5.1 NeMo implementations (<submitter>/benchmarks/llama31_*/"
                                       "implementations/nemo/pretrain.py): DDP config grad_reduce_in_fp32=False, "
                                       "gradients reduced in bf16")
    if row.get("fp8_param_gather") and row_precision(row, {}) == "fp8" and zero in (1, 2):
        set_("param_gather_bytes", 1.0, "FP8_PARAM_GATHER=True in the row's launch config: the distributed "
                                        "optimizer all-gathers FP8 weights (Megatron-Core fp8_param_gather)")
    if "mxfp8" in (row.get("precision") or "").lower():
        set_("fp8_recipe", "mxfp8", "precision MXFP8: Transformer Engine's 1x32 block-scaled FP8 recipe "
                                    "(costmodel/compute/efficiency.py MXFP8_LINEAR_TIME_FACTOR)")
    if row.get("fp8_attention") and row_precision(row, {}) == "fp8":
        set_("fp8_attention", True, "FP8_DPA=True in the row's launch config: Transformer Engine FP8 dot-product "
                                    "attention (cuDNN FP8 fused attention)")
    if "mixed_precision pure" in (row.get("precision") or "").lower():
        set_("grad_reduce_bytes", 2.0, "FSDP mixed_precision PURE: gradients reduced in bf16")
    if "zero-3 (deepspeed)" in sharding:
        _deepspeed_zero3_2021(arch, ex)
    if fw in ("torchtitan", "llmfoundry") and zero == 3:
        set_("zero3_resident_weight_bytes", 0.0, "PyTorch FSDP (torchtitan FSDP2, LLM Foundry FSDP1) shards fp32 "
             "parameters, the optimizer's master weights, and casts to bf16 per all-gather: no resident bf16 shard")
    modules = re.search(r"--recompute-modules\s+([a-z_ ]+)", (row.get("recompute") or "").lower())
    if recompute == "selective" and modules and fw in ("nemo", "mcore", "bridge"):
        # Megatron-Core --recompute-modules: parplan's deepseek_v3 policy is exactly layernorm + moe_act
        # (+ mla_up_proj, which it applies when the model has MLA); other module sets keep the attention policy
        named = set(modules.group(1).split())
        has_mla = ex.spec is not None and ex.spec.model.mla is not None
        if {"layernorm", "moe_act"} <= named <= {"layernorm", "moe_act", "mla_up_proj"} and ("mla_up_proj" in named) == has_mla:
            set_("selective_recompute_policy", "deepseek_v3", f"--recompute-modules {' '.join(sorted(named))}: RMSNorm "
                 "outputs and the experts' activation recomputed" + (", MLA up-projections too" if has_mla else ""))
    if fw == "bridge":  # perf_recipes/_common.py:72-74: grad_reduce_in_fp32 = False (frameworks/profiles.py)
        set_("grad_bytes", 2.0, "Megatron-Bridge performance recipes: bf16 gradient buffers (grad_reduce_in_fp32 off)")
        set_("grad_reduce_bytes", 2.0, "Megatron-Bridge performance recipes: gradients reduced in bf16")
    if fw == "hai-llm":
        # DeepSeek-V3 report: FP8 dispatch, BF16 combine (§3.3.4); 20 of the H800's 132 SMs run the
        # all-to-all kernels (§3.2.2); AdamW moments in BF16 with FP32 master weights (§3.3.3): 4 + 2 + 2 B;
        # RMSNorm and MLA up-projections recomputed, SwiGLU inputs cached in FP8 (§3.2.3, §3.3.2)
        set_("ep_dispatch_bytes", 1.0, "DeepSeek-V3 §3.3.4: tokens dispatched in FP8, combined in BF16")
        set_("ep_comm_sm_fraction", 20 / 132, "DeepSeek-V3 §3.2.2: 20 of 132 SMs for communication", shown="20/132")
        set_("optimizer_bytes", 8.0, "DeepSeek-V3 §3.3.3: FP32 master weights, BF16 AdamW moments")
        set_("fp8_weight_cache_bytes", 0.0, "DeepSeek-V3 §3.3.2: weights quantized online per 128x128 block "
             "at each use; the report names no cached FP8 weight copies (Transformer Engine's cache is its own)")
        if recompute == "selective":
            set_("selective_recompute_policy", "deepseek_v3", "DeepSeek-V3 §3.2.3: RMSNorm and MLA up-projections "
                 "recomputed; §3.3.2: SwiGLU inputs cached in FP8, output recomputed")
    if fw in ("torchtitan", "llmfoundry", "megatron-legacy") or "deepspeed" in sharding:
        # costmodel/memory/runtime_memory.py: Transformer Engine's userbuffers and cuBLAS workspaces are Megatron-Core's
        set_("userbuffer_count", 0, "no Transformer Engine userbuffers (TE's TP overlap is Megatron-Core's; "
             "torchtitan's AsyncTP symmetric-memory buffers are not modelled)")
        set_("te_cublas_workspaces", 0, "no Transformer Engine cuBLAS workspaces (PyTorch's own are not counted)")
    if fw in ("torchtitan", "llmfoundry") and row.get("gpu", "").startswith("H"):
        set_("attention_kernel", "flash2", "PyTorch SDPA / flash-attn 2 on Hopper, not cuDNN fused attention")
    if fw == "torchtitan":
        _torchtitan_techniques(tp, pp, recompute, notes, ex, cp=as_int(row.get("cp")) or 1,
                               compiled=torchtitan_compiled(row))
    _tp_overlap_kernels(row, fw, tp, notes, ex)


# a release before Transformer Engine 2.0 (tagged 2025-02-12): NGC/NeMo 23.xx, 24.xx and 25.01, Megatron-Core r0.8.0
_TE_BEFORE_2 = re.compile(r"\b(?:2[34]\.\d\d|25\.01)\b|r0\.8\.0|\b202[34]\b")


def _tp_overlap_kernels(row: dict, fw: str, tp: int, notes: str, ex: Expression) -> None:
    """How the row's TP overlap holds SMs (costmodel/evaluation/layer_comm.py LayerComm.tp_block_s).

    * Transformer Engine before 2.0 launched the pipelined and bulk overlaps' GEMMs on every SM (initialize_ub's
      default ``set_sm_margin`` False, TransformerEngine 933294dc ``pytorch/module/base.py:304``; True since 544dd14b,
      2025-02-07): their communication kernels hold their SMs only while they run (``tp_overlap_sm_margin`` False).
    * torchtitan's AsyncTP (torch._symmetric_memory) pipelines the chunks' matmuls beside peer copies on two streams and
      computes the reduce-scatter's local chunk last (pytorch@0e9ed9cf ``torch/distributed/_symmetric_memory/__init__.py``
      ``_pipelined_multi_all_gather_and_consume``, ``_pipelined_produce_and_all2all``): no SM held, no chunk left.
    """
    if tp <= 1:
        return
    if fw != "torchtitan" and _TE_BEFORE_2.search(row.get("framework") or ""):
        ex.override("tp_overlap_sm_margin", False, "Transformer Engine < 2.0 in the row's release: the TP overlap's "
                    "communication kernels hold their SMs only while they run (default set_sm_margin False)")
    if fw == "torchtitan" and "asynctp" in notes:
        ex.override("tp_overlap_comm_sms", 0, "AsyncTP: peer copies beside the chunks' matmuls, no SM held")
        ex.override("tp_overlap_rs_splits", 0, "AsyncTP: the reduce-scatter's local chunk computed last")


def _deepspeed_zero3_2021(arch: Architecture, ex: Expression) -> None:
    """DeepSpeed ZeRO-3 as of early 2021 (Narayanan 2021 Table 2) gathered each parameter tensor with its
    own all-gather and reduce-scattered each gradient on its own (DeepSpeed issue #1069; coalesced in
    PR #1188, June 2021): 3 collectives per parameter tensor, 12 tensors per GPT layer (two LayerNorms,
    QKV, projection, two MLP linears, weights and biases); each all-gather synchronized the device
    (PR #1188: "the async version is not async at all"), so nothing hides that traffic; at most
    ``stage3_max_live_parameters`` = 1e9 parameters are gathered at once. Its gradients are reduced in
    the fp16 training dtype (``gradient_reduction_w_predivide`` upcasts only with ``fp32_allreduce``,
    default off): 2 bytes per element."""
    set_ = ex.override
    set_("zero3_collectives_per_layer", 36.0,
         "DeepSpeed ZeRO-3, 2021: one collective per parameter tensor, 3 x 12 per GPT layer")
    set_("zero_microbatch_comm_overlap", 0.0, "DeepSpeed ZeRO-3, 2021: each all-gather synchronized the device")
    live = min(2.0, 1e9 / arch.dense_layer_params)
    set_("zero3_unsharded_layers", live, f"DeepSpeed stage3_max_live_parameters = 1e9 of "
                                         f"{arch.dense_layer_params / 1e9:.2f}B per layer", shown=f"{live:.3g}")
    set_("grad_reduce_bytes", 2.0, "DeepSpeed: gradients reduced in fp16 unless fp32_allreduce")


# torchtitan's 2024-12 H100 benchmark (pytorch/torchtitan@c7484b20 benchmarks/llama3_h100_202412_torchtitan.md): the
# headings of Tables 2 and 4-6 state torch.compile for every row (lines 31, 48, 55, 62); Tables 1 and 3 list it per row
TORCHTITAN_PER_ROW_COMPILE_TABLES = ("Table 1", "Table 3")


def torchtitan_compiled(row: dict) -> bool:
    """Whether a torchtitan row ran under torch.compile: named in its notes, or by its table's heading."""
    if "compile" in (row.get("notes") or "").lower():
        return True
    return row.get("source_location") not in TORCHTITAN_PER_ROW_COMPILE_TABLES


def _torchtitan_techniques(tp: int, pp: int, recompute: str, notes: str, ex: Expression, cp: int = 1,
                           compiled: bool = True) -> None:
    """torchtitan (late 2024) upcasts the bf16 logits to fp32 inside the loss (PR #642) and computes
    cross-entropy in eager mode: at the start of the backward pass the fp32 log-softmax it saved, the
    loss gradient and the log-softmax gradient are live, 12 bytes per logit. Its selective activation
    checkpointing is per-op (``_save_list``: attention kernels and every other matmul). With TP the loss
    runs under ``loss_parallel`` on vocabulary-sharded logits, whose fused nll/log-softmax backward
    (``torch/distributed/tensor/parallel/loss.py``: ``(grad_input + torch.exp(x)) * grad_output`` with
    ``grad_input = zeros_like(x)``) holds four fp32 copies, 16 bytes per logit.

    Its TP is DTensor sequence parallelism: the column-parallel linears save the all-gathered input
    (``sequence_parallel_saves_gathered_inputs``); its PP is ``torch.distributed.pipelining``, whose stages
    preallocate receive buffers for every micro-batch and keep the outputs (``pipeline_runtime``); it overlaps
    TP communication only with AsyncTP (named in the row's notes), and fuses its elementwise ops only under
    torch.compile (``compiled``: :func:`torchtitan_compiled`; ``eager_elementwise`` otherwise). Its context parallelism (``cp``) is torch's
    (``torch.distributed.tensor.experimental.context_parallel``), which wraps the SDPA op: torchtitan repeats the
    KV heads before SDPA, so K,V are exchanged and gathered at the query head count (``cp_kv_heads_repeated``),
    all-gathered by default (plan ``cp_comm_type`` allgather, set where the plan is built)."""
    set_ = ex.override
    if tp > 1:
        set_("logits_bytes_per_element", 16.0, "torchtitan TP: loss_parallel's backward holds the fp32 "
                                               "log-softmax, zeros_like(x), exp(x) and their sum at once")
        set_("sequence_parallel_saves_gathered_inputs", True, "torchtitan TP: DTensor SequenceParallel + "
             "PrepareModuleInput; ColwiseParallel saves the gathered input")
    else:
        set_("logits_bytes_per_element", 12.0, "torchtitan: fp32 log-softmax saved, its gradient and the loss "
                                               "gradient live at the start of backward")
    if recompute == "selective":
        set_("selective_recompute_policy", "alternate_matmuls", "torchtitan per-op SAC")
    if pp > 1:
        set_("pipeline_runtime", "torch", "torchtitan: torch.distributed.pipelining")
    if cp > 1:
        set_("cp_kv_heads_repeated", True, "torchtitan@9dec370 torchtitan/models/llama/model.py:201-202 repeat_kv "
             "before SDPA: CP gathers K,V at the query head count")
    if ex.spec is not None and ex.spec.training.precision == "fp8":
        set_("fp8_weight_cache_bytes", 0.0, "torchao Float8Linear casts weights per use, caches none")
        set_("fp8_activation_bytes", 2.0, "torchao float8_linear.py matmul_with_hp_or_float8_args saves "
                                          "the BF16 input and weight for backward")
    if tp > 1 and "asynctp" not in notes:
        set_("tp_comm_overlap", 0.0, "torchtitan without AsyncTP")
    if not compiled:
        set_("eager_elementwise", True, "torchtitan without torch.compile (train_configs' compile = false at "
                                        "9dec370): the model's elementwise ops run unfused")


def row_to_spec(row: dict) -> Optional[tuple[Spec, PlanSpec]]:
    """(Spec, PlanSpec) for an expressible row, else None (see :func:`unexpressible_reason`)."""
    ex = express(row)
    return (ex.spec, ex.plan) if ex.ok else None


def unexpressible_reason(row: dict) -> Optional[str]:
    return express(row).reason
