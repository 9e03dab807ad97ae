"""The per-framework solves on forked workers against one process (issue 41 item 1): ``solver-cli optimize SPEC``.

    python benchmarks/per_framework_workers.py [--runs N] [SPEC ...]

For each spec (default: the README example, ``examples/llama3-70b-64xh100.yaml``), the default command in fresh
processes, alternating ``PARPLAN_PER_FRAMEWORK_WORKERS=0`` (one process, as before frameworks/compare_workers.py) and
the default (a worker per further free core): the median wall seconds and CPU seconds (user + sys, the workers
included) of ``N`` runs each (default 5, after one untimed run each: the bytecode cached, speed.py's
``bytecode_env``), the 1-minute load average beside, and whether the two printed the same report (the status line's
clock reading aside). On a machine whose other load leaves no core free the workers cannot help (the CPU is the same
or a little more: the fork's copied pages); the goal is read on a quiet one (benchmarks/speed.py).
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.speed import README_EXAMPLE, bytecode_env  # noqa: E402

VARIANTS = (("one process", "0"), ("workers", None))
CLOCK = re.compile(r"searched after bounds, [0-9.]+ s")  # the status line's clock reading


def run(spec: Path, env: dict[str, str]) -> tuple[float, float, str]:
    """(wall seconds, CPU seconds of the process and its workers, stdout) of one ``solver-cli optimize SPEC``."""
    before, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "parplan.client.cli", "optimize", str(spec)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)
    wall, after = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"solver-cli optimize {spec} exited {proc.returncode}: {proc.stderr[-500:]}")
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return wall, cpu, CLOCK.sub("", proc.stdout)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5, help="runs per variant (the median is reported)")
    ap.add_argument("specs", nargs="*", type=Path, default=[README_EXAMPLE])
    args = ap.parse_args(argv)
    print(f"# python benchmarks/per_framework_workers.py --runs {args.runs}  ({os.cpu_count()} cores, "
          f"{time.strftime('%Y-%m-%d %H:%M')}); medians, wall and CPU seconds (user+sys, workers included)")
    with tempfile.TemporaryDirectory() as folder:
        base = bytecode_env(Path(folder) / "pycache")
        envs = {name: ({k: v for k, v in base.items() if k != "PARPLAN_PER_FRAMEWORK_WORKERS"}
                       | ({"PARPLAN_PER_FRAMEWORK_WORKERS": cap} if cap is not None else {})) for name, cap in VARIANTS}
        for spec in args.specs:
            outs = {name: run(spec, env)[2] for name, env in envs.items()}  # untimed: fills the bytecode cache
            times: dict[str, list[tuple[float, float]]] = {name: [] for name in envs}
            loads = []
            for _ in range(args.runs):
                for name, env in envs.items():
                    loads.append(os.getloadavg()[0])
                    times[name].append(run(spec, env)[:2])
            cells = [f"{name} wall {statistics.median(w for w, _ in t):.2f} s "
                     f"cpu {statistics.median(c for _, c in t):.2f} s" for name, t in times.items()]
            same = "same report" if len(set(outs.values())) == 1 else "REPORTS DIFFER"
            print(f"{spec.name:28} {'; '.join(cells)}; load {min(loads):.2f}-{max(loads):.2f}; {same}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
