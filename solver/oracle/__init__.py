"""The exact per-choice stage solver: ``--method exhaustive`` and the oracle the CP-SAT model is tested against.

For one choice (a :class:`StageTable`) and a memory cap it finds the least objective
``U = M·max_u time_u + S·Σ_u time_u + W·max_u dp_u`` over every layer split and recompute count the table
allows, exactly (S weighs the uneven-stage bubble, ``costmodel/schedules/bubble.py``; per-layer times are the same on
every unit, so Σ_u time_u is one constant over the splits unless each unit's least recompute varies with it):

* :mod:`.recompute`: a unit's least time at ``l`` layers takes the fewest recomputed layers that fit the cap
  (recomputation adds time and saves memory; cpsat-modeling.md §2.7), so ``time_u(l)`` and ``dp_u(l)`` are
  nondecreasing in ``l``.
* :mod:`.per_stage`: a slowest-unit time τ and DP time δ admit a split iff every unit fits its least layer
  count and the units' largest counts under (τ, δ) add up to the model's layers. The least such τ is the
  (K + n)-th smallest of all units' times pooled (K: grid steps to hand out beyond the minima), the least δ
  at a τ follows by bisection, and only the τ at which some unit's count grows can lower U further: they are
  walked in order until ``M·τ`` alone reaches the best U. Where Σ_u time_u varies, each (τ, δ) also takes the
  least Σ under the units' count caps, a min-plus knapsack (:func:`.knapsack.least_sum`, over the steps
  beyond each unit's recompute-free count), and δ walks up at each τ through the values at which a DP-bound
  unit's count grows (:func:`.per_stage.walk_with_sums`; τ ranges that cannot beat the best U are passed over
  by galloping). Tables too large to pool: :mod:`.bisection` (or, where the sum varies, the pooled walk within
  the memory budget); knapsacks too large to form at once: the same recursion over the counts the Lagrangian
  bound leaves open (:mod:`.sum_windows`), in blocks of totals (:mod:`.blocked_sum`). DualPipe tables with
  whole-layer recompute, and summed walks whose tables would not fit the memory budget, still take the CP-SAT
  model's answer (:mod:`.fallback`).
* :mod:`.grouped`: ``first_last``: the middle units share a count; every (first, middle) pair is enumerated.
  ``even``: the split is fixed; each unit takes its least recompute.
* :mod:`.solve`: ``uniform_recompute``: every stage recomputes the same count r; each r is solved as a
  fixed-recompute table.

Ties: among splits of equal U the least peak memory wins (bisection on the cap with U held), then the most
balanced split (middle stages first; :mod:`.levels`). The brute force over every assignment of tiny tables
lives with the tests (``tests/brute_force.py``).
"""

from parplan.solver.oracle.knapsack import KNAPSACK_LIMIT, LEAST_SUM_NONE, free_steps, least_sum
from parplan.solver.oracle.levels import fill_levels, fill_order, least_true
from parplan.solver.oracle.per_stage import POOLED_LIMIT
from parplan.solver.oracle.recompute import INF, UnitCosts
from parplan.solver.oracle.solve import RowSolution, least_peak, peak_mib, solve_table

__all__ = ["INF", "KNAPSACK_LIMIT", "LEAST_SUM_NONE", "POOLED_LIMIT", "RowSolution", "UnitCosts", "fill_levels",
           "fill_order", "free_steps", "least_peak", "least_sum", "least_true", "peak_mib", "solve_table"]
