"""The ledger's layer classes (costmodel/evaluation/ledger.py): where an MoE model's leading dense layers sit."""

from __future__ import annotations

from pathlib import Path

import yaml

from parplan.costmodel.evaluation.evaluate import evaluate
from parplan.costmodel.evaluation.ledger import interleaved_chunk_layers, layer_classes
from parplan.frameworks.loader import validate_spec

ROOT = Path(__file__).resolve().parents[3]
LAYOUT = "Et|(tt|)*30mL"  # Megatron's DeepSeek-V3 layout: 32 chunks, the first of 1 layer, thirty of 2, the last empty


def _deepseek(plan: dict):
    data = yaml.safe_load((ROOT / "examples" / "deepseek-v3-2048xh800.yaml").read_text())
    return validate_spec({**data, "plan": plan})


def test_dense_layers_follow_the_model_chunk_order():
    """PP8 x 4 chunks as "Et|(tt|)*30mL": model chunk 0 (stage 0, chunk 0) holds layer 0, model chunk 1 (stage 1,
    chunk 0) layers 1 and 2, so the 3 dense layers are 1 on stage 0 and 2 on stage 1; stage totals 7, 8 x 6, 6."""
    spec = _deepseek(dict(tp=2, pp=8, dp=128, ep=64, micro_batch_size=1, schedule="interleaved", vpp=4,
                          pipeline_layout=LAYOUT))
    chunks = [1] + [2] * 30 + [0]  # model-chunk order: chunk v of stage r at v·8 + r
    assert interleaved_chunk_layers(evaluate(spec).plan) == chunks
    assert layer_classes(spec, [7] + [8] * 6 + [6], chunks) == [(1, 6), (2, 6)] + [(0, 8)] * 5 + [(0, 6)]
    assert layer_classes(spec, [7] + [8] * 6 + [6]) == [(3, 4)] + [(0, 8)] * 6 + [(0, 6)]  # stage order
    stages = evaluate(spec).stages
    assert [(s.dense_layers, s.moe_layers) for s in stages[:2]] == [(1, 6), (2, 6)]


def test_equal_chunks_and_other_schedules():
    """Equal chunks (no layout): PP4 x 2 chunks of 2 layers each, 3 dense: 2 on stage 0, 1 on stage 1. 1F1B has no
    chunks: all 3 on stage 0."""
    spec = _deepseek(dict(tp=2, pp=4, dp=256, ep=64, micro_batch_size=1, schedule="interleaved", vpp=2))
    assert layer_classes(spec, [4, 4, 4, 4], [2] * 8) == [(2, 2), (1, 3), (0, 4), (0, 4)]
    one_f_one_b = spec.plan.model_copy(update={"schedule": "1f1b", "vpp": 1})
    assert interleaved_chunk_layers(one_f_one_b) is None
