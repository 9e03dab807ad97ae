"""solver-cli's cold start (issue 41 item 2): ``--help``, ``validate``, ``presets`` and ``gpus`` import no NumPy,
OR-Tools, grpcio or spec model they do not use. Structural, not timed: each command runs in a fresh interpreter
that then prints which heavy modules ``sys.modules`` holds (benchmarks/cli_startup.py measures the times)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "examples" / "llama3-70b-64xh100.yaml"  # no plan: section, so validate evaluates nothing
EVALUATE_SPEC = ROOT / "examples" / "llama3-70b-64xh100-evaluate.yaml"
SOLVER = ("ortools", "grpc", "numpy")  # the solver, the service, the cost model's arrays
SPEC_MODELS = ("pydantic", "parplan.costmodel.spec.spec", "parplan.costmodel.spec.assumptions", "parplan.library.spec_io")
UI = ("starlette", "uvicorn")  # the optional 'ui' extra: only `solver-cli ui` / `serve --ui` import it
HEAVY = SOLVER + SPEC_MODELS + UI + ("parplan.client.export_cli", "parplan.library.evaluation", "rich.console")

_PROBE = """
import json, sys
from parplan.client.cli import main
sys.argv = ["solver-cli", *sys.argv[1:]]
try:
    main()
    code = 0
except SystemExit as exit:
    code = exit.code
print(json.dumps({"exit": code, "loaded": sorted(m for m in %r if m in sys.modules)}), file=sys.stderr)
""" % (HEAVY,)


def loaded_after(*args: str) -> tuple[list[str], str]:
    """The heavy modules a fresh ``solver-cli ARGS`` process has imported once the command ends, and its stdout."""
    proc = subprocess.run([sys.executable, "-c", _PROBE, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    report = json.loads(proc.stderr.strip().splitlines()[-1])
    assert report["exit"] == 0, proc.stderr
    return report["loaded"], proc.stdout


def test_help_imports_nothing_heavy():
    """``--help`` needs typer and the option enums only: no solver, no pydantic, no rich console."""
    loaded, out = loaded_after("--help")
    assert "optimize" in out and "validate" in out
    assert loaded == []


@pytest.mark.parametrize("command, shows", [("presets", "llama3-70b"), ("gpus", "H100")])
def test_catalog_commands_import_no_spec_model(command, shows):
    """``presets`` reads YAML and ``gpus`` the hardware dataclasses: no spec model, NumPy, OR-Tools or grpcio.
    (typer 0.29 itself imports the pydantic library to coerce option values; no parplan model is built.)"""
    loaded, out = loaded_after(command)
    assert shows in out
    assert set(loaded) <= {"pydantic", "rich.console"}, loaded


def test_validate_imports_the_spec_models_only():
    """``validate`` of a spec without a plan needs the spec models, not the cost model's NumPy or the solver."""
    loaded, out = loaded_after("validate", str(SPEC))
    assert out.strip() == "ok"
    assert "parplan.costmodel.spec.spec" in loaded
    assert not set(loaded) & set(SOLVER + ("parplan.library.evaluation",)), loaded


def test_validate_with_a_plan_still_checks_it():
    """A spec with a ``plan:`` is still evaluated (the lazy import is taken), and no solver is loaded."""
    loaded, out = loaded_after("validate", str(EVALUATE_SPEC))
    assert out.strip() == "ok"
    assert "parplan.library.evaluation" in loaded and "ortools" not in loaded


def test_option_choices_match_the_frameworks():
    """cli_options spells out the export targets and launchers (importing frameworks/ would load the spec
    models); they must stay the frameworks' own."""
    from parplan.client.cli_options import ExportTarget, Launcher
    from parplan.frameworks.export import TARGETS
    from parplan.frameworks.jobs import LAUNCHERS

    assert tuple(e.value for e in ExportTarget) == TARGETS
    assert tuple(e.value for e in Launcher) == LAUNCHERS
