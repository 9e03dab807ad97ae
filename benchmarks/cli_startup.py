"""`solver-cli` cold start: wall time of each command in a fresh process, and whether it imported OR-Tools.

    python benchmarks/cli_startup.py [--runs N] [--out FILE]

Commands timed (each ``N`` times, the median reported): ``--help``, ``validate``, ``optimize --server``
against a local ``solver-cli serve`` the benchmark starts, and the in-process ``optimize`` for comparison.
Every command runs as ``python -X importtime -m parplan.client.cli ...``; the import log says whether
``ortools`` or ``grpc`` was loaded and how long the imports took (the sum of the top-level imports' cumulative
times). The importtime log itself adds a little to the wall time.
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


def run_once(args: list[str]) -> dict:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "parplan.client.cli", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    wall_s = time.perf_counter() - t0
    modules, top_level_us = set(), 0
    for line in proc.stderr.splitlines():
        match = _IMPORT_LINE.match(line)
        if match:
            modules.add(match.group(4).split(".")[0])
            if len(match.group(3)) == 1:  # a top-level import: its cumulative time counts once
                top_level_us += int(match.group(2))
    return {"wall_s": wall_s, "imports_s": top_level_us / 1e6, "ortools": "ortools" in modules,
            "grpc": "grpc" in modules, "exit": proc.returncode}


def start_server() -> tuple[subprocess.Popen, int]:
    return start_serve()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None, help="also write the table here")
    args = parser.parse_args(argv)
    server, port = start_server()
    try:
        commands = {
            "--help": ["--help"],
            "validate": ["validate", str(SPEC)],
            "optimize --server": ["optimize", str(SPEC), "--deterministic", "--format", "json",
                                  "--server", f"127.0.0.1:{port}"],
            "optimize (in-process)": ["optimize", str(SPEC), "--deterministic", "--format", "json"],
        }
        rows = []
        for name, command in commands.items():
            runs = [run_once(command) for _ in range(args.runs)]
            rows.append((name, statistics.median(r["wall_s"] for r in runs),
                         statistics.median(r["imports_s"] for r in runs), runs[0]["ortools"], runs[0]["grpc"],
                         {r["exit"] for r in runs}))
    finally:
        server.terminate()
        server.wait(timeout=30)
    lines = [f"solver-cli cold start, median of {args.runs} runs each ({platform.python_implementation()} "
             f"{platform.python_version()}, {os.cpu_count()} CPUs; `python benchmarks/cli_startup.py --runs "
             f"{args.runs}`)", "",
             f"{'command':<24} {'wall (s)':>9} {'imports (s)':>12} {'OR-Tools':>9} {'grpc':>5} {'exit':>5}"]
    for name, wall, imports, ortools, grpc_loaded, exits in rows:
        lines.append(f"{name:<24} {wall:>9.3f} {imports:>12.3f} {'yes' if ortools else 'no':>9} "
                     f"{'yes' if grpc_loaded else 'no':>5} {','.join(map(str, sorted(exits))):>5}")
    text = "\n".join(lines)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")
    failed = [name for name, *_, ortools, _g, exits in rows if exits != {0}]
    slow_path = [name for name, _w, _i, ortools, _g, _e in rows if ortools and "in-process" not in name]
    if slow_path:
        print(f"FAIL: imported OR-Tools: {slow_path}", file=sys.stderr)
    return 1 if failed or slow_path else 0


if __name__ == "__main__":
    sys.exit(main())
