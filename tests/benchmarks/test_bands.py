"""benchmarks/bands.py: the default calibration's residuals as band tables, worked by hand on five rows, and the
generated module read back as costmodel/evaluation/prediction_band.py reads it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import bands  # noqa: E402

# (id, exposed share, step ratio, memory ratio): shares 0.1-0.5, median 0.3
ROWS = [("a", 0.1, 0.90, None), ("b", 0.2, 1.00, 0.95), ("c", 0.3, 1.10, None), ("d", 0.4, 0.80, 1.05),
        ("e", 0.5, 1.20, 1.00)]


def test_band_tables_split_at_the_median_share():
    t = bands.band_tables(ROWS)
    assert t["edge"] == 0.3 and t["rows"] == 5
    (edge_low, low, n_low), (edge_high, high, n_high) = t["bins"]
    # low bin 0.90, 1.00, 1.10: numpy's linear quantiles at positions 0.2 and 1.8 -> 0.92 and 1.08
    assert (edge_low, n_low) == (0.3, 3) and low == pytest.approx((0.92, 1.08))
    # high bin 0.80, 1.20: positions 0.1 and 0.9 -> 0.84 and 1.16
    assert (edge_high, n_high) == (1.0, 2) and high == pytest.approx((0.84, 1.16))
    # memory 0.95, 1.00, 1.05 -> 0.96 and 1.04
    (mlo, mhi), mn = t["memory"]
    assert mn == 3 and (mlo, mhi) == pytest.approx((0.96, 1.04))


def test_generated_module_reads_back():
    t = bands.band_tables(ROWS)
    namespace: dict = {}
    exec(bands.module_text(t, "python benchmarks/bands.py"), namespace)  # noqa: S102 (our own generated text)
    assert namespace["STEP_TIME_BINS"] == ((0.3, 0.92, 1.08, 3), (1.0, 0.84, 1.16, 2))
    assert namespace["PEAK_MEMORY_RATIO"] == (0.96, 1.04) and namespace["ROWS"] == 5 and namespace["MEMORY_ROWS"] == 3
