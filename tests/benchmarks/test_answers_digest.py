"""benchmarks/answers_digest.py ``--compare-plans``: which answers' plans changed, whatever else (a margin, the stats)
changed with them, and ``--no-memory-band``'s scenarios."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import answers_digest  # noqa: E402


def _answer(*tps: int, margin=None) -> dict:
    return {"status": "OPTIMAL", "memory_margin_gib": margin, "stats": {"choices_searched": len(tps)},
            "plans": [{"plan": {"tp": tp}, "metrics": {"step_time_s": float(tp)}} for tp in tps]}


def test_compare_plans_counts_plan_lists_and_best_plans(tmp_path, capsys):
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    old.write_text(json.dumps({"a": _answer(1, 2), "b": _answer(1, 2), "c": _answer(1, 2)}))
    # a: only the margin and stats differ; b: the runner-up changed; c: the best changed
    new.write_text(json.dumps({"a": _answer(1, 2, margin=6.0), "b": _answer(1, 4), "c": _answer(2, 4)}))
    assert answers_digest.compare_plans(old, new) == 0
    out = capsys.readouterr().out
    assert "answers whose plan list changes: 2 of 3; whose best plan changes: 1" in out
    assert "1.0000 -> 2.0000 s (+100.00 %)" in out
