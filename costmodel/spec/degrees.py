"""One degree vocabulary for plans and choices, as torchtitan's ``ParallelDims`` (pytorch/torchtitan
``torchtitan/distributed/parallel_dims.py``: the degrees as fields, every product a named property).

:class:`ParallelDims` is mixed into :class:`Choice` (below) and :class:`~parplan.costmodel.spec.spec.Plan`, so both
say ``dense_dp``, ``expert_dp``, ``stage_ranks``, ``num_gpus`` the same way and no caller multiplies degrees
itself. :class:`Choice` lives here (re-exported by :mod:`~parplan.costmodel.evaluation.choice`) so that ``Plan`` can convert
to and from it without an import cycle. The mesh order is tp-cp-dp-pp (Megatron-Core ``parallel_state``;
costmodel/communication/mesh.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from parplan.costmodel.schedules.schedule import Schedule


class ParallelDims:
    """Derived sizes of the degrees ``tp, cp, pp, dp, ep, etp``, ``zero_replicas`` and ``sequence_parallel``:
    fields of the class it is mixed into (declared there, not here, so a pydantic model keeps its own field
    order)."""

    __slots__ = ()

    @property
    def num_gpus(self) -> int:
        """tp·cp·pp·dp: the world size."""
        return self.tp * self.cp * self.pp * self.dp

    @property
    def model_parallel_size(self) -> int:
        """tp·cp·pp: the ranks of one data-parallel replica (torchtitan ``non_data_parallel_size`` with pp)."""
        return self.tp * self.cp * self.pp

    @property
    def stage_ranks(self) -> int:
        """GPUs of one pipeline stage: TP x CP x DP (the p2p stride in the mesh order tp-cp-dp-pp)."""
        return self.tp * self.cp * self.dp

    @property
    def dense_dp(self) -> int:
        """The gradient / ZeRO group of the dense parameters: DP x CP (Megatron's distributed optimizer;
        torchtitan ``dp_cp``)."""
        return self.dp * self.cp

    @property
    def expert_dp(self) -> int:
        """The gradient / ZeRO group of the routed experts: a stage's ranks folded as ETP x EP x EDP."""
        return self.stage_ranks // (self.ep * self.etp)

    @property
    def dense_shard(self) -> int:
        """HSDP: the ranks one dense ZeRO shard spans, DP·CP / zero_replicas (the whole group when 1).
        Megatron-Core's intra-partial DP group: consecutive ranks of the DP×CP group (parallel_state.py:922-929,
        984-992 at d98e8a64); torchtitan's dp_shard × cp mesh inside dp_replicate."""
        return max(1, self.dense_dp // self.zero_replicas)

    @property
    def expert_shard(self) -> int:
        """HSDP: the ranks one expert ZeRO shard spans, EDP / zero_replicas (parallel_state.py:1447-1452)."""
        return max(1, self.expert_dp // self.zero_replicas)

    @property
    def sequence_parallel_on(self) -> bool:
        """Megatron-style sequence parallelism takes effect only with TP > 1."""
        return self.sequence_parallel and self.tp > 1


@dataclass(frozen=True)
class Choice(ParallelDims):
    """Everything in a plan but the stage split and the per-stage recompute counts (costmodel/evaluation/choice.py): the
    unit of the search space and of ``choice_costs``. Its degree arithmetic is :class:`ParallelDims`'s; a
    :class:`~parplan.costmodel.spec.spec.Plan` converts with ``Plan.to_choice()`` / ``Plan.from_choice()``."""

    tp: int
    cp: int
    pp: int
    dp: int
    ep: int = 1
    etp: int = 1
    micro_batch_size: int = 1
    num_microbatches: int = 1
    vpp: int = 1
    schedule: Schedule = Schedule.ONE_F_ONE_B
    recompute: str = "none"  # granularity; 'full' uses per-stage recompute counts
    zero_stage: int = 1
    sequence_parallel: bool = True
    cp_comm_type: str = "p2p"  # --cp-comm-type p2p | a2a | allgather | a2a+p2p (costmodel/communication/context_parallel.py)
    # interleaved: decoder layers fewer in stage 0's first model chunk and in the last stage's last chunk than
    # in their other chunks (Meta's Llama 3 405B split, Megatron's --pipeline-model-parallel-layout); the plan
    # carries them as its pipeline_layout. A search key of the stage split: the costs do not depend on them.
    first_chunk_trim: int = 0
    last_chunk_trim: int = 0
    # memory-side dimensions (defaults: today's plan): HSDP replica groups of the ZeRO group, the optimizer
    # states' dtypes (costmodel/spec/optimizer_states.py; None: assumptions.optimizer_bytes), the share of the
    # optimizer states offloaded to the host (costmodel/memory/offload.py)
    zero_replicas: int = 1
    optimizer_states: str | None = None
    optimizer_offload_fraction: float = 0.0
    moe_fp8_dispatch: bool = False  # FP8 token dispatch (1 B + an fp32 scale per 128 elements), BF16 combine
    moe_a2a_overlap: bool = False  # Megatron-Core --overlap-moe-expert-parallel-comm (costmodel/moe/moe_comm.py)
    activation_offload_layers: int = 0  # --cpu-offloading-num-layers: layers whose activations go to the host
    #                                     (costmodel/evaluation/activation_offload.py; pp 1, no recompute)

    def __post_init__(self) -> None:
        if not isinstance(self.schedule, Schedule):  # a string compares equal but fails every ``is`` test
            raise TypeError(f"Choice.schedule is a Schedule, not {type(self.schedule).__name__} {self.schedule!r}")

    def but(self, **changes) -> "Choice":
        """A copy with ``changes``: ``dataclasses.replace`` without re-running ``__init__`` (the space's hot loop
        makes one per candidate; a Choice is a plain record with no validation of its own)."""
        if not changes.keys() <= self.__dataclass_fields__.keys():  # a subset test builds no set
            raise TypeError(f"Choice has no field(s) {sorted(changes.keys() - self.__dataclass_fields__.keys())}")
        new = object.__new__(Choice)
        new.__dict__.update(self.__dict__)
        new.__dict__.update(changes)
        return new


def chunk_trims_of(layout: Optional[Sequence[Sequence[int]]]) -> tuple[int, int]:
    """(first, last) trims of a layout whose stages hold equal chunks but stage 0's first and the last stage's
    last chunk, which hold fewer (the solver's trimmed layouts, ``Choice.first_chunk_trim``); (0, 0) otherwise."""
    if not layout or len(layout) < 2 or len(layout[0]) < 2:
        return 0, 0
    first, last = layout[0], layout[-1]
    if any(len(set(ch)) > 1 for ch in layout[1:-1]) or len(set(first[1:])) > 1 or len(set(last[:-1])) > 1:
        return 0, 0
    a, b = first[1] - first[0], last[0] - last[-1]
    return (a, b) if a >= 0 and b >= 0 else (0, 0)
