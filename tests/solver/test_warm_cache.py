"""solver/warm_cache.py: the cost pieces problems share across calls. The key holds every spec section but the GPU
count, the global batch and the framework (its conventions, resolved, instead: the costs never read its rules), and
the code's version; a cached answer is byte-identical to one solved with the cache off, on random near-identical
specs (another GPU count, batch, sequence, assumption or calibration knob, version); an entry of another key is never
read (poisoned entries would raise); the LRU stays within its share of the budget."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace
from contextlib import contextmanager

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from benchmarks.solver_speed import LLAMA8B
from tests.conftest import sized, small_specs, spec_variant
from parplan.library.contract import evaluation_to_dict, framework_best_to_dict, plan_result_to_dict
from parplan.costmodel.spec.assumptions import resolve_assumptions
from parplan.costmodel.errors import ParplanError
from parplan.costmodel.evaluation.evaluate import evaluate
from parplan.frameworks.loader import validate_spec
from parplan.frameworks.compare import best_per_framework, spec_for_framework
from parplan.frameworks.profiles import FRAMEWORKS
from parplan.solver import warm_cache
from parplan.solver.cpsat import SolverControls
from parplan.solver.planner import optimize
from parplan.solver.problem import Problem
from parplan.solver.warm_cache import WARM, SpecPieces, WarmCache, spec_key

class Poison:
    """A cached piece (or a spec's framework binding) that must not be read: any use raises."""

    def __getattr__(self, name):
        raise AssertionError(f"a piece of another key was read ({name})")


LLAMA = {"model": LLAMA8B, "training": {"seq_len": 4096, "global_batch_size": 64},
         "cluster": {"gpu": "H100-SXM-80GB", "num_gpus": 8, "gpus_per_node": 8}}


@contextmanager
def cache_off():
    """The warm cache off for the block (its entries kept), on again after."""
    WARM.enabled = False
    try:
        yield
    finally:
        WARM.enabled = True


pytestmark = pytest.mark.usefixtures("fresh_warm_cache")  # tests/conftest.py


def answer(spec) -> str:
    """The call's whole answer in deterministic mode (no timing: byte-identical run to run)."""
    return json.dumps(plan_result_to_dict(optimize(spec, controls=SolverControls(deterministic=True))), sort_keys=True)


def test_the_key_leaves_out_only_what_every_choice_fixes():
    spec = validate_spec(LLAMA)
    same = [spec_variant(spec, **{"cluster.num_gpus": 16}), spec_variant(spec, **{"training.global_batch_size": 128})]
    other = [spec_variant(spec, **{path: value}) for path, value in (
        ("training.seq_len", 8192), ("assumptions.dp_comm_overlap", 0.25), ("assumptions.preset", "textbook"),
        ("cluster.gpu", "H800"), ("search.memory_margin_gib", 2.0), ("model.vocab_size", 32000))]
    assert all(s is not None for s in same + other)
    assert {spec_key(s) for s in same} == {spec_key(spec)}
    assert len({spec_key(s) for s in other} | {spec_key(spec)}) == len(other) + 1


def test_the_key_holds_the_frameworks_conventions_not_its_name():
    """One spec under each framework: two share a key exactly when their resolved assumptions (the conventions the
    loader merged) are equal; the framework's rules are not in the key."""
    specs = {name: validate_spec({**LLAMA, "framework": name}) for name in (*FRAMEWORKS, "any")}
    for a, b in itertools.combinations(specs.values(), 2):
        same = resolve_assumptions(a.assumptions) == resolve_assumptions(b.assumptions)
        assert (spec_key(a) == spec_key(b)) == same, (a.framework, b.framework)
    assert spec_key(specs["any"]) == spec_key(specs["megatron-core"])  # what the per-framework solves share


@pytest.mark.parametrize("name", ["megatron-core", "torchtitan"])
def test_the_costs_never_read_the_framework(name):
    """Every choice's costs with the spec's framework renamed and its binding poisoned (any read raises) equal the
    costs under its own: what lets the key leave the framework out."""
    spec = validate_spec({**LLAMA, "framework": name})
    with cache_off():
        own = Problem.build(spec)
        blind = Problem.build(spec)
    blind.spec = spec.model_copy(update={"framework": "deepspeed" if name != "deepspeed" else "any"})
    blind.spec._bound = Poison()
    assert len(own.choices) > 100
    for i in range(len(own.choices)):
        assert blind.costs(i) == own.costs(i), own.choices[i]


def test_another_code_version_is_another_key(monkeypatch):
    spec = validate_spec(LLAMA)
    before = spec_key(spec)
    monkeypatch.setattr(warm_cache, "code_version", lambda: "another")
    assert spec_key(spec) != before


def test_shared_costs_equal_own_costs_choice_by_choice():
    """Every choice's costs through the cache (m = 1 base, shared memo) equal the problem's own, field by field, at
    two global batches and two GPU counts sharing one entry."""
    spec = validate_spec({**LLAMA, "framework": "any"})
    for gpus, gbs in ((8, 64), (8, 72), (16, 64)):
        s = spec_variant(spec, **{"cluster.num_gpus": gpus, "training.global_batch_size": gbs})
        shared = Problem.build(s)
        assert shared.pieces is not None
        with cache_off():
            own = Problem.build(s)
        assert own.pieces is None and len(own.choices) == len(shared.choices)
        for i in range(0, len(own.choices), 3):
            assert shared.costs(i) == own.costs(i), own.choices[i]
    assert len(WARM) == 1


@settings(max_examples=sized(8, 20), deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture])
@given(spec=small_specs(), data=st.data())
def test_one_base_key_one_base_choice(spec, data):
    """The costs are kept by warm_cache.base_key: the choices of one key, at two global batches, have one base choice
    (the one whose costs are kept), and the key of a base choice's own is the choices' (the key never names two)."""
    other = spec.model_dump(mode="json", exclude_none=True)
    other["training"]["global_batch_size"] = data.draw(st.sampled_from([2, 4, 8, 12, 16, 32, 64]))
    try:
        other = validate_spec(other)
    except ParplanError:
        other = spec
    with cache_off():
        choices = Problem.build(spec).choices + Problem.build(other).choices
    assume(choices)
    bases: dict = {}
    for c in choices:
        base = warm_cache.base_choice(c, spec)
        assert bases.setdefault(warm_cache.base_key(c, spec), base) == base, c
    for key, base in bases.items():
        if key[-1] is None:  # an m-free choice's base is m-free too, with m = 1
            assert warm_cache.base_key(base, spec) == key and base.num_microbatches == 1


@settings(max_examples=sized(8, 15), deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture])
@given(spec=small_specs(), data=st.data())
def test_cached_answers_equal_uncached_on_near_identical_specs(spec, data):
    """Near-identical requests in a random order, solved warm (each reads what the ones before left), give the same
    bytes as each solved with the cache off."""
    changes = [{}, {"cluster.num_gpus": data.draw(st.sampled_from([1, 2, 4, 8, 16]))},
               {"training.global_batch_size": data.draw(st.sampled_from([4, 8, 12, 16, 24, 32, 48, 64]))},
               {"training.seq_len": data.draw(st.sampled_from([512, 1024, 2048]))},
               {"assumptions.dp_comm_overlap": data.draw(st.sampled_from([0.0, 0.5, 1.0]))},
               {"assumptions.matmul_efficiency_hopper": 0.5, "assumptions.matmul_efficiency_ampere": 0.5}]
    specs = [s for s in (spec_variant(spec, **c) for c in data.draw(st.permutations(changes))) if s is not None]
    assume(len(specs) >= 3)
    WARM.clear()  # (the fixture runs once for all examples)
    warm = [answer(s) for s in specs]
    assert len(WARM) >= 1  # (explanations and pinned plans build problems of other keys beside these)
    with cache_off():
        cold = [answer(s) for s in specs]
    assert warm == cold


@settings(max_examples=8, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture])
@given(spec=small_specs(tiny=True))
def test_per_framework_answers_warm_equal_cold(no_explanations, spec):
    """The best on each framework (one spec under Megatron-Core; the others' solves share the pieces of equal
    conventions, and each is seeded with the plans found before it) gives the same bytes warm as with the cache
    off."""
    try:
        spec = spec_for_framework(spec, "megatron-core")
    except (ParplanError, ValueError):
        assume(False)
    controls = SolverControls(deterministic=True)

    def per_framework() -> str:
        result = optimize(spec, controls=controls)
        assume(result.plans)
        return json.dumps([framework_best_to_dict(e) for e in best_per_framework(spec, result, controls=controls)],
                          sort_keys=True)

    WARM.clear()
    warm = per_framework()
    with cache_off():
        assert warm == per_framework()


def _poison(entry: SpecPieces) -> None:
    for pieces in (entry.memo, entry.base_costs, entry.costs, entry.evaluated, entry.mean_parts, entry.spaces):
        for k in pieces:
            pieces[k] = Poison()
    for k in entry.layer_sums:
        entry.layer_sums[k] = float("nan")
    for k in entry.relaxations:  # (the bounds' parts: solver/shared_bounds.py)
        entry.relaxations[k] = (float("nan"),) * 3


@settings(max_examples=sized(10, 20), deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture])
@given(spec=small_specs(tiny=True), change=st.sampled_from([
    {"training.seq_len": 256}, {"assumptions.dp_comm_overlap": 0.0}, {"assumptions.preset": "textbook"},
    {"assumptions.attention_efficiency_hopper": 0.5, "assumptions.attention_efficiency_ampere": 0.5},
    {"model.vocab_size": 777}, "version"]))
def test_an_entry_of_another_key_is_never_read(spec, change, monkeypatch):
    """Warm one spec, poison its entry (its bounds' parts included), then solve a spec of another key (another
    sequence, assumption, calibration knob, model field or code version): its answer is the uncached one, no poisoned
    piece read."""
    WARM.clear()  # (the fixture runs once for all examples)
    answer(spec)
    assert len(WARM) >= 1
    for entry in WARM._entries.values():
        _poison(entry)
    if change == "version":
        monkeypatch.setattr(warm_cache, "code_version", lambda: "another version")
        other = spec
    else:
        other = spec_variant(spec, **change)
        assume(other is not None)
    assume(spec_key(other) not in WARM._entries)
    got = answer(other)
    monkeypatch.undo()
    with cache_off():
        assert got == answer(other)


def test_a_request_repeated_reads_its_space(monkeypatch):
    """The space is kept by GPU count, batch, framework and options beside the entry's key, from its request's first
    call where it fits the cache's share: the second call reads the first's Space, equal to one enumerated alone;
    another batch, GPU count, framework of the same key (any and Megatron-Core, whose rules differ) or options
    enumerates its own; at most SPACES_KEPT are held, their bytes counted; none past the share."""
    spec = validate_spec({**LLAMA, "framework": "megatron-core"})
    first = Problem.build(spec)
    entry = first.pieces
    assert list(entry.spaces.values()) == [first.space]  # kept from the first call
    assert Problem.build(spec).space is first.space
    with cache_off():
        alone = Problem.build(spec).space
    assert alone.choices == first.space.choices and alone.rejected == first.space.rejected
    others = [spec_variant(spec, **{"training.global_batch_size": 128}), spec_variant(spec, **{"cluster.num_gpus": 16}),
              validate_spec({**LLAMA, "framework": "any"})]
    assert spec_key(others[2]) == spec_key(spec)  # one entry, two frameworks' rules
    for other in others:
        spaces = [Problem.build(other).space for _ in range(2)]
        with cache_off():
            own = Problem.build(other).space
        assert spaces[1] is spaces[0] is not first.space
        assert spaces[1].choices == own.choices and spaces[1].rejected == own.rejected
    relaxed = replace(first.options, pp=(1,))
    pinned = Problem.build(spec, options=relaxed).space
    with cache_off():
        assert pinned is not first.space and pinned.choices == Problem.build(spec, options=relaxed).choices
    assert len(WARM) == 1 and len(entry.spaces) <= warm_cache.SPACES_KEPT
    for gbs in (16, 24, 32, 40, 48):
        Problem.build(spec_variant(spec, **{"training.global_batch_size": gbs}))
        assert len(entry.spaces) <= warm_cache.SPACES_KEPT and entry.space_choices == sum(
            len(s.choices) for s in entry.spaces.values())
    with cache_off():
        cold = answer(spec)
    assert [answer(spec) for _ in range(3)] == [cold] * 3  # the second and third read the first's space and bounds
    monkeypatch.setattr(WARM, "limit_bytes", lambda: entry.nbytes)  # no room for a space beside the entry's pieces
    tight = spec_variant(spec, **{"training.global_batch_size": 96})
    assert Problem.build(tight).space is not Problem.build(tight).space and not entry.spaces


def test_the_spaces_go_before_the_entries(monkeypatch):
    """Past the share, the least recent entries' spaces are dropped (their bytes uncounted) before any entry."""
    cache = WarmCache()
    specs = [validate_spec({**LLAMA, "training": {"seq_len": s, "global_batch_size": 64}}) for s in (1024, 2048)]
    entries = [cache.pieces(s) for s in specs]
    for entry, spec in zip(entries, specs):
        with cache_off():
            entry.space(spec, Problem.build(spec).options, lambda memo: Problem.build(spec).space)
        assert entry.space_choices > 0
    entries[1].memo["a piece"] = 1
    limit = sum(e.nbytes for e in entries) - warm_cache.CHOICE_BYTES * entries[0].space_choices
    monkeypatch.setattr(cache, "limit_bytes", lambda: limit)
    assert cache.pieces(specs[1]) is entries[1] and len(cache) == 2 and cache.evictions == 0
    assert not entries[0].spaces and entries[0].space_choices == 0 and entries[1].spaces
    assert cache.nbytes() == limit
    limit = entries[1].nbytes - 1  # the one in use alone past the share: its spaces go first
    assert cache.pieces(specs[1]) is entries[1] and len(cache) == 1 and cache.evictions == 1
    assert not entries[1].spaces and entries[1].memo == {"a piece": 1}


def test_evaluate_shares_the_plans_costs():
    """An Evaluate of the plan a Plan call answered reads the costs that call's re-evaluation left, and gives the
    uncached evaluator's bytes."""
    spec = validate_spec(LLAMA)
    plan = optimize(spec).plans[0].plan
    entry = next(iter(WARM._entries.values()))
    assert len(entry.evaluated) == 1
    warm = evaluation_to_dict(evaluate(spec, plan, **WARM.evaluation_inputs(spec)))
    assert len(entry.evaluated) == 1 and WARM.hits >= 1
    assert json.dumps(warm, sort_keys=True) == json.dumps(evaluation_to_dict(evaluate(spec, plan)), sort_keys=True)


def test_the_lru_drops_the_least_recent_within_its_share(monkeypatch):
    cache = WarmCache()
    monkeypatch.setattr(cache, "limit_bytes", lambda: 3 * warm_cache.ENTRY_BYTES + 1)
    specs = [validate_spec({**LLAMA, "training": {"seq_len": s, "global_batch_size": 64}}) for s in (1024, 2048, 4096)]
    first = [cache.pieces(s) for s in specs]
    assert len(cache) == 3 and cache.evictions == 0
    cache.pieces(specs[0])  # the first is now the most recent
    cache.pieces(validate_spec({**LLAMA, "training": {"seq_len": 512, "global_batch_size": 64}}))
    assert len(cache) == 3 and cache.evictions == 1
    assert cache.pieces(specs[0]) is first[0] and cache.pieces(specs[2]) is first[2]
    assert cache.pieces(specs[1]) is not first[1]  # dropped: built anew
    big = cache.pieces(specs[0])
    big.memo.update({i: i for i in range(10)})  # one entry alone past the share: its pieces start over
    monkeypatch.setattr(cache, "limit_bytes", lambda: warm_cache.ENTRY_BYTES)
    assert cache.pieces(specs[0]) is big and not big.memo and len(cache) == 1


def test_off_builds_alone():
    spec = validate_spec(LLAMA)
    with cache_off():
        assert Problem.build(spec).pieces is None and WARM.evaluation_inputs(spec) == {}
    assert len(WARM) == 0


def test_the_process_frees_its_pieces_at_exit():
    """At exit the cache is emptied before the interpreter's last collection (a handler registered before the
    module's import runs after its own, LIFO, and finds it empty)."""
    import subprocess
    import sys

    code = ("import atexit, sys\n"
            "atexit.register(lambda: print('left', len(sys.modules['parplan.solver.warm_cache'].WARM)))\n"
            "from parplan.frameworks.loader import validate_spec\n"
            "from parplan.solver.problem import Problem\n"
            f"Problem.build(validate_spec({LLAMA!r}))\n"
            "print('held', len(sys.modules['parplan.solver.warm_cache'].WARM))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["held", "1", "left", "0"]


def test_the_share_is_of_the_smaller_of_the_process_and_the_call_budget():
    """Inside a call whose memory budget is below the process's, the cache keeps a quarter of the call's budget; a
    larger call budget leaves the process's share (warm_cache.share_bytes)."""
    from parplan.solver.deadline import MIB, call_limits, default_memory_budget_mib

    process_share = default_memory_budget_mib() * MIB // warm_cache.CACHE_SHARE
    assert warm_cache.share_bytes() == process_share
    with call_limits(None, None, 256):
        assert warm_cache.share_bytes() == 256 * MIB // warm_cache.CACHE_SHARE < process_share
    with call_limits(None, None, 4 * default_memory_budget_mib()):
        assert warm_cache.share_bytes() == process_share
