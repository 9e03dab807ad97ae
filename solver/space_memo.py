"""What the enumeration of a spec's space keeps across global batches (issue 41 item 3): the verdicts of its rules.

A scheduler's next request often differs from the last only in its global batch. The space's enumeration
(solver/space.py ``enumerate_choices``) then walks the same degrees, expert degrees, layouts and completions, with
other batch splits (micro-batch size, micro-batch count m); at another GPU count, other degrees. Its rule verdicts
that read neither the global batch nor the GPU count are kept in an :class:`EnumerationMemo` of the spec's warm entry
(solver/warm_cache.py ``SpecPieces``), under :func:`memo_key` (the framework and the space options: what those
verdicts read beside the entry's own key):

* the completion patterns (solver/space_patterns.py ``SharedCompletions``): each signature's completions and
  rejections. The rules they come from read the head's fields but its batch split and layout, the spec's model,
  precision and plan, the assumptions and the framework's profile (legality.py ``memory_dim_violations``,
  ``moe_comm_violations``, ``profile_choice_violations``; activation_offload.py; framework_rules.py), never the
  global batch; the GPU count only as the head's degrees fix it (tp·cp·pp·dp, in the signature);
* the verdicts behind them (``_Expansion``'s ZeRO stages by groups, profile verdicts by the fields they read, EP
  communication verdicts);
* the schedule rule's verdicts (legality.py ``schedule_violations``, which reads dp, pp, micro-batch size, m,
  schedule, vpp and the global batch) by (pp, m, schedule, vpp): the enumeration asks it only of splits with
  dp·micro-batch size·m = the global batch (``batch_splits``), where its one rule on dp, the micro-batch size and
  the global batch holds, so its verdict is the other rules', which read those four alone.

A pattern replayed where the first request recorded it tallies the same rejections: the tally counts by first reason,
and a pattern's rejections are summed in the order each reason first came (space_patterns ``_summed``), so the
counts and the order of the reasons are those of a walk by the rules (tests/solver/test_space_memo.py checks the
choices and the tally against a fresh enumeration, global batch after global batch).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from parplan.costmodel.spec.spec import Spec

# resident bytes per kept verdict and per pattern (a tuple key and a short list; a pattern's completions, a dict of
# the completion fields each), generous: the warm entry counts them against the cache's share (warm_cache.py nbytes)
VERDICT_BYTES = 256
PATTERN_BYTES = 4096


@dataclass
class EnumerationMemo:
    """The verdicts one :func:`memo_key` keeps (module docstring), shared by the enumerations of its requests."""

    zero_stages: dict = field(default_factory=dict)  # (pp, dense group, expert group) -> ZeRO stages kept
    verdicts: dict = field(default_factory=dict)  # profile rule verdicts by the fields they read
    comm: dict = field(default_factory=dict)  # EP communication verdicts
    ruled: dict = field(default_factory=dict)  # (pp, m, schedule, vpp) -> schedule_violations' verdict
    patterns: dict = field(default_factory=dict)  # space_patterns.signature -> (completions, rejections)

    @property
    def nbytes(self) -> int:
        """The estimated resident bytes (dict lengths only: the cache asks every entry's on every request)."""
        verdicts = len(self.zero_stages) + len(self.verdicts) + len(self.comm) + len(self.ruled)
        return VERDICT_BYTES * verdicts + PATTERN_BYTES * len(self.patterns)


def memo_key(spec: Spec, options) -> tuple:
    """What the kept verdicts read beside the warm entry's key (warm_cache.spec_key, which holds the model, the
    precision, the plan, the assumptions and the cluster but its GPU count): the framework (its profile's rules) and
    the space options."""
    framework = json.dumps(spec.model_dump(mode="json", include={"framework"}), sort_keys=True)
    return framework, options
