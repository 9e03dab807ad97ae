"""What the MLPerf v5.1 NeMo runs do with precision, term by term: FP8 dot-product attention (Transformer Engine
fp8_dpa, FP8_DPA=True) runs the attention core ``fp8_attention_speedup`` times faster under FP8 training; FP8
parameter all-gather (FP8_PARAM_GATHER=True) moves 1 byte per weight; gradients are reduced in bf16
(grad_reduce_in_fp32=False); the rows that set a flag carry it to the cost model."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import fit, mlperf, row_mapping, runs  # noqa: E402
from parplan.costmodel.evaluation.choice_context import ChoiceContext  # noqa: E402
from parplan.costmodel.evaluation.gemm_rates import GemmRates  # noqa: E402
from parplan.costmodel.compute.architecture import Architecture  # noqa: E402
from parplan.costmodel.spec.assumptions import resolve_assumptions  # noqa: E402
from parplan.costmodel.evaluation.evaluate import plan_choice, resolve_plan  # noqa: E402
from parplan.costmodel.spec.hardware import resolve_gpu  # noqa: E402

MLPERF_DATA = ROOT / "benchmarks" / "data" / "mlperf-v5.1.yaml"


def _attn_s(precision: str, **knobs) -> float:
    """The attention core's time per micro-batch of the Oracle B200 Llama 3.1 8B MLPerf row (TP 1, mb 2, 8K)."""
    row = next(r for r in runs.load_runs(MLPERF_DATA) if r["id"] == "mlperf51-llama31-8b-oracle-1xbm-gpu-b200-8")
    ex = row_mapping.express(row)
    spec = ex.spec.model_copy(update={"training": ex.spec.training.model_copy(update={"precision": precision})})
    plan = resolve_plan(spec, ex.plan)
    a = resolve_assumptions(None).model_copy(update=knobs)
    ctx = ChoiceContext.of(spec, plan_choice(plan), resolve_gpu(spec.cluster), a, Architecture(spec.model), 8,
                           plan.zero_stage)
    return GemmRates.of(ctx).attn_core_s


def test_fp8_attention_divides_the_attention_core_by_the_speedup():
    bf16_attn = _attn_s("fp8")
    assert _attn_s("fp8", fp8_attention=True, fp8_attention_speedup=1.6) == pytest.approx(bf16_attn / 1.6)
    assert _attn_s("fp8", fp8_attention=True, fp8_attention_speedup=1.0) == pytest.approx(bf16_attn)


def test_fp8_attention_does_nothing_under_bf16_training():
    assert _attn_s("bf16", fp8_attention=True) == pytest.approx(_attn_s("bf16"))


def test_default_is_bf16_attention_and_the_speedup_is_fitted_within_its_bounds():
    a = resolve_assumptions(None)
    assert a.fp8_attention is False
    p = next(p for p in fit.PARAMS if p.name == "fp8_attention_speedup")
    assert p.lo <= a.fp8_attention_speedup <= p.hi and "fp8_attention_speedup" in fit.PRIORS


def test_mlperf_rows_with_fp8_dpa_map_to_the_override():
    rows = runs.load_runs(MLPERF_DATA)
    flagged = [r for r in rows if r.get("fp8_attention")]
    assert flagged, "the MLPerf v5.1 data has rows with FP8_DPA=True (Oracle, Supermicro, HPE 8B configs)"
    for r in flagged:
        assert r["precision"] == "fp8" and "FP8_DPA=True" in r["notes"]
        if not r.get("not_expressible"):
            assert row_mapping.express(r).overrides.get("fp8_attention") is True, r["id"]
    plain = next(r for r in rows if not r.get("fp8_attention") and not r.get("not_expressible"))
    assert "fp8_attention" not in row_mapping.express(plain).overrides


def test_reader_reads_the_flag(tmp_path):
    env = {"FP8": "True", "FP8_DPA": "True"}
    assert mlperf._flag(env, "FP8_DPA") and mlperf._flag(env, "FP8")


def test_mlperf_rows_are_their_own_source_in_the_fit():
    cases, _ = fit.prepare_cases(fit.fit_rows())
    sources = {c.source for c in cases}
    assert "MLPerf Training v5.1" in sources and "other" not in sources
    ml = [c for c in cases if c.source == "MLPerf Training v5.1"]
    assert len(ml) >= 14 and {c.generation for c in ml} >= {"hopper", "blackwell"}
    assert not any(c.row.get("not_expressible") for c in ml)


def test_param_gather_bytes_scales_the_weight_all_gather_only():
    from parplan.costmodel.communication.data_parallel import DataParallel  # noqa: F401  (the term lives there)
    row = next(r for r in runs.load_runs(MLPERF_DATA) if r["id"] == "mlperf51-llama31-8b-verda-b200-8x8-ngc25-09")
    ex = row_mapping.express(row)
    plan = resolve_plan(ex.spec, ex.plan)

    def parts(**knobs):
        a = resolve_assumptions(None).model_copy(update=knobs)
        ctx = ChoiceContext.of(ex.spec, plan_choice(plan), resolve_gpu(ex.spec.cluster), a, Architecture(ex.spec.model),
                               8, plan.zero_stage)
        return ctx.dp.dp_comm_per_param(ctx.comm.dense_group)

    g2, w2 = parts(param_gather_bytes=2.0)
    g1, w1 = parts(param_gather_bytes=1.0)
    assert w1 == pytest.approx(w2 / 2) and g1 == pytest.approx(g2) and w2 > 0
    assert parts() == pytest.approx(parts(param_gather_bytes=2.0))  # None: weight_bytes (2)


def test_mlperf_rows_reduce_in_bf16_and_gather_fp8_where_configured():
    rows = [r for r in runs.load_runs(MLPERF_DATA) if not r.get("not_expressible")]
    for r in rows:
        ov = row_mapping.express(r).overrides
        assert ov["grad_reduce_bytes"] == 2.0, r["id"]
        assert ("param_gather_bytes" in ov) == bool(r.get("fp8_param_gather")), r["id"]
    assert any(r.get("fp8_param_gather") for r in rows)
