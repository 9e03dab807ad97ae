"""The ``Replan`` RPC's request and response (issue 43): the request's fields to library/replan.py's arguments,
its result to the proto through the generic walk (wire/convert.py). Errors name the request's fields
(``lost_nodes[0]``, ``added_nodes``, ``horizon_s``, ``reshard.restart_s``): INVALID_ARGUMENT."""

from __future__ import annotations

from typing import Any

from parplan.library.replan import replan, replan_result_to_dict
from parplan.server.requests import read_spec
from parplan.v1 import planner_pb2 as pb
from parplan.wire import convert


def replan_arguments(request: pb.ReplanRequest, hf_config_dir) -> dict[str, Any]:
    """The library's arguments of one request (the spec parsed, the plan and the assumptions mapped)."""
    plan = convert.plan_spec_dict_from_message(request.plan) if request.HasField("plan") else None
    _, spec = read_spec(request, plan, hf_config_dir=hf_config_dir)
    reshard = convert.message_to_dict(request.reshard, omit_unset=True, path="reshard")
    return {"spec": spec, "lost_nodes": list(request.lost_nodes), "added_nodes": request.added_nodes,
            "horizon_s": request.horizon_s, "reshard": reshard, "export": request.export_text or None,
            "export_target": request.export_target or None}


def run_replan(arguments: dict[str, Any], params: dict[str, Any], cancel) -> tuple[dict[str, Any], pb.ReplanResponse]:
    """Solve and map: (the result's dict, the response without its admission)."""
    result = replan(arguments.pop("spec"), method=params["method"], time_limit_s=params["time_limit_s"],
                    workers=params["workers"], seed=params["seed"], deterministic=params["deterministic"],
                    cancel=cancel, **arguments)
    data = replan_result_to_dict(result)
    return data, convert.fill_message(pb.ReplanResponse(), {**data, "parameters": params})
