"""The CP-SAT terms of a unit's two stages (solver/cpsat.py adds them to the stage model): a DualPipe/DualPipeV
rank's paired exposure and phase-0 layers read off the table at its layer count, or, with every split priced, its
split as a variable over the undominated legal splits; and how many of a unit's stages recompute (each holds the
recompute working set), as paired_split.rank_split places the recomputation."""

from __future__ import annotations

import numpy as np

from parplan.solver.cpsat_vars import StageVars
from parplan.solver.ortools_cp import cp_model
from parplan.solver.paired_split import ILLEGAL
from parplan.solver.tables import StageTable


def paired_split_terms(model: cp_model.CpModel, t: StageTable, v: StageVars, full: bool) -> list:
    """Per unit (exposure, phase-0 layers) of a DualPipe/DualPipeV table with a paired exposure
    (solver/paired_split.py): both read off the table at the unit's layer count (element constraints), and the
    recompute the split must hold (paired_split.pair_split_violations)."""
    if t.t_pair is None:
        return []
    out = []
    for u in range(t.num_units):
        if t.t_split is not None:
            out.append(every_split(model, t, v, u))
            continue
        expo = model.new_int_var(0, int(t.t_pair[u].max()), f"pair_exposure_{u}")
        model.add_element(v.layers[u], [int(x) for x in t.t_pair[u]], expo)
        first = model.new_int_var(0, t.num_layers, f"pair_first_{u}")
        model.add_element(v.layers[u], [int(x) for x in t.pair_first[u]], first)
        out.append((expo, first))
    if not (full and t.dualpipe):
        return out
    if t.uniform_recompute:
        for u, (_, first) in enumerate(out):
            model.add(first >= v.stage_recompute)
            model.add(v.layers[u] - first >= v.stage_recompute)
    elif t.k_dense:  # rank 0's MoE recompute beyond stage p-1's layers needs every dense layer recomputed
        model.add(v.recompute[0] <= v.layers[0] - out[0][1]).only_enforce_if(v.dense_done.Not())
    return out


def every_split(model: cp_model.CpModel, t: StageTable, v: StageVars, u: int):
    """(exposure, phase-0 layers) of DualPipe rank ``u`` whose split is a variable: a layer on each stage, the
    dense layers on stage 0 (``even``: half each), the exposure read off every split's table as a table
    constraint over its legal (layers, first, exposure) triples (solver/paired_split.py)."""
    L = t.num_layers
    first = model.new_int_var(0, L, f"split_first_{u}")
    if t.layers_fixed is not None:
        model.add(first == int(t.layers_fixed[u]) // 2)
    else:
        model.add(first >= max(t.k_dense if u == 0 else 0, 1))
        model.add(v.layers[u] - first >= 1)
    lo = int(t.layers_min[u])
    hi = lo + max(0, L - int(t.layers_min.sum()))
    tuples = undominated_splits(t, u, lo, hi)
    expo = model.new_int_var(0, max(e for _, _, e in tuples), f"split_exposure_{u}")
    model.add_allowed_assignments([v.layers[u], first, expo], tuples)
    v.split.append(first)
    return expo, first


def undominated_splits(t: StageTable, u: int, lo: int, hi: int) -> list[tuple[int, int, int]]:
    """(layers, phase-0 layers, exposure) of DualPipe rank ``u``'s legal splits at ``lo..hi`` layers, less those
    another split of the same layers dominates: no less exposure and no more room for the recompute the model
    lets the split hold (:func:`paired_split_terms`, :func:`recomputing_stages`: under uniform recompute both stages
    hold r, so the smaller stage's layers; rank 0 with the dense layers, stage p-1's MoE layers; else the larger
    stage, which recomputes first and so decides how many stages hold a working set). Replacing a dominated split
    by its dominator keeps every constraint and lowers no term, so the model's optimum and least peak stay."""
    out = []
    for l in range(lo, hi + 1):
        row = t.t_split[u, l]
        firsts = np.nonzero(row != ILLEGAL)[0]
        if not len(firsts):
            continue
        if t.uniform_recompute:
            room = np.minimum(firsts, l - firsts)
        elif u == 0 and t.k_dense:
            room = l - firsts
        else:
            room = np.maximum(firsts, l - firsts)
        expo = row[firsts]
        best_room, last_expo = -1, -1
        for j in np.lexsort((-room, expo)):  # least exposure first, then most room
            if room[j] > best_room or (room[j] == best_room and expo[j] == last_expo):
                out.append((l, int(firsts[j]), int(expo[j])))
                best_room, last_expo = int(room[j]), int(expo[j])
    return out


def recomputing_stages(model: cp_model.CpModel, t: StageTable, v: StageVars, u: int):
    """The number of unit u's stages that recompute at least one layer (each holds the working set), as
    paired_split.rank_split places the recomputation; booleans forced on by the counts they cover."""
    L, k = t.num_layers, t.k_dense
    if t.uniform_recompute:
        has = model.new_bool_var(f"recomputes_{u}")
        model.add(v.stage_recompute <= L * has)
        return t.members * has
    if not t.dualpipe:
        has = model.new_bool_var(f"recomputes_{u}")
        model.add(v.recompute[u] + (v.dense_recompute if u == 0 else 0) <= L * has)
        return has
    first = model.new_bool_var(f"first_stage_recomputes_{u}")
    second = model.new_bool_var(f"second_stage_recomputes_{u}")
    if u == 0 and k:  # dense layers on stage 0, MoE layers on stage p-1
        model.add(v.dense_recompute <= k * first)
        model.add(v.recompute[0] <= L * second)
        return first + second
    if v.split:  # the larger stage of the rank's split recomputes first
        first_layers = model.new_int_var(0, L, f"first_stage_layers_{u}")
        model.add_max_equality(first_layers, [v.split[u], v.layers[u] - v.split[u]])
    elif t.pair_first is not None:  # the larger stage of the least-exposure split recomputes first
        first_layers = model.new_int_var(0, L, f"first_stage_layers_{u}")
        model.add_element(v.layers[u], [max(int(f), total - int(f)) for total, f in enumerate(t.pair_first[u])],
                          first_layers)
    elif t.layers_fixed is not None:  # the larger half (paired_split.rank_split)
        first_layers = int(t.layers_fixed[u]) - int(t.layers_fixed[u]) // 2
    else:
        first_layers = model.new_int_var(0, L, f"first_stage_layers_{u}")
        model.add(2 * first_layers >= v.layers[u])
        model.add(2 * first_layers <= v.layers[u] + 1)
    model.add(v.recompute[u] <= L * first)
    model.add(v.recompute[u] <= first_layers + L * second)
    return first + second
