"""The floors (issue 37 item 3): the import-linter contracts of pyproject.toml (``[tool.importlinter]``) hold on
this checkout, and fail on an upward import added to a copy of it.

``lint-imports`` reads the installed package ``parplan``; an editable install that maps the folders by an import
hook (setuptools' default) shows it only ``src/parplan``. So each test lays this checkout's package folders out as
the package in a temporary folder (pyproject ``package-dir``, :func:`conftest.package_folders`), as a strict
editable install does (docs/testing.md), and lints that copy.
"""

from __future__ import annotations

import ast
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


# ------------------------------------------------------------------ no function-local import dodges a cycle
def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imported_names(node: ast.AST, module: str, is_package: bool) -> list[str]:
    """The dotted names an import statement may load: each module, and ``from M import x`` as both M.x and M."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:  # relative: from the module's package (a package's own __init__ is its package)
        parts = module.split(".")[: len(module.split(".")) - node.level + (1 if is_package else 0)]
        base = ".".join(parts + ([base] if base else []))
    return [f"{base}.{alias.name}" for alias in node.names] + [base]


def import_graph(sources: dict[str, tuple[str, bool]]) -> tuple[dict[str, set[str]], list[tuple[str, str, int]]]:
    """(runtime module-level imports per module, function-local imports as (module, imported module, line)) of
    ``sources`` ({module name: (source text, is a package __init__)}), over the modules listed only: a name is
    resolved to its longest listed prefix; imports under ``if TYPE_CHECKING:`` are left out (they never run)."""
    def resolve(name: str):
        parts = name.split(".")
        for i in range(len(parts), 0, -1):
            if ".".join(parts[:i]) in sources:
                return ".".join(parts[:i])
        return None

    top: dict[str, set[str]] = {name: set() for name in sources}
    local: list[tuple[str, str, int]] = []

    def visit(module: str, is_package: bool, node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                for target in filter(None, map(resolve, _imported_names(child, module, is_package))):
                    if target == module:
                        continue
                    if in_function:
                        local.append((module, target, child.lineno))
                    else:
                        top[module].add(target)
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            visit(module, is_package, child, inner)

    for module, (text, is_package) in sources.items():
        visit(module, is_package, ast.parse(text), False)
    return top, local


def cycle_dodging_imports(sources: dict[str, tuple[str, bool]]) -> list[str]:
    """The function-local imports that would close an import cycle if they stood at module level: the imported
    module reaches the importing one through module-level imports."""
    top, local = import_graph(sources)

    def reaches(start: str, goal: str) -> bool:
        seen, stack = {start}, [start]
        while stack:
            for nxt in top[stack.pop()]:
                if nxt == goal:
                    return True
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append(nxt)
        return False

    return sorted({f"{m}:{line} imports {t}" for m, t, line in local if reaches(t, m)})


def _package_sources() -> dict[str, tuple[str, bool]]:
    out = {}
    for package, folder in package_folders().items():
        for path in (REPO / folder).glob("*.py"):
            is_package = path.name == "__init__.py"
            name = package if is_package else f"{package}.{path.stem}"
            out[name] = (path.read_text(), is_package)
    return out


def test_no_function_local_import_dodges_a_cycle():
    """Issue 37 item 3: a function-local import is for start-up time (the CLI's lazy imports) or an optional extra,
    never to dodge a cycle: none of the package's would close one at module level."""
    sources = _package_sources()
    assert len(sources) > 150  # the whole package, subpackages included (189 modules today)
    assert cycle_dodging_imports(sources) == []


def test_a_dodged_cycle_is_found():
    sources = {"p": ("", True), "p.a": ("import p.b\n", False),
               "p.b": ("def f():\n    from p import a\n", False),
               "p.c": ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import p.d\n", False),
               "p.d": ("def g():\n    import p.c\n", False)}
    assert cycle_dodging_imports(sources) == ["p.b:2 imports p.a"]  # p.c -> p.d only under TYPE_CHECKING


def test_no_private_name_is_imported_from_another_module():
    """A name another module imports is part of its module's surface: public (no leading underscore)."""
    private = []
    for module, (text, _) in _package_sources().items():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("parplan"):
                private += [f"{module}:{node.lineno} {node.module}.{a.name}" for a in node.names
                            if a.name.startswith("_") and not a.name.startswith("__")]
    assert private == []
