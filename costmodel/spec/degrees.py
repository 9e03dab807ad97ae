"""One degree vocabulary for plans and choices, as torchtitan's ``ParallelDims`` (pytorch/torchtitan
``torchtitan/distributed/parallel_dims.py``: the degrees as fields, every product a named property).

:class:`ParallelDims` is mixed into :class:`Choice` (below) and :class:`~parplan.costmodel.spec.spec.Plan`, so both
say ``dense_dp``, ``expert_dp``, ``stage_ranks``, ``num_gpus`` the same way and no caller multiplies degrees
itself. :class:`Choice` lives here (re-exported by :mod:`~parplan.costmodel.evaluation.choice`) so that ``Plan`` can convert
to and from it without an import cycle. The mesh order is tp-cp-dp-pp (Megatron-Core ``parallel_state``;
costmodel/communication/mesh.py).
"""

from __future__ import annotations

from dataclasses import dataclass, make_dataclass  # noqa: F401  (dataclass: the typing block)
from typing import TYPE_CHECKING, Any, Optional, Sequence

from parplan.costmodel.schedules.schedule import Schedule
from parplan.costmodel.spec.plan_fields import ON_CHOICE, REQUIRED, PlanField


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


class _ChoiceRecord(ParallelDims):
    """What a :class:`Choice` does beyond holding its fields: its schedule's type check and the fast copy."""

    __slots__ = ()

    def __post_init__(self) -> None:
        if not isinstance(self.schedule, Schedule):  # a string compares equal but fails every ``is`` test
            raise TypeError(f"Choice.schedule is a Schedule, not {type(self.schedule).__name__} {self.schedule!r}")

    def but(self, **changes) -> "Choice":
        """A copy with ``changes``: ``dataclasses.replace`` without re-running ``__init__`` (the space's hot loop
        makes one per candidate; a Choice is a plain record with no validation of its own)."""
        new = object.__new__(Choice)
        fields = {**self.__dict__, **changes}  # every field, as __init__ set them (one dict built: ~2x faster)
        object.__setattr__(new, "__dict__", fields)
        if len(fields) != len(self.__dict__):  # a name that is no field added a key: refused
            raise TypeError(f"Choice has no field(s) {sorted(changes.keys() - self.__dataclass_fields__.keys())}")
        return new


def _choice_field(f: PlanField) -> tuple[str, str] | tuple[str, str, Any]:
    """(name, annotation text[, default]) of a Choice field, as :func:`dataclasses.make_dataclass` takes it."""
    return (f.name, f.choice) if f.choice_default is REQUIRED else (f.name, f.choice, f.choice_default)


# Everything in a plan but the stage split and the per-stage recompute counts: the fields declared with a
# ``choice`` annotation in costmodel/spec/plan_fields.py, in their order (a frozen dataclass: hashed and compared
# by value)
_CHOICE_DOC = ("Everything in a plan but the stage split and the per-stage recompute counts "
               """(costmodel/evaluation/choice.py): the
    unit of the search space and of ``choice_costs``. Its degree arithmetic is :class:`ParallelDims`'s; a
    :class:`~parplan.costmodel.spec.spec.Plan` converts with ``Plan.to_choice()`` / ``Plan.from_choice()``.""")

if TYPE_CHECKING:  # what editors and type checkers read; at run time it is built from the declaration below
    @dataclass(frozen=True)
    class Choice(_ChoiceRecord):
        """Everything in a plan but the stage split and the per-stage recompute counts."""

        # ---- generated from costmodel/spec/plan_fields.py (tests/costmodel/spec/test_plan_fields.py): do not edit
        tp: int
        cp: int
        pp: int
        dp: int
        ep: int = ...
        etp: int = ...
        micro_batch_size: int = ...
        num_microbatches: int = ...
        vpp: int = ...
        schedule: Schedule = ...
        recompute: str = ...
        zero_stage: int = ...
        sequence_parallel: bool = ...
        cp_comm_type: str = ...
        first_chunk_trim: int = ...
        last_chunk_trim: int = ...
        zero_replicas: int = ...
        optimizer_states: str | None = ...
        optimizer_offload_fraction: float = ...
        moe_fp8_dispatch: bool = ...
        moe_a2a_overlap: bool = ...
        activation_offload_layers: int = ...
        # ---- end of generated fields
else:
    Choice = make_dataclass("Choice", [_choice_field(f) for f in ON_CHOICE], bases=(_ChoiceRecord,), frozen=True,
                            namespace={"__module__": __name__, "__doc__": _CHOICE_DOC})


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
