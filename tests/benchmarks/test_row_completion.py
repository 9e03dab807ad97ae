"""A published run whose as-mapped plan does not fit, judged at the planner's completion of the fields its source
leaves unstated (benchmarks/row_completion.py, issue 20 item 1): stated fields are pins, the unstated ones are what
the planner chose, the completion fits, and it is reproducible (deterministic mode)."""

from __future__ import annotations

import copy

import pytest

from benchmarks import runs
from benchmarks.row_completion import complete, completed_values, partial_plan
from parplan.costmodel.spec.assumptions import AssumptionsSpec
from parplan.costmodel.evaluation.evaluate import evaluate

# the Llama 3 paper's 405B rows (Grattafiori et al. 2024, arXiv 2407.21783, Table 4): TP 8, PP 16, micro-batch 1,
# FSDP; §3.3.2 names neither the recompute nor the virtual-stage count
LLAMA3_ROWS = ("llama3-paper-405b-8192gpu", "llama3-paper-405b-16384gpu", "llama3-paper-405b-16384gpu-cp16")


def _held(row_id: str) -> dict:
    return copy.deepcopy(next(r for r in runs.load_runs(runs.HELDOUT_DATA) if r["id"] == row_id))


def _spec(ex):
    return ex.spec.model_copy(update={"assumptions": AssumptionsSpec(preset="default", **ex.overrides)})


@pytest.fixture(scope="module")
def heldout_results():
    return runs.compare_all(runs.load_runs(runs.HELDOUT_DATA))


def test_unstated_fields_are_the_ones_the_source_leaves_out():
    ex = runs.express(_held("llama3-paper-405b-8192gpu"))
    assert ex.ok, ex.reason
    # the row states micro-batch 1, FSDP and the degrees; not the recompute, vpp (a mapping fact) or SP
    assert {"vpp", "schedule", "recompute", "recompute_layers", "sequence_parallel"} <= set(ex.unstated)
    assert "micro_batch_size" not in ex.unstated and "zero_stage" not in ex.unstated
    # the split "one layer fewer" rests on the unstated vpp: the split is completed too
    assert "stage_layers" in ex.unstated


def test_partial_plan_keeps_exactly_the_stated_fields():
    ex = runs.express(_held("llama3-paper-405b-8192gpu"))
    partial = partial_plan(ex.plan, ex.unstated)
    for f in partial.model_fields_set:
        assert f not in ex.unstated and getattr(partial, f) == getattr(ex.plan, f)
    assert {"tp", "pp", "dp", "cp", "micro_batch_size", "zero_stage"} <= partial.model_fields_set
    assert not {"vpp", "recompute", "stage_layers", "pipeline_layout", "num_microbatches"} & partial.model_fields_set


@pytest.mark.parametrize("row_id", LLAMA3_ROWS)
def test_a_run_that_ran_fits_at_its_completion_with_the_stated_fields_pinned(row_id):
    ex = runs.express(_held(row_id))
    spec = _spec(ex)
    assert not evaluate(spec, ex.plan).metrics.fits  # the as-mapped defaults (no recompute) do not fit
    c = complete(spec, ex.plan, ex.unstated)
    assert c.evaluation is not None, c.reason
    assert c.evaluation.metrics.fits
    plan = c.evaluation.plan
    for f in partial_plan(ex.plan, ex.unstated).model_fields_set:
        assert getattr(plan, f) == getattr(ex.plan, f), f  # a stated field is never completed
    chosen = completed_values(c)
    assert set(chosen) <= set(ex.unstated) | {"num_microbatches", "recompute_layers"}
    assert chosen["recompute"] == plan.recompute and "recompute" in c.fields


def test_completion_is_reproducible():
    ex = runs.express(_held("llama3-paper-405b-16384gpu"))
    a = complete(_spec(ex), ex.plan, ex.unstated)
    b = complete(_spec(ex), ex.plan, ex.unstated)
    assert a.evaluation.plan == b.evaluation.plan and a.status == b.status


def test_a_stated_stage_split_is_not_completed_and_says_why():
    # Megatron-Bridge 26.04.01, Llama 3 70B on 64 H100: the recipe's split (embedding / loss counted as layers) is
    # stated; only the sharding is not
    ex = runs.express(_held("bridge260401-h100-llama3-70b-64gpu-fp8"))
    assert ex.ok and ex.plan.pipeline_layout is not None
    assert "stage_layers" not in ex.unstated
    c = complete(_spec(ex), ex.plan, ex.unstated)
    assert c.evaluation is None and "stage split" in c.reason


def test_a_row_with_nothing_unstated_is_not_completed():
    row = _held("llama3-paper-405b-8192gpu")
    ex = runs.express(row)
    c = complete(_spec(ex), ex.plan, [])
    assert c.evaluation is None and c.reason


def test_no_heldout_run_that_ran_is_predicted_not_to_fit(heldout_results):
    done = [r for r in heldout_results if r["expressed"]]
    assert done
    assert [r["id"] for r in done if not r["fits"]] == []
    for r in done:
        if r["completed"]:  # every completed field printed is one the source leaves unstated
            assert set(r["completed"]) <= set(r["unstated"]) | {"num_microbatches", "recompute_layers"}, r["id"]


def test_without_completion_the_llama3_rows_do_not_fit(heldout_results):
    rows = [r for r in runs.load_runs(runs.HELDOUT_DATA) if r["id"] in LLAMA3_ROWS]
    plain = runs.compare_all(rows, complete_unfit=False)
    assert all(not r["fits"] and r["completed"] is None for r in plain)
    done = {r["id"]: r for r in heldout_results}
    assert all(done[r["id"]]["fits"] and done[r["id"]]["completed"] for r in plain)


def test_complete_all_judges_a_fitting_row_at_its_completion_too():
    # Megatron-Bridge 26.04.01, Llama 3 8B with Megatron-FSDP on 8 H100: fits as mapped; its table states neither
    # the recompute nor the vpp, so "all" completes them and "unfit" (the default) leaves the mapped defaults
    row = _held("bridge2511-h100-llama3-8b-8gpu-fp8cs-fsdp")
    default = runs.compare(row)
    assert default["fits"] and default["completed"] is None
    everything = runs.compare(row, complete_unfit="all")
    assert everything["fits"] and everything["completed"] is not None
    assert set(everything["completed"]) <= set(everything["unstated"]) | {"num_microbatches", "recompute_layers"}
    assert "stage_layers" not in everything["completed"]  # pp 1: no split to complete
    assert everything["step_time_s"] <= default["step_time_s"] * (1 + 1e-9)  # the best completion is no slower


def test_a_pin_the_planner_refuses_is_no_completion_with_its_reason():
    ex = runs.express(_held("llama3-paper-405b-8192gpu"))
    spec = _spec(ex)
    narrowed = spec.model_copy(update={"search": spec.search.model_copy(update={"micro_batch_size": [2]})})
    c = complete(narrowed, ex.plan, ex.unstated)  # the row states micro-batch 1; the search allows only 2
    assert c.evaluation is None and "not completed" in c.reason and "micro_batch_size" in c.reason
