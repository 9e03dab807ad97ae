"""The fixed (spec, plan) cases the export tests share: tests/data/exports/cases/*.yaml, each a spec with a
``plan:`` section (resolved by the cost model's plan defaults).

Used by test_export.py (golden files), test_export_megatron.py, test_export_rules.py and
test_export_roundtrip.py.
"""

from __future__ import annotations

from pathlib import Path

from parplan.library.evaluation import evaluate_spec
from parplan.library.spec_io import load_spec_file
from parplan.costmodel.spec.spec import Plan, Spec

DATA = Path(__file__).parent / "data" / "exports"
CASES_DIR = DATA / "cases"
CASE_NAMES = sorted(p.stem for p in CASES_DIR.glob("*.yaml"))


def load_case(name: str) -> tuple[Spec, Plan]:
    spec = load_spec_file(CASES_DIR / f"{name}.yaml")
    return spec, evaluate_spec(spec).plan
