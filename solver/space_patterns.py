"""The completions of one head shared by every head that differs from it only in its batch split and layout.

solver/space.py expands each head (degrees, expert degrees, CP comm type, batch split, schedule layout) into its
completions: every ZeRO stage, memory dimension, recompute, SP, EP communication and activation offload value legal
for it. Which values those are, and which rules reject the others, read the head's fields but its micro-batch size,
micro-batch count, virtual stages and chunk trims (they read a trimmed layout only as trimmed or not: one recompute
count per chunk): the profile's rules read framework_rules.CHOICE_RULE_FIELDS, the EP communication rules (ep, pp,
schedule, recompute, the pair), the memory dimensions' rules the degrees, ZeRO and the dimensions themselves, the
offload rules pp, recompute and the overlap. So the first head of a :func:`signature` is expanded by the rules
(space._Expansion.completions) and its completions recorded as the fields they set, with the rejections it tallied
(summed by reason); every later head of the signature takes the same fields over its own and tallies the same
rejections, in the same order (the same space and tally: tests/solver/test_space_patterns.py). DeepSeek-V3 on 2,048 H800: 116k choices from
~38k heads, most of them the interleaved layouts of one set of degrees and batch split.
"""

from __future__ import annotations

import operator
from typing import Callable, Iterable

from parplan.costmodel.evaluation.choice import Choice

# the fields a completion sets on its head (space._Expansion.completions, comm_choices, offload_choices)
COMPLETION_FIELDS = ("zero_stage", "zero_replicas", "optimizer_states", "optimizer_offload_fraction", "recompute",
                     "sequence_parallel", "moe_fp8_dispatch", "moe_a2a_overlap", "activation_offload_layers")
# the head's fields no completion rule reads (module docstring); the trims only as trimmed or not
LAYOUT_FIELDS = ("micro_batch_size", "num_microbatches", "vpp", "first_chunk_trim", "last_chunk_trim")
_SIGNATURE = operator.itemgetter(*(f for f in Choice.__dataclass_fields__ if f not in LAYOUT_FIELDS))


def signature(head: Choice) -> tuple:
    """The head's fields that its completions read (module docstring): all but :data:`LAYOUT_FIELDS`, and whether a
    chunk is trimmed."""
    return _SIGNATURE(head.__dict__), bool(head.first_chunk_trim or head.last_chunk_trim)


class _Recorder:
    """A rejection tally that passes each rejection on and keeps it (the pattern's)."""

    def __init__(self, tally) -> None:
        self.tally, self.calls = tally, []

    def reject(self, why: list[str], count: int = 1) -> None:
        self.calls.append((why, count))
        self.tally.reject(why, count)


class SharedCompletions:
    """``expansion.completions`` (space._Expansion) of each head, shared by the heads of one :func:`signature`."""

    def __init__(self, expansion, patterns: dict | None = None) -> None:
        """``patterns``: kept by the caller across enumerations that share the rules' inputs (solver/space_memo.py)."""
        self.expansion = expansion
        self._patterns: dict[tuple, tuple[list[dict], list[tuple[list[str], int]]]] = {} if patterns is None else patterns

    def __call__(self, head: Choice) -> Iterable[Choice]:
        key = signature(head)
        pattern = self._patterns.get(key)
        if pattern is None:
            return self._record(head, key)
        changes, rejections = pattern
        tally = self.expansion.tally
        for why, count in rejections:
            tally.reject(why, count)
        fields = head.__dict__
        out = []
        new: Callable = object.__new__
        set_fields = object.__setattr__
        for change in changes:  # Choice.but, without its field check (the fields are the recorded completion's)
            c = new(Choice)
            set_fields(c, "__dict__", {**fields, **change})  # (one dict built: ~2x faster than two updates)
            out.append(c)
        return out

    def _record(self, head: Choice, key: tuple) -> list[Choice]:
        """The head's completions by the rules, its pattern kept under ``key``."""
        e = self.expansion
        tally = e.tally
        e.tally = recorder = _Recorder(tally)
        try:
            out = list(e.completions(head))
        finally:
            e.tally = tally
        self._patterns[key] = ([{f: c.__dict__[f] for f in COMPLETION_FIELDS} for c in out], _summed(recorder.calls))
        return out


def _summed(calls: list[tuple[list[str], int]]) -> list[tuple[list[str], int]]:
    """The rejections ``calls`` summed by their first reason, in the order each first came: the same tally when
    replayed (RejectionTally counts by the first reason, a new reason added at its first rejection)."""
    total: dict[str, int] = {}
    for why, count in calls:
        total[why[0]] = total.get(why[0], 0) + count
    return [([reason], count) for reason, count in total.items()]
