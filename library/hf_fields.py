"""Type and range checks of every ``config.json`` field that library/huggingface.py reads, run before any
arithmetic on them (issue 36, finding 3: a string layer count times a huge width grew RSS by 2.5 GiB, a zero
head count or an infinite ``sliding_window`` ended INTERNAL).

Each rule is (kind, lowest, highest); the caps are the spec's own (costmodel/spec/spec_base.py), so a value that
passes here can still be refused by the strict schema but never overflows or allocates on the way there.
``bool`` is not an ``int`` here, and NaN / infinities are refused. An error is a :class:`HFFieldError`
(a :class:`~parplan.costmodel.errors.ParplanError`) whose ``field_path`` names the key, prefixed by where the
config came from (``model.hf_config_json.num_hidden_layers``).
"""

from __future__ import annotations

import math
from typing import Any

from parplan.costmodel.errors import ParplanError
from parplan.costmodel.spec.spec_base import (MAX_ATTENTION_HEADS, MAX_EXPERTS, MAX_HIDDEN_SIZE, MAX_NUM_LAYERS,
                                         MAX_SEQ_LEN, MAX_VOCAB_SIZE)

MAX_NAME_CHARS = 256  # model_type, _name_or_path, preset names
MAX_CLAMP = 1e6  # MoESpec.activation_clamp's own bound (costmodel/spec/spec.py)

# key -> (kind, lowest, highest); kind "int" (not bool), "float" (finite, int allowed), "bool", "str",
# "int_list" (each item an int in range; length at most MAX_NUM_LAYERS), "str_list" (the same, strings)
RULES: dict[str, tuple[str, float, float]] = {
    **{k: ("int", 1, MAX_NUM_LAYERS) for k in ("num_hidden_layers", "n_layer", "num_layers")},
    **{k: ("int", 1, MAX_HIDDEN_SIZE) for k in (
        "hidden_size", "n_embd", "d_model", "intermediate_size", "n_inner", "head_dim", "moe_intermediate_size",
        "shared_expert_intermediate_size", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")},
    "q_lora_rank": ("int", 0, MAX_HIDDEN_SIZE),
    **{k: ("int", 1, MAX_ATTENTION_HEADS) for k in ("num_attention_heads", "n_head", "num_key_value_heads")},
    "vocab_size": ("int", 1, MAX_VOCAB_SIZE),
    **{k: ("int", 0, MAX_EXPERTS) for k in ("num_local_experts", "num_experts", "n_routed_experts",
                                             "n_shared_experts", "num_experts_per_tok")},
    "first_k_dense_replace": ("int", 0, MAX_NUM_LAYERS),
    "decoder_sparse_step": ("int", 0, MAX_NUM_LAYERS),
    "num_nextn_predict_layers": ("int", 0, MAX_NUM_LAYERS),
    "sliding_window": ("int", 0, MAX_SEQ_LEN),
    "swiglu_limit": ("float", 0, MAX_CLAMP),
    **{k: ("bool", 0, 0) for k in ("tie_word_embeddings", "attention_bias")},
    **{k: ("str", 0, MAX_NAME_CHARS) for k in ("model_type", "_name_or_path")},
    "mlp_only_layers": ("int_list", 0, MAX_NUM_LAYERS),
    "layer_types": ("str_list", 0, MAX_NAME_CHARS),
}


class ModelSourceError(ParplanError):
    """A ``model.hf_config`` / ``model.preset`` that cannot be read; the message starts with the field path."""


class HFFieldError(ModelSourceError):
    """A config.json field of the wrong type or outside its range; ``field_path`` names it."""

    def __init__(self, field_path: str, message: str):
        self.field_path = field_path
        super().__init__(f"{field_path}: {message}", field=field_path)


MAX_INT_DIGITS = 30  # far above any cap of RULES; Python's int() refuses over 4,300 digits with a ValueError


class LongNumber:
    """A JSON integer of more than :data:`MAX_INT_DIGITS` digits, kept unconverted so the check names its field."""

    def __init__(self, digits: int):
        self.digits = digits


def parse_json_int(text: str) -> Any:
    """``json.loads(..., parse_int=parse_json_int)``: an int, or a :class:`LongNumber` for thousands of digits."""
    return int(text) if len(text) <= MAX_INT_DIGITS else LongNumber(len(text))


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_value(value: Any, rule: tuple[str, float, float], path: str) -> None:
    """Raise :class:`HFFieldError` unless ``value`` fits ``rule``."""
    kind, lo, hi = rule
    if isinstance(value, LongNumber):
        raise HFFieldError(path, f"a number of {value.digits} digits; out of range")
    if kind == "int":
        if not _is_int(value):
            raise HFFieldError(path, f"must be an integer, got {type(value).__name__}")
        if not lo <= value <= hi:  # compared, never printed: a 5,000-digit int has no str() here
            raise HFFieldError(path, f"must be in [{lo}, {hi}]")
    elif kind == "float":
        if not (_is_int(value) or isinstance(value, float)):
            raise HFFieldError(path, f"must be a number, got {type(value).__name__}")
        if isinstance(value, float) and not math.isfinite(value):
            raise HFFieldError(path, "must be finite (not NaN or infinity)")
        if not lo <= value <= hi:
            raise HFFieldError(path, f"must be in [{lo}, {hi:g}]")
    elif kind == "bool":
        if not isinstance(value, bool):
            raise HFFieldError(path, f"must be true or false, got {type(value).__name__}")
    elif kind == "str":
        if not isinstance(value, str):
            raise HFFieldError(path, f"must be a string, got {type(value).__name__}")
        if len(value) > hi:
            raise HFFieldError(path, f"longer than {int(hi)} characters")
    else:
        if not isinstance(value, list):
            raise HFFieldError(path, f"must be a list, got {type(value).__name__}")
        if len(value) > MAX_NUM_LAYERS:
            raise HFFieldError(path, f"longer than {MAX_NUM_LAYERS} items")
        item = ("int", lo, hi) if kind == "int_list" else ("str", lo, hi)
        for i, v in enumerate(value):
            check_value(v, item, f"{path}[{i}]")


def check_config(cfg: Any, where: str) -> None:
    """Check every key of :data:`RULES` that ``cfg`` holds (null means absent, as transformers reads it)."""
    if not isinstance(cfg, dict):
        raise HFFieldError(where, "must be a JSON object (a config.json)")
    for key, rule in RULES.items():
        value = cfg.get(key)
        if value is not None:
            check_value(value, rule, f"{where}.{key}")
    text = cfg.get("text_config")
    if text is not None:
        check_config(text, f"{where}.text_config")


__all__ = ["parse_json_int", "LongNumber", "HFFieldError", "ModelSourceError", "RULES", "check_config", "check_value", "MAX_NAME_CHARS"]
