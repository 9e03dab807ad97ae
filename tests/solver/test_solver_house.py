"""The solver's house rules (issues 9 and 18): no function-local imports in solver/, no module importing another's
private names, one error base for everything a user can get wrong, and no function over 80 lines nor module over
500 lines (issue 18: a unit a reader can hold)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from parplan.costmodel.errors import ParplanError
from parplan.costmodel.evaluation.evaluate import PlanError
from parplan.costmodel.spec.hardware import UnknownGPU
from parplan.library.spec_io import SpecError

SOLVER = Path(__file__).resolve().parents[2] / "solver"
MODULES = sorted(SOLVER.rglob("*.py"))
MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 500


def _name(path: Path) -> str:
    return str(path.relative_to(SOLVER))


@pytest.mark.parametrize("path", MODULES, ids=_name)
def test_no_function_local_imports(path):
    tree = ast.parse(path.read_text())
    local = [f"{path.name}:{node.lineno}" for fn in ast.walk(tree) if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
             for node in ast.walk(fn) if isinstance(node, (ast.Import, ast.ImportFrom))]
    assert local == []


@pytest.mark.parametrize("path", MODULES, ids=_name)
def test_no_private_names_from_other_modules(path):
    tree = ast.parse(path.read_text())
    private = [f"{path.name}:{node.lineno} {alias.name}" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
               and (node.module or "").startswith("parplan") for alias in node.names if alias.name.startswith("_")]
    assert private == []


@pytest.mark.parametrize("path", MODULES, ids=_name)
def test_modules_and_functions_are_small(path):
    """Every function (its def line to its last line) within 80 lines, every module within 500."""
    text = path.read_text()
    long = [f"{_name(path)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for node in ast.walk(ast.parse(text)) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]
    assert long == []
    assert len(text.splitlines()) <= MAX_MODULE_LINES, f"{_name(path)}: {len(text.splitlines())} lines"


def test_the_size_rules_see_the_oracle_package():
    """The rules walk solver/'s subpackages too (the oracle is one)."""
    assert any(path.parent.name == "oracle" for path in MODULES)


def test_one_error_base():
    for cls in (SpecError, PlanError, UnknownGPU):
        assert issubclass(cls, ParplanError)


def test_each_choice_table_is_built_once():
    """Problem.table caches per (choice, split, recompute rule): the search asks for a choice's table at each
    bound level and again for its plan (the cache once stored non-DualPipe tables under another key, so every
    request rebuilt them)."""
    from parplan.library.spec_io import load_spec_file
    from parplan.frameworks.loader import retarget
    from parplan.solver.problem import Problem

    spec = load_spec_file(Path(__file__).resolve().parents[2] / "examples" / "llama3-70b-64xh100.yaml")
    problem = Problem.build(retarget(spec, "any"))  # ZB-H1 is the research space's
    for schedule in ("zb-h1", "interleaved"):
        i = next(k for k, c in enumerate(problem.choices) if c.schedule == schedule)
        assert problem.table(i) is problem.table(i)
