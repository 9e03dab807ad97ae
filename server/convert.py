"""The proto edge: parplan.v1 messages <-> the spec dict and the CONTRACT dicts of :mod:`parplan.client.contract`.

The proto's field names are the spec's YAML keys and the CLI's JSON keys, so one generic walk over the message
descriptor maps both ways; the only special shapes are

* enums: ``SCHEDULE_ZB_H1`` <-> ``"zb-h1"`` (the value, upper-cased, ``-`` as ``_``, after the enum's prefix),
  with ``*_UNSPECIFIED`` meaning "not given" (the spec's default);
* :class:`ScalarValue`: ``{"integer_value": 2}`` <-> ``2`` (knob overrides and relaxation patches);
* ``assumptions``: the YAML section ``{preset, <knob>: value, ...}`` is ``{preset, overrides: {knob: value}}``.

A dict key with no proto field raises :class:`KeyError` (the library grew a field the proto lacks: a bug that
``tests/test_service_proto.py`` catches by comparing the models with the messages).
"""

from __future__ import annotations

import re
import typing
from typing import Any, Optional

from google.protobuf.descriptor import Descriptor, EnumDescriptor, FieldDescriptor
from google.protobuf.message import Message

from parplan.costmodel.assumptions import PRESETS
from parplan.costmodel.spec import RECOMPUTE_GRANULARITIES, SCHEDULES, Objective, Precision
from parplan.solver.result import Status
from parplan.v1 import planner_pb2 as pb

METHODS = ("cpsat", "exhaustive")  # parplan.solver.planner.Method (not imported: it pulls in OR-Tools)
PARETO_AXES = ("memory", "gpus")  # PlanResult.pareto_axis

# enum full name -> the library's values (strings) it stands for
ENUM_VALUES: dict[str, tuple[str, ...]] = {
    "parplan.v1.Schedule": SCHEDULES,
    "parplan.v1.Recompute": RECOMPUTE_GRANULARITIES,
    "parplan.v1.Precision": typing.get_args(Precision),
    "parplan.v1.Objective": typing.get_args(Objective),
    "parplan.v1.AssumptionPreset": tuple(PRESETS),
    "parplan.v1.Method": METHODS,
    "parplan.v1.ParetoAxis": PARETO_AXES,
    "parplan.v1.PlanStatus": typing.get_args(Status),
}


def enum_value_name(enum: EnumDescriptor, value: str) -> str:
    """``Schedule``, ``"zb-h1"`` -> ``SCHEDULE_ZB_H1``."""
    prefix = re.sub(r"(?<!^)(?=[A-Z])", "_", enum.name).upper()
    return f"{prefix}_{value.upper().replace('-', '_')}"


def _enum_tables(enum: EnumDescriptor) -> tuple[dict[str, int], dict[int, str]]:
    values = ENUM_VALUES[enum.full_name]
    to_number = {value: enum.values_by_name[enum_value_name(enum, value)].number for value in values}
    return to_number, {number: value for value, number in to_number.items()}


ENUMS = {name: _enum_tables(pb.DESCRIPTOR.enum_types_by_name[name.rsplit(".", 1)[1]]) for name in ENUM_VALUES}
SCALAR_VALUE = pb.ScalarValue.DESCRIPTOR.full_name


class ConversionError(ValueError):
    """A request value the library's types cannot hold (e.g. an enum number the proto does not define)."""

    def __init__(self, field_path: str, message: str):
        self.field_path = field_path
        super().__init__(f"{field_path}: {message}")


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
                elif value_field.message_type.full_name == SCALAR_VALUE:
                    _scalar_to_message(v, target[k])
                else:
                    fill_message(target[k], v)
        elif field.is_repeated:
            for item in value:
                if field.message_type is not None:
                    fill_message(target.add(), item)
                else:
                    target.append(_set_value(field, item))
        elif field.message_type is not None:
            target.SetInParent()
            if field.message_type.full_name == SCALAR_VALUE:
                _scalar_to_message(value, target)
            else:
                fill_message(target, value)
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
        name = field.name
        where = f"{path}.{name}" if path else name
        value = getattr(msg, name)
        if _is_map(field):
            value_field = field.message_type.fields_by_name["value"]
            if value_field.message_type is None:
                item = {k: _get_value(value_field, v, f"{where}[{k!r}]") for k, v in value.items()}
            elif value_field.message_type.full_name == SCALAR_VALUE:
                item = {k: _scalar_from_message(v, f"{where}[{k!r}]") for k, v in value.items()}
            else:
                item = {k: message_to_dict(v, omit_unset=omit_unset, path=f"{where}[{k!r}]") for k, v in value.items()}
            item = dict(sorted(item.items())) if omit_unset else item
        elif field.is_repeated:
            if field.message_type is not None:
                item = [message_to_dict(v, omit_unset=omit_unset, path=f"{where}[{i}]") for i, v in enumerate(value)]
            else:
                item = [_get_value(field, v, f"{where}[{i}]") for i, v in enumerate(value)]
        elif field.message_type is not None:
            if not msg.HasField(name):
                item = None
            elif field.message_type.full_name == SCALAR_VALUE:
                item = _scalar_from_message(value, where)
            else:
                item = message_to_dict(value, omit_unset=omit_unset, path=where)
        elif field.has_presence and not msg.HasField(name):
            item = None
        else:
            item = _get_value(field, value, where)
        if omit_unset and (item is None or (isinstance(item, (list, dict)) and not item and field.is_repeated)):
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


def plan_response(result_dict: dict[str, Any], parameters: dict[str, Any]) -> pb.PlanResponse:
    """The CONTRACT dict of an ``optimize`` result (:func:`plan_result_to_dict`) -> ``PlanResponse``."""
    return fill_message(pb.PlanResponse(), {**result_dict, "parameters": parameters})


def plan_result_dict(msg: pb.PlanResponse) -> dict[str, Any]:
    """``PlanResponse`` -> the CONTRACT dict, the exact inverse of :func:`plan_response` (without parameters)."""
    data = message_to_dict(msg, omit_unset=False)
    data.pop("parameters")
    return data


__all__ = ["fill_message", "message_to_dict", "enum_to_value", "spec_to_message", "spec_dict_from_message",
           "plan_spec_dict_from_message", "plan_response", "plan_result_dict", "ConversionError", "ENUM_VALUES",
           "enum_value_name"]
