"""The brute forces the solver is tested against (test code only): every plan of a tiny spec by the float
evaluator (:func:`brute_force`), and every assignment of a tiny stage table (:func:`table_brute_force`)."""

from __future__ import annotations

import itertools
from typing import Optional

from parplan.costmodel.spec.assumptions import resolve_assumptions
from parplan.costmodel.evaluation.choice import Choice, choice_costs, nvlink_domain_size
from parplan.costmodel.evaluation.evaluate import evaluate_costs
from parplan.costmodel.evaluation.prediction_band import with_memory_band
from parplan.costmodel.spec.hardware import resolve_gpu
from parplan.costmodel.evaluation.legality import choice_violations, stage_violations
from parplan.costmodel.spec.spec import SCHEDULES, Plan, Spec
from parplan.solver.oracle import peak_mib
from parplan.solver.assignment_check import assignment_violations, evaluate_assignment
from parplan.solver.tables import Assignment, StageTable

from tests.conftest import divisors_of


def compositions(n: int, k: int):
    """Every way to write n as an ordered sum of k positive integers."""
    for cuts in itertools.combinations(range(1, n), k - 1):
        bounds = (0,) + cuts + (n,)
        yield [bounds[i + 1] - bounds[i] for i in range(k)]


# With ``search.etp`` unset the solver's space tries expert-TP in {1, tp} only (solver/space.py), not every
# legal value; the brute force mirrors that unless this is True. See test_unpinned_etp_is_searched_fully.
ETP_EVERY_VALUE = False


def _allowed(values, pins):
    return [v for v in values if pins is None or v in pins]


def closed_form_s(e) -> float:
    """The evaluator's step (its closed form): what the planner's search optimizes today."""
    return e.metrics.step_time_s


def step_order_or_closed_s(e) -> float:
    """A DualPipe / DualPipeV plan's step by its step order (``metrics.step_order_step_s``, DP term included),
    any other plan's step: the objective issue 39 item 1 makes the search's. Monotone in every operation's
    duration (a longest path), so the brute force's recompute pruning holds for it."""
    return e.metrics.step_order_step_s if e.metrics.step_order_step_s is not None else e.metrics.step_time_s


def brute_force(spec: Spec, below, equal_middles: bool = False, objective=closed_form_s):
    """Every plan the spec's search allows, by the float evaluator: returns a plan that fits with a step time
    below ``below`` (None: any plan that fits; a function of the Choice: a threshold per choice, as the replan
    objective's tests/solver/test_replan.py), or None when there is none.

    Pruning uses only two evident properties of the cost model: recomputing more layers never makes a stage
    faster, and never makes it need more memory. So for one (choice, stage split): the split without
    recomputation bounds the step time from below (skip if it is not below ``below``), and if it fits it is the
    split's best; if recomputing every layer does not fit, nothing does; otherwise every recompute vector is
    evaluated (``objective``: the step of an evaluation, :func:`closed_form_s` or :func:`step_order_or_closed_s`,
    both monotone in the recompute). Choices are every legal combination of degrees, batch split, schedule, vpp, ZeRO stage,
    recompute granularity and sequence parallelism (no dominance pruning); splits are every composition of
    the layers into pp stages (unequal middle stages included unless ``equal_middles``: then only splits
    whose middle stages hold equal layer counts, the solver's first/middle/last form; recompute vectors are
    never reduced).
    """
    spec = with_memory_band(spec)  # the planner's rule of fit: the memory band's margin where it applies
    sp_pinned_on = spec.plan is not None and "sequence_parallel" in spec.plan.model_fields_set and \
        spec.plan.sequence_parallel
    s = spec.search
    a = resolve_assumptions(spec.assumptions)
    gpu = resolve_gpu(spec.cluster)
    domain = nvlink_domain_size(spec, gpu)
    n, L, gbs = spec.cluster.num_gpus, spec.model.num_layers, spec.training.global_batch_size
    moe = spec.model.moe
    for tp in _allowed(divisors_of(n), s.tp):
        for cp in _allowed(divisors_of(n // tp), s.cp):
            for pp in _allowed(divisors_of(n // (tp * cp)), s.pp):
                dp = n // (tp * cp * pp)
                if pp > L or (s.dp is not None and dp not in s.dp):
                    continue
                inner = tp * cp * dp
                etps = _allowed(divisors_of(inner), s.etp) if s.etp is not None or ETP_EVERY_VALUE else sorted({1, tp})
                eps = [(1, 1)] if moe is None else [
                    (ep, etp) for ep in _allowed(divisors_of(inner), s.ep) for etp in etps]
                sps = [False] if tp == 1 else _allowed([True, False], s.sequence_parallel)
                if sp_pinned_on:  # a partial plan pinning SP on: no TP-1 plan (SP is off there)
                    sps = [sp for sp in sps if sp]
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
                        found = _best_split(spec, c, costs, a, below(c) if callable(below) else below, equal_middles,
                                            objective)
                        if found is not None:
                            return found
    return None


def _best_split(spec, c: Choice, costs, a, below, equal_middles, objective=closed_form_s):
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
        return e.metrics.fits and (below is None or objective(e) < below)

    split = s.resolved_stage_split
    # DualPipeV: rank 0 holds the first and the last stage, so every other rank is a middle one
    mid = slice(1, None) if c.schedule == "dualpipev" else slice(1, -1)
    for layers in compositions(L, c.pp):
        if any(x % c.vpp for x in layers) or (split == "even" and len(set(layers)) > 1):
            continue
        if (equal_middles or split == "first_last") and len(set(layers[mid])) > 1:
            continue
        if stage_violations(spec, c, layers, [0] * c.pp):  # DualPipeV: two stages of ≥ 1 layer per rank
            continue
        e0 = ev(layers, [0] * c.pp)
        if below is not None and objective(e0) >= below:
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


def table_brute_force(t: StageTable, cap_kib: int) -> Optional[tuple[int, int]]:
    """(least U, least peak in MiB at that U) over every assignment of a tiny table."""
    num_units, num_layers, k = t.num_units, t.num_layers, t.k_dense
    best = None
    for layers in itertools.product(range(0, num_layers + 1), repeat=num_units):
        if sum(layers) != num_layers:
            continue
        for recompute in itertools.product(*[range(0, layers[u] + 1) for u in range(num_units)]):
            for dense in range(0, k + 1) if k and t.choice.recompute == "full" else [0]:
                # a DualPipe table that prices every split: each rank's phase-0 layers too
                firsts = itertools.product(*[range(0, layers[u] + 1) for u in range(num_units)]) \
                    if t.t_split is not None else [None]
                for first in firsts:
                    x = Assignment(tuple(layers), tuple(recompute), dense, first)
                    if assignment_violations(t, x, cap_kib):
                        continue
                    objective, peak = evaluate_assignment(t, x)
                    if best is None or (objective, peak_mib(peak)) < best:
                        best = (objective, peak_mib(peak))
    return best
