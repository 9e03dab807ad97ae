"""The solver against oracles: CP-SAT vs the exhaustive search, and both vs a brute force over the float
cost model.

Acceptance criteria checked here:

* "Optimality: on at least 300 random small specs (hypothesis), the CP-SAT optimum equals the oracle's
  (within 0.1 % after re-evaluation), every returned plan satisfies every constraint, and INFEASIBLE
  agrees." -- :func:`test_cpsat_matches_exhaustive` (300 derandomized examples).
* "Integer scaling error below 0.1 %, tested." -- every returned plan, in both tests below.
* An independent oracle on tiny specs: every plan (every legal degree, schedule, ZeRO stage, recompute
  granularity, stage split and per-stage recompute vector) evaluated by the float evaluator; the solver's
  best must be the minimum -- :func:`test_cpsat_matches_brute_force`. This checks the solver's per-stage
  model (every stage its own layer and recompute count; DualPipe ranks by their totals), its dominance
  pruning, bounds and integer scaling against the evaluator, not against the solver's own tables.
* "Deterministic mode (fixed seed, workers) must give byte-identical answers." -- :func:`test_deterministic`.

Known gaps the brute force found, pinned by strict xfails (they turn into failures once fixed, so the marks
get removed): an unset ``search.etp`` searches only {1, tp} (ETP_EVERY_VALUE). The earlier gap, one layer
count for all middle stages, is closed: the two cases that pinned it are plain tests now.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from unittest import mock

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parplan.costmodel.assumptions import resolve_assumptions
from parplan.costmodel.choice import Choice, choice_costs, nvlink_domain_size
from parplan.costmodel.evaluate import evaluate_costs
from parplan.costmodel.hardware import resolve_gpu
from parplan.costmodel.legality import choice_violations, stage_violations
from parplan.costmodel.spec import ALL_SCHEDULES, CP_COMM_TYPES, SCHEDULES, Plan, Spec
from parplan.solver.cpsat import SolverControls
from parplan.solver.planner import optimize

from solver_checks import check_integer_scaling, check_plan

REL_TOL = 1e-3
ROOT = Path(__file__).resolve().parents[1]
GPU_NAMES = ["A100-SXM-80GB", "A100-SXM-40GB", "H100-SXM-80GB", "H800", "H200-SXM-141GB", "B200", "MI300X"]
CPSAT = SolverControls(workers=1, deterministic=True, time_limit_s=60)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _maybe_subset(draw, values: list, p: float):
    """None (no restriction) with probability 1 - p, else a non-empty subset of ``values``."""
    if not values or draw(st.integers(0, 99)) >= 100 * p:
        return None
    return sorted(draw(st.sets(st.sampled_from(values), min_size=1, max_size=len(values))), key=values.index)


OPTIMIZER_STATES = ["fp32/fp32/fp32", "fp32/bf16/bf16", "fp16/fp8/fp8", "fp32/fp32/fp8"]


@st.composite
def small_specs(draw, tiny: bool = False, memory_dims: bool = False, activation_offload: bool = False) -> Spec:
    """Dense (and ~25 % MoE) Llama-like models on 1-16 GPUs with random ``search:`` restrictions.

    ``tiny``: at most 6 layers and 8 GPUs, one micro-batch size and one or two schedules (for the brute force).
    ``memory_dims``: always draw the memory-side dimensions (HSDP replicas, optimizer dtypes, offload shares);
    otherwise each is drawn in about a quarter of the specs. ``activation_offload``: draw
    ``search.activation_offload_layers`` (a subset of {0, 1, L - 1}; otherwise unset, today's space).
    """
    L = draw(st.integers(2, 6 if tiny else 12))
    hidden = draw(st.sampled_from([256, 512, 1024]))
    heads = draw(st.sampled_from([4, 8, 8, 16]))
    kv = draw(st.sampled_from([k for k in (2, 4, 8, 16) if heads % k == 0] + [heads, 1]))
    model = dict(name="random", num_layers=L, hidden_size=hidden,
                 ffn_hidden_size=draw(st.sampled_from([hidden, 2 * hidden, 4 * hidden, 3 * hidden + 256])),
                 num_attention_heads=heads, num_kv_heads=kv, vocab_size=draw(st.integers(1000, 50000)),
                 gated_mlp=draw(st.booleans()), tie_embeddings=draw(st.booleans()))
    moe = draw(st.integers(0, 3)) == 0
    if moe:
        model["moe"] = dict(num_experts=draw(st.sampled_from([4, 8])), top_k=draw(st.integers(1, 2)),
                            expert_ffn_hidden_size=draw(st.sampled_from([hidden // 2, hidden, 2 * hidden])),
                            num_shared_experts=draw(st.integers(0, 1)),
                            first_dense_layers=draw(st.integers(0, min(1, L - 1))),
                            max_nodes_per_token=draw(st.sampled_from([None, None, 1, 2])))
    if draw(st.integers(0, 4)) == 0:  # multi-head latent attention (issue 10)
        model["mla"] = dict(q_lora_rank=draw(st.sampled_from([0, hidden // 4])), kv_lora_rank=hidden // 8,
                            qk_nope_head_dim=draw(st.sampled_from([16, 32])),
                            qk_rope_head_dim=draw(st.sampled_from([0, 16])), v_head_dim=draw(st.sampled_from([16, 32])))
    if draw(st.integers(0, 4)) == 0:  # a multi-token-prediction module on the last stage
        model["num_mtp_layers"] = 1
    gpus = draw(st.sampled_from([1, 2, 4, 4, 8, 8] if tiny else [1, 2, 4, 4, 8, 8, 16, 16]))
    cluster = dict(gpu=draw(st.sampled_from(GPU_NAMES)), num_gpus=gpus,
                   gpus_per_node=draw(st.sampled_from([8, 8, 8, 4])))
    if draw(st.integers(0, 2)) == 0:  # small memory: recompute and infeasibility happen
        cluster["memory_gib"] = draw(st.integers(22, 160)) / 10
    search: dict = {}
    for f, p in (("tp", 0.3), ("cp", 0.25), ("pp", 0.3)):
        if (v := _maybe_subset(draw, _divisors(gpus), p)) is not None:
            search[f] = v
    if tiny:
        search["micro_batch_size"] = [draw(st.sampled_from([1, 1, 2]))]
        k = draw(st.integers(1, 2))
        search["schedules"] = sorted(draw(st.sets(st.sampled_from(ALL_SCHEDULES), min_size=k, max_size=k)),
                                     key=ALL_SCHEDULES.index)
    else:
        if (v := _maybe_subset(draw, [1, 2, 4], 0.4)) is not None:
            search["micro_batch_size"] = v
        if (v := _maybe_subset(draw, list(ALL_SCHEDULES), 0.5)) is not None:
            search["schedules"] = v
    if (v := _maybe_subset(draw, [1, 2, 3], 0.2)) is not None:
        search["vpp"] = v
    if moe:
        if (v := _maybe_subset(draw, [1, 2, 4, 8], 0.3)) is not None:
            search["ep"] = v
        if (v := _maybe_subset(draw, [1, 2], 0.2)) is not None:
            search["etp"] = v
        # the EP communication choices (costmodel/moe_comm.py); FP8 dispatch needs FP8 training
        for name in ("moe_fp8_dispatch", "moe_a2a_overlap"):
            if (v := _maybe_subset(draw, [False, True], 0.4)) is not None:
                search[name] = v
    if (v := _maybe_subset(draw, [0, 1, 2, 3], 0.5)) is not None:
        search["zero_stages"] = v
    if (v := _maybe_subset(draw, ["none", "selective", "full"], 0.6)) is not None:
        search["recompute"] = v
    if (v := _maybe_subset(draw, [True, False], 0.2)) is not None:
        search["sequence_parallel"] = v
    if (v := _maybe_subset(draw, list(CP_COMM_TYPES), 0.35)) is not None:  # CP comm types (issue 10)
        search["cp_comm_types"] = v
    search["uneven_stages"] = draw(st.booleans())
    if search["uneven_stages"] and draw(st.integers(0, 3)) == 0:
        search["stage_split"] = "first_last"
    search["uniform_recompute"] = draw(st.booleans())
    p_mem = 1.0 if memory_dims else 0.25
    if (v := _maybe_subset(draw, [1, 2, 4], p_mem)) is not None:
        search["zero_replicas"] = v
    if (v := _maybe_subset(draw, OPTIMIZER_STATES, p_mem)) is not None:
        search["optimizer_states"] = v
    if (v := _maybe_subset(draw, [0.0, 0.5, 1.0], p_mem)) is not None:
        search["optimizer_offload_fractions"] = v
    # activation offload: drawn only when asked (an extra draw would shift every derandomized example of the
    # other oracles, whose tallies count what their examples reach)
    if activation_offload and (v := _maybe_subset(draw, sorted({0, 1, L - 1}), 1.0)) is not None:
        search["activation_offload_layers"] = v
    fp8 = moe and cluster["gpu"] not in ("A100-SXM-80GB", "A100-SXM-40GB") and draw(st.integers(0, 2)) == 0
    return Spec.model_validate(dict(
        framework="any",  # the research space (issue 24.2: omitted is megatron-core)
        model=model,
        training=dict(seq_len=draw(st.sampled_from([512, 1024, 2048, 4096])),
                      global_batch_size=draw(st.sampled_from([2, 4, 8, 12, 16, 24, 32, 48, 64])),
                      precision="fp8" if fp8 else "bf16"),
        cluster=cluster, search=search, assumptions=_assumptions(draw)))


def _assumptions(draw) -> dict:
    preset = draw(st.sampled_from(["default", "textbook"]))
    out = dict(preset=preset)
    if preset == "default" and draw(st.integers(0, 3)) == 0:  # torchtitan's per-op SAC / DeepSeek-V3's selective
        out["selective_recompute_policy"] = draw(st.sampled_from(["alternate_matmuls", "deepseek_v3"]))
    if preset == "default" and draw(st.integers(0, 3)) == 0:  # SMs reserved for the all-to-all (DeepSeek-V3)
        out["ep_comm_sm_fraction"] = 0.15
    if preset == "default" and draw(st.integers(0, 3)) == 0:  # ZeRO-2/3 re-gather every micro-batch under PP
        out["zero_unsharded_across_microbatches_with_pp"] = False
    if preset == "default" and draw(st.integers(0, 3)) == 0:  # torchtitan's runtime: DTensor SP, torch pipelining
        out["sequence_parallel_saves_gathered_inputs"] = True
        out["pipeline_runtime"] = "torch"
    if draw(st.integers(0, 3)) == 0:  # optimizer offload: copies overlapping the CPU step, a slow host link
        out["optimizer_offload_overlap"] = True
        out["host_bandwidth_gbps"] = draw(st.sampled_from([4.0, 64.0]))
    return out


def _spec_repr(spec: Spec) -> str:
    return spec.model_dump_json(exclude_defaults=True)


# ------------------------------------------------------------------------------------------ CP-SAT vs exhaustive
class Tally:
    feasible = infeasible = 0


@pytest.fixture
def no_explanations():
    """The explanation of an infeasible request is tested in test_solver_infeasible.py (and on the tiny specs
    below); here it would only double the run time (it solves every relaxation). Function scope: set up once
    for all examples of the test that uses it, and undone before the next test."""
    with mock.patch("parplan.solver.explain.explain", lambda *a, **k: None):
        yield


@settings(max_examples=300, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(spec=small_specs(), top_k=st.sampled_from([1, 1, 2, 3, 5, 10]))
def test_cpsat_matches_exhaustive(no_explanations, spec, top_k):
    """CP-SAT and the exhaustive search agree on feasibility and on the k best step times (within 0.1 %,
    values, not plans: ties may pick different plans); every returned plan is legal, fits, respects the
    spec's search restrictions, and its integer objective is within 0.1 % of its float step time."""
    ex = optimize(spec, method="exhaustive", top_k=top_k)
    cp = optimize(spec, method="cpsat", top_k=top_k, controls=CPSAT)
    label = _spec_repr(spec)
    assert (ex.status == "INFEASIBLE") == (cp.status == "INFEASIBLE"), (label, ex.status, cp.status)
    assert bool(ex.plans) == bool(cp.plans), label
    if not ex.plans:
        Tally.infeasible += 1
        assert ex.status == cp.status == "INFEASIBLE", (label, ex.status, cp.status)
        return
    Tally.feasible += 1
    assert ex.status == "OPTIMAL" and cp.status == "OPTIMAL", (label, ex.status, cp.status)
    assert len(ex.plans) == len(cp.plans), (label, len(ex.plans), len(cp.plans))
    for j, (a, b) in enumerate(zip(ex.plans, cp.plans)):
        ta, tb = a.metrics.step_time_s, b.metrics.step_time_s
        assert abs(ta - tb) / ta < REL_TOL, (label, j, ta, tb, a.plan, b.plan)
    for res in (ex, cp):
        for ev in res.plans:
            check_plan(spec, ev)
        check_integer_scaling(spec, res)
        times = [ev.metrics.step_time_s for ev in res.plans]
        assert all(t2 >= t1 * (1 - REL_TOL) for t1, t2 in zip(times, times[1:])), (label, times)


def test_oracle_examples_were_mixed():
    """Not vacuous: both feasible and infeasible specs were drawn above (run in the same session)."""
    if Tally.feasible + Tally.infeasible == 0:
        pytest.skip("run together with test_cpsat_matches_exhaustive")
    print(f"\nCP-SAT vs exhaustive: {Tally.feasible} feasible, {Tally.infeasible} infeasible specs")
    assert Tally.feasible >= 100 and Tally.infeasible >= 30, (Tally.feasible, Tally.infeasible)


# ------------------------------------------------------------------------------------------ brute force
def _compositions(n: int, k: int):
    """Every way to write n as an ordered sum of k positive integers."""
    for cuts in itertools.combinations(range(1, n), k - 1):
        bounds = (0,) + cuts + (n,)
        yield [bounds[i + 1] - bounds[i] for i in range(k)]


# With ``search.etp`` unset the solver's space tries expert-TP in {1, tp} only (solver/space.py), not every
# legal value; the brute force mirrors that unless this is True. See test_unpinned_etp_is_searched_fully.
ETP_EVERY_VALUE = False


def _allowed(values, pins):
    return [v for v in values if pins is None or v in pins]


def cpsat_matches_exhaustive(spec: Spec, top_k: int = 2):
    """CP-SAT and the exhaustive search on ``spec``: both find plans or neither, the same step times, every plan
    checked (:func:`check_plan`) and the integer scaling within tolerance; returns CP-SAT's result."""
    cp = optimize(spec, method="cpsat", top_k=top_k, controls=CPSAT)
    ex = optimize(spec, method="exhaustive", top_k=top_k)
    assert bool(cp.plans) == bool(ex.plans), (cp.status, ex.status)
    for a_, b_ in zip(cp.plans, ex.plans):
        assert a_.metrics.step_time_s == pytest.approx(b_.metrics.step_time_s, rel=REL_TOL)
    for ev in cp.plans:
        check_plan(spec, ev)
    check_integer_scaling(spec, cp)
    return cp


def brute_force(spec: Spec, below: float | None, equal_middles: bool = False):
    """Every plan the spec's search allows, by the float evaluator: returns a plan that fits with a step time
    below ``below`` (None: any plan that fits), or None when there is none.

    Pruning uses only two evident properties of the cost model: recomputing more layers never makes a stage
    faster, and never makes it need more memory. So for one (choice, stage split): the split without
    recomputation bounds the step time from below (skip if it is not below ``below``), and if it fits it is the
    split's best; if recomputing every layer does not fit, nothing does; otherwise every recompute vector is
    evaluated. Choices are every legal combination of degrees, batch split, schedule, vpp, ZeRO stage,
    recompute granularity and sequence parallelism (no dominance pruning); splits are every composition of
    the layers into pp stages (unequal middle stages included unless ``equal_middles``: then only splits
    whose middle stages hold equal layer counts, the solver's first/middle/last form; recompute vectors are
    never reduced).
    """
    s = spec.search
    a = resolve_assumptions(spec.assumptions)
    gpu = resolve_gpu(spec.cluster)
    domain = nvlink_domain_size(spec, gpu)
    n, L, gbs = spec.cluster.num_gpus, spec.model.num_layers, spec.training.global_batch_size
    moe = spec.model.moe
    for tp in _allowed(_divisors(n), s.tp):
        for cp in _allowed(_divisors(n // tp), s.cp):
            for pp in _allowed(_divisors(n // (tp * cp)), s.pp):
                dp = n // (tp * cp * pp)
                if pp > L or (s.dp is not None and dp not in s.dp):
                    continue
                inner = tp * cp * dp
                etps = _allowed(_divisors(inner), s.etp) if s.etp is not None or ETP_EVERY_VALUE else sorted({1, tp})
                eps = [(1, 1)] if moe is None else [
                    (ep, etp) for ep in _allowed(_divisors(inner), s.ep) for etp in etps]
                sps = [False] if tp == 1 else _allowed([True, False], s.sequence_parallel)
                kinds = (s.cp_comm_types or ["p2p"]) if cp > 1 else ["p2p"]
                for (ep, etp), mbs, schedule, kind in itertools.product(
                        eps, s.micro_batch_size or [1, 2, 4, 8], s.schedules or SCHEDULES, kinds):
                    if gbs % (dp * mbs):
                        continue
                    vpps = _allowed(range(2, L + 1) if schedule == "interleaved" else [1], s.vpp)
                    memory_dims = itertools.product(s.zero_replicas or [1], s.optimizer_states or [None],
                                                    s.optimizer_offload_fractions or [0.0])
                    for vpp, zero, rc, sp, (r, states, off), f8, ov, act in itertools.product(
                            vpps, s.zero_stages or (0, 1, 2, 3), s.recompute or ("none", "selective", "full"), sps,
                            list(memory_dims), s.moe_fp8_dispatch or [False], s.moe_a2a_overlap or [False],
                            s.activation_offload_layers or [0]):
                        c = Choice(tp=tp, cp=cp, pp=pp, dp=dp, ep=ep, etp=etp, micro_batch_size=mbs,
                                   num_microbatches=gbs // (dp * mbs), vpp=vpp, schedule=schedule, recompute=rc,
                                   zero_stage=zero, sequence_parallel=sp, cp_comm_type=kind,
                                   zero_replicas=r, optimizer_states=states,
                                   optimizer_offload_fraction=float(off), moe_fp8_dispatch=f8,
                                   moe_a2a_overlap=ov, activation_offload_layers=act)
                        if choice_violations(spec, c, a, domain):
                            continue
                        costs = choice_costs(spec, c, gpu, a)
                        found = _best_split(spec, c, costs, a, below, equal_middles)
                        if found is not None:
                            return found
    return None


def _best_split(spec, c: Choice, costs, a, below, equal_middles):
    s = spec.search
    L = spec.model.num_layers

    def ev(layers, rcl):
        plan = Plan(tp=c.tp, cp=c.cp, pp=c.pp, dp=c.dp, ep=c.ep, etp=c.etp, micro_batch_size=c.micro_batch_size,
                    num_microbatches=c.num_microbatches, vpp=c.vpp, schedule=c.schedule, stage_layers=layers,
                    recompute=c.recompute, recompute_layers=list(rcl), zero_stage=c.zero_stage,
                    sequence_parallel=c.sequence_parallel, cp_comm_type=c.cp_comm_type,
                    zero_replicas=c.zero_replicas,
                    optimizer_states=c.optimizer_states, optimizer_offload_fraction=c.optimizer_offload_fraction,
                    moe_fp8_dispatch=c.moe_fp8_dispatch, moe_a2a_overlap=c.moe_a2a_overlap,
                    activation_offload_layers=c.activation_offload_layers)
        return evaluate_costs(spec, plan, costs, a, [])

    def good(e):
        return e.metrics.fits and (below is None or e.metrics.step_time_s < below)

    split = s.resolved_stage_split
    # DualPipeV: rank 0 holds the first and the last stage, so every other rank is a middle one
    mid = slice(1, None) if c.schedule == "dualpipev" else slice(1, -1)
    for layers in _compositions(L, c.pp):
        if any(x % c.vpp for x in layers) or (split == "even" and len(set(layers)) > 1):
            continue
        if (equal_middles or split == "first_last") and len(set(layers[mid])) > 1:
            continue
        if stage_violations(spec, c, layers, [0] * c.pp):  # DualPipeV: two stages of ≥ 1 layer per rank
            continue
        e0 = ev(layers, [0] * c.pp)
        if below is not None and e0.metrics.step_time_s >= below:
            continue
        if e0.metrics.fits:
            return e0
        if c.recompute != "full" or not ev(layers, layers if not s.uniform_recompute
                                           else [min(layers)] * c.pp).metrics.fits:
            continue
        if s.uniform_recompute:
            vectors = ([r] * c.pp for r in range(1, min(layers) + 1))
        else:
            vectors = itertools.product(*(range(x + 1) for x in layers))
            if split == "first_last" and c.schedule != "dualpipe":  # the middle stages share one count
                vectors = (v for v in vectors if len(set(v[mid])) <= 1)
        for rcl in vectors:
            e = ev(layers, rcl)
            if good(e):
                return e
    return None


@settings(max_examples=150, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(spec=small_specs(tiny=True))
def test_cpsat_matches_brute_force(spec):
    """Tiny specs (≤ 6 layers, ≤ 8 GPUs, one micro-batch size, one or two schedules): the solver's best plan
    is legal, and no plan of the spec's stage split (every composition of the layers, any recompute vector), as
    the float evaluator sees it, is faster by 0.1 % or more; when the solver says INFEASIBLE, no plan fits."""
    res = optimize(spec, method="cpsat", controls=CPSAT)
    label = _spec_repr(spec)
    if res.plans:
        best = res.plans[0]
        check_plan(spec, best)
        check_integer_scaling(spec, res)
        below = best.metrics.step_time_s * (1 - REL_TOL)
    else:
        assert res.status == "INFEASIBLE", (label, res.status)
        assert res.explanation is not None and res.explanation.summary, label
        below = None
    found = brute_force(spec, below)
    assert found is None, (label, "solver:", res.status, res.plans[0].plan if res.plans else None,
                           "better or fitting plan:", found.metrics.step_time_s, found.plan)


# Llama-like 6-layer model, pp = 4, 1F1B: stage 1 holds 3 micro-batches in flight, stage 2 only 2. The memory
# is set between the peak of [1, 1, 2, 2] and the least peak of any split with equal middle stages, so stage 1
# fits 1 layer, stage 2 fits 2, and only an unequal-middle split fits without recomputation.
MIDDLE_CASE = {
    "framework": "any",
    "model": {"name": "m", "num_layers": 6, "hidden_size": 1024, "ffn_hidden_size": 4096,
              "num_attention_heads": 8, "vocab_size": 1000},
    "training": {"seq_len": 4096, "global_batch_size": 8},
    "cluster": {"gpu": "H100-SXM-80GB", "num_gpus": 4},
    "search": {"tp": [1], "cp": [1], "pp": [4], "micro_batch_size": [1], "schedules": ["1f1b"],
               "zero_stages": [1]},
}


def _middle_case(recompute: list[str]) -> Spec:
    from parplan.costmodel.evaluate import evaluate
    from parplan.costmodel.spec import PlanSpec

    spec = Spec.model_validate(MIDDLE_CASE)
    peak = lambda layers: evaluate(spec, PlanSpec(pp=4, stage_layers=layers)).metrics.peak_memory_gib  # noqa: E731
    unequal = peak([1, 1, 2, 2])
    equal = min(peak(x) for x in _compositions(6, 4) if x[1] == x[2])
    if not unequal < equal:
        pytest.skip(f"the cost model no longer separates the splits ({unequal:.3f} vs {equal:.3f} GiB)")
    a = resolve_assumptions(spec.assumptions)
    memory = ((unequal + equal) / 2 + a.memory_reserve_gib) / a.memory_usable_fraction
    return Spec.model_validate({**MIDDLE_CASE, "cluster": {**MIDDLE_CASE["cluster"], "memory_gib": memory},
                                "search": {**MIDDLE_CASE["search"], "recompute": recompute}})


@pytest.mark.parametrize("recompute", [["none"], ["none", "full"]], ids=["no-recompute", "recompute"])
def test_middle_stages_may_differ_under_memory_pressure(recompute):
    """The first/middle/last solver answered INFEASIBLE with recompute 'none' although stage_layers [1, 1, 2, 2]
    fits, and with 'full' allowed recomputed instead: the per-stage solver finds the unequal middle stages."""
    spec = _middle_case(recompute)
    res = optimize(spec, method="cpsat", controls=CPSAT)
    below = res.plans[0].metrics.step_time_s * (1 - REL_TOL) if res.plans else None
    better = brute_force(spec, below)
    assert better is None, (res.status, [e.plan.stage_layers for e in res.plans], better.plan.stage_layers,
                            better.metrics.step_time_s)
    assert res.plans and len(set(res.plans[0].plan.stage_layers[1:-1])) > 1, res.plans[0].plan
    first_last = Spec.model_validate({**spec.model_dump(exclude_defaults=True),
                                      "search": {**spec.search.model_dump(exclude_defaults=True),
                                                 "stage_split": "first_last"}})
    fl = optimize(first_last, method="cpsat", controls=CPSAT)
    assert not fl.plans or fl.plans[0].metrics.step_time_s > res.plans[0].metrics.step_time_s, fl.status


DUALPIPE_CASE = {
    "framework": "any",
    "model": {"name": "random", "num_layers": 6, "hidden_size": 512, "ffn_hidden_size": 1792,
              "num_attention_heads": 8, "num_kv_heads": 1, "vocab_size": 1000, "gated_mlp": False,
              "tie_embeddings": True,
              "moe": {"num_experts": 8, "top_k": 2, "expert_ffn_hidden_size": 512, "num_shared_experts": 1}},
    "training": {"seq_len": 2048, "global_batch_size": 24},
    "cluster": {"gpu": "H800", "num_gpus": 8},
    "search": {"tp": [1], "cp": [2], "pp": [4], "etp": [1, 2], "micro_batch_size": [2],
               "schedules": ["dualpipe"], "uniform_recompute": True},
}


def test_dualpipe_pairs_unequal_middle_stages():
    """6 layers on pp = 4 DualPipe: [1, 1, 2, 2] gives both ranks 3 layers; with equal middle stages the best
    was [1, 2, 2, 1] (ranks of 2 and 4 layers). The per-rank solver balances the ranks."""
    spec = Spec.model_validate(DUALPIPE_CASE)
    res = optimize(spec, method="cpsat", controls=CPSAT)
    best = res.plans[0]
    check_plan(spec, best)
    better = brute_force(spec, best.metrics.step_time_s * (1 - REL_TOL))
    assert better is None, (best.plan.stage_layers, best.metrics.step_time_s, better.plan.stage_layers,
                            better.metrics.step_time_s)
    p = best.plan.stage_layers
    assert p[0] + p[3] == p[1] + p[2] == 3, p


# A MoE model where expert-TP 2 with TP 1 beats every plan with etp in {1, tp}: found by the brute force.
ETP_CASE = {
    "framework": "any",
    "model": {"name": "random", "num_layers": 5, "hidden_size": 1024, "ffn_hidden_size": 4096,
              "num_attention_heads": 4, "num_kv_heads": 1, "vocab_size": 6143,
              "moe": {"num_experts": 8, "top_k": 1, "expert_ffn_hidden_size": 512}},
    "training": {"seq_len": 2048, "global_batch_size": 8},
    "cluster": {"gpu": "H100-SXM-80GB", "num_gpus": 8, "gpus_per_node": 4},
    "search": {"micro_batch_size": [1], "schedules": ["1f1b", "zb-h1"], "uniform_recompute": True},
}


def test_unpinned_etp_is_searched_fully():
    """``search.etp`` unset means every legal value (SearchSpec docstring); the default space searches the
    divisors of TP (solver/space.py). This case was a strict xfail while expert-TP cost nothing: tp=1
    pp=2 dp=4 etp=2 beat the solver's best by about 1 %. Since issue 10 prices ETP's all-gather and
    reduce-scatter of the dispatched tokens (4 per MoE layer, costmodel/choice.py), no etp outside the
    searched divisors beats the solver's best here; the brute force still tries every legal etp."""
    spec = Spec.model_validate(ETP_CASE)
    res = optimize(spec, method="cpsat", controls=CPSAT)
    best = res.plans[0]
    check_plan(spec, best)
    with mock.patch(f"{__name__}.ETP_EVERY_VALUE", True):
        better = brute_force(spec, best.metrics.step_time_s * (1 - REL_TOL))
    assert better is None, (best.metrics.step_time_s, better.metrics.step_time_s, better.plan)


# ------------------------------------------------------------------------------------------ regressions
TINY_MODEL = {"name": "tiny", "num_layers": 3, "hidden_size": 256, "ffn_hidden_size": 1024,
              "num_attention_heads": 16, "vocab_size": 3371, "tie_embeddings": True}


@pytest.mark.parametrize("method", ["cpsat", "exhaustive"])
def test_single_stage_keeps_1f1b(method):
    """Found by the oracle test: the ZB-H1 dominance dropped 1F1B from the whole space, but ZB-H1 needs
    pp ≥ 2, so every pp = 1 plan vanished (this spec came back INFEASIBLE with an empty conflicting set)."""
    spec = Spec.model_validate({"framework": "any", "model": TINY_MODEL, "training": {"seq_len": 4096, "global_batch_size": 16},
                                "cluster": {"gpu": "B200", "num_gpus": 4},
                                "search": {"pp": [1], "micro_batch_size": [2, 4], "uneven_stages": False}})
    res = optimize(spec, method=method, controls=CPSAT)
    assert res.status == "OPTIMAL", res.explanation
    assert res.plans[0].plan.schedule == "1f1b" and res.plans[0].plan.pp == 1
    check_plan(spec, res.plans[0])


@pytest.mark.parametrize("allowed", [["full"], ["selective", "full"]])
def test_full_without_recomputed_layers_stays_allowed(allowed):
    """Found by the oracle test: a plan that recomputes no layer was reported as recompute 'none' even when
    search.recompute excluded 'none'; it must keep an allowed granularity ('full' with zero counts)."""
    spec = Spec.model_validate({"framework": "any", "model": TINY_MODEL, "training": {"seq_len": 1024, "global_batch_size": 8},
                                "cluster": {"gpu": "H100-SXM-80GB", "num_gpus": 2},
                                "search": {"recompute": allowed}})
    for method in ("cpsat", "exhaustive"):
        ev = optimize(spec, method=method, controls=CPSAT).plans[0]
        assert ev.plan.recompute in allowed and not any(ev.plan.recompute_layers), ev.plan
        check_plan(spec, ev)


# A 16-GPU MoE where the second of three CP-SAT solves (top_k = 3) must prove that a row tied with the first
# is optimal: the hint is optimal at once, but the objective bound then crawls up by ~3e4 of a 5.6e8 gap per
# second and deterministic time barely advances, so with SolverControls(deterministic=True, time_limit_s=60)
# the solve ran for more than 10 minutes. Found by a 600-example run of the strategy above (another seed).
# linearization_level=2, use_objective_lb_search or optimize_with_core each prove it in 0.1-0.2 s; the solver
# now uses linearization_level=2 (solver/cpsat.py), and this test keeps it that way.
SLOW_PROOF_CASE = {
    "framework": "any",
    "model": {"name": "random", "num_layers": 8, "hidden_size": 512, "ffn_hidden_size": 2048,
              "num_attention_heads": 16, "num_kv_heads": 8, "vocab_size": 45439, "tie_embeddings": True,
              "moe": {"num_experts": 4, "top_k": 1, "expert_ffn_hidden_size": 512, "first_dense_layers": 1}},
    "training": {"seq_len": 1024, "global_batch_size": 64},
    "cluster": {"gpu": "H100-SXM-80GB", "num_gpus": 16},
    "search": {"ep": [4, 8], "etp": [1], "micro_batch_size": [1, 4], "recompute": ["selective", "full"],
               "uniform_recompute": True},
    "assumptions": {"preset": "textbook"},
}


def test_cpsat_proves_tied_rows_quickly():
    """The exhaustive search answers in 0.1 s; CP-SAT must prove the same three values optimal within a 3 s
    wall-clock limit (it returned FEASIBLE, proof missing, at linearization_level=1). Wall-clock limited here
    so the test cannot hang."""
    spec = Spec.model_validate(SLOW_PROOF_CASE)
    ex = optimize(spec, method="exhaustive", top_k=3)
    cp = optimize(spec, method="cpsat", top_k=3, controls=SolverControls(workers=1, time_limit_s=3))
    assert [round(e.metrics.step_time_s, 9) for e in cp.plans] == [round(e.metrics.step_time_s, 9) for e in ex.plans]
    assert cp.status == "OPTIMAL", cp.status


# ------------------------------------------------------------------------------------------ determinism
def _load(path: Path) -> Spec:
    return Spec.model_validate(yaml.safe_load(path.read_text()))


def _llama70b() -> Spec:
    for p in (ROOT / "examples" / "llama3-70b-64xh100.yaml", ROOT.parent / "shared" / "spec" / "llama3-70b-64xh100.yaml"):
        if p.exists():  # the research space this determinism check was written for (omitted: megatron-core)
            return _load(p).model_copy(update={"framework": "any"})
    pytest.skip("llama3-70b-64xh100.yaml not found")


def _textbook() -> Spec:
    for p in (ROOT / "examples" / "seed-textbook-70b-8k.yaml", ROOT.parent / "shared" / "spec" / "seed-textbook-70b-8k.yaml"):
        if p.exists():
            return _load(p)
    pytest.skip("seed-textbook-70b-8k.yaml not found")


@pytest.mark.parametrize("make_spec", [_llama70b, _textbook], ids=["llama3-70b-64xh100", "seed-textbook-70b-8k"])
def test_deterministic(make_spec):
    """Deterministic mode (one worker, fixed seed, deterministic time limit): two solves give byte-identical
    results, wall times aside."""
    spec = make_spec()
    controls = dict(deterministic=True, seed=7, time_limit_s=60)
    runs = [optimize(spec, method="cpsat", top_k=3, controls=SolverControls(**controls)) for _ in range(2)]
    dumps = [r.model_dump_json(exclude={"stats": {"wall_time_s"}}) for r in runs]
    assert runs[0].status == "OPTIMAL" and len(runs[0].plans) == 3
    assert runs[0].stats.deterministic and runs[0].stats.seed == 7 and runs[0].stats.workers == 1
    assert dumps[0] == dumps[1]
