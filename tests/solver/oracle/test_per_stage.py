"""The summed-time walk's gallop over τ ranges that cannot beat the best U (``solver/oracle/per_stage.py``,
:class:`PassedTaus`): on pressured 8-stage tables of 40 to 900 layers, and on DP-heavy copies of them, the walk
answers as the step-by-step walk does (same U, same assignment), visiting only τ the step-by-step walk visits and
fewer of them. Copies with the summed times weighed 10 and 100 times (as fewer micro-batches would) walk
further past their first best."""

from __future__ import annotations

from dataclasses import replace
from unittest import mock

import numpy as np
import pytest

from parplan.solver.oracle import per_stage, solve_table
from tests.solver.oracle.test_blocked_sum import _tables


def _step_by_step(self, tau, last_tau, best):
    return tau


def _visits(t, cap, gallop: bool):
    """(solution, τ visited by the summed walk)."""
    visited = []
    walk = per_stage._walk_delta

    def counted(solve, pool, tau, *args):
        visited.append(tau)
        return walk(solve, pool, tau, *args)

    with mock.patch.object(per_stage, "_walk_delta", counted):
        if gallop:
            return solve_table(t, cap), visited
        with mock.patch.object(per_stage.PassedTaus, "first_to_visit", _step_by_step):
            return solve_table(t, cap), visited


@pytest.mark.parametrize("share", [0.3, 0.5, 0.7])
def test_the_gallop_answers_as_the_step_by_step_walk(share):
    fewer = 0
    for t, cap in _tables(share, (("1f1b", 40), ("1f1b", 400), ("zb-h1", 900)), pp=8):
        n = t.num_units
        heavy = replace(t, dp_layer=t.dp_layer + (t.t_layer * 0.5).astype(np.int64),
                        dp_const=t.dp_const + (t.t_const * 0.1 * np.arange(1, n + 1)).astype(np.int64))
        for table in (t, heavy, replace(t, S=t.S * 10), replace(t, S=t.S * 100)):  # Σ weighed up: longer walks
            want, steps = _visits(table, cap, gallop=False)
            got, gallops = _visits(table, cap, gallop=True)
            assert (got.U, got.x) == (want.U, want.x)
            assert set(gallops) <= set(steps)
            fewer += len(gallops) < len(steps)
    assert fewer  # the gallop passed over some τ
