"""A regular (non-editable) install works from any directory, the repository root included, and ships its data.

Before the facade moved to ``src/parplan``, ``python -c "from parplan import optimize"`` run from the
repository root after ``pip install .`` failed with ``No module named 'parplan.solver'``: the root folder
``parplan/`` shadowed the installed package. This builds the wheel, installs it (without dependencies) into
a fresh virtual environment that sees this environment's third-party packages, and imports from the root.
About 15-30 s.

The fresh environment sees this environment's third-party packages through a folder of links that leaves out
grpcio and its companions (the ``server`` extra), so the same wheel also shows what a plain ``pip install .``
without the extra does: ``solver-cli serve`` says which extra to install. With ``PARPLAN_PACKAGING_PYPI=1`` a
second test installs the wheel with its dependencies from PyPI (pip's cache reused) into a bare venv.
"""

from __future__ import annotations

import os
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import package_folders

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
    # ... without the server extra: a folder of links to every outer entry but grpcio's (and parplan's own)
    outer = tmp / "outer-site-packages-without-grpc"
    outer.mkdir()
    for root in site.getsitepackages():
        for entry in Path(root).iterdir():
            name = entry.name.lower()
            if name.startswith(("grpc", "parplan", "__editable__", "_parplan")) or name.endswith(".pth"):
                continue
            if not (outer / entry.name).exists():
                (outer / entry.name).symlink_to(entry)
    (venv_site / "outer-site-packages.pth").write_text(f"{outer}\n")
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
    for module in ("parplan/__init__.py", "parplan/solver/planner.py", "parplan/costmodel/evaluation/evaluate.py",
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
    assert module == "parplan.library.api"  # the facade: a Spec, a path or a dict
    assert status == "OPTIMAL"


def test_import_parplan_stays_cheap(wheel_venv):
    """``import parplan`` pulls in neither OR-Tools nor grpcio (the lazy attributes of src/parplan)."""
    _, python = wheel_venv
    code = "import parplan, sys; print(sorted(m for m in ('ortools', 'grpc', 'numpy') if m in sys.modules))"
    run = _run([str(python), "-c", code], cwd=REPO)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]"


def test_a_benchmark_runs_from_the_installed_wheel(wheel_venv):
    """The benchmarks need no editable install (they ran only from one while the root folder shadowed it). One quick
    scenario, the smallest (all three, in-process: tests/benchmarks/test_benchmarks_smoke.py)."""
    _, python = wheel_venv
    run = _run([str(python), "benchmarks/solver_speed.py", "--quick", "--only", "8B / 8 H100", "--workers", "1"],
               cwd=REPO)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "same K best step times (top 1 and top 10): 1/1" in run.stdout


SMALL_PRESET_SPEC = """\
model: {preset: megatron-gpt-1.7b}
training: {seq_len: 2048, global_batch_size: 64}
cluster: {gpu: H100-SXM-80GB, num_gpus: 8}
"""


@pytest.fixture(scope="module")
def outside(tmp_path_factory, wheel_venv) -> tuple[Path, Path]:
    """(solver-cli of the installed wheel, a working folder outside the repository)."""
    _, python = wheel_venv
    where = tmp_path_factory.mktemp("outside")
    assert not where.resolve().is_relative_to(REPO)
    (where / "spec.yaml").write_text(SMALL_PRESET_SPEC)
    (where / "fixed.yaml").write_text(SMALL_PRESET_SPEC + "plan: {tp: 1, pp: 1}\n")
    return python.parent / "solver-cli", where


def test_presets_ship_in_the_wheel(wheel_venv):
    wheel, _ = wheel_venv
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "parplan/library/model_presets.yaml" in names
    assert "parplan/v1/planner_pb2.pyi" in names


def test_every_package_data_file_ships_in_the_wheel(wheel_venv):
    """Every file of a package folder (pyproject ``package-dir``) that is not Python source or a README is data the
    code may read: presets, the proto and its typing stubs; each must be in the wheel at its package path (a new
    data file left out of ``package-data`` fails here, not in a user's ``FileNotFoundError``). The profile data
    and the calibration are Python modules: checked by name."""
    wheel, _ = wheel_venv
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = []
    for package, folder in package_folders().items():  # setuptools lists packages one by one: no recursion
        for path in (REPO / folder).iterdir():
            if path.is_file() and path.suffix not in (".py", ".pyc", ".md") and not path.name.startswith("."):
                if f"{package.replace('.', '/')}/{path.name}" not in names:
                    missing.append(f"{folder}/{path.name}")
    assert not missing, f"not in the wheel (add them to [tool.setuptools.package-data]): {sorted(set(missing))}"
    for data in ("parplan/library/model_presets.yaml", "parplan/v1/planner.proto", "parplan/v1/planner_pb2.pyi",
                 "parplan/costmodel/spec/calibration.py", "parplan/frameworks/profile_data.py",
                 "parplan/frameworks/profile_citations.py"):
        assert data in names, data


@pytest.mark.parametrize("args, expect", [
    (["presets"], "megatron-gpt-1.7b"),
    (["optimize", "spec.yaml", "--workers", "1", "--time-limit", "20"], "OPTIMAL"),
    (["knobs"], "Assumption knobs"),
    (["gpus"], "H100-SXM-80GB"),
    (["schema"], '"hf_config"'),
    (["export", "fixed.yaml", "--to", "megatron"], "--tensor-model-parallel-size"),
    (["optimize", "spec.yaml", "--workers", "1", "--export", "torchtitan"], "[parallelism]"),
])
def test_installed_cli_runs_outside_the_repository(outside, args, expect):
    cli, where = outside
    run = _run([str(cli), *args], cwd=where)
    assert run.returncode == 0, run.stderr[-2000:]
    assert expect in run.stdout
    assert "internal error" not in run.stderr


@pytest.mark.parametrize("args, extra", [
    (["serve", "--port", "0"], "server"),
    (["optimize", "spec.yaml", "--server", "127.0.0.1:1"], "server"),
])
def test_a_missing_extra_names_what_to_install(outside, args, extra):
    cli, where = outside
    run = _run([str(cli), *args], cwd=where)
    assert run.returncode == 2, (run.stdout, run.stderr)
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert f"pip install 'parplan[{extra}]'" in lines[0] and "internal error" not in lines[0]


def test_the_plot_extra_is_named_when_missing(outside):
    cli, where = outside
    probe = _run([str(cli.parent / "python"), "-c", "import matplotlib"], cwd=where)
    if probe.returncode == 0:
        pytest.skip("matplotlib is installed in this environment (the plot extra is present)")
    run = _run([str(cli), "optimize", "spec.yaml", "--pareto", "memory", "--plot", "f.png"], cwd=where)
    assert run.returncode == 2 and "pip install 'parplan[plot]'" in run.stderr, run.stderr


@pytest.mark.skipif(os.environ.get("PARPLAN_PACKAGING_PYPI") != "1",
                    reason="set PARPLAN_PACKAGING_PYPI=1 to install the wheel's dependencies from PyPI")
def test_wheel_with_its_dependencies_from_pypi(wheel_venv, tmp_path):
    """``pip install parplan-*.whl`` in a bare venv (dependencies from PyPI), then presets from outside."""
    wheel, _ = wheel_venv
    venv = tmp_path / "bare"
    assert _run([sys.executable, "-m", "venv", str(venv)], cwd=tmp_path).returncode == 0
    installed = _run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)], cwd=tmp_path)
    assert installed.returncode == 0, installed.stderr[-2000:]
    (tmp_path / "spec.yaml").write_text(SMALL_PRESET_SPEC)
    run = _run([str(venv / "bin" / "solver-cli"), "optimize", "spec.yaml", "--workers", "1"], cwd=tmp_path)
    assert run.returncode == 0 and "OPTIMAL" in run.stdout, run.stderr[-2000:]
    serve = _run([str(venv / "bin" / "solver-cli"), "serve", "--port", "0"], cwd=tmp_path)
    assert serve.returncode == 2 and "pip install 'parplan[server]'" in serve.stderr


def test_the_readmes_first_command_installs_no_test_only_package():
    """Issue 42 item 3: the README's first command (the one that plans) installs parplan with no extra whose
    packages only the tests need: the extras it names (if any) share no package with the test extra's own."""
    import re

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    readme = (REPO / "README.md").read_text()
    block = readme.split("```bash\n", 1)[1].split("```", 1)[0]
    (line,) = [text for text in block.splitlines() if "solver-cli optimize" in text]
    install = re.search(r"pip install (?:-e )?[\"']?\.(?:\[([\w,-]+)\])?[\"']?(?:\s|$)", line)
    assert install, line
    extras = set(filter(None, (install.group(1) or "").split(",")))
    optional = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]

    def packages(extra: str) -> set[str]:
        return {re.split(r"[=<>\[ ]", requirement)[0] for requirement in optional[extra]}

    test_only = packages("test") - {"parplan"}
    assert "test" not in extras and not set().union(*map(packages, extras)) & test_only, (line, extras)
