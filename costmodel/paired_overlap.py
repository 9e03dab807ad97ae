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
(the two passes move the same bytes, X/2 each). A DualPipe rank runs each of its stages a and b for half the
micro-batches, the pairs (F_a, B_b) and (F_b, B_a) equally often, so per micro-batch it adds
``(exposed(F_a, B_b) + exposed(F_b, B_a)) / 2`` (:func:`dualpipe_rank_exposed_s`); a DualPipeV rank passes
every micro-batch through both chunks and adds both pairs in full; Megatron's combined 1F1B pairs a layer with
itself, ``exposed(F_l, B_l)`` per micro-batch (:func:`same_chunk_exposed_s`). A lopsided split (3 dense layers
beside 27 MoE layers) leaves the MoE stage's all-to-all beside little compute. Non-overlapped chunks (warm-up,
cool-down) expose theirs in full; that is the bubble's business and checked by the simulation in
``tests/test_dualpipe_sim.py``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ChunkWork:
    """A chunk's (stage's) work per micro-batch: compute (forward + backward, seconds) and EP all-to-all
    (forward + backward dispatch and combine, seconds, none of it hidden)."""

    compute_s: float
    a2a_s: float


def pair_exposed_s(fwd: ChunkWork, bwd: ChunkWork, fwd_share: float) -> float:
    """The all-to-all left exposed when ``fwd``'s forward runs beside ``bwd``'s backward (module docstring)."""
    fwd_hidden = max(0.0, fwd.a2a_s / 2 - (1 - fwd_share) * bwd.compute_s)
    bwd_hidden = max(0.0, bwd.a2a_s / 2 - fwd_share * fwd.compute_s)
    return fwd_hidden + bwd_hidden


def dualpipe_rank_exposed_s(a: ChunkWork, b: ChunkWork, fwd_share: float) -> float:
    """A DualPipe rank's exposed all-to-all per micro-batch: each stage runs half the micro-batches, the two
    pairings equally often (dualpipe.py:381-392)."""
    return (pair_exposed_s(a, b, fwd_share) + pair_exposed_s(b, a, fwd_share)) / 2


def dualpipev_rank_exposed_s(a: ChunkWork, b: ChunkWork, fwd_share: float) -> float:
    """A DualPipeV rank's exposed all-to-all per micro-batch: every micro-batch passes both chunks, once in each
    pairing (dualpipev.py:352-367)."""
    return pair_exposed_s(a, b, fwd_share) + pair_exposed_s(b, a, fwd_share)


def same_chunk_exposed_s(layer: ChunkWork, fwd_share: float) -> float:
    """Megatron-Core's combined 1F1B (``plan.moe_a2a_overlap``): one micro-batch's forward of a layer beside
    another's backward of the same layer, one pair per micro-batch; affine in a stage's layers."""
    return pair_exposed_s(layer, layer, fwd_share)
