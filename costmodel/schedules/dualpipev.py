"""DualPipeV: DeepSeek's "cut-in-half" DualPipe, a V of two half stages per rank (schedule ``dualpipev``).

Sources:

* deepseek-ai/DualPipe@3da1bbea53606543d7f5f232338fc58096db30e3 ``README.md`` (table "Pipeline Bubbles and
  Memory Usage Comparison (based on the same number of PP stages)"): with *PP* stages on *PP*/2 devices,
  DualPipeV's bubble is ``(PP/2-1)(F&B+B-3W)``, its parameters 2x a stage's (two stages per device, one
  copy of the model) and its activations ``PP+1`` stages' micro-batches per device; F, B, W, F&B are the
  times of one *stage* (chunk).
* the same commit, ``dualpipe/dualpipev.py`` ``DualPipeV.step``: rank r of P holds chunk 0 = stage r and
  chunk 1 = stage 2P-1-r; it needs ``num_chunks >= num_ranks * 2`` micro-batches; step 1 runs
  ``2(P-r-1)`` chunk-0 forwards, step 2 ``r+1`` pairs of chunk-0 and chunk-1 forwards (2P chunk
  micro-batches held), step 4 overlaps a forward with a backward (one more: 2P+1, the README's PP+1).
  Every micro-batch passes both chunks of every rank, so a rank's time per micro-batch is the sum of its
  two chunks' (DeepSeek's DualPipe, by contrast, runs each of a rank's two full stages for half the
  micro-batches and holds the parameters twice).
* pytorch/pytorch@1fd7abc2f521e4429a29c3088e39ebaca20f4698 ``torch/distributed/pipelining/schedules.py``
  ``ScheduleDualPipeV``: exactly 2 stages per rank in the ``"v"`` stage-to-rank mapping, ``n_microbatches``
  at least the number of stages (2P), the same eight steps with ``OVERLAP_F_B`` actions (what torchtitan
  runs as ``pipeline_parallel_schedule = "DualPipeV"``).

In parplan's terms a plan's ``pp`` is the number of *ranks* P (the GPU count is tp·cp·pp·dp) and
``stage_layers`` holds each rank's total; the rank's two chunks split it as :func:`chunk_split` does. The
rank is the pipeline unit: in units of its per-micro-batch time t = 2 chunks' F+B, the README's bubble
with PP = 2P stages is ``(P-1)·(F&B + B - 3W)/2`` (:func:`bubble_time`), and its activations are
``(2P+1)/2 = P + 1/2`` rank micro-batches (:data:`inflight_microbatches`). The model's first stage (the
embedding) and last stage (the head, the loss and MTP) both lie on rank 0.
"""

from __future__ import annotations


def inflight_microbatches(pp: int) -> float:
    """Activations held per rank, in whole-rank micro-batches: 2P+1 chunk micro-batches (README: PP+1 stages'
    with PP = 2P), each half a rank's layers."""
    return (2 * pp + 1) / 2


def bubble_time(pp: int, F: float, B: float, W: float, FandB: float) -> float:
    """README ``(PP/2-1)(F&B+B-3W)`` with PP = 2·pp stages, written with a *rank's* F, B, W, F&B (two chunks,
    each chunk half of them): ``(pp-1)·(F&B + B - 3W)/2``."""
    if pp <= 1:
        return 0.0
    return max(0.0, (pp - 1) * (FandB + B - 3 * W) / 2)


def chunk_split(layers: int, dense_layers: int = 0) -> tuple[int, int]:
    """(chunk 0, chunk 1) layers of a rank with ``layers`` in all: chunk 0 (the earlier stage) takes the larger
    half and, on rank 0, at least the model's ``dense_layers`` leading dense layers (so they all lie on
    stage 0); a rank's costs depend on its totals only, so any split of equal totals costs the same."""
    first = max(dense_layers, layers - layers // 2)
    return first, layers - first


def chunk_classes(dense: int, moe: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """(dense, MoE) layers of a rank's chunk 0 and chunk 1 when it holds ``dense`` leading dense and ``moe`` MoE
    layers: :func:`chunk_split`'s sizes, the dense layers first (they lead the model)."""
    first, _ = chunk_split(dense + moe, dense)
    lead = (min(dense, first), first - min(dense, first))
    return lead, (dense - lead[0], moe - lead[1])


def chunk_layers(stage_layers: list[int], dense_layers: int = 0) -> list[int]:
    """Decoder layers per stage (2·pp of them, in model order) of a plan's per-rank totals: stages 0..P-1 are
    the ranks' chunk 0, stages P..2P-1 their chunk 1 in reverse rank order (the V)."""
    halves = [chunk_split(n, dense_layers if r == 0 else 0) for r, n in enumerate(stage_layers)]
    return [a for a, _ in halves] + [b for _, b in reversed(halves)]
