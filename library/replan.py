"""Replan (issue 43), the library surface the CLI and the server share: a running job's spec and plan (the
spec's ``plan:``, a plan dict, or a framework export read by frameworks/import_plan.py), the change of its
cluster (nodes lost by index, nodes added), the expected time to the next change; out the best plan under the
replan objective (solver/replan.py, costmodel/memory/reshard.py, docs/replan.md).

Bad input is an :class:`~parplan.costmodel.errors.ArgumentError` naming the field: a lost node the plan does not
use (``lost_nodes[i]``), a cluster that grows past the spec's limits (``added_nodes``), a horizon that is not a
positive number of seconds (``horizon_s``), an assumption out of range (``reshard.<name>``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Optional, Sequence, Union

from parplan.library.spec_io import as_spec

if TYPE_CHECKING:  # pragma: no cover
    from parplan.costmodel.memory.reshard import ReshardAssumptions
    from parplan.solver.replan import ReplanResult


def _check_change(spec, lost_nodes: Sequence[int], added_nodes: int) -> int:
    """The new GPU count, or an ArgumentError naming the field."""
    from parplan.costmodel.errors import ArgumentError
    from parplan.costmodel.spec.spec_base import MAX_NUM_GPUS

    c = spec.cluster
    if c.pools is not None and len(c.pools) > 1:
        raise ArgumentError("cluster.pools", "replan takes a cluster of one pool", len(c.pools))
    gpn = c.gpus_per_node
    nodes = max(1, c.num_gpus // gpn)
    seen = set()
    for i, node in enumerate(lost_nodes):
        if isinstance(node, bool) or not isinstance(node, int) or not 0 <= node < nodes:
            raise ArgumentError(f"lost_nodes[{i}]", f"the plan runs on nodes 0..{nodes - 1} "
                                f"({c.num_gpus} GPUs, {gpn} per node); this node is not one of them", node)
        if node in seen:
            raise ArgumentError(f"lost_nodes[{i}]", "names a node already lost", node)
        seen.add(node)
    if isinstance(added_nodes, bool) or not isinstance(added_nodes, int) or added_nodes < 0:
        raise ArgumentError("added_nodes", "must be a whole number of nodes ≥ 0", added_nodes)
    n = c.num_gpus - len(seen) * min(gpn, c.num_gpus) + added_nodes * gpn
    if n <= 0:
        raise ArgumentError("lost_nodes", "leaves no GPU", list(lost_nodes))
    limit = spec.search.max_num_gpus or MAX_NUM_GPUS
    if n > limit:
        field = "search.max_num_gpus" if spec.search.max_num_gpus else "cluster.num_gpus"
        raise ArgumentError("added_nodes", f"grows the cluster to {n} GPUs, past {field} = {limit}", added_nodes)
    if n > gpn and n % gpn:
        raise ArgumentError("added_nodes", f"{n} GPUs are not whole nodes of {gpn}", added_nodes)
    if not seen and not added_nodes:
        raise ArgumentError("lost_nodes", "nothing changed: give lost_nodes or added_nodes", [])
    return n


def replan(spec: Any, *, lost_nodes: Sequence[int] = (), added_nodes: int = 0, horizon_s: float,
           plan: Any = None, export: Optional[str] = None, export_target: Optional[str] = None,
           reshard: Union["ReshardAssumptions", dict, None] = None, method: str = "cpsat",
           **controls: Any) -> "ReplanResult":
    """The replan of ``spec``'s running plan after the cluster change. ``plan``: a Plan/PlanSpec/dict (default the
    spec's ``plan:``); ``export`` (with ``export_target``: megatron | deepspeed | torchtitan): a framework file
    instead. ``controls``: SolverControls fields (``time_limit_s``, ``workers``, ...)."""
    from pydantic import ValidationError

    from parplan.costmodel.errors import ArgumentError, ParplanError
    from parplan.costmodel.memory.reshard import ReshardAssumptions
    from parplan.frameworks.import_plan import spec_from_export
    from parplan.library.api import as_plan, controls_of_arguments
    from parplan.library.evaluation import evaluate_spec
    from parplan.library.spec_io import validation_error_message
    from parplan.solver.arguments import check_optimize_arguments
    from parplan.solver.cpsat import SolverControls
    from parplan.solver.replan import replan as solver_replan

    spec = as_spec(spec)
    if export is not None:
        if plan is not None:
            raise ArgumentError("export", "give either plan or export, not both", export_target)
        spec = spec_from_export(export, export_target, spec)
    from parplan.solver.warm_cache import WARM

    # the running plan runs: judged by the ledger's point, not the memory band's margin for plans not yet launched
    ran = spec.model_copy(update={"search": spec.search.model_copy(update={"memory_band": False})})
    old = evaluate_spec(ran, as_plan(plan), **WARM.evaluation_inputs(ran))  # PlanError naming plan.<field>
    if not old.feasible:
        raise ArgumentError("plan", "the current plan does not run on its cluster: " + "; ".join(old.violations),
                            None)
    if isinstance(horizon_s, bool) or not isinstance(horizon_s, (int, float)) or not (
            math.isfinite(horizon_s) and horizon_s > 0):
        raise ArgumentError("horizon_s", "must be a positive, finite number of seconds", horizon_s)
    if not isinstance(reshard, ReshardAssumptions):
        try:
            reshard = ReshardAssumptions.model_validate(reshard or {})
        except ValidationError as err:
            raise ParplanError(validation_error_message(err, prefix=("reshard",))) from None
    n = _check_change(spec, lost_nodes, added_nodes)
    old_n = spec.cluster.num_gpus
    new = spec.at_gpus(n).model_copy(update={"plan": None})
    kwargs = controls_of_arguments(dict(controls))
    c = kwargs.get("controls") or SolverControls()
    check_optimize_arguments(top_k=1, method=method, pareto=None, time_limit_s=c.time_limit_s, workers=c.workers,
                             seed=c.seed, deterministic=c.deterministic, memory_budget_mib=c.memory_budget_mib)
    lost = min(old_n, len(set(lost_nodes)) * spec.cluster.gpus_per_node)
    return solver_replan(new, old.plan, lost_gpus=lost, added_gpus=max(0, n - (old_n - lost)),
                         horizon_s=float(horizon_s), assumptions=reshard, method=method, controls=c)


def replan_result_to_dict(result: "ReplanResult") -> dict[str, Any]:
    """``solver-cli replan --format json`` and the ``Replan`` RPC's response: each point's evaluation as a CONTRACT
    plan entry (library/contract.py), ``stats`` as ``solver``, unset fields and no-progress (infinite) effective
    step times left out, ``timing`` only outside deterministic mode."""
    from parplan.library.contract import plan_entry

    def point(p) -> Optional[dict[str, Any]]:
        if p is None:
            return None
        d = p.model_dump(mode="python", exclude={"evaluation"})
        d = {k: v for k, v in d.items() if not (isinstance(v, float) and not math.isfinite(v))}
        return {"evaluation": plan_entry(p.evaluation), **d}

    out = {"status": result.status, "horizon_s": result.horizon_s, "best": point(result.best),
           "fastest": point(result.fastest), "keep": point(result.keep), "keep_reason": result.keep_reason,
           "frontier": [point(p) for p in result.frontier], "candidates": result.candidates,
           "solver": result.stats.model_dump(mode="json"), "assumptions": result.assumptions.model_dump(mode="json"),
           "timing": result.timing.model_dump(mode="json", exclude_none=True) if result.timing else None}
    return {k: v for k, v in out.items() if v is not None}


__all__ = ["replan", "replan_result_to_dict"]
