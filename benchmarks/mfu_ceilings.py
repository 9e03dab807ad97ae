"""The best published MFU per catalog GPU and precision: the plausibility ceiling of issue 38 item 1.

The table is the one the calibration is fitted on (benchmarks/data/published-runs.yaml and mlperf-v5.1.yaml as
benchmarks/fit.py reads them; each row cites its source), dense rows only (an MoE run's MFU is no ceiling for a dense
plan). An MFU is a share of the die's own peak, so a ceiling carries over within a generation: a (GPU, precision)
takes the best dense row of its generation in that precision, its own rows included (A100-SXM-40GB takes the
A100-SXM-80GB's llm-foundry MPT-7B row, GB200's FP8 takes B200's MLPerf rows), else, where the generation has none,
the best over every GPU in that precision (MI300X; Blackwell BF16).

Used by tests/costmodel/evaluation/test_evaluate_mfu_ceiling.py (the issue's example plan under every assumption
preset) and benchmarks/plausibility.py (every model preset's optimum on every catalog GPU).
"""

from __future__ import annotations

import sys
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import fit  # noqa: E402
from parplan.costmodel.spec.hardware import CATALOG  # noqa: E402

MARGIN_POINTS = 5.0  # issue 38 item 1: no prediction above the best published MFU by more than 5 points


@lru_cache(maxsize=1)
def best_published() -> dict[tuple[str, str], tuple[float, str]]:
    """(GPU, precision) -> (the largest published MFU of a dense row, in percent; that row's id)."""
    cases, _ = fit.prepare_cases(fit.fit_rows())
    best: dict[tuple[str, str], tuple[float, str]] = {}
    for c in cases:
        if c.spec.model.moe is not None:
            continue
        key = (c.gpu.name, c.precision)
        if c.published_mfu > best.get(key, (0.0, ""))[0]:
            best[key] = (c.published_mfu, c.id)
    return best


@lru_cache(maxsize=1)
def ceilings() -> dict[tuple[str, str], tuple[float, str]]:
    """Every catalog GPU and precision with a peak: (ceiling in percent, where it comes from) by the module's rule."""
    best = best_published()
    out = {}
    for name, gpu in CATALOG.items():
        for precision in ("bf16", "fp8") if gpu.peak_fp8_tflops else ("bf16",):
            same = [(v, f"{g}'s {rid}") for (g, p), (v, rid) in best.items()
                    if p == precision and CATALOG[g].generation == gpu.generation]
            if same:
                v, where = max(same)
                out[(name, precision)] = (v, f"{gpu.generation} rows: {where}")
            else:
                v, where = max((v, f"{g}'s {rid}") for (g, p), (v, rid) in best.items() if p == precision)
                out[(name, precision)] = (v, f"every GPU's rows: {where}")
    return out
