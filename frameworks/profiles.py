"""Target-framework profiles: what each training framework can run, and what it allocates.

A spec's ``framework:`` (``megatron-core | megatron-bridge | torchtitan | deepspeed``, or
``{name: ..., version: ...}``) selects one :class:`Profile`. A profile is

* a **legal space**, in parplan's own terms: the pipeline schedules, ZeRO stages (with and without
  pipeline parallelism), recompute granularities and per-stage recompute counts, CP / EP / ETP /
  sequence-parallel rules and stage splits the framework can launch. :func:`space_limits` is what
  ``SpaceOptions.from_spec`` intersects the search with; :func:`framework_violations` is the rule
  ``costmodel.legality`` reports and :func:`runs_on` applies to every returned plan;
* a **memory convention**: values for the cost model's existing knobs (``solver-cli knobs``), applied
  under the user's explicit ``assumptions:`` (user values win; :func:`framework_assumptions`).

Every fact carries a citation (:data:`CITATIONS`; repository file at a commit). Source snapshots read:

* Megatron-LM ``d98e8a64ddf34856e74b24714e3bedb2f5a39553`` (2026-08-22; tag core_v0.19.0 is 2026-08-19)
* Megatron-Bridge ``067f987df03b8355b03192d88d70f1709fedf51a`` (2026-08-22)
* torchtitan ``b5bcd76c66d0acb1a08b176d9639425bc55e0b2a`` (2026-08-21), tag ``v0.2.2`` (2026-02-20) and main
  ``9dec370ad26b5f8e9a7333a0e36165018262644b`` (2024-12-26; versions before v0.1.0 are main-branch dates)
* DeepSpeed ``edaa7221267243c7be7fb49c5d5f5c4fb97b4641`` (2026-08-22)
* LLM Foundry ``061f2c7ce64e655100286584a7629e2a09f827ba`` (2023-10-17; after v0.3.0) and the Composer release it
  pins (``mosaicml>=0.16.3,<0.17``: v0.16.4 ``1c9d8d17989424d804bc3baef03ba11d5005fd88``)
* Megatron-LM before Megatron-Core (``megatron-lm``, 2021-2022): the main-branch commits that added each option
  (``git log --first-parent main -S<flag>``), see :data:`MEGATRON_LM_COMMITS`
* PyTorch ``1fd7abc2f521e4429a29c3088e39ebaca20f4698`` (torch.distributed.pipelining ScheduleDualPipeV),
  deepseek-ai/DualPipe ``3da1bbea53606543d7f5f232338fc58096db30e3`` (2025-03-10) and deepseek-ai/DeepEP
  ``dd758caf451848bd150e1046af3d0a73e5fff38d`` (2026-07-14): costmodel/dualpipev.py and costmodel/moe_comm.py

What parplan's schedules cannot express is listed per profile (``not_expressible``): the framework
can run it, parplan cannot plan it, so no returned plan uses it.

Data and rules apart (as torchtitan's ``config/configs.py`` data and ``config/manager.py`` loading): the citation
table is :mod:`~parplan.frameworks.profile_citations`, the profiles per version range
:mod:`~parplan.frameworks.profile_data`; this module picks a profile by version, merges its memory conventions and
holds the rules, typed on the shared degree vocabulary (a :class:`~parplan.costmodel.degrees.Choice` or a
:class:`~parplan.costmodel.spec.Plan`, :mod:`parplan.costmodel.degrees`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional, Union

from parplan.costmodel.degrees import Choice
from parplan.costmodel.schedule import Schedule
from parplan.frameworks.profile_citations import CITATIONS, FRAMEWORKS, HISTORICAL, MEGATRON_LM_TAGS
from parplan.frameworks.profile_data import VERSIONED, TORCHTITAN_MAIN_2412, Profile

if TYPE_CHECKING:  # costmodel.spec imports this module (the Spec's framework conventions)
    from parplan.costmodel.spec import Plan, Spec

# what the rules read: a Choice, or a complete Plan (the same degree vocabulary, costmodel/degrees.py)
Degrees = Union[Choice, "Plan"]


class UnknownFramework(ValueError):
    pass


def _version_key(version: str) -> tuple[int, ...]:
    """'core_v0.13.0' / 'v0.2.2' / '0.13' -> (0, 13, 0); 'main' / 'latest' -> newest."""
    nums = re.findall(r"\d+", version)
    if not nums:
        if version.strip().lower() in ("main", "latest", "head", "nightly"):
            return (10**6,)
        raise UnknownFramework(f"framework.version {version!r}: expected a release number such as 0.13.0 or 'main'")
    return tuple(int(n) for n in nums[:3]) + (0,) * (3 - min(3, len(nums)))


# versions from this key on are not the profile's (Megatron-LM: flash attention, then CP; use megatron-core)
_UNTIL: dict[str, tuple[int, ...]] = {"megatron-lm": (2023, 1, 11), "llm-foundry": (0, 13, 0)}


def _megatron_lm_date(version: str) -> tuple[int, ...]:
    """'2021-08-10' -> (2021, 8, 10); a tag 'v2.6' -> its date (:data:`MEGATRON_LM_TAGS`)."""
    v = version.strip()
    v = MEGATRON_LM_TAGS.get(v, MEGATRON_LM_TAGS.get(f"v{v}", v))
    m = re.fullmatch(r"(\d{4})-(\d{2})-(\d{2})", v)
    if not m:
        raise UnknownFramework(f"framework.version {version!r} for megatron-lm: expected a date of Megatron-LM's main "
                               f"branch (YYYY-MM-DD) or a tag ({', '.join(MEGATRON_LM_TAGS)})")
    return tuple(int(g) for g in m.groups())


def _torchtitan_at_date(version: str) -> Profile:
    """torchtitan's main branch before its first release (v0.1.0, 2025-06-17) by date: read at 9dec370
    (2024-12-26) up to the merge that made FSDP resharding configurable (5940ddeb, 2025-02-06)."""
    key = tuple(int(x) for x in version.strip().split("-"))
    if key < (2024, 12, 26):
        raise UnknownFramework(f"framework torchtitan version {version} predates the oldest profile "
                               "(main 2024-12-26); its facts are not cited here")
    if key >= (2025, 2, 6):
        raise UnknownFramework(f"framework torchtitan version {version}: main from 2025-02-06 on is not profiled by "
                               "date; name a release (0.1.0 or later)")
    return TORCHTITAN_MAIN_2412


def profile(name: str, version: Optional[str] = None) -> Profile:
    """The profile of ``name`` at ``version`` (None: the newest snapshot read)."""
    if name not in VERSIONED:
        raise UnknownFramework(f"unknown framework {name!r}; known: {', '.join(FRAMEWORKS + HISTORICAL)}")
    variants = VERSIONED[name]
    if version is None:
        return variants[0][1]
    if name == "torchtitan" and re.fullmatch(r"\s*20\d\d-\d\d-\d\d\s*", version):
        return _torchtitan_at_date(version)
    key = _megatron_lm_date(version) if name == "megatron-lm" else _version_key(version)
    if name == "megatron-lm" and key >= _UNTIL[name]:
        raise UnknownFramework(f"framework megatron-lm version {version}: from {'-'.join(f'{x:02d}' for x in _UNTIL[name])} "
                               "(flash attention, then context parallelism) the megatron-lm profile no longer applies; "
                               "name megatron-core with its core version")
    if name in _UNTIL and key >= _UNTIL[name]:
        raise UnknownFramework(f"framework {name} version {version}: from {'.'.join(map(str, _UNTIL[name]))} "
                               f"(tensor parallelism) the {name} profile no longer applies; its facts are not cited here")
    for since, prof in variants:
        if since is None or key >= since:
            return prof
    oldest = variants[-1][0]
    shown = "-".join(f"{x:02d}" for x in oldest) if name == "megatron-lm" else ".".join(map(str, oldest))
    raise UnknownFramework(f"framework {name} version {version} predates the oldest profile "
                           f"({shown}); its facts are not cited here")


def spec_profile(spec: "Spec") -> Optional[Profile]:
    """The profile a spec names, or None (framework-neutral)."""
    fw = getattr(spec, "framework", None)
    if fw is None:
        return None
    if isinstance(fw, str):
        return profile(fw)
    return profile(fw.name, fw.version)


# ------------------------------------------------------------------------------------ memory conventions


def framework_assumptions(prof: Profile, tp_values: Optional[list[int]] = None) -> dict[str, Any]:
    """The profile's knob values. torchtitan's loss buffer depends on TP (``loss_parallel`` holds 16 B per
    logit, the plain fp32 loss 12 B; benchmarks/runs.py): 12 only when every allowed TP degree is 1."""
    out = dict(prof.assumptions)
    if prof.name == "torchtitan":
        out["logits_bytes_per_element"] = 12.0 if tp_values is not None and set(tp_values) == {1} else 16.0
    return out


def apply_framework_assumptions(data: Any) -> Any:
    """Raw spec input (a dict) -> the same with the profile's knobs filled where the user set none.

    Called by ``Spec``'s before-validator: user-set knobs win, the preset underlies both. Input of the wrong
    shape is returned unchanged for the field validators to report.
    """
    if not isinstance(data, dict) or data.get("framework") is None:
        return data
    fw = data["framework"]
    if isinstance(fw, dict):
        name, version = fw.get("name"), fw.get("version")
    else:
        name, version = getattr(fw, "name", fw), getattr(fw, "version", None)
    if not isinstance(name, str) or name not in VERSIONED or not (version is None or isinstance(version, str)):
        return data
    prof = profile(name, version)  # an unknown version raises ValueError: a spec error naming the framework
    section = data.get("assumptions")
    if section is None:
        section = {}
    elif hasattr(section, "model_dump"):
        section = section.model_dump(exclude_none=True)
    elif not isinstance(section, dict):
        return data
    merged = {**framework_assumptions(prof, _tp_values(data)), **{k: v for k, v in section.items() if v is not None}}
    return {**data, "assumptions": merged}


def _tp_values(data: dict) -> Optional[list[int]]:
    """The TP degrees a spec allows (its plan's, or its search pins), None when unrestricted or unreadable."""
    plan, search = data.get("plan"), data.get("search")
    get = lambda obj, key: obj.get(key) if isinstance(obj, dict) else getattr(obj, key, None)  # noqa: E731
    if plan is not None:
        tp = get(plan, "tp")
        values = [1 if tp is None else tp]
    elif search is not None and get(search, "tp") is not None:
        values = get(search, "tp")
    else:
        return None
    if not isinstance(values, (list, tuple)) or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return None
    return list(values)


# ----------------------------------------------------------------------------------------- legal space


@dataclass(frozen=True)
class SpaceLimits:
    """What ``SpaceOptions.from_spec`` intersects the search with."""

    schedules: tuple[str, ...]
    zero_stages: tuple[int, ...]  # without PP and with it (the union)
    zero_stages_with_pp: tuple[int, ...]
    recompute: tuple[str, ...]
    cp: Optional[tuple[int, ...]]  # None: unrestricted
    cp_comm_types: tuple[str, ...]  # with cp > 1
    etp_one: bool
    sequence_parallel: Optional[tuple[bool, ...]]
    stage_split: str  # the loosest search.stage_split the framework runs: per_stage, first_last or even
    uniform_recompute: bool
    recompute_all_layers: bool  # full recomputation checkpoints every layer of every stage (no per-stage count)
    chunk_layouts: bool  # per-(stage, chunk) layer counts: interleaved chunks may differ within a stage
    tp: Optional[tuple[int, ...]] = None  # None: unrestricted
    pp: Optional[tuple[int, ...]] = None


def space_limits(prof: Profile) -> SpaceLimits:
    """The profile's choice-level space (ZeRO stages: the union over PP, and the ones PP allows)."""
    return SpaceLimits(
        schedules=prof.schedules,
        zero_stages=tuple(sorted(set(prof.zero_stages) | set(prof.zero_stages_with_pp))),
        zero_stages_with_pp=prof.zero_stages_with_pp,
        recompute=prof.recompute,
        cp=None if prof.context_parallel else (1,),
        cp_comm_types=prof.cp_comm_types,
        etp_one=prof.expert_tensor_parallel == "one",
        sequence_parallel=None if prof.sequence_parallel else (False,),
        stage_split={"any": "per_stage"}.get(prof.stage_split, prof.stage_split),
        uniform_recompute=prof.full_recompute_counts == "chunk_block",
        recompute_all_layers=prof.full_recompute_counts in ("all", "all_or_every_nth"),
        chunk_layouts=prof.stage_split == "any",
        tp=None if prof.tensor_parallel else (1,),
        pp=None if prof.pipeline_parallel else (1,),
    )


def choice_rule_violations(prof: Profile, c: Degrees) -> list[str]:
    """Rules on degrees, schedule, ZeRO, recompute granularity and SP (a Choice or a Plan)."""
    out: list[str] = []
    who = prof.name
    if c.tp > 1 and not prof.tensor_parallel:
        out.append(f"{who} has no tensor parallelism (tp must be 1)")
    if c.pp > 1 and not prof.pipeline_parallel:
        out.append(f"{who} has no pipeline parallelism (pp must be 1)")
    if c.pp > 1 and c.schedule not in prof.schedules:
        out.append(f"{who} cannot run schedule {c.schedule} (it runs {', '.join(prof.schedules)})")
    if c.schedule == Schedule.INTERLEAVED and 1 < c.pp < prof.interleaved_min_pp:
        out.append(f"{who} {prof.versions} runs the interleaved schedule only with pp > {prof.interleaved_min_pp - 1}")
    if c.pp == 1 and c.schedule not in (Schedule.ONE_F_ONE_B, *prof.schedules):
        out.append(f"{who} cannot run schedule {c.schedule}")
    allowed = prof.zero_stages_with_pp if c.pp > 1 else prof.zero_stages
    if c.zero_stage not in allowed:
        where = "with pipeline parallelism" if c.pp > 1 else "without pipeline parallelism"
        out.append(f"{who} cannot run ZeRO-{c.zero_stage} {where} (it runs ZeRO {', '.join(map(str, allowed))})")
    if c.recompute not in prof.recompute:
        out.append(f"{who} has no recompute granularity {c.recompute!r}")
    if c.cp > 1 and not prof.context_parallel:
        out.append(f"{who} has no context parallelism (cp must be 1)")
    elif c.cp > 1 and c.cp_comm_type not in prof.cp_comm_types:
        out.append(f"{who} has no CP comm type {c.cp_comm_type} (it runs {', '.join(prof.cp_comm_types)})")
    if c.etp != 1:
        if prof.expert_tensor_parallel == "one":
            out.append(f"{who} has no expert tensor parallelism (etp must be 1)")
        elif prof.expert_tensor_parallel == "one_or_tp" and c.etp != c.tp:
            out.append(f"{who} supports etp 1 or etp = tp only (got etp {c.etp}, tp {c.tp})")
    if c.sequence_parallel and c.tp > 1 and not prof.sequence_parallel:
        out.append(f"{who} has no Megatron-style sequence parallelism")
    if prof.sequence_parallel_with_tp and c.tp > 1 and not c.sequence_parallel:
        out.append(f"{who} {prof.versions} runs tensor parallelism only with sequence parallelism")
    if prof.ddp_one_dimensional and c.zero_stage == 0 and c.dense_dp > 1 and (c.tp > 1 or c.pp > 1 or c.cp > 1):
        out.append(f"{who} {prof.versions} runs DDP (ZeRO-0) only without TP, PP and CP (FSDP otherwise)")
    if c.moe_fp8_dispatch and not prof.fp8_dispatch:
        out.append(f"{who} {prof.versions} has no FP8 expert dispatch")
    if c.moe_a2a_overlap and not prof.moe_a2a_overlap:
        out.append(f"{who} {prof.versions} has no EP all-to-all overlap (--overlap-moe-expert-parallel-comm)")
    if c.activation_offload_layers and not prof.activation_offload:
        out.append(f"{who} {prof.versions} has no activation CPU offload (activation_offload_layers must be 0)")
    if (prof.dualpipev_ep_no_recompute and c.schedule == Schedule.DUALPIPEV and c.pp > 1 and c.ep > 1
            and c.recompute != "none"):
        out.append(f"{who} {prof.versions} runs DualPipeV with expert parallelism only without activation "
                   "checkpointing (recompute none)")
    return out + memory_rule_violations(prof, c)


def memory_rule_violations(prof: Profile, c: Degrees) -> list[str]:
    """Rules on HSDP, the optimizer states' dtypes and optimizer offload (a Choice or a Plan)."""
    out: list[str] = []
    who = prof.name
    replicas, states, fraction = c.zero_replicas, c.optimizer_states, c.optimizer_offload_fraction
    if replicas > 1:
        if c.zero_stage not in prof.hsdp_zero_stages:
            runs = (f"with ZeRO {', '.join(map(str, prof.hsdp_zero_stages))} only" if prof.hsdp_zero_stages
                    else "not at all")
            out.append(f"{who} runs HSDP (zero_replicas {replicas}) {runs}, not with ZeRO-{c.zero_stage}")
        if prof.hsdp_replicas_divide_dp and c.dp % replicas:
            out.append(f"{who}: zero_replicas ({replicas}) must divide dp ({c.dp}) (data_parallel_replicate_degree "
                       "x data_parallel_shard_degree = dp)")
    if states is not None and not prof.optimizer_states:
        out.append(f"{who} has no precision-aware optimizer (optimizer_states must be unset)")
    if fraction > 0:
        rule = prof.optimizer_offload
        if rule == "none":
            out.append(f"{who} has no optimizer-only CPU offload (optimizer_offload_fraction must be 0)")
        elif rule == "needs_states" and states is None:
            out.append(f"{who}: optimizer CPU offload needs the precision-aware optimizer (set optimizer_states)")
        elif rule == "ratio_zero3":
            if c.zero_stage == 0:
                out.append(f"{who}: offload_optimizer needs ZeRO-1, 2 or 3 (got ZeRO-0)")
            elif fraction < 1 and c.zero_stage != 3:
                out.append(f"{who}: an offload_optimizer ratio below 1 ({fraction:g}) needs ZeRO-3 "
                           f"(got ZeRO-{c.zero_stage})")
    return out


def stage_rule_violations(prof: Profile, c: Degrees, stage_layers: list[int], recompute_layers: list[int],
                          pipeline_layout: Optional[list[list[int]]] = None) -> list[str]:
    """Rules on the stage split and the per-stage full-recompute counts."""
    out: list[str] = []
    who = prof.name
    p = len(stage_layers)
    if p > 1 and prof.stage_split == "even" and len(set(stage_layers)) > 1:
        out.append(f"{who} splits stages evenly (stage_layers {stage_layers} are not)")
    if p > 2 and prof.stage_split == "first_last" and len(set(stage_layers[1:-1])) > 1:
        out.append(f"{who} {prof.versions} sets only the first and last stage's layers; middle stages must be equal")
    if pipeline_layout is not None and prof.stage_split != "any":
        if any(len(set(chunks)) > 1 for chunks in pipeline_layout):
            out.append(f"{who} {prof.versions} has no per-chunk pipeline layout")
    if c.recompute == "full" and any(recompute_layers):
        chunks = pipeline_layout or [[n // max(1, c.vpp)] * max(1, c.vpp) for n in stage_layers]
        if not _recompute_counts_ok(prof.full_recompute_counts, stage_layers, recompute_layers, chunks):
            out.append(f"{who} cannot recompute {recompute_layers} of {stage_layers} layers per stage "
                       f"({_COUNT_RULES[prof.full_recompute_counts]})")
    return out


_COUNT_RULES = {
    "chunk_block": "--recompute-method block recomputes the first N layers of every model chunk, uniform all of them",
    "all": "full recompute checkpoints every layer",
    "all_or_every_nth": "full AC checkpoints every layer, per-layer SAC every N-th",
}


def _recompute_counts_ok(rule: str, layers: list[int], recomputed: list[int], chunks: list[list[int]]) -> bool:
    if list(recomputed) == list(layers):
        return True
    if rule == "chunk_block":
        top = max(max(ch) for ch in chunks)
        return any([sum(min(n, x) for x in ch) for ch in chunks] == list(recomputed) for n in range(1, top + 1))
    if rule == "all_or_every_nth":
        return any([l // n for l in layers] == list(recomputed) for n in range(2, max(layers) + 2))
    return False


def framework_violations(prof: Profile, plan: "Plan") -> list[str]:
    """Every rule of ``prof`` a complete plan breaks (empty: the framework can run it)."""
    return choice_rule_violations(prof, plan) + stage_rule_violations(
        prof, plan, list(plan.stage_layers), list(plan.recompute_layers), plan.pipeline_layout)


def runs_on(spec: "Spec", plan: "Plan") -> list[str]:
    """The frameworks (newest profiles; the spec's own at its version) that can run ``plan``; a historical
    framework (:data:`HISTORICAL`) only when the spec names it."""
    mine = spec_profile(spec)
    out = []
    names = FRAMEWORKS if mine is None or mine.name in FRAMEWORKS else FRAMEWORKS + (mine.name,)
    for name in names:
        prof = mine if mine is not None and mine.name == name else profile(name)
        if not framework_violations(prof, plan):
            out.append(name)
    return out


def describe(prof: Profile) -> list[tuple[str, str]]:
    """(fact, citation) rows for a profile: what ``solver-cli`` or a README can print."""
    return [(key, CITATIONS[key]) for key in prof.citations]


def search_conflicts(spec: "Spec") -> list[str]:
    """``search:`` pins that leave nothing the spec's framework can run (a spec error, naming the field)."""
    prof = spec_profile(spec)
    if prof is None:
        return []
    s, lim, out = spec.search, space_limits(prof), []
    for name, allowed in (("schedules", lim.schedules), ("zero_stages", lim.zero_stages), ("recompute", lim.recompute)):
        pinned = getattr(s, name)
        if pinned is not None and not set(pinned) & set(allowed):
            out.append(f"search.{name} {list(pinned)}: {prof.name} runs none of them "
                       f"(it runs {', '.join(map(str, allowed))})")
    for name, ok in (("moe_fp8_dispatch", prof.fp8_dispatch), ("moe_a2a_overlap", prof.moe_a2a_overlap)):
        pinned = getattr(s, name, None)
        if pinned is not None and not ok and False not in pinned:
            out.append(f"search.{name} {list(pinned)}: {prof.name} {prof.versions} has no such option (allow false)")
    if s.cp is not None and lim.cp is not None and 1 not in s.cp:
        out.append(f"search.cp {list(s.cp)}: {prof.name} has no context parallelism (cp must be 1)")
    kinds = list(s.cp_comm_types or ["p2p"])
    if lim.cp is None and s.cp is not None and 1 not in s.cp and not set(kinds) & set(lim.cp_comm_types):
        out.append(f"search.cp {list(s.cp)} with search.cp_comm_types {kinds}: {prof.name} runs none of these CP "
                   f"comm types (it runs {', '.join(lim.cp_comm_types)}; set search.cp_comm_types)")
    for name, what in (("tp", "tensor"), ("pp", "pipeline")):
        pinned = getattr(s, name)
        if pinned is not None and getattr(lim, name) is not None and 1 not in pinned:
            out.append(f"search.{name} {list(pinned)}: {prof.name} has no {what} parallelism ({name} must be 1)")
    if s.zero_replicas is not None and 1 not in s.zero_replicas and not prof.hsdp_zero_stages:
        out.append(f"search.zero_replicas {list(s.zero_replicas)}: {prof.name} {prof.versions} has no HSDP "
                   "(zero_replicas must be 1)")
    if s.optimizer_states is not None and not prof.optimizer_states:
        out.append(f"search.optimizer_states {list(s.optimizer_states)}: {prof.name} {prof.versions} has no "
                   "precision-aware optimizer (omit the key: the assumptions' optimizer_bytes)")
    counts = s.activation_offload_layers
    if counts is not None and 0 not in counts and not prof.activation_offload:
        out.append(f"search.activation_offload_layers {list(counts)}: {prof.name} {prof.versions} has no activation "
                   "CPU offload (allow 0)")
    fractions = s.optimizer_offload_fractions
    if fractions is not None and 0 not in fractions and prof.optimizer_offload == "none":
        out.append(f"search.optimizer_offload_fractions {list(fractions)}: {prof.name} {prof.versions} has no "
                   "optimizer-only CPU offload (the fraction must be 0)")
    if (fractions is not None and 0 not in fractions and prof.optimizer_offload == "needs_states"
            and s.optimizer_states is None):
        out.append(f"search.optimizer_offload_fractions {list(fractions)}: {prof.name}'s optimizer CPU offload "
                   "needs the precision-aware optimizer; list search.optimizer_states too")
    return out
