"""The search space's options (:class:`SpaceOptions`): a spec's ``search:`` resolved, each unset key its default
(every legal value, or today's single value for the memory-side dimensions), and intersected with the legal space
of the spec's framework (frameworks/profiles.py, ``space_limits``); the explanation relaxes them
(solver/explain.py). solver/space.py enumerates the choices they allow."""

from __future__ import annotations

from dataclasses import dataclass, replace

from parplan.costmodel.schedules.schedule import Schedule
from parplan.costmodel.spec.framework_binding import spec_profile
from parplan.costmodel.spec.framework_rules import space_limits
from parplan.costmodel.spec.spec import SCHEDULES, Spec


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
    schedules: tuple[Schedule, ...]
    zero_stages: tuple[int, ...]
    recompute: tuple[str, ...]
    sequence_parallel: tuple[bool, ...] | None
    uneven_stages: bool
    uniform_recompute: bool
    stage_split: str = "per_stage"  # per_stage | first_last | even (uneven_stages false: even)
    prune_dominated: bool = True  # off for the explanation's relaxed space, where every value must be present
    zero_stages_with_pp: tuple[int, ...] | None = None  # a framework's ZeRO stages under PP (None: zero_stages)
    recompute_all_layers: bool = False  # 'full' recomputes every layer (torchtitan's full AC, DeepSpeed's)
    chunk_layouts: bool = True  # interleaved chunks may differ within a stage (trimmed first / last chunk)
    cp_comm_types: tuple[str, ...] = ("p2p",)  # with cp > 1 (cp = 1 is always p2p); search.cp_comm_types
    zero_replicas: tuple[int, ...] = (1,)  # HSDP replica groups of the ZeRO group
    optimizer_states: tuple[str | None, ...] = (None,)  # None: assumptions.optimizer_bytes
    optimizer_offload_fractions: tuple[float, ...] = (0.0,)
    moe_fp8_dispatch: tuple[bool, ...] = (False,)  # search.moe_fp8_dispatch (default: off, today's space)
    moe_a2a_overlap: tuple[bool, ...] = (False,)  # search.moe_a2a_overlap
    activation_offload_layers: tuple[int, ...] = (0,)  # search.activation_offload_layers (costmodel/evaluation/activation_offload.py)
    num_microbatches: tuple[int, ...] | None = None  # a partial plan's pinned micro-batch count (solver/completion.py)

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
            cp_comm_types=tuple(s.cp_comm_types) if s.cp_comm_types else ("p2p",),
            zero_replicas=tuple(s.zero_replicas) if s.zero_replicas else (1,),
            optimizer_states=tuple(s.optimizer_states) if s.optimizer_states else (None,),
            optimizer_offload_fractions=tuple(s.optimizer_offload_fractions) if s.optimizer_offload_fractions else (0.0,),
            moe_fp8_dispatch=tuple(s.moe_fp8_dispatch) if s.moe_fp8_dispatch else (False,),
            moe_a2a_overlap=tuple(s.moe_a2a_overlap) if s.moe_a2a_overlap else default_a2a_overlap(spec),
            activation_offload_layers=(tuple(dict.fromkeys(s.activation_offload_layers))
                                       if s.activation_offload_layers else (0,)),
            num_microbatches=(spec.plan.num_microbatches,) if spec.plan is not None and spec.plan.num_microbatches
            is not None and "num_microbatches" in spec.plan.model_fields_set else None,
        )
        prof = spec_profile(spec)
        if prof is None:
            return opts
        lim = space_limits(prof)
        keep = lambda mine, theirs: tuple(v for v in mine if v in theirs)  # noqa: E731
        pin = lambda mine, theirs: theirs if mine is None else keep(mine, theirs)  # noqa: E731
        cp_types = keep(opts.cp_comm_types, lim.cp_comm_types)
        if not cp_types:  # none of the asked CP comm types runs there: no cp > 1
            opts = replace(opts, cp=pin(opts.cp, (1,)))
        return replace(
            opts, schedules=keep(opts.schedules, lim.schedules), zero_stages=keep(opts.zero_stages, lim.zero_stages),
            recompute=keep(opts.recompute, lim.recompute),
            cp=opts.cp if lim.cp is None else pin(opts.cp, lim.cp),
            tp=opts.tp if lim.tp is None else pin(opts.tp, lim.tp), pp=opts.pp if lim.pp is None else pin(opts.pp, lim.pp),
            zero_stages_with_pp=lim.zero_stages_with_pp,
            etp=pin(opts.etp, (1,)) if lim.etp_one else opts.etp,
            sequence_parallel=opts.sequence_parallel if lim.sequence_parallel is None
            else pin(opts.sequence_parallel, lim.sequence_parallel),
            uneven_stages=_tighter(opts.stage_split, lim.stage_split) != "even",
            stage_split=_tighter(opts.stage_split, lim.stage_split),
            uniform_recompute=opts.uniform_recompute or lim.uniform_recompute,
            recompute_all_layers=lim.recompute_all_layers, cp_comm_types=cp_types or ("p2p",),
            chunk_layouts=lim.chunk_layouts,
            # a framework without a precision-aware optimizer runs only the assumptions' optimizer bytes
            optimizer_states=opts.optimizer_states if prof.optimizer_states
            else tuple(v for v in opts.optimizer_states if v is None),
            moe_fp8_dispatch=tuple(v for v in opts.moe_fp8_dispatch if not v or prof.fp8_dispatch),
            moe_a2a_overlap=tuple(v for v in opts.moe_a2a_overlap if not v or prof.moe_a2a_overlap),
            activation_offload_layers=tuple(v for v in opts.activation_offload_layers
                                            if not v or prof.activation_offload),
        )


def default_a2a_overlap(spec: Spec) -> tuple[bool, ...]:
    """``search.moe_a2a_overlap`` unset: both values for an MoE model with expert parallelism possible (the profile
    filter in :meth:`SpaceOptions.from_spec` then keeps ``true`` only where the framework runs it: Megatron-Core
    >= 0.15, ``--overlap-moe-expert-parallel-comm``, NVIDIA/Megatron-LM@d98e8a64 megatron/training/arguments.py and
    transformer_config.py:3002-3046; and the research space, which runs what any framework runs); else off."""
    return (False, True) if spec.model.moe is not None else (False,)


def _tighter(a: str, b: str) -> str:
    """The more restrictive of two stage splits (per_stage ⊃ first_last ⊃ even)."""
    order = ("per_stage", "first_last", "even")
    return max(a, b, key=order.index)


SP_PIN_AT_TP1 = "plan.sequence_parallel true needs TP above 1 (sequence parallelism is off at TP 1)"


def sequence_parallel_values(tp: int, opts: SpaceOptions, sp_dominates: bool = False, pinned_on: bool = False
                             ) -> list[bool]:
    """SP on and off under TP > 1, off at TP 1: SP holds less and alone hides its collectives, but only behind (tp-1)/tp
    of the GEMMs (layer_comm.LayerComm.tp_block_s) and, re-gathering for the weight gradient, runs five per block to
    the all-reduces' four: slower beside short GEMMs. ``sp_dominates`` (no re-gather): SP on alone. ``pinned_on``: a
    partial plan pins ``sequence_parallel: true``, which a TP-1 plan (SP off) would break: none at TP 1 (a search
    list ``search.sequence_parallel: [true]`` still leaves TP 1 its SP off)."""
    values = [True, False] if tp > 1 else [False]
    if pinned_on:
        return [True] if tp > 1 and (opts.sequence_parallel is None or True in opts.sequence_parallel) else []
    if opts.sequence_parallel is not None:
        return [s for s in values if s in opts.sequence_parallel] or ([False] if tp == 1 else [])
    return values[:1] if sp_dominates else values
