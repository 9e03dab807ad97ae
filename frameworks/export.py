"""Write a plan down for a training framework: ``export_plan(spec, plan, target) -> Export``.

Every exporter is a pure function of the canonical :class:`~parplan.costmodel.spec.spec.Spec` and
:class:`~parplan.costmodel.spec.spec.Plan` (no I/O, no solver): it returns the file text, the file name a
user would save it under, and the list of warnings, one per plan feature the target cannot express
as planned (what was written instead is part of the warning). Nothing is dropped silently.

Targets (one module each; their docstrings cite the source of every flag family):

* ``megatron``   -- Megatron-LM ``pretrain_gpt.py`` arguments as bash arrays (frameworks/export_megatron.py)
* ``bridge``     -- Megatron-Bridge ``ConfigContainer`` overrides (frameworks/export_bridge.py)
* ``torchtitan`` -- torchtitan v0.2.2 job TOML (frameworks/export_torchtitan.py)
* ``deepspeed``  -- DeepSpeed 0.19.6 config JSON (frameworks/export_deepspeed.py)

A plan on several ``cluster.pools`` (``plan.stage_pools``) is exported to Megatron-LM and Megatron-Bridge with
its host order (frameworks/pool_placement.py); the other targets refuse it naming ``plan.stage_pools``.

The parsers that read these files back into a plan live in frameworks/import_plan.py.
"""

from __future__ import annotations

from typing import Callable

from parplan.costmodel.spec.spec import Plan, Spec
from parplan.frameworks import export_bridge, export_deepspeed, export_megatron, export_torchtitan
from parplan.frameworks.export_common import (Export, ExportError, check_plan_matches_spec,
                                              check_pool_plan_matches_spec)
from parplan.frameworks.pool_placement import refuse_unplaced_target, several_pools

EXPORTERS: dict[str, Callable[[Spec, Plan], Export]] = {
    "megatron": export_megatron.export,
    "bridge": export_bridge.export,
    "torchtitan": export_torchtitan.export,
    "deepspeed": export_deepspeed.export,
}
TARGETS: tuple[str, ...] = tuple(EXPORTERS)
ALIASES = {"megatron-core": "megatron", "megatron-lm": "megatron", "megatron-bridge": "bridge"}  # profile names
# the framework (profile name) and version each target writes for: the rules of that profile
# (costmodel/spec/framework_rules.py) decide what the exporter refuses or changes, as they decide runs_on
TARGET_FRAMEWORKS: dict[str, tuple[str, str]] = {
    "megatron": ("megatron-core", export_megatron.MEGATRON_VERSION),
    "bridge": ("megatron-bridge", export_bridge.BRIDGE_VERSION),
    "torchtitan": ("torchtitan", export_torchtitan.TORCHTITAN_VERSION),
    "deepspeed": ("deepspeed", export_deepspeed.DEEPSPEED_VERSION),
}


def export_plan(spec: Spec, plan: Plan, target: str) -> Export:
    """The plan written for ``target`` (one of :data:`TARGETS`), with warnings for what it cannot express."""
    target = ALIASES.get(target, target)
    if target not in EXPORTERS:
        raise ExportError(f"export target {target!r} is unknown; known: {', '.join(TARGETS)}")
    if several_pools(spec):  # issue 21: each stage on its pool (frameworks/pool_placement.py)
        refuse_unplaced_target(target)
        check_pool_plan_matches_spec(spec, plan)
        return EXPORTERS[target](spec, plan)
    if plan.stage_pools is not None and len(set(plan.stage_pools)) > 1:
        raise ExportError("plan.stage_pools: names several pools but the spec has one cluster.gpu")
    check_plan_matches_spec(spec, plan)
    return EXPORTERS[target](spec, plan)


__all__ = ["Export", "ExportError", "TARGETS", "EXPORTERS", "ALIASES", "TARGET_FRAMEWORKS", "export_plan"]
