"""The floors (issue 37 item 3): the import-linter contracts of pyproject.toml (``[tool.importlinter]``) hold on
this checkout, and fail on an upward import added to a copy of it.

``lint-imports`` reads the installed package ``parplan``; an editable install that maps the folders by an import
hook (setuptools' default) shows it only ``src/parplan``. So each test lays this checkout's package folders out as
the package in a temporary folder (pyproject ``package-dir``, :func:`conftest.package_folders`), as a strict
editable install does (docs/testing.md), and lints that copy.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, package_folders

LINT = ("import sys; from importlinter.cli import lint_imports_command; sys.argv[0] = 'lint-imports'; "
        "sys.exit(lint_imports_command())")


def _lay_out(dest: Path) -> int:
    """Copy each package folder's Python files to ``dest/parplan/...`` with pyproject.toml beside; the file count."""
    count = 0
    for package, folder in package_folders().items():
        target = dest.joinpath(*package.split("."))
        target.mkdir(parents=True)
        for path in (REPO / folder).glob("*.py"):
            shutil.copy(path, target)
            count += 1
    shutil.copy(REPO / "pyproject.toml", dest)
    return count


def _lint(tree: Path) -> subprocess.CompletedProcess:
    # PYTHONPATH: ahead of the installed parplan; COLUMNS: a broken rule on one line (the rooms' names are long)
    env = dict(os.environ, PYTHONPATH=str(tree), COLUMNS="400")
    return subprocess.run([sys.executable, "-c", LINT, "--no-cache", "--no-logo"], cwd=tree, env=env,
                          capture_output=True, text=True, timeout=300)


def test_the_contracts_hold(tmp_path):
    files = _lay_out(tmp_path)
    run = _lint(tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    analysed = int(re.search(r"Analyzed (\d+) files", run.stdout).group(1))
    assert analysed == files  # the whole package, not the bare src/parplan an import hook shows
    assert " 0 broken" in run.stdout


UPWARD = [  # (file, an import above its floor, the broken rule's words)
    ("costmodel/errors.py", "import parplan.solver.planner", "parplan.costmodel is not allowed to import parplan.solver"),
    ("solver/deadline.py", "from parplan.frameworks import loader",
     "parplan.solver is not allowed to import parplan.frameworks"),
    ("frameworks/jobs.py", "from parplan.library import api",
     "parplan.frameworks is not allowed to import parplan.library"),
    ("library/contract.py", "from parplan.wire import convert", "parplan.library is not allowed to import parplan.wire"),
    ("library/sweep/run.py", "from parplan.server import app", "parplan.library is not allowed to import parplan.server"),
    ("wire/convert.py", "from parplan.client import grpc_client",
     "parplan.wire is not allowed to import parplan.client"),
    ("server/service.py", "from parplan.client import report", "parplan.server is not allowed to import parplan.client"),
    ("costmodel/memo.py", "from parplan.v1 import planner_pb2", "parplan.costmodel is not allowed to import parplan.v1"),
    ("costmodel/evaluation/pools.py", "from parplan.costmodel.evaluation.evaluate import PlanError",
     "parplan.costmodel.evaluation.pools is not allowed to import parplan.costmodel.evaluation.evaluate"),
    # the cost model's rooms (contract costmodel-rooms): a room below importing one above, a root module a room
    ("costmodel/communication/comm.py", "from parplan.costmodel.evaluation import ledger",
     "parplan.costmodel.communication is not allowed to import parplan.costmodel.evaluation"),
    ("costmodel/schedules/bubble.py", "from parplan.costmodel.compute import efficiency",
     "parplan.costmodel.schedules is not allowed to import parplan.costmodel.compute"),
    ("costmodel/errors.py", "from parplan.costmodel.moe import moe_comm",
     "parplan.costmodel.errors is not allowed to import parplan.costmodel.moe"),
    # the oracle and the CP-SAT model it checks (contract oracle-own)
    ("solver/oracle/knapsack.py", "from parplan.solver import cpsat",
     "parplan.solver.oracle is not allowed to import parplan.solver.cpsat"),
    ("solver/oracle/levels.py", "from parplan.solver.cpsat_vars import StageVars",
     "parplan.solver.oracle is not allowed to import parplan.solver.cpsat_vars"),
]


@pytest.mark.parametrize("path, line, broken", UPWARD, ids=[case[0] for case in UPWARD])
def test_an_upward_import_breaks_a_contract(tmp_path, path, line, broken):
    _lay_out(tmp_path)
    copied = tmp_path / "parplan" / path  # each package folder is named as its package
    copied.write_text(copied.read_text() + f"\n{line}  # upward\n")
    run = _lint(tmp_path)
    assert run.returncode == 1, run.stdout + run.stderr
    assert broken in run.stdout
