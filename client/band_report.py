"""The prediction bands in ``solver-cli optimize``'s report (costmodel/evaluation/prediction_band.py): each ranked
plan's step-time and peak-memory bands, ``tie`` where its step band overlaps the best plan's, and where they come from."""

from __future__ import annotations

from typing import Optional

from parplan.costmodel.evaluation.ledger import Evaluation
from parplan.costmodel.evaluation.prediction_band import BandSource, overlaps, plan_band


def band_cells(e: Evaluation, source: Optional[BandSource], ref: Optional[Evaluation]) -> tuple[str, ...]:
    """(step band, ``tie`` after it where it overlaps the best's; peak band) of one row; nothing without a source."""
    if source is None or ref is None:
        return ()
    b = plan_band(e, source)
    tie = " tie" if e is not ref and overlaps(b, plan_band(ref, source)) else ""
    return f"{b.step_time_s_low:.2f}-{b.step_time_s_high:.2f}{tie}", f"{b.peak_memory_gib_low:.0f}-{b.peak_memory_gib_high:.0f}"


def band_caption(source: BandSource) -> str:
    """Where the bands come from, in one line."""
    q_lo, q_hi = source.quantiles
    order = "; ranked by the band's upper end" if source.rank_by == "upper" else ""
    return (f"bands: {source.calibration} calibration's predicted/measured quantiles {q_lo:g}-{q_hi:g} "
            f"({source.rows} step-time rows, {source.memory_rows} memory rows); tie: its step band overlaps the best's"
            f"{order}")


def best_band_line(best: Evaluation, source: BandSource) -> str:
    """The best plan's bands, under its ledger."""
    b = plan_band(best, source)
    return (f"band: step {b.step_time_s_low:.3f}-{b.step_time_s_high:.3f} s, peak memory "
            f"{b.peak_memory_gib_low:.1f}-{b.peak_memory_gib_high:.1f} GiB ({band_caption(source)})")


__all__ = ["BandSource", "band_cells", "band_caption", "best_band_line"]
