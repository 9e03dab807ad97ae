"""DualPipe's split of a rank between its two stages (issue 19 items 1-2): the term by hand on DeepSeek-V3 and
Mixtral 8x7B, and CP-SAT = exhaustive oracle = brute force over the split (tests/brute_force.py evaluates every
composition of the layers, so every split of every rank)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.brute_force import brute_force
from tests.conftest import spec_repr
from tests.solver_checks import REL_TOL, check_plan, cpsat_matches_exhaustive
from parplan.costmodel.spec.assumptions import resolve_assumptions
from parplan.costmodel.evaluation.choice import choice_costs
from parplan.costmodel.evaluation.evaluate import evaluate
from parplan.costmodel.spec.hardware import resolve_gpu
from parplan.costmodel.spec.spec import PlanSpec, Spec
from parplan.frameworks.loader import validate_spec

DSV3_MODEL = dict(  # DeepSeek-V3 config.json (MLA, 3 dense layers, 256 experts top-8, one MTP module)
    name="deepseek-v3", num_layers=61, hidden_size=7168, ffn_hidden_size=18432, num_attention_heads=128,
    num_kv_heads=128, vocab_size=129280, gated_mlp=True, tie_embeddings=False, num_mtp_layers=1,
    mla=dict(q_lora_rank=1536, kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128),
    moe=dict(num_experts=256, top_k=8, expert_ffn_hidden_size=2048, num_shared_experts=1, first_dense_layers=3,
             max_nodes_per_token=4))


def _dsv3() -> Spec:
    return validate_spec(dict(framework="any", model=DSV3_MODEL,
                                    training=dict(seq_len=4096, global_batch_size=15360, precision="fp8"),
                                    cluster=dict(gpu="H800", num_gpus=2048, gpus_per_node=8)))


def _dsv3_plan(stage_layers):
    return PlanSpec(tp=2, pp=4, dp=256, ep=256, schedule="dualpipe", stage_layers=stage_layers, micro_batch_size=1,
                    num_microbatches=60)


def test_dsv3_lopsided_split_is_slower_by_the_exposure_worked_by_hand():
    """DeepSeek-V3 on 2048 H800, TP2 PP4 DP256 EP256 DualPipe, 60 micro-batches (the issue's free optimum).
    Rank 0 runs stage 0 (phase 0) and stage 3 (phase 1); with p = 4, m = 60 its step order (dualpipe.py:358-417,
    half_rank 0 of 2, not a middle rank) has 27 (F0, B1) pairs, 28 (F1, B0) pairs, 3 lone F0, 3 lone B1, 2 lone
    F1 and 2 lone B0. With C_d, C_e the dense and MoE layers' compute and X the MoE layer's all-to-all (fwd+bwd),
    f = 1/3, [3 | 27]: stage 0 = (3·C_d, 0), stage 3 = (27·C_e, 27·X); exposure per micro-batch =
    (27·max(0, 27X/2 - f·3C_d) + 28·max(0, 27X/2 - (1-f)·3C_d) + (2 + 3)·27X/2) / 60 (the MoE stage's 2 lone
    forwards and 3 lone backwards expose theirs in full; the dense stage has no all-to-all), and [15 | 15] hides everything while the MoE compute covers it. The lopsided plan is
    slower, though both have the same totals per rank."""
    spec = _dsv3()
    lop, bal = evaluate(spec, _dsv3_plan([3, 16, 15, 27])), evaluate(spec, _dsv3_plan([15, 16, 15, 15]))
    a = resolve_assumptions(spec.assumptions)
    costs = choice_costs(spec, lop.plan.to_choice(), resolve_gpu(spec.cluster), a)
    f = 1 / (1 + a.backward_to_forward_ratio)
    Cd, X = costs.dense.compute_s, costs.moe.a2a_s
    assert X > 0 and costs.moe.ep_s == 0.0  # DualPipe prices the all-to-all per rank, not per layer
    by_hand = (27 * max(0.0, 27 * X / 2 - f * 3 * Cd) + 28 * max(0.0, 27 * X / 2 - (1 - f) * 3 * Cd)
               + 5 * 27 * X / 2) / 60
    assert lop.stages[0].ep_s == pytest.approx(by_hand, rel=1e-9)
    assert lop.stages[3].ep_s == pytest.approx(by_hand, rel=1e-9)  # the mirrored rank
    assert lop.metrics.step_time_s > bal.metrics.step_time_s * 1.05
    assert lop.metrics.breakdown_s["ep"] > bal.metrics.breakdown_s["ep"]


def _mixtral_spec() -> Spec:
    """Mixtral 8x7B on 64 H100 (examples/mixtral-8x7b-64xh100.yaml's model) in the research space."""
    return validate_spec(dict(
        framework="any",
        model=dict(name="mixtral-8x7b", num_layers=32, hidden_size=4096, ffn_hidden_size=14336,
                   num_attention_heads=32, num_kv_heads=8, vocab_size=32000, gated_mlp=True, tie_embeddings=False,
                   moe=dict(num_experts=8, top_k=2, expert_ffn_hidden_size=14336)),
        training=dict(seq_len=4096, global_batch_size=512), cluster=dict(gpu="H100-SXM-80GB", num_gpus=64)))


def _mixtral_plan(schedule: str) -> tuple[Spec, PlanSpec]:
    spec = _mixtral_spec()
    return spec, PlanSpec(tp=2, pp=4, dp=8, ep=8, schedule=schedule, micro_batch_size=1, num_microbatches=64,
                          vpp=2 if schedule == "interleaved" else 1)


def test_mixtral_overlap_is_paid_for_only_by_dualpipe():
    """Mixtral 8x7B on 64 H100 (TP2 PP4 DP8 EP8): DualPipe's MoE layers compute (20/132)·min(A, C·132/112) longer
    than interleaved 1F1B's C (20 of 132 SMs held by dispatch/combine while its A of all-to-all runs, DeepSeek-V3
    §3.2.2, only by the overlapped schedule: moe_comm.reserved_sm_time_s; dense compute unchanged), and interleaved
    exposes its whole all-to-all (ep_comm_overlap 0), the all-to-all DualPipe hides only behind the partner
    stage's compute (there beside its TP collectives on the same NVLink: costmodel/communication/shared_links.py)."""
    out = {}
    for schedule in ("interleaved", "dualpipe"):
        spec, plan = _mixtral_plan(schedule)
        a = resolve_assumptions(spec.assumptions)
        from parplan.costmodel.evaluation.evaluate import resolve_plan
        out[schedule] = choice_costs(spec, resolve_plan(spec, plan).to_choice(), resolve_gpu(spec.cluster), a)
    inter, dual = out["interleaved"], out["dualpipe"]
    C, A = inter.moe.compute_s - inter.moe.selective_s, dual.moe.a2a_s
    assert dual.moe.compute_s - dual.moe.selective_s - C == pytest.approx(20 / 132 * min(A, C * 132 / 112))
    assert dual.moe.compute_s > inter.moe.compute_s
    # the same all-to-all, DualPipe's longer by what the TP collectives beside it take of NVLink (test_shared_links)
    assert dual.moe.a2a_s > inter.moe.ep_s > 0.9 * dual.moe.a2a_s
    assert dual.moe.ep_s == 0.0 and dual.moe.a2a_s > 0


@st.composite
def dualpipe_specs(draw) -> Spec:
    """Tiny MoE models whose all-to-all crosses nodes, searched under DualPipe or DualPipeV only (the split is
    the decision), with or without recompute, dense leading layers and a memory cap."""
    L = draw(st.integers(4, 6))
    hidden = draw(st.sampled_from([512, 1024]))
    gpus = draw(st.sampled_from([4, 8]))
    schedule = draw(st.sampled_from(["dualpipe", "dualpipev"]))
    search = dict(schedules=[schedule], micro_batch_size=[1], pp=[2] if gpus == 4 else [2, 4], tp=[1],
                  ep=[2, 4] if gpus == 4 else [2, 4, 8], uneven_stages=True,
                  recompute=draw(st.sampled_from([["none"], ["full"], ["none", "full"]])),
                  uniform_recompute=draw(st.booleans()), zero_stages=[1])
    cluster = dict(gpu="H100-SXM-80GB", num_gpus=gpus, gpus_per_node=draw(st.sampled_from([1, 2])))
    if draw(st.booleans()):
        cluster["memory_gib"] = draw(st.integers(10, 60)) / 10
    model = dict(name="tiny-moe", num_layers=L, hidden_size=hidden, ffn_hidden_size=2 * hidden,
                 num_attention_heads=8, vocab_size=draw(st.integers(1000, 30000)), gated_mlp=True,
                 tie_embeddings=False,
                 moe=dict(num_experts=8, top_k=2, expert_ffn_hidden_size=draw(st.sampled_from([hidden // 4, hidden])),
                          first_dense_layers=draw(st.integers(0, 1))))
    # the dispatcher's host sync off: these tiny layers would wait for the host (costmodel/spec/host_floor.py), and
    # the draws exercise the split and the step order, as they did before that term (test_host_floor prices it)
    return validate_spec(dict(framework="any", model=model, search=search, cluster=cluster,
                                    training=dict(seq_len=draw(st.sampled_from([1024, 4096])),
                                                  global_batch_size=draw(st.sampled_from([16, 32]))),
                                    assumptions=dict(moe_dispatch_sync=False)))


class SplitTally:
    feasible = exposed = lopsided = 0


@settings(max_examples=40, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(spec=dualpipe_specs())
def test_split_cpsat_matches_oracle_and_brute_force(no_explanations, spec):
    """CP-SAT and the exhaustive oracle agree (step times, every plan legal and fitting), and no plan of any
    stage split -- so any split of any rank between its two stages -- is faster by 0.1 % as the float evaluator
    prices it; INFEASIBLE only where nothing fits."""
    cp = cpsat_matches_exhaustive(spec, top_k=1)
    label = spec_repr(spec)
    below = None
    if cp.plans:
        best = cp.plans[0]
        check_plan(spec, best)
        below = best.metrics.step_time_s * (1 - REL_TOL)
        SplitTally.feasible += 1
        if best.metrics.breakdown_s["ep"] > 0:
            SplitTally.exposed += 1
        layers = best.plan.stage_layers
        if best.plan.schedule == "dualpipe" and layers[0] != layers[-1]:
            SplitTally.lopsided += 1
    found = brute_force(spec, below)
    assert found is None, (label, "solver:", cp.plans[0].plan if cp.plans else None,
                           "better or fitting plan:", found.metrics.step_time_s, found.plan)


def test_split_examples_were_exercised():
    """Not vacuous: the draws above found plans with an exposed all-to-all (run in the same session)."""
    if SplitTally.feasible == 0:
        pytest.skip("run together with test_split_cpsat_matches_oracle_and_brute_force")
    print(f"\nDualPipe split: {SplitTally.feasible} feasible, {SplitTally.exposed} with exposure, "
          f"{SplitTally.lopsided} with unequal stages on a rank")
    assert SplitTally.feasible >= 10 and SplitTally.exposed >= 5, vars(SplitTally)


def test_split_recomputes_on_the_larger_stage_first():
    """Found by the brute force above: DualPipe pp 2 on a 4-layer MoE model, 2.25 GiB per GPU (3.5 GiB before the
    memory outside the ledger was itemized: costmodel/memory/runtime_memory.py), full recompute.
    The least-exposure split puts 1 layer on stage 0 and 3 on stage 1; recomputing 2 layers on stage 1 alone
    holds one working set and fits, where recomputing stage 0's layer first (the rule of an even split, whose
    first stage is the larger) holds two and needs a third layer recomputed. The solver must find the 2."""
    spec = validate_spec(dict(
        framework="any",
        model=dict(name="tiny-moe", num_layers=4, hidden_size=1024, ffn_hidden_size=2048, num_attention_heads=8,
                   vocab_size=5844, gated_mlp=True, tie_embeddings=False,
                   moe=dict(num_experts=8, top_k=2, expert_ffn_hidden_size=1024)),
        training=dict(seq_len=1024, global_batch_size=16),
        cluster=dict(gpu="H100-SXM-80GB", num_gpus=4, gpus_per_node=2, memory_gib=2.25),
        search=dict(tp=[1], pp=[2], ep=[2, 4], micro_batch_size=[1], schedules=["dualpipe"], uneven_stages=True,
                    zero_stages=[1], recompute=["full"], uniform_recompute=False,
                    memory_band=False)))  # the memory is set by the ledger's peaks
    cp = cpsat_matches_exhaustive(spec, top_k=1)
    best = cp.plans[0]
    assert sum(best.plan.recompute_layers) == 2, best.plan
    assert brute_force(spec, best.metrics.step_time_s * (1 - REL_TOL)) is None


def _mixtral_dualpipe_pp8(stage_layers: list[int]) -> tuple[Spec, PlanSpec]:
    return _mixtral_spec(), PlanSpec(tp=1, pp=8, dp=8, ep=8, schedule="dualpipe", micro_batch_size=1, num_microbatches=64,
                          stage_layers=stage_layers)


LOPSIDED, BALANCED = [7, 7, 7, 7, 1, 1, 1, 1], [4] * 8


def _simulated_step_s(stage_layers: list[int]) -> float:
    """The step-order simulation (tests/dualpipe_sim.py) over the chunk times the cost model gives each stage of
    Mixtral's DualPipe PP8 plan: its layers' compute and all-to-all per micro-batch (no weight-gradient split)."""
    from tests.dualpipe_sim import simulate_dualpipe
    from parplan.costmodel.evaluation.evaluate import resolve_plan
    spec, plan = _mixtral_dualpipe_pp8(stage_layers)
    costs = choice_costs(spec, resolve_plan(spec, plan).to_choice(), resolve_gpu(spec.cluster),
                         resolve_assumptions(spec.assumptions))
    C = [n * costs.moe.compute_s for n in stage_layers]
    X = [n * costs.moe.a2a_s for n in stage_layers]
    return simulate_dualpipe(C, X, plan.num_microbatches, 1 / 3, 0.0).step_s


def test_mixtral_lopsided_split_is_slower_in_the_step_order_simulation():
    """Mixtral's all-to-all stays in the node and hides behind the partner chunk, so a rank's row is the same for
    every split of its 8 layers; the step order still runs the fill and drain through each stage's own chunks:
    7 / 1 layers per rank is more than 1 % slower than 4 / 4 in the simulation."""
    assert _simulated_step_s(LOPSIDED) > 1.01 * _simulated_step_s(BALANCED)


@pytest.mark.xfail(strict=True, reason=(
    "issue 19, DualPipe priced as it runs: the cost model's DualPipe bubble is formed from rank rows (a rank's mean "
    "of its two stages), so with the all-to-all hidden a split of a rank's layers changes only what its pairs leave "
    "exposed: per component (paired_overlap.component_phases_s) a 1-layer stage's forward attention cannot cover "
    "its 7-layer partner's backward combine, so Mixtral PP8's [7,7,7,7,1,1,1,1] prices 5.7188 s against [4]*8's "
    "5.7161 s (+0.05 %; per chunk they tied at 5.688 s, 64.5 GiB both); the step-order simulation (test above) puts "
    "it more than 1 % slower, and the planner breaks the tie by the step order (solver/tie_break.py, "
    "tests/solver/test_tie_break.py), but the closed form the search ranks by is more than 20 times short of it. The fix needs "
    "per-stage lone-chunk times in the tables (tests/costmodel/schedules/test_paired_overlap.py "
    "_pair_averaged_dwell_path_step)"))
def test_mixtral_lopsided_split_is_slower_in_the_cost_model():
    """The cost model puts the lopsided split more than 1 % slower, as the step-order simulation does."""
    steps = {}
    for name, layers in (("lopsided", LOPSIDED), ("balanced", BALANCED)):
        spec, plan = _mixtral_dualpipe_pp8(layers)
        steps[name] = evaluate(spec, plan).metrics.step_time_s
    assert steps["lopsided"] > 1.01 * steps["balanced"]
