"""CI smoke of the speed benchmark: three small scenarios, CP-SAT and the oracle must agree."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_solver_speed_quick_agrees_with_the_oracle(capsys):
    assert _load("solver_speed").main(["--quick", "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert "same K best step times (top 1 and top 10): 3/3" in out


def test_sweep_benchmark_quick(capsys):
    assert _load("sweep").main(["--quick", "--jobs", "2"]) == 0
    out = capsys.readouterr().out
    assert "plans identical (1 job vs 2 jobs): True" in out and "| 512 |" in out
