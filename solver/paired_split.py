"""DualPipe's split of a rank between its two stages, a decision of the solver's tables.

A DualPipe rank runs stage u beside stage p-1-u; the all-to-all each pairing leaves exposed depends on how the
rank's layers split between them (costmodel/schedules/paired_overlap.py, ``ChoiceCosts.rank_exposed_s``). Every other
term of a rank depends on its totals only, so for each total the least-exposure split is the rank's best and the
tables carry it per unit and total (:func:`paired_exposure_table`); a DualPipeV rank splits as
``costmodel/schedules/dualpipev.py: chunk_split`` (its ``stage_layers`` entry is its total, the split not a plan field).
With whole-layer recompute a split also decides how many of the rank's stages hold a recompute working set
(the larger stage recomputes first), so such tables price every split and the assignment carries each rank's
(:attr:`Assignment.first`; :func:`rank_split` places the layers and the recompute on the two stages).
"""

from __future__ import annotations

import numpy as np

from parplan.costmodel.evaluation.choice import ChoiceCosts
from parplan.costmodel.schedules import dualpipev
from parplan.costmodel.schedules.schedule import PipelineUnits, Schedule
from parplan.solver.tables import Assignment, StageTable


ILLEGAL = -1  # a split the rank cannot take (a stage without layers, the dense layers off stage 0)


def paired_exposure_table(costs: ChoiceCosts, pipe: PipelineUnits, num_layers: int, k: int, even: bool,
                          time_unit_ns: int, every_split: bool = False):
    """(exposure, phase-0 layers) per unit and layer total 0..L: what a DualPipe/DualPipeV rank's pairing leaves
    of its all-to-all (``ChoiceCosts.rank_exposed_s``, costmodel/schedules/paired_overlap.py), in time units. A DualPipe
    rank's split between its two stages is the decision: the least exposure over every split that keeps a layer
    on each stage and the ``k`` dense layers on stage 0 (``even``: half the layers each); a DualPipeV rank
    splits as ``dualpipev.chunk_split`` (its ``stage_layers`` entry is the rank's total). (None, None, None) where
    nothing is exposed (other schedules, dense models, no all-to-all). With ``every_split`` (DualPipe with
    whole-layer recompute, where a split also decides how many stages hold a recompute working set) the third
    value is every split's exposure, ``[u, total, phase-0 layers]``, :data:`ILLEGAL` where the rank cannot take
    it; else None."""
    c = costs.choice
    if not costs.paired_exposure:
        return None, None, None
    if pipe.schedule is Schedule.DUALPIPE and c.pp >= 2 and pipe.count * (num_layers + 1) ** 2 <= VECTOR_TABLE_MAX:
        return dualpipe_exposure_table(costs, pipe.count, num_layers, k, even, time_unit_ns, every_split)
    return exposure_table_by_rank(costs, pipe, num_layers, k, even, time_unit_ns, every_split)


def exposure_table_by_rank(costs: ChoiceCosts, pipe: PipelineUnits, num_layers: int, k: int, even: bool,
                           time_unit_ns: int, every_split: bool = False):
    """:func:`paired_exposure_table` rank by rank (``ChoiceCosts.rank_exposed_s``): DualPipeV's, and the reference
    the vectorized DualPipe table (:func:`dualpipe_exposure_table`) equals (tests/solver/test_paired_split.py)."""
    L, n = num_layers, pipe.count
    totals = np.arange(L + 1, dtype=np.int64)
    expo = np.zeros((n, L + 1), np.int64)
    first = np.zeros((n, L + 1), np.int64)
    every = np.full((n, L + 1, L + 1), ILLEGAL, np.int64) if every_split and pipe.stages_per_unit == 2 else None
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
        if every is not None:
            every[u] = np.where(ok, units, ILLEGAL)
        units = np.where(ok, units, np.iinfo(np.int64).max)
        best = units.argmin(axis=1)
        first[u] = best
        expo[u] = np.where(ok.any(axis=1), units[totals, best], 0)
    return expo, first, every


RANK_CLASSES_FROM = 5  # ranks (p/2) from which dualpipe_exposure_table prices the two classes of rank once
# every rank at once holds a few (ranks, L+1, L+1) arrays where rank by rank holds one rank's: past this many entries
# (32 MiB an int64 array) the table is built rank by rank, so a deep MoE model's table is no larger than before
VECTOR_TABLE_MAX = 1 << 22


def dualpipe_exposure_table(costs: ChoiceCosts, n: int, L: int, k: int, even: bool, time_unit_ns: int,
                            every_split: bool):
    """:func:`paired_exposure_table` of a DualPipe choice, every rank at once (axes: rank, total, phase-0 layers;
    ``ChoiceCosts.dualpipe_ranks_exposed_s``): element-wise the same floats and integers as rank by rank."""
    totals = np.arange(L + 1, dtype=np.int64)[None, :, None]
    la = np.arange(L + 1, dtype=np.int64)[None, None, :]  # candidate phase-0 layers per total
    lb = totals - la
    # two classes of rank: rank 0 holds the k dense layers on its phase-0 stage, every other rank none, so the
    # ranks past 0 do the same work at every split and share their pairings' exposure (rank_class: worth its
    # gathers from RANK_CLASSES_FROM ranks on)
    rank_class = np.minimum(np.arange(n), 1) if n >= RANK_CLASSES_FROM else np.arange(n)
    dense_cls = np.where(np.arange(int(rank_class.max()) + 1) == 0, k, 0).astype(np.int64).reshape(-1, 1, 1)
    d_a = np.minimum(dense_cls, la)
    seconds = costs.dualpipe_ranks_exposed_s((d_a, la - d_a), (dense_cls - d_a, lb - (dense_cls - d_a)),
                                             rank_class if n >= RANK_CLASSES_FROM else None)
    dense = dense_cls[rank_class]
    units = np.rint(np.asarray(seconds, float) * (1e9 / time_unit_ns)).astype(np.int64)
    units = np.broadcast_to(units, (n, L + 1, L + 1))
    ok = np.broadcast_to((la == totals // 2) if even else (la >= np.maximum(dense, 1)) & (lb >= 1), units.shape)
    every = np.where(ok, units, ILLEGAL) if every_split else None
    units = np.where(ok, units, np.iinfo(np.int64).max)
    first = units.argmin(axis=2)
    expo = np.where(ok.any(axis=2), np.take_along_axis(units, first[:, :, None], axis=2)[:, :, 0], 0)
    return expo.astype(np.int64), first.astype(np.int64), every


def pair_split(t: StageTable, u: int, layers):
    """The phase-0 stage's layers of DualPipe rank ``u`` at ``layers`` in all (ints or an array): the split of least
    exposure where the table has one (:func:`paired_exposure_table`), else half (ceil; ``even``: floor)."""
    if t.pair_first is not None:
        return t.pair_first[u, np.clip(layers, 0, t.num_layers)]
    return layers // 2 if t.layers_fixed is not None else (layers + 1) // 2


def split_exposure(t: StageTable, u: int, layers: int, first: int | None) -> int:
    """Unit ``u``'s exposure at ``layers`` with ``first`` layers on its phase-0 stage (None: the least-exposure
    split); 0 where the table prices none."""
    if t.t_pair is None:
        return 0
    if first is None or t.t_split is None:
        return int(t.t_pair[u, layers])
    return int(t.t_split[u, layers, first])


def rank_split(t: StageTable, u: int, layers: int, recompute: int, dense: int,
               first: int | None = None) -> tuple[int, int, int, int]:
    """(layers, recomputed) of the two stages of DualPipe rank ``u`` -- stage u first, then stage p-1-u.

    The split: ``first`` (the assignment's), else the least exposed all-to-all's where the table prices one (:func:`pair_split`); else the rank's
    costs depend only on its totals except the recompute working set, held by each stage that recomputes: a
    middle rank splits its layers evenly, and the rank of stages 0 and p-1 keeps the model's leading dense layers
    alone on stage 0. Recompute: a middle rank recomputes on its larger stage first (the first on a tie); rank 0 recomputes its MoE
    layers on stage p-1 first (onto stage 0 only once all its dense layers are: assignment_violations); uniform
    recompute gives both stages the same count."""
    k = t.k_dense
    per_stage = (recompute + dense) // 2 if t.uniform_recompute else None
    if first is not None:
        la = first
    elif t.pair_first is not None:
        la = int(pair_split(t, u, layers))
    elif t.layers_fixed is not None:
        la = layers // 2
    elif u == 0 and k:
        la = max(k, per_stage or 0)
    else:
        la = (layers + 1) // 2
    lb = layers - la
    if per_stage is not None:
        return la, per_stage, lb, per_stage
    if u == 0 and k:
        rb = min(recompute, lb)
        return la, dense + recompute - rb, lb, rb
    if lb > la:  # the larger stage first: one working set for as many recomputed layers as can share it
        rb = min(recompute, lb)
        return la, recompute - rb, lb, rb
    ra = min(recompute, la)
    return la, ra, lb, recompute - ra


def first_of(x: Assignment, u: int) -> int | None:
    """Unit ``u``'s phase-0 stage layers in ``x`` (None: the table's least-exposure split)."""
    return None if x.first is None else int(x.first[u])


def pair_split_violations(t: StageTable, x: Assignment) -> list[str]:
    """The recompute a least-exposure DualPipe split cannot hold: uniform recompute on a stage with fewer layers,
    rank 0's MoE recompute spilling onto stage 0 before all its dense layers are recomputed."""
    if t.pair_first is None or not t.dualpipe:
        return [] if x.first is None else ["a split given for a table without one"]
    out = []
    if x.first is not None:
        if t.t_split is None or len(x.first) != t.num_units:
            return ["a split given for a table without one"]
        for u in range(t.num_units):
            if not 0 <= x.first[u] <= t.num_layers or t.t_split[u, x.layers[u], x.first[u]] == ILLEGAL:
                return [f"unit {u}: no split of {x.layers[u]} layers with {x.first[u]} on its first stage"]
    for u in range(t.num_units):
        la, ra, lb, rb = rank_split(t, u, x.layers[u], x.recompute[u], x.dense if u == 0 else 0, first_of(x, u))
        if ra > la or rb > lb:
            out.append(f"unit {u}: stages of {la} and {lb} layers recompute {ra} and {rb}")
    if t.k_dense and x.dense < t.k_dense and not t.uniform_recompute:
        lb0 = x.layers[0] - (first_of(x, 0) if x.first is not None else int(pair_split(t, 0, x.layers[0])))
        if x.recompute[0] > lb0:
            out.append("stage 0 recomputes MoE layers before all its dense layers")
    return out


def recomputing_stages(t: StageTable, x: Assignment) -> np.ndarray:
    """How many stages of each unit recompute at least one layer (each holds ``m_workspace``)."""
    out = np.zeros(t.num_units, np.int64)
    for u in range(t.num_units):
        r, d = x.recompute[u], (x.dense if u == 0 else 0)
        if not t.dualpipe:
            out[u] = 1 if r + d > 0 else 0
        else:
            _, ra, _, rb = rank_split(t, u, x.layers[u], r, d, first_of(x, u))
            out[u] = (ra > 0) + (rb > 0)
    return out
