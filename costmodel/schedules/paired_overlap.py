"""Paired forward/backward chunks: the EP all-to-all each chunk leaves exposed beside its partner's compute.

DualPipe's main step runs one stage's forward chunk beside the *other* stage's backward chunk of the same rank,
both ways in turn: deepseek-ai/DualPipe@3da1bbea53606543d7f5f232338fc58096db30e3 ``dualpipe/dualpipe.py:381-392``
(Step 4 "nF0B1F1B0": ``_forward_backward_chunk(0, 1)`` then ``_forward_backward_chunk(1, 0)``; phase 0 is
stage r, phase 1 stage p-1-r, lines 355-356) and ``dualpipe/dualpipev.py:352-367`` (the same step with chunk 0 =
stage r and chunk 1 = stage 2P-1-r). In the pair, the forward's dispatch/combine runs while the backward
computes and vice versa (DeepSeek-V3 report, arXiv 2412.19437, §3.2.1, Figure 4; Megatron-Core's combined 1F1B
of ``--overlap-moe-expert-parallel-comm`` pairs two micro-batches of the *same* layers the same way,
NVIDIA/Megatron-LM@d98e8a64 megatron/core/pipeline_parallel/combined_1f1b.py). So one pair (forward of x,
backward of y) costs its two computations plus what neither can cover::

    exposed(F_x, B_y) = max(0, X_x/2 - (1-f)·C_y) + max(0, X_y/2 - f·C_x)

with C a chunk's forward+backward compute, f = F/(F+B) its forward share and X its forward+backward all-to-all
(the two passes move the same bytes, X/2 each): per chunk, the forward's whole compute beside the backward's whole
all-to-all and the other way round. DeepSeek's Figure 4 pairs per component, four phases whose compute and
communication run side by side (:func:`component_phases_s`): the forward's attention beside the backward's
combine, the backward's MLP beside the forward's dispatch, the forward's MLP beside the backward's dispatch and
the backward's attention beside the forward's combine, so with A a chunk's attention, M = C - A its MLP and D, K
the dispatch and combine of one pass (D + K = X/2)::

    exposed(F_x, B_y) = max(0, K_y - f·A_x) + max(0, D_x - (1-f)·M_y) + max(0, D_y - f·M_x) + max(0, K_x - (1-f)·A_y)

(:func:`component_pair_exposed_s`, used wherever a :class:`ChunkWork` carries its attention time), never less than
the per-chunk form (the sum of two phases' excesses is at least the excess of their sums) and never more than the
whole all-to-all. A chunk of several layers is priced as one layer of its summed components (exact for equal
layers paired one to one, as Megatron-Core's combined 1F1B runs its layers). A rank's step runs a fixed number of each pairing and of lone
(un-overlapped) forward and backward chunks, read off the step order (:func:`step_order_counts`); a lone chunk
exposes its all-to-all in full. The rank's exposure per micro-batch is their sum over the step's micro-batches
(:func:`rank_exposed_s`): about ``(exposed(F_a, B_b) + exposed(F_b, B_a)) / 2`` for a DualPipe rank, whose
stages each run half the micro-batches, and both pairs in full for a DualPipeV rank, whose micro-batches pass
both chunks, plus the fill and drain's lone chunks. Megatron's combined 1F1B pairs a layer with itself,
``exposed(F_l, B_l)`` per micro-batch (:func:`same_chunk_exposed_s`), and runs its warm-up forwards and cool-down
backwards alone (:func:`combined_1f1b_exposed_s`). A lopsided split (3 dense layers beside
27 MoE layers) leaves the MoE stage's all-to-all beside little compute. ``tests/costmodel/schedules/test_paired_overlap.py`` checks the
step time this gives against a discrete-event simulation of both step orders.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from parplan.costmodel.schedules.schedule import Schedule


@dataclass(frozen=True)
class ChunkWork:
    """A chunk's (stage's) work per micro-batch: compute (forward + backward, seconds) and EP all-to-all
    (forward + backward dispatch and combine, seconds, none of it hidden); floats, or NumPy arrays of candidate
    splits (the solver's tables), with which every function here works element-wise. ``attn_s``: the attention
    blocks' part of ``compute_s`` (the rest is the MLP's: experts, shared experts, a dense layer's MLP), with
    which a pair is priced per component (:func:`component_pair_exposed_s`); None: per chunk
    (:func:`chunk_pair_exposed_s`). ``dispatch_share``: the dispatch's share of each pass's all-to-all, the
    combine the rest."""

    compute_s: float
    a2a_s: float
    attn_s: float | None = None
    dispatch_share: float = 0.5


def pair_exposed_s(fwd: ChunkWork, bwd: ChunkWork, fwd_share: float) -> float:
    """The all-to-all left exposed when ``fwd``'s forward runs beside ``bwd``'s backward: per component where both
    chunks say their attention time (:func:`component_pair_exposed_s`), else per chunk (module docstring)."""
    if fwd.attn_s is None or bwd.attn_s is None:
        return chunk_pair_exposed_s(fwd, bwd, fwd_share)
    return component_pair_exposed_s(fwd, bwd, fwd_share)


def chunk_pair_exposed_s(fwd: ChunkWork, bwd: ChunkWork, fwd_share: float) -> float:
    """Per chunk: ``fwd``'s forward all-to-all beside ``bwd``'s whole backward compute, ``bwd``'s backward
    all-to-all beside ``fwd``'s whole forward compute (module docstring); a lower bound of every two-stream
    order of the pair (:func:`component_pair_exposed_s`)."""
    fwd_hidden = np.maximum(0.0, fwd.a2a_s / 2 - (1 - fwd_share) * bwd.compute_s)
    bwd_hidden = np.maximum(0.0, bwd.a2a_s / 2 - fwd_share * fwd.compute_s)
    total = fwd_hidden + bwd_hidden
    return float(total) if np.ndim(total) == 0 else total


def component_phases_s(fwd: ChunkWork, bwd: ChunkWork, fwd_share: float) -> list[tuple[float, float]]:
    """(compute, communication) of the four phases of one F&B pair, per component, in their order:

    ====================================  =====================================
    compute stream                        communication stream
    ====================================  =====================================
    ATTN(F) of ``fwd``                    COMBINE(B) of ``bwd``
    MLP(B) (and MLP(W)) of ``bwd``        DISPATCH(F) of ``fwd``
    MLP(F) of ``fwd``                     DISPATCH(B) of ``bwd``
    ATTN(B) (and ATTN(W)) of ``bwd``      COMBINE(F) of ``fwd``
    ====================================  =====================================

    DeepSeek-V3 report (arXiv 2412.19437, §3.2.1, Figure 4: "a pair of individual forward and backward chunks",
    each chunk attention, all-to-all dispatch, MLP and all-to-all combine, the backward's attention and MLP split
    into backward for input and for weights). Megatron-Core's code form of the same pairing,
    NVIDIA/Megatron-LM@d98e8a64ddf34856e74b24714e3bedb2f5a39553
    megatron/core/models/common/model_chunk_schedule_plan.py:243-245 (the docstring's two streams) and :261-301
    (``TransformerLayerSchedulePlan.run``: combine_bwd, then pre_dispatch (attention) fwd, mlp bwd, dispatch fwd,
    mlp bwd_dw, dispatch bwd, mlp fwd, combine fwd, pre_dispatch bwd, its bwd_dw): each micro-batch's nodes wait on
    its own event (megatron/core/pipeline_parallel/utils.py:207-209), so the forward's chain (attention, dispatch,
    MLP, combine) and the backward's (combine, MLP, dispatch, attention) each run in order, a stream's operations
    in issue order, and each phase's two operations start together when the previous phase's last one ends: the
    pair takes the sum of the phases' maxima. Compute splits forward/backward by ``fwd_share`` in both blocks;
    the backward's all-to-all mirrors the forward's (combine(B) moves the combine's bytes, dispatch(B) the
    dispatch's: ``dispatch_share`` of each pass)."""
    f = fwd_share
    ax, ay = fwd.attn_s, bwd.attn_s
    mx, my = fwd.compute_s - ax, bwd.compute_s - ay
    dx, dy = fwd.dispatch_share * fwd.a2a_s / 2, bwd.dispatch_share * bwd.a2a_s / 2
    cx, cy = fwd.a2a_s / 2 - dx, bwd.a2a_s / 2 - dy
    return [(f * ax, cy), ((1 - f) * my, dx), (f * mx, dy), ((1 - f) * ay, cx)]


def component_pair_exposed_s(fwd: ChunkWork, bwd: ChunkWork, fwd_share: float) -> float:
    """Per component: what each phase's communication leaves beyond its compute (:func:`component_phases_s`), the
    pair's time less its compute. Never below :func:`chunk_pair_exposed_s` (the forward's compute beside the
    backward's all-to-all and the backward's compute beside the forward's, each phase one of the two) and never
    above the whole all-to-all."""
    total = sum(np.maximum(0.0, comm - comp) for comp, comm in component_phases_s(fwd, bwd, fwd_share))
    return float(total) if np.ndim(total) == 0 else total


def step_order_counts(half_ranks: int, position: int, main_steps: int, unoverlapped_first: bool) -> dict[str, int]:
    """How often a rank runs each pairing and each lone chunk in one step, from the eight steps of
    ``DualPipe.step`` (dualpipe.py:358-417; ``half_ranks`` = p/2, ``position`` = half_rank, ``main_steps`` =
    m/2 - p + half_rank + 1, the middle ranks' first main step not overlapped) and ``DualPipeV.step``
    (dualpipev.py:330-395; P, rank, m - 2P + rank + 1, the last rank's): phase 0 and phase 1 are the rank's two
    chunks. Lone chunks: Steps 1-3 and 5-7 (and the un-overlapped first main step)."""
    n, h, mid = half_ranks, position, int(unoverlapped_first)
    return {"FB01": main_steps - mid, "FB10": main_steps + n - h - 1,
            "F0": 2 * (n - h - 1) + h + 1 + mid, "F1": n, "B1": 2 * (n - h - 1) + h + 1 + mid, "B0": n}


def rank_exposed_s(c0: ChunkWork, c1: ChunkWork, fwd_share: float, counts: dict[str, int],
                   microbatches: int) -> float:
    """A rank's exposed all-to-all per micro-batch (its step's total over ``microbatches``): each F&B pairing
    leaves :func:`pair_exposed_s`, each lone forward or backward chunk its half of the chunk's all-to-all in
    full (``counts``: :func:`step_order_counts`; phase 0 = ``c0``)."""
    return counted_exposed_s(pair_exposed_s(c0, c1, fwd_share), pair_exposed_s(c1, c0, fwd_share), c0.a2a_s, c1.a2a_s,
                             counts, microbatches)


def counted_exposed_s(pair_01, pair_10, a2a_0, a2a_1, counts: dict, microbatches: int):
    """:func:`rank_exposed_s` from its two pairings' exposure (``pair_01``: phase 0's forward beside phase 1's
    backward) and the chunks' all-to-all (``a2a_0``, ``a2a_1``), so that ranks whose chunks do the same work share
    their pairings' exposure (element-wise; paired_split.dualpipe_exposure_table)."""
    total = (counts["FB01"] * pair_01 + counts["FB10"] * pair_10
             + (counts["F0"] + counts["B0"]) * a2a_0 / 2 + (counts["F1"] + counts["B1"]) * a2a_1 / 2)
    return total / microbatches


def dualpipe_rank_exposed_s(pp: int, rank: int, microbatches: int, c0: ChunkWork, c1: ChunkWork,
                            fwd_share: float) -> float:
    """DualPipe rank ``rank`` of ``pp`` (phase 0: stage min(rank, pp-1-rank), dualpipe.py:355-356), ``m``
    micro-batches, half from each end: per micro-batch of the rank's row (each stage runs half of them)."""
    n, h = pp // 2, min(rank, pp - 1 - rank)
    counts = step_order_counts(n, h, microbatches // 2 - pp + h + 1, h == n - 1)
    return rank_exposed_s(c0, c1, fwd_share, counts, microbatches)


def dualpipe_step_counts(pp: int, microbatches: int) -> dict[str, np.ndarray]:
    """:func:`step_order_counts` of every DualPipe rank 0..pp/2-1 as :func:`dualpipe_rank_exposed_s` reads them
    (rank r < pp/2 is its own half rank), each count an int array of shape (pp/2, 1, 1): the first axis the rank,
    so :func:`rank_exposed_s` prices every rank at once, element-wise the same floats as rank by rank."""
    n = pp // 2
    rows = [step_order_counts(n, h, microbatches // 2 - pp + h + 1, h == n - 1) for h in range(n)]
    return {key: np.array([r[key] for r in rows], np.int64).reshape(n, 1, 1) for key in rows[0]}


def paired_pass_share(schedule: Schedule, pp: int, microbatches: int) -> float:
    """Share of a rank's chunk passes (forward or backward) that DualPipe / DualPipeV run as one half of an F&B pair
    (``_forward_backward_chunk``), the ranks' mean from :func:`step_order_counts`: an F&B step posts each chunk's
    send and receive beside the partner's compute, so its pipeline p2p is hidden ("both all-to-all and PP
    communication can be fully hidden", DeepSeek-V3 §3.2.1); the lone chunks of the fill and drain run alone.
    0 for other schedules."""
    if schedule is Schedule.DUALPIPE:
        n = pp // 2
        rows = [step_order_counts(n, h, microbatches // 2 - pp + h + 1, h == n - 1) for h in range(n)]
    elif schedule is Schedule.DUALPIPEV:
        rows = [step_order_counts(pp, r, microbatches - 2 * pp + r + 1, r == pp - 1) for r in range(pp)]
    else:
        return 0.0
    shares = []
    for k in rows:
        paired = 2 * max(0, k["FB01"]) + 2 * max(0, k["FB10"])
        lone = k["F0"] + k["F1"] + k["B0"] + k["B1"]
        shares.append(paired / (paired + lone) if paired + lone else 0.0)
    return sum(shares) / len(shares) if shares else 0.0


def dualpipev_rank_exposed_s(pp: int, rank: int, microbatches: int, c0: ChunkWork, c1: ChunkWork,
                             fwd_share: float) -> float:
    """DualPipeV rank ``rank`` of ``pp`` ranks (chunk 0 = stage rank, chunk 1 = stage 2pp-1-rank), every
    micro-batch through both chunks."""
    counts = step_order_counts(pp, rank, microbatches - 2 * pp + rank + 1, rank == pp - 1)
    return rank_exposed_s(c0, c1, fwd_share, counts, microbatches)


def same_chunk_exposed_s(layer: ChunkWork, fwd_share: float) -> float:
    """Megatron-Core's combined 1F1B (``plan.moe_a2a_overlap``): one micro-batch's forward of a layer beside
    another's backward of the same layer, one pair per micro-batch; affine in a stage's layers."""
    return pair_exposed_s(layer, layer, fwd_share)


def combined_1f1b_lone_share(pp: int, vpp: int, microbatches: int) -> float:
    """Share of a layer's forward (and of its backward) passes that Megatron-Core's combined 1F1B runs alone, their
    all-to-all beside no other micro-batch's compute. Without pipelining the first micro-batch's forward and the
    last one's backward run alone (NVIDIA/Megatron-LM@d98e8a64 ``pipeline_parallel/combined_1f1b.py:76``,
    ``:119``): 1 of m. Interleaved, rank r's warm-up forwards and its cool-down backwards are plain steps:
    2(p-r-1) + (v-1)·p + 1 of its m·v chunk passes (``schedules.py:964-970``: the +1 is the overlap's extra
    warm-up micro-batch), capped at m·v; the share is the ranks' mean (one MoE layer cost serves every stage)."""
    if pp <= 1:
        return min(1.0, 1.0 / max(1, microbatches))
    total = microbatches * max(1, vpp)
    return sum(min(total, 2 * (pp - r - 1) + (max(1, vpp) - 1) * pp + 1) for r in range(pp)) / (pp * total)


def combined_1f1b_key(c) -> tuple | None:
    """What :func:`combined_1f1b_lone_share` reads of a choice (pp, vpp, m), under ``moe_a2a_overlap`` only: the part of
    a layer cache's key that combined 1F1B adds (costmodel/evaluation/moe_layer.py, solver/bounds.py layer_key)."""
    return (c.pp, c.vpp, c.num_microbatches) if c.moe_a2a_overlap else None


def combined_1f1b_exposed_s(layer: ChunkWork, fwd_share: float, lone_share: float) -> float:
    """One layer's exposed all-to-all per micro-batch under Megatron-Core's combined 1F1B: the paired passes leave
    :func:`same_chunk_exposed_s`, the lone ones (``lone_share``, :func:`combined_1f1b_lone_share`) their whole
    all-to-all (a lone forward and a lone backward together move ``layer.a2a_s``)."""
    paired = same_chunk_exposed_s(layer, fwd_share)
    return paired + lone_share * (layer.a2a_s - paired)

