"""Plausibility (issue 38 item 1): no preset x GPU prediction exceeds the best published MFU for its GPU and
precision by more than 5 points.

The table of best published figures is the one the calibration is fitted on: benchmarks/data/published-runs.yaml
and benchmarks/data/mlperf-v5.1.yaml as benchmarks/fit.py reads them (each row cites its source; e.g. Megatron-LM
SC'21, Narayanan et al. 2021, 52 % on A100; llm-foundry's A100-80GB throughput table 56-60 %), the largest
published MFU per (GPU, precision). The plan is the issue's example: Llama-3 8B on 64 GPUs at 8K sequences, TP2
DP32, micro-batch 2, no recompute, BF16, evaluated under every preset on every catalog GPU with a published row;
where it does not fit the GPU's memory, with every layer recomputed, the plan that runs there (a prediction of a plan
that cannot run is none anyone launches: A100-40GB needs 63.3 GiB without recompute; with it 49.0 % MFU under the
default preset against the Ampere ceiling of 64.2 %).

The ceilings are benchmarks/mfu_ceilings.py's: dense rows only, a (GPU, precision) taking the best row of its
generation in that precision, its own included (an MFU is a share of the die's own peak), else the best over every GPU
in that precision (MI300X, Blackwell BF16). A100-80GB under the default preset is predicted at 66.7 % (the issue's
figure) against llm-foundry's MPT-7B row at 64.2 % (the issue compared it with 56-60 %): it passes by 2.5 points.
Today's violations are strict xfails (KNOWN_OVER), each with its reason. Every model preset's optimum on every catalog
GPU is benchmarks/plausibility.py's (a report: a solve per preset, GPU and precision).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.mfu_ceilings import MARGIN_POINTS, ceilings  # noqa: E402
from parplan import evaluate  # noqa: E402
from parplan.costmodel.spec.assumptions import PRESETS  # noqa: E402

PLAN = {"tp": 2, "pp": 1, "micro_batch_size": 2, "recompute": "none", "zero_stage": 1, "sequence_parallel": True}
MODEL = {"name": "llama3-8b", "num_layers": 32, "hidden_size": 4096, "ffn_hidden_size": 14336,
         "num_attention_heads": 32, "num_kv_heads": 8, "vocab_size": 128256, "gated_mlp": True, "tie_embeddings": False}
BEST = ceilings()


# today's violations, each a strict xfail (it fails the day the prediction comes within the margin: drop it then)
KNOWN_OVER: dict[tuple[str, str, str], str] = {
    ("H100-SXM-80GB", "bf16", "textbook"): "seed 003's flat 60 % GEMM efficiency",
    ("H200-SXM-141GB", "bf16", "textbook"): "seed 003's flat 60 % GEMM efficiency (against Hopper's best BF16 row)",
}


@pytest.mark.parametrize("preset", sorted(PRESETS))
@pytest.mark.parametrize("gpu,precision", sorted(BEST))
def test_prediction_within_five_points_of_best_published(gpu, precision, preset, request):
    reason = KNOWN_OVER.get((gpu, precision, preset))
    if reason:
        request.applymarker(pytest.mark.xfail(strict=True, reason=reason))
    spec = {"model": MODEL, "training": {"seq_len": 8192, "global_batch_size": 512, "precision": precision},
            "cluster": {"gpu": gpu, "num_gpus": 64, "gpus_per_node": 8}, "plan": PLAN,
            "assumptions": {"preset": preset}}
    e = evaluate(spec)
    if not e.feasible:  # the plan that runs there: every layer recomputed (A100-40GB: 63.3 GiB without)
        spec["plan"] = dict(PLAN, recompute="full")
        e = evaluate(spec)
        assert e.feasible, f"{gpu} {precision} {preset}: the plan does not fit even with full recompute"
    mfu = 100.0 * e.metrics.mfu
    ceiling, source = BEST[(gpu, precision)]
    assert mfu <= ceiling + MARGIN_POINTS, (
        f"{gpu} {precision} {preset}: predicted {mfu:.1f} % MFU, best published {ceiling:.1f} % ({source})")
