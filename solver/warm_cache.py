"""What planning problems share across calls: the warm service's memory of cost pieces (issue 41 item 3).

A scheduler calls a warm service many times with near-identical requests (another GPU count, another global
batch). Every :class:`~parplan.solver.problem.Problem` of one process reads its cost pieces through
:data:`WARM`: one :class:`SpecPieces` per spec, keyed by the content of everything those pieces read, never by the
identity of an object:

* the spec's sections as JSON (model, training, cluster, search, plan), less ``cluster.num_gpus`` and
  ``training.global_batch_size``, and its assumptions as resolved (every knob's value, the framework profile's
  conventions merged by the loader included). The ``framework`` itself is left out: the cost pieces read it only
  through those conventions; the framework's rules are legality (costmodel/evaluation/legality.py, ``runs_on``), which
  the problem's space and the evaluator decide outside the pieces (tests/solver/test_warm_cache.py checks the costs with the
  spec's framework binding poisoned). So the per-framework solves of one spec whose conventions are equal (e.g.
  ``any`` and Megatron-Core: frameworks/compare.py) share their pieces. The GPU count and the global batch are fixed
  by each legal choice (tp·cp·pp·dp and dp·micro-batch size·m: costmodel/evaluation/legality.py
  ``choice_violations``), so a piece keyed by the whole choice is the same whichever request built it; a choice's
  costs do not read the micro-batch count m outside the cases :func:`m_free` excludes (costmodel/evaluation/choice.py:
  ``inflight``, ``pipeline_buffer_bytes`` and the paired exposure read the choice they are handed, which
  ``with_schedule`` swaps), so they are kept under the choice with m = 1 (its field values: :func:`base_key`) and
  shared by every global batch;
* the code's version (:func:`code_version`: a digest of the cost model's, the solver's and the frameworks'
  sources, which hold the assumption presets and the fitted calibration, costmodel/spec/calibration.py).

A :class:`SpecPieces` holds the resolved assumptions, GPU and architecture (one object for every call of the spec,
so the cost model's caches that hold them beside their answers hit across calls too), the choice-cost memo
(costmodel/memo.py: each piece keyed by the choice fields it reads; the layers' times by the GPU count only as their
groups read the mesh, costmodel/communication/mesh.py ``layer_world_key``, so a request at another GPU count reads
them), the choices' costs and the layer sums of the layer bound (solver/bounds.py ``layer_key``, the same world key)
and the parts of the search's bounds that
requests with another global batch share (solver/shared_bounds.py), each space key's per-choice quick and layer
bounds (solver/space_bounds.py; :data:`SPACE_BOUNDS_KEPT`), and the search space of a request that
repeats (:func:`space_key`; :data:`SPACES_KEPT`: kept from its first call where it fits). The cache is an LRU
bounded by a share of the process's memory budget, or of a call's where smaller (:data:`CACHE_SHARE`, beside the per-call table caches' quarter:
solver/problem.py), its size estimated per piece (:data:`COSTS_BYTES`, :data:`MEMO_BYTES`,
:data:`MEAN_PARTS_BYTES`, :data:`RELAXATION_BYTES`, space.CHOICE_BYTES); ``PARPLAN_WARM_CACHE=0`` or
:meth:`WarmCache.disable` turns it off (every problem then builds its pieces alone, as before).
"""

from __future__ import annotations

import atexit
import collections
import functools
import hashlib
import json
import operator
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import parplan
from parplan import costmodel, solver
from parplan.costmodel.compute.architecture import Architecture
from parplan.costmodel.spec.assumptions import Assumptions, resolve_assumptions
from parplan.costmodel.evaluation.choice import Choice, ChoiceCosts, choice_costs
from parplan.costmodel.spec.hardware import GPU, resolve_gpu
from parplan.costmodel.schedules.schedule import Schedule
from parplan.costmodel.spec.spec import Spec
from parplan.solver.deadline import MIB, budget, default_memory_budget_mib
from parplan.solver.space import CHOICE_BYTES, Space, SpaceOptions
from parplan.solver.space_bounds import SpaceBounds
from parplan.solver.space_memo import EnumerationMemo, memo_key

CACHE_SHARE = 4  # the cache holds at most 1/CACHE_SHARE of the process's memory budget
# resident bytes per cached piece, rounded up from tracemalloc on Llama-3 8B / 8 H100 and 70B / 64 H100 (the bytes
# freed by dropping an entry's memo, then its costs: ~0.5 KB per memo entry, ~2 KB per ChoiceCosts with its two
# LayerCosts and links)
COSTS_BYTES = 2560
MEMO_BYTES = 1024
ENTRY_BYTES = 64 * 1024  # a SpecPieces' fixed part: assumptions, GPU, architecture, the key
# the bounds' parts (solver/shared_bounds.py: a key's tuple, its in-flight counts, the floats; its base choice is the
# record the costs hold), rounded up from tracemalloc on the same two specs (the bytes freed by dropping them: ~350-400
# per mean-bound part, ~520-770 per relaxation's)
MEAN_PARTS_BYTES = 512
RELAXATION_BYTES = 1024
# a table's float part (table_builder.TableFloats, kept by its table key, split and rule: solver/problem.py), kept for
# pipelines of at most FLOATS_KEPT_STAGES stages (a deeper one's, ~56 bytes a stage, are formed with its table alone):
# ~0.95 KB (8B / 8 H100) and ~1.2 KB (70B / 64 H100) per TableFloats by tracemalloc (copies of those kept); at 32
# stages its 7 arrays hold 1.8 KB, their headers ~0.8 KB: TABLE_FLOATS_BYTES bounds it with the key's tuple
FLOATS_KEPT_STAGES = 32
TABLE_FLOATS_BYTES = 4096
# the search spaces an entry keeps (one per framework, GPU count, global batch and space options), each from its
# request's first call where it fits the cache's share beside the entry's pieces (SpecPieces.space): a space holds
# ~1 KiB per choice (space.CHOICE_BYTES; ~1 MiB for Llama-3 8B on 8 GPUs, ~113 MiB for DeepSeek-V3's 116k choices on
# 2,048 H800), which a run of distinct requests never reads again: past this many they start over, and past the
# share the spaces of the least recently used entries go before any entry (WarmCache._trim)
SPACES_KEPT = 1
# the enumeration memos an entry keeps (solver/space_memo.py: one per framework and space options, each serving every
# GPU count and global batch); past this many they start over
ENUMERATION_MEMOS_KEPT = 4
# the per-choice bound arrays an entry keeps (solver/space_bounds.py: one per space key, 32 bytes a choice, from the
# first call of the key on); past this many they start over
SPACE_BOUNDS_KEPT = 4
# the spec fields every legal choice fixes (module docstring): left out of the key
CHOICE_FIXED_FIELDS = (("cluster", "num_gpus"), ("training", "global_batch_size"))


@functools.lru_cache(maxsize=1)
def code_version() -> str:
    """A digest of the sources the cost pieces come from (every .py file of costmodel/, solver/, frameworks/ and
    the package version): a changed file is another version, never served another's pieces."""
    h = hashlib.sha256(parplan.__version__.encode())
    # frameworks/ (its profiles are read through costmodel's binding) is found beside costmodel/, as it is both in
    # this checkout and in an installed wheel: the solver floor imports nothing above it (pyproject importlinter)
    folders = [Path(package.__file__).parent for package in (costmodel, solver)]
    for root in folders + [folders[0].parent / "frameworks"]:
        for path in sorted(root.rglob("*.py")):
            h.update(str(path.relative_to(root.parent)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()[:16]


def spec_key(spec: Spec) -> str:
    """The content key of what a spec's cost pieces read (module docstring): its JSON less
    :data:`CHOICE_FIXED_FIELDS` and the framework, its assumptions resolved, and the code's version."""
    data = spec.model_dump(mode="json")
    for section, name in CHOICE_FIXED_FIELDS:
        data[section].pop(name, None)
    del data["framework"]
    data["assumptions"] = resolve_assumptions(spec.assumptions).model_dump(mode="json")
    text = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(f"{code_version()}\n{text}".encode()).hexdigest()


def space_key(spec: Spec, options: SpaceOptions) -> tuple:
    """What the enumeration of a spec's space (solver/space.py ``enumerate_choices``) reads beside :func:`spec_key`:
    the GPU count, the global batch, the framework (its rules decide legality) and the space options."""
    framework = json.dumps(spec.model_dump(mode="json", include={"framework"}), sort_keys=True)
    return spec.cluster.num_gpus, spec.training.global_batch_size, framework, options


def m_free(spec: Spec, c: Choice) -> bool:
    """Whether the costs of choice ``c`` do not read its micro-batch count (module docstring): not under DualPipe(V),
    an all-to-all overlap (combined 1F1B's lone passes read pp, vpp and m: costmodel/evaluation/moe_layer.py) nor MTP modules
    (the last stage's MTP activations are held for its in-flight count, which m caps: costmodel/evaluation/stage_extras.py)."""
    return not (c.schedule.paired or c.moe_a2a_overlap or spec.model.num_mtp_layers)


def base_choice(c: Choice, spec: Spec) -> Choice:
    """The choice whose costs ``c``'s are (costmodel/evaluation/choice.py ``with_schedule``): 1F1B without virtual stages or
    trims, and m = 1 where the costs do not read m (:func:`m_free`)."""
    m = 1 if m_free(spec, c) else c.num_microbatches
    return c.but(schedule=Schedule.ONE_F_ONE_B, vpp=1, first_chunk_trim=0, last_chunk_trim=0, num_microbatches=m)


# the fields base_choice sets; base_key holds every other field of the choice, in the declaration's order
BASE_SET_FIELDS = ("schedule", "vpp", "first_chunk_trim", "last_chunk_trim", "num_microbatches")
_BASE_KEPT = operator.itemgetter(*(f for f in Choice.__dataclass_fields__ if f not in BASE_SET_FIELDS))


def base_key(c: Choice, spec: Spec) -> tuple:
    """:func:`base_choice` as a key: the values of every field it keeps, then m where the costs read it (not
    :func:`m_free`; None where they do not, whose base choice has m = 1). The base choice is a function of it, so a
    key kept beside a cost piece names the base choice the piece was priced from (two choices whose base choices are
    equal, one m-free with m = 1, the other not, get two keys: never one key for two bases). A tuple of values is
    hashed and compared in C, a Choice field by field in Python: the search asks for one per choice per request."""
    return _BASE_KEPT(c.__dict__) + (None if m_free(spec, c) else c.num_microbatches,)


def share_bytes() -> int:
    """The cache's share (:data:`CACHE_SHARE`) of the process's memory budget, or of the budget of the call in
    progress where that is smaller (a call's ``memory_budget_mib``: the cache keeps no more than its share of it)."""
    return min(default_memory_budget_mib() * MIB, budget().limit_bytes) // CACHE_SHARE


@dataclass
class SpecPieces:
    """The cost pieces of one spec key (module docstring), shared by every problem of that key."""

    key: str
    assumptions: Assumptions
    gpu: GPU
    arch: Architecture
    memo: dict = field(default_factory=dict)  # choice_costs' memo (costmodel/memo.py)
    base_costs: dict = field(default_factory=dict)  # base_key -> the ChoiceCosts of base_choice
    costs: dict = field(default_factory=dict)  # a whole choice (DualPipe, MTP, overlap) -> ChoiceCosts
    layer_sums: dict = field(default_factory=dict)  # bounds.layer_key -> bounds.layer_sum_s
    evaluated: dict = field(default_factory=dict)  # (GPU count, global batch, choice) -> the evaluator's costs
    # the bounds' parts but their weight M (solver/shared_bounds.py): by shared_bounds.mean_key, relaxation_key
    mean_parts: dict = field(default_factory=dict)
    relaxations: dict = field(default_factory=dict)
    table_floats: dict = field(default_factory=dict)  # (table_key, split, rule) -> table_builder.TableFloats
    spaces: dict = field(default_factory=dict)  # space_key -> the enumerated Space (at most SPACES_KEPT)
    space_choices: int = 0  # the choices the spaces hold
    limit_bytes: Callable[[], int] = lambda: share_bytes()  # the cache's share of the budget (WarmCache.limit_bytes)
    enumerations: dict = field(default_factory=dict)  # space_memo.memo_key -> space_memo.EnumerationMemo
    space_bounds: dict = field(default_factory=dict)  # space_key -> space_bounds.SpaceBounds (SPACE_BOUNDS_KEPT)

    @property
    def nbytes(self) -> int:
        """The estimated resident bytes of the pieces held."""
        costs = len(self.base_costs) + len(self.costs) + len(self.evaluated)
        parts = (MEAN_PARTS_BYTES * len(self.mean_parts) + RELAXATION_BYTES * len(self.relaxations)
                 + TABLE_FLOATS_BYTES * len(self.table_floats))
        return (ENTRY_BYTES + COSTS_BYTES * costs + MEMO_BYTES * len(self.memo) + parts
                + CHOICE_BYTES * self.space_choices + sum(e.nbytes for e in self.enumerations.values())
                + sum(b.nbytes for b in self.space_bounds.values()))

    def space(self, spec: Spec, options: SpaceOptions, enumerate_space: Callable[[], Space]) -> Space:
        """The search space of ``spec`` under ``options``: ``enumerate_space()``'s, kept by :func:`space_key` (what
        solver/space.py's enumeration reads beside this entry's key) from its first call where its bytes fit the cache's
        share beside this entry's pieces (:data:`SPACES_KEPT`). A kept space is shared: its callers read it, never change it.
        ``enumerate_space(memo=...)`` is handed this entry's space_memo.EnumerationMemo of the request (another global
        batch reads the same verdicts: solver/space_memo.py)."""
        key = space_key(spec, options)
        space = self.spaces.get(key)
        if space is None:
            if len(self.spaces) >= SPACES_KEPT:  # dropped first: the enumeration's peak holds no other kept space
                self.drop_spaces()
            space = enumerate_space(memo=self.enumeration_memo(spec, options))  # (cut short, it raises: none kept)
            if self.nbytes + CHOICE_BYTES * len(space.choices) <= self.limit_bytes():
                self.spaces[key] = space
                self.space_choices += len(space.choices)
        return space

    def enumeration_memo(self, spec: Spec, options: SpaceOptions) -> EnumerationMemo:
        """The enumeration memo of ``spec`` under ``options`` (space_memo.memo_key), kept (:data:`ENUMERATION_MEMOS_KEPT`)."""
        key = memo_key(spec, options)
        memo = self.enumerations.get(key)
        if memo is None:
            if len(self.enumerations) >= ENUMERATION_MEMOS_KEPT:
                self.enumerations.clear()
            memo = self.enumerations[key] = EnumerationMemo()
        return memo

    def bounds(self, spec: Spec, options: SpaceOptions, choices: list[Choice]) -> SpaceBounds:
        """The space_bounds.SpaceBounds of ``choices``, the space of ``spec`` under ``options`` (:meth:`space`'s):
        kept by :func:`space_key` from the first call on (:data:`SPACE_BOUNDS_KEPT`)."""
        key = space_key(spec, options)
        kept = self.space_bounds.get(key)
        if kept is None or not kept.fits(choices):
            if len(self.space_bounds) >= SPACE_BOUNDS_KEPT:
                self.space_bounds.clear()
            kept = self.space_bounds[key] = SpaceBounds.of(spec, choices, self.gpu, self.assumptions, self.arch)
        return kept

    def evaluation_costs(self, spec: Spec, c: Choice, gpu: GPU, a: Assumptions) -> ChoiceCosts:
        """``choice_costs(spec, c, gpu, a)`` as costmodel.evaluation.evaluate computes it (``costs_of``), kept by the GPU count,
        the global batch and the whole choice (with this entry's key, the whole spec): the answers a Plan call
        re-evaluates, which an Evaluate call of the same plan reads."""
        key = (spec.cluster.num_gpus, spec.training.global_batch_size, c)
        costs = self.evaluated.get(key)
        if costs is None:
            costs = self.evaluated[key] = choice_costs(spec, c, gpu, a)
        return costs

    def drop_spaces(self) -> int:
        """Drop the kept spaces (a request that repeats enumerates again); the bytes freed."""
        freed = CHOICE_BYTES * self.space_choices
        self.spaces.clear()
        self.space_choices = 0
        return freed

    def clear(self) -> None:
        for pieces in (self.memo, self.base_costs, self.costs, self.layer_sums, self.evaluated, self.mean_parts,
                       self.relaxations, self.table_floats, self.spaces, self.enumerations, self.space_bounds):
            pieces.clear()
        self.space_choices = 0


class WarmCache:
    """An LRU of :class:`SpecPieces` by :func:`spec_key`, within ``1/CACHE_SHARE`` of the memory budget."""

    def __init__(self, enabled: bool = True):
        self.enabled = enabled
        self._lock = threading.Lock()
        self._entries: collections.OrderedDict[str, SpecPieces] = collections.OrderedDict()
        self.hits = self.misses = self.evictions = 0

    def pieces(self, spec: Spec) -> Optional[SpecPieces]:
        """The spec's pieces (created empty on a miss); None while the cache is off. Past the cache's share of the
        budget the least recently used entries are dropped first (never the one returned)."""
        if not self.enabled:
            return None
        key = spec_key(spec)
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
                self.hits += 1
                self._trim(keep=key)
                return entry
        entry = SpecPieces(key, resolve_assumptions(spec.assumptions), resolve_gpu(spec.cluster), Architecture(spec.model),
                           limit_bytes=lambda: self.limit_bytes())  # (read when asked: a changed budget holds)
        with self._lock:
            entry = self._entries.setdefault(key, entry)  # a call that built it meanwhile wins: one entry per key
            self._entries.move_to_end(key)
            self.misses += 1
            self._trim(keep=key)
        return entry

    def limit_bytes(self) -> int:
        return share_bytes()

    def nbytes(self) -> int:
        with self._lock:
            return sum(e.nbytes for e in self._entries.values())

    def _trim(self, keep: str) -> None:
        """Drop the spaces of the least recently used entries, then those entries, until the rest fit the share (the
        lock held): a space serves only its request repeated, an entry's other pieces its near-identical requests."""
        limit = self.limit_bytes()
        total = sum(e.nbytes for e in self._entries.values())
        for key, entry in self._entries.items():
            if total <= limit or key == keep:
                break
            total -= entry.drop_spaces()
        while total > limit and len(self._entries) > 1:
            oldest = next(iter(self._entries))
            if oldest == keep:
                break
            total -= self._entries.pop(oldest).nbytes
            self.evictions += 1
        if total > limit:  # the one entry in use alone passes the share: its spaces go, then its other pieces
            total -= self._entries[keep].drop_spaces()
        if total > limit:
            self._entries[keep].clear()

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def evaluation_inputs(self, spec: Spec) -> dict:
        """The keyword arguments of costmodel.evaluation.evaluate that share this cache (the Evaluate RPC's): the spec's
        assumptions, GPU and ``costs_of``; none while the cache is off or for a spec on several pools (evaluated
        per pool, costmodel/evaluation/pools.py)."""
        pieces = self.pieces(spec) if spec.cluster.pools is None or len(spec.cluster.pools) <= 1 else None
        if pieces is None:
            return {}
        return {"assumptions": pieces.assumptions, "gpu": pieces.gpu, "costs_of": pieces.evaluation_costs}

    def disable(self) -> None:
        self.enabled = False
        self.clear()

    def enable(self) -> None:
        self.enabled = True

    def __len__(self) -> int:
        return len(self._entries)

    def stats(self) -> dict:
        """Entries, estimated bytes, hits, misses and evictions (the benchmark and the tests read them)."""
        return {"entries": len(self), "nbytes": self.nbytes(), "limit_bytes": self.limit_bytes(), "hits": self.hits,
                "misses": self.misses, "evictions": self.evictions}


WARM = WarmCache(enabled=os.environ.get("PARPLAN_WARM_CACHE", "1") != "0")
# at the process's exit the pieces are freed by their reference counts before the interpreter's last collection, which
# would otherwise walk them all (solver/gc_pause.py hands the frozen objects back then): on DeepSeek-V3 / 2,048 H800,
# with its 116k-choice space kept, ~0.5 s of that collection against ~0.13 s to free them (2 cores, load ~4)
atexit.register(WARM.clear)
