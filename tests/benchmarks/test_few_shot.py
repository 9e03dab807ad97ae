"""The few-shot calibration benchmark (benchmarks/few_shot.py): on a job whose "measured" step times the cost model
makes itself with one knob moved (as tests/library/test_calibrate.py does), calibrating on one configuration
recovers the others, and the subsets are every combination of k configurations."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

pytest.importorskip("scipy")

from benchmarks import few_shot, ranking  # noqa: E402
from benchmarks.runs import load_runs  # noqa: E402
from parplan.costmodel.spec.assumptions import resolve_assumptions  # noqa: E402
from parplan.library.evaluation import evaluate_spec  # noqa: E402

MOVED = {"matmul_efficiency_ampere": 0.70}  # default 0.8285 (costmodel/spec/calibration.py)


def _job():
    rows = [r for r in load_runs(ranking.default_data()[0]) if r["id"].startswith("korthikanti2022-22b")]
    (job,) = ranking.evaluate_jobs(ranking.collect(rows))
    for c in job["configs"]:  # "measured": the model's own step with the knob moved
        spec = few_shot.config_run(c).spec
        a = resolve_assumptions(spec.assumptions).model_copy(update=MOVED)
        c["measured"] = c["tokens"] / evaluate_spec(spec, None, assumptions=a).metrics.step_time_s
    return job


def test_one_run_recovers_the_other_under_a_moved_knob():
    job = _job()
    (line,) = few_shot.job_few_shot(job, ks=(1, 2))  # two configurations: k = 2 leaves none to predict
    assert line["k"] == 1 and line["subsets"] == 2
    assert line["before"] > 3.0  # the moved knob costs a few percent on these GEMM-bound rows
    assert line["after"] < line["before"] / 3


def test_render_names_every_k():
    job = _job()
    out = io.StringIO()
    summary = few_shot.render_few_shot([{**job, "few_shot": few_shot.job_few_shot(job)}], out)
    assert set(summary) == {1}
    assert "k = 2: no job has more than 2 configurations" in out.getvalue()
    assert "k = 3: no job has more than 3 configurations" in out.getvalue()
