"""A planning problem: the spec resolved into choices, their integer stage tables (built on demand), and plans.

The stage split (``search.stage_split``) decides how layer counts vary across stages: ``per_stage`` (each
stage its own layer and recompute count, the default), ``first_last`` (first and last free, the middle stages
sharing one count, as Megatron's ``--decoder-first/last-pipeline-num-layers`` express) or ``even``
(``uneven_stages: false``).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field, replace

import numpy as np

from parplan.costmodel.compute.architecture import Architecture
from parplan.costmodel.spec.assumptions import Assumptions, resolve_assumptions
from parplan.costmodel.evaluation.choice import (Choice, ChoiceCosts, choice_costs, layer_times, nvlink_domain_size,
                                     usable_memory_bytes, with_schedule)
from parplan.costmodel.evaluation.evaluate import evaluate
from parplan.costmodel.evaluation.ledger import Evaluation
from parplan.costmodel.schedules.schedule import Schedule
from parplan.costmodel.spec.hardware import GPU, resolve_gpu
from parplan.costmodel.spec.spec import Plan, Spec
from parplan.solver.chunk_trims import trimmed_layout
from parplan.solver.bounds import layer_bound, layer_bounds, layer_key, layer_sum_s, objective_of_parts
from parplan.solver.deadline import LEDGER, budget
from parplan.solver.relaxation_small import misfit, relaxation_parts  # (bounds', small tables in Python)
from parplan.solver.gc_pause import gc_paused
from parplan.solver.paired_split import first_of, rank_split
from parplan.solver.space import Space, SpaceOptions, enumerate_choices
from parplan.solver.space_bounds import layer_bounds_kept, space_bounds
from parplan.solver.shared_bounds import mean_key, relaxation_key, table_key
from parplan.solver.table_builder import (MeanParts, TableFloats, build_table, mean_bound_at, mean_bound_parts,
                                          microbatch_weight, table_floats, with_exposure)
from parplan.solver.tables import KIB, NS, Assignment, Scale, StageSplit, StageTable, schedule_units
from parplan.solver.warm_cache import FLOATS_KEPT_STAGES, WARM, SpecPieces, base_choice, base_key

# a table's int64 arrays per unit (14) and build_table's float temporaries per stage (~20), in bytes, rounded up
TABLE_BYTES_PER_UNIT = 40 * 8
QUICK_MARGIN = 1e-4  # the quick bound in seconds is lowered by this share before it bounds an integer U


@dataclass
class Problem:
    """The choices of the space, cheap per-choice bounds, and integer tables built on demand."""

    spec: Spec
    assumptions: Assumptions
    gpu: GPU
    options: SpaceOptions
    space: Space
    cap_kib: int
    num_layers: int
    arch: Architecture
    scale: Scale
    quick_lb: np.ndarray  # lower bound of U per choice, from the choice alone (float)
    quick_mem_kib: np.ndarray  # lower bound of peak memory per choice
    quick_factor: np.ndarray | None = None  # m + the least bubble per choice (the quick bound's; layer_bound's)
    pieces: SpecPieces | None = None  # what the problems of this spec key share across calls (solver/warm_cache.py)
    layer_lb: np.ndarray | None = None  # the layer bounds known per choice (NaN: not yet; solver/space_bounds.py)
    _layer_sums: dict = field(default_factory=dict)  # bounds.layer_sum_s by bounds.layer_key
    _memo: dict = field(default_factory=dict)  # cost pieces shared across choices (choice_costs' memo)
    _mean_parts: dict = field(default_factory=dict)  # the bounds' parts but M (solver/shared_bounds.py)
    _relaxations: dict = field(default_factory=dict)
    _bases: dict = field(default_factory=dict)  # choice index -> its warm_cache.base_key (one tuple per choice)
    _parts_of: dict = field(default_factory=dict)  # choice index -> its MeanParts (read from _mean_parts once)
    _scaled_parts: dict = field(default_factory=dict)  # table_builder.mean_bound_at's (a MeanParts at this scale)
    _table_keys: dict = field(default_factory=dict)  # choice index -> its shared_bounds.table_key
    _layer_keys: dict = field(default_factory=dict)  # choice index -> its bounds.layer_key (layer_bounds')
    _table_floats: dict = field(default_factory=dict)  # (table_key, split, every layer) -> table_builder.TableFloats
    _tables: dict = field(default_factory=dict)
    _table_bytes: int = 0  # what the cached tables hold (TABLE_BYTES_PER_UNIT per stage)
    _base_costs: dict = field(default_factory=dict)
    _costs: dict = field(default_factory=dict)
    _index: dict | None = None  # choice -> its index (index_of)

    @staticmethod
    def build(spec: Spec, options: SpaceOptions | None = None, deadline: float | None = None,
              cancel=None) -> "Problem":
        """The problem of ``spec`` (another GPU count: ``spec.at_gpus(n)``); raises deadline.TimeUp past
        ``deadline`` or once the ``cancel`` event (SolverControls.cancel) is set."""
        pieces = WARM.pieces(spec)  # the same values as resolved here, shared by the calls of one spec key
        a = pieces.assumptions if pieces else resolve_assumptions(spec.assumptions)
        gpu = pieces.gpu if pieces else resolve_gpu(spec.cluster)
        options = options or SpaceOptions.from_spec(spec)
        enumerate_space = functools.partial(enumerate_choices, spec, gpu, a, options, deadline=deadline, cancel=cancel)
        arch = pieces.arch if pieces else Architecture(spec.model)
        usable = usable_memory_bytes(spec, gpu, a)
        with gc_paused():  # a choice per candidate (solver/gc_pause.py; also for callers outside the planner)
            space = pieces.space(spec, options, enumerate_space) if pieces else enumerate_space()
            kept = space_bounds(pieces, spec, options, space.choices, gpu, a, arch)
        factors, step_lb_s, q_mem = kept.factors, kept.step_lb_s, kept.mem_kib
        best = int(np.argmin(step_lb_s)) if len(step_lb_s) else None
        stage_ns = step_lb_s[best] / factors[best] * 1e9 if best is not None else 1e6
        scale = Scale.for_problem(stage_ns, float(factors.max()))
        # (Scale.objective_of_seconds on the array: the same operations, element by element)
        q_lb = np.floor(step_lb_s * NS / scale.time_unit_ns * scale.weight * (1 - QUICK_MARGIN)) - 1 \
            if len(step_lb_s) else np.zeros(0)
        shared = {"_layer_sums": pieces.layer_sums, "_memo": pieces.memo, "_mean_parts": pieces.mean_parts,
                  "_relaxations": pieces.relaxations, "_table_floats": pieces.table_floats} if pieces else {}
        return Problem(spec, a, gpu, options, space, max(0, int(math.floor(usable / KIB))), spec.model.num_layers,
                       arch, scale, np.maximum(q_lb, 0), q_mem, factors, pieces, kept.layer_lb, **shared)

    @property
    def choices(self) -> list[Choice]:
        return self.space.choices

    @functools.cached_property
    def domain(self) -> int:
        """The NVLink domain's GPUs (bounds.layer_key reads it)."""
        return nvlink_domain_size(self.spec, self.gpu)

    def table(self, i: int, split: StageSplit | None = None, uniform: bool | None = None) -> StageTable:
        """Choice ``i``'s table under the problem's stage split and recompute rule, or under the ones given."""
        split, uniform = self._rule(split, uniform)
        key = (i, split, uniform, True)
        t = self._tables.get(key)
        if t is None:
            t = with_exposure(self.table_without_exposure(i, split, uniform), self.costs(i))
            self._tables[key] = t
        return t

    def table_without_exposure(self, i: int, split: StageSplit | None = None, uniform: bool | None = None) -> StageTable:
        """Choice ``i``'s table less its paired exposure (the search's first relaxation's; :meth:`table` adds it)."""
        split, uniform = self._rule(split, uniform)
        key = (i, split, uniform, False)
        t = self._tables.get(key)
        if t is None:
            # sized before it is built: a table that would pass the memory budget first empties the cache (tables
            # are rebuilt on demand, identically); one that still does not fit raises OverBudget. The cache keeps
            # at most a quarter of the budget, shared by the calls in flight (solver/deadline.py's LEDGER)
            need = TABLE_BYTES_PER_UNIT * self.choices[i].pp
            b = budget()
            share = b.limit_bytes // (4 * max(1, LEDGER.calls_in_flight()))
            if self._table_bytes + need > share or not b.fits(need):
                self._tables.clear()
                self._table_bytes = 0
            b.require(need, f"the stage table of {self.choices[i].pp} stages")
            self._table_bytes += need
            moe = self.spec.model.moe
            t = build_table(self.costs(i), self.assumptions, self.num_layers, moe.first_dense_layers if moe else 0,
                            moe is not None, split, uniform, self.scale,
                            recompute_all=self.options.recompute_all_layers, exposure=False,
                            parts=self._mean_bound_parts(i), floats=self._floats(i, split))
            self._tables[key] = t
        return t

    def _floats(self, i: int, split: StageSplit) -> TableFloats:
        """Choice ``i``'s table_builder.TableFloats under ``split``, kept by table key, split and rule (warm_cache)."""
        key = (self._table_key(i), split, self.options.recompute_all_layers)
        f = self._table_floats.get(key)
        if f is None:
            moe = self.spec.model.moe
            f = table_floats(self.costs(i), self.num_layers, moe.first_dense_layers if moe else 0, moe is not None,
                             split, self.options.recompute_all_layers)
            if self.choices[i].pp <= FLOATS_KEPT_STAGES:  # (a deeper pipeline's are formed with its table alone)
                self._table_floats[key] = f
        return f

    def _table_key(self, i: int) -> tuple:
        """Choice ``i``'s shared_bounds.table_key, made once."""
        table = self._table_keys.get(i)
        return table if table is not None else self._table_keys.setdefault(
            i, table_key(self.choices[i], self.spec, self.assumptions, self._base(i)))

    def _rule(self, split: StageSplit | None, uniform: bool | None) -> tuple[StageSplit, bool]:
        """The stage split and recompute rule given, else the problem's."""
        return (self.options.stage_split if split is None else split,
                self.options.uniform_recompute if uniform is None else uniform)

    def exposed(self, i: int) -> bool:
        """Whether choice ``i``'s table prices a paired exposure (a paired schedule's all-to-all beside its partner
        stage's compute, table_builder.with_exposure): :meth:`table` then adds to :meth:`table_without_exposure`."""
        return self.choices[i].schedule.paired and self.costs(i).paired_exposure  # (only a paired one may)

    def costs(self, i: int) -> ChoiceCosts:
        """Choice ``i``'s costs (computed once)."""
        costs = self._costs.get(i)
        if costs is None:
            c = self.choices[i]
            costs = self._costs[i] = self._shared_costs(c, self._base(i)) if self.pieces is not None else self._own_costs(c)
            key = self._layer_keys[i] if i in self._layer_keys else layer_key(c, self.domain)  # (layer_bounds')
            if key is not None and key not in self._layer_sums:
                self._layer_sums[key] = self._layer_sum(costs.dense, costs.moe)
        return costs

    def _own_costs(self, c: Choice) -> ChoiceCosts:
        """The costs of choice ``c`` built by this problem alone (the warm cache off)."""
        spec, a = self.spec, self.assumptions
        # DualPipe(V) change the EP overlap; with MTP modules, the last stage's in-flight count (which the
        # MTP activations are held for) differs from 1F1B's under interleaving: both computed in full
        if (c.schedule.paired or (spec.model.num_mtp_layers and c.schedule is Schedule.INTERLEAVED)
                or c.moe_a2a_overlap):  # combined 1F1B's lone passes read pp, vpp and m (moe_layer.py)
            return choice_costs(spec, c, self.gpu, a, self.arch, self._memo)
        # schedules other than DualPipe share every term but the p2p: computed once per layout
        base = replace(c, schedule=Schedule.ONE_F_ONE_B, vpp=1, first_chunk_trim=0, last_chunk_trim=0)
        if base not in self._base_costs:
            self._base_costs[base] = choice_costs(spec, base, self.gpu, a, self.arch, self._memo)
        return with_schedule(self._base_costs[base], c)

    def _base(self, i: int) -> tuple:
        """warm_cache.base_key of choice ``i``, made once: the one tuple its costs' and its bounds' keys in the
        cache's entries hold (solver/shared_bounds.py)."""
        base = self._bases.get(i)
        if base is None:
            base = self._bases[i] = base_key(self.choices[i], self.spec)
        return base

    def _shared_costs(self, c: Choice, base: tuple) -> ChoiceCosts:
        """The costs of choice ``c`` (``base``: its base choice's key) from the pieces its spec key shares across
        calls (solver/warm_cache.py): the same values as :meth:`_own_costs` (tests/solver/test_warm_cache.py)."""
        pieces, spec = self.pieces, self.spec
        if c.schedule.paired or c.moe_a2a_overlap or (
                spec.model.num_mtp_layers and c.schedule is Schedule.INTERLEAVED):  # computed in full, as _own_costs does
            costs = pieces.costs.get(c)
            if costs is None:
                costs = pieces.costs[c] = choice_costs(spec, c, self.gpu, self.assumptions, self.arch, pieces.memo)
            return costs
        costs = pieces.base_costs.get(base)
        if costs is None:
            costs = pieces.base_costs[base] = choice_costs(spec, base_choice(c, spec), self.gpu, self.assumptions,
                                                           self.arch, pieces.memo)
        return with_schedule(costs, c)

    def _layer_sum(self, dense, moe_cost) -> float:
        moe = self.spec.model.moe
        return layer_sum_s(dense, moe_cost, self.num_layers, moe.first_dense_layers if moe else 0)

    def mean_bound(self, i: int) -> float:
        """(M + S·units)·lb_time of choice ``i``'s table (table_builder.mean_unit_bound), from its costs alone: its
        parts (table_builder.MeanParts) kept under shared_bounds.mean_key, shared by the requests of this spec key."""
        return mean_bound_at(self._mean_bound_parts(i), self.choices[i].num_microbatches, self.scale, self.num_layers,
                             self._scaled_parts)

    def _mean_bound_parts(self, i: int) -> MeanParts:
        """Choice ``i``'s MeanParts: kept under its mean_key (shared), and by its index for this problem's later
        reads (the relaxation's weight, the table's)."""
        parts = self._parts_of.get(i)
        if parts is not None:
            return parts
        key = mean_key(self.choices[i], self.spec, self._base(i))
        parts = self._mean_parts.get(key)
        if parts is None:
            moe = self.spec.model.moe
            parts = self._mean_parts[key] = mean_bound_parts(self.costs(i), self.assumptions, self.num_layers,
                                                             moe.first_dense_layers if moe else 0, moe is not None)
        self._parts_of[i] = parts
        return parts

    def relaxed_bound(self, i: int, cap_kib: int, exposure: bool = True, floor: bool = False) -> float:
        """bounds.relaxed_bound of choice ``i``'s table (without ``exposure``: :meth:`table_without_exposure`) under
        ``cap_kib``: its parts but M kept under shared_bounds.relaxation_key (shared by the spec key), weighed by M;
        ``floor``: of its busy floor (solver/step_order_floor.py), a lower bound of a paired choice's step order."""
        c = self.choices[i]
        rule = (*self._rule(None, None), self.options.recompute_all_layers)
        key = relaxation_key(c, self.spec, self.assumptions, self.scale, rule, cap_kib, exposure,
                             table=self._table_key(i))
        if key in self._relaxations:
            parts = self._relaxations[key]
        elif c.pp <= FLOATS_KEPT_STAGES and misfit(self._floats(i, self.options.stage_split), c.recompute, cap_kib,
                                                   self.num_layers):
            parts = self._relaxations[key] = None  # nothing fits, at any scale: no table built (relaxation_small)
        else:
            t = self.table(i) if exposure else self.table_without_exposure(i)
            parts = self._relaxations[key] = relaxation_parts(t, cap_kib)
        if parts is None:
            return float("inf")
        if floor:
            return float(self.scale.weight * c.num_microbatches) * parts[0] + parts[2] - 1.0
        return objective_of_parts(microbatch_weight(c.num_microbatches, self._mean_bound_parts(i).w_max, self.scale),
                                  parts)

    def layer_bound(self, i: int) -> float:
        """A lower bound of :meth:`mean_bound` from the choice's layer times alone (bounds.layer_bound), shared by
        every choice of one bounds.layer_key (0 without one): the search's bound between the quick and the mean. The
        layer times are read off the first choice of the key whose costs are computed (:meth:`costs`), else computed
        (costmodel.evaluation.choice.layer_times, the same values: tests/solver/test_layer_bound.py)."""
        c = self.choices[i]
        key = layer_key(c, self.domain)
        if key is None or self.quick_factor is None:
            return 0.0
        layer_s = self._layer_sums.get(key)  # set by the first choice of the key whose costs or layers are known
        if layer_s is None:
            layer_s = self._layer_sum(*layer_times(self.spec, c, self.gpu, self.assumptions, self.arch, self._memo))
            self._layer_sums[key] = layer_s
        return layer_bound(layer_s, c.pp, float(self.quick_factor[i]), unit_count(c.schedule, c.pp),
                           self.num_layers, self.scale)

    def layer_bounds(self, idx: list[int]) -> np.ndarray:
        """:meth:`layer_bound` of each choice of ``idx`` (the same floats): the layer sums looked up (or computed) one
        by one, the bound in one array pass (bounds.layer_bounds; the search's queue asks it for thousands)."""
        if self.quick_factor is None or not len(idx):
            return np.zeros(len(idx))
        kept = self.layer_lb  # (kept by the space's key: solver/space_bounds.py)
        return self._layer_bounds(idx) if kept is None else layer_bounds_kept(kept, idx, self._layer_bounds)

    def _layer_bounds(self, idx: list[int]) -> np.ndarray:
        choices, domain, known, rows, keys = self.choices, self.domain, self._layer_sums, [], self._layer_keys
        for i, c in zip(idx, map(choices.__getitem__, idx)):  # (sum, pp, units) each; the key kept for costs()
            key = keys[i] = layer_key(c, domain)
            layer_s = known.get(key) if key is not None else 0.0
            if layer_s is None:
                layer_s = known[key] = self._layer_sum(*layer_times(self.spec, c, self.gpu, self.assumptions,
                                                                    self.arch, self._memo))
            # (a choice without a key: a zero sum, whose bound is 0 as layer_bound's: max(0, t) with t < 0)
            rows.append((layer_s, c.pp, unit_count(c.schedule, c.pp)) if key is not None else (0.0, 1, 0))
        sums, pp, units = np.array(rows, dtype=float).reshape(len(idx), 3).T  # (the rows' floats, the counts exact)
        return layer_bounds(sums, pp, self.quick_factor[idx], units, self.num_layers, self.scale)

    def index_of(self, plan: Plan) -> int | None:
        """The index of ``plan``'s choice (Plan.to_choice) in this problem's space, or None where it has none; a plan
        without recompute is also full recompute of no layer (:meth:`plan` writes that choice's plans so)."""
        if self._index is None:
            self._index = {c: i for i, c in enumerate(self.choices)}
        c = plan.to_choice()
        i = self._index.get(c)
        return self._index.get(c.but(recompute="full")) if i is None and c.recompute == "none" else i

    def order(self, cap_kib: int) -> list[int]:
        """Choices that may fit under ``cap_kib``, by their quick bound (ties by index)."""
        ok = np.nonzero(self.quick_mem_kib <= cap_kib)[0]
        return [int(i) for i in ok[np.argsort(self.quick_lb[ok], kind="stable")]]

    def plan(self, i: int, x: Assignment) -> Plan:
        """The canonical plan of choice ``i`` with the unit assignment ``x``."""
        t = self.table(i)
        return canonical_plan(t.choice, *stage_counts(t, x), self.options)

    def evaluate(self, plan: Plan) -> Evaluation:
        costs_of = self.pieces.evaluation_costs if self.pieces is not None else None
        return evaluate(self.spec, plan, assumptions=self.assumptions, gpu=self.gpu, costs_of=costs_of)

    def evaluation(self, i: int, x: Assignment) -> Evaluation:
        """The float evaluator's verdict on choice ``i`` with assignment ``x`` (every answer is re-evaluated)."""
        return self.evaluate(self.plan(i, x))


@functools.lru_cache(maxsize=None)
def unit_count(schedule: Schedule, pp: int) -> int:
    """tables.schedule_units(schedule, pp).count (the layer bound asks it for every choice it bounds)."""
    return schedule_units(schedule, pp).count


def canonical_plan(c: Choice, layers: list[int], recompute: list[int], options: SpaceOptions) -> Plan:
    """The plan of choice ``c`` with these per-stage layer and recomputed-layer counts, canonical: where the space
    recomputes every layer of a full-recompute choice, each stage recomputes all its layers; full recompute of zero
    layers is no recompute (the same costs) where the space holds no recompute."""
    if c.recompute == "full" and options.recompute_all_layers:
        recompute = list(layers)
    rc = c.recompute
    if rc == "full" and not any(recompute) and "none" in options.recompute:
        rc = "none"
    return Plan.from_choice(c, layers, recompute, trimmed_layout(c, layers), recompute=rc)


def stage_counts(t: StageTable, x: Assignment) -> tuple[list[int], list[int]]:
    """Per-stage layer and recompute counts of a unit assignment (DualPipe ranks: :func:`paired_split.rank_split`)."""
    p = t.choice.pp
    if t.recompute_all:
        layers = list(x.layers) if not t.dualpipe else stage_counts_of_ranks(t, x)
        return layers, list(layers)
    if not t.dualpipe:
        rec = list(x.recompute)
        rec[0] += x.dense
        return list(x.layers), rec
    layers, rec = [0] * p, [0] * p
    for u in range(t.num_units):
        la, ra, lb, rb = rank_split(t, u, x.layers[u], x.recompute[u], x.dense if u == 0 else 0, first_of(x, u))
        layers[u], rec[u], layers[p - 1 - u], rec[p - 1 - u] = la, ra, lb, rb
    return layers, rec


def stage_counts_of_ranks(t: StageTable, x: Assignment) -> list[int]:
    """The per-stage layers of a DualPipe assignment (recomputation aside)."""
    p = t.choice.pp
    layers = [0] * p
    for u in range(t.num_units):
        la, _, lb, _ = rank_split(t, u, x.layers[u], 0, 0, first_of(x, u))
        layers[u], layers[p - 1 - u] = la, lb
    return layers


def assignment_of(t: StageTable, stage_layers: list[int], recompute_layers: list[int]) -> Assignment:
    """The unit assignment of per-stage counts (the inverse of :func:`stage_counts`, up to the split inside a
    DualPipe rank, which costs nothing): stage 0 recomputes its dense layers first."""
    p, k = t.choice.pp, t.k_dense
    if t.recompute_all:  # folded into the table's per-layer costs
        recompute_layers = [0] * p
    dense = min(recompute_layers[0], k)
    if not t.dualpipe:
        rec = list(recompute_layers)
        rec[0] -= dense
        return Assignment(tuple(stage_layers), tuple(rec), dense)
    layers = tuple(stage_layers[u] + stage_layers[p - 1 - u] for u in range(p // 2))
    rec = [recompute_layers[u] + recompute_layers[p - 1 - u] for u in range(p // 2)]
    rec[0] -= dense
    first = tuple(stage_layers[: p // 2]) if t.t_split is not None else None  # the split is the assignment's
    return Assignment(layers, tuple(rec), dense, first)
