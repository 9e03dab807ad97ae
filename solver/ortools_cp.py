"""OR-Tools' CP-SAT Python layer, imported at the cost of what the planner uses (issue 41).

``ortools.sat.python.cp_model`` imports pandas at its top (``import pandas as pd``, cp_model.py:62 in ortools 9.15)
for its pandas helpers (``new_int_var_series`` and the other ``*_series`` methods, cp_model.py:384-1400), which the
planner never calls: ~0.3 s of CPU in every process that solves (``python -X importtime``). :func:`_import_cp_model`
imports it with a stand-in for pandas while pandas is not loaded, then gives the module a proxy that imports the real
pandas on first use, so those helpers still work for a caller that uses them.
"""

from __future__ import annotations

import importlib
import sys
import threading
import types

_LOCK = threading.Lock()


class _Placeholder:
    """What the stand-in hands for any pandas name while cp_model's top level runs (its annotations name
    ``pd.Index`` and ``pd.Series``)."""


class _ImportStandIn(types.ModuleType):
    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Placeholder


class _LazyPandas(types.ModuleType):
    """cp_model's ``pd`` after its import: the real pandas, imported on the first attribute read."""

    def __getattr__(self, name: str):
        return getattr(importlib.import_module("pandas"), name)


def _import_cp_model() -> types.ModuleType:
    """``ortools.sat.python.cp_model`` without importing pandas (module docstring); as imported where it or pandas
    is loaded already."""
    with _LOCK:
        if "ortools.sat.python.cp_model" in sys.modules or "pandas" in sys.modules:
            return importlib.import_module("ortools.sat.python.cp_model")
        sys.modules["pandas"] = _ImportStandIn("pandas")
        try:
            module = importlib.import_module("ortools.sat.python.cp_model")
        finally:
            if isinstance(sys.modules.get("pandas"), _ImportStandIn):
                del sys.modules["pandas"]
        module.pd = _LazyPandas("pandas")
        return module


cp_model = _import_cp_model()


class StageModel(cp_model.CpModel):
    """A CpModel without the pre-PEP 8 aliases: ``CpModel.__init__`` binds a camel-case alias of each ``add_*``,
    ``new_*`` and ``clear_*`` method on every instance (cp_model.py ``_add_pre_pep8_methods`` in ortools 9.15), ~0.28 ms
    a model, and a warm request builds several stage models (solver/cpsat.py, which calls the snake-case names only)."""

    def _add_pre_pep8_methods(self) -> None:
        pass
