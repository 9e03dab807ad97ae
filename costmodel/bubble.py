"""Pipeline bubbles per schedule.

DeepSeek-V3 report (arXiv 2412.19437) Table 2, as tabulated in seed 000 §4, with F the forward time of
a chunk, B the backward time, W the weight-gradient part of B, F&B an overlapped forward+backward pair:
1F1B ``(PP-1)(F+B)``; ZB1P (ZB-H1) ``(PP-1)(F+B-2W)``; DualPipe ``(PP/2-1)(F&B+B-3W)``.
Interleaved 1F1B with v virtual stages divides the 1F1B bubble by v (seed 001 §4.3,
``(p-1)/(m·v+p-1)``). DualPipeV (DeepSeek's cut-in-half DualPipe, deepseek-ai/DualPipe README at 3da1bbe):
``(PP/2-1)(F&B+B-3W)`` with PP = 2p half-size stages on p ranks, i.e. ``(p-1)(F&B+B-3W)/2`` with a rank's
F, B, W (costmodel/dualpipev.py).

Uneven stages (:func:`stage_bubble_weights`): each formula counts the idle time of ``PP-1`` stage slots as if
every stage were as slow as the slowest. With unequal per-micro-batch stage times t_u the fill and drain pass
through every *other* stage once (Alpa, Zheng et al., OSDI '22, arXiv 2201.12023, §5.1 Eq. 2:
``T = Σ_i t_i + (B-1)·max_j t_j`` for 1F1B-like schedules), so the bubble's PP-1 slot times become the other
units' times: ``β·(Σ_u t_u - t_max)/(PP-1)``, with β the schedule's bubble above in units of a stage time. Equal
stages give back ``β·t``.
"""

from __future__ import annotations

from parplan.costmodel import dualpipev


def bubble_time(schedule: str, pp: int, F: float, B: float, W: float = 0.0, FandB: float | None = None,
                vpp: int = 1) -> float:
    if pp <= 1:
        return 0.0
    if schedule == "1f1b":
        return (pp - 1) * (F + B)
    if schedule == "interleaved":
        return (pp - 1) * (F + B) / vpp
    if schedule == "zb-h1":
        return (pp - 1) * (F + B - 2 * W)
    if schedule == "dualpipe":
        fb = F + B if FandB is None else FandB
        return max(0.0, (pp / 2 - 1) * (fb + B - 3 * W))
    if schedule == "dualpipev":
        return dualpipev.bubble_time(pp, F, B, W, F + B if FandB is None else FandB)
    raise ValueError(f"unknown schedule {schedule!r}")


def bubble_ratio(schedule: str, pp: int, m: int, F: float = 1.0, B: float = 2.0, W: float = 0.5,
                 FandB: float = 2.0, vpp: int = 1) -> float:
    """Bubble over total time, ``b / (m(F+B) + b)`` (seed 000 ``bubble.py``)."""
    b = bubble_time(schedule, pp, F, B, W, FandB, vpp)
    return b / (m * (F + B) + b)


def bubble_fraction(pp: int, m: int, vpp: int = 1) -> float:
    """Seed 001: 1F1B ``(p-1)/(m+p-1)``; interleaved ``(p-1)/(m·v+p-1)``."""
    return (pp - 1) / (m * vpp + pp - 1)


def stage_bubble_weights(beta: float, units: int, uneven: bool = True) -> tuple[float, float]:
    """(w_max, w_sum): the bubble is ``w_max·t_max + w_sum·Σ_u t_u`` over the pipeline's ``units`` unit times.

    ``beta``: the schedule's bubble in units of one stage time (:func:`bubble_time` with F + B = 1). With
    ``uneven`` (Alpa §5.1 Eq. 2, the module docstring) the PP-1 idle slots are the other units' times,
    ``β·(Σ t_u - t_max)/(units-1)``; without, every slot is the slowest unit's, ``β·t_max``."""
    if units <= 1 or beta == 0.0:
        return 0.0, 0.0
    if not uneven:
        return beta, 0.0
    k = beta / (units - 1)
    return -k, k
