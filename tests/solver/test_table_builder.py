"""The tables the solver builds per choice (solver/table_builder.py) against the evaluator: interleaved stages with an
MTP module.
"""

from __future__ import annotations

import pytest

from tests import moe_schedule_cases as moe_dims


@pytest.mark.parametrize("overlap", [False, True])
def test_interleaved_mtp_tables_match_the_evaluator(overlap):
    """The solver's tables reused 1F1B's costs for interleaved choices, whose MTP activations are held for the
    last stage's in-flight micro-batches: 1 under 1F1B, ((v-1)p + 1)/v = 1.5 under interleaving (p = v = 2), so
    the table's peak was 0.5 MTP layer's activations short of the evaluator's; with the overlap, one more."""
    from parplan.solver.problem import Problem, assignment_of
    from parplan.solver.assignment_check import evaluate_assignment
    model = dict(moe_dims.MOE, num_mtp_layers=1)
    spec = moe_dims.spec(model, gpus=4, gbs=16, search=dict(pp=[2], tp=[1], ep=[2], schedules=["interleaved"], vpp=[2],
                                                    micro_batch_size=[1], zero_stages=[1], recompute=["none"],
                                                    moe_a2a_overlap=[overlap]))
    problem = Problem.build(spec)
    assert problem.choices
    for i in range(len(problem.choices)):
        t = problem.table(i)
        x = assignment_of(t, [4, 4], [0, 0])
        ev = problem.evaluate(problem.plan(i, x))
        _, peak_kib = evaluate_assignment(t, x)
        assert peak_kib == pytest.approx(ev.metrics.peak_memory_gib * 2**20, abs=64)  # KiB rounding of the terms


def test_mean_bound_at_forms_the_same_bound_as_the_parts_at_every_m_and_scale():
    """table_builder.mean_bound_at (Problem.mean_bound: the scaled part kept per parts) equals weight·lb_time of
    MeanParts.at, bit for bit, whatever m and whichever parts were read before under the same dict; the dict is one
    scale's (a problem's), so a new dict per scale."""
    import random

    from parplan.solver.table_builder import MeanParts, mean_bound_at
    from parplan.solver.tables import Scale

    rng = random.Random(41)
    parts = [MeanParts(rng.uniform(1e-4, 2.0), pp, rng.uniform(0.0, 3.0), rng.uniform(0.0, 0.5), spu, pp // spu)
             for pp, spu in ((1, 1), (2, 1), (4, 2), (8, 1), (16, 2)) for _ in range(4)]
    for scale in (Scale(1, 1 << 14), Scale(4, 1 << 10), Scale(16, 1 << 6)):
        kept: dict = {}
        for _ in range(300):
            p, m, layers = rng.choice(parts), rng.randint(1, 512), 80
            weight, lb = p.at(m, scale, layers)
            assert mean_bound_at(p, m, scale, layers, kept) == float(weight) * lb
        assert len(kept) <= len(parts)
