"""The pipeline schedule of an evaluated plan as a timeline: per rank, each chunk's start and end in seconds.

Durations come from the ledger (``StageReport.time_per_microbatch_s``, a stage's time per micro-batch), split
into forward and backward as the cost model splits them (``assumptions.backward_to_forward_ratio``: B = r·F,
seed 000's bubble example) and, for zero-bubble backwards, the weight-gradient share
``assumptions.zb_weight_grad_fraction`` of B (ZB paper, W ~ B/2). The orders:

* DualPipe and DualPipeV: the upstream step order, :func:`parplan.costmodel.schedules.dualpipe_steps.op_graph`
  (deepseek-ai/DualPipe@3da1bbe dualpipe.py:358-417, dualpipev.py:330-395), with each operation started once
  its inputs and its rank are free (the longest path :func:`~parplan.costmodel.schedules.dualpipe_steps.step_order_s`
  takes); F&B pairs are drawn as one block;
* 1F1B and ZB-H1: 1F1B's order per rank (PipeDream-flush, Narayanan et al. SC'21 §2.2: p-1-i warm-up
  forwards, then one forward and one backward in turn), the list schedule of tests/pipeline_sim.py; ZB-H1 splits
  each backward into B and a W run right after it;
* interleaved: Megatron-LM's interleaved order over the plan's ``vpp`` chunks per rank (:func:`_orders`), each
  chunk 1/vpp of the rank's time (the cost model's even split of a stage's layers over its chunks).

Communication is not drawn (it is inside each stage's time); the gaps are the bubbles. ``span_s`` is the
drawn pipeline's length, shown beside the cost model's ``step_time_s``.
"""

from __future__ import annotations

from typing import Any

from parplan.costmodel.schedules.schedule import Schedule

MAX_DRAWN_MICROBATCHES = 64  # longer pipelines are drawn with this many micro-batches (the fill and drain)


def _orders(p: int, m: int, v: int) -> list[list[tuple[str, int, int]]]:
    """Each rank's (kind, chunk, micro-batch) order. v = 1: 1F1B (p-1-i warm-up forwards, then one forward and one
    backward in turn); v > 1: Megatron-LM's interleaved 1F1B (megatron/core/pipeline_parallel/schedules.py,
    ``forward_backward_pipelining_with_interleaving``: virtual micro-batch k runs chunk (k // p) % v of micro-batch
    (k // (p·v))·p + k % p, backwards in reversed chunk order, (p-1-i)·2 + (v-1)·p warm-up forwards)."""
    def virtual(k: int, backward: bool) -> tuple[int, int]:
        chunk = (k // p) % v
        return (v - 1 - chunk if backward else chunk), (k // (p * v)) * p + k % p

    total = m * v
    orders = []
    for i in range(p):
        warm = min(p - i - 1, m) if v == 1 else min((p - i - 1) * 2 + (v - 1) * p, total)
        ops = [("F", *virtual(k, False)) for k in range(warm)]
        for k in range(warm, total):
            ops += [("F", *virtual(k, False)), ("B", *virtual(k - warm, True))]
        orders.append(ops + [("B", *virtual(k, True)) for k in range(total - warm, total)])
    return orders


def _list_schedule(F: list[float], B: list[float], W: list[float], m: int, v: int = 1) -> list[list[dict[str, Any]]]:
    """Each rank's chunks in :func:`_orders`' order, each started when its input (the previous model chunk's
    forward, the next one's backward; the last chunk's backward its own forward) and its rank are ready; F, B, W
    are a rank's times per micro-batch, a chunk takes 1/v of them."""
    p = len(F)
    orders = _orders(p, m, v)
    done: dict[tuple[str, int, int, int], float] = {}
    ptr, free = [0] * p, [0.0] * p
    rows: list[list[dict[str, Any]]] = [[] for _ in range(p)]
    moved = True
    while moved:
        moved = False
        for i in range(p):
            while ptr[i] < len(orders[i]):
                kind, c, j = orders[i][ptr[i]]
                if kind == "F":  # model chunk c·p + i follows chunk c·p + i - 1
                    ready = 0.0 if i == 0 and c == 0 else done.get(("F", i - 1, c, j) if i else ("F", p - 1, c - 1, j))
                elif i == p - 1 and c == v - 1:  # the model's last chunk: its own forward
                    ready = done.get(("F", i, c, j))
                else:
                    ready = done.get(("B", i + 1, c, j) if i < p - 1 else ("B", 0, c + 1, j))
                if ready is None:
                    break
                start = max(ready, free[i])
                free[i] = start + (F[i] if kind == "F" else B[i]) / v
                rows[i].append({"kind": kind, "mb": j, "chunk": c, "start_s": start, "end_s": free[i]})
                done[(kind, i, c, j)] = free[i]
                if kind == "B" and W[i] > 0:
                    rows[i].append({"kind": "W", "mb": j, "chunk": c, "start_s": free[i], "end_s": free[i] + W[i] / v})
                    free[i] += W[i] / v
                ptr[i] += 1
                moved = True
    return rows


def _step_order(schedule: Schedule, C: list[float], f: float, w: float, m: int) -> list[list[dict[str, Any]]]:
    """The DualPipe/DualPipeV step order's operations with their start and end (inputs and rank free)."""
    from parplan.costmodel.schedules.dualpipe_steps import StageWork, op_graph

    graph = op_graph(schedule, StageWork(C, [0.0] * len(C), f, w), m)
    end: dict[tuple[int, int], float] = {}
    rows: list[list[dict[str, Any]]] = [[] for _ in graph.orders]
    ptr = [0] * len(graph.orders)
    moved = True
    while moved:
        moved = False
        for r, ops in enumerate(graph.orders):
            while ptr[r] < len(ops):
                i = ptr[r]
                ins = graph.inputs[r][i]
                if any(x not in end for x in ins):
                    break
                start = max([end[x] for x in ins] + ([end[(r, i - 1)]] if i else [0.0]))
                end[(r, i)] = start + graph.durations_s[r][i]
                op = ops[i]
                rows[r].append({"kind": op.kind, "mb": None, "step": op.step, "phases": list(op.phases),
                                "start_s": start, "end_s": end[(r, i)]})
                ptr[r] += 1
                moved = True
    return rows


def timeline(spec: Any, evaluation: Any) -> dict[str, Any]:
    """``{"schedule", "ranks": [[chunk, ...], ...], "span_s", "microbatches", "microbatches_drawn"}``."""
    from parplan.costmodel.spec.assumptions import resolve_assumptions
    from parplan.costmodel.schedules.dualpipe_steps import step_order_defined

    a = resolve_assumptions(spec.assumptions)
    plan = evaluation.plan
    schedule, pp, m = plan.schedule, plan.pp, plan.num_microbatches
    f = 1.0 / (1.0 + a.backward_to_forward_ratio)
    t = [s.time_per_microbatch_s for s in evaluation.stages]
    drawn = min(m, MAX_DRAWN_MICROBATCHES)
    out = {"schedule": schedule.value, "microbatches": m, "microbatches_drawn": drawn}
    if schedule.paired:
        if schedule is Schedule.DUALPIPE:
            C = t
        else:  # a DualPipeV rank holds stages r and 2P-1-r: its time split evenly between them
            C = [t[r] / 2 for r in range(pp)] + [t[pp - 1 - r] / 2 for r in range(pp)]
        drawn = min(m, max(MAX_DRAWN_MICROBATCHES, 2 * pp + 2)) // 2 * 2
        if step_order_defined(schedule, pp, drawn):
            out.update(ranks=_step_order(schedule, C, f, a.zb_weight_grad_fraction, drawn), microbatches_drawn=drawn)
        else:  # the plan breaks the schedule's micro-batch rule (its violations say so): nothing to draw
            out.update(ranks=[[] for _ in range(pp)], microbatches_drawn=0)
    else:
        F = [x * f for x in t]
        zb = schedule is Schedule.ZB_H1
        W = [(x - fx) * a.zb_weight_grad_fraction if zb else 0.0 for x, fx in zip(t, F)]
        B = [x - fx - wx for x, fx, wx in zip(t, F, W)]
        v = plan.vpp if schedule is Schedule.INTERLEAVED else 1
        if v > 1:  # whole groups of pp micro-batches, as Megatron-LM's interleaved schedule runs them
            drawn = max(pp, drawn // pp * pp) if m % pp == 0 else drawn
        out.update(ranks=_list_schedule(F, B, W, drawn, v), microbatches_drawn=drawn)
    out["span_s"] = max((c["end_s"] for row in out["ranks"] for c in row), default=0.0)
    return out


__all__ = ["timeline", "MAX_DRAWN_MICROBATCHES"]
