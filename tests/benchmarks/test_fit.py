"""Software baselines (``software_baseline_of`` in the data, benchmarks/fit.py SOFTWARE_BASELINE): a row the source
publishes as the start of an optimization history of a plan it also publishes optimized is scored everywhere but
not fitted, and the rule refuses a row whose named partner is not the same model input."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import fidelity, fit, runs  # noqa: E402

BASELINE, FINAL = "mcore-dsv3-gb200-256gpu-baseline", "mcore-dsv3-gb200-256gpu-final"


@pytest.fixture(scope="module")
def rows():
    return runs.load_runs()


def _pair(rows):
    return [copy.deepcopy(r) for r in rows if r["id"] in (BASELINE, FINAL)]


def test_the_dsv3_gb200_baseline_is_marked_and_is_one_model_input_with_its_final_row(rows):
    """The source's optimization-history table: 'Same parallel config baseline->final; gains from kernels,
    DeepEP/HybridEP, CUDA graphs, CPU-side work' (the rows' notes). Both rows express one (spec, plan)."""
    cases, _ = fit.prepare_cases(_pair(rows))
    by_id = {c.id: c for c in cases}
    assert by_id[BASELINE].baseline_of == FINAL and by_id[FINAL].baseline_of is None
    a = fit.assumptions_with({})
    assert fit.predict(by_id[BASELINE], a).step_time_s == fit.predict(by_id[FINAL], a).step_time_s
    # published: 494.46 vs 970.01 TFLOP/s per GPU, so the baseline's step is 1.96x the final's
    ratio = by_id[BASELINE].published_step_time_s / by_id[FINAL].published_step_time_s
    assert ratio == pytest.approx(970.01 / 494.46, rel=1e-6)


def test_a_software_baseline_is_scored_but_does_not_move_the_fit(rows):
    pytest.importorskip("scipy")
    cases, _ = fit.prepare_cases(_pair(rows))
    params = tuple(p for p in fit.PARAMS if p.name == "blackwell_fp8_matmul_ratio")
    both = fit.fit(cases, params=params, starts=1, max_nfev=30)
    final_only = fit.fit([c for c in cases if c.id == FINAL], params=params, starts=1, max_nfev=30)
    assert both.train_ids == [FINAL] and both.scored_only == [BASELINE]
    assert both.values == final_only.values
    # still scored: the in-sample records of fidelity.py carry the baseline row
    assert BASELINE in {r["id"] for r in fidelity.evaluate_cases(cases, fit.assumptions_with(both.values))}


def test_the_rule_refuses_a_partner_that_is_not_the_same_plan_or_not_there(rows):
    pair = _pair(rows)
    for r in pair:
        if r["id"] == FINAL:
            r["global_batch_size"] = 4096  # another input: the two rows would no longer be one prediction
    with pytest.raises(ValueError, match="not the same plan"):
        fit.prepare_cases(pair)
    alone = [r for r in _pair(rows) if r["id"] == BASELINE]
    with pytest.raises(ValueError, match="not an expressed row"):
        fit.prepare_cases(alone)
