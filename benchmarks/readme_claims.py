"""docs/solver.md's worked examples, measured: ``python benchmarks/readme_claims.py`` (about a minute).

* Uneven stages on a large vocabulary (``examples/uneven-stages-large-vocab.yaml``): the best even split against
  the best uneven one (``tests/benchmarks/test_uneven_example.py`` checks the > 20 % claim).
* Per-stage counts on Llama-3 70B / 64 H100 at TP2 PP8 1F1B: first/last stage counts against every stage its
  own counts (``tests/solver/test_planner.py::test_per_stage_counts_beat_first_last_on_70b_tp2_pp8``).

Prints the figures docs/solver.md quotes; writes ``benchmarks/results/readme_claims.txt``.
"""

from __future__ import annotations

import datetime
import subprocess
from pathlib import Path

import yaml

from parplan.frameworks.loader import validate_spec
from parplan.solver.planner import optimize

ROOT = Path(__file__).resolve().parents[1]


def _line(label: str, ev) -> str:
    p, m = ev.plan, ev.metrics
    return (f"  {label:<22} {m.step_time_s:7.2f} s  {100 * m.mfu:5.1f} % MFU  tp{p.tp} cp{p.cp} pp{p.pp} dp{p.dp} "
            f"mbs{p.micro_batch_size} {p.schedule} layers {p.stage_layers} recompute {p.recompute_layers}")


def uneven_example() -> list[str]:
    data = yaml.safe_load((ROOT / "examples" / "uneven-stages-large-vocab.yaml").read_text())
    spec = validate_spec({**data, "framework": "any"})  # the research space the README's figures were measured in
    uneven = optimize(spec, method="exhaustive").plans[0]
    even_spec = spec.model_copy(update={"search": spec.search.model_copy(update={"uneven_stages": False})})
    even = optimize(even_spec, method="exhaustive").plans[0]
    gain = 1 - uneven.metrics.step_time_s / even.metrics.step_time_s
    return ["examples/uneven-stages-large-vocab.yaml (exhaustive):", _line("best even split", even),
            _line("best uneven split", uneven), f"  uneven is {100 * gain:.1f} % faster per step"]


def per_stage_counts() -> list[str]:
    data = yaml.safe_load((ROOT / "examples" / "llama3-70b-64xh100.yaml").read_text())
    out = ["Llama-3 70B / 64 H100, TP2 PP8 1F1B (CP-SAT and the oracle):"]
    times = {}
    for split in ("first_last", "per_stage"):
        d = {**data, "framework": "any", "search": {**(data.get("search") or {}), "tp": [2], "cp": [1], "pp": [8],
                                "schedules": ["1f1b"], "stage_split": split}}
        spec = validate_spec(d)
        cp, ex = optimize(spec, method="cpsat").plans[0], optimize(spec, method="exhaustive").plans[0]
        same = abs(cp.metrics.step_time_s - ex.metrics.step_time_s) <= 1e-9 * ex.metrics.step_time_s
        out.append(_line(split, cp) + ("  (oracle: the same)" if same else f"  (oracle: {ex.metrics.step_time_s:.2f} s)"))
        times[split] = cp.metrics.step_time_s
    out.append(f"  per-stage counts are {100 * (1 - times['per_stage'] / times['first_last']):.1f} % faster per step")
    return out


def main() -> None:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    lines = ["# Command: python benchmarks/readme_claims.py",
             f"# Date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%dT%H:%MZ} (commit {commit or '?'})", ""]
    lines += uneven_example() + [""] + per_stage_counts()
    text = "\n".join(lines) + "\n"
    print(text, end="")
    (ROOT / "benchmarks" / "results" / "readme_claims.txt").write_text(text)


if __name__ == "__main__":
    main()
