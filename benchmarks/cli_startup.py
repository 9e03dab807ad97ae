"""`solver-cli` cold start: wall time of each command in a fresh process, what it imported, and `import parplan`.

    python benchmarks/cli_startup.py [--runs N] [--cold-only] [--top K] [--out FILE]

Commands timed (each in ``N`` fresh processes, the median reported): ``--help``, ``validate``, ``presets``,
``gpus``, and unless ``--cold-only`` ``optimize --server`` against a local ``solver-cli serve`` the benchmark
starts and the in-process ``optimize`` for comparison. The wall times come from plain runs
(``python -m parplan.client.cli ...``); ``N`` more runs per command with ``python -X importtime`` give the sum of
the top-level imports' cumulative times (median), whether NumPy, pydantic, OR-Tools or grpcio was loaded, and the
``K`` slowest top-level imports (the offenders, from the run of median total). ``import parplan`` and
``import parplan.client.cli`` are timed inside a fresh interpreter (the import alone, without the interpreter's
own start). The machine's load average is printed before and after: on a loaded machine every figure is
inflated. Issue 41's goals: ``--help`` ≤ 0.3 s and ``import parplan`` ≤ 0.05 s on a quiet machine.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script: the repository root, for the benchmarks package
    sys.path.insert(0, str(REPO))

from benchmarks.serve_process import start_serve  # noqa: E402
SPEC = REPO / "examples" / "llama3-70b-64xh100.yaml"
_IMPORT_LINE = re.compile(r"^import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)")
HEAVY = ("numpy", "pydantic", "ortools", "grpc")
# commands that must not load these (issue 41 item 2); typer 0.29 itself loads pydantic to coerce option values
MUST_NOT_LOAD = {"--help": HEAVY, "presets": ("numpy", "ortools", "grpc"), "gpus": ("numpy", "ortools", "grpc"),
                 "validate": ("numpy", "ortools", "grpc")}
GOALS_S = {"--help": 0.3, "import parplan": 0.05}


def wall_once(args: list[str]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "parplan.client.cli", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    if proc.returncode != 0:
        raise SystemExit(f"solver-cli {' '.join(args)} exited {proc.returncode}: {proc.stderr[-500:]}")
    return time.perf_counter() - t0


def import_profile(args: list[str], top: int) -> dict:
    """One ``-X importtime`` run: the top-level imports' total, the heavy packages loaded, the ``top`` slowest."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "parplan.client.cli", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    packages, top_level = set(), []
    for line in proc.stderr.splitlines():
        match = _IMPORT_LINE.match(line)
        if match:
            packages.add(match.group(4).split(".")[0])
            if len(match.group(3)) == 1:  # a top-level import: its cumulative time counts once
                top_level.append((int(match.group(2)) / 1e6, match.group(4)))
    top_level.sort(reverse=True)
    return {"imports_s": sum(s for s, _ in top_level), "loaded": [m for m in HEAVY if m in packages],
            "offenders": top_level[:top]}


def import_seconds(module: str) -> float:
    """The time of ``import MODULE`` alone in a fresh interpreter."""
    code = f"import time; t = time.perf_counter(); import {module}; print(time.perf_counter() - t)"
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                          check=True)
    return float(proc.stdout.strip())


def _load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def _commands(port: int | None) -> dict[str, list[str]]:
    commands = {"--help": ["--help"], "validate": ["validate", str(SPEC)], "presets": ["presets"], "gpus": ["gpus"]}
    if port is not None:
        commands["optimize --server"] = ["optimize", str(SPEC), "--deterministic", "--format", "json",
                                         "--server", f"127.0.0.1:{port}"]
        commands["optimize (in-process)"] = ["optimize", str(SPEC), "--deterministic", "--format", "json"]
    return commands


def measure(runs: int, top: int, port: int | None) -> tuple[list[tuple], list[tuple]]:
    rows = []
    for name, command in _commands(port).items():
        wall = statistics.median(wall_once(command) for _ in range(runs))
        profiles = sorted((import_profile(command, top) for _ in range(runs)), key=lambda p: p["imports_s"])
        rows.append((name, wall, profiles[len(profiles) // 2]))
    imports = [(f"import {m}", statistics.median(import_seconds(m) for _ in range(runs)))
               for m in ("parplan", "parplan.client.cli")]
    return rows, imports


def report(rows: list[tuple], imports: list[tuple], runs: int, load_before: str, top: int) -> tuple[str, list[str]]:
    """The table's text and the failures (a heavy package loaded where it must not be)."""
    lines = [f"solver-cli cold start, median of {runs} fresh processes each ({platform.python_implementation()} "
             f"{platform.python_version()}, {os.cpu_count()} CPUs; `python benchmarks/cli_startup.py --runs {runs}`)",
             f"{load_before} before, {_load()} after", "",
             f"{'command':<24} {'wall (s)':>9} {'imports (s)':>12}  {'goal (s)':>8}  heavy packages loaded"]
    failures = []
    for name, wall, profile in rows:
        goal = f"{GOALS_S[name]:.2f}" if name in GOALS_S else ""
        lines.append(f"{name:<24} {wall:>9.3f} {profile['imports_s']:>12.3f}  {goal:>8}  "
                     f"{', '.join(profile['loaded']) or '-'}")
        bad = set(profile["loaded"]) & set(MUST_NOT_LOAD.get(name, ()))
        if bad:
            failures.append(f"{name} imported {', '.join(sorted(bad))}")
    for name, seconds in imports:
        goal = f"{GOALS_S[name]:.2f}" if name in GOALS_S else ""
        lines.append(f"{name:<24} {seconds:>9.3f} {'(in-process)':>12}  {goal:>8}")
    lines += ["", f"slowest top-level imports (cumulative s, the `-X importtime` run of median total, top {top}):"]
    for name, _wall, profile in rows:
        lines.append(f"  {name}: " + ", ".join(f"{m} {s:.3f}" for s, m in profile["offenders"]))
    return "\n".join(lines), failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--cold-only", action="store_true", help="skip the optimize rows (and the server)")
    parser.add_argument("--top", type=int, default=5, help="slowest top-level imports shown per command")
    parser.add_argument("--out", type=Path, default=None, help="also write the table here")
    args = parser.parse_args(argv)
    load_before = _load()
    server = None
    try:
        port = None
        if not args.cold_only:
            server, port = start_serve()
        rows, imports = measure(args.runs, args.top, port)
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
    text, failures = report(rows, imports, args.runs, load_before, args.top)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")
    for failure in failures:
        print(f"FAIL: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
