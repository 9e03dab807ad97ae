"""Evaluations and planner results as CONTRACT objects: plain dicts, the same for the CLI's JSON and the service.

Pure functions (no rendering, no solver), shared by ``solver-cli evaluate|optimize --format json``, the gRPC
service (:mod:`parplan.wire.convert` maps these dicts onto the proto) and the gRPC client (which maps them
back with :func:`plan_result_from_dict`):

* :func:`plan_entry` -> one element of ``plans``: ``{"plan", "metrics", "stages", "violations"}``;
* :func:`evaluation_to_dict` -> the whole CONTRACT object for one evaluated plan;
* :func:`result_to_dict` -> the CONTRACT object for any status and list of evaluations;
* :func:`plan_result_to_dict` / :func:`plan_result_from_dict` -> ``optimize`` results, both ways;
* :func:`framework_best_to_dict` -> one element of ``per_framework`` (the best plan under another framework);
* :func:`to_json` -> strict JSON text (no NaN/Infinity).

Every answer carries ``parplan_version``; every plan its ``num_gpus`` (derived; :func:`plan_fields` and
:func:`entry_fields` drop what is derived when a dict goes back into the library's types).

Keys beyond the spec reference (docs/spec.md): ``plans[i].stages`` (the per-stage ledger: StageReport
fields), ``plans[i].violations`` (rules the plan breaks; empty when feasible), and in ``metrics`` the extra
fields ``hfu``, ``model_tflops_per_gpu``, ``usable_memory_gib`` and ``fits``. Where the answer knows the calibration
its predictions rest on, every entry has its ``band`` and the answer its ``band_source``
(costmodel/evaluation/prediction_band.py).
"""

from __future__ import annotations

import json
from typing import Any, Iterable, Optional

from parplan import __version__
from parplan.costmodel.evaluation.ledger import BREAKDOWN_KEYS, Evaluation
from parplan.costmodel.evaluation.prediction_band import BandSource, PlanBand, plan_bands
from parplan.costmodel.spec.plan_fields import ON_PLAN, plan_defaults_hidden
from parplan.costmodel.spec.spec import Plan
from parplan.solver.result import PlanResult

# CONTRACT key order: the plan's fields as declared (costmodel/spec/plan_fields.py), the derived num_gpus after dp;
# the fields declared not shown at their default follow, each only where a plan sets it
_SHOWN = [f.name for f in ON_PLAN if f.shown_at_default]
PLAN_KEYS = (*_SHOWN[:_SHOWN.index("dp") + 1], "num_gpus", *_SHOWN[_SHOWN.index("dp") + 1:])
DERIVED_PLAN_KEYS = ("num_gpus",)  # answers only: tp·cp·pp·dp, the GPUs the plan uses (the GPU frontier's axis)
METRIC_KEYS = ("step_time_s", "mfu", "tokens_per_s", "peak_memory_gib", "stage_memory_gib", "breakdown_s")


# ------------------------------------------------------------------------------------------- dicts


def plan_to_dict(plan: Plan) -> dict[str, Any]:
    """The canonical plan in CONTRACT key order (with the derived ``num_gpus``)."""
    data = {**plan.model_dump(mode="json"), "num_gpus": plan.num_gpus}
    out = {key: data[key] for key in PLAN_KEYS}
    for key, default in plan_defaults_hidden().items():  # later choices (layout, CP comm, HSDP, MoE, offload,
        if data[key] != default:  #                         pools): only where a plan makes them
            out[key] = data[key]
    return out


def metrics_to_dict(evaluation: Evaluation) -> dict[str, Any]:
    """CONTRACT metrics first (breakdown in BREAKDOWN_KEYS order), then the extra metric fields."""
    data = evaluation.metrics.model_dump(mode="json")
    out = {key: data[key] for key in METRIC_KEYS}
    out["breakdown_s"] = {key: data["breakdown_s"][key] for key in BREAKDOWN_KEYS if key in data["breakdown_s"]}
    out.update({key: value for key, value in data.items() if key not in out})
    if out.get("step_order_step_s") is None:  # DualPipe / DualPipeV only, as the proto's optional field
        out.pop("step_order_step_s", None)
    if "memory_outside_ledger_gib" in out:  # a map in key order (as protobuf's)
        out["memory_outside_ledger_gib"] = dict(sorted(out["memory_outside_ledger_gib"].items()))
    return out


def _stages(evaluation: Evaluation, headroom: bool) -> list[dict[str, Any]]:
    stages = [stage.model_dump(mode="json") for stage in evaluation.stages]
    if headroom:  # GiB left below the usable memory (after the margin) on each stage
        usable = evaluation.metrics.usable_memory_gib
        for stage, ledger in zip(stages, evaluation.stages):
            stage["headroom_gib"] = usable - ledger.memory_gib
    return stages


def plan_entry(evaluation: Evaluation, headroom: bool = False, band: Optional[PlanBand] = None) -> dict[str, Any]:
    """One element of CONTRACT ``plans`` (``headroom``: each stage also gets ``headroom_gib``; ``band``: the plan's
    prediction band, costmodel/evaluation/prediction_band.py)."""
    out = {
        "plan": plan_to_dict(evaluation.plan),
        "metrics": metrics_to_dict(evaluation),
        "stages": _stages(evaluation, headroom),
        "violations": list(evaluation.violations),
        "runs_on": list(evaluation.runs_on),
    }
    if band is not None:
        out["band"] = band.model_dump(mode="json")
    return out


def _bands(evaluations: list[Evaluation], pareto: list[Evaluation],
           source: Optional[BandSource]) -> tuple[list[Optional[PlanBand]], list[Optional[PlanBand]]]:
    """The plans' bands (ties marked against the first plan, the optimum) and the frontier's (against the same; a
    frontier comes only with plans: solver/planner.py)."""
    if source is None:
        return [None] * len(evaluations), [None] * len(pareto)
    bands = plan_bands(evaluations, source)
    return bands, plan_bands(pareto, source, best=bands[0] if bands else None)


def result_to_dict(status: str, evaluations: Iterable[Evaluation], pareto: Iterable[Evaluation] = (),
                   headroom: bool = False, source: Optional[BandSource] = None) -> dict[str, Any]:
    """A CONTRACT object: ``{"status", "plans", "pareto"}`` (``pareto`` entries have the ``plans`` shape); with a band
    ``source`` every entry carries its ``band`` and the object its ``band_source``."""
    evaluations, pareto = list(evaluations), list(pareto)
    bands, frontier = _bands(evaluations, pareto, source)
    out = {"status": status, "plans": [plan_entry(e, headroom, b) for e, b in zip(evaluations, bands)],
           "pareto": [plan_entry(e, headroom, b) for e, b in zip(pareto, frontier)]}
    if source is not None:
        out["band_source"] = source.model_dump(mode="json")
    return out


def evaluation_status(evaluation: Evaluation) -> str:
    return "FEASIBLE" if evaluation.feasible else "INFEASIBLE"


def evaluation_to_dict(evaluation: Evaluation, headroom: bool = False, completed: Optional[list[str]] = None,
                       source: Optional[BandSource] = None) -> dict[str, Any]:
    """``solver-cli evaluate --format json``: one plan, status FEASIBLE or INFEASIBLE (it has violations);
    ``evaluate --complete`` adds ``completed``, a memory margin each stage's ``headroom_gib``, a band ``source``
    (prediction_band.band_source of the spec) the plan's ``band`` and the answer's ``band_source``."""
    out = result_to_dict(evaluation_status(evaluation), [evaluation], headroom=headroom, source=source)
    if completed is not None:
        out["completed"] = list(completed)
    out["parplan_version"] = __version__
    return out


def to_json(obj: Any, indent: Optional[int] = 2) -> str:
    """Strict JSON (raises ValueError on NaN/Infinity rather than writing invalid JSON)."""
    return json.dumps(obj, indent=indent, allow_nan=False, ensure_ascii=False)


def plan_result_to_dict(result: PlanResult) -> dict[str, Any]:
    """``solver-cli optimize --format json``: the CONTRACT object plus objective, explanation, solver stats and,
    unless the run was deterministic, ``timing`` (wall-clock seconds, see ``solver.result.Timing``)."""
    out = result_to_dict(result.status, result.plans, result.pareto, headroom=result.memory_margin_gib is not None,
                         source=result.band_source)
    if result.completed is not None:  # a partial plan: the fields the planner chose
        out["completed"] = list(result.completed)
    if result.memory_margin_gib is not None:
        out["memory_margin_gib"] = result.memory_margin_gib
    if result.placement is not None:  # several cluster.pools: why each stage sits on its pool
        out["placement"] = list(result.placement)
    out["objective"] = result.objective
    out["pareto_axis"] = result.pareto_axis
    out["explanation"] = None
    if result.explanation is not None:
        ex = result.explanation.model_dump(mode="json", exclude={"relaxations"})
        ex["rejected_choices"] = dict(sorted(ex["rejected_choices"].items()))  # maps in key order (as protobuf's)
        ex["relaxations"] = [{"requirement": r.requirement, "change": r.change, "patch": dict(sorted(r.patch.items())),
                              "plan": plan_entry(r.plan) if r.plan is not None else None}
                             for r in result.explanation.relaxations]
        out["explanation"] = ex
    out["solver"] = result.stats.model_dump(mode="json")
    if result.timing is not None:  # absent in deterministic mode: the output stays byte-identical
        out["timing"] = result.timing.model_dump(mode="json", exclude_none=True)
    out["parplan_version"] = __version__
    return out


def plan_fields(plan: dict[str, Any]) -> dict[str, Any]:
    """A CONTRACT plan dict as plan input: without the derived ``num_gpus`` (the degrees and the cluster give it)."""
    return {k: v for k, v in plan.items() if k not in DERIVED_PLAN_KEYS}


def entry_fields(entry: dict[str, Any]) -> dict[str, Any]:
    """A CONTRACT plan entry (or Evaluation dict) as the library's Evaluation fields: without what is derived (the
    plan's ``num_gpus``, a stage's ``headroom_gib``: usable minus its total; the ``band``: the answer's band source
    and the metrics give it)."""
    out = {**{k: v for k, v in entry.items() if k != "band"}, "plan": plan_fields(entry["plan"])}
    if "stages" in entry:
        out["stages"] = [{k: v for k, v in st.items() if k != "headroom_gib"} for st in entry["stages"]]
    return out


def plan_result_from_dict(data: dict[str, Any]) -> PlanResult:
    """The inverse of :func:`plan_result_to_dict` (the service's answer back into the library's type)."""
    fields = {key: value for key, value in data.items() if key not in ("solver", "parplan_version")}
    for key in ("plans", "pareto"):
        fields[key] = [entry_fields(e) for e in fields.get(key, [])]
    if fields.get("explanation"):
        fields["explanation"] = {**fields["explanation"], "relaxations": [
            {**r, "plan": entry_fields(r["plan"]) if r.get("plan") else r.get("plan")}
            for r in fields["explanation"]["relaxations"]]}
    return PlanResult.model_validate({**fields, "stats": data["solver"]})


def framework_best_to_dict(entry) -> dict[str, Any]:
    """One element of ``per_framework`` in ``optimize --format json``: a
    :class:`parplan.frameworks.compare.FrameworkBest`."""
    out: dict[str, Any] = {"framework": entry.framework, "status": entry.status, "vs_best": entry.vs_best}
    if entry.best is not None:
        m = entry.best.metrics
        out.update(plan=plan_to_dict(entry.best.plan), step_time_s=m.step_time_s, mfu=m.mfu,
                   peak_memory_gib=m.peak_memory_gib, runs_on=list(entry.best.runs_on))
    if entry.reason is not None:
        out["reason"] = entry.reason
    if entry.differs:
        out["differs"] = list(entry.differs)
    return out


__all__ = ["PLAN_KEYS", "DERIVED_PLAN_KEYS", "METRIC_KEYS", "plan_to_dict", "metrics_to_dict", "plan_entry", "result_to_dict",
           "evaluation_status", "evaluation_to_dict", "to_json", "plan_result_to_dict", "plan_result_from_dict",
           "plan_fields", "entry_fields",
           "framework_best_to_dict"]
