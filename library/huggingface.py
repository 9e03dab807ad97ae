"""Model shapes from a Hugging Face ``config.json`` or a named preset, resolved before the spec is validated.

A spec may write ``model: {hf_config: path/to/config.json}`` or ``model: {preset: llama3-70b}`` (other
keys next to either override the values read, e.g. ``name`` or ``vocab_size``); ``solver-cli optimize
--hf-config PATH`` does the same from the command line. :func:`expand_model_section` replaces the section
by plain :class:`~parplan.costmodel.spec.spec.ModelSpec` fields on the raw YAML dict, so the strict schema
still checks the result. ``transformers`` is not needed: the JSON is read directly.

Field names are those of the transformers configuration classes (``src/transformers/models/<family>/
configuration_<family>.py``): ``LlamaConfig`` / ``MistralConfig`` / ``Qwen2Config`` / ``Qwen3Config`` /
``GemmaConfig`` / ``Gemma2Config`` (``num_hidden_layers, hidden_size, intermediate_size,
num_attention_heads, num_key_value_heads, head_dim, vocab_size, tie_word_embeddings, attention_bias``),
``MixtralConfig`` (``num_local_experts, num_experts_per_tok``), ``Qwen2MoeConfig`` / ``Qwen3MoeConfig``
(``num_experts, num_experts_per_tok, moe_intermediate_size, shared_expert_intermediate_size,
decoder_sparse_step, mlp_only_layers``), ``DeepseekV3Config`` (``n_routed_experts, n_shared_experts,
first_k_dense_replace, moe_intermediate_size, q_lora_rank, kv_lora_rank, qk_nope_head_dim,
qk_rope_head_dim, v_head_dim, num_nextn_predict_layers``), ``GPTNeoXConfig`` (``num_hidden_layers,
hidden_size, intermediate_size, num_attention_heads, vocab_size, tie_word_embeddings``; a plain GeLU MLP),
``layer_types`` / ``sliding_window`` (GPT-OSS, Gemma-3: ``model.attention``, and sinks for ``gpt_oss``),
``GptOssConfig`` (``num_local_experts, num_experts_per_tok, intermediate_size``, ``swiglu_limit``:
``model.moe.activation_clamp``; its experts' biases: ``model.moe.expert_bias``).

Each mapping is one row of :data:`FIELD_MAP` (spec field, reader). Fields the spec cannot hold become
warnings: multi-head latent attention and multi-token prediction map through the rows ``mla`` and
``num_mtp_layers``, which apply as soon as ``ModelSpec`` has those fields (costmodel/spec/spec.py) and warn
until then; parameter tensors the cost model's count leaves out (biases, extra norms) are reported with
their sizes by :func:`omitted_parameters`, so a total can be checked against a published count exactly.
"""

from __future__ import annotations

import difflib
import json
import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Optional

from parplan.library.hf_fields import MAX_NAME_CHARS, HFFieldError, ModelSourceError, check_config, parse_json_int
from parplan.library.presets import PRESETS_PATH, load_presets  # noqa: F401  (re-exported)
from parplan.costmodel.spec.spec import ModelSpec

MAX_CONFIG_BYTES = 2**20

MOE_TYPES = ("mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v3", "deepseek_v2", "gpt_oss")
# transformers' GptOssExperts hold gate_up_proj_bias and down_proj_bias (models/gpt_oss/modeling_gpt_oss.py); the
# config has no flag for them, so the model type decides
EXPERT_BIAS_TYPES = ("gpt_oss",)
UNGATED_TYPES = ("gpt_neox", "gpt2", "gptj")
TIED_BY_DEFAULT = ("gemma", "gemma2", "gemma3_text")


@dataclass
class HFModel:
    """Spec fields read from a config.json, with what could not be mapped."""

    fields: dict[str, Any]
    warnings: list[str] = field(default_factory=list)


# the names transformers' configuration classes give the four fields every config must have (GPT-2: n_*, T5: d_model)
LAYERS, HIDDEN, HEADS, VOCAB = ("num_hidden_layers", "n_layer", "num_layers"), ("hidden_size", "n_embd", "d_model"), \
    ("num_attention_heads", "n_head"), ("vocab_size",)


def _get(cfg: dict, *names: str, default: Any = None) -> Any:
    for name in names:
        if cfg.get(name) is not None:
            return cfg[name]
    return default


def _moe(cfg: dict, model_type: str) -> Optional[dict[str, Any]]:
    experts = _get(cfg, "num_local_experts", "num_experts", "n_routed_experts")
    if model_type not in MOE_TYPES or not experts:
        return None
    out: dict[str, Any] = {"num_experts": experts, "top_k": cfg["num_experts_per_tok"],
                           "expert_ffn_hidden_size": _get(cfg, "moe_intermediate_size", "intermediate_size")}
    if model_type == "qwen2_moe" and cfg.get("shared_expert_intermediate_size"):
        out["num_shared_experts"] = 1
        out["shared_expert_ffn_hidden_size"] = cfg["shared_expert_intermediate_size"]
    if cfg.get("n_shared_experts"):
        out["num_shared_experts"] = cfg["n_shared_experts"]
    dense = first_dense_layers(cfg)
    if dense:
        out["first_dense_layers"] = dense
    if cfg.get("swiglu_limit"):  # GptOssConfig: the experts' gate and linear halves clamped to this value
        out["activation_clamp"] = float(cfg["swiglu_limit"])
    if model_type in EXPERT_BIAS_TYPES:
        out["expert_bias"] = True
    return out


def first_dense_layers(cfg: dict) -> int:
    """Leading dense layers: DeepSeek ``first_k_dense_replace``; Qwen-MoE ``mlp_only_layers`` when they are
    a prefix (``decoder_sparse_step`` must be 1)."""
    if cfg.get("first_k_dense_replace"):
        return int(cfg["first_k_dense_replace"])
    only = sorted(cfg.get("mlp_only_layers") or [])
    return len(only) if only == list(range(len(only))) else 0


def _mla(cfg: dict) -> Optional[dict[str, Any]]:
    if cfg.get("kv_lora_rank") is None:
        return None
    return {"q_lora_rank": cfg.get("q_lora_rank") or 0, "kv_lora_rank": cfg["kv_lora_rank"],
            "qk_nope_head_dim": cfg["qk_nope_head_dim"], "qk_rope_head_dim": cfg["qk_rope_head_dim"],
            "v_head_dim": cfg["v_head_dim"]}


def _head_dim(cfg: dict) -> Optional[int]:
    head_dim = cfg.get("head_dim")
    if head_dim is None or cfg.get("kv_lora_rank") is not None:  # MLA: per-head widths are in model.mla
        return None
    heads, hidden = _get(cfg, *HEADS), _get(cfg, *HIDDEN)
    return None if heads is not None and head_dim * heads == hidden else head_dim


# transformers' GptOssAttention holds a learned ``sinks`` logit per head (models/gpt_oss/modeling_gpt_oss.py); the
# config has no flag for it, so the model type decides
SINK_TYPES = ("gpt_oss",)


def _attention(cfg: dict, model_type: str) -> Optional[dict[str, Any]]:
    """``model.attention`` from ``layer_types`` (transformers' per-layer list, "sliding_attention" /
    "full_attention") and ``sliding_window``, where the windowed layers are Megatron-Core's pattern (layer l,
    1-indexed, full iff l % N == 0: transformer/utils.py:531-542 at Megatron-LM 2a75ac12), and sinks for
    :data:`SINK_TYPES`. A config without ``layer_types`` (Mistral, Qwen2's ``use_sliding_window``) leaves the
    attention full: older configs do not say which layers are windowed."""
    types, window = cfg.get("layer_types"), cfg.get("sliding_window")
    out: dict[str, Any] = {}
    if isinstance(types, list) and window and "sliding_attention" in types:
        full = [i + 1 for i, t in enumerate(types) if t != "sliding_attention"]
        n = full[0] if full else None
        if n is None or full == list(range(n, len(types) + 1, n)):
            out.update(sliding_window=int(window), full_attention_every=n)
    if model_type in SINK_TYPES:
        out["sinks"] = True
    return out or None


Reader = Callable[[dict, str], Any]


def _default_ffn(cfg: dict) -> Optional[int]:
    hidden = _get(cfg, *HIDDEN)
    return None if hidden is None else 4 * hidden  # GPT-2 / GPT-NeoX's default MLP width

# (ModelSpec field, reader of the config dict and model_type); None from a reader means "leave the default".
FIELD_MAP: list[tuple[str, Reader]] = [
    ("num_layers", lambda c, t: _get(c, *LAYERS)),
    ("hidden_size", lambda c, t: _get(c, *HIDDEN)),
    ("ffn_hidden_size", lambda c, t: _get(c, "intermediate_size", "n_inner", default=_default_ffn(c))),
    ("num_attention_heads", lambda c, t: _get(c, *HEADS)),
    ("num_kv_heads", lambda c, t: _get(c, "num_key_value_heads", "num_attention_heads", "n_head")),
    ("head_dim", lambda c, t: _head_dim(c)),
    ("vocab_size", lambda c, t: c.get("vocab_size")),
    ("gated_mlp", lambda c, t: t not in UNGATED_TYPES),
    ("tie_embeddings", lambda c, t: bool(c.get("tie_word_embeddings", t in TIED_BY_DEFAULT))),
    ("moe", _moe),
    ("mla", lambda c, t: _mla(c)),                                           # DeepSeek-V2/V3 latent attention
    ("num_mtp_layers", lambda c, t: c.get("num_nextn_predict_layers") or None),  # DeepSeek-V3 MTP modules
    ("attention", _attention),                                               # sliding window, sinks
]


def omitted_parameters(cfg: dict) -> dict[str, int]:
    """Parameters of the checkpoint that costmodel/compute/architecture.py does not count (biases, extra norms),
    by name, computed from the config (0-sized entries left out)."""
    t = cfg.get("model_type", "")
    L, h, heads = _get(cfg, *LAYERS), _get(cfg, *HIDDEN), _get(cfg, *HEADS)
    head = cfg.get("head_dim") or h // heads
    kv = _get(cfg, "num_key_value_heads", default=heads)
    ffn = _get(cfg, "intermediate_size", default=4 * h)
    out: dict[str, int] = {}
    if t in ("qwen2", "qwen2_moe"):  # Qwen2Attention: q/k/v projections with bias, o_proj without
        out["qkv_bias"] = L * (heads * head + 2 * kv * head)
    elif cfg.get("attention_bias") and t != "gpt_neox":  # LlamaAttention(bias=attention_bias): q, k, v and o
        out["attention_bias"] = L * (heads * head + 2 * kv * head + h)
    if t in ("qwen3", "qwen3_moe", "gemma3_text"):
        out["qk_norm"] = L * 2 * head
    if t in ("gemma2", "gemma3_text"):  # pre/post feed-forward norms besides the two counted ones
        out["extra_norms"] = L * 2 * h
    if t == "qwen2_moe" and cfg.get("shared_expert_intermediate_size"):
        out["shared_expert_gate"] = (L - first_dense_layers(cfg)) * h
    if t in EXPERT_BIAS_TYPES:  # GptOssExperts' two biases, the router's bias, GptOssAttention's sinks
        experts = _get(cfg, "num_local_experts", "num_experts", default=0)
        expert_ffn = _get(cfg, "moe_intermediate_size", "intermediate_size", default=0)  # missing: the moe section's
        # expert width is missing too, and the spec's check names it
        out["expert_biases"] = L * experts * (2 * expert_ffn + h)
        out["router_bias"] = L * experts
    if t in SINK_TYPES:
        out["attention_sinks"] = L * heads
    if t == "gpt_neox":  # the MLP's linear layers and the LayerNorms have biases; the attention's query_key_value
        # and dense have one when attention_bias (GPTNeoXConfig's default True): counted here once, not above too
        attention = 3 * h + h if cfg.get("attention_bias", True) else 0
        out["linear_biases"] = L * (attention + ffn + h)
        out["layernorm_biases"] = L * 2 * h + h
    return {k: v for k, v in out.items() if v}


def model_from_hf_config(cfg: dict, name: Optional[str] = None, where: str = "model.hf_config") -> HFModel:
    """Spec ``model`` fields from a parsed config.json, with warnings for what the spec cannot hold. Every
    field read is type- and range-checked first (library/hf_fields.py); ``where`` prefixes the field paths of
    errors (a request's ``spec.model.hf_config_json``)."""
    if not isinstance(cfg, dict):
        raise HFFieldError(where, "the file must hold a JSON object")
    check_config(cfg, where)
    t = str(cfg.get("model_type", ""))
    if "text_config" in cfg and isinstance(cfg["text_config"], dict):  # multimodal wrappers: the language model
        return model_from_hf_config({**cfg["text_config"], "model_type": cfg["text_config"].get("model_type", t)},
                                    name, where=f"{where}.text_config")
    for names in (LAYERS, HIDDEN, HEADS, VOCAB):  # before any arithmetic that reads them
        if _get(cfg, *names) is None:
            raise HFFieldError(f"{where}.{names[0]}", f"missing field {names[0]!r} (model_type {t!r})")
    fields: dict[str, Any] = {"name": name or str(cfg.get("_name_or_path") or t or "model").rsplit("/", 1)[-1]}
    warnings: list[str] = []
    for key, reader in FIELD_MAP:
        try:
            value = reader(cfg, t)
        except KeyError as err:
            raise HFFieldError(f"{where}.{err.args[0]}", f"missing field {err.args[0]!r} for model_type {t!r}") from None
        if value is None:
            continue
        if key not in ModelSpec.model_fields:
            warnings.append(f"model.{key}: the config has {key} = {value!r} but the spec has no such field yet; "
                            f"the cost model ignores it (costmodel/spec/spec.py)")
            continue
        fields[key] = value
    for key, hf_name in (("num_layers", "num_hidden_layers"), ("hidden_size", "hidden_size"),
                         ("num_attention_heads", "num_attention_heads"), ("vocab_size", "vocab_size")):
        if key not in fields:
            raise HFFieldError(f"{where}.{hf_name}", f"missing field {hf_name!r} (model_type {t!r})")
    if t in ("qwen2_moe", "qwen3_moe") and cfg.get("decoder_sparse_step", 1) != 1:
        warnings.append(f"model.moe: decoder_sparse_step = {cfg['decoder_sparse_step']} interleaves dense and MoE "
                        f"layers; the spec holds only leading dense layers, so every layer is MoE here")
    only = cfg.get("mlp_only_layers") or []
    if only and sorted(only) != list(range(len(only))):
        warnings.append(f"model.moe: mlp_only_layers {only} are not the leading layers; counted as MoE layers")
    omitted = omitted_parameters(cfg)
    if omitted:
        warnings.append("parameters the cost model does not count: " + ", ".join(f"{k} {v:,}" for k, v in omitted.items()))
    if t and t not in KNOWN_TYPES:
        warnings.append(f"model_type {t!r} is not one of the mapped families ({', '.join(KNOWN_TYPES)}); read with "
                        f"the Llama field names")
    return HFModel(fields=fields, warnings=warnings)


KNOWN_TYPES = ("llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "deepseek_v3",
               "gpt_neox", "gemma", "gemma2", "gemma3_text", "gpt_oss")


def read_hf_config(path: str) -> dict:
    """The parsed config.json; :class:`ModelSourceError` naming ``model.hf_config`` on any failure."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        raise ModelSourceError(f"model.hf_config: file not found: {path}") from None
    except IsADirectoryError:
        raise ModelSourceError(f"model.hf_config: {path} is a directory; give the config.json inside it") from None
    except (OSError, ValueError) as err:
        raise ModelSourceError(f"model.hf_config: cannot read {path}: {getattr(err, 'strerror', None) or err}") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise ModelSourceError(f"model.hf_config: {path} is larger than 1 MiB; not a config.json")
    try:
        return json.loads(raw.decode("utf-8"), parse_int=parse_json_int)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
        raise ModelSourceError(f"model.hf_config: {path} is not JSON: {err}") from None


def preset_model(name: str) -> dict[str, Any]:
    """A preset's model fields; a name that is not a string is an error naming ``model.preset`` (checked before the
    cache, which cannot hash a list)."""
    if not isinstance(name, str) or len(name) > MAX_NAME_CHARS:
        raise HFFieldError("model.preset", f"must be a preset name of at most {MAX_NAME_CHARS} characters")
    return _preset_model(name)


@lru_cache(maxsize=1)
def _preset_model(name: str) -> dict[str, Any]:
    presets = load_presets()
    if name not in presets:
        close = difflib.get_close_matches(str(name), list(presets), n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise ModelSourceError(f"model.preset: unknown preset {name!r}{hint} (solver-cli presets lists all "
                               f"{len(presets)})")
    return {"name": name, **presets[name]["model"]}


def expand_model_section(data: Any, base_dir: str = ".", warnings: Optional[list[str]] = None) -> Any:
    """Replace ``model: {hf_config: ...}`` / ``model: {preset: ...}`` in a raw spec dict by plain model fields
    (keys given next to them override the values read). Anything else is returned unchanged."""
    if not isinstance(data, dict) or not isinstance(data.get("model"), dict):
        return data
    model = dict(data["model"])
    if "hf_config" in model and "preset" in model:
        raise ModelSourceError("model: give hf_config or preset, not both")
    if "hf_config" in model:
        path = model.pop("hf_config")
        if not isinstance(path, str) or not path:
            raise ModelSourceError("model.hf_config: must be a path to a config.json")
        full = path if os.path.isabs(path) else os.path.join(base_dir, path)
        stem = Path(full).stem
        default_name = Path(full).resolve().parent.name if stem == "config" else stem  # <repo>/config.json
        mapped = model_from_hf_config(read_hf_config(full), name=model.get("name") or default_name)
        if warnings is not None:
            warnings.extend(mapped.warnings)
        base = mapped.fields
    elif "preset" in model:
        base = preset_model(model.pop("preset"))
    else:
        return data
    return {**data, "model": {**base, **model}}


__all__ = ["expand_model_section", "model_from_hf_config", "read_hf_config", "omitted_parameters", "preset_model",
           "load_presets", "ModelSourceError", "HFFieldError", "HFModel", "FIELD_MAP", "KNOWN_TYPES", "first_dense_layers"]
