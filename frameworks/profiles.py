"""Target-framework profiles: what each training framework can run, and what it allocates.

A spec's ``framework:`` (``megatron-core | megatron-bridge | torchtitan | deepspeed``, or
``{name: ..., version: ...}``) selects one :class:`Profile`. A profile is

* a **legal space**, in parplan's own terms: the pipeline schedules, ZeRO stages (with and without
  pipeline parallelism), recompute granularities and per-stage recompute counts, CP / EP / ETP /
  sequence-parallel rules and stage splits the framework can launch. :func:`space_limits` is what
  ``SpaceOptions.from_spec`` intersects the search with; :func:`framework_violations` is the rule
  ``costmodel.evaluation.legality`` reports and ``runs_on`` applies to every returned plan;
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
  ``dd758caf451848bd150e1046af3d0a73e5fff38d`` (2026-07-14): costmodel/schedules/dualpipev.py and costmodel/moe/moe_comm.py

What parplan's schedules cannot express is listed per profile (``not_expressible``): the framework
can run it, parplan cannot plan it, so no returned plan uses it.

Data, loading and rules apart (as torchtitan's ``config/configs.py`` data and ``config/manager.py`` loading): the
citation table is :mod:`~parplan.frameworks.profile_citations`, the profiles per version range
:mod:`~parplan.frameworks.profile_data`; this module picks a profile by version and merges its memory conventions;
:mod:`~parplan.frameworks.loader` binds the profiles to a validated Spec (the cost model reads only that); the rules, typed on the shared degree vocabulary (a
:class:`~parplan.costmodel.spec.degrees.Choice` or a :class:`~parplan.costmodel.spec.spec.Plan`), are the cost model's
(:mod:`parplan.costmodel.spec.framework_rules`, re-exported here).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Optional

from parplan.costmodel.spec.framework_binding import runs_on  # noqa: F401  (the bound spec's, re-exported)
from parplan.costmodel.spec.framework_rules import (Profile, SpaceLimits, choice_rule_violations,  # noqa: F401
                                               framework_violations, memory_rule_violations, space_limits,
                                               stage_rule_violations)
from parplan.frameworks.profile_citations import CITATIONS, FRAMEWORKS, HISTORICAL, MEGATRON_LM_TAGS
from parplan.frameworks.profile_data import EXPORT_VERSIONS, TORCHTITAN_MAIN_2412, VERSIONED

if TYPE_CHECKING:
    from parplan.costmodel.spec.spec import Spec


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


def export_profile(name: str) -> Profile:
    """The profile of ``name`` at the version its export writes for (:data:`~parplan.frameworks.profile_data.
    EXPORT_VERSIONS`): the rules its exporter applies, and ``runs_on``'s."""
    if name not in EXPORT_VERSIONS:
        raise UnknownFramework(f"framework {name!r} has no export; exported: {', '.join(EXPORT_VERSIONS)}")
    return profile(name, EXPORT_VERSIONS[name])


def spec_profile(spec: "Spec") -> Optional[Profile]:
    """The profile a spec names, or None (framework-neutral: ``framework: any``)."""
    return framework_profile(getattr(spec, "framework", None))


def framework_profile(fw: Any) -> Optional[Profile]:
    """The profile of a spec's ``framework`` value (a name, ``any`` or ``{name, version}``), or None under ``any``."""
    if fw is None or fw == "any":
        return None
    if isinstance(fw, str):
        return profile(fw, spec_version(fw, None))
    return profile(fw.name, spec_version(fw.name, fw.version))


def spec_version(name: str, version: Optional[str]) -> Optional[str]:
    """The version a spec's framework means: the one named, or, named without one, the version its export writes for
    (:data:`~parplan.frameworks.profile_data.EXPORT_VERSIONS`), so the framework-restricted search, ``runs_on`` and
    the export apply one profile; a framework with no export (a past release), its newest profile."""
    return version if version is not None else EXPORT_VERSIONS.get(name)


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
    prof = profile(name, spec_version(name, version))  # an unknown version raises ValueError: a spec error naming
    #                                                      the framework
    section = data.get("assumptions")
    if section is None:
        section = {}
    elif hasattr(section, "model_dump"):
        section = section.model_dump(exclude_none=True)
    elif not isinstance(section, dict):
        return data
    merged = {**framework_assumptions(prof, tp_values(data)), **{k: v for k, v in section.items() if v is not None}}
    return {**data, "assumptions": merged}


def user_overrides(spec: Any) -> list[str]:
    """The knobs a validated Spec's ``assumptions`` set other than its framework profile's conventions: what the
    user overrode (a knob set to the profile's own value changes nothing and is not counted)."""
    prof = spec.bound_framework.profile
    conventions = {} if prof is None else framework_assumptions(prof, tp_values(spec.model_dump()))
    return [knob for knob, value in spec.assumptions.model_dump(exclude={"preset"}).items()
            if value is not None and (knob not in conventions or conventions[knob] != value)]


def tp_values(data: dict) -> Optional[list[int]]:
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


def describe(prof: Profile) -> list[tuple[str, str]]:
    """(fact, citation) rows for a profile: what ``solver-cli`` or a README can print."""
    return [(key, CITATIONS[key]) for key in prof.citations]
