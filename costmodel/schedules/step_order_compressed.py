"""DualPipe's and DualPipeV's step order at any micro-batch count from one reference graph whose size does not grow
with it: the main step's extra iterations on one rank.

Beyond a few main-step iterations per rank, more micro-batches only lengthen Step 4 ("nF0B1F1B0") of every rank by
whole iterations of the same two F&B chunks (deepseek-ai/DualPipe@3da1bbea ``dualpipe/dualpipe.py:381-392``: two
micro-batches per iteration, one from each end; ``dualpipe/dualpipev.py:352-367``: one), while Steps 1-3 and 5-8
keep their lengths. So the step at ``m`` micro-batches is taken over the reference graph at ``m0`` (every rank at least
two main-step iterations, the first of the middle / last rank being un-overlapped)::

    step(m) = max over ranks r [ longest m0-path through r's last main-step iteration + (m - m0)/k · λ_r ]

with ``λ_r`` rank r's two F&B chunks of one iteration and k the micro-batches per iteration (2 DualPipe, 1
DualPipeV): a path through the iteration takes the extra iterations there (≥), and a path of the m-graph loses at most
``(m - m0)/k`` iterations of its ranks when folded back onto the reference graph (≤). Measured equal to
:func:`~parplan.costmodel.schedules.dualpipe_steps.step_order_s` (relative 1e-12) over random per-stage work,
lopsided stages included (tests/costmodel/schedules/test_step_order_compressed.py). The reference graph holds
about ``2·p + 2`` micro-batches' operations whatever ``m``: what a search can carry as event-time variables (issue 39
item 1), each operation's duration a lookup by its stages' work."""

from __future__ import annotations

from parplan.costmodel.schedules.dualpipe_steps import (StageWork, op_durations_s, step_structure, step_order_defined,
                                                        step_order_s, step_orders)
from parplan.costmodel.schedules.schedule import Schedule


def reference_microbatches(schedule: Schedule, ranks: int) -> tuple[int, int]:
    """(m0, micro-batches per main-step iteration): the least legal count at which every rank runs at least two
    main-step iterations (DualPipe: m/2 - p + h + 1 >= 2 at h = 0; DualPipeV: m - 2P + r + 1 >= 2 at r = 0)."""
    if schedule is Schedule.DUALPIPE:
        return 2 * ranks + 2, 2
    return 2 * ranks + 1, 1


def _potentials(st, durations: list[float]) -> tuple[list[float], list[float]]:
    """(longest path ending at each operation, longest path starting at it), both counting the operation."""
    n = len(durations)
    end, succ = [0.0] * n, [[] for _ in range(n)]
    for i, (ins, prev) in enumerate(zip(st.inputs, st.prev)):
        preds = list(ins) + ([prev] if prev >= 0 else [])
        end[i] = durations[i] + max((end[x] for x in preds), default=0.0)
        for x in preds:
            succ[x].append(i)
    rest = [0.0] * n
    for i in reversed(range(n)):
        rest[i] = durations[i] + max((rest[x] for x in succ[i]), default=0.0)
    return end, rest


def compressed_step_s(schedule: Schedule, work: StageWork, m: int) -> float:
    """The step order's step at ``m`` micro-batches from the reference graph (module docstring); at or below m0 the
    step order itself. A ValueError where the step order does not exist."""
    ranks = len(work.C) if schedule is Schedule.DUALPIPE else len(work.C) // 2
    if not step_order_defined(schedule, ranks, m):
        raise ValueError(f"{schedule} has no step order for {m} micro-batches on {ranks} ranks")
    m0, per = reference_microbatches(schedule, ranks)
    if m <= m0:
        return step_order_s(schedule, work, m)
    st = step_structure(schedule, ranks, m0)
    durations = op_durations_s(st, work)
    end, rest = _potentials(st, durations)
    at = {node: i for i, node in enumerate(st.node)}
    best = 0.0
    for r, ops in enumerate(step_orders(schedule, ranks, m0)):
        last = [at[(r, i)] for i, op in enumerate(ops) if op.step == 4 and op.kind == "FB"][-2:]  # one iteration
        through = max(end[i] + rest[i] - durations[i] for i in last)
        best = max(best, through + (m - m0) // per * sum(durations[i] for i in last))
    return best
