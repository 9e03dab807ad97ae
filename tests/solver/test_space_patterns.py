"""solver/space_patterns.py: the heads of one signature share the completions the rules give the first of them. A
space so enumerated is the space the rules give when asked for every head (its choices in order, its rejection tally in
order), on random specs with every search dimension drawn and on DeepSeek-V3's 116k choices (trimmed and uniform
interleaved layouts, EP communication choices)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

from benchmarks.solver_speed import SCENARIOS
from tests.conftest import small_specs, spec_repr
from parplan.costmodel.spec.assumptions import resolve_assumptions
from parplan.costmodel.spec.hardware import resolve_gpu
from parplan.frameworks.loader import validate_spec
from parplan.solver import space_patterns
from parplan.solver.space import enumerate_choices


def _shared_and_asked(monkeypatch, spec):
    a, gpu = resolve_assumptions(spec.assumptions), resolve_gpu(spec.cluster)
    shared = enumerate_choices(spec, gpu, a)
    with monkeypatch.context() as m:  # every head expanded by the rules
        m.setattr(space_patterns.SharedCompletions, "__call__", lambda self, head: self.expansion.completions(head))
        asked = enumerate_choices(spec, gpu, a)
    return shared, asked


def _assert_same(shared, asked, label):
    assert shared.choices == asked.choices, label
    assert [c.__dict__ for c in shared.choices] == [c.__dict__ for c in asked.choices], label  # field order too
    assert list(shared.rejected.items()) == list(asked.rejected.items()), label


@settings(max_examples=60, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(spec=small_specs(memory_dims=True, activation_offload=True))
def test_shared_completions_are_the_rules_completions(monkeypatch, spec):
    _assert_same(*_shared_and_asked(monkeypatch, spec), spec_repr(spec))


@pytest.mark.parametrize("precision", ["bf16", "fp8"])
def test_shared_completions_with_ep_communication_choices(monkeypatch, precision):
    """DeepSeek-V3's space with FP8 dispatch and the all-to-all overlap listed (the overlap takes 'none' back for 'full';
    FP8 dispatch is legal under FP8 training only) and one of its heads' signatures shared by many heads."""
    raw = dict(dict(SCENARIOS)["DeepSeek-V3 671B / 2048 H800, 4K"])
    raw["training"] = {**raw["training"], "precision": precision}
    raw["search"] = {**(raw.get("search") or {}), "moe_fp8_dispatch": [False, True], "moe_a2a_overlap": [False, True]}
    shared, asked = _shared_and_asked(monkeypatch, validate_spec(raw))
    _assert_same(shared, asked, precision)
    assert len(shared.choices) > 50_000 and any(c.moe_a2a_overlap for c in shared.choices)
    assert any(c.first_chunk_trim or c.last_chunk_trim for c in shared.choices)
    assert precision == "bf16" or any(c.moe_fp8_dispatch for c in shared.choices)


@pytest.mark.parametrize("name", ["405B / 2048 H100, 8K", "DeepSeek-V3 671B / 2048 H800, 4K"])
def test_shared_completions_under_uniform_recompute(monkeypatch, name):
    """One recompute count per stage (search.uniform_recompute): a trimmed layout has no uniform 'full' (space.py
    PrunedValues.recompute_trimmed), so its heads' completions differ from an untrimmed layout's of the same degrees
    (space_patterns.signature tells the two apart)."""
    raw = dict(dict(SCENARIOS)[name])
    raw["search"] = {**(raw.get("search") or {}), "uniform_recompute": True}
    shared, asked = _shared_and_asked(monkeypatch, validate_spec(raw))
    _assert_same(shared, asked, name)
    trimmed = {c.recompute for c in shared.choices if c.first_chunk_trim or c.last_chunk_trim}
    assert trimmed and "full" not in trimmed and any(c.recompute == "full" for c in shared.choices)
