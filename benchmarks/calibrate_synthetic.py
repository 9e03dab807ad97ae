"""The synthetic calibration of docs/calibration.md and the README: four Megatron-format logs whose step times the
cost model makes with ``matmul_efficiency_hopper`` at 0.65 (tests/library/test_calibrate.py ``_synthetic_runs``),
``solver-cli calibrate`` on the first three, the fourth predicted with and without the profile.

    python benchmarks/calibrate_synthetic.py [--out benchmarks/results/calibrate_synthetic.txt]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def run() -> list[str]:
    from typer.testing import CliRunner

    from parplan.client.cli import app
    from parplan.library.evaluation import evaluate_spec
    from parplan.library.spec_io import spec_from_data
    from tests.library import test_calibrate as synthetic

    tmp = Path(tempfile.mkdtemp(prefix="parplan-calibrate-"))
    truth = synthetic._synthetic_runs(tmp, synthetic.PLANS)
    table = {"runs": [{"name": f"run{i}", "spec": str(synthetic.EXAMPLE), "plan": plan, "log": f"run{i}.log"}
                      for i, (plan, _) in enumerate(truth[:3])]}
    (tmp / "runs.yaml").write_text(yaml.safe_dump(table))
    result = CliRunner().invoke(app, ["calibrate", str(tmp / "runs.yaml"), "--out", str(tmp / "profile.yaml")])
    lines = [line for line in result.output.splitlines() if not line.startswith("wrote ")]  # no temporary path
    base = yaml.safe_load(synthetic.EXAMPLE.read_text())
    for name, (plan, step_s) in zip(("run0 (fitted)", "run1 (fitted)", "run2 (fitted)", "run3 (held out)"), truth):
        without = evaluate_spec(spec_from_data({**base, "plan": plan})).metrics.step_time_s
        with_profile = evaluate_spec(spec_from_data({**base, "plan": plan, "profile": str(tmp / "profile.yaml")}))
        w = with_profile.metrics.step_time_s
        lines.append(f"{name:16s} tp {plan['tp']} cp {plan.get('cp', 1)} pp {plan['pp']}: measured {step_s:.2f} s, "
                     f"default {without:.2f} ({100 * (without / step_s - 1):+.1f} %), "
                     f"with the profile {w:.2f} ({100 * (w / step_s - 1):+.1f} %)")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    from benchmarks.report_text import emit

    emit(["# Command: python benchmarks/calibrate_synthetic.py --out benchmarks/results/calibrate_synthetic.txt",
          *run()], args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
