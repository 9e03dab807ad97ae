"""The keys under which the problems of one spec key share their choices' bounds across requests (issue 41 item 3).

A scheduler's next request often differs from the last only in its global batch: the same choices come back with
another micro-batch count m (global batch / (dp · micro-batch size)), and the search bounds most of them again. Two of
its bounds read m in one place, so their other terms are kept in the spec's warm entry (solver/warm_cache.py
``SpecPieces``) and weighed by each request's own M = round(W·(m + w_max)) (table_builder.microbatch_weight):

* the mean-unit bound (table_builder.MeanParts: the mean unit time in seconds, the bubble weights) reads the choice's
  costs (the base choice's, warm_cache.base_choice, which holds m where the costs read it: warm_cache.m_free; keyed by
  its fields, warm_cache.base_key), its schedule and vpp (the p2p term and the bubble weights): :func:`mean_key`; the problem's integer scale is applied per
  request (:meth:`MeanParts.at`), so the parts serve every scale;
* the continuous relaxation (bounds.relaxation_parts: τ and the summed and DP terms) reads the choice's table but M;
  the table reads m only through the stages' in-flight micro-batches (costmodel/evaluation/choice.py
  ``inflight_microbatches``, which saturate at the pipeline's depth) and, with trimmed interleaved chunks, through the
  forwards the two trimmed chunks hold in flight (costmodel/spec/layout.py ``interleaved_inflight_chunks``, which
  saturate too; table_builder._stage_constants reads them alone of m): the key holds those counts and the trims. Under
  the torch pipeline runtime (its buffers count every micro-batch) and where the costs read m themselves the key
  holds the whole choice, m included (:func:`table_key`). The key also holds what
  builds the table beside the costs: the scale (the table is in its integer units), the stage split, the recompute
  rule, every layer recomputed or not, the memory cap and whether the paired exposure is priced.

The spec's sections, its resolved assumptions, calibration and the code's version are the warm entry's own key
(warm_cache.spec_key): an entry's parts are never read for another spec. With the warm cache off, a problem keeps
its parts alone (the same values). tests/solver/test_shared_bounds.py checks that the tables of one
:func:`table_key` differ in M alone and that the shared bounds equal the bounds of each problem's own tables.
"""

from __future__ import annotations

from typing import Optional

from parplan.costmodel.evaluation.choice import Choice
from parplan.costmodel.spec.assumptions import Assumptions
from parplan.costmodel.spec.layout import interleaved_inflight_chunks
from parplan.costmodel.spec.spec import Spec
from parplan.solver.tables import Scale, stage_inflight
from parplan.solver.warm_cache import base_key, m_free


def mean_key(c: Choice, spec: Spec, base: Optional[tuple] = None) -> tuple:
    """What choice ``c``'s mean-unit bound reads but its micro-batch count and the problem's scale (module
    docstring): the base choice its costs are priced from (``base``: its warm_cache.base_key, where the caller has
    it), its schedule and vpp; the whole choice where the costs read m."""
    if not m_free(spec, c):
        return (c,)
    return (base_key(c, spec) if base is None else base, c.schedule, c.vpp)


def table_key(c: Choice, spec: Spec, a: Assumptions, base: Optional[tuple] = None) -> tuple:
    """What choice ``c``'s table reads of the choice but its weight M (module docstring): the base choice, schedule
    and vpp, and each stage's in-flight micro-batches; with trimmed chunks also the trims and the in-flight forwards
    of the two trimmed chunks (stage 0's first, the last stage's last); the whole choice under the torch pipeline
    runtime or where the costs read m."""
    if not m_free(spec, c) or a.pipeline_runtime == "torch":
        return (c,)
    key = (base_key(c, spec) if base is None else base, c.schedule, c.vpp, stage_inflight(c))
    if c.first_chunk_trim or c.last_chunk_trim:
        p, v, m = c.pp, c.vpp, c.num_microbatches
        return (*key, c.first_chunk_trim, c.last_chunk_trim, interleaved_inflight_chunks(p, v, m, 0)[0],
                interleaved_inflight_chunks(p, v, m, p - 1)[v - 1])
    return key


def relaxation_key(c: Choice, spec: Spec, a: Assumptions, scale: Scale, rule: tuple, cap_kib: int,
                   exposure: bool, base: Optional[tuple] = None, table: Optional[tuple] = None) -> tuple:
    """The key of choice ``c``'s relaxation parts: its :func:`table_key` (``table``, where the caller has it), the
    scale, the table's ``rule`` (stage split, uniform recompute, every layer recomputed), the cap, and whether the
    paired exposure is priced (only a paired schedule has one)."""
    table = table_key(c, spec, a, base) if table is None else table
    return (table, scale, rule, cap_kib, exposure and c.schedule.paired)
