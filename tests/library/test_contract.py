"""The answers' prediction bands in the CONTRACT dicts (library/contract.py): every entry's ``band``, the ties against
the first plan, the ``band_source``, and the way back from the dict and through the proto (wire/convert.py)."""

from __future__ import annotations

from parplan.costmodel.evaluation.prediction_band import overlaps, plan_band
from parplan.library.contract import evaluation_to_dict, plan_result_from_dict, plan_result_to_dict
from parplan.library.evaluation import evaluate_spec
from parplan.library.spec_io import spec_from_data
from parplan.solver.cpsat import SolverControls
from parplan.solver.planner import optimize

SPEC = {"model": {"preset": "llama3-8b"}, "training": {"seq_len": 8192, "global_batch_size": 64, "precision": "bf16"},
        "cluster": {"gpu": "H100-SXM-80GB", "num_gpus": 8}}


def _result(top_k: int = 6):
    return optimize(spec_from_data(SPEC), top_k=top_k, pareto="memory",
                    controls=SolverControls(time_limit_s=60, deterministic=True))


def test_every_entry_has_its_band_and_ties_are_overlaps_with_the_first():
    result = _result()
    data = plan_result_to_dict(result)
    assert data["band_source"] == result.band_source.model_dump(mode="json")
    best = plan_band(result.plans[0], result.band_source)
    for entries, evaluations in ((data["plans"], result.plans), (data["pareto"], result.pareto)):
        for entry, e in zip(entries, evaluations):
            band = plan_band(e, result.band_source)
            assert entry["band"] == {**band.model_dump(mode="json"), "ties_best": overlaps(band, best)}
    assert data["plans"][0]["band"]["ties_best"]


def test_bands_come_back_from_the_dict_and_through_the_proto():
    from parplan.wire import convert

    result = _result(3)
    data = plan_result_to_dict(result)
    assert plan_result_from_dict(data) == result
    back = convert.plan_result_dict(convert.plan_response(data, {}))
    assert back["band_source"] == data["band_source"]
    assert [e["band"] for e in back["plans"]] == [e["band"] for e in data["plans"]]


def test_evaluate_json_carries_the_band_only_with_a_source():
    spec = spec_from_data({**SPEC, "plan": {"tp": 1, "pp": 1, "dp": 8}})
    evaluation = evaluate_spec(spec)
    assert "band_source" not in evaluation_to_dict(evaluation) and "band" not in evaluation_to_dict(evaluation)["plans"][0]
    from parplan.costmodel.evaluation.prediction_band import band_source

    data = evaluation_to_dict(evaluation, source=band_source(spec))
    assert data["plans"][0]["band"]["step_time_s_high"] > evaluation.metrics.step_time_s > data["plans"][0]["band"]["step_time_s_low"]
