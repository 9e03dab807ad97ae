"""The model half of a Megatron-LM ``pretrain_gpt.py`` command line (``frameworks/export_megatron.py`` writes the
parallel and training halves): the spec's architecture in Megatron-LM's own flags at its target version
(``MEGATRON_VERSION``), and warnings for what Megatron-LM has no flag for."""

from __future__ import annotations

from typing import Optional

from parplan.costmodel.spec.framework_rules import model_rule_violations
from parplan.costmodel.spec.spec import Plan, Spec
from parplan.frameworks.profile_data import EXPORT_VERSIONS
from parplan.frameworks.profiles import export_profile

MEGATRON_VERSION = EXPORT_VERSIONS["megatron-core"]


def append_flag(args: list[str], name: str, value=None) -> None:
    """``name`` (and ``value``) appended to ``args``."""
    args.append(name)
    if value is not None:
        args.append(str(value))


def model_args(spec: Spec) -> list[str]:
    m = spec.model
    out: list[str] = []
    append_flag(out, "--num-layers", m.num_layers)
    append_flag(out, "--hidden-size", m.hidden_size)
    append_flag(out, "--ffn-hidden-size", m.ffn_hidden_size)
    append_flag(out, "--num-attention-heads", m.num_attention_heads)
    if m.kv_heads != m.num_attention_heads:
        append_flag(out, "--group-query-attention")
        append_flag(out, "--num-query-groups", m.kv_heads)
    if m.head_dim is not None and m.head_dim * m.num_attention_heads != m.hidden_size:
        append_flag(out, "--kv-channels", m.head_dim)
    append_flag(out, "--seq-length", spec.training.seq_len)
    append_flag(out, "--max-position-embeddings", spec.training.seq_len)
    out += family_args(spec)
    if m.moe is not None:
        append_flag(out, "--num-experts", m.moe.num_experts)
        append_flag(out, "--moe-router-topk", m.moe.top_k)
        if m.moe.top_k == 1:  # TransformerConfig.__post_init__ refuses top-1 softmax routing without it (a zero
            # gradient through a softmax over one score): transformer_config.py:1336-1344 at core_v0.15.3
            append_flag(out, "--moe-router-pre-softmax")
        append_flag(out, "--moe-ffn-hidden-size", m.moe.expert_ffn_hidden_size)
        if m.moe.num_shared_experts:
            width = m.moe.shared_expert_ffn_hidden_size or m.moe.expert_ffn_hidden_size
            append_flag(out, "--moe-shared-expert-intermediate-size", m.moe.num_shared_experts * width)
        if m.moe.first_dense_layers:
            k = m.moe.first_dense_layers
            append_flag(out, "--moe-layer-freq", f"([0]*{k}+[1]*{m.num_layers - k})")
        # the dispatcher priced (costmodel/moe/moe_dispatch.py); Megatron's own default is allgather
        # (core_v0.15.3 arguments.py:3131-3142: --moe-token-dispatcher-type, --moe-enable-deepep for flex,
        # --moe-expert-capacity-factor); HybridEP is --moe-flex-dispatcher-backend hybridep from core_v0.16.0 (3df20090)
        append_flag(out, "--moe-token-dispatcher-type", m.moe.dispatcher)
        if m.moe.dispatcher == "flex":
            flex_backend_args(out, m.moe)
        if m.moe.capacity_factor is not None:
            append_flag(out, "--moe-expert-capacity-factor", m.moe.capacity_factor)
    if m.mla is not None:  # _add_network_size_args / _add_mla_args, arguments.py:1664 and 3165-3176 at core_v0.15.3
        append_flag(out, "--multi-latent-attention")
        # the query and key/value latent norms the cost model counts (costmodel/compute/architecture.py norm_params_per_layer):
        # Megatron-Core builds them only with qk_layernorm (models/gpt/gpt_layer_specs.py: linear_q_up_proj /
        # linear_kv_up_proj are column_parallel_layer_norm_linear iff qk_layernorm, IdentityOp-free linears otherwise)
        append_flag(out, "--qk-layernorm")
        if m.mla.q_lora_rank:  # 0: no query compression, Megatron's default None
            append_flag(out, "--q-lora-rank", m.mla.q_lora_rank)
        append_flag(out, "--kv-lora-rank", m.mla.kv_lora_rank)
        append_flag(out, "--qk-head-dim", m.mla.qk_nope_head_dim)
        append_flag(out, "--qk-pos-emb-head-dim", m.mla.qk_rope_head_dim)
        append_flag(out, "--v-head-dim", m.mla.v_head_dim)
    if m.attention is not None:  # _add_network_size_args, arguments.py:1571-1580 at core_v0.15.3
        if m.attention.sinks:
            append_flag(out, "--softmax-type", "learnable")
        if m.attention.sliding_window is not None:  # window_size (w - 1, 0): w keys, the query itself included
            append_flag(out, "--window-size", f"{m.attention.sliding_window - 1},0")
            if m.attention.full_attention_every is not None:
                append_flag(out, "--window-attn-skip-freq", m.attention.full_attention_every)
    if m.num_mtp_layers:  # arguments.py:1666 at core_v0.15.3; validate_args needs rope position embeddings (1186-1190)
        append_flag(out, "--mtp-num-layers", m.num_mtp_layers)
    return out


def family_args(spec: Spec) -> list[str]:
    """The model's family flags: the architecture the cost model prices (costmodel/compute/architecture.py), written over
    Megatron-LM's defaults (``_add_network_size_args``, arguments.py at core_v0.15.3: ``--normalization`` LayerNorm,
    ``--position-embedding-type`` learned_absolute, linear biases on, GeLU MLP, tied embeddings, MHA):

    * RMSNorm: two norms of width h per layer and no norm bias (``norm_params_per_layer``);
    * rotary position embeddings: no learned position table is counted (``embedding_params`` = vocab x h); also what
      ``validate_args`` requires of multi-token prediction (arguments.py:1186-1190: "not supported with
      learned_absolute position embedding type");
    * no linear biases (``--disable-bias-linear``; validate_args then turns bias-GeLU fusion off itself) unless
      ``model.moe.expert_bias``: Megatron-Core has one switch, ``add_bias_linear``, for every linear layer, and
      refuses it with expert tensor parallelism ("Bias in Moe is only supported when ETP==1",
      TransformerConfig.__post_init__);
    * SwiGLU (``--swiglu``) for a gated MLP, Megatron's GeLU otherwise; untied output weights; GQA groups."""
    m, out = spec.model, []
    append_flag(out, "--normalization", "RMSNorm")
    append_flag(out, "--position-embedding-type", "rope")
    if m.moe is None or not m.moe.expert_bias:
        append_flag(out, "--disable-bias-linear")
    if m.gated_mlp:
        append_flag(out, "--swiglu")
    if not m.tie_embeddings:
        append_flag(out, "--untie-embeddings-and-output-weights")
    return out


def flex_backend_args(out: list[str], moe) -> None:
    """The flex dispatcher's backend and SMs: DeepEP as ``--moe-enable-deepep`` (core_v0.15.3 arguments.py:3135;
    still accepted, deprecated, through core_v0.19.0 transformer_config.py:1589-1598), HybridEP as
    ``--moe-flex-dispatcher-backend hybridep`` (the config dataclass's flag from core_v0.16.0, 3df20090; with
    ``--moe-enable-deepep`` Megatron refuses it, "Only one backend"), ``dispatcher_sms`` as ``--moe-deepep-num-sms``
    (arguments.py:3137 at core_v0.15.3) or ``--moe-hybridep-num-sms`` (core_v0.16.0), both routed to
    ``moe_flex_dispatcher_num_sms`` at core_v0.19.0 (transformer_config.py:1792-1810)."""
    hybrid = moe.dispatcher_backend == "hybridep"
    if hybrid:
        append_flag(out, "--moe-flex-dispatcher-backend", "hybridep")
    else:
        append_flag(out, "--moe-enable-deepep")
    if moe.dispatcher_sms is not None:
        append_flag(out, "--moe-hybridep-num-sms" if hybrid else "--moe-deepep-num-sms", moe.dispatcher_sms)


def model_arg_warnings(spec: Spec, plan: Optional[Plan] = None) -> list[str]:
    """The model features :func:`model_args` has no Megatron-LM flag for (Megatron-Bridge sets them in its model
    provider: export_bridge's own warnings), and the expert biases Megatron-Core refuses beside ``plan``'s ETP."""
    moe, out = spec.model.moe, []
    if moe is not None and moe.activation_clamp is not None:
        out.append(f"model.moe.activation_clamp {moe.activation_clamp}: Megatron-LM has no command-line flag for "
                   "TransformerConfig.activation_func_clamp_value (Megatron-LM 2a75ac12 megatron/training/arguments.py); "
                   "set it in the model's config (Megatron-Bridge's GPT-OSS provider sets 7.0), or the experts run "
                   "unclamped")
    if plan is not None and model_rule_violations(export_profile("megatron-core"), plan, spec.model):
        # the rule runs_on and the search apply (Profile.expert_bias_etp_one): such a plan is not listed for Megatron
        out.append(f"model.moe.expert_bias with etp {plan.etp}: Megatron-Core builds expert biases only with expert "
                   "tensor parallelism 1 (TransformerConfig.__post_init__: 'Bias in Moe is only supported when "
                   "ETP==1'); this file will not start: plan etp 1")
    return out
