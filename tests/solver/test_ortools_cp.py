"""solver/ortools_cp.py: cp_model imported without pandas, its pandas helpers intact."""

import subprocess
import sys

import pytest

from parplan.solver.ortools_cp import cp_model


def test_solving_imports_no_pandas():
    code = "import sys, parplan.solver.cpsat, parplan.solver.pools.cpsat; print('pandas' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_the_pandas_helpers_still_work():
    pd = pytest.importorskip("pandas")
    model = cp_model.CpModel()
    xs = model.new_int_var_series("x", pd.Index([1, 2, 3]), 0, 4)
    assert isinstance(xs, pd.Series) and len(xs) == 3



def test_the_stage_model_solves_without_the_camel_case_aliases():
    """solver/cpsat.py's StageModel: the snake-case API as CpModel's, without the per-instance pre-PEP 8 aliases."""
    from parplan.solver.ortools_cp import StageModel, cp_model

    model = StageModel()
    assert hasattr(cp_model.CpModel(), "NewIntVar") and not hasattr(model, "NewIntVar")
    x = model.new_int_var(0, 10, "x")
    model.add(x >= 3)
    model.minimize(x)
    solver = cp_model.CpSolver()
    assert solver.solve(model) == cp_model.OPTIMAL and solver.value(x) == 3
