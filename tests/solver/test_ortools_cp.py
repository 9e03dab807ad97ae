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

