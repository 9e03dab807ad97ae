"""The model preset catalog (library/model_presets.yaml, each entry with its source): ``model: {preset: NAME}``
in a spec (library/huggingface.py expands it) and the lines of ``solver-cli presets``. Needs only PyYAML, so
``solver-cli presets`` imports no pydantic model or NumPy (issue 41 item 2)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

PRESETS_PATH = Path(__file__).with_name("model_presets.yaml")


def load_presets() -> dict[str, dict[str, Any]]:
    """The preset catalog: name -> {source, model}."""
    with open(PRESETS_PATH, encoding="utf-8") as f:
        return yaml.safe_load(f)


def presets_lines() -> list[str]:
    """``solver-cli presets``: one line per preset, its shape and its source."""
    lines = []
    for name, entry in load_presets().items():
        m = entry["model"]
        moe = f" MoE {m['moe']['num_experts']}x top-{m['moe']['top_k']}" if "moe" in m else ""
        lines.append(f"{name:22} L{m['num_layers']} h{m['hidden_size']} heads {m['num_attention_heads']}"
                     f"/{m.get('num_kv_heads', m['num_attention_heads'])} V{m['vocab_size']}{moe}  -- {entry['source']}")
    return lines


__all__ = ["PRESETS_PATH", "load_presets", "presets_lines"]
