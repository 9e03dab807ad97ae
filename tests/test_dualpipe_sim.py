"""DualPipe and DualPipeV's paired-chunk exposure (costmodel/paired_overlap.py) against a discrete-event simulation
of the upstream step orders (tests/dualpipe_sim.py), over random per-chunk compute and all-to-all times with
lopsided splits (a stage with no all-to-all beside one with much, compute split unevenly within a rank)."""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from dualpipe_sim import simulate_dualpipe, simulate_dualpipev
from parplan.costmodel.assumptions import Assumptions
from parplan.costmodel.paired_overlap import (ChunkWork, dualpipe_rank_exposed_s, dualpipev_rank_exposed_s,
                                              pair_exposed_s, step_order_counts)
from parplan.costmodel.schedule import PipelineUnits, Schedule, stage_bubble_weights

FWD_SHARE = 1 / 3  # backward_to_forward_ratio 2


@st.composite
def pipelines(draw):
    """(schedule, per-stage compute C, per-stage all-to-all X, micro-batches m, weight-gradient share w)."""
    schedule = draw(st.sampled_from(["dualpipe", "dualpipev"]))
    ranks = draw(st.sampled_from([2, 4, 6, 8]))
    stages = ranks if schedule == "dualpipe" else 2 * ranks
    m = 2 * ranks * draw(st.integers(1, 4))  # legality: DualPipe even m >= 2·pp, DualPipeV m >= 2·pp
    C = [draw(st.floats(0.1, 2.0)) for _ in range(stages)]
    X = [c * draw(st.sampled_from([0.0, 0.3, 0.8, 1.5, 3.0])) for c in C]  # all-to-all : compute, 0 = dense stage
    w = draw(st.sampled_from([0.0, 0.3, 0.5]))
    return schedule, C, X, m, w


def _rows(schedule: str, C: list[float], X: list[float], m: int) -> list[float]:
    """The cost model's per-micro-batch rank rows (costmodel/evaluate.py schedule_rows + paired_exposure)."""
    if schedule == "dualpipe":
        p = len(C)
        lo = [min(r, p - 1 - r) for r in range(p)]
        return [(C[r] + C[p - 1 - r]) / 2 + dualpipe_rank_exposed_s(
            p, r, m, ChunkWork(C[lo[r]], X[lo[r]]), ChunkWork(C[p - 1 - lo[r]], X[p - 1 - lo[r]]), FWD_SHARE)
            for r in range(p)]
    P = len(C) // 2
    return [C[r] + C[2 * P - 1 - r] + dualpipev_rank_exposed_s(
        P, r, m, ChunkWork(C[r], X[r]), ChunkWork(C[2 * P - 1 - r], X[2 * P - 1 - r]), FWD_SHARE) for r in range(P)]


def _closed_form_step(schedule: str, C: list[float], X: list[float], m: int, w: float) -> float:
    """``m·t_max + bubble`` as costmodel/evaluate.py step_time forms it (no DP term)."""
    rows = _rows(schedule, C, X, m)
    a = Assumptions(backward_to_forward_ratio=(1 - FWD_SHARE) / FWD_SHARE, zb_weight_grad_fraction=w)
    beta = PipelineUnits(Schedule(schedule), len(rows)).bubble_beta(a)
    w_max, w_sum = stage_bubble_weights(beta, len(rows), a.uneven_stage_bubble)
    return m * max(rows) + w_max * max(rows) + w_sum * sum(rows)


def _simulate(schedule, C, X, m, w):
    return (simulate_dualpipe if schedule == "dualpipe" else simulate_dualpipev)(C, X, m, FWD_SHARE, w)


def test_pair_exposure_by_hand():
    """F of a stage with 3 dense layers (compute 3, no all-to-all) beside B of a stage with 27 MoE layers
    (compute 27·1.2 = 32.4, all-to-all 27·0.8 = 21.6, f = 1/3): the MoE backward's 10.8 of all-to-all beside
    1 of dense forward compute leaves 9.8; the dense forward has nothing to hide. The other pairing: the MoE
    forward's 10.8 beside the dense backward's 2 leaves 8.8, the dense backward nothing."""
    dense, moe = ChunkWork(3.0, 0.0), ChunkWork(32.4, 21.6)
    assert pair_exposed_s(dense, moe, FWD_SHARE) == pytest.approx(10.8 - 1.0)
    assert pair_exposed_s(moe, dense, FWD_SHARE) == pytest.approx(10.8 - 2.0)
    # balanced (15 MoE layers each): forward's 6 beside the other's backward 12 and backward's 6 beside 6: none
    half = ChunkWork(18.0, 12.0)
    assert pair_exposed_s(half, half, FWD_SHARE) == 0.0


def test_step_order_counts_cover_every_chunk():
    """Every rank runs m/2 forwards and m/2 backwards of each phase (DualPipe; DualPipeV: m of each chunk)."""
    for n in (1, 2, 3, 4):
        for h in range(n):
            for main, total in (((16 // 2) - 2 * n + h + 1, 8), (16 - 2 * n + h + 1, 16)):
                k = step_order_counts(n, h, main, h == n - 1)
                assert k["F0"] + k["FB01"] == total and k["B1"] + k["FB01"] == total
                assert k["F1"] + k["FB10"] == total and k["B0"] + k["FB10"] == total


@settings(max_examples=60, deadline=None)
@given(pipelines())
def test_rank_busy_time_is_the_step_orders(case):
    """The closed form's m·(rank row) is exactly the simulated rank's busy time (the sum of its operations: the
    pairs' exposure, the lone chunks' full all-to-all, all the compute), lopsided splits included."""
    schedule, C, X, m, w = case
    sim = _simulate(schedule, C, X, m, w)
    for row, busy in zip(_rows(schedule, C, X, m), sim.busy_s):
        assert m * row == pytest.approx(busy, rel=1e-9)


def test_lopsided_split_costs_more_in_the_simulation_and_the_closed_form():
    """DualPipe on 4 ranks, rank pair (0, 3) holding [3 dense | 27 MoE] vs [15 | 15] MoE layers (per-layer compute
    1 dense, 1.2 MoE; MoE all-to-all 0.8 per layer), ranks 1 and 2 [16 | 15]: both the simulation and the closed
    form price the lopsided split slower."""
    def case(first, last, first_dense):
        C = [first_dense * 1.0 + (first - first_dense) * 1.2, 16 * 1.2, 15 * 1.2, last * 1.2]
        X = [(first - first_dense) * 0.8, 16 * 0.8, 15 * 0.8, last * 0.8]
        return C, X
    m = 16
    lop, bal = case(3, 27, 3), case(15, 15, 3)
    sim_lop, sim_bal = _simulate("dualpipe", *lop, m, 0.0).step_s, _simulate("dualpipe", *bal, m, 0.0).step_s
    cf_lop, cf_bal = _closed_form_step("dualpipe", *lop, m, 0.0), _closed_form_step("dualpipe", *bal, m, 0.0)
    assert sim_lop > sim_bal * 1.05
    assert cf_lop > cf_bal * 1.05


@pytest.mark.xfail(strict=True, reason=(
    "issue 19 acceptance band not met: over these draws the closed form's step (m·t_max + the DualPipe Table 2 "
    "bubble over rank rows with Alpa's uneven weights) is 0.787-1.156 of the simulated step; with no all-to-all "
    "at all 0.934-1.163 (python tests/test_dualpipe_sim.py). The rank busy time matches exactly "
    "(test_rank_busy_time_is_the_step_orders): what is missing is the fill and drain on the critical path -- "
    "the bubble of unequal chunks within a rank, and lone chunks' exposed all-to-all delaying the ranks that wait "
    "on them -- which needs a chunk-level bubble in costmodel/schedule.py and the solver's objective"))
@settings(max_examples=80, deadline=None)
@given(pipelines())
def test_closed_form_step_within_band_of_simulation(case):
    schedule, C, X, m, w = case
    assume(sum(C) > 0)
    sim = _simulate(schedule, C, X, m, w).step_s
    closed = _closed_form_step(schedule, C, X, m, w)
    assert closed <= sim * 1.05
    assert closed >= sim * 0.98


def _band(draws: int = 500, seed: int = 0, comm: bool = True) -> tuple[float, float]:
    """(least, largest) closed form / simulated step over ``draws`` seeded draws from :func:`pipelines`' ranges
    (``comm`` False: no all-to-all at all, the bubble formula alone)."""
    import random
    rng = random.Random(seed)
    lo, hi = float("inf"), 0.0
    for _ in range(draws):
        schedule = rng.choice(["dualpipe", "dualpipev"])
        ranks = rng.choice([2, 4, 6, 8])
        stages = ranks if schedule == "dualpipe" else 2 * ranks
        m = 2 * ranks * rng.randint(1, 4)
        C = [rng.uniform(0.1, 2.0) for _ in range(stages)]
        X = [c * rng.choice([0.0, 0.3, 0.8, 1.5, 3.0]) * comm for c in C]
        w = rng.choice([0.0, 0.3, 0.5])
        ratio = _closed_form_step(schedule, C, X, m, w) / _simulate(schedule, C, X, m, w).step_s
        lo, hi = min(lo, ratio), max(hi, ratio)
    return lo, hi


if __name__ == "__main__":  # python tests/test_dualpipe_sim.py: the measured band of the xfail above
    import sys
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
    for with_comm in (True, False):
        low, high = _band(comm=with_comm)
        print(f"closed form / simulated step over 500 draws, all-to-all {with_comm}: {low:.3f} .. {high:.3f}")
