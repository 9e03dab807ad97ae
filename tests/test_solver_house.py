"""The solver's house rules (issue 9): no function-local imports in solver/, no module importing another's
private names, and one error base for everything a user can get wrong."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from parplan.costmodel.errors import ParplanError
from parplan.costmodel.evaluate import PlanError
from parplan.costmodel.hardware import UnknownGPU
from parplan.client.spec_io import SpecError

SOLVER = Path(__file__).resolve().parents[1] / "solver"
MODULES = sorted(SOLVER.glob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_no_function_local_imports(path):
    tree = ast.parse(path.read_text())
    local = [f"{path.name}:{node.lineno}" for fn in ast.walk(tree) if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
             for node in ast.walk(fn) if isinstance(node, (ast.Import, ast.ImportFrom))]
    assert local == []


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_no_private_names_from_other_modules(path):
    tree = ast.parse(path.read_text())
    private = [f"{path.name}:{node.lineno} {alias.name}" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
               and (node.module or "").startswith("parplan") for alias in node.names if alias.name.startswith("_")]
    assert private == []


def test_one_error_base():
    for cls in (SpecError, PlanError, UnknownGPU):
        assert issubclass(cls, ParplanError)


def test_each_choice_table_is_built_once():
    """Problem.table caches per (choice, split, recompute rule): the search asks for a choice's table at each
    bound level and again for its plan (the cache once stored non-DualPipe tables under another key, so every
    request rebuilt them)."""
    from parplan.client.spec_io import load_spec_file
    from parplan.solver.problem import Problem

    spec = load_spec_file(Path(__file__).resolve().parents[1] / "examples" / "llama3-70b-64xh100.yaml")
    problem = Problem.build(spec.model_copy(update={"framework": "any"}))  # ZB-H1 is the research space's
    for schedule in ("zb-h1", "interleaved"):
        i = next(k for k, c in enumerate(problem.choices) if c.schedule == schedule)
        assert problem.table(i) is problem.table(i)
