"""The proto edge: parplan.v1 messages <-> the spec dict and the CONTRACT dicts of :mod:`parplan.library.contract`.

The proto's field names are the spec's YAML keys and the CLI's JSON keys, so one generic walk over the message
descriptor maps both ways; the only special shapes are

* enums: ``SCHEDULE_ZB_H1`` <-> ``"zb-h1"`` (the value, upper-cased, ``-`` as ``_``, after the enum's prefix),
  with ``*_UNSPECIFIED`` meaning "not given" (the spec's default);
* :class:`ScalarValue`: ``{"integer_value": 2}`` <-> ``2`` (knob overrides and relaxation patches);
* the spec's unions, a ``oneof`` each: :class:`FrameworkChoice` (``framework: torchtitan`` or ``{name,
  version}``) and :class:`PipelineLayout` (a Megatron layout string, lists of layer letters or of decoder-layer
  counts); the lists of lists are :class:`PipelineLayoutLayers` and :class:`PipelineLayoutDecoderLayers`
  (``[[2, 3], [3, 2]]`` <-> ``{stages: [{chunk_layers: [2, 3]}, ...]}``);
* ``assumptions``: the YAML section ``{preset, <knob>: value, ...}`` is ``{preset, overrides: {knob: value}}``;
* ``contract_json`` (a reply's CLI JSON text, when asked) is the reply's own CONTRACT dict, not a key of it;
* keys the CONTRACT dicts leave out when they are None (``plan.pipeline_layout``, ``timing`` and the optional
  ``Timing`` phases) stay out on the way back (:data:`OMIT_WHEN_UNSET`), and deprecated fields (kept for
  released clients, e.g. ``SolveStats.wall_time_s``) are left out of the dicts.

A dict key with no proto field raises :class:`KeyError` (the library grew a field the proto lacks: a bug that
``tests/wire/test_convert.py`` catches by comparing the models with the messages).
"""

from __future__ import annotations

import re
import typing
from typing import Any, Optional

from google.protobuf.descriptor import Descriptor, EnumDescriptor, FieldDescriptor
from google.protobuf.message import Message

from parplan.costmodel.spec.assumptions import PRESETS
from parplan.costmodel.spec.plan_fields import plan_defaults_hidden
from parplan.costmodel.errors import ParplanError
from parplan.library.contract import to_json
from parplan.costmodel.schedules.schedule import Schedule
from parplan.costmodel.spec.spec import (CP_COMM_TYPES, RECOMPUTE_GRANULARITIES, FrameworkName,
                                    MoESpec, Objective, Precision, SearchSpec)
from parplan.solver.result import Status
from parplan.v1 import planner_pb2 as pb

METHODS = ("cpsat", "exhaustive")  # parplan.solver.planner.Method (not imported: it pulls in OR-Tools)
PARETO_AXES = ("memory", "gpus")  # PlanResult.pareto_axis
STAGE_SPLITS = typing.get_args(typing.get_args(SearchSpec.model_fields["stage_split"].annotation)[0])

# enum full name -> the library's values (strings) it stands for
ENUM_VALUES: dict[str, tuple[str, ...]] = {
    "parplan.v1.Schedule": tuple(s.value for s in Schedule),  # the proto edge carries the values (strings)
    "parplan.v1.Recompute": RECOMPUTE_GRANULARITIES,
    "parplan.v1.Precision": typing.get_args(Precision),
    "parplan.v1.Objective": typing.get_args(Objective),
    "parplan.v1.AssumptionPreset": tuple(PRESETS),
    "parplan.v1.Method": METHODS,
    "parplan.v1.ParetoAxis": PARETO_AXES,
    "parplan.v1.PlanStatus": typing.get_args(Status),
    "parplan.v1.Framework": typing.get_args(FrameworkName) + ("any",),
    "parplan.v1.StageSplit": STAGE_SPLITS,
    "parplan.v1.RankBy": typing.get_args(SearchSpec.model_fields["rank_by"].annotation),
    "parplan.v1.CpCommType": CP_COMM_TYPES,
    "parplan.v1.MoeDispatcher": typing.get_args(MoESpec.model_fields["dispatcher"].annotation),
    "parplan.v1.MoeDispatcherBackend": typing.get_args(MoESpec.model_fields["dispatcher_backend"].annotation),
}


def enum_value_name(enum: EnumDescriptor, value: str) -> str:
    """``Schedule``, ``"zb-h1"`` -> ``SCHEDULE_ZB_H1`` (``CpCommType``, ``"a2a+p2p"`` -> ``CP_COMM_TYPE_A2A_P2P``)."""
    prefix = re.sub(r"(?<!^)(?=[A-Z])", "_", enum.name).upper()
    return f"{prefix}_{re.sub(r'[-+]', '_', value.upper())}"


def _enum_tables(enum: EnumDescriptor) -> tuple[dict[str, int], dict[int, str]]:
    values = ENUM_VALUES[enum.full_name]
    to_number = {value: enum.values_by_name[enum_value_name(enum, value)].number for value in values}
    return to_number, {number: value for value, number in to_number.items()}


ENUMS = {name: _enum_tables(pb.DESCRIPTOR.enum_types_by_name[name.rsplit(".", 1)[1]]) for name in ENUM_VALUES}
SCALAR_VALUE = pb.ScalarValue.DESCRIPTOR.full_name

# fields whose CONTRACT key is absent (not None) when unset: message_to_dict leaves them out
OMIT_WHEN_UNSET = frozenset({*(pb.Plan.DESCRIPTOR.fields_by_name[name].full_name  # a plan's later choices
                               for name in plan_defaults_hidden()),  # (costmodel/spec/plan_fields.py)
                             pb.PlanResponse.DESCRIPTOR.fields_by_name["placement"].full_name,  # one pool
                             pb.PlanResponse.DESCRIPTOR.fields_by_name["timing"].full_name,
                             pb.ParetoResponse.DESCRIPTOR.fields_by_name["timing"].full_name,
                             pb.PlanResponse.DESCRIPTOR.fields_by_name["admission"].full_name,
                             pb.PlanResponse.DESCRIPTOR.fields_by_name["memory_margin_gib"].full_name,  # no margin
                             pb.StageReport.DESCRIPTOR.fields_by_name["headroom_gib"].full_name,  # no margin
                             pb.Metrics.DESCRIPTOR.fields_by_name["step_order_step_s"].full_name,  # not DualPipe
                             pb.Evaluation.DESCRIPTOR.fields_by_name["band"].full_name,  # no band_source
                             *(m.DESCRIPTOR.fields_by_name["band_source"].full_name
                               for m in (pb.PlanResponse, pb.EvaluateResponse, pb.ParetoResponse)),
                             pb.ParetoResponse.DESCRIPTOR.fields_by_name["admission"].full_name,
                             *(f.full_name for f in pb.Timing.DESCRIPTOR.fields if f.has_presence)})


class ConversionError(ParplanError):
    """A request value the library's types cannot hold (e.g. an enum number the proto does not define)."""

    def __init__(self, field_path: str, message: str):
        self.field_path = field_path
        super().__init__(f"{field_path}: {message}", field=field_path)


def _is_map(field: FieldDescriptor) -> bool:
    return field.message_type is not None and field.message_type.GetOptions().map_entry


# ------------------------------------------------------------------------------------------ dict -> proto


def _scalar_to_message(value: Any, msg: Message) -> None:
    if value is None:
        msg.null_value = 0
    elif isinstance(value, bool):
        msg.bool_value = value
    elif isinstance(value, int):
        msg.integer_value = value
    elif isinstance(value, float):
        msg.number_value = value
    elif isinstance(value, str):
        msg.string_value = value
    else:
        raise TypeError(f"not a scalar: {value!r}")


def _set_value(field: FieldDescriptor, value: Any) -> Any:
    if field.enum_type is not None:
        return ENUMS[field.enum_type.full_name][0][value]
    return value


def _nested_to_message(inner: str):
    """A list of lists -> ``{stages: [{<inner>: [...]}, ...]}``."""
    def fill(value: Any, msg: Message) -> None:
        if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
            raise TypeError(f"not a list of lists: {value!r}")
        for row in value:
            if isinstance(row, (str, bytes)) or not isinstance(row, (list, tuple)):
                raise TypeError(f"not a list of lists: {value!r}")
            getattr(msg.stages.add(), inner).extend(row)
    return fill


def _framework_to_message(value: Any, msg: Message) -> None:
    if isinstance(value, str):
        msg.name = _set_value(msg.DESCRIPTOR.fields_by_name["name"], value)
    else:
        msg.spec.SetInParent()
        fill_message(msg.spec, value)


def _layout_to_message(value: Any, msg: Message) -> None:
    if isinstance(value, str):
        msg.megatron = value
        return
    # a list of stages: layer letters/names if any entry is text, else decoder-layer counts (all-empty stages,
    # which both forms accept, go as the letters form, the form pydantic picks first)
    rows = value if isinstance(value, (list, tuple)) else ()
    items = [item for row in rows if isinstance(row, (list, tuple)) for item in row]
    target = msg.decoder_layers if items and not any(isinstance(item, str) for item in items) else msg.layers
    target.SetInParent()
    TO_MESSAGE[target.DESCRIPTOR.full_name](value, target)


# message full name -> how a library value fills it (the shapes that are not a dict of its fields)
TO_MESSAGE = {
    SCALAR_VALUE: lambda value, msg: _scalar_to_message(value, msg),
    pb.FrameworkChoice.DESCRIPTOR.full_name: _framework_to_message,
    pb.PipelineLayout.DESCRIPTOR.full_name: _layout_to_message,
    pb.PipelineLayoutLayers.DESCRIPTOR.full_name: _nested_to_message("layers"),
    pb.PipelineLayoutDecoderLayers.DESCRIPTOR.full_name: _nested_to_message("chunk_layers"),
}


def _fill_value(msg: Message, value: Any) -> None:
    special = TO_MESSAGE.get(msg.DESCRIPTOR.full_name)
    if special is not None:
        special(value, msg)
    else:
        fill_message(msg, value)


def fill_message(msg: Message, data: dict[str, Any]) -> Message:
    """Set ``msg``'s fields from a dict keyed by field name (``None`` leaves a field unset)."""
    fields = msg.DESCRIPTOR.fields_by_name
    for key, value in data.items():
        field = fields.get(key)
        if field is None:
            raise KeyError(f"{msg.DESCRIPTOR.full_name} has no field {key!r}")
        if value is None:
            continue
        target = getattr(msg, key)
        if _is_map(field):
            value_field = field.message_type.fields_by_name["value"]
            for k, v in value.items():
                if value_field.message_type is None:
                    target[k] = _set_value(value_field, v)
                else:
                    _fill_value(target[k], v)
        elif field.is_repeated:
            for item in value:
                if field.message_type is not None:
                    _fill_value(target.add(), item)
                else:
                    target.append(_set_value(field, item))
        elif field.message_type is not None:
            target.SetInParent()
            _fill_value(target, value)
        else:
            setattr(msg, key, _set_value(field, value))
    return msg


# ------------------------------------------------------------------------------------------ proto -> dict


def _scalar_from_message(msg: Message, path: str) -> Any:
    kind = msg.WhichOneof("kind")
    if kind is None:
        raise ConversionError(path, "a value is required (set one of number_value, integer_value, bool_value, "
                                    "string_value, null_value)")
    return None if kind == "null_value" else getattr(msg, kind)


def _oneof_kind(msg: Message, path: str) -> str:
    kind = msg.WhichOneof("kind")
    if kind is None:
        raise ConversionError(path, "a value is required (set one of "
                                    + ", ".join(f.name for f in msg.DESCRIPTOR.oneofs_by_name["kind"].fields) + ")")
    return kind


def _nested_from_message(inner: str):
    return lambda msg, path, omit_unset: [list(getattr(stage, inner)) for stage in msg.stages]


def _framework_from_message(msg: Message, path: str, omit_unset: bool) -> Any:
    if _oneof_kind(msg, path) == "name":
        return enum_to_value(pb.Framework.DESCRIPTOR, msg.name, f"{path}.name")
    return message_to_dict(msg.spec, omit_unset=omit_unset, path=f"{path}.spec")


def _layout_from_message(msg: Message, path: str, omit_unset: bool) -> Any:
    kind = _oneof_kind(msg, path)
    if kind == "megatron":
        return msg.megatron
    return FROM_MESSAGE[getattr(msg, kind).DESCRIPTOR.full_name](getattr(msg, kind), f"{path}.{kind}", omit_unset)


# message full name -> the library value it holds (the inverse of TO_MESSAGE)
FROM_MESSAGE = {
    SCALAR_VALUE: lambda msg, path, omit_unset: _scalar_from_message(msg, path),
    pb.FrameworkChoice.DESCRIPTOR.full_name: _framework_from_message,
    pb.PipelineLayout.DESCRIPTOR.full_name: _layout_from_message,
    pb.PipelineLayoutLayers.DESCRIPTOR.full_name: _nested_from_message("layers"),
    pb.PipelineLayoutDecoderLayers.DESCRIPTOR.full_name: _nested_from_message("chunk_layers"),
}


def _message_value(msg: Message, omit_unset: bool, path: str) -> Any:
    special = FROM_MESSAGE.get(msg.DESCRIPTOR.full_name)
    if special is not None:
        return special(msg, path, omit_unset)
    return message_to_dict(msg, omit_unset=omit_unset, path=path)


def enum_to_value(enum: EnumDescriptor, number: int, path: str) -> Optional[str]:
    """The library's string for an enum number (``None`` for ``*_UNSPECIFIED``); an undefined number (proto3
    enums are open) is a :class:`ConversionError` naming ``path``."""
    if number == 0:
        return None
    names = ENUMS[enum.full_name][1]
    if number not in names:
        raise ConversionError(path, f"unknown {enum.name} value {number}; known: "
                                    + ", ".join(enum_value_name(enum, v) for v in names.values()))
    return names[number]


def _get_value(field: FieldDescriptor, value: Any, path: str) -> Any:
    return enum_to_value(field.enum_type, value, path) if field.enum_type is not None else value


def message_to_dict(msg: Message, *, omit_unset: bool, path: str = "") -> dict[str, Any]:
    """The dict of ``msg`` keyed by field name. Unset optional fields, messages and UNSPECIFIED enums are
    ``None``; with ``omit_unset`` they (and empty lists and maps) are left out, so the spec's defaults apply."""
    out: dict[str, Any] = {}
    desc: Descriptor = msg.DESCRIPTOR
    for field in desc.fields:
        if field.GetOptions().deprecated:
            continue
        name = field.name
        where = f"{path}.{name}" if path else name
        value = getattr(msg, name)
        if _is_map(field):
            value_field = field.message_type.fields_by_name["value"]
            if value_field.message_type is None:
                item = {k: _get_value(value_field, v, f"{where}[{k!r}]") for k, v in value.items()}
            else:
                item = {k: _message_value(v, omit_unset, f"{where}[{k!r}]") for k, v in value.items()}
            item = dict(sorted(item.items())) if omit_unset else item
        elif field.is_repeated:
            if field.message_type is not None:
                item = [_message_value(v, omit_unset, f"{where}[{i}]") for i, v in enumerate(value)]
            else:
                item = [_get_value(field, v, f"{where}[{i}]") for i, v in enumerate(value)]
        elif field.message_type is not None:
            item = _message_value(value, omit_unset, where) if msg.HasField(name) else None
        elif field.has_presence and not msg.HasField(name):
            item = None
        else:
            item = _get_value(field, value, where)
        if omit_unset and (item is None or (isinstance(item, (list, dict)) and not item and field.is_repeated)):
            continue
        if (item is None or (item == [] and field.is_repeated)) and field.full_name in OMIT_WHEN_UNSET:
            continue
        out[name] = item
    return out


# ------------------------------------------------------------------------------------------------- spec


def spec_to_message(spec_data: dict[str, Any], msg: Optional[pb.Spec] = None) -> pb.Spec:
    """A spec dict (``Spec.model_dump(mode="json", exclude_none=True)`` or parsed YAML) -> ``pb.Spec``."""
    data = dict(spec_data)
    if isinstance(data.get("assumptions"), dict):
        section = dict(data["assumptions"])
        preset = section.pop("preset", None)
        data["assumptions"] = {"preset": preset, "overrides": section}
    return fill_message(msg if msg is not None else pb.Spec(), data)


def spec_dict_from_message(msg: pb.Spec, path: str = "spec") -> dict[str, Any]:
    """``pb.Spec`` -> the dict a spec file would hold (unset fields left out: the spec's defaults apply)."""
    data = message_to_dict(msg, omit_unset=True, path=path)
    if "assumptions" in data:
        section = data["assumptions"]
        data["assumptions"] = {**({"preset": section["preset"]} if "preset" in section else {}),
                               **section.get("overrides", {})}
    return data


def plan_spec_dict_from_message(msg: pb.PlanSpec, path: str = "plan") -> dict[str, Any]:
    return message_to_dict(msg, omit_unset=True, path=path)


# ---------------------------------------------------------------------------------------------- results


def set_deprecated_fields(response: Message) -> Message:
    """What released clients still read: ``solver.wall_time_s`` (now ``timing.wall_time_s``; 0 without timing)."""
    if response.HasField("solver"):
        response.solver.wall_time_s = response.timing.wall_time_s
    return response


def contract_json(data: dict[str, Any], asked: bool) -> Optional[str]:
    """A reply's ``contract_json`` field: the CLI's JSON text of the answer's CONTRACT dict when the request asked."""
    return to_json(data) if asked else None


def plan_response(result_dict: dict[str, Any], parameters: dict[str, Any], json_asked: bool = False) -> pb.PlanResponse:
    """The CONTRACT dict of an ``optimize`` result (:func:`plan_result_to_dict`) -> ``PlanResponse`` (with the same
    dict as the CLI's JSON text in ``contract_json`` when ``json_asked``)."""
    return set_deprecated_fields(fill_message(pb.PlanResponse(), {
        **result_dict, "parameters": parameters, "contract_json": contract_json(result_dict, json_asked)}))


def plan_result_dict(msg: pb.PlanResponse) -> dict[str, Any]:
    """``PlanResponse`` -> the CONTRACT dict, the exact inverse of :func:`plan_response` (without parameters and
    the server's admission stats)."""
    data = message_to_dict(msg, omit_unset=False)
    data.pop("parameters")
    data.pop("admission", None)
    data.pop("contract_json")
    if not data.get("completed"):  # no partial plan (a repeated field cannot tell None from [])
        data.pop("completed", None)
    return data


__all__ = ["fill_message", "message_to_dict", "enum_to_value", "spec_to_message", "spec_dict_from_message",
           "plan_spec_dict_from_message", "plan_response", "plan_result_dict", "contract_json", "ConversionError", "ENUM_VALUES",
           "enum_value_name", "set_deprecated_fields", "OMIT_WHEN_UNSET"]
