"""The discrete search space: every legal choice of degrees, batch split, schedule, ZeRO and recompute.

Candidate values come from the spec's ``search:`` restrictions (solver/space_options.py); unset, micro-batch sizes are the divisors
of the per-DP batch up to 16, vpp every value of :data:`DEFAULT_VPP` (layers that do not divide into whole chunks
trim stage 0's first chunk and the last stage's last one: :func:`chunk_trims`), expert-TP
every divisor of TP, the degrees every divisor of the GPU count; legality is
decided by :func:`parplan.costmodel.evaluation.legality.choice_violations`, the same rules the evaluator reports.
Exact dominance reductions keep the space small without losing an optimum for any objective:
ZeRO-0 is dropped when ZeRO-1 is allowed (same time, never more memory), 1F1B when ZB-H1 is (same
memory and stage times, a smaller bubble), 'selective' is dropped when FlashAttention
makes it identical to 'none', and 'none' is dropped when 'full' is allowed ('full' with zero recomputed
layers is 'none', working set included; plans are reported canonically); SP is on alone under TP > 1 only
without the weight-gradient re-gather (:func:`sequence_parallel_values`).

Memory-side dimensions (``search.zero_replicas``, ``search.optimizer_states``,
``search.optimizer_offload_fractions``; unset, each is today's single value): every listed value that is
legal for the choice (costmodel/evaluation/legality.py ``memory_dim_violations``, the framework's rules). One exact
reduction: the optimizer states cost no time in the model, so of the listed dtypes only those with the
fewest bytes per parameter are kept (same time, never more memory; the first listed among equals).
Choices with no data-parallel peers keep one ZeRO stage (they are the same plan). FP8 dispatch
(``search.moe_fp8_dispatch``) drops BF16 dispatch where both are legal and ``ep_dispatch_bytes`` is at least
FP8's 1 + 4/128 (same memory, fewer bytes on the wire). ``dualpipev`` and the two EP choices are searched only
when ``search:`` names them (defaults: today's space). Activation offload counts (``search.activation_offload_layers``,
default [0]) are tried on every choice where they are legal (pp 1, no recompute: an offloading choice whose
recompute 'none' was pruned for 'full' takes 'none' back); no count dominates another (more layers: less memory,
never less time)."""

from __future__ import annotations

import operator
from dataclasses import dataclass, field

from parplan.costmodel.evaluation.activation_offload import activation_offload_violations
from parplan.costmodel.spec.assumptions import Assumptions, selective_policy
from parplan.costmodel.evaluation.choice import Choice, effective_zero_stage, nvlink_domain_size
from parplan.costmodel.spec.hardware import GPU
from parplan.costmodel.evaluation.legality import (degree_violations, memory_dim_violations, profile_choice_violations,
                                        moe_comm_violations, schedule_violations)
from parplan.costmodel.spec.optimizer_states import optimizer_state_bytes
from parplan.costmodel.moe.moe_comm import FP8_DISPATCH_BYTES_PER_ELEMENT
from parplan.costmodel.schedules.schedule import Schedule
from parplan.costmodel.spec.spec import Spec
from parplan.costmodel.spec.framework_binding import spec_profile
from parplan.costmodel.spec.framework_rules import CHOICE_RULE_FIELDS
from parplan.solver.chunk_trims import interleaved_trims
from parplan.solver.deadline import budget, check
from parplan.solver.space_options import SP_PIN_AT_TP1, SpaceOptions, sequence_parallel_values
from parplan.solver.space_memo import EnumerationMemo
from parplan.solver.space_patterns import SharedCompletions

_RULE_KEY = operator.itemgetter(*CHOICE_RULE_FIELDS)  # a choice's fields the profile's rules read, as a key

MAX_DEFAULT_MICRO_BATCH_SIZE = 16  # default space: every divisor of the per-DP batch up to this (published: 1-16)
DEFAULT_VPP = (2, 3, 4, 5, 6, 8, 10, 12, 16, 20)  # NeMo recipes use 10, 12 and 20 virtual stages

CHOICE_BYTES = 1024  # resident bytes of one Choice in the space, with its share of the lists around it (generous)


def default_micro_batch_sizes(local_batch: int) -> list[int]:
    """Micro-batch sizes of the default space: the divisors of the per-DP batch up to 16 (published runs
    use 1, 2, 3, 4, 6, 8, 14 and 16); the batch split rule dp·mbs | global batch holds by construction."""
    return [d for d in divisors(local_batch) if d <= MAX_DEFAULT_MICRO_BATCH_SIZE]


def default_expert_tp(tp: int) -> list[int]:
    """Expert-TP degrees of the default space: the divisors of TP (Megatron-Core's
    --expert-tensor-parallel-size; the expert MLP's collectives, costmodel/evaluation/choice.py, price each)."""
    return divisors(tp)


def divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


@dataclass
class Space:
    choices: list[Choice]
    rejected: dict[str, int] = field(default_factory=dict)  # rule -> how many candidate choices it removed


class RejectionTally:
    """How many candidate choices each rule removed, keyed by the first reason a candidate breaks (the
    explanation reports the largest; Calculon's ``llm.py`` raises on the first broken rule the same way)."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def reject(self, why: list[str], count: int = 1) -> None:
        self.counts[why[0]] = self.counts.get(why[0], 0) + count


def _allowed(values, pins):
    return [v for v in values if pins is None or v in pins]


@dataclass(frozen=True)
class PrunedValues:
    """The option lists after the exact dominance reductions of the module docstring (the pruning pass, run
    once before the dimensions are expanded; ``prune_dominated`` off keeps every value)."""

    zero_stages: list[int]
    recompute: list[str]
    recompute_trimmed: list[str]  # under a trimmed end chunk (one recompute count per chunk: no uniform 'full')
    none_pruned: bool  # 'none' was dropped for 'full': a choice that cannot recompute fully takes it back
    schedules: list[Schedule]  # under pp ≥ 2 (ZB-H1 needs two stages: pp 1 keeps the listed schedules)
    memory_dims: list[tuple[int, str | None, float]]  # (zero_replicas, optimizer_states, offload fraction)
    offload: bool  # some optimizer offload fraction is listed
    fp8_dominates: bool  # FP8 dispatch drops BF16 where both are legal
    sp_dominates: bool  # SP on drops SP off under TP > 1 (sequence_parallel_values)

    def without_full(self, recompute: str) -> str:
        return "none" if recompute == "full" and self.none_pruned else recompute

    def none_back(self, c: Choice) -> Choice:
        """``c``, which cannot recompute fully, with the 'none' that 'full' stood for where it was pruned."""
        return c.but(recompute="none") if self.without_full(c.recompute) != c.recompute else c


def prune_dominated(opts: SpaceOptions, a: Assumptions, mla: bool = False) -> PrunedValues:
    """The pruning pass: each listed dimension less its dominated values (module docstring)."""
    prune = opts.prune_dominated
    zero, recompute = list(opts.zero_stages), list(opts.recompute)
    if prune:
        if 1 in zero and 0 in zero:
            zero.remove(0)
        if (a.flash_attention and selective_policy(a, mla) == "attention" and "selective" in recompute
                and "none" in recompute):
            recompute.remove("selective")
        if "full" in recompute and "none" in recompute and not opts.recompute_all_layers:
            # 'full' with zero recomputed layers is 'none': same time, same memory (a stage that recomputes no
            # layer holds no regenerated layer, ChoiceCosts.stage_workspace_bytes)
            recompute.remove("none")
    none_pruned = "none" in opts.recompute and "none" not in recompute
    recompute_trimmed = recompute
    if opts.uniform_recompute:
        back = ["none" if rc == "full" and none_pruned else rc for rc in recompute]  # PrunedValues.without_full
        recompute_trimmed = [rc for rc in back if rc != "full"]
    schedules = list(opts.schedules)
    if prune and a.zb_weight_grad_fraction > 0 and Schedule.ZB_H1 in schedules and Schedule.ONE_F_ONE_B in schedules:
        schedules.remove(Schedule.ONE_F_ONE_B)  # same memory and stage times, a smaller bubble (pp ≥ 2 only)
    offload = any(f > 0 for f in opts.optimizer_offload_fractions)
    memory_dims = [(r, st, f) for r in dict.fromkeys(opts.zero_replicas) for st in _least_optimizer_states(opts, a)
                   for f in dict.fromkeys(float(x) for x in opts.optimizer_offload_fractions)]
    # EP communication choices (costmodel/moe/moe_comm.py): FP8 dispatch moves fewer bytes at the same memory, so
    # with the knob's dispatch at least as wide it dominates BF16 wherever it is legal (exact: same memory,
    # never slower)
    fp8_dominates = prune and a.ep_dispatch_bytes >= FP8_DISPATCH_BYTES_PER_ELEMENT and True in opts.moe_fp8_dispatch
    sp_dominates = prune and not a.tp_sp_weight_grad_regather and (  # SP's 4 collectives as the all-reduces', unless
        a.tp_comm_overlap == 0 or not a.tp_overlap_pairs or a.tp_overlap_comm_sms == 0)  # it holds SMs (layer_comm)
    return PrunedValues(zero, recompute, recompute_trimmed, none_pruned, schedules, memory_dims, offload, fp8_dominates,
                        sp_dominates)


def _least_optimizer_states(opts: SpaceOptions, a: Assumptions) -> list[str | None]:
    """The listed optimizer-state dtypes with the fewest bytes (the first among equals); the assumptions' bytes
    (None) too where they are fewer still, since a framework may need a precision-aware optimizer (offload)."""
    states = list(dict.fromkeys(opts.optimizer_states))
    if not opts.prune_dominated or len(states) <= 1:
        return states
    named = [st for st in states if st is not None]
    least = min(optimizer_state_bytes(st, a.optimizer_bytes) for st in named)
    keep = [st for st in named if optimizer_state_bytes(st, a.optimizer_bytes) == least][:1]
    if None in states and a.optimizer_bytes < least:
        keep = [None] + keep
    return keep


# ---------------------------------------------------------------- per-dimension generators (enumeration order)
def degree_grid(n: int, num_layers: int, opts: SpaceOptions, tally: RejectionTally, deadline=None, cancel=None):
    """(tp, cp, pp, dp) with tp·cp·pp·dp = n: every divisor split the pins allow, tp, cp, pp ascending."""
    for tp in _allowed(divisors(n), opts.tp):
        for cp in _allowed(divisors(n // tp), opts.cp):
            for pp in _allowed(divisors(n // (tp * cp)), opts.pp):
                check(deadline, cancel)
                if pp > num_layers:
                    continue
                if not opts.uneven_stages and num_layers % pp:
                    tally.reject([f"even stages need num_layers ({num_layers}) divisible by pp"])
                    continue
                dp = n // (tp * cp * pp)
                if opts.dp is not None and dp not in opts.dp:
                    continue
                yield tp, cp, pp, dp


def expert_degrees(n: int, tp: int, cp: int, dp: int, moe, opts: SpaceOptions):
    """(ep, etp) pairs, etp outer: divisors of the expert count and of TP (or of n where ETP is listed) whose
    product divides tp·cp·dp; (1, 1) for a dense model. Each with every CP comm type (none dominates another:
    each trades exposed time against memory and head divisibility; cp = 1 has none, p2p canonical)."""
    pairs = [(1, 1)] if moe is None else [
        (ep, etp) for etp in _allowed(default_expert_tp(tp) if opts.etp is None else divisors(n), opts.etp)
        for ep in _allowed(divisors(moe.num_experts), opts.ep) if (tp * cp * dp) % (ep * etp) == 0]
    kinds = list(opts.cp_comm_types) if cp > 1 else ["p2p"]
    for pair in pairs:
        for kind in kinds:
            yield pair, kind


def batch_splits(global_batch: int, dp: int, opts: SpaceOptions, tally: RejectionTally):
    """(micro-batch size, micro-batch count) with dp·mbs·m = the global batch."""
    local = global_batch // dp if global_batch % dp == 0 else 1
    for mbs in opts.micro_batch_size or default_micro_batch_sizes(local):
        if global_batch % (dp * mbs):
            tally.reject([f"dp·micro_batch_size must divide training.global_batch_size ({global_batch})"])
            continue
        if opts.num_microbatches is not None and global_batch // (dp * mbs) not in opts.num_microbatches:
            tally.reject(["plan.num_microbatches"])
            continue
        yield mbs, global_batch // (dp * mbs)


def schedule_layouts(pp: int, num_layers: int, opts: SpaceOptions, pruned: PrunedValues, trims: bool,
                     uniform_dense: int = 0):
    """(schedule, vpp, first chunk trim, last chunk trim): interleaved at every listed vpp ≥ 2 and its trims
    (:func:`interleaved_trims`), the others at vpp 1 where the vpp pins allow it."""
    for schedule in (pruned.schedules if pp > 1 else opts.schedules):  # ZB-H1 needs pp ≥ 2
        if schedule is Schedule.INTERLEAVED:
            for vpp in (opts.vpp or DEFAULT_VPP):
                if vpp >= 2:
                    for first, last in interleaved_trims(num_layers, pp, vpp, trims, uniform_dense):
                        yield schedule, vpp, first, last
        elif opts.vpp is None or 1 in opts.vpp:
            yield schedule, 1, 0, 0


def zero_stages_at(pruned: PrunedValues, opts: SpaceOptions, a: Assumptions, pp: int, dense_group: int,
                   expert_group: int) -> list[int]:
    """One ZeRO stage per distinct cost: under PP, ZeRO-2/3 may cost ZeRO-1's (effective_zero_stage), and
    with no data-parallel peers to shard over (dense and expert DP groups of 1) every stage is the same plan
    (the lowest allowed is kept); under PP only the framework's ZeRO stages that compose with it."""
    zero = pruned.zero_stages
    stages = zero if pp == 1 or opts.zero_stages_with_pp is None else [z for z in zero if z in opts.zero_stages_with_pp]
    if dense_group == 1 and expert_group == 1 and not pruned.offload:
        return sorted(stages)[:1]  # (with offload a framework may need ZeRO >= 1 or ZeRO-3: all are kept)
    if not opts.prune_dominated:
        return stages
    kept: dict[int, int] = {}
    for z in sorted(stages):
        kept.setdefault(effective_zero_stage(z, pp, a), z)
    return list(kept.values())


class _Expansion:
    """The legality checks between the generators: each rule is checked once at the outermost level whose
    values decide it (degrees, then the schedule, then memory dimensions, then communication and offload)."""

    def __init__(self, spec: Spec, a: Assumptions, opts: SpaceOptions, domain: int, tally: RejectionTally, memo=None):
        self.spec, self.a, self.opts, self.domain, self.tally = spec, a, opts, domain, tally
        self.pruned = prune_dominated(opts, a, spec.model.mla is not None)
        moe = spec.model.moe
        # trimmed end chunks: per-stage counts of a model whose layers are all of one class (the table's exactness);
        # with leading dense layers, the uniform layout, its counts fixed (chunk_trims.uniform_trims)
        layouts = opts.chunk_layouts and opts.stage_split in ("per_stage", "first_last")
        self.trims = layouts and (moe is None or moe.first_dense_layers == 0)
        self.uniform_dense = moe.first_dense_layers if layouts and moe is not None else 0
        self.profile = spec_profile(spec)  # its rules beyond the intersected options (ETP ∈ {1, TP}); looked up once
        plan = spec.plan  # a partial plan pinning SP on rules out TP 1 (sequence_parallel_values)
        self.sp_pinned_on = plan is not None and "sequence_parallel" in plan.model_fields_set and plan.sequence_parallel
        # zero_stages_at, _profile_violations, _comm_verdicts, schedule_violations: kept across batches (space_memo.py)
        memo = memo or EnumerationMemo()
        self._zero_stages, self._verdicts, self._comm, self._ruled = memo.zero_stages, memo.verdicts, memo.comm, memo.ruled
        # no EP communication or activation offload value listed but the default: comm_choices and offload_choices
        # hand each choice back alone, unchecked (their rules read only those values), so completions skips them
        self.plain = opts.moe_fp8_dispatch == (False,) and opts.moe_a2a_overlap == (False,) and \
            opts.activation_offload_layers == (0,)

    def heads(self, n: int, tp: int, cp: int, pp: int, dp: int):
        """Choices of these degrees up to their schedule layout, each past the degree and schedule rules."""
        spec, opts = self.spec, self.opts
        gbs, num_layers = spec.training.global_batch_size, spec.model.num_layers
        layouts = list(schedule_layouts(pp, num_layers, opts, self.pruned, self.trims, self.uniform_dense))  # all EPs'
        ruled = self._ruled  # schedule_violations by (pp, m, schedule, vpp): all it reads here (space_memo.py)
        for (ep, etp), kind in expert_degrees(n, tp, cp, dp, spec.model.moe, opts):
            # rules on the degrees alone: checked once for all batch splits and schedules
            probe = Choice(tp=tp, cp=cp, pp=pp, dp=dp, ep=ep, etp=etp,
                           num_microbatches=gbs // dp if gbs % dp == 0 else 1, cp_comm_type=kind)
            why = degree_violations(spec, probe, self.a, self.domain)
            if why:
                self.tally.reject(why)
                continue
            for mbs, num_microbatches in batch_splits(gbs, dp, opts, self.tally):
                for schedule, vpp, first_trim, last_trim in layouts:
                    why = ruled.get((pp, num_microbatches, schedule, vpp))
                    if not why:  # the probe's degrees (Choice.but: no __init__ per head)
                        head = probe.but(micro_batch_size=mbs, num_microbatches=num_microbatches, vpp=vpp,
                                         schedule=schedule, first_chunk_trim=first_trim, last_chunk_trim=last_trim)
                        if why is None:
                            why = ruled[(pp, num_microbatches, schedule, vpp)] = schedule_violations(spec, head)
                    if why:
                        self.tally.reject(why)
                        continue
                    yield head

    def completions(self, head: Choice):
        """``head`` with every ZeRO stage, memory dimension, recompute, SP, EP communication and activation
        offload value that is legal for it, in enumeration order."""
        pruned, spec = self.pruned, self.spec
        sps = sequence_parallel_values(head.tp, self.opts, pruned.sp_dominates, self.sp_pinned_on)
        if not sps:
            self.tally.reject([SP_PIN_AT_TP1] if self.sp_pinned_on and head.tp == 1 else
                              ["search.sequence_parallel has no value this TP allows"])
            return
        expert_group = (head.tp * head.cp * head.dp) // (head.ep * head.etp) if spec.model.moe else 1
        trimmed = head.first_chunk_trim or head.last_chunk_trim
        groups = (head.pp, head.dp * head.cp, expert_group)
        zeros = self._zero_stages.get(groups)
        if zeros is None:
            zeros = self._zero_stages[groups] = zero_stages_at(pruned, self.opts, self.a, *groups)
        for z in zeros:
            for replicas, states, offload in pruned.memory_dims:
                mem = head.but(zero_stage=z, zero_replicas=replicas, optimizer_states=states,
                               optimizer_offload_fraction=offload)
                why = memory_dim_violations(mem)
                if why:
                    self.tally.reject(why, len(pruned.recompute) * len(sps))
                    continue
                for rc in (pruned.recompute_trimmed if trimmed else pruned.recompute):
                    for sp in sps:
                        base = mem.but(recompute=rc, sequence_parallel=sp)
                        for c in ((base,) if self.plain else
                                  (oc for cc in self.comm_choices(base) for oc in self.offload_choices(cc))):
                            why = self._profile_violations(c)
                            if why:
                                self.tally.reject(why)
                                continue
                            yield c

    def _profile_violations(self, c: Choice) -> list[str]:
        """The framework profile's choice rules on ``c`` (costmodel/evaluation/legality.py), kept by the fields they
        read (framework_rules.CHOICE_RULE_FIELDS): the batch splits, virtual stages and trims of one set of degrees
        share one verdict."""
        key = _RULE_KEY(c.__dict__)
        why = self._verdicts.get(key)
        if why is None:
            why = self._verdicts[key] = profile_choice_violations(self.profile, self.spec, c)
        return why

    def comm_choices(self, c: Choice) -> list[Choice]:
        """``c`` with each legal (FP8 dispatch, all-to-all overlap) pair; FP8 drops BF16 where it dominates. Only the
        legal candidates are built (the verdicts by the fields the rules read: :meth:`_comm_verdicts`)."""
        legal = []
        for fp8, overlap, recompute, why in self._comm_verdicts(c):
            if why:
                self.tally.reject(why)
            elif not (fp8 or overlap):
                legal.append(c)
            else:  # an overlap's recompute: the 'none' a pruned 'full' stood for (PrunedValues.none_back)
                legal.append(c.but(moe_fp8_dispatch=fp8, moe_a2a_overlap=overlap, recompute=recompute))
        if self.pruned.fp8_dominates:
            on = {cc.moe_a2a_overlap for cc in legal if cc.moe_fp8_dispatch}
            legal = [cc for cc in legal if cc.moe_fp8_dispatch or cc.moe_a2a_overlap not in on]
        return legal

    def _comm_verdicts(self, c: Choice) -> list[tuple[bool, bool, str, list[str]]]:
        """(FP8 dispatch, overlap, recompute, violations) of each listed pair on ``c``, in order, kept by all that
        legality.moe_comm_violations reads: the pair, ep, pp, schedule, recompute (tests/solver/test_space.py)."""
        key = (c.ep, c.pp, c.schedule, c.recompute, c.moe_fp8_dispatch, c.moe_a2a_overlap)
        if key not in self._comm:
            verdicts = self._comm[key] = []
            for fp8, overlap in ((f, o) for f in self.opts.moe_fp8_dispatch for o in self.opts.moe_a2a_overlap):
                cc = c.but(moe_fp8_dispatch=fp8, moe_a2a_overlap=overlap) if (fp8 or overlap) else c
                if overlap:  # the overlap forbids full recomputation
                    cc = self.pruned.none_back(cc)
                why = moe_comm_violations(self.spec, cc) if (fp8 or overlap) else []
                verdicts.append((fp8, overlap, cc.recompute, why))
        return self._comm[key]

    def offload_choices(self, c: Choice) -> list[Choice]:
        """``c`` with each listed activation offload count that is legal for it (costmodel/evaluation/activation_offload.py):
        pp 1 and no recompute, so 'full' pruned in favour of 'none' comes back as 'none' for an offloading choice."""
        legal = []
        for layers in self.opts.activation_offload_layers:
            cc = c
            if layers:
                cc = self.pruned.none_back(c.but(activation_offload_layers=layers))
                why = activation_offload_violations(self.spec, cc)
                if why:
                    self.tally.reject(why)
                    continue
            legal.append(cc)
        return legal


def enumerate_choices(spec: Spec, gpu: GPU, a: Assumptions, opts: SpaceOptions | None = None,
                      deadline: float | None = None, cancel=None, memo=None) -> Space:
    """Every legal choice (raises deadline.TimeUp past ``deadline`` or once the ``cancel`` event is set): the
    pruning pass (:func:`prune_dominated`), then the per-dimension generators nested in enumeration order
    (degrees, expert degrees and CP comm type, batch split, schedule layout, ZeRO, memory dimensions,
    recompute, SP, EP communication, activation offload; the last six shared by the heads of one signature:
    solver/space_patterns.py), each rule checked where its values are known (Calculon ``llm.py:206-250`` and
    SimuMax ``tuning/strategy_searcher.py`` walk their spaces the same way); ``memo``: solver/space_memo.py's."""
    opts, n, tally = opts or SpaceOptions.from_spec(spec), spec.cluster.num_gpus, RejectionTally()
    expansion = _Expansion(spec, a, opts, nvlink_domain_size(spec, gpu), tally, memo)
    complete, out = SharedCompletions(expansion, memo.patterns if memo else None), []  # (solver/space_patterns.py)
    for tp, cp, pp, dp in degree_grid(n, spec.model.num_layers, opts, tally, deadline, cancel):
        budget().require(len(out) * CHOICE_BYTES, "the search space's choices")
        for head in expansion.heads(n, tp, cp, pp, dp):
            out.extend(complete(head))
    return Space(out, tally.counts)
