"""DualPipe's split of a rank between its two stages, a decision of the solver's tables.

A DualPipe rank runs stage u beside stage p-1-u; the all-to-all each pairing leaves exposed depends on how the
rank's layers split between them (costmodel/paired_overlap.py, ``ChoiceCosts.rank_exposed_s``). Every other
term of a rank depends on its totals only, so for each total the least-exposure split is the rank's best and the
tables carry it per unit and total (:func:`paired_exposure_table`); a DualPipeV rank splits as
``costmodel/dualpipev.py: chunk_split`` (its ``stage_layers`` entry is its total, the split not a plan field).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from parplan.costmodel import dualpipev
from parplan.costmodel.schedule import PipelineUnits, Schedule

if TYPE_CHECKING:  # pragma: no cover
    from parplan.costmodel.choice import ChoiceCosts
    from parplan.solver.tables import StageTable


def paired_exposure_table(costs: "ChoiceCosts", pipe: PipelineUnits, num_layers: int, k: int, even: bool,
                          time_unit_ns: int) -> tuple[np.ndarray | None, np.ndarray | None]:
    """(exposure, phase-0 layers) per unit and layer total 0..L: what a DualPipe/DualPipeV rank's pairing leaves
    of its all-to-all (``ChoiceCosts.rank_exposed_s``, costmodel/paired_overlap.py), in time units. A DualPipe
    rank's split between its two stages is the decision: the least exposure over every split that keeps a layer
    on each stage and the ``k`` dense layers on stage 0 (``even``: half the layers each); a DualPipeV rank
    splits as ``dualpipev.chunk_split`` (its ``stage_layers`` entry is the rank's total). (None, None) where
    nothing is exposed (other schedules, dense models, no all-to-all)."""
    c = costs.choice
    if not pipe.schedule.paired or costs.moe is None or costs.moe.a2a_s == 0.0:
        return None, None
    L, n = num_layers, pipe.count
    totals = np.arange(L + 1, dtype=np.int64)
    expo = np.zeros((n, L + 1), np.int64)
    first = np.zeros((n, L + 1), np.int64)
    for u in range(n):
        dense = k if u == 0 else 0
        if pipe.schedule is Schedule.DUALPIPEV:
            la = np.array([dualpipev.chunk_split(int(l), dense)[0] if l else 0 for l in totals], np.int64)
        else:
            la = np.arange(L + 1, dtype=np.int64)[None, :]  # (1, L+1) candidate phase-0 layers per total (rows)
        lb = totals[:, None] - la if la.ndim == 2 else totals - la
        d_a = np.minimum(dense, la)
        seconds = costs.rank_exposed_s(u, (d_a, la - d_a), (dense - d_a, lb - (dense - d_a)))
        units = np.rint(np.asarray(seconds, float) * (1e9 / time_unit_ns)).astype(np.int64)
        if la.ndim == 1:
            expo[u], first[u] = units, la
            continue
        ok = (la == totals[:, None] // 2) if even else (la >= max(dense, 1)) & (lb >= 1)
        units = np.where(ok, units, np.iinfo(np.int64).max)
        best = units.argmin(axis=1)
        first[u] = best
        expo[u] = np.where(ok.any(axis=1), units[totals, best], 0)
    return expo, first


def pair_split(t: "StageTable", u: int, layers):
    """The phase-0 stage's layers of DualPipe rank ``u`` at ``layers`` in all (ints or an array): the split of least
    exposure where the table has one (:func:`paired_exposure_table`), else half (ceil; ``even``: floor)."""
    if t.pair_first is not None:
        return t.pair_first[u, np.clip(layers, 0, t.num_layers)]
    return layers // 2 if t.layers_fixed is not None else (layers + 1) // 2
