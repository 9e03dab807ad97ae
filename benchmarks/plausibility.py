"""Every model preset's optimum on every catalog GPU against the best published MFU (issue 38 item 1, the class).

    python benchmarks/plausibility.py [--only TEXT] [--quick] [--seq-len 8192] [--gpus 64] [--out FILE]

For each model preset (``solver-cli presets``), catalog GPU and precision with a peak: the proven optimum (top 1,
default assumptions and framework, ``--seq-len`` tokens, global batch 512 sequences, ``--gpus`` GPUs) and its MFU
against the ceiling of benchmarks/mfu_ceilings.py (the best published dense MFU of the GPU's generation in that
precision) plus 5 points. A line per case: MFU, ceiling, the margin, the plan; "nothing fits" where no plan fits.
The summary counts the cases over the ceiling by GPU and precision. A report, not a test: the test of the issue's
example plan under every assumption preset is tests/costmodel/evaluation/test_evaluate_mfu_ceiling.py.
``--quick``: one preset (llama3-8b), the CI smoke.
"""

from __future__ import annotations

import argparse
import collections
import datetime as _dt
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.mfu_ceilings import MARGIN_POINTS, ceilings  # noqa: E402
from parplan import optimize  # noqa: E402
from parplan.library.presets import load_presets  # noqa: E402

TIME_LIMIT_S = 10.0
GLOBAL_BATCH = 512


def plan_text(p) -> str:
    """A plan's degrees, micro-batching, schedule and recompute on one line."""
    vpp = f" vpp{p.vpp}" if p.vpp and p.vpp > 1 else ""
    return (f"tp{p.tp} cp{p.cp} pp{p.pp} dp{p.dp} ep{p.ep} mb{p.micro_batch_size}x{p.num_microbatches} "
            f"{p.schedule}{vpp} rc-{p.recompute} z{p.zero_stage}")


def case(model: str, gpu: str, precision: str, seq_len: int, gpus: int) -> dict:
    """The optimum of one preset on one GPU and precision, and its MFU (percent), or None where nothing fits."""
    spec = {"model": {"preset": model},
            "training": {"seq_len": seq_len, "global_batch_size": GLOBAL_BATCH, "precision": precision},
            "cluster": {"gpu": gpu, "num_gpus": gpus}}
    t0 = time.perf_counter()
    r = optimize(spec, time_limit_s=TIME_LIMIT_S)
    best = r.plans[0] if r.plans else None
    return {"model": model, "gpu": gpu, "precision": precision, "status": r.status,
            "mfu": None if best is None else 100.0 * best.metrics.mfu, "plan": "" if best is None else plan_text(best.plan),
            "seconds": time.perf_counter() - t0}


def report(rows: list[dict]) -> list[str]:
    """The table and the summary (module docstring)."""
    ceil = ceilings()
    lines = [f"{'preset':22} {'gpu':15} {'prec':4} {'MFU %':>6} {'ceiling':>7} {'over':>6}  plan"]
    over = collections.Counter()
    for r in rows:
        c, _ = ceil[(r["gpu"], r["precision"])]
        if r["mfu"] is None:
            lines.append(f"{r['model']:22} {r['gpu']:15} {r['precision']:4} {'-':>6} {c:7.1f} {'':>6}  nothing fits ({r['status']})")
            continue
        margin = r["mfu"] - c - MARGIN_POINTS
        flag = f"{margin:+6.1f}" if margin > 0 else ""
        if margin > 0:
            over[(r["gpu"], r["precision"])] += 1
        lines.append(f"{r['model']:22} {r['gpu']:15} {r['precision']:4} {r['mfu']:6.1f} {c:7.1f} {flag:>6}  {r['plan']}")
    solved = sum(r["mfu"] is not None for r in rows)
    lines.append("")
    lines.append(f"{len(rows)} cases, {solved} with a plan that fits; over the ceiling + {MARGIN_POINTS:g} points: "
                 f"{sum(over.values())}")
    for (gpu, precision), n in sorted(over.items(), key=lambda kv: -kv[1]):
        c, where = ceil[(gpu, precision)]
        lines.append(f"  {gpu:15} {precision:4} {n:3} over (ceiling {c:.1f} %: {where})")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", default="", help="the presets whose name contains this text")
    ap.add_argument("--quick", action="store_true", help="llama3-8b only (the CI smoke)")
    ap.add_argument("--seq-len", type=int, default=8192)
    ap.add_argument("--gpus", type=int, default=64)
    ap.add_argument("--out", type=Path, help="also write the report to this file")
    args = ap.parse_args(argv)
    models = ["llama3-8b"] if args.quick else [m for m in load_presets() if args.only in m]
    rows = []
    for model in models:
        for gpu, precision in sorted(ceilings()):
            rows.append(case(model, gpu, precision, args.seq_len, args.gpus))
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    head = [f"# python benchmarks/plausibility.py{' --quick' if args.quick else ''} "
            f"(seq {args.seq_len}, {args.gpus} GPUs, global batch {GLOBAL_BATCH}; commit {commit}, "
            f"{_dt.datetime.now(_dt.timezone.utc):%Y-%m-%dT%H:%MZ}; {sum(r['seconds'] for r in rows):.0f} s of solves)"]
    text = "\n".join(head + report(rows)) + "\n"
    print(text, end="")
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
