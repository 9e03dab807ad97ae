"""The plan's one declaration (costmodel/spec/plan_fields.py): the types built from it hold its fields in its order,
the plumbing between them names no field it only carries, and every package module that reads a plan field by name
is recorded here (a ratchet: a new reader fails until recorded, a reader that stopped fails until struck).

A module "reads" a field when it holds an attribute read ``.field``, a keyword ``field=``, a string ``"field"`` or a
class-level annotation ``field: ...`` of that name (an AST scan of the package folders; a read of a search list or a
framework profile's flag of the same name counts too: the scan cannot tell the types apart, and a new knob takes
those places as well). ``python tests/costmodel/spec/test_plan_fields.py`` prints the table as the scan finds it
and, per field, the modules beyond the declaration that read it: the places a field takes."""

from __future__ import annotations

import ast
import dataclasses
import textwrap
import typing

from pydantic import NonNegativeInt, PositiveInt

from parplan.costmodel.spec.degrees import Choice
from parplan.costmodel.spec.plan import Plan, PlanSpec
from parplan.costmodel.spec.optimizer_states import OptimizerStates
from parplan.costmodel.spec.plan_fields import (LIMITS, ON_CHOICE, ON_PLAN, PLAN_FIELDS, REQUIRED, SHARED_WITH_CHOICE,
                                                CpCommType, DecoderLayout, Fraction, LayoutForms, Recompute,
                                                ScheduleField, spec_fields)
from tests.conftest import REPO

PACKAGE_FOLDERS = ("costmodel", "solver", "frameworks", "client", "library", "server", "wire")
FIELD_NAMES = frozenset(f.name for f in PLAN_FIELDS)
DECLARATION = "costmodel/spec/plan_fields.py"

# module -> the plan fields it reads by name, in the declaration's order (re-record with this file's __main__)
READERS: dict[str, str] = {
    "costmodel/communication/comm.py": "tp cp pp dp ep etp cp_comm_type zero_replicas moe_fp8_dispatch",
    "costmodel/communication/data_parallel.py": "pp schedule optimizer_states optimizer_offload_fraction",
    "costmodel/communication/mesh.py": "tp cp pp dp ep",
    "costmodel/evaluation/activation_offload.py": "pp recompute moe_a2a_overlap activation_offload_layers",
    "costmodel/evaluation/activations.py": "tp cp ep etp micro_batch_size recompute cp_comm_type",
    "costmodel/evaluation/choice.py": (
        "tp cp pp dp num_microbatches vpp schedule zero_stage moe_a2a_overlap activation_offload_layers"),
    "costmodel/evaluation/choice_context.py": "tp cp dp ep micro_batch_size",
    "costmodel/evaluation/evaluate.py": (
        "tp cp pp dp ep etp micro_batch_size num_microbatches vpp schedule stage_layers recompute recompute_layers "
        "sequence_parallel pipeline_layout cp_comm_type"),
    "costmodel/evaluation/gemm_rates.py": "tp cp micro_batch_size cp_comm_type",
    "costmodel/evaluation/layer_comm.py": "tp cp micro_batch_size cp_comm_type",
    "costmodel/evaluation/layer_costs.py": "tp cp dp ep etp micro_batch_size recompute cp_comm_type",
    "costmodel/evaluation/ledger.py": (
        "tp cp pp dp ep num_microbatches vpp schedule stage_layers recompute recompute_layers pipeline_layout"),
    "costmodel/evaluation/legality.py": (
        "tp cp pp dp ep etp micro_batch_size num_microbatches vpp schedule recompute zero_stage cp_comm_type "
        "zero_replicas optimizer_offload_fraction"),
    "costmodel/evaluation/moe_layer.py": (
        "tp cp pp dp ep etp micro_batch_size num_microbatches vpp schedule recompute cp_comm_type moe_fp8_dispatch "
        "moe_a2a_overlap"),
    "costmodel/evaluation/pools.py": (
        "pp num_microbatches vpp schedule stage_layers recompute_layers pipeline_layout stage_pools"),
    "costmodel/evaluation/prediction_band.py": "recompute",
    "costmodel/evaluation/stage_extras.py": (
        "tp cp pp dp micro_batch_size num_microbatches schedule recompute moe_a2a_overlap"),
    "costmodel/memory/reshard.py": "tp pp ep etp vpp zero_stage",
    "costmodel/memory/runtime_memory.py": (
        "tp cp pp dp ep micro_batch_size sequence_parallel cp_comm_type zero_replicas"),
    "costmodel/moe/moe_comm.py": "pp ep schedule recompute moe_fp8_dispatch moe_a2a_overlap",
    "costmodel/schedules/paired_overlap.py": "pp num_microbatches vpp moe_a2a_overlap",
    "costmodel/schedules/schedule.py": "pp vpp schedule",
    "costmodel/spec/degrees.py": "tp cp pp dp ep etp schedule sequence_parallel zero_replicas",
    "costmodel/spec/framework_rules.py": (
        "tp cp pp dp ep etp vpp schedule stage_layers recompute recompute_layers zero_stage sequence_parallel "
        "pipeline_layout cp_comm_type zero_replicas optimizer_states optimizer_offload_fraction moe_fp8_dispatch "
        "moe_a2a_overlap activation_offload_layers"),
    "costmodel/spec/layout.py": "pp vpp stage_layers pipeline_layout",
    "costmodel/spec/plan.py": "stage_layers recompute_layers pipeline_layout first_chunk_trim last_chunk_trim",
    "costmodel/spec/plan_fields.py": (
        "tp cp pp dp ep etp micro_batch_size num_microbatches vpp schedule stage_layers recompute recompute_layers "
        "zero_stage sequence_parallel pipeline_layout cp_comm_type first_chunk_trim last_chunk_trim zero_replicas "
        "optimizer_states optimizer_offload_fraction moe_fp8_dispatch moe_a2a_overlap activation_offload_layers "
        "stage_pools"),
    "costmodel/spec/spec.py": (
        "tp cp pp dp ep etp micro_batch_size vpp recompute sequence_parallel zero_replicas optimizer_states "
        "moe_fp8_dispatch moe_a2a_overlap activation_offload_layers"),
    "solver/assignment_check.py": "recompute",
    "solver/bounds.py": (
        "tp cp pp dp ep etp micro_batch_size num_microbatches vpp schedule recompute zero_stage sequence_parallel "
        "cp_comm_type zero_replicas optimizer_states optimizer_offload_fraction moe_fp8_dispatch moe_a2a_overlap "
        "activation_offload_layers"),
    "solver/chunk_trims.py": "vpp first_chunk_trim last_chunk_trim",
    "solver/completion.py": "tp num_microbatches sequence_parallel optimizer_states",
    "solver/cpsat.py": "recompute",
    "solver/cpsat_rank_split.py": "recompute",
    "solver/cpsat_vars.py": "recompute",
    "solver/explain.py": (
        "tp cp pp dp ep etp micro_batch_size vpp schedule stage_layers recompute recompute_layers zero_stage "
        "sequence_parallel cp_comm_type"),
    "solver/oracle/recompute.py": "recompute",
    "solver/oracle/solve.py": "pp recompute",
    "solver/paired_split.py": "pp schedule recompute",
    "solver/pools/bnb.py": "pp num_microbatches recompute",
    "solver/pools/choice_model.py": "pp num_microbatches",
    "solver/pools/cpsat.py": "pp dp num_microbatches recompute stage_pools",
    "solver/pools/explain.py": "pp stage_layers stage_pools",
    "solver/pools/frontier.py": "pp",
    "solver/pools/planner.py": "recompute recompute_layers",
    "solver/pools/search.py": "pp stage_pools",
    "solver/pools/space.py": "pp vpp schedule recompute recompute_layers stage_pools",
    "solver/problem.py": (
        "pp num_microbatches vpp schedule recompute first_chunk_trim last_chunk_trim moe_a2a_overlap"),
    "solver/relaxation_small.py": "recompute",
    "solver/replan.py": (
        "tp cp pp dp ep etp micro_batch_size num_microbatches vpp stage_layers recompute_layers zero_stage "
        "pipeline_layout zero_replicas"),
    "solver/search.py": "recompute",
    "solver/shared_bounds.py": "pp num_microbatches vpp schedule first_chunk_trim last_chunk_trim",
    "solver/space.py": (
        "tp cp pp dp ep etp micro_batch_size num_microbatches vpp schedule recompute zero_stage sequence_parallel "
        "cp_comm_type first_chunk_trim last_chunk_trim zero_replicas optimizer_states optimizer_offload_fraction "
        "moe_fp8_dispatch moe_a2a_overlap activation_offload_layers"),
    "solver/space_options.py": (
        "tp cp pp dp ep etp micro_batch_size num_microbatches vpp recompute sequence_parallel zero_replicas "
        "optimizer_states moe_fp8_dispatch moe_a2a_overlap activation_offload_layers"),
    "solver/space_patterns.py": (
        "micro_batch_size num_microbatches vpp recompute zero_stage sequence_parallel first_chunk_trim "
        "last_chunk_trim zero_replicas optimizer_states optimizer_offload_fraction moe_fp8_dispatch moe_a2a_overlap "
        "activation_offload_layers"),
    "solver/step_order_branch.py": "pp dp num_microbatches schedule recompute",
    "solver/step_order_cuts.py": "pp dp num_microbatches schedule recompute",
    "solver/step_order_floor.py": "num_microbatches schedule",
    "solver/step_order_lookups.py": "pp num_microbatches schedule",
    "solver/step_order_patterns.py": "pp num_microbatches schedule",
    "solver/step_order_search.py": "pp num_microbatches schedule recompute",
    "solver/table_builder.py": "pp num_microbatches vpp schedule recompute first_chunk_trim last_chunk_trim",
    "solver/tables.py": "pp num_microbatches vpp schedule recompute moe_a2a_overlap",
    "solver/tie_break.py": "schedule stage_layers recompute_layers pipeline_layout",
    "solver/warm_cache.py": "num_microbatches vpp schedule first_chunk_trim last_chunk_trim moe_a2a_overlap",
    "frameworks/compare.py": (
        "tp cp pp dp ep etp micro_batch_size vpp schedule recompute recompute_layers zero_stage sequence_parallel "
        "cp_comm_type zero_replicas optimizer_states optimizer_offload_fraction activation_offload_layers "
        "stage_pools"),
    "frameworks/export.py": "stage_pools",
    "frameworks/export_bridge.py": (
        "tp cp pp ep etp micro_batch_size vpp sequence_parallel cp_comm_type optimizer_offload_fraction stage_pools"),
    "frameworks/export_common.py": (
        "tp cp pp dp ep etp micro_batch_size num_microbatches vpp schedule stage_layers recompute recompute_layers "
        "zero_stage sequence_parallel pipeline_layout stage_pools"),
    "frameworks/export_deepspeed.py": (
        "tp cp pp dp ep etp micro_batch_size num_microbatches vpp schedule stage_layers recompute recompute_layers "
        "zero_stage sequence_parallel cp_comm_type zero_replicas optimizer_states optimizer_offload_fraction "
        "moe_fp8_dispatch moe_a2a_overlap activation_offload_layers"),
    "frameworks/export_megatron.py": (
        "tp cp pp dp ep etp micro_batch_size vpp schedule stage_layers recompute recompute_layers zero_stage "
        "sequence_parallel pipeline_layout cp_comm_type zero_replicas optimizer_states optimizer_offload_fraction "
        "moe_fp8_dispatch moe_a2a_overlap activation_offload_layers stage_pools"),
    "frameworks/export_torchtitan.py": (
        "tp cp pp dp ep etp micro_batch_size num_microbatches schedule stage_layers recompute recompute_layers "
        "zero_stage cp_comm_type zero_replicas optimizer_states optimizer_offload_fraction moe_fp8_dispatch "
        "moe_a2a_overlap activation_offload_layers"),
    "frameworks/import_plan.py": (
        "tp cp pp dp ep etp micro_batch_size num_microbatches vpp schedule stage_layers recompute recompute_layers "
        "zero_stage sequence_parallel pipeline_layout cp_comm_type zero_replicas optimizer_states "
        "optimizer_offload_fraction moe_a2a_overlap activation_offload_layers stage_pools"),
    "frameworks/import_torchtitan.py": (
        "tp cp pp dp ep etp micro_batch_size num_microbatches vpp schedule stage_layers recompute recompute_layers "
        "zero_stage pipeline_layout cp_comm_type zero_replicas"),
    "frameworks/job_parts.py": "pipeline_layout",
    "frameworks/megatron_model_args.py": "etp",
    "frameworks/pool_placement.py": "tp cp pp dp stage_pools",
    "frameworks/profile_citations.py": "sequence_parallel",
    "frameworks/profile_data.py": "recompute sequence_parallel optimizer_states moe_a2a_overlap",
    "frameworks/profiles.py": "tp",
    "frameworks/topology_hints.py": "tp cp pp dp ep etp",
    "client/export_cli.py": "tp cp pp dp ep schedule",
    "client/plan_line.py": (
        "tp cp pp dp ep etp micro_batch_size num_microbatches vpp schedule stage_layers recompute recompute_layers "
        "zero_stage zero_replicas optimizer_states optimizer_offload_fraction activation_offload_layers"),
    "client/replan_cli.py": "tp cp pp dp ep micro_batch_size zero_stage",
    "client/report.py": (
        "tp cp pp dp ep etp micro_batch_size num_microbatches vpp schedule stage_layers recompute recompute_layers "
        "zero_stage sequence_parallel pipeline_layout cp_comm_type zero_replicas optimizer_states "
        "optimizer_offload_fraction moe_fp8_dispatch moe_a2a_overlap activation_offload_layers stage_pools"),
    "client/ui/payloads.py": "tp cp pp dp",
    "client/ui/timeline.py": "pp num_microbatches vpp schedule",
    "library/contract.py": "dp",
    "library/measured_runs.py": "tp cp pp",
    "library/sweep/records.py": "tp cp pp dp ep micro_batch_size vpp schedule recompute zero_stage",
}

# plumbing (module, function or statement name; None: the whole module) -> the fields it may name, and why: the
# rest it carries by iterating the declaration
PLUMBING: dict[tuple[str, str | None], tuple[frozenset[str], str]] = {
    ("costmodel/spec/plan.py", None): (
        frozenset(f.name for f in PLAN_FIELDS) - frozenset(SHARED_WITH_CHOICE),
        "to/from a Choice: only the fields one side lacks (the stage split; the trims its layout carries)"),
    ("costmodel/spec/degrees.py", "_choice_field"): (frozenset(), "the Choice's fields from the declaration"),
    ("costmodel/spec/degrees.py", "but"): (frozenset(), "the Choice's copy"),
    ("costmodel/spec/degrees.py", "Choice"): (frozenset(), "the Choice built from the declaration"),
    ("wire/convert.py", None): (frozenset(), "the proto edge: a walk over the message descriptors"),
    ("library/contract.py", "plan_to_dict"): (frozenset(), "the CONTRACT plan dict"),
    ("library/contract.py", "PLAN_KEYS"): (frozenset({"dp"}), "the derived num_gpus follows the degree dp"),
    ("frameworks/job_parts.py", "job_name"): (frozenset({"pipeline_layout"}),
                                         "in job names since they began, None where unset"),
    ("solver/completion.py", "PIN_KEYS"): (frozenset(), "plan field -> search key, from the declaration"),
}


def names_in(tree: ast.AST) -> set[str]:
    """The plan fields ``tree`` reads by name (see the module docstring)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            found.add(node.attr)
        elif isinstance(node, ast.keyword) and node.arg is not None:
            found.add(node.arg)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.add(node.value)
        elif isinstance(node, ast.ClassDef):
            found |= {s.target.id for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)}
    return found & FIELD_NAMES


def scanned_readers() -> dict[str, set[str]]:
    """module -> the plan fields it reads, over every module of the package folders."""
    out = {}
    for folder in PACKAGE_FOLDERS:
        for path in sorted((REPO / folder).rglob("*.py")):
            if names := names_in(ast.parse(without_typing_blocks(path.read_text()))):
                out[path.relative_to(REPO).as_posix()] = names
    return out


def readers_by_field(table: dict[str, set[str]]) -> dict[str, list[str]]:
    return {f.name: sorted(m for m, names in table.items() if f.name in names) for f in PLAN_FIELDS}


def _unit(module: str, name: str | None) -> ast.AST:
    """The module, or its function / assigned name ``name`` (at any depth)."""
    tree = ast.parse(without_typing_blocks((REPO / module).read_text()))
    if name is None:
        return tree
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name:
            return node
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return node
    raise LookupError(f"{module} has no {name}")


def test_every_reader_of_a_plan_field_is_recorded():
    recorded = {m: set(fields.split()) for m, fields in READERS.items()}
    found = scanned_readers()
    new = {m: sorted(found[m] - recorded.get(m, set())) for m in found if found[m] - recorded.get(m, set())}
    gone = {m: sorted(recorded[m] - found.get(m, set())) for m in recorded if recorded[m] - found.get(m, set())}
    assert not new, f"modules that read plan fields by name, not recorded in READERS (record them): {new}"
    assert not gone, f"READERS records reads these modules no longer make (strike them): {gone}"


def test_the_plumbing_names_no_field_it_only_carries():
    for (module, name), (allowed, why) in PLUMBING.items():
        named = names_in(_unit(module, name))
        assert named <= allowed, f"{module} {name or ''} ({why}) names {sorted(named - allowed)}: iterate instead"


def test_resolve_plan_names_exactly_the_fields_it_computes():
    """resolve_plan copies every PlanSpec field it does not compute (``resolved``) through the declaration."""
    call = next(n for n in ast.walk(_unit("costmodel/evaluation/evaluate.py", "resolve_plan"))
                if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "Plan")
    keywords = {k.arg for k in call.keywords if k.arg is not None}
    assert keywords == {f.name for f in ON_PLAN if f.resolved}
    assert [k for k in call.keywords if k.arg is None], "the copied fields come from the declaration (**)"


def test_the_plan_types_hold_the_declared_fields_in_order():
    assert list(PlanSpec.model_fields) == [f.name for f in spec_fields()]
    assert list(Plan.model_fields) == [f.name for f in ON_PLAN]
    assert [f.name for f in dataclasses.fields(Choice)] == [f.name for f in ON_CHOICE]
    assert PlanSpec.LIMITS == LIMITS and set(LIMITS) <= set(PlanSpec.model_fields)
    required = {name for name, info in Plan.model_fields.items() if info.is_required()}
    assert required == {f.name for f in ON_PLAN if f.default is ...}
    assert not any(info.is_required() for info in PlanSpec.model_fields.values())


def test_a_plan_converts_to_its_choice_and_back():
    plan = Plan(tp=2, cp=2, pp=2, dp=1, ep=1, etp=1, micro_batch_size=1, num_microbatches=4, vpp=2,
                schedule="interleaved", stage_layers=[9, 7], recompute="full", recompute_layers=[9, 7], zero_stage=3,
                sequence_parallel=True, pipeline_layout=[[4, 5], [5, 2]], cp_comm_type="a2a", zero_replicas=2,
                moe_fp8_dispatch=True, activation_offload_layers=0)
    choice = plan.to_choice()
    assert (choice.first_chunk_trim, choice.last_chunk_trim) == (1, 3)
    assert all(getattr(choice, name) == getattr(plan, name) for name in SHARED_WITH_CHOICE)
    assert Plan.from_choice(choice, plan.stage_layers, plan.recompute_layers, plan.pipeline_layout) == plan


# ---- the typing blocks: what editors and type checkers read of the types built at run time
BEGIN = "        # ---- generated"
END = "        # ---- end of generated fields"
TYPING_BLOCKS = {"costmodel/spec/plan.py": ("PlanSpec", "Plan"), "costmodel/spec/degrees.py": ("Choice",)}
# the declaration's value types by the name the modules read them under (each imports it, under TYPE_CHECKING)
_NAMED = {id(ScheduleField): "Schedule", id(Recompute): "Recompute", id(CpCommType): "CpCommType",
          id(Fraction): "float", id(LayoutForms): "LayoutForms", id(DecoderLayout): "DecoderLayout",
          id(PositiveInt): "int", id(NonNegativeInt): "int", id(OptimizerStates): "OptimizerStates"}


def annotation_text(tp) -> str:
    """A field's type as a type checker reads it: a named value type, else built from its parts."""
    if id(tp) in _NAMED:
        return _NAMED[id(tp)]
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Literal:
        return f"Literal[{', '.join(map(repr, args))}]"
    if origin is typing.Union:
        inner = [a for a in args if a is not type(None)]
        text = " | ".join(annotation_text(a) for a in inner)
        return f"Optional[{text}]" if len(inner) < len(args) else text
    if origin is list:
        return f"list[{annotation_text(args[0])}]"
    return tp.__name__


def typing_block(kind: str) -> list[str]:
    """The generated field lines of ``kind`` (PlanSpec, Plan or Choice), BEGIN and END included."""
    if kind == "PlanSpec":
        rows = [(f.name, annotation_text(f.spec_definition()[0]), True) for f in spec_fields()]
    elif kind == "Plan":
        rows = [(f.name, annotation_text(f.type), f.default is not REQUIRED) for f in ON_PLAN]
    else:
        rows = [(f.name, f.choice, f.choice_default is not REQUIRED) for f in ON_CHOICE]
    fields = [f"        {name}: {text}{' = ...' if default else ''}" for name, text, default in rows]
    return [f"{BEGIN} from costmodel/spec/plan_fields.py (tests/costmodel/spec/test_plan_fields.py): do not edit",
            *fields, END]


def _blocks(lines: list[str]) -> list[tuple[int, int]]:
    """(first, last) line indices of each generated block, in order."""
    starts = [i for i, line in enumerate(lines) if line.startswith(BEGIN)]
    return [(i, next(j for j in range(i, len(lines)) if lines[j] == END)) for i in starts]


def with_typing_blocks(text: str, kinds) -> str:
    """``text`` with its generated blocks written anew from the declaration."""
    lines = text.split("\n")
    for (first, last), kind in reversed(list(zip(_blocks(lines), kinds))):
        lines[first:last + 1] = typing_block(kind)
    return "\n".join(lines)


def without_typing_blocks(text: str) -> str:
    """``text`` less its generated blocks (the scan counts the fields a module reads, not what is generated)."""
    lines = text.split("\n")
    for first, last in reversed(_blocks(lines)):
        del lines[first:last + 1]
    return "\n".join(lines)


def test_the_typing_blocks_are_the_declaration():
    """plan.py's PlanSpec and Plan and degrees.py's Choice, as editors and type checkers read them (``if
    TYPE_CHECKING:``), hold the declared fields, types and defaults: ``python -m tests.costmodel.spec.test_plan_fields``
    writes them anew."""
    for module, kinds in TYPING_BLOCKS.items():
        text = (REPO / module).read_text()
        assert len(_blocks(text.split("\n"))) == len(kinds), module
        assert text == with_typing_blocks(text, kinds), f"{module}: the typing blocks differ from the declaration"


def recorded_lines(table: dict[str, set[str]]) -> list[str]:
    """READERS' lines for ``table`` (fields in the declaration's order, wrapped under 120 characters)."""
    order = [f.name for f in PLAN_FIELDS]
    lines = []
    for module, names in table.items():
        fields, head = " ".join(n for n in order if n in names), f'    "{module}": '
        if len(head) + len(fields) + 3 <= 118:
            lines.append(f'{head}"{fields}",')
            continue
        parts = textwrap.wrap(fields, 107, break_long_words=False)
        lines += [head + "(", *(f'        "{p} "' for p in parts[:-1]), f'        "{parts[-1]}"),']
    return lines


if __name__ == "__main__":  # write the typing blocks; re-record READERS; the places each field takes
    for module, kinds in TYPING_BLOCKS.items():
        path = REPO / module
        path.write_text(with_typing_blocks(path.read_text(), kinds))
    table = scanned_readers()
    print("\n".join(recorded_lines(table)))
    for field, modules in readers_by_field(table).items():
        others = [m for m in modules if m != DECLARATION]
        print(f"{field}: {len(others)} modules beyond the declaration: {' '.join(others)}")
