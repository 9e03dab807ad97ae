"""Fidelity guard: the cost model against the published runs, with the fitted defaults.

* The in-sample median |MFU error| of the default preset must not get worse by more than 0.5 points than
  the figure recorded in ``benchmarks/results/fidelity.json`` (rerun ``python benchmarks/fit.py`` and
  ``python benchmarks/fidelity.py`` after a deliberate change, and update benchmarks/README.md).
* Every fitted value lies inside its physical bounds; the default preset reads them; textbook does not.
* The FLOP accounting reproduces the sources' closed forms (Narayanan 2021, Korthikanti 2022).

Runs in a few seconds (no refit, except one tiny fit when scipy is installed).
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import fidelity, fit, runs  # noqa: E402
from parplan.costmodel.spec import calibration  # noqa: E402
from parplan.costmodel.compute import efficiency  # noqa: E402
from parplan.costmodel.spec.assumptions import resolve_assumptions  # noqa: E402
from parplan.costmodel.evaluation.evaluate import resolve_plan  # noqa: E402
from parplan.costmodel.spec.hardware import lookup_gpu  # noqa: E402

TOLERANCE_POINTS = 0.5
RECORD = ROOT / "benchmarks" / "results" / "fidelity.json"


@pytest.fixture(scope="module")
def cases():
    cs, skipped = fit.prepare_cases(fit.fit_rows())  # published-runs.yaml and the MLPerf v5.1 rows
    return cs


@pytest.fixture(scope="module")
def records(cases):
    return fidelity.evaluate_cases(cases)


@pytest.fixture(scope="module")
def recorded():
    return json.loads(RECORD.read_text())


def _median_abs(values):
    return statistics.median(abs(v) for v in values)


# ----------------------------------------------------------------------------------------- the guard
def test_in_sample_median_error_not_worse_than_recorded(records, recorded):
    now = _median_abs([r["error_points"] for r in records])
    was = recorded["summary"]["in_sample"]["median"]
    assert now <= was + TOLERANCE_POINTS, (
        f"in-sample median |MFU error| is {now:.2f} points, {now - was:+.2f} against the recorded {was:.2f}: a cost-"
        "model change made the fit to the published runs worse. If deliberate, refit (python benchmarks/fit.py), "
        "rerun python benchmarks/fidelity.py and update benchmarks/README.md")


def test_memory_error_not_worse_than_recorded(records, recorded):
    """Peak memory where published (torchtitan): the median relative error may not grow by > 2 points."""
    mem = [r for r in records if r["published_memory_gib"] is not None]
    assert len(mem) == recorded["summary"]["memory"]["rows"] >= 18
    now = 100 * statistics.median(abs(r["predicted_memory_gib"] / r["published_memory_gib"] - 1) for r in mem)
    was = recorded["summary"]["memory"]["median_abs_error_pct"]
    assert now <= was + 2.0, f"median |memory error| {now:.1f} % against the recorded {was:.1f} %"


def test_every_expressible_row_is_compared(cases, recorded):
    assert len(cases) >= 80
    assert {c.id for c in cases} == {r["id"] for r in recorded["rows"]}
    assert set(recorded["loso_errors"]) == {c.id for c in cases}, "LOSO figures must cover every row"


def test_recorded_in_sample_matches_the_committed_calibration(records, recorded):
    """fidelity.json was produced with the calibration that is committed (no stale record)."""
    now = _median_abs([r["error_points"] for r in records])
    assert now == pytest.approx(recorded["summary"]["in_sample"]["median"], abs=0.05)


def test_readme_states_the_measured_errors(recorded):
    text = (ROOT / "benchmarks" / "README.md").read_text()
    s = recorded["summary"]
    for label, key in (("in-sample", "in_sample"), ("leave-one-source-out", "loso")):
        m = re.search(label + r"[^|\n]*\|\s*([0-9.]+)\s*\|\s*([0-9.]+)", text)
        assert m, f"benchmarks/README.md must state the {label} median and p90"
        assert float(m.group(1)) == pytest.approx(s[key]["median"], abs=0.06), label
        assert float(m.group(2)) == pytest.approx(s[key]["p90"], abs=0.06), label
    assert "python benchmarks/fidelity.py" in text and "python benchmarks/fit.py" in text


# ----------------------------------------------------------------------------------------- calibration
def test_fitted_values_are_physically_sane():
    for name, value in calibration.FITTED.items():
        lo, hi = calibration.BOUNDS[name]
        assert lo <= value <= hi, name
        if "efficiency" in name or "overlap" in name:
            assert 0.0 <= value <= 1.0, name
        assert value >= 0, name
    for name, value in calibration.FIXED.items():  # Blackwell: the Hopper value x its fitted ratio
        hopper, ratio = fit.RATIOS[name]
        assert value == pytest.approx(min(1.0, calibration.FITTED[hopper] * calibration.RATIOS[ratio]), abs=1e-4), name
    for name, value in calibration.RATIOS.items():
        lo, hi = calibration.BOUNDS[name]
        assert lo <= value <= hi, name


def test_fit_parameters_and_calibration_agree():
    assert {p.name for p in fit.PARAMS} == set(calibration.FITTED) | set(calibration.RATIOS)
    assert set(calibration.RATIOS) == fit.RATIO_PARAMS and set(calibration.FIXED) == set(fit.RATIOS)
    for name in fit.RATIO_PARAMS:  # every Blackwell ratio carries a prior, so a held-out Blackwell source keeps a value
        assert name in fit.PRIORS, name
    for p in fit.PARAMS:
        assert calibration.BOUNDS[p.name] == (p.lo, p.hi)
        if "efficiency" in p.name or "overlap" in p.name:
            assert 0 <= p.lo <= p.hi <= 1, p.name


def test_default_preset_reads_the_calibration_and_ceilings_do_not_bind():
    a = resolve_assumptions(None)
    for name, value in {**calibration.FIXED, **calibration.FITTED}.items():
        assert getattr(a, name) == value, name
    # every per-generation knob, fitted or measured (cdna3), is at or under its ceiling: the bounds use the ceilings
    for stem, ceiling in (("matmul_efficiency", a.matmul_efficiency), ("fp8_matmul_efficiency", a.fp8_matmul_efficiency),
                          ("attention_efficiency", a.attention_efficiency)):
        values = [getattr(a, f"{stem}_{g}", None) for g in efficiency.GENERATIONS]
        assert all(v is None or v <= ceiling for v in values), stem
        assert ceiling == max(v for v in values if v is not None), stem  # a fitted value, so it never binds


def test_textbook_keeps_flat_efficiency():
    t = resolve_assumptions({"preset": "textbook"})
    h100 = lookup_gpu("H100-SXM-80GB")
    assert t.matmul_shape_penalty == 0 and t.attention_seq_penalty == 0 and t.activation_traffic_passes == 0
    assert efficiency.max_linear_efficiency(t, h100, "bf16") == 0.6
    assert efficiency.max_linear_efficiency(t, h100, "fp8") == 0.6
    assert efficiency.attention_efficiency(t, h100, 4096) is None
    assert not t.hierarchical_collectives


# ----------------------------------------------------------------------------------------- efficiency
def test_shape_efficiency_drops_as_tp_cp_and_micro_batches_shrink_the_gemms():
    a = resolve_assumptions(None)
    h100 = lookup_gpu("H100-SXM-80GB")
    h, f = 8192, 28672

    def spf(mbs, seq, cp, tp):
        m = mbs * seq / cp
        return efficiency.linear_seconds_per_flop(a, h100, "bf16", 989e12, [(1.0, m, h, f / tp), (1.0, m, f / tp, h)])

    base = spf(1, 8192, 1, 1)
    assert spf(1, 8192, 1, 8) > base  # TP shrinks N and K
    assert spf(1, 8192, 4, 1) > base  # CP shrinks M
    assert spf(4, 8192, 1, 1) < base  # bigger micro-batches grow M
    assert 1 / (base * 989e12) <= a.matmul_efficiency_hopper
    # the ridge point: H200's faster HBM makes the same GEMM more efficient than on H100
    h200 = lookup_gpu("H200-SXM-141GB")
    assert efficiency.ridge_flops_per_byte(h200) < efficiency.ridge_flops_per_byte(h100)
    assert round(efficiency.ridge_flops_per_byte(h100)) == 295


def test_attention_efficiency_grows_with_sequence_per_cp_rank():
    a = resolve_assumptions(None)
    h100 = lookup_gpu("H100-SXM-80GB")
    e = [efficiency.attention_efficiency(a, h100, s) for s in (1024, 8192, 131072)]
    assert e[0] < e[1] < e[2] <= a.attention_efficiency_hopper


def test_flash2_kernels_have_their_own_hopper_efficiency():
    """attention_kernel = flash2 (PyTorch SDPA in 2024) reads attention_efficiency_flash2 on Hopper and
    Blackwell; on Ampere FlashAttention-2 is the fused kernel, so nothing changes there."""
    fused = resolve_assumptions(None)
    fa2 = resolve_assumptions({"attention_kernel": "flash2"})
    h100, a100 = lookup_gpu("H100-SXM-80GB"), lookup_gpu("A100-SXM-80GB")
    s = 8192
    penalty = 1 + fused.attention_seq_penalty / s
    assert efficiency.attention_efficiency(fused, h100, s) == pytest.approx(fused.attention_efficiency_hopper / penalty)
    assert efficiency.attention_efficiency(fa2, h100, s) == pytest.approx(fa2.attention_efficiency_flash2 / penalty)
    assert efficiency.attention_efficiency(fa2, a100, s) == efficiency.attention_efficiency(fused, a100, s)
    assert fa2.attention_efficiency_flash2 < fused.attention_efficiency_hopper  # the fit agrees with FA3's paper


# ----------------------------------------------------------------------------------------- FLOP accounting
def _row(rid):
    return next(r for r in runs.load_runs() if r["id"] == rid)


def _shape_and_flops(rid):
    """(B, s, l, h, V) of a row and its (model, hardware) FLOPs per step as ``runs`` counts them."""
    row = _row(rid)
    ex = runs.express(row)
    shape = (row["global_batch_size"], row["seq_len"], row["num_layers"], row["hidden_size"], ex.spec.model.vocab_size)
    return shape, runs.source_flops_per_step(ex.spec, resolve_plan(ex.spec, ex.plan))


def test_hardware_flops_match_narayanan_formula():
    """96·B·s·l·h²·(1 + s/6h + V/16lh) per step (Narayanan 2021 eq. 3) for a GPT row with full recompute."""
    (B, s, l, h, V), (_, f_hw) = _shape_and_flops("narayanan2021-t1-gpt-145.6b")
    assert f_hw == pytest.approx(96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h)), rel=1e-9)


def test_model_flops_match_korthikanti_formula():
    """72·B·s·l·h²·(1 + s/6h + V/12lh) (Korthikanti 2022 app. A): full s x s attention."""
    (B, s, l, h, V), (f_model, _) = _shape_and_flops("korthikanti2022-175b-sp-selective")
    assert f_model == pytest.approx(72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h)), rel=1e-9)


def test_published_mfu_is_the_rows_mfu_and_fp8_rows_use_the_fp8_peak(cases):
    by_id = {c.id: c for c in cases}
    c = by_id["korthikanti2022-175b-sp-selective"]
    assert c.published_mfu == pytest.approx(51.4)
    c = by_id["nemo2407-h100-fp8-llama2-7b-8gpu"]
    assert c.precision == "fp8"
    assert c.published_mfu == pytest.approx(780 / 1979 * 100, rel=1e-9)  # model TFLOP/s over the FP8 peak
    c = by_id["narayanan2021-t1-gpt-145.6b"]  # HFU 47 % -> MFU = 47 % x model / hardware FLOPs
    assert c.published_mfu == pytest.approx(47 * 3 / 4, rel=0.02)
    c = by_id["torchtitan-202412-t1-llama3-8b-8gpu-0"]  # 500 W part: slower clock, MFU against the SXM peak
    assert c.gpu.peak_bf16_tflops == pytest.approx(989 * (500 / 700) ** (1 / 3), abs=0.1)
    f_model, _ = runs.source_flops_per_step(c.spec, c.plan)
    assert c.mfu_scale == pytest.approx(100 * f_model / (8 * 989e12))


def test_row_technique_facts(cases):
    by_id = {c.id: c for c in cases}
    legacy = by_id["narayanan2021-t1-gpt-145.6b"].overrides
    assert legacy["tp_comm_overlap"] == 0 and legacy["dp_comm_overlap"] == 0 and legacy["flash_attention"] is False
    assert "dp_comm_overlap" not in by_id["narayanan2021-t1-gpt-1.7b"].overrides  # --DDP-impl torch overlaps
    assert "tp_comm_overlap" not in by_id["torchtitan-202412-t4-llama3-70b-256gpu-11"].overrides  # AsyncTP
    assert by_id["torchtitan-202412-t4-llama3-70b-256gpu-10"].overrides["tp_comm_overlap"] == 0
    assert by_id["torchtitan-202412-t4-llama3-70b-256gpu-10"].overrides["hbm_bandwidth_gbps"] == 2400
    # Megatron-Core r0.8.0 ran Transformer Engine < 2.0: the TP overlap's kernels held their SMs only while they ran
    assert by_id["mcore-readme2024-h100-gpt-70b"].overrides == {"tp_overlap_sm_margin": False}
    async_tp = by_id["torchtitan-202412-t4-llama3-70b-256gpu-11"].overrides  # AsyncTP: peer copies, no SM held
    assert async_tp["tp_overlap_comm_sms"] == 0 and async_tp["tp_overlap_rs_splits"] == 0
    zero3 = by_id["narayanan2021-t2-zero3-174.6b-768gpu"].overrides  # DeepSpeed ZeRO-3, early 2021
    assert zero3["zero3_collectives_per_layer"] == 36 and zero3["zero_microbatch_comm_overlap"] == 0
    assert zero3["zero3_unsharded_layers"] == pytest.approx(1e9 / 1.812e9, rel=1e-3)  # 12h² + 13h, h = 12288
    assert zero3["grad_reduce_bytes"] == 2  # DeepSpeed reduces fp16 gradients unless fp32_allreduce
    titan = by_id["torchtitan-202412-t1-llama3-8b-8gpu-0"].overrides
    assert titan["logits_bytes_per_element"] == 12 and titan["selective_recompute_policy"] == "alternate_matmuls"
    assert "selective_recompute_policy" not in by_id["torchtitan-202412-t2-llama3-8b-8gpu-3"].overrides  # full AC
    assert "zero3_collectives_per_layer" not in by_id["llmfoundry-mpt-70b-h100_80gb-64gpu-seq2048"].overrides
    assert by_id["llmfoundry-mpt-70b-h100_80gb-64gpu-seq2048"].overrides["attention_kernel"] == "flash2"
    assert "attention_kernel" not in by_id["llmfoundry-mpt-70b-a100_80gb-64gpu-seq2048"].overrides  # Ampere
    assert titan["attention_kernel"] == "flash2"
    assert "sequence_parallel_saves_gathered_inputs" not in titan and "pipeline_runtime" not in titan  # TP 1, PP 1
    titan_tp = by_id["torchtitan-202412-t4-llama3-70b-256gpu-10"].overrides  # FSDP 32 x TP 8, loss_parallel
    assert titan_tp["logits_bytes_per_element"] == 16 and titan_tp["sequence_parallel_saves_gathered_inputs"] is True
    titan_pp = by_id["torchtitan-202412-t5-llama31-405b-512gpu-12"].overrides
    assert titan_pp["pipeline_runtime"] == "torch"
    assert "pipeline_runtime" not in by_id["mcore-readme2024-h100-gpt-70b"].overrides  # Megatron's runtime


# ----------------------------------------------------------------------------------------- the fit machinery
def test_a_small_fit_recovers_its_own_values():
    """Fit two knobs on predictions made with known values: the fit returns them (scipy needed)."""
    pytest.importorskip("scipy")
    own, _ = fit.prepare_cases(runs.load_runs())
    sub = [c for c in own if c.source == "Korthikanti 2022"][:6]
    truth = {"matmul_efficiency_ampere": 0.7, "activation_traffic_passes": 3.0}
    a = fit.assumptions_with(truth)
    for c in sub:  # make the cases' published numbers those of the truth
        c.published_step_time_s = fit.predict(c, a).step_time_s
    params = tuple(p for p in fit.PARAMS if p.name in truth)
    res = fit.fit(sub, params=params, starts=1, max_nfev=50)
    for k, v in truth.items():
        assert res.values[k] == pytest.approx(v, rel=0.02), k


def test_a_knob_no_row_identifies_keeps_its_prior():
    """Korthikanti 2022 ran without FlashAttention, so its rows say nothing about the A100 attention-kernel
    efficiency: fitted on them alone, that knob stays at its prior (FlashAttention-2 paper), while the
    matmul efficiency moves to what the rows say."""
    pytest.importorskip("scipy")
    own, _ = fit.prepare_cases(runs.load_runs())
    sub = [c for c in own if c.source == "Korthikanti 2022"][:4]
    assert all(c.overrides.get("flash_attention") is False for c in sub)
    params = tuple(p for p in fit.PARAMS if p.name in ("matmul_efficiency_ampere", "attention_efficiency_ampere"))
    res = fit.fit(sub, params=params, starts=1, max_nfev=40)
    mean, sd, _ = fit.PRIORS["attention_efficiency_ampere"]
    assert res.values["attention_efficiency_ampere"] == pytest.approx(mean, abs=0.01 * sd)
    assert fit.PRIOR_POINTS > 0 and set(fit.PRIORS) <= {p.name for p in fit.PARAMS}


# ----------------------------------------------------------------------------------------- bootstrap intervals
def test_bootstrap_interval_properties():
    errors = [0.5, -1.0, 2.0, -3.5, 1.2, 0.1, -0.7, 4.0, 2.2, -1.9, 0.3, 6.5]
    sources = ["a"] * 4 + ["b"] * 4 + ["c"] * 4
    lo, hi = fidelity.bootstrap_interval(errors, 90)
    assert lo <= fit.percentile([abs(e) for e in errors], 90) <= hi
    assert fidelity.bootstrap_interval(errors, 90) == (lo, hi)  # fixed seed: reproducible
    assert fidelity.bootstrap_interval([2.0] * 9, 50) == (2.0, 2.0)  # no spread, no interval
    glo, ghi = fidelity.bootstrap_interval(errors, 90, by_group=sources)
    assert glo <= ghi and min(map(abs, errors)) <= glo and ghi <= max(map(abs, errors))


def test_head_dim_factor_by_hand():
    """Attention-core efficiency by head dim, ∝ d/(d + 64) (FlashAttention-3 Fig. 5; costmodel/compute/efficiency.py),
    relative to 128: d = 64: (64/128)/(128/192) = 0.5/0.6667 = 0.75; d = 96: (96/160)/0.6667 = 0.9; 128: 1; wider
    heads are not credited (256: 1.2 uncapped, 1 here)."""
    assert efficiency.head_dim_factor(64) == pytest.approx(0.75)
    assert efficiency.head_dim_factor(96) == pytest.approx(0.9)
    assert efficiency.head_dim_factor(128) == pytest.approx(1.0)
    assert efficiency.head_dim_factor(256) == 1.0
    a, h100 = resolve_assumptions(None), lookup_gpu("H100-SXM-80GB")
    assert efficiency.attention_efficiency(a, h100, 4096, 64) == pytest.approx(
        0.75 * efficiency.attention_efficiency(a, h100, 4096))
    assert efficiency.attention_efficiency(resolve_assumptions({"preset": "textbook"}), h100, 4096, 64) is None
