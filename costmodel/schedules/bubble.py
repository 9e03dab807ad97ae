"""Pipeline bubbles per schedule: the seed tables' ratios and fractions.

The formulas per schedule (DeepSeek-V3 report, arXiv 2412.19437, Table 2, as tabulated in seed 000 §4) and the
uneven-stage weights (Alpa §5.1 Eq. 2) live with the schedules, in :mod:`~parplan.costmodel.schedules.schedule`
(:meth:`Schedule.bubble_time`, :func:`stage_bubble_weights`); this module keeps the seeds' ratio forms.
"""

from __future__ import annotations

from typing import Optional

from parplan.costmodel.schedules.schedule import Schedule, stage_bubble_weights

__all__ = ["bubble_fraction", "bubble_ratio", "bubble_time", "stage_bubble_weights"]


def bubble_time(schedule: Schedule, pp: int, F: float, B: float, W: float = 0.0, FandB: Optional[float] = None,
                vpp: int = 1) -> float:
    """The bubble of ``schedule`` on ``pp`` ranks."""
    return schedule.bubble_time(pp, F, B, W, FandB, vpp)


def bubble_ratio(schedule: Schedule, pp: int, m: int, F: float = 1.0, B: float = 2.0, W: float = 0.5,
                 FandB: float = 2.0, vpp: int = 1) -> float:
    """Bubble over total time, ``b / (m(F+B) + b)`` (seed 000 ``bubble.py``)."""
    b = bubble_time(schedule, pp, F, B, W, FandB, vpp)
    return b / (m * (F + B) + b)


def bubble_fraction(pp: int, m: int, vpp: int = 1) -> float:
    """Seed 001: 1F1B ``(p-1)/(m+p-1)``; interleaved ``(p-1)/(m·v+p-1)``."""
    return (pp - 1) / (m * vpp + pp - 1)
