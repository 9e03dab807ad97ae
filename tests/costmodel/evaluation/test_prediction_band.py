"""Prediction bands (costmodel/evaluation/prediction_band.py), with numbers worked by hand on a band source of round
ratios, a calibrate profile's rows, and the memory band's margin on a real spec."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from parplan.costmodel.evaluation import prediction_band as pb
from parplan.costmodel.spec import calibration_band
from parplan.library.evaluation import evaluate_spec
from parplan.library.spec_io import spec_from_data as validate_spec

# a band source with round ratios: plans up to 20 % exposed within x0.8-1.25, the others x0.5-2, memory x0.8-1.25
SOURCE = pb.BandSource(calibration="default", data="hand", rows=20, memory_rows=3, quantiles=[0.1, 0.9],
                       step_time_bins=[pb.StepTimeBin(exposed_share_max=0.2, ratio_low=0.8, ratio_high=1.25, rows=10),
                                       pb.StepTimeBin(exposed_share_max=1.0, ratio_low=0.5, ratio_high=2.0, rows=10)],
                       peak_memory_ratio=[0.8, 1.25])


def _evaluation(step_s: float, compute_s: float, peak_gib: float = 40.0, recompute_s: float = 0.0):
    return SimpleNamespace(metrics=SimpleNamespace(step_time_s=step_s, peak_memory_gib=peak_gib,
                                                   breakdown_s={"compute": compute_s, "recompute": recompute_s,
                                                                "tp": step_s - compute_s - recompute_s}))


def test_exposed_share_is_what_compute_and_recompute_leave():
    assert pb.exposed_share(_evaluation(10.0, 6.0, recompute_s=2.0).metrics) == pytest.approx(0.2)
    assert pb.exposed_share(_evaluation(10.0, 12.0).metrics) == 0.0  # clipped


def test_band_is_the_prediction_over_the_ratio_quantiles_of_its_bin():
    # 10 s, 9 s of compute: share 0.1, first bin: measured in [10 / 1.25, 10 / 0.8] = [8, 12.5]; 40 GiB -> [32, 50]
    b = pb.plan_band(_evaluation(10.0, 9.0), SOURCE)
    assert (b.step_time_s_low, b.step_time_s_high) == pytest.approx((8.0, 12.5))
    assert (b.peak_memory_gib_low, b.peak_memory_gib_high) == pytest.approx((32.0, 50.0))
    # 10 s, 5 s of compute: share 0.5, second bin: [10 / 2, 10 / 0.5] = [5, 20]
    b = pb.plan_band(_evaluation(10.0, 5.0), SOURCE)
    assert (b.step_time_s_low, b.step_time_s_high) == pytest.approx((5.0, 20.0))


def test_ties_are_step_bands_that_overlap_the_first_plans():
    best = _evaluation(10.0, 9.0)  # [8, 12.5]
    touching = _evaluation(10.0 * 1.25, 12.0)  # share 0.04: [10, 15.625] overlaps
    apart = _evaluation(16.0, 15.0)  # share 0.0625: [12.8, 20] overlaps (12.8 <= 12.5? no)
    bands = pb.plan_bands([best, touching, apart], SOURCE)
    assert [b.ties_best for b in bands] == [True, True, False]
    edge = pb.PlanBand(step_time_s_low=12.5, step_time_s_high=13.0, peak_memory_gib_low=0, peak_memory_gib_high=0)
    assert pb.overlaps(edge, bands[0])  # sharing the end point is a tie


def test_rank_by_upper_puts_the_better_known_plan_first():
    # A: 10 s but half exposed: upper 20 s; B: 12 s, 10 % exposed: upper 12 / 0.8 = 15 s
    a, b = _evaluation(10.0, 5.0), _evaluation(12.0, 10.8)
    assert pb.upper_first([a, b], SOURCE) == [b, a]
    assert pb.upper_first([a, b], None) == [a, b]


def test_profile_band_from_its_left_out_rows():
    # left out -10, 0, 10, 20, 30 %: ratios 0.9-1.3; numpy's linear quantiles at 0.1 and 0.9: positions 0.4 and 3.6
    # -> 0.9 + 0.4 x 0.1 = 0.94 and 1.2 + 0.6 x 0.1 = 1.26; memory 9/10, 10/10, 11/10: positions 0.2, 1.8 -> 0.92, 1.08
    rows = [{"row": f"r{i}", "kind": "step time", "before_pct": 0.0, "after_pct": 0.0, "left_out_pct": e}
            for i, e in enumerate((-10.0, 0.0, 10.0, 20.0, 30.0))]
    rows.append({"row": "gemm", "kind": "gemm", "before_pct": 50.0, "after_pct": 50.0, "left_out_pct": 50.0})
    memory = [{"row": f"r{i}", "measured_gib": 10.0, "predicted_gib": p} for i, p in enumerate((9.0, 10.0, 11.0))]
    source = pb.profile_source({"created": "2026-12-07T00:00Z", "sources": [{"file": "runs.yaml"}],
                                "fit": {"rows": rows, "memory": memory}})
    assert source.calibration == "profile" and source.rows == 5 and source.memory_rows == 3
    (only,) = source.step_time_bins
    assert (only.ratio_low, only.ratio_high) == pytest.approx((0.94, 1.26))
    assert source.peak_memory_ratio == pytest.approx([0.92, 1.08])


def test_profile_without_step_rows_keeps_the_default_band():
    source = pb.profile_source({"fit": {"rows": [{"row": "gemm", "kind": "gemm", "after_pct": 5.0}]}})
    assert source.calibration == "default" and source.step_time_bins == pb.default_source().step_time_bins
    assert source.rows == calibration_band.ROWS


def test_memory_band_margin_is_what_the_upper_end_needs():
    # usable 80 GiB, low memory ratio 0.8: the upper end peak / 0.8 fits when peak <= 64, a margin of 16 GiB
    assert pb.memory_band_margin_gib(80.0, SOURCE) == pytest.approx(16.0)
    never_under = SOURCE.model_copy(update={"peak_memory_ratio": [1.05, 1.2]})
    assert pb.memory_band_margin_gib(80.0, never_under) == 0.0


SPEC = {"model": {"preset": "llama3-8b"}, "training": {"seq_len": 8192, "global_batch_size": 64, "precision": "bf16"},
        "cluster": {"gpu": "H100-SXM-80GB", "num_gpus": 8}, "plan": {"tp": 1, "pp": 1, "dp": 8}}


def test_with_memory_band_sets_the_margin_unless_one_is_set():
    off = validate_spec({**SPEC, "search": {"memory_band": False}})
    usable = evaluate_spec(off).metrics.usable_memory_gib  # no margin: the GPU's usable memory
    r_lo = calibration_band.PEAK_MEMORY_RATIO[0]
    banded = pb.with_memory_band(validate_spec(SPEC))  # on by default
    assert banded.search.memory_margin_gib == pytest.approx(math.ceil(usable * (1 - r_lo) * 100) / 100)
    assert evaluate_spec(validate_spec(SPEC)).metrics.usable_memory_gib == pytest.approx(
        usable - banded.search.memory_margin_gib)  # evaluate judges the fit as optimize does
    assert pb.with_memory_band(off).search.memory_margin_gib == 0.0
    own = validate_spec({**SPEC, "search": {"memory_margin_gib": 3.0}})
    assert pb.with_memory_band(own).search.memory_margin_gib == 3.0  # the user's margin wins
    textbook = validate_spec({**SPEC, "assumptions": {"preset": "textbook"}})
    assert pb.with_memory_band(textbook).search.memory_margin_gib == 0.0  # seed 003's convention: no band


def test_a_command_line_margin_replaces_the_band_even_at_zero():
    from parplan.client.cli_spec import with_memory_margin

    zero = with_memory_margin(validate_spec(SPEC), 0.0)
    assert not zero.search.memory_band and pb.with_memory_band(zero).search.memory_margin_gib == 0.0


def test_a_spec_with_a_profile_has_the_profiles_band():
    profile = {"kind": "parplan-profile", "version": 1, "created": "2026-12-07T00:00Z", "gpu": "H100-SXM-80GB",
               "assumptions": {"matmul_efficiency_hopper": 0.7}, "sources": [{"file": "a.log"}],
               "fit": {"rows": [{"row": "a", "kind": "step time", "after_pct": -5.0},
                                {"row": "b", "kind": "step time", "after_pct": 5.0}]}}
    spec = validate_spec({**SPEC, "profile": profile, "search": {"rank_by": "upper"}})
    source = pb.band_source(spec)
    # no left-out errors: the in-sample ones, ratios 0.95 and 1.05 -> quantiles 0.95 + 0.1 x 0.1, 0.95 + 0.9 x 0.1
    assert source.calibration == "profile" and source.rank_by == "upper" and "after_pct" in source.data
    assert (source.step_time_bins[0].ratio_low, source.step_time_bins[0].ratio_high) == pytest.approx((0.96, 1.04))
    assert pb.band_source(validate_spec(SPEC)).calibration == "default"
