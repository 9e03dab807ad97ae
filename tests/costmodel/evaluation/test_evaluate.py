"""The evaluator end to end (costmodel/evaluation/evaluate.py): DeepSeek-V3 as published fits and matches its reported rate.
"""

from __future__ import annotations

import pytest


def test_deepseek_v3_as_published_fits_and_matches_the_reported_rate():
    """DeepSeek-V3 as run (TP1 PP16 EP64 DualPipe FP8 MLA MTP, 2048 H800, 15,360 x 4096 tokens per step):
    it fits in 80 GB and predicts between 0.95 x and 1.3 x the 1,543 tokens/s per GPU implied by 2.664M
    H800 GPU-hours for 14.8T tokens (14.8e12 / 2.664e6 / 3600 = 1,543.2)."""
    from benchmarks.runs import compare, load_runs

    assert 14.8e12 / 2.664e6 / 3600 == pytest.approx(1543.2, abs=0.1)
    row = next(r for r in load_runs() if r["id"] == "deepseek-v3-production-2048xh800")
    out = compare(row)
    assert out["plan_summary"].startswith("tp1 pp16 ep64 dp128")
    assert out["fits"], out["violations"]
    assert 0.95 <= out["ratio"] <= 1.3, out["ratio"]
