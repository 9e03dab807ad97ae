"""solver/bounds.py's layer bound (Problem.layer_bound, the search's bound between the quick and the mean-unit bound):
every choice of one ``layer_key`` has the same layer times in a fresh ``choice_costs`` (the key is all they read),
the bound never exceeds the mean-unit bound, which never exceeds the table's optimum, and the check that says so
fails once the bound's layer time is doubled (a mutation: the check can fail). Scenarios: benchmarks/solver_speed.py's
DeepSeek-V3 (DualPipe, ZB-H1, 1F1B, first dense layers), Mixtral (interleaved MoE) and Llama 3 405B (dense,
interleaved with trimmed chunks)."""

from __future__ import annotations

import random
from collections import Counter, defaultdict

import pytest
from hypothesis import HealthCheck, assume, given, settings

from benchmarks.solver_speed import SCENARIOS
from tests.conftest import sized, small_specs
from parplan.costmodel.evaluation.choice import choice_costs, layer_times
from parplan.frameworks.loader import validate_spec
from parplan.solver import bounds
from parplan.solver.bounds import layer_key, layer_sum_s
from parplan.solver.oracle import solve_table
from parplan.solver.problem import Problem

NAMES = ("DeepSeek-V3 671B / 2048 H800, 4K", "Mixtral 8x7B / 64 H100, 4K", "405B / 2048 H100, 8K")
_PROBLEMS: dict[str, Problem] = {}


def _problem(name: str) -> Problem:
    if name not in _PROBLEMS:
        _PROBLEMS[name] = Problem.build(validate_spec(dict(SCENARIOS)[name]))
    return _PROBLEMS[name]


def _sample(p: Problem, n: int, seed: int = 7) -> list[int]:
    order = p.order(p.cap_kib)
    return random.Random(seed).sample(order, min(n, len(order)))


def _violations(p: Problem, sample: list[int]) -> list[tuple]:
    """Choices whose layer bound exceeds their mean-unit bound (or whose quick bound does)."""
    out = []
    for i in sample:
        layer, mean = p.layer_bound(i), p.mean_bound(i)
        if layer > mean or float(p.quick_lb[i]) > mean:
            out.append((p.choices[i], layer, mean))
    return out


@pytest.mark.parametrize("name", NAMES)
def test_choices_of_one_key_have_the_same_layer_times(name):
    p = _problem(name)
    moe = p.spec.model.moe
    groups: dict[tuple, list[float]] = defaultdict(list)
    for i in _sample(p, 600):
        c = p.choices[i]
        fresh = choice_costs(p.spec, c, p.gpu, p.assumptions, p.arch)
        groups[layer_key(c, p.domain)].append(layer_sum_s(fresh.dense, fresh.moe, p.num_layers, moe.first_dense_layers if moe
                                                else 0))
        for field in ("compute_s", "tp_s", "ep_s"):  # field by field, the dense and the MoE layer
            cached = p.costs(i)
            for lc, lf in ((cached.dense, fresh.dense), (cached.moe, fresh.moe)):
                if lc is not None:
                    assert getattr(lc, field) == getattr(lf, field), (c, field)
    shared = [v for v in groups.values() if len(v) > 1]
    assert shared, "the sample shares no key: the test would check nothing"
    for values in shared:
        assert len(set(values)) == 1, values


@pytest.mark.parametrize("name", NAMES)
def test_layer_bound_never_exceeds_the_mean_bound(name):
    p = _problem(name)
    sample = _sample(p, 400, seed=11)
    assert _violations(p, sample) == []
    assert sum(p.layer_bound(i) > p.quick_lb[i] for i in sample) > len(sample) // 4  # it does tighten


def test_mean_bound_never_exceeds_the_table_optimum():
    p = _problem(NAMES[0])
    for i in _sample(p, 6, seed=3):
        sol = solve_table(p.table(i), p.cap_kib)
        if sol is not None:
            assert p.layer_bound(i) <= p.mean_bound(i) <= sol.U


def test_doubling_the_layer_time_breaks_the_bound(monkeypatch):
    p = Problem.build(validate_spec(dict(SCENARIOS)[NAMES[0]]))
    sample = _sample(p, 400, seed=11)
    real = bounds.layer_bound
    monkeypatch.setattr("parplan.solver.problem.layer_bound", lambda s, *a: real(2 * s, *a))
    assert _violations(p, sample)


@pytest.mark.parametrize("name", NAMES)
def test_the_shared_pieces_change_no_cost(name):
    """choice_costs with one memo across many choices (as a Problem shares it) equals choice_costs without, field by
    field (ChoiceCosts and LayerCost compare every field exactly)."""
    p = _problem(name)
    memo: dict = {}
    sample = _sample(p, 500, seed=13)
    for i in sample:
        c = p.choices[i]
        fresh = choice_costs(p.spec, c, p.gpu, p.assumptions, p.arch)
        assert choice_costs(p.spec, c, p.gpu, p.assumptions, p.arch, memo) == fresh, c
        # the layer bound's layer times (costmodel.evaluation.choice.layer_times): the same three terms, with the memo or not
        for m in (memo, None):
            for times, layer in zip(layer_times(p.spec, c, p.gpu, p.assumptions, p.arch, m), (fresh.dense, fresh.moe)):
                assert (times is None) == (layer is None)
                if layer is not None:
                    assert (times.compute_s, times.tp_s, times.ep_s) == (layer.compute_s, layer.tp_s, layer.ep_s), c
    kinds = Counter(key[0] for key in memo)  # shared: each piece has fewer entries than choices
    expected = {"GemmRates", "Activations", "Comm", "LayerComm", "DenseLayerTimes", "ChoiceContext", "DenseActivations"} | (
        {"MoeLayerTimes", "MoeShapeTerms", "MoeNonexpertGemms"} if p.spec.model.moe else set())
    assert set(kinds) == expected and max(kinds.values()) < len(sample), kinds


@settings(max_examples=sized(60, 150), deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(spec=small_specs(memory_dims=True))
def test_one_memo_over_a_random_space_changes_no_cost(spec):
    """The memo's keys name every field their pieces read, on random specs (dense and MoE, MLA, MTP, dispatchers,
    CP, HSDP, optimizer dtypes and offload, every schedule): choice_costs over all of a problem's choices with one
    shared memo, in the space's order, equals choice_costs without a memo."""
    p = Problem.build(spec)
    assume(p.choices)
    _one_memo_changes_no_cost(p, p.choices[::max(1, len(p.choices) // 150)])


@settings(max_examples=sized(20, 60), deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(spec=small_specs(memory_dims=True))
def test_one_memo_over_two_gpu_counts_of_a_random_spec_changes_no_cost(spec):
    """The same with one memo over the spec at its GPU count and at twice it (a request repeated at a new GPU count
    reads the pieces the first built: costmodel/communication/mesh.py layer_world_key in place of the world size)."""
    problems = [Problem.build(spec), Problem.build(spec.at_gpus(2 * spec.cluster.num_gpus))]
    assume(all(p.choices for p in problems))
    memo: dict = {}
    for p in problems:
        for c in p.choices[::max(1, len(p.choices) // 80)]:
            assert choice_costs(p.spec, c, p.gpu, p.assumptions, p.arch, memo) == \
                choice_costs(p.spec, c, p.gpu, p.assumptions, p.arch), c


def test_one_memo_over_the_ep_communication_choices_changes_no_cost():
    """The same over every choice of an FP8 MoE spec whose space holds FP8 dispatch and the all-to-all overlap on
    and off at EP 2-8 under 1F1B, interleaved and DualPipe (the random specs rarely draw FP8 dispatch)."""
    spec = validate_spec(dict(
        framework="any",
        model=dict(name="tiny-moe", num_layers=4, hidden_size=512, ffn_hidden_size=1024, num_attention_heads=8,
                   vocab_size=8000, gated_mlp=True, tie_embeddings=False,
                   moe=dict(num_experts=8, top_k=2, expert_ffn_hidden_size=512, first_dense_layers=1)),
        training=dict(seq_len=1024, global_batch_size=16, precision="fp8"),
        cluster=dict(gpu="H100-SXM-80GB", num_gpus=8, gpus_per_node=4),
        search=dict(moe_fp8_dispatch=[False, True], moe_a2a_overlap=[False, True], ep=[2, 4, 8],
                    schedules=["1f1b", "interleaved", "dualpipe"])))
    p = Problem.build(spec)
    # the space keeps FP8 dispatch only (BF16 dispatch moves twice the bytes at the same memory): add the BF16 twins
    choices = [d for c in p.choices for d in (c, c.but(moe_fp8_dispatch=not c.moe_fp8_dispatch))]
    assert {(c.moe_fp8_dispatch, c.moe_a2a_overlap) for c in choices} == {(f, o) for f in (0, 1) for o in (0, 1)}
    _one_memo_changes_no_cost(p, choices)


def _one_memo_changes_no_cost(p: Problem, choices) -> None:
    memo: dict = {}
    for c in choices:
        assert choice_costs(p.spec, c, p.gpu, p.assumptions, p.arch, memo) == \
            choice_costs(p.spec, c, p.gpu, p.assumptions, p.arch), c


def test_overlapped_choices_of_one_lone_share_have_the_same_layer_times():
    """Under combined 1F1B the layer key holds the share of lone passes, not the (pp, vpp, m) that set it
    (costmodel/evaluation/moe_layer.py lone_share_key): every overlapped choice of a key, whatever its three, has the
    key's layer times in a fresh choice_costs, and some key holds choices of different (pp, vpp, m)."""
    spec = validate_spec(dict(
        framework="any",
        model=dict(name="tiny-moe", num_layers=8, hidden_size=512, ffn_hidden_size=1024, num_attention_heads=8,
                   vocab_size=8000, moe=dict(num_experts=8, top_k=2, expert_ffn_hidden_size=512)),
        training=dict(seq_len=1024, global_batch_size=64), cluster=dict(gpu="H100-SXM-80GB", num_gpus=16),
        search=dict(moe_a2a_overlap=[True], ep=[2, 4, 8], schedules=["1f1b", "interleaved"])))
    p = Problem.build(spec)
    groups: dict[tuple, set] = defaultdict(set)
    combos: dict[tuple, set] = defaultdict(set)
    for c in p.choices:
        assert c.moe_a2a_overlap
        fresh = choice_costs(p.spec, c, p.gpu, p.assumptions, p.arch)
        groups[layer_key(c, p.domain)].add(tuple(getattr(lc, f) for lc in (fresh.dense, fresh.moe)
                                       for f in ("compute_s", "tp_s", "ep_s")))
        combos[layer_key(c, p.domain)].add((c.pp, c.vpp, c.num_microbatches))
    assert any(len(v) > 1 for v in combos.values()), "no key shared by two (pp, vpp, m): the test checks nothing"
    assert all(len(v) == 1 for v in groups.values()), [v for v in groups.values() if len(v) > 1][:2]


@pytest.mark.parametrize("domain", [6, 8])
def test_one_memo_over_several_gpu_counts_changes_no_cost(domain):
    """The memo's and the layer key's world size (costmodel/communication/mesh.py layer_world_key) hold all that the
    layer pieces read of the GPU count: one memo over the choices of one spec at 4 to 8 domains of GPUs (domains of 6,
    which power-of-two groups straddle, and of 8) gives every choice the costs of a fresh choice_costs, every layer
    key holds one layer time across the GPU counts, and some key is shared by two counts (the reuse a request at a
    new GPU count gets: solver/warm_cache.py)."""
    memo: dict = {}
    times: dict[tuple, set] = defaultdict(set)
    counts: dict[tuple, set] = defaultdict(set)
    for gpus in (4, domain, 2 * domain, 4 * domain, 8 * domain):
        spec = validate_spec(dict(
            framework="any",
            model=dict(name="tiny-moe", num_layers=4, hidden_size=512, ffn_hidden_size=1024, num_attention_heads=8,
                       vocab_size=8000, moe=dict(num_experts=8, top_k=2, expert_ffn_hidden_size=512)),
            training=dict(seq_len=2048, global_batch_size=48),
            cluster=dict(gpu="H100-SXM-80GB", num_gpus=gpus, gpus_per_node=domain, nvlink_domain_size=domain),
            search=dict(ep=[1, 2, 4, 8], cp=[1, 2, 4], cp_comm_types=["p2p", "a2a+p2p"])))
        p = Problem.build(spec)
        assert p.domain == domain
        for c in p.choices[::max(1, len(p.choices) // 120)]:
            fresh = choice_costs(p.spec, c, p.gpu, p.assumptions, p.arch)
            assert choice_costs(p.spec, c, p.gpu, p.assumptions, p.arch, memo) == fresh, c
            key = layer_key(c, p.domain)
            times[key].add(tuple(getattr(lc, f) for lc in (fresh.dense, fresh.moe) for f in ("compute_s", "tp_s", "ep_s")))
            counts[key].add(gpus)
    assert any(len(v) > 1 for v in counts.values()), "no layer key shared by two GPU counts: the test checks nothing"
    assert all(len(v) == 1 for v in times.values()), [v for v in times.values() if len(v) > 1][:2]
