"""docs/solver.md claim: on a large-vocabulary model, uneven first/last stages beat every even split."""

from pathlib import Path

from parplan.library.spec_io import load_spec
from parplan.solver.planner import optimize

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "uneven-stages-large-vocab.yaml"


def test_uneven_stages_beat_every_even_split():
    spec = load_spec(EXAMPLE)
    uneven = optimize(spec, method="exhaustive")
    even_spec = spec.model_copy(update={"search": spec.search.model_copy(update={"uneven_stages": False})})
    even = optimize(even_spec, method="exhaustive")
    assert uneven.status == even.status == "OPTIMAL"
    best_uneven, best_even = uneven.plans[0], even.plans[0]
    assert len(set(best_uneven.plan.stage_layers)) > 1
    assert len(set(best_even.plan.stage_layers)) == 1
    # the even optimum is the best of every even split; the uneven plan beats it by more than 15 % (19.5 % under
    # the calibration fitted with the MLPerf v5.1 rows, 21 % before: docs/solver.md states the measured figure)
    assert best_uneven.metrics.step_time_s < 0.85 * best_even.metrics.step_time_s
    # the last stage (LM head) holds fewer layers than the middle stages
    assert best_uneven.plan.stage_layers[-1] < best_uneven.plan.stage_layers[1]
