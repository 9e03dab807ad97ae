"""The discrete search space: every legal choice of degrees, batch split, schedule, ZeRO and recompute.

Candidate values come from the spec's ``search:`` restrictions; unset, micro-batch sizes are the divisors
of the per-DP batch up to 16, vpp every value of :data:`DEFAULT_VPP` that divides the layers, expert-TP
every divisor of TP, the degrees every divisor of the GPU count; legality is
decided by :func:`parplan.costmodel.legality.choice_violations`, the same rules the evaluator reports.
Two exact dominance reductions keep the space small without losing an optimum for any objective:
ZeRO-0 is dropped when ZeRO-1 is allowed (same time, never more memory), 1F1B when ZB-H1 is (same
memory and stage times, a smaller bubble), sequence parallelism is
always on when TP > 1 and allowed (same time, less memory), 'selective' is dropped when FlashAttention
makes it identical to 'none', and 'none' is dropped when 'full' is allowed ('full' with zero recomputed
layers is 'none', working set included; plans are reported canonically).
Choices with no data-parallel peers keep one ZeRO stage (they are the same plan). FP8 dispatch
(``search.moe_fp8_dispatch``) drops BF16 dispatch where both are legal and ``ep_dispatch_bytes`` is at least
FP8's 1 + 4/128 (same memory, fewer bytes on the wire). ``dualpipev`` and the two EP choices are searched only
when ``search:`` names them (defaults: today's space).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from parplan.costmodel.assumptions import Assumptions
from parplan.costmodel.choice import Choice, effective_zero_stage, nvlink_domain_size
from parplan.costmodel.hardware import GPU
from parplan.costmodel.legality import (degree_violations, framework_choice_violations, moe_comm_violations,
                                        schedule_violations)
from parplan.costmodel.moe_comm import FP8_DISPATCH_BYTES_PER_ELEMENT
from parplan.costmodel.spec import SCHEDULES, Spec
from parplan.frameworks.profiles import space_limits, spec_profile
from parplan.solver.deadline import check

MAX_DEFAULT_MICRO_BATCH_SIZE = 16  # default space: every divisor of the per-DP batch up to this (published: 1-16)
DEFAULT_VPP = (2, 3, 4, 5, 6, 8, 10, 12, 16, 20)  # NeMo recipes use 10, 12 and 20 virtual stages


def default_micro_batch_sizes(local_batch: int) -> list[int]:
    """Micro-batch sizes of the default space: the divisors of the per-DP batch up to 16 (published runs
    use 1, 2, 3, 4, 6, 8, 14 and 16); the batch split rule dp·mbs | global batch holds by construction."""
    return [d for d in divisors(local_batch) if d <= MAX_DEFAULT_MICRO_BATCH_SIZE]


def default_expert_tp(tp: int) -> list[int]:
    """Expert-TP degrees of the default space: the divisors of TP (Megatron-Core's
    --expert-tensor-parallel-size; the expert MLP's collectives, costmodel/choice.py, price each)."""
    return divisors(tp)


def divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


@dataclass(frozen=True)
class SpaceOptions:
    """Pins that the explanation machinery may relax (a spec's ``search:``, resolved)."""

    tp: tuple[int, ...] | None
    cp: tuple[int, ...] | None
    pp: tuple[int, ...] | None
    dp: tuple[int, ...] | None
    ep: tuple[int, ...] | None
    etp: tuple[int, ...] | None
    micro_batch_size: tuple[int, ...] | None
    vpp: tuple[int, ...] | None
    schedules: tuple[str, ...]
    zero_stages: tuple[int, ...]
    recompute: tuple[str, ...]
    sequence_parallel: tuple[bool, ...] | None
    uneven_stages: bool
    uniform_recompute: bool
    stage_split: str = "per_stage"  # per_stage | first_last | even (uneven_stages false: even)
    prune_dominated: bool = True  # off for the explanation's relaxed space, where every value must be present
    zero_stages_with_pp: tuple[int, ...] | None = None  # a framework's ZeRO stages under PP (None: zero_stages)
    recompute_all_layers: bool = False  # 'full' recomputes every layer (torchtitan's full AC, DeepSpeed's)
    moe_fp8_dispatch: tuple[bool, ...] = (False,)  # search.moe_fp8_dispatch (default: off, today's space)
    moe_a2a_overlap: tuple[bool, ...] = (False,)  # search.moe_a2a_overlap

    @staticmethod
    def from_spec(spec: Spec) -> "SpaceOptions":
        """The spec's ``search:``, intersected with its framework's legal space (frameworks/profiles.py)."""
        s = spec.search
        t = lambda v: None if v is None else tuple(v)  # noqa: E731
        opts = SpaceOptions(
            tp=t(s.tp), cp=t(s.cp), pp=t(s.pp), dp=t(s.dp), ep=t(s.ep), etp=t(s.etp),
            micro_batch_size=t(s.micro_batch_size), vpp=t(s.vpp),
            schedules=tuple(s.schedules) if s.schedules else SCHEDULES,
            zero_stages=tuple(s.zero_stages) if s.zero_stages else (0, 1, 2, 3),
            recompute=tuple(s.recompute) if s.recompute else ("none", "selective", "full"),
            sequence_parallel=t(s.sequence_parallel),
            uneven_stages=s.resolved_stage_split != "even", uniform_recompute=s.uniform_recompute,
            stage_split=s.resolved_stage_split,
            moe_fp8_dispatch=tuple(s.moe_fp8_dispatch) if s.moe_fp8_dispatch else (False,),
            moe_a2a_overlap=tuple(s.moe_a2a_overlap) if s.moe_a2a_overlap else (False,),
        )
        prof = spec_profile(spec)
        if prof is None:
            return opts
        lim = space_limits(prof)
        keep = lambda mine, theirs: tuple(v for v in mine if v in theirs)  # noqa: E731
        pin = lambda mine, theirs: theirs if mine is None else keep(mine, theirs)  # noqa: E731
        return replace(
            opts, schedules=keep(opts.schedules, lim.schedules), zero_stages=keep(opts.zero_stages, lim.zero_stages),
            recompute=keep(opts.recompute, lim.recompute),
            cp=opts.cp if lim.cp is None else pin(opts.cp, lim.cp),
            zero_stages_with_pp=lim.zero_stages_with_pp,
            etp=pin(opts.etp, (1,)) if lim.etp_one else opts.etp,
            sequence_parallel=opts.sequence_parallel if lim.sequence_parallel is None
            else pin(opts.sequence_parallel, lim.sequence_parallel),
            uneven_stages=_tighter(opts.stage_split, lim.stage_split) != "even",
            stage_split=_tighter(opts.stage_split, lim.stage_split),
            uniform_recompute=opts.uniform_recompute or lim.uniform_recompute,
            recompute_all_layers=lim.recompute_all_layers,
            moe_fp8_dispatch=tuple(v for v in opts.moe_fp8_dispatch if not v or prof.fp8_dispatch),
            moe_a2a_overlap=tuple(v for v in opts.moe_a2a_overlap if not v or prof.moe_a2a_overlap),
        )


def _tighter(a: str, b: str) -> str:
    """The more restrictive of two stage splits (per_stage ⊃ first_last ⊃ even)."""
    order = ("per_stage", "first_last", "even")
    return max(a, b, key=order.index)


@dataclass
class Space:
    choices: list[Choice]
    rejected: dict[str, int] = field(default_factory=dict)  # rule -> how many candidate choices it removed


def _allowed(values, pins):
    return [v for v in values if pins is None or v in pins]


def enumerate_choices(spec: Spec, gpu: GPU, a: Assumptions, opts: SpaceOptions | None = None,
                      num_gpus: int | None = None, deadline: float | None = None) -> Space:
    """Every legal choice (raises deadline.TimeUp past ``deadline``)."""
    opts = opts or SpaceOptions.from_spec(spec)
    n = num_gpus or spec.cluster.num_gpus
    if num_gpus is not None and num_gpus != spec.cluster.num_gpus:
        spec = spec.model_copy(update={"cluster": spec.cluster.model_copy(update={"num_gpus": num_gpus})})
    model = spec.model
    L = model.num_layers
    gbs = spec.training.global_batch_size
    domain = nvlink_domain_size(spec, gpu)
    moe = model.moe
    rejected: dict[str, int] = {}
    framework = spec_profile(spec) is not None  # its rules beyond the intersected options (e.g. ETP ∈ {1, TP})

    zero = list(opts.zero_stages)
    recompute = list(opts.recompute)
    if opts.prune_dominated:
        if 1 in zero and 0 in zero:
            zero.remove(0)
        if (a.flash_attention and a.selective_recompute_policy == "attention" and "selective" in recompute
                and "none" in recompute):
            recompute.remove("selective")
        if "full" in recompute and "none" in recompute and not opts.recompute_all_layers:
            # 'full' with zero recomputed layers is 'none': same time, same memory (a stage that recomputes no
            # layer holds no regenerated layer, ChoiceCosts.stage_workspace_bytes)
            recompute.remove("none")

    def zero_at(pp: int, dense_group: int, expert_group: int) -> list[int]:
        """One ZeRO stage per distinct cost: under PP, ZeRO-2/3 may cost ZeRO-1's (effective_zero_stage), and
        with no data-parallel peers to shard over (dense and expert DP groups of 1) every stage is the same plan
        (the lowest allowed is kept); under PP only the framework's ZeRO stages that compose with it."""
        stages = zero if pp == 1 or opts.zero_stages_with_pp is None else [z for z in zero if z in opts.zero_stages_with_pp]
        if dense_group == 1 and expert_group == 1:
            return sorted(stages)[:1]
        if not opts.prune_dominated:
            return stages
        kept: dict[int, int] = {}
        for z in sorted(stages):
            kept.setdefault(effective_zero_stage(z, pp, a), z)
        return list(kept.values())

    schedules = list(opts.schedules)
    if opts.prune_dominated and a.zb_weight_grad_fraction > 0 and "zb-h1" in schedules and "1f1b" in schedules:
        schedules.remove("1f1b")  # same memory and stage times, a smaller bubble (pp ≥ 2 only: see below)

    # EP communication choices (costmodel/moe_comm.py): FP8 dispatch moves fewer bytes at the same memory, so
    # with the knob's dispatch at least as wide it dominates BF16 wherever it is legal (exact: same memory,
    # never slower)
    comm_pairs = [(f, o) for f in opts.moe_fp8_dispatch for o in opts.moe_a2a_overlap]
    fp8_dominates = (opts.prune_dominated and a.ep_dispatch_bytes >= FP8_DISPATCH_BYTES_PER_ELEMENT
                     and True in opts.moe_fp8_dispatch)

    # 'none' pruned in favour of 'full' (above) comes back where the all-to-all overlap forbids full recomputation
    none_pruned = "none" in opts.recompute and "none" not in recompute

    def comm_choices(c: Choice) -> list[Choice]:
        legal = []
        for f, o in comm_pairs:
            cc = replace(c, moe_fp8_dispatch=f, moe_a2a_overlap=o) if (f or o) else c
            if o and cc.recompute == "full" and none_pruned:
                cc = replace(cc, recompute="none")
            why = moe_comm_violations(spec, cc)
            if why:
                reject(why)
                continue
            legal.append(cc)
        if fp8_dominates:
            on = {cc.moe_a2a_overlap for cc in legal if cc.moe_fp8_dispatch}
            legal = [cc for cc in legal if cc.moe_fp8_dispatch or cc.moe_a2a_overlap not in on]
        return legal

    def reject(why: list[str], count: int = 1) -> None:
        key = why[0]
        rejected[key] = rejected.get(key, 0) + count

    out: list[Choice] = []
    for tp in _allowed(divisors(n), opts.tp):
        for cp in _allowed(divisors(n // tp), opts.cp):
            for pp in _allowed(divisors(n // (tp * cp)), opts.pp):
                check(deadline)
                if pp > L:
                    continue
                if not opts.uneven_stages and L % pp:
                    reject([f"even stages need num_layers ({L}) divisible by pp"])
                    continue
                dp = n // (tp * cp * pp)
                if opts.dp is not None and dp not in opts.dp:
                    continue
                sps = [True, False] if tp > 1 else [False]
                if opts.sequence_parallel is not None:
                    sps = [s for s in sps if s in opts.sequence_parallel] or ([False] if tp == 1 else [])
                elif tp > 1 and opts.prune_dominated:
                    sps = [True]
                if moe is None:
                    ep_etp = [(1, 1)]
                else:
                    ep_etp = [(ep, etp)
                              for etp in _allowed(default_expert_tp(tp) if opts.etp is None else divisors(n), opts.etp)
                              for ep in _allowed(divisors(moe.num_experts), opts.ep)
                              if (tp * cp * dp) % (ep * etp) == 0]
                for ep, etp in ep_etp:
                    # rules on the degrees alone: checked once for all batch splits and schedules
                    probe = Choice(tp=tp, cp=cp, pp=pp, dp=dp, ep=ep, etp=etp,
                                   num_microbatches=gbs // dp if gbs % dp == 0 else 1)
                    why = degree_violations(spec, probe, a, domain)
                    if why:
                        reject(why)
                        continue
                    mbs_values = opts.micro_batch_size or default_micro_batch_sizes(gbs // dp if gbs % dp == 0 else 1)
                    for mbs in mbs_values:
                        if gbs % (dp * mbs):
                            reject([f"dp·micro_batch_size must divide training.global_batch_size ({gbs})"])
                            continue
                        m = gbs // (dp * mbs)
                        for schedule in (schedules if pp > 1 else opts.schedules):  # ZB-H1 needs pp ≥ 2
                            vpps = [1]
                            if schedule == "interleaved":
                                vpps = [v for v in (opts.vpp or DEFAULT_VPP)
                                        if v >= 2 and L % v == 0 and L // (pp * v) >= 1]
                            elif opts.vpp is not None and 1 not in opts.vpp:
                                continue
                            for vpp in vpps:
                                head = Choice(tp=tp, cp=cp, pp=pp, dp=dp, ep=ep, etp=etp, micro_batch_size=mbs,
                                              num_microbatches=m, vpp=vpp, schedule=schedule)
                                why = schedule_violations(spec, head)
                                if why:
                                    reject(why)
                                    continue
                                for z in zero_at(pp, dp * cp, (tp * cp * dp) // (ep * etp) if moe else 1):
                                    for rc in recompute:
                                        for sp in sps:
                                            base = replace(head, recompute=rc, zero_stage=z, sequence_parallel=sp)
                                            for c in comm_choices(base):
                                                if framework and framework_choice_violations(spec, c):
                                                    reject(framework_choice_violations(spec, c))
                                                    continue
                                                out.append(c)
    return Space(out, rejected)
