"""The CPU seconds of a ``solver-cli`` process itself, its forked per-framework workers left out: the default
``optimize``'s critical path on a machine with a core free for the workers (frameworks/compare_workers.py), which a
loaded machine's wall time does not show.

    python benchmarks/main_process_cpu.py [--runs N] -- optimize SPEC [OPTIONS]

Each run is a fresh process (bytecode cached as benchmarks/speed.py's ``bytecode_env``) that runs the CLI in itself
(as ``python -m parplan.client.cli`` does) and reports its own user + sys CPU at exit (``getrusage(RUSAGE_SELF)``;
the workers exit without it). Prints the median of ``N`` runs (default 3, after one untimed run) and the 1-minute
load average before and after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.speed import bytecode_env  # noqa: E402

CHILD = """import atexit, os, resource, runpy, sys
pid = os.getpid()
def report():
    if os.getpid() == pid:
        r = resource.getrusage(resource.RUSAGE_SELF)
        sys.stderr.write(f"MAIN_CPU_S {r.ru_utime + r.ru_stime:.3f}\\n")
atexit.register(report)
sys.argv = ["solver-cli", *sys.argv[1:]]
runpy.run_module("parplan.client.cli", run_name="__main__")
"""


def main_cpu_s(args: list[str], env: dict[str, str]) -> float:
    proc = subprocess.run([sys.executable, "-c", CHILD, *args], cwd=REPO, capture_output=True, text=True, env=env,
                          timeout=600)
    found = [line.split()[1] for line in proc.stderr.splitlines() if line.startswith("MAIN_CPU_S ")]
    if proc.returncode != 0 or not found:
        raise SystemExit(f"solver-cli {' '.join(args)} exited {proc.returncode}: {proc.stderr[-500:]}")
    return float(found[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("cli", nargs=argparse.REMAINDER, help="the solver-cli arguments, after --")
    args = ap.parse_args(argv)
    cli = args.cli[1:] if args.cli[:1] == ["--"] else args.cli
    if not cli or args.runs < 1:
        ap.error("give --runs >= 1 and the solver-cli arguments after --")
    before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as folder:
        env = bytecode_env(Path(folder) / "pycache")
        times = [main_cpu_s(cli, env) for _ in range(args.runs + 1)][1:]
    print(f"solver-cli {' '.join(cli)}: this process's CPU median {statistics.median(times):.2f} s "
          f"({', '.join(f'{t:.2f}' for t in times)}), load {before:.2f} -> {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
