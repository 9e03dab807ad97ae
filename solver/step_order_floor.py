"""Lower bounds of a DualPipe / DualPipeV plan's step by its step order that the search's tables and bounds can carry
(issue 39 item 1: the step order as the objective needs bounds valid for it, and the closed form is not one).

A rank runs its operations one after another, so its chain is a path of the step order's graph
(costmodel/schedules/dualpipe_steps.py ``step_order_s``: the longest path), and the chain's length is the rank's
busy time, ``m·row_r`` with ``row_r`` the evaluator's row of that rank, its paired exposure included (the identity
tests/costmodel/schedules/test_paired_overlap.py ``test_rank_busy_time_is_the_step_orders`` checks; the
fill-busy-drain bound of costmodel/schedules/step_order_bound.py adds each rank's fill and drain to it). The step by
the step order adds the exposed DP term as the closed form does (evaluate.py ``paired_step_order_s``). Hence, at
every assignment of a paired choice's table (solver/tables.py, units = the evaluator's rows)::

    step order  ≥  m·max_u time_u + max_u dp_u       (the busy floor: :func:`floor_table`, M = W·m, S = 0)

with equality where no rank has a fill (DualPipe on 2 ranks, DualPipeV on 1: the fill-busy-drain path of every
rank is its chain). The closed form is ``W(m + w_max)·t_max + S·Σ_u t_u + W·dp`` with ``w_max + (units - 1)·w_sum
≤ β`` (costmodel/schedules/schedule.py ``stage_bubble_weights``; ``β ≥ 0``, ``Schedule.bubble_time``), so it is at
most ``(1 + β/m)`` times the busy floor; any lower bound ``B`` of a choice's closed form therefore gives
``B / (1 + β_max/m)``, a lower bound of its step order (:func:`floor_divisor`), ``β_max`` the bubble at weight-gradient
share 0 (``PipelineUnits.bubble_beta``: W only shortens DualPipe's and DualPipeV's bubble). Today's choice-level
bounds of the closed form are not lower bounds of the step order themselves (the closed form is 0.79-1.16 of it:
the strict xfail of test_paired_overlap.py), so a search under the step order prunes paired choices with these.
"""

from __future__ import annotations

import dataclasses

from parplan.costmodel.evaluation.choice import Choice, bubble_factor
from parplan.solver.tables import StageTable


def floor_table(t: StageTable) -> StageTable:
    """``t`` with the busy floor of the step order as its objective (module docstring): ``U = W·m·t_max +
    W·dp_max``, exact in integers (W a power of two); a table of a non-paired choice unchanged."""
    if not t.choice.schedule.paired:
        return t
    return dataclasses.replace(t, M=t.scale.weight * t.choice.num_microbatches, S=0)


def floor_divisor(c: Choice, a) -> float:
    """``1 + β_max/m`` of a paired choice (module docstring: a lower bound of its closed form divided by this is one
    of its step order); 1 for the other schedules, whose objective the closed form stays."""
    if not c.schedule.paired:
        return 1.0
    return 1.0 + max(0.0, bubble_factor(c, a, 0.0)) / c.num_microbatches


def busy_mean_bound(problem, i: int) -> float:
    """``W·m·lb_time`` of paired choice ``i`` (scaled, as Problem.mean_bound): its mean unit time without recompute
    (table_builder.MeanParts, never above the slowest unit's) over every micro-batch, at most its busy floor, so a
    lower bound of its step order without the divisor's ``1 + β_max/m`` (a sixteenth at 32 stages and 480
    micro-batches). Reads the problem's kept MeanParts (Problem.mean_bound's)."""
    c = problem.choices[i]
    _, lb_time = problem._mean_bound_parts(i).at(c.num_microbatches, problem.scale, problem.num_layers)
    return float(problem.scale.weight * c.num_microbatches) * lb_time
