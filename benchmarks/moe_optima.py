#!/usr/bin/env python3
"""The free optima of docs/moe.md's two MoE examples, as `solver-cli optimize` prints them (about 3 minutes).

    python benchmarks/moe_optima.py

* ``examples/mixtral-8x7b-64xh100.yaml``: Mixtral 8x7B on 64 H100, 4K sequences (the default framework,
  Megatron-Core, with the best plan on each other framework and on ``any``).
  Then the same without pipeline parallelism (TP1 PP1 EP8, micro-batch 1 pinned, the rest completed), and the
  research space's DualPipe plan with the split the solver returns and with the balanced split (evaluated).
* ``examples/deepseek-v3-2048xh800.yaml``: DeepSeek-V3 (MLA, MTP, FP8, the flex dispatcher, node-limited routing)
  on 2,048 H800, the same; then the research space (``framework: any``) on its own with its breakdown and top 3,
  and DeepSeek's published degrees (TP1 PP16 EP64 DualPipe) pinned in that space, the rest searched.

Deterministic mode (one worker, fixed seed), 100 s per solve. Writes ``benchmarks/results/moe_optima.txt``.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "parplan.client.cli"]


def run(args: list[str]) -> str:
    t0 = time.perf_counter()
    out = subprocess.run(CLI + args, cwd=ROOT, capture_output=True, text=True, check=False,
                         env={"COLUMNS": "120", "PATH": "/usr/bin:/bin"})
    took = time.perf_counter() - t0
    return f"$ solver-cli {' '.join(args)}   # {took:.0f} s, exit {out.returncode}\n{out.stdout}{out.stderr}"


def main() -> int:
    parts = [run(["optimize", "examples/mixtral-8x7b-64xh100.yaml", "--deterministic", "--time-limit", "100"]),
             run(["optimize", "examples/deepseek-v3-2048xh800.yaml", "--deterministic", "--time-limit", "100"])]
    mixtral = yaml.safe_load((ROOT / "examples" / "mixtral-8x7b-64xh100.yaml").read_text())
    data = yaml.safe_load((ROOT / "examples" / "deepseek-v3-2048xh800.yaml").read_text())
    with tempfile.TemporaryDirectory() as tmp:
        # Mixtral without pipeline parallelism (TP1 EP8 micro-batch 1 pinned, the rest completed): what PP 2 beats
        path = Path(tmp) / "mixtral-8x7b-64xh100-pp1.yaml"
        path.write_text(yaml.safe_dump({**mixtral, "plan": dict(tp=1, cp=1, pp=1, ep=8, micro_batch_size=1)},
                                       sort_keys=False))
        text = run(["evaluate", str(path), "--complete", "--deterministic", "--time-limit", "100"])
        parts.append(text.replace(str(path), "examples/mixtral-8x7b-64xh100.yaml + plan: {tp: 1, cp: 1, pp: 1, ep: 8, "
                                               "micro_batch_size: 1}"))
        # Mixtral's research-space DualPipe plan (the per-framework line "any") with the split the solver returns
        # and with the balanced one: the closed form ties them, the step order (metrics.step_order_step_s) does not
        for layers in ([7, 7, 7, 7, 1, 1, 1, 1], [4] * 8):
            plan = dict(tp=1, cp=1, pp=8, dp=8, ep=8, micro_batch_size=1, num_microbatches=64, schedule="dualpipe",
                        stage_layers=layers)
            path.write_text(yaml.safe_dump({**mixtral, "framework": "any", "plan": plan}, sort_keys=False))
            parts.append(run(["evaluate", str(path)]).replace(
                str(path), f"examples/mixtral-8x7b-64xh100.yaml + framework: any + plan: DualPipe TP1 PP8 DP8 EP8, "
                           f"stage_layers {layers}"))
        path = Path(tmp) / "deepseek-v3-2048xh800-any.yaml"
        path.write_text(yaml.safe_dump({**data, "framework": "any"}, sort_keys=False))
        text = run(["optimize", str(path), "--deterministic", "--time-limit", "100", "--no-per-framework", "--top", "3"])
        parts.append(text.replace(str(path), "examples/deepseek-v3-2048xh800.yaml + framework: any"))
        # DeepSeek's published degrees (TP1 PP16 EP64 DualPipe, selective recompute, micro-batch 1) under the same
        # spec and defaults, the rest (stage split, ZeRO, SP) completed: what the free optimum is compared with
        published = {**data, "framework": "any", "plan": dict(tp=1, cp=1, pp=16, ep=64, micro_batch_size=1,
                                                              schedule="dualpipe", recompute="selective")}
        path.write_text(yaml.safe_dump(published, sort_keys=False))
        # (the explanation's relaxed space of this spec needs more than the default 1,536 MiB memory budget)
        text = run(["optimize", str(path), "--deterministic", "--time-limit", "100", "--no-per-framework",
                    "--memory-budget-mib", "3072"])
        parts.append(text.replace(str(path), "examples/deepseek-v3-2048xh800.yaml + framework: any + DeepSeek's "
                                               "published degrees as a partial plan"))
    text = "# python benchmarks/moe_optima.py\n\n" + "\n\n".join(parts)
    print(text)
    out = ROOT / "benchmarks" / "results" / "moe_optima.txt"
    out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
