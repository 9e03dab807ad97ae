"""A regular (non-editable) install works from any directory, the repository root included.

Before the facade moved to ``src/parplan``, ``python -c "from parplan import optimize"`` run from the
repository root after ``pip install .`` failed with ``No module named 'parplan.solver'``: the root folder
``parplan/`` shadowed the installed package. This builds the wheel, installs it (without dependencies) into
a fresh virtual environment that sees this environment's third-party packages, and imports from the root.
About 15-30 s.
"""

from __future__ import annotations

import os
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _run(args: list[str], cwd: Path, **kwargs) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=180, env=env, **kwargs)


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("wheel")
    build = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                  "-w", str(tmp / "dist"), str(REPO)], cwd=tmp)
    assert build.returncode == 0, build.stderr[-2000:]
    (wheel,) = (tmp / "dist").glob("parplan-*.whl")
    venv = tmp / "venv"
    made = _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp)
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    # third-party packages from this environment by a plain path entry: its .pth files (the editable
    # install's finder among them) are not processed, so only the wheel provides `parplan`
    purelib = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=tmp)
    venv_site = Path(purelib.stdout.strip())
    (venv_site / "outer-site-packages.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    installed = _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q",
                      str(wheel)], cwd=tmp)
    if installed.returncode != 0 and "no such option: --python" in installed.stderr:  # pip < 22.3
        installed = _run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(venv_site),
                          str(wheel)], cwd=tmp)
    assert installed.returncode == 0, installed.stderr[-2000:]
    return wheel, python


def test_wheel_holds_every_package(wheel_venv):
    wheel, _ = wheel_venv
    names = set(zipfile.ZipFile(wheel).namelist())
    for module in ("parplan/__init__.py", "parplan/solver/planner.py", "parplan/costmodel/evaluate.py",
                   "parplan/client/cli.py", "parplan/server/service.py", "parplan/frameworks/__init__.py",
                   "parplan/v1/planner_pb2.py", "parplan/v1/planner_pb2_grpc.py"):
        assert module in names, module
    assert not any(n.startswith(("src/", "tests/")) for n in names)


def test_installed_wheel_imports_from_the_repository_root(wheel_venv):
    _, python = wheel_venv
    code = ("import parplan, sys; from parplan import optimize, load_spec; "
            "print(parplan.__file__); print(optimize.__module__); "
            "r = optimize(load_spec('examples/llama3-70b-64xh100.yaml')); print(r.status)")
    run = _run([str(python), "-c", code], cwd=REPO)
    assert run.returncode == 0, run.stderr[-2000:]
    where, module, status = run.stdout.split()
    assert Path(where).is_relative_to(python.parent.parent), where  # the wheel's copy, not the work tree
    assert module == "parplan.client.api"  # the facade: a Spec, a path or a dict
    assert status == "OPTIMAL"


def test_import_parplan_stays_cheap(wheel_venv):
    """``import parplan`` pulls in neither OR-Tools nor grpcio (the lazy attributes of src/parplan)."""
    _, python = wheel_venv
    code = "import parplan, sys; print(sorted(m for m in ('ortools', 'grpc', 'numpy') if m in sys.modules))"
    run = _run([str(python), "-c", code], cwd=REPO)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]"


def test_a_benchmark_runs_from_the_installed_wheel(wheel_venv):
    """The benchmarks need no editable install (they ran only from one while the root folder shadowed it)."""
    _, python = wheel_venv
    run = _run([str(python), "benchmarks/solver_speed.py", "--quick", "--workers", "1"], cwd=REPO)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "same K best step times (top 1 and top 10): 3/3" in run.stdout
