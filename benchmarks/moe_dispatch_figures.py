"""Figures of issue 19 items 3-7 (all-to-all by dispatcher, BF16 head/router, DeepSeek-V3 preset): prints them.

    python benchmarks/moe_dispatch_figures.py

Evaluations only (no solve, no fit): DeepSeek-V3's published plan (TP1 PP16 EP64 DP128, DualPipe, FP8, selective,
stage_layers [3, 4 x 14, 2]) from its config.json and from examples/deepseek-v3-2048xh800.yaml, and DeepSeek-V3 on
256 B200 with EP 32 over 4 nodes (PP8 1F1B, the EP shape of issue 19's Megatron-Bridge run) under each dispatcher
with and without an unbinding max_nodes_per_token 8.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from parplan.library.huggingface import model_from_hf_config, read_hf_config
from parplan.costmodel.spec.assumptions import resolve_assumptions
from parplan.costmodel.evaluation.choice import choice_costs, nvlink_domain_size
from parplan.costmodel.communication.comm import Comm
from parplan.costmodel.evaluation.evaluate import evaluate, resolve_plan
from parplan.costmodel.spec.hardware import resolve_gpu
from parplan.costmodel.spec.spec import PlanSpec, Spec
from parplan.frameworks.loader import validate_spec

ROOT = Path(__file__).resolve().parent.parent
PUBLISHED = dict(tp=1, pp=16, ep=64, micro_batch_size=1, schedule="dualpipe", recompute="selective", zero_stage=1,
                 stage_layers=[3] + [4] * 14 + [2])


def _line(label: str, spec: Spec, ps: PlanSpec) -> None:
    ev = evaluate(spec, ps)
    c, gpu, a = resolve_plan(spec, ps).to_choice(), resolve_gpu(spec.cluster), resolve_assumptions(spec.assumptions)
    costs = choice_costs(spec, c, gpu, a)
    moe = costs.moe
    tokens_h = c.micro_batch_size * spec.training.seq_len // c.cp // c.tp * spec.model.hidden_size
    a2a = 2 * Comm.of(c, gpu, a, nvlink_domain_size(spec, gpu)).all_to_all_s(tokens_h, spec.model.moe)
    print(f"{label}: fits {ev.metrics.fits}, peak {ev.metrics.peak_memory_gib:.1f} GiB, step {ev.metrics.step_time_s:.3f} s, "
          f"{ev.metrics.tokens_per_s / spec.cluster.num_gpus:,.0f} tokens/s/GPU, MoE layer per micro-batch: compute "
          f"{moe.compute_s * 1e3:.2f} ms, all-to-all fwd+bwd {a2a * 1e3:.2f} ms (ratio {a2a / moe.compute_s:.2f}), "
          f"exposed {moe.ep_s * 1e3:.2f} ms")


def main() -> int:
    hf = model_from_hf_config(read_hf_config(str(ROOT / "tests" / "data" / "hf" / "deepseek-v3.json"))).fields
    base = dict(training=dict(seq_len=4096, global_batch_size=15360, precision="fp8"),
                cluster=dict(gpu="H800", num_gpus=2048, gpus_per_node=8), framework="any")
    _line("DeepSeek-V3 config.json, default knobs", validate_spec(dict(model=hf, **base)), PlanSpec(**PUBLISHED))
    example = validate_spec({**yaml.safe_load((ROOT / "examples" / "deepseek-v3-2048xh800.yaml").read_text()),
                                   "framework": "any"})
    _line("examples/deepseek-v3-2048xh800.yaml (flex, 4 nodes)", example, PlanSpec(**PUBLISHED))
    model = example.model.model_dump(exclude_none=True)
    for dispatcher in ("alltoall", "flex"):
        for limit in (None, 8):
            moe = {**model["moe"], "dispatcher": dispatcher, "max_nodes_per_token": limit}
            spec = validate_spec(dict(model={**model, "moe": moe},
                                            training=dict(seq_len=4096, global_batch_size=2048, precision="fp8"),
                                            cluster=dict(gpu="B200", num_gpus=256, gpus_per_node=8), framework="any"))
            _line(f"256 B200 EP32/4 nodes, {dispatcher}, max_nodes_per_token {limit}", spec,
                  PlanSpec(tp=1, pp=8, ep=32, micro_batch_size=1, schedule="1f1b", zero_stage=1,
                           stage_layers=[8] * 7 + [5],
                           recompute="selective"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
