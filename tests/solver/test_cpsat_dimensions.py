"""CP-SAT (solver/cpsat.py) against the exhaustive search and the brute force over the float evaluator, on random
small specs that draw the search dimensions beyond the degrees: DualPipeV, FP8 dispatch and the all-to-all
overlap (this module's strategy), and the memory-side dimensions, HSDP replicas, optimizer dtypes and offload
shares (tests/conftest.py's strategies with ``memory_dims=True``, tests/brute_force.py).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from parplan.costmodel.spec.spec import Spec
from parplan.frameworks.loader import validate_spec
from parplan.solver.planner import optimize

from tests import memory_dims_cases as memory_dims
from tests.brute_force import brute_force
from tests.conftest import assumption_overrides, small_specs, sized
from tests.solver_checks import (CPSAT, ORACLE_SETTINGS, REL_TOL, PlanTally, check_integer_scaling, check_plan,
                           cpsat_matches_exhaustive)

# No test here reads an infeasible result's explanation (test_explain.py does); computing it solved every
# relaxation of each infeasible example, most of this module's run time. A module mark, so the hypothesis tests'
# sources (and so their derandomized examples) stay as they were.
pytestmark = pytest.mark.usefixtures("no_explanations")

# the oracles of DualPipeV, FP8 dispatch and the overlap name it REL: hypothesis seeds its derandomized examples
# from a test's source, so their bodies stay as they were written
REL = REL_TOL


@st.composite
def dimension_specs(draw, tiny: bool = False) -> Spec:
    """Random small specs where the new dimensions are live: 4-8 GPUs, MoE (3 in 4) or dense Llama-like
    models, DualPipeV alone or beside another schedule (or the default space plus it), FP8 training on a GPU
    with FP8 (then FP8 dispatch off/on/both, the knob's dispatch narrower or not: with and without the
    dominance), the all-to-all overlap off/on/both; small memory sometimes (recompute and infeasibility),
    the assumption variants of conftest's strategy (torch pipelining buffers, per-op SAC, ...)."""
    L = draw(st.integers(4, 6 if tiny else 9))
    hidden = draw(st.sampled_from([256, 512, 1024]))
    model = dict(name="dims", num_layers=L, hidden_size=hidden, ffn_hidden_size=draw(st.sampled_from([hidden, 4 * hidden])),
                 num_attention_heads=8, num_kv_heads=draw(st.sampled_from([2, 8])), vocab_size=draw(st.integers(1000, 50000)),
                 tie_embeddings=draw(st.booleans()))
    moe = draw(st.integers(0, 3)) > 0
    if moe:
        model["moe"] = dict(num_experts=draw(st.sampled_from([4, 8])), top_k=draw(st.integers(1, 2)),
                            expert_ffn_hidden_size=draw(st.sampled_from([hidden // 2, hidden])),
                            num_shared_experts=draw(st.integers(0, 1)), first_dense_layers=draw(st.integers(0, 1)))
    if draw(st.integers(0, 4)) == 0:
        model["num_mtp_layers"] = 1
    gpu = draw(st.sampled_from(["H100-SXM-80GB", "H800", "B200", "A100-SXM-80GB"]))
    cluster = dict(gpu=gpu, num_gpus=draw(st.sampled_from([4, 8])))
    if draw(st.integers(0, 2)) == 0:
        cluster["memory_gib"] = draw(st.integers(15, 120)) / 10
    fp8 = moe and gpu != "A100-SXM-80GB" and draw(st.integers(0, 2)) > 0
    schedules = draw(st.sampled_from([["dualpipev"], ["dualpipev", "1f1b"], ["interleaved", "dualpipev"],
                                      ["zb-h1", "dualpipe", "dualpipev"], None]))
    search: dict = {"micro_batch_size": [draw(st.sampled_from([1, 2]))] if tiny else [1, 2]}
    search["schedules"] = schedules or ["1f1b", "interleaved", "zb-h1", "dualpipe", "dualpipev"]
    if tiny:
        search["schedules"] = search["schedules"][:2]
    if draw(st.booleans()):
        search["pp"] = draw(st.sampled_from([[1, 2], [2], [2, 4], [4]]))
    if draw(st.booleans()):
        search["recompute"] = draw(st.sampled_from([["none"], ["none", "full"], ["selective", "full"]]))
    if moe:
        if fp8:
            search["moe_fp8_dispatch"] = draw(st.sampled_from([[False, True], [True], [False]]))
        search["moe_a2a_overlap"] = draw(st.sampled_from([[False, True], [False, True], [True], [False]]))
    search["uneven_stages"] = draw(st.booleans())
    if search["uneven_stages"] and draw(st.integers(0, 3)) == 0:
        search["stage_split"] = "first_last"
    search["uniform_recompute"] = draw(st.booleans())
    assumptions = assumption_overrides(draw)
    if fp8 and draw(st.booleans()):
        assumptions["ep_dispatch_bytes"] = 1.0  # narrower than FP8's 1.03125: no dominance, both dispatches kept
    return validate_spec(dict(
        model=model, training=dict(seq_len=draw(st.sampled_from([1024, 2048])),
                                   global_batch_size=draw(st.sampled_from([8, 16, 32])),
                                   precision="fp8" if fp8 else "bf16"),
        cluster=cluster, search=search, assumptions=assumptions, framework="any"))


SEEN: dict[str, int] = {}  # what the top plans of the two oracle tests below used (test_new_dimensions_were_drawn)


def _tally(res) -> None:
    for ev in res.plans:  # the top 3 each oracle test checked
        for key, on in (("dualpipev", ev.plan.schedule == "dualpipev"), ("fp8", ev.plan.moe_fp8_dispatch),
                        ("overlap", ev.plan.moe_a2a_overlap)):
            SEEN[key] = SEEN.get(key, 0) + bool(on)
    SEEN["infeasible"] = SEEN.get("infeasible", 0) + (not res.plans)


@settings(max_examples=sized(30, 60), **ORACLE_SETTINGS)
@given(spec=dimension_specs())
def test_new_dimensions_cpsat_matches_exhaustive(spec):
    ex = optimize(spec, method="exhaustive", top_k=3)
    cp = optimize(spec, method="cpsat", top_k=3, controls=CPSAT)
    label = spec.model_dump_json(exclude_defaults=True)
    assert (ex.status == "INFEASIBLE") == (cp.status == "INFEASIBLE"), (label, ex.status, cp.status)
    assert len(ex.plans) == len(cp.plans), label
    for a, b in zip(ex.plans, cp.plans):
        assert abs(a.metrics.step_time_s - b.metrics.step_time_s) / a.metrics.step_time_s < REL, (label, a.plan, b.plan)
    for res in (ex, cp):
        for ev in res.plans:
            check_plan(spec, ev)
        check_integer_scaling(spec, res)
    _tally(cp)


@settings(max_examples=sized(15, 30), **ORACLE_SETTINGS)
@given(spec=dimension_specs(tiny=True))
def test_new_dimensions_cpsat_matches_brute_force(spec):
    res = optimize(spec, method="cpsat", controls=CPSAT)
    label = spec.model_dump_json(exclude_defaults=True)
    below = None
    if res.plans:
        check_plan(spec, res.plans[0])
        below = res.plans[0].metrics.step_time_s * (1 - REL)
    found = brute_force(spec, below)
    assert found is None, (label, res.status, res.plans[0].plan if res.plans else None, found.plan)
    _tally(res)


def test_new_dimensions_were_drawn():
    """Not vacuous: the top plans above used DualPipeV, FP8 dispatch and the overlap, and some specs had none
    (run in the same session)."""
    if not SEEN:
        pytest.skip("run together with the two oracle tests above")
    print("\nnew-dimension oracles, optima using:", SEEN)
    assert all(SEEN.get(k, 0) >= 2 for k in ("dualpipev", "fp8", "overlap", "infeasible")), SEEN


class MemTally(PlanTally):
    """What the oracle examples exercised: feasible specs, and best plans using each dimension."""

    replicas = states = offload = 0

    @classmethod
    def count(cls, plan) -> None:
        cls.replicas += plan.zero_replicas > 1
        cls.states += plan.optimizer_states is not None
        cls.offload += plan.optimizer_offload_fraction > 0


@settings(max_examples=sized(20, 40), **ORACLE_SETTINGS)
@given(spec=small_specs(memory_dims=True))
def test_cpsat_matches_exhaustive_with_memory_dims(spec):
    """CP-SAT and the exhaustive search agree with HSDP replicas, optimizer dtypes and offload shares drawn."""
    MemTally.add(cpsat_matches_exhaustive(spec))


def test_memory_dims_oracle_examples_were_mixed():
    """The examples above reach plans with each dimension (so the agreement is not only over today's space)."""
    if MemTally.feasible + MemTally.infeasible == 0:
        pytest.skip("run together with test_cpsat_matches_exhaustive_with_memory_dims")
    t = MemTally
    print(f"\nmemory dims: {t.feasible} feasible, {t.infeasible} infeasible; best plans with replicas {t.replicas}, "
          f"optimizer dtypes {t.states}, offload {t.offload}")
    assert t.feasible >= 10 and t.infeasible >= 1 and t.replicas >= 1 and t.states >= 1 and t.offload >= 1, vars(t)


@settings(max_examples=sized(15, 30), **ORACLE_SETTINGS)
@given(spec=small_specs(tiny=True, memory_dims=True))
def test_cpsat_matches_brute_force_with_memory_dims(spec):
    """No plan the brute force finds over the evaluator (every listed replica count, dtype and share, no
    reduction) is faster than the solver's best by 0.1 %, and none fits where the solver says INFEASIBLE."""
    res = optimize(spec, method="cpsat", controls=CPSAT)
    below = None
    if res.plans:
        check_plan(spec, res.plans[0])
        below = res.plans[0].metrics.step_time_s * (1 - REL_TOL)
    found = brute_force(spec, below)
    assert found is None, (spec.search, res.status, found.plan if found else None)


def test_memory_dims_make_an_infeasible_spec_feasible():
    """A 4-GPU spec whose ZeRO-1 states do not fit: offloading all optimizer states (or 4-byte states) fits,
    and the solver's answer is the brute force's."""
    data = dict(model=dict(memory_dims.MODEL, num_layers=8, hidden_size=4096, ffn_hidden_size=16384, num_attention_heads=32),
                training=dict(seq_len=1024, global_batch_size=4),
                # 16.4 GiB: 15.1 usable (16.4 less the 0.5 GiB CUDA context and 5 % fragmentation), as 18 GiB gave
                # under the single 2 GiB reserve: ZeRO-1 needs 16.3 GiB, offload 11.1, fp8 states 12.8
                cluster=dict(gpu="H100-SXM-80GB", num_gpus=4, memory_gib=16.4),
                search=dict(tp=[1], pp=[1], zero_stages=[1], recompute=["full"]))
    data["framework"] = "any"  # the research space (omitted: megatron-core, whose offload needs optimizer_states)
    tight = validate_spec(data)
    assert optimize(tight, method="exhaustive").status == "INFEASIBLE"
    for extra in (dict(optimizer_offload_fractions=[0.0, 1.0]), dict(optimizer_states=["fp16/fp8/fp8"])):
        spec = validate_spec({**data, "search": {**data["search"], **extra}})
        res = optimize(spec, method="cpsat", controls=CPSAT)
        assert res.plans, extra
        check_plan(spec, res.plans[0])
        assert brute_force(spec, res.plans[0].metrics.step_time_s * (1 - REL_TOL)) is None
