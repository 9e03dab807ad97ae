"""What the planner returns: status as data, plans re-evaluated by the cost model, frontiers, reasons."""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from parplan.costmodel.evaluation.ledger import Evaluation
from parplan.costmodel.evaluation.prediction_band import BandSource

Status = Literal["OPTIMAL", "FEASIBLE", "INFEASIBLE", "UNKNOWN"]


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Relaxation(_Out):
    """A concrete change to the request that makes it feasible (checked by solving it)."""

    requirement: str  # the requirement relaxed, e.g. "search.tp", "memory", "cluster.num_gpus"
    change: str  # what to change, in words a user can apply
    patch: dict[str, Any] = {}  # the same change as spec keys (dotted path -> new value; None removes a pin)
    plan: Optional[Evaluation] = None  # the best plan once relaxed


class Explanation(_Out):
    summary: str
    conflicting: list[str]  # requirements that together admit no plan (an infeasibility core)
    rejected_choices: dict[str, int]  # rule -> candidate choices it removed before search
    min_memory_needed_gib: Optional[float] = None  # smallest peak memory any plan needs
    usable_memory_gib: Optional[float] = None
    relaxations: list[Relaxation] = []


class SolveStats(_Out):
    """How the answer was found. Holds no clock readings (those are in :class:`Timing`), so it is part of
    the byte-identical output of deterministic mode."""

    method: str
    choices_total: int  # legal discrete choices in the space
    choices_searched: int  # candidates left after bounds
    objective_value: Optional[float] = None  # step time (s) or peak memory (GiB) as the solver saw it
    best_bound: Optional[float] = None
    gap: Optional[float] = None
    workers: int = 0
    seed: int = 1
    deterministic: bool = False
    ortools_version: str = ""


class Timing(_Out):
    """Wall-clock seconds of one ``optimize`` call, and of its phases where the planner measures them.

    Timings differ run to run, so deterministic mode leaves ``PlanResult.timing`` None: it is then
    omitted from the JSON/YAML output and the table prints no times, and the output is byte-identical."""

    wall_time_s: float
    search_s: Optional[float] = None  # the best plans and their proof (the runners-up are found in the same search)
    top_k_s: Optional[float] = None  # reserved: top-K has no phase of its own
    frontier_s: Optional[float] = None  # the Pareto frontier
    explanation_s: Optional[float] = None  # why nothing fits


class PlanResult(_Out):
    status: Status
    objective: str
    plans: list[Evaluation] = []
    pareto: list[Evaluation] = []
    pareto_axis: Optional[Literal["memory", "gpus"]] = None
    explanation: Optional[Explanation] = None
    stats: SolveStats
    timing: Optional[Timing] = None  # None in deterministic mode (see Timing)
    completed: Optional[list[str]] = None  # a partial plan: the fields the planner chose (None: no plan given)
    memory_margin_gib: Optional[float] = None  # search.memory_margin_gib when set (> 0): stages get headroom_gib
    placement: Optional[list[str]] = None  # several cluster.pools: why each stage sits on its pool (issue 21)
    # the calibration residuals the answers' bands come from (library/contract.py puts the bands in the answer); left
    # out of model_dump, so that the planner's answers dump as they did before the bands
    band_source: Optional[BandSource] = Field(None, exclude=True)
