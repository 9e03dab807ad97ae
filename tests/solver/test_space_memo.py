"""solver/space_memo.py: the enumeration's verdicts kept across global batches. A space enumerated with the memo of
earlier global batches is the space enumerated alone (its choices in order, field order included, and its rejection
tally in order), on random specs with every search dimension drawn and on DeepSeek-V3's space; the warm entry keeps
one memo per framework and options (every GPU count and batch reads it), and each part of that key is needed: with
it dropped, some request reads another's verdicts and its space differs."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from benchmarks.solver_speed import LLAMA8B, SCENARIOS
from tests.conftest import small_specs, spec_repr, spec_variant
from parplan.costmodel.spec.assumptions import resolve_assumptions
from parplan.costmodel.spec.hardware import resolve_gpu
from parplan.frameworks.loader import validate_spec
from parplan.solver import space_memo, warm_cache
from parplan.solver.problem import Problem
from parplan.solver.space import SpaceOptions, enumerate_choices
from parplan.solver.space_memo import EnumerationMemo
from parplan.solver.warm_cache import WARM

pytestmark = pytest.mark.usefixtures("fresh_warm_cache")  # tests/conftest.py


def _same(kept, alone, label):
    assert kept.choices == alone.choices, label
    assert [c.__dict__ for c in kept.choices] == [c.__dict__ for c in alone.choices], label  # field order too
    assert list(kept.rejected.items()) == list(alone.rejected.items()), label


def _space(spec, memo=None):
    return enumerate_choices(spec, resolve_gpu(spec.cluster), resolve_assumptions(spec.assumptions),
                             SpaceOptions.from_spec(spec), memo=memo)


@settings(max_examples=40, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(spec=small_specs(memory_dims=True, activation_offload=True),
       batches=st.lists(st.sampled_from([4, 6, 8, 12, 16, 24, 30, 32, 48, 64]), min_size=2, max_size=4),
       gpus=st.lists(st.sampled_from([1, 2, 4, 6, 8, 16]), min_size=4, max_size=4))
def test_a_memo_of_other_batches_gives_the_space_alone(spec, batches, gpus):
    """One memo through several global batches and GPU counts (repeats included): each space equals the one
    enumerated alone."""
    memo, compared = EnumerationMemo(), 0
    for gbs, n in zip(batches, gpus):
        other = spec_variant(spec, **{"training.global_batch_size": gbs, "cluster.num_gpus": n})
        if other is not None:  # (a batch or GPU count the spec's rules refuse: the next one)
            _same(_space(other, memo), _space(other), f"{spec_repr(other)} after {batches}")
            compared += bool(_space(other).choices)
    assume(compared >= 2)  # a memo read by a later space with choices


def test_deepseek_v3_across_batches():
    """DeepSeek-V3 (trimmed and uniform interleaved layouts, EP, FP8 dispatch and the all-to-all overlap listed)."""
    raw = dict(dict(SCENARIOS)["DeepSeek-V3 671B / 2048 H800, 4K"])
    raw["training"] = {**raw["training"], "precision": "fp8"}
    raw["search"] = {**(raw.get("search") or {}), "moe_fp8_dispatch": [False, True], "moe_a2a_overlap": [False, True]}
    spec = validate_spec(raw)
    memo = EnumerationMemo()
    base = spec.training.global_batch_size
    for gbs in (base, base + 512, base - 1024):
        other = spec_variant(spec, **{"training.global_batch_size": gbs})
        _same(_space(other, memo), _space(other), gbs)
    assert memo.patterns and memo.ruled


LLAMA = {"model": LLAMA8B, "training": {"seq_len": 4096, "global_batch_size": 64},
         "cluster": {"gpu": "H100-SXM-80GB", "num_gpus": 8, "gpus_per_node": 8}}
# (what the second request changes, the memo_key part that tells them apart)
OTHERS = [("megatron-core", 0), ("options", 1)]


def _warm_pair(change):
    """Two requests of one warm entry under the first's space options (the first's memo kept; "options": other
    options) and the second's space alone."""
    spec = validate_spec({**LLAMA, "framework": "any"})
    options = SpaceOptions.from_spec(spec)
    Problem.build(spec, options=options)
    other = spec
    if change == "options":
        options = options.__class__(**{**options.__dict__, "recompute": ("none",)})
    else:  # Megatron-Core's rules differ from any's; the conventions, the entry's key, do not
        other = validate_spec({**LLAMA, "framework": change})
        assert warm_cache.spec_key(other) == warm_cache.spec_key(spec)  # one entry: the memo's key tells them apart
    return Problem.build(other, options=options).space, enumerate_choices(
        other, resolve_gpu(other.cluster), resolve_assumptions(other.assumptions), options)


@pytest.mark.parametrize("change, part", OTHERS)
def test_each_part_of_the_key_is_needed(monkeypatch, change, part):
    """Through the warm entry (Problem.build), a request of another framework or options gets its own memo and the
    space alone; with that part dropped from space_memo.memo_key, some verdict of the first is read
    and the space differs (the key is no weaker than it must be)."""
    warm, alone = _warm_pair(change)
    _same(warm, alone, change)
    WARM.clear()
    key = space_memo.memo_key
    monkeypatch.setattr(warm_cache, "memo_key", lambda *a: tuple(v for j, v in enumerate(key(*a)) if j != part))
    warm, alone = _warm_pair(change)
    assert warm.choices != alone.choices or list(warm.rejected.items()) != list(alone.rejected.items())


def test_the_memos_kept_are_bounded():
    """One memo serves every GPU count and batch of a framework and options; at most ENUMERATION_MEMOS_KEPT per
    entry, counted in its bytes."""
    spec = validate_spec(LLAMA)
    for gpus in (1, 2, 4, 8, 16, 32):
        for gbs in (32, 48):
            other = spec_variant(spec, **{"cluster.num_gpus": gpus, "training.global_batch_size": gbs})
            if other is not None:
                _same(Problem.build(other).space, _space(other), (gpus, gbs))
    (entry,) = WARM._entries.values()
    assert len(entry.enumerations) == 1
    for pp in range(1, 8):
        options = SpaceOptions.from_spec(spec)
        Problem.build(spec, options=options.__class__(**{**options.__dict__, "pp": (pp,)}))
    assert 0 < len(entry.enumerations) <= warm_cache.ENUMERATION_MEMOS_KEPT
    assert entry.nbytes >= sum(m.nbytes for m in entry.enumerations.values()) > 0
