"""Shared checks for the solver tests: a returned plan is legal, fits, and respects the spec's ``search:``.

Used by the oracle, seed-table and explanation tests and the dimension tests that reuse the oracle's specs.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck

from parplan.costmodel.spec.assumptions import resolve_assumptions
from parplan.costmodel.evaluation.choice import choice_costs, nvlink_domain_size
from parplan.costmodel.evaluation.evaluate import evaluate, plan_choice
from parplan.costmodel.evaluation.ledger import Evaluation
from parplan.costmodel.spec.hardware import resolve_gpu
from parplan.costmodel.evaluation.legality import choice_violations, stage_violations
from parplan.costmodel.spec.spec import Plan, Spec
from parplan.frameworks.profiles import export_profile, profile
from parplan.solver.cpsat import SolverControls
from parplan.solver.planner import optimize
from parplan.solver.problem import Problem, assignment_of
from parplan.solver.assignment_check import evaluate_assignment
from parplan.solver.table_builder import build_table
from parplan.frameworks.loader import validate_spec
from parplan.frameworks.profile_data import EXPORT_VERSIONS as EXPORT_NAMES

SCALE_TOL = 1e-3  # integer objective vs float step time (relative)

REL_TOL = 1e-3  # re-evaluated step times agree within 0.1 %
CPSAT = SolverControls(workers=1, deterministic=True, time_limit_s=60)
# hypothesis settings of the oracle tests: reproducible examples, no deadline (a solve takes seconds)
ORACLE_SETTINGS = dict(deadline=None, derandomize=True, database=None,
                       suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
PIN_FIELDS = ("tp", "cp", "pp", "dp", "ep", "etp", "micro_batch_size", "vpp")


def search_violations(spec: Spec, plan: Plan) -> list[str]:
    """Every way ``plan`` breaks the spec's ``search:`` restrictions (empty: it respects them all)."""
    s = spec.search
    out = []
    for f in PIN_FIELDS:
        allowed = getattr(s, f)
        if allowed is not None and getattr(plan, f) not in allowed:
            out.append(f"{f} = {getattr(plan, f)} not in search.{f} = {allowed}")
    if s.schedules is not None and plan.schedule not in s.schedules:
        out.append(f"schedule {plan.schedule} not in search.schedules = {s.schedules}")
    if s.zero_stages is not None and plan.zero_stage not in s.zero_stages:
        out.append(f"zero_stage {plan.zero_stage} not in search.zero_stages = {s.zero_stages}")
    if s.recompute is not None and plan.recompute not in s.recompute:
        out.append(f"recompute {plan.recompute!r} (layers {plan.recompute_layers}) not in search.recompute = "
                   f"{s.recompute}")
    # sequence parallelism is meaningless at tp = 1 and always reported off there
    if s.sequence_parallel is not None and plan.tp > 1 and plan.sequence_parallel not in s.sequence_parallel:
        out.append(f"sequence_parallel {plan.sequence_parallel} not in search.sequence_parallel = "
                   f"{s.sequence_parallel}")
    kinds = s.cp_comm_types or ["p2p"]  # cp = 1 is always written p2p
    if plan.cp > 1 and plan.cp_comm_type not in kinds:
        out.append(f"cp_comm_type {plan.cp_comm_type} not in search.cp_comm_types = {kinds}")
    if plan.cp == 1 and plan.cp_comm_type != "p2p":
        out.append(f"cp_comm_type {plan.cp_comm_type} at cp = 1 (canonical: p2p)")
    for key, listed, default in (("zero_replicas", s.zero_replicas, 1),
                                 ("optimizer_states", s.optimizer_states, None),
                                 ("optimizer_offload_fraction", s.optimizer_offload_fractions, 0.0),
                                 ("activation_offload_layers", s.activation_offload_layers, 0)):
        value = getattr(plan, key)
        if (value not in listed) if listed is not None else value != default:
            out.append(f"{key} = {value!r} not in search ({listed!r}, unset means {default!r})")
    # unset: FP8 dispatch off; the all-to-all overlap both ways for an MoE model (solver/space_options.py default_a2a_overlap)
    for name, unset in (("moe_fp8_dispatch", [False]), ("moe_a2a_overlap", [False, spec.model.moe is not None])):
        if getattr(plan, name) not in (getattr(s, name) or unset):
            out.append(f"{name} {getattr(plan, name)} not in search.{name} = {getattr(s, name)}")
    if not s.uneven_stages and len(set(plan.stage_layers)) > 1:
        out.append(f"uneven_stages is false but stage_layers = {plan.stage_layers}")
    if s.uniform_recompute and len(set(plan.recompute_layers)) > 1:
        out.append(f"uniform_recompute is true but recompute_layers = {plan.recompute_layers}")
    return out


def check_plan(spec: Spec, ev: Evaluation) -> None:
    """A returned plan: no violations, fits, passes the legality rules, respects ``search:``, and its
    evaluation is what the float cost model gives for it."""
    plan = ev.plan
    assert ev.violations == [], (plan, ev.violations)
    assert ev.metrics.fits, plan
    a = resolve_assumptions(spec.assumptions)
    gpu = resolve_gpu(spec.cluster)
    c = plan_choice(plan)
    assert choice_violations(spec, c, a, nvlink_domain_size(spec, gpu)) == [], plan
    assert stage_violations(spec, c, plan.stage_layers, plan.recompute_layers, plan.pipeline_layout) == [], plan
    assert plan.num_gpus == spec.cluster.num_gpus, plan
    assert plan.dp * plan.micro_batch_size * plan.num_microbatches == spec.training.global_batch_size, plan
    assert search_violations(spec, plan) == [], search_violations(spec, plan)
    again = evaluate(spec, plan)
    assert again.metrics.step_time_s == ev.metrics.step_time_s, plan
    assert again.metrics.peak_memory_gib == ev.metrics.peak_memory_gib, plan


_PROBLEM: list = [None, None]  # the last (spec, Problem.build(spec)) of integer_step_time_s


def problem_of(spec: Spec) -> Problem:
    """``Problem.build(spec)``, reused while the same spec object is asked about (an oracle test checks the
    exhaustive and the CP-SAT result of one spec, up to 10 plans each: one enumeration of the space, not 20).
    The build is deterministic, so a reused problem gives the tables a fresh one would."""
    if _PROBLEM[0] is not spec:
        _PROBLEM[:] = [spec, Problem.build(spec)]
    return _PROBLEM[1]


def integer_step_time_s(spec: Spec, plan: Plan) -> float:
    """The solver's integer objective U of ``plan`` (its stage table, assignment_check.evaluate_assignment), in seconds."""
    problem = problem_of(spec)
    c = plan_choice(plan)
    i = problem.choices.index(c) if c in problem.choices else None
    if i is None:  # a choice outside the searched space (e.g. a pinned ZeRO stage): build its table alone
        moe = spec.model.moe
        a = problem.assumptions
        t = build_table(choice_costs(spec, c, problem.gpu, a), a, spec.model.num_layers,
                        moe.first_dense_layers if moe else 0, moe is not None, problem.options.stage_split,
                        problem.options.uniform_recompute, problem.scale)
    else:
        t = problem.table(i)
    U, _ = evaluate_assignment(t, assignment_of(t, plan.stage_layers, plan.recompute_layers))
    return problem.scale.seconds(U)


def check_integer_scaling(spec: Spec, result) -> None:
    """'Integer scaling error below 0.1 %': the solver's objective value against the re-evaluated best plan,
    and every returned plan's integer objective against its float step time."""
    if not result.plans:
        return
    best = result.plans[0].metrics.step_time_s
    if result.objective == "max_throughput":
        assert result.stats.objective_value is not None
        assert abs(result.stats.objective_value - best) / best < SCALE_TOL, (result.stats.objective_value, best)
    for ev in result.plans:
        t = ev.metrics.step_time_s
        u = integer_step_time_s(spec, ev.plan)
        assert abs(u - t) / t < SCALE_TOL, (ev.plan, u, t)


def with_framework(spec: Spec, name: str, version: str | None = None) -> Spec:
    """``spec`` for framework ``name`` (at ``version``), its search pins that framework cannot run dropped and a model
    feature it cannot build left out (a random spec may ask for what the framework lacks; the planner would rightly
    refuse it)."""
    data = spec.model_dump(mode="python", exclude_none=True)
    data["framework"] = name if version is None else {"name": name, "version": version}
    # a framework named without a version runs at its export's version (frameworks/profile_data.EXPORT_VERSIONS)
    prof = profile(name, version) if version is not None or name not in EXPORT_NAMES else export_profile(name)
    search = data.get("search", {})
    for key, allowed in (("schedules", prof.schedules), ("recompute", prof.recompute),
                         ("zero_stages", prof.zero_stages)):
        if key in search and not set(search[key]) & set(allowed):
            del search[key]
    kinds = search.get("cp_comm_types", ["p2p"])
    if (not prof.context_parallel or not set(kinds) & set(prof.cp_comm_types)) and 1 not in search.get("cp", [1]):
        del search["cp"]
    if "optimizer_states" in search and not prof.optimizer_states:  # the memory-side dimensions likewise
        del search["optimizer_states"]
    needs_states = prof.optimizer_offload == "needs_states" and "optimizer_states" not in search
    if (prof.optimizer_offload == "none" or needs_states) and 0 not in search.get("optimizer_offload_fractions", [0]):
        del search["optimizer_offload_fractions"]
    if not prof.hsdp_zero_stages and 1 not in search.get("zero_replicas", [1]):
        del search["zero_replicas"]
    if not prof.activation_offload and 0 not in search.get("activation_offload_layers", [0]):
        del search["activation_offload_layers"]
    for key, has in (("tp", prof.tensor_parallel), ("pp", prof.pipeline_parallel)):
        if not has and 1 not in search.get(key, [1]):
            del search[key]
    for key, ok in (("moe_fp8_dispatch", prof.fp8_dispatch), ("moe_a2a_overlap", prof.moe_a2a_overlap)):
        if not ok and False not in search.get(key, [False]):
            del search[key]
    if not prof.multi_token_prediction:  # a model the framework cannot build at all (framework_rules.model_conflicts)
        data["model"]["num_mtp_layers"] = 0
    return validate_spec(data)


def choice_index(problem, plan) -> int:
    """The index of ``plan``'s choice in ``problem.choices``: plans say 'none' for 'full' with no layer
    recomputed, which the space keeps only as 'full' when both are searched (solver/space.py: none_pruned)."""
    c = plan_choice(plan)
    if c not in problem.choices and c.recompute == "none":
        c = c.but(recompute="full")
    return problem.choices.index(c)


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


class PlanTally:
    """What an oracle test's drawn examples exercised: feasible and infeasible specs, and (in a subclass's
    :meth:`count`) what the best plans used. Counts are class attributes, one set per subclass."""

    feasible = infeasible = 0

    @classmethod
    def add(cls, result) -> None:
        if not result.plans:
            cls.infeasible += 1
            return
        cls.feasible += 1
        cls.count(result.plans[0].plan)

    @classmethod
    def count(cls, plan) -> None:
        """Tally the best plan's dimensions (nothing here)."""

