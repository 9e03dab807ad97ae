"""Range checks of the planner's arguments, shared by ``planner.optimize``, the CLI and the service.

Every argument the caller controls is checked before any work starts, so a bad value is an
:class:`~parplan.costmodel.errors.ArgumentError` naming the argument and the rule, never a wrong
INFEASIBLE, a long run or an exception from inside OR-Tools. The ranges:

=================  ========================================  ===============================================
argument           legal values                              why
=================  ========================================  ===============================================
``top_k``          integer 1 .. :data:`MAX_TOP_K` (100)       0 plans is not a question; K plans cost K solves
``method``         ``"cpsat"`` or ``"exhaustive"``
``pareto``         None, ``"memory"`` or ``"gpus"``
``time_limit_s``   finite number, 0 < t ≤ :data:`MAX_TIME_LIMIT_S`  one day; CP-SAT's ``max_time_in_seconds``
                   (86 400 s)                                 is a double, but no planning call needs more
``workers``        integer 0 .. :data:`MAX_WORKERS` (256)     0 = all cores; CP-SAT's ``num_workers`` starts a
                                                              thread each, so 100 000 only exhausts the host
``seed``           integer 0 .. :data:`MAX_SEED` (2**31 - 1)  CP-SAT's ``random_seed`` is an int32
                                                              (ortools 9.15 sat_parameters.proto; checked:
                                                              ``SatParameters.DESCRIPTOR`` type TYPE_INT32)
``deterministic``  bool
``memory_budget``  None or an integer 256 .. 2**22 MiB         the process's resident memory while it solves
``_mib``           (None: the process default, 1536 unless    (solver/deadline.py: MemoryBudget); below 256 MiB
                   ``serve --memory-budget-mib`` set it)      the interpreter and OR-Tools alone do not fit
=================  ========================================  ===============================================

Booleans are refused where a number is expected (``True`` is an ``int`` in Python, not a count).
"""

from __future__ import annotations

import math
from numbers import Integral, Real
from typing import Optional

from parplan.costmodel.errors import ArgumentError
from parplan.solver.deadline import (DEFAULT_MEMORY_BUDGET_MIB, MAX_MEMORY_BUDGET_MIB, MIN_MEMORY_BUDGET_MIB,
                                     check_memory_budget)

METHODS = ("cpsat", "exhaustive")
PARETO_AXES = ("memory", "gpus")
MAX_TOP_K = 100
MAX_TIME_LIMIT_S = 86_400.0
MAX_WORKERS = 256
MAX_SEED = 2**31 - 1


def _integer(name: str, value: object, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise ArgumentError(name, f"must be an integer from {low} to {high}", value)
    if not low <= value <= high:
        raise ArgumentError(name, f"must be from {low} to {high}", value)


def _choice(name: str, value: object, allowed: tuple[Optional[str], ...]) -> None:
    if not ((value is None or isinstance(value, str)) and value in allowed):
        shown = ", ".join("None" if a is None else repr(a) for a in allowed)
        raise ArgumentError(name, f"must be one of {shown}", value)


def check_time_limit(time_limit_s: object, name: str = "time_limit_s") -> float:
    """A finite positive number of seconds, at most one day; returned as float."""
    if isinstance(time_limit_s, bool) or not isinstance(time_limit_s, Real):
        raise ArgumentError(name, f"must be a number of seconds, 0 < t ≤ {MAX_TIME_LIMIT_S:g}", time_limit_s)
    t = float(time_limit_s)
    if not (math.isfinite(t) and 0 < t <= MAX_TIME_LIMIT_S):
        raise ArgumentError(name, f"must be a number of seconds, 0 < t ≤ {MAX_TIME_LIMIT_S:g}", time_limit_s)
    return t


def check_solver_controls(*, time_limit_s: object, workers: object, seed: object, deterministic: object,
                          memory_budget_mib: object = None) -> None:
    """The fields of ``SolverControls`` (see the module docstring for the ranges)."""
    check_time_limit(time_limit_s)
    _integer("workers", workers, 0, MAX_WORKERS)
    _integer("seed", seed, 0, MAX_SEED)
    if not isinstance(deterministic, bool):
        raise ArgumentError("deterministic", "must be true or false", deterministic)
    if memory_budget_mib is not None:
        check_memory_budget(memory_budget_mib)


def check_optimize_arguments(*, top_k: object, method: object, pareto: object, time_limit_s: object,
                             workers: object, seed: object, deterministic: object,
                             memory_budget_mib: object = None) -> None:
    """Raise :class:`ArgumentError` for the first argument of ``optimize`` outside its range."""
    _integer("top_k", top_k, 1, MAX_TOP_K)
    _choice("method", method, METHODS)
    _choice("pareto", pareto, (None, *PARETO_AXES))
    check_solver_controls(time_limit_s=time_limit_s, workers=workers, seed=seed, deterministic=deterministic,
                          memory_budget_mib=memory_budget_mib)


__all__ = ["check_optimize_arguments", "check_solver_controls", "check_memory_budget", "check_time_limit", "ArgumentError", "METHODS",
           "PARETO_AXES", "MAX_TOP_K", "MAX_TIME_LIMIT_S", "MAX_WORKERS", "MAX_SEED", "MIN_MEMORY_BUDGET_MIB",
           "MAX_MEMORY_BUDGET_MIB", "DEFAULT_MEMORY_BUDGET_MIB"]
