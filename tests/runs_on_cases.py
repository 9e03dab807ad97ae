"""Plans a framework's export must write unchanged (issue 40): drawn from the framework's own space (the
framework-restricted search's choices, at the version the export writes for) and listed by ``runs_on`` for it.

Used by tests/frameworks/test_export.py (read back by frameworks/import_plan.py) and
tests/frameworks/test_framework_parsers.py (read by the frameworks' own code).
"""

from __future__ import annotations

from hypothesis import assume
from hypothesis import strategies as st


def split(draw, layers: int, pp: int, vpp: int) -> list[int]:
    """A stage split of ``layers`` over ``pp`` stages, each a positive multiple of ``vpp``: even when it can be,
    else (or when drawn) a random one."""
    if layers % (pp * vpp) == 0 and draw(st.booleans()):
        return [layers // pp] * pp
    units = layers // vpp
    assume(layers % vpp == 0 and units >= pp)
    cuts = sorted(draw(st.lists(st.integers(1, units - 1), min_size=pp - 1, max_size=pp - 1, unique=True))) \
        if pp > 1 else []
    bounds = [0, *cuts, units]
    return [(b - a) * vpp for a, b in zip(bounds, bounds[1:])]


def recomputed(draw, stage_layers: list[int], vpp: int) -> list[int]:
    """Full recompute counts per stage of the kinds the frameworks run: every layer, the first n of every chunk
    (Megatron's block method), every n-th layer (torchtitan v0.2.2's layer SAC), or any count."""
    from parplan.frameworks.export_megatron import block_recompute_layers

    kind = draw(st.sampled_from(["all", "block", "every_nth", "any"]))
    n = draw(st.integers(1, max(stage_layers)))
    if kind == "all":
        return list(stage_layers)
    if kind == "block":
        return block_recompute_layers(stage_layers, vpp, n)
    if kind == "every_nth":
        return [layers // (n + 1) for layers in stage_layers]
    return [draw(st.integers(0, layers)) for layers in stage_layers]


FOCUS = {"any": lambda c: True, "cp": lambda c: c.cp > 1, "tp_ep": lambda c: c.tp > 1 and c.ep > 1,
          "cp_pp": lambda c: c.cp > 1 and c.pp > 1, "full": lambda c: c.recompute == "full"}


def listed_plan(draw, spec, target: str):
    """``(spec, plan)``: ``spec`` retargeted to the framework ``target`` exports for (its whole space, every CP comm
    type), and a plan of it (the evaluator's stage rules) that ``runs_on`` lists for that framework; ``draw`` is
    hypothesis' ``data.draw``. The rare corners are drawn first: CP, TP with EP, CP with PP, full recompute."""
    from parplan.costmodel.spec.assumptions import resolve_assumptions
    from parplan.costmodel.spec.framework_binding import runs_on
    from parplan.costmodel.spec.hardware import resolve_gpu
    from parplan.costmodel.evaluation.legality import stage_violations
    from parplan.costmodel.spec.spec import CP_COMM_TYPES, FrameworkSpec, Plan, SearchSpec
    from parplan.frameworks.export import TARGET_FRAMEWORKS
    from parplan.frameworks.loader import retarget
    from parplan.solver.space import enumerate_choices

    name, version = TARGET_FRAMEWORKS[target]
    everything = SearchSpec(cp_comm_types=list(CP_COMM_TYPES))  # the framework's whole space (every CP comm type)
    spec = retarget(spec.model_copy(update={"search": everything}), FrameworkSpec(name=name, version=version))
    choices = enumerate_choices(spec, resolve_gpu(spec.cluster), resolve_assumptions(spec.assumptions)).choices
    assume(choices)
    focus = draw(st.sampled_from(sorted(FOCUS)))  # the rare corners first: CP, TP with EP, PP, full recompute
    c = draw(st.sampled_from([c for c in choices if FOCUS[focus](c)] or choices))
    c = c.but(first_chunk_trim=0, last_chunk_trim=0)
    stage_layers = split(draw, spec.model.num_layers, c.pp, c.vpp)
    done = recomputed(draw, stage_layers, c.vpp) if c.recompute == "full" else [0] * c.pp
    assume(not stage_violations(spec, c, stage_layers, done, None))  # a plan of this spec (the evaluator's rules)
    try:
        plan = Plan.from_choice(c, stage_layers, done)
    except ValueError:  # pydantic's ValidationError: a split the plan's own rules refuse
        assume(False)
    assume(name in runs_on(spec, plan))
    return spec, plan
