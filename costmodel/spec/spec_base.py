"""The bases of the spec's sections: the documented size limits (``MAX_*``) and the strict, limit-checked model
every user-facing section derives from (``costmodel/spec/spec.py`` re-exports them)."""

from __future__ import annotations

import math
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, field_validator

# Upper limits of sizes: well above any model or cluster built (Llama-3 405B: 126 layers, hidden 16384,
# 128K context, 16K GPUs; DeepSeek-V3: 256 experts), low enough that nothing later overflows.
MAX_NUM_LAYERS = 10**6
MAX_HIDDEN_SIZE = 2**20  # hidden_size, ffn_hidden_size, head_dim, expert widths
MAX_ATTENTION_HEADS = 2**16  # num_attention_heads, num_kv_heads
MAX_VOCAB_SIZE = 2**24
MAX_EXPERTS = 2**16  # num_experts, num_shared_experts
MAX_SEQ_LEN = 2**24  # tokens per sequence
MAX_GLOBAL_BATCH_SIZE = 10**8  # sequences per step
MAX_NUM_GPUS = 2**20  # cluster.num_gpus, search.max_num_gpus, parallel degrees
MAX_GPUS_PER_NODE = 2**10  # cluster.gpus_per_node (an NVL72 rack is 72)
MAX_MEMORY_GIB = 2.0**20  # per GPU: 1 PiB
MAX_PEAK_TFLOPS = 1e6  # per GPU: 1 EFLOP/s
MAX_BANDWIDTH_GBPS = 1e6  # per GPU per direction: 1 PB/s
MAX_LATENCY_US = 1e6  # one second per message


def limit_text(limit: float) -> str:
    """``1048576 (2**20)``, ``100000000 (10**8)``, else ``1e+06``."""
    for base in (2, 10):
        exponent = round(math.log(limit, base))
        if base**exponent == limit:
            return f"{int(limit)} ({base}**{exponent})"
    return f"{limit:g}"


def at_most(value, limit: float):
    """``value`` (a number or a list of numbers; None passes) unless one exceeds ``limit``."""
    for v in value if isinstance(value, list) else [value]:
        if isinstance(v, float) and not math.isfinite(v):
            raise ValueError(f"must be a finite number (got {v!r})")
        if v is not None and v > limit:
            shown = repr(v) if len(repr(v)) <= 40 else repr(v)[:37] + "..."
            raise ValueError(f"{shown} is out of range: the supported maximum is {limit_text(limit)}")
    return value


class StrictModel(BaseModel):
    """Every spec type: unknown keys refused (``extra="forbid"``), no type coercion, immutable."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class LimitedSection(StrictModel):
    """A user-facing section: ``LIMITS`` maps a field to its documented maximum (the ``MAX_*`` constants)."""

    LIMITS: ClassVar[dict[str, float]] = {}

    @field_validator("*")
    @classmethod
    def _within_limits(cls, value, info):
        limit = cls.LIMITS.get(info.field_name)
        return value if limit is None else at_most(value, limit)
