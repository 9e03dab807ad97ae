#!/usr/bin/env python3
"""DeepSeek-V3 on 2,048 H800 under Megatron-Core with Megatron's own DeepSeek-V3 pipeline layout, evaluated whole: a
hand-made cross-check of the search's uniform layouts (a few seconds).

    python benchmarks/moe_recipe_layouts.py [--out benchmarks/results/moe_recipe_layouts.txt]

Megatron-Core runs its EP all-to-all overlap (``--overlap-moe-expert-parallel-comm``) at pp > 1 only with virtual
stages, and DeepSeek-V3's 61 layers (3 dense first) need an uneven layout: Megatron's DeepSeek-V3 recipe writes
``--pipeline-model-parallel-layout "Et|(tt|)*30mL"`` (the embedding and one layer, thirty chunks of two, then MTP
and the loss: NVIDIA/Megatron-LM@d98e8a64 megatron/core/transformer/moe/README.md, its DeepSeek-V3 example), the
uniform layout the search enumerates for models with leading dense layers (solver/chunk_trims.py ``uniform_trims``)
at 32 chunks. Each row is ``solver-cli evaluate`` of ``examples/deepseek-v3-2048xh800.yaml`` with the plan given
whole: micro-batch 1, ZeRO-1, selective recompute, ETP 1, that layout (PP 8 x 4 chunks or PP 16 x 2), the overlap on
or off; the search's own optimum (``solver-cli optimize``) is at or below the best that fits.
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.report_text import emit  # noqa: E402

LAYOUT = "Et|(tt|)*30mL"
# (tp, cp, pp, vpp): the interleaved degrees whose micro-batch count (15,360 / dp) Megatron's interleaved schedule
# divides by pp, and the one the doc's 1F1B optimum uses (pp 16, dp 128: 120 micro-batches, not divisible by 16)
DEGREES = [(2, 1, 8, 4), (1, 2, 8, 4), (2, 1, 16, 2), (1, 1, 16, 2)]
EP = (16, 32, 64)


def rows() -> list[tuple]:
    from parplan import evaluate
    from parplan.frameworks.loader import validate_spec

    base = yaml.safe_load((ROOT / "examples" / "deepseek-v3-2048xh800.yaml").read_text())
    out = []
    for tp, cp, pp, vpp in DEGREES:
        dp = 2048 // (tp * cp * pp)
        for ep in EP:
            for overlap in (True, False):
                data = copy.deepcopy(base)
                data["plan"] = dict(tp=tp, cp=cp, pp=pp, dp=dp, ep=ep, etp=1, micro_batch_size=1,
                                    num_microbatches=15360 // dp, schedule="interleaved", vpp=vpp,
                                    recompute="selective", zero_stage=1, moe_a2a_overlap=overlap, pipeline_layout=LAYOUT)
                e = evaluate(validate_spec(data))
                peak = max(s.memory_gib for s in e.stages)
                why = "fits" if e.feasible else e.violations[0]
                out.append((e.metrics.step_time_s, tp, cp, pp, vpp, dp, ep, overlap, peak, why))
    return sorted(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "moe_recipe_layouts.txt")
    args = ap.parse_args(argv)
    lines = [f"# python benchmarks/moe_recipe_layouts.py; layout {LAYOUT!r}, Megatron-Core, memory band on", "",
             f"{'step s':>8}  {'tp':>2} {'cp':>2} {'pp':>2} {'vpp':>3} {'dp':>4} {'ep':>3}  {'overlap':<7} "
             f"{'peak GiB':>8}  verdict"]
    for step, tp, cp, pp, vpp, dp, ep, overlap, peak, why in rows():
        lines.append(f"{step:8.3f}  {tp:>2} {cp:>2} {pp:>2} {vpp:>3} {dp:>4} {ep:>3}  {str(overlap):<7} {peak:8.1f}  {why}")
    emit(lines, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
