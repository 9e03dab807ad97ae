"""Whole-process `solver-cli optimize` times, the peers' way (issue 41 item 4): each spec in N fresh processes.

    python benchmarks/speed.py [--runs N] [--quick] [--only TEXT] [--out FILE]

Specs: the README example (``examples/llama3-70b-64xh100.yaml``) and the 13 scenarios of
``benchmarks/solver_speed.py`` (its ``SCENARIOS``, written to YAML files as they are). For each: the median wall
time of ``N`` runs (default 5, after one untimed run) of ``solver-cli optimize SPEC`` as a user runs it (the
default: the best plan and the best on each other framework; the bytecode cached, :func:`bytecode_env`) and of
``--no-per-framework``, then the in-process proven optimum (median of
N ``optimize()`` calls in this process, top 1, and the status), with the machine's 1-minute load average at the
row's start and end: SimuMax and Calculon are timed as whole processes too, and on a loaded machine every figure
is inflated.
Issue 41's goals (a quiet machine): the README example <= 1.5 s; the scenarios median <= 1.0 s, max <= 2 s; the
in-process optimum median <= 0.1 s, max <= 1 s. ``--quick``: one small scenario, one run (the CI smoke).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script: the repository root, for the benchmarks package
    sys.path.insert(0, str(REPO))

from benchmarks.solver_speed import QUICK, SCENARIOS  # noqa: E402

README_EXAMPLE = REPO / "examples" / "llama3-70b-64xh100.yaml"
GOALS_S = {"readme": 1.5, "median": 1.0, "max": 2.0, "in_process_median": 0.1, "in_process_max": 1.0}
HEADER = (f"{'spec':34} {'default s':>9} {'no per-fw s':>11} {'per-fw s':>8} {'in-proc s':>9} {'status':>8} "
          f"{'load before':>11} {'load after':>10}")


def load() -> float:
    """The machine's 1-minute load average."""
    return os.getloadavg()[0]


def bytecode_env(cache: Path) -> dict[str, str]:
    """The environment of the timed processes: this one's, with Python's bytecode cache on and kept in ``cache``
    (``PYTHONPYCACHEPREFIX``), as an installed ``solver-cli`` runs (pip compiles a package's modules when it installs
    it); ``PYTHONDONTWRITEBYTECODE`` set (as in some sandboxes) would have every process compile ~130 modules again
    (~0.3 s on 2 cores)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(cache)
    return env


def wall_s(args: list[str], runs: int, env: dict[str, str] | None = None) -> float:
    """Median wall seconds of ``runs`` fresh ``solver-cli`` processes (``python -m parplan.client.cli``), after one
    untimed run (it fills the bytecode cache of ``env``)."""
    times = []
    for i in range(runs + 1):
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "parplan.client.cli", *args], cwd=REPO, capture_output=True,
                              text=True, timeout=600, env=env)
        if i:
            times.append(time.perf_counter() - t0)
        if proc.returncode != 0:
            raise SystemExit(f"solver-cli {' '.join(args)} exited {proc.returncode}: {proc.stderr[-500:]}")
    return statistics.median(times)


def in_process(path: Path, runs: int) -> tuple[float, str]:
    """(median seconds, status) of ``runs`` in-process ``optimize()`` calls on the spec file (top 1, default
    controls), in this process (its imports done)."""
    from parplan import load_spec
    from parplan.solver.planner import optimize

    spec = load_spec(path)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        result = optimize(spec)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result.status


def specs(quick: bool, only: str | None, folder: Path) -> list[tuple[str, Path]]:
    """(name, YAML file) of each spec timed: the README example, then solver_speed's scenarios."""
    import yaml

    out = [] if quick else [("README example (70B / 64 H100)", README_EXAMPLE)]
    for i, (name, raw) in enumerate(QUICK[:1] if quick else SCENARIOS):
        path = folder / f"scenario-{i}.yaml"
        path.write_text(yaml.safe_dump(raw, sort_keys=False))
        out.append((name, path))
    if only:
        out = [s for s in out if only in s[0]]
    return out


def row(name: str, path: Path, runs: int, env: dict[str, str] | None = None) -> dict:
    before = load()
    default = wall_s(["optimize", str(path)], runs, env)
    alone = wall_s(["optimize", str(path), "--no-per-framework"], runs, env)
    seconds, status = in_process(path, runs)
    return dict(name=name, default_s=default, alone_s=alone, in_process_s=seconds, status=status, load_before=before,
                load_after=load())


def line(r: dict) -> str:
    return (f"{r['name']:34} {r['default_s']:>9.2f} {r['alone_s']:>11.2f} {r['default_s'] - r['alone_s']:>8.2f} "
            f"{r['in_process_s']:>9.3f} {r['status']:>8} {r['load_before']:>11.2f} {r['load_after']:>10.2f}")


def summary(rows: list[dict]) -> str:
    def verdict(ok: bool) -> str:
        return "met" if ok else "NOT MET"

    out = []
    readme = [r for r in rows if r["name"].startswith("README")]
    if readme:
        t = readme[0]["default_s"]
        out.append(f"README example, default command: {t:.2f} s (goal <= {GOALS_S['readme']} s on a quiet machine: "
                   f"{verdict(t <= GOALS_S['readme'])})")
    scen = [r for r in rows if not r["name"].startswith("README")]
    if scen:
        times = [r["default_s"] for r in scen]
        med, most = statistics.median(times), max(times)
        out.append(f"scenarios, default command: median {med:.2f} s, max {most:.2f} s over {len(scen)} (goal median "
                   f"<= {GOALS_S['median']} s, max <= {GOALS_S['max']} s: "
                   f"{verdict(med <= GOALS_S['median'] and most <= GOALS_S['max'])})")
        inproc = [r["in_process_s"] for r in scen]
        med, most = statistics.median(inproc), max(inproc)
        proven = sum(r["status"] in ("OPTIMAL", "INFEASIBLE") for r in scen)
        out.append(f"scenarios, in-process proven optimum: median {med:.3f} s, max {most:.3f} s, {proven}/{len(scen)} "
                   f"proven (goal median <= {GOALS_S['in_process_median']} s, max <= {GOALS_S['in_process_max']} s: "
                   f"{verdict(med <= GOALS_S['in_process_median'] and most <= GOALS_S['in_process_max'])})")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5, help="fresh processes per command (the median is reported)")
    ap.add_argument("--quick", action="store_true", help="one small scenario, one run (CI smoke)")
    ap.add_argument("--only", help="the specs whose name contains this text")
    ap.add_argument("--out", type=Path, help="also write the table to this file")
    args = ap.parse_args(argv)
    runs = 1 if args.quick else args.runs
    if runs < 1:
        ap.error("--runs: at least 1")
    stamp = (f"# python benchmarks/speed.py{' --quick' if args.quick else f' --runs {runs}'}"
             f"{f' --only {args.only!r}' if args.only else ''}  ({platform.processor() or platform.machine()}, "
             f"{os.cpu_count()} cores, {time.strftime('%Y-%m-%d %H:%M')}); wall seconds, median of {runs} after one "
             "untimed run, bytecode cached")
    print(stamp)
    print(HEADER)
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        chosen = specs(args.quick, args.only, Path(folder))
        if not chosen:
            ap.error(f"--only: no spec name contains {args.only!r}")
        env = bytecode_env(Path(folder) / "pycache")
        for name, path in chosen:
            rows.append(row(name, path, runs, env))
            print(line(rows[-1]), flush=True)
    text = summary(rows)
    print(text)
    if args.out:
        args.out.write_text("\n".join([stamp, HEADER] + [line(r) for r in rows]) + "\n" + text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
