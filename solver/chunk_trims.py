"""Interleaved layouts whose end chunks hold a layer fewer: which (first, last) trims a model's layers allow at a
given pipeline and virtual-stage count, and the fewest layers such a stage holds (the space enumerates them, the
tables bound them: solver/space.py, solver/table_builder.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from parplan.costmodel.evaluation.choice import Choice

MAX_CHUNK_TRIM = 1  # layers an interleaved end chunk may lack (the embedding's or the loss's place)
# layers the last chunk of a uniform layout may lack: none left where MTP and the loss take it (Megatron-Core's
# DeepSeek-V3 layout "Et|(tt|)*30mL": NVIDIA/Megatron-LM@d98e8a64 megatron/core/transformer/moe/README.md)
UNIFORM_LAST_TRIM = 2


def chunk_trims(num_layers: int, pp: int, vpp: int, trims: bool) -> list[tuple[int, int]]:
    """The (first, last) chunk trims of interleaved choices with ``vpp`` chunks per stage.

    Every stage holds ``vpp`` chunks of equal layers, except that stage 0's first chunk may hold ``first`` and
    the last stage's last chunk ``last`` layers fewer (``pipeline_layout``: Meta's Llama 3 405B split, 126
    layers on 16 stages with one layer fewer on the first and last; Megatron's
    ``--account-for-embedding/loss-in-pipeline-split``, which count the embedding and the loss as one layer
    each). Per-stage totals then take ``vpp·q − trim``; the trims are the pairs of 0 or 1 with
    ``first + last ≡ −num_layers (mod vpp)`` (the one layer short at either end that practitioners use), so a
    model whose layers divide into chunks keeps (0, 0) only and one that misses whole chunks by more than two
    layers has no interleaved choice at that vpp.
    Without trims (``trims`` false: a framework without per-chunk layouts, or a stage split or model the
    tables cannot trim exactly) only models whose layers divide by vpp have interleaved choices. Every
    chunk but a trimmed one needs a layer."""
    r = (-num_layers) % vpp
    if not trims or r == 0:
        pairs = [(0, 0)] if r == 0 else []
    else:
        pairs = [(a, r - a) for a in range(r + 1) if a <= MAX_CHUNK_TRIM and r - a <= MAX_CHUNK_TRIM]
    # least layers: one per chunk, a trimmed chunk may be empty (Megatron's layout allows an 'E' or 'L' chunk)
    return [(a, b) for a, b in pairs if num_layers >= _least_layers(pp, vpp, a, b)]


def _least_layers(pp: int, vpp: int, first: int, last: int) -> int:
    """Fewest layers of a trimmed layout: every stage at its least (pp 1, which interleaving rejects, by its
    first stage)."""
    if pp == 1:
        return vpp * max(1, first, last) - first - last
    return (pp - 2) * vpp + trimmed_stage_least_layers(vpp, first) + trimmed_stage_least_layers(vpp, last)


def trimmed_stage_least_layers(vpp: int, trim: int) -> int:
    """Fewest layers of a stage of ``vpp`` equal chunks of q ≥ 1 layers, one of them ``trim`` short (q ≥ trim)."""
    return vpp * max(1, trim) - trim


def uniform_trims(num_layers: int, pp: int, vpp: int, dense_layers: int) -> list[tuple[int, int]]:
    """The (first, last) trims of the uniform interleaved layout of a model with ``dense_layers`` leading dense
    layers: every chunk holds q = ceil(L / (pp·vpp)) layers but stage 0's first (``first`` ≤ 1 fewer) and the last
    stage's last (``last`` ≤ :data:`UNIFORM_LAST_TRIM` fewer), where L is not a multiple of pp·vpp (a multiple is the
    per-stage search's even split). Its per-stage counts are fixed (:func:`uniform_stage_layers`), so the tables
    price its leading dense layers on stage 0 exactly; stage 0's first chunk must hold them (the model-chunk order
    puts the next ones on stage 1: costmodel/evaluation/ledger.py layer_classes)."""
    chunks = pp * vpp
    if pp < 2 or vpp < 2:
        return []
    q = -(-num_layers // chunks)
    short = q * chunks - num_layers
    out = []
    for first in range(min(MAX_CHUNK_TRIM, short) + 1):
        last = short - first
        if short and last <= min(UNIFORM_LAST_TRIM, q) and q - first >= max(1, dense_layers):
            out.append((first, last))
    return out


def uniform_stage_layers(num_layers: int, pp: int, vpp: int, first: int, last: int) -> list[int]:
    """Per-stage layers of :func:`uniform_trims`' layout: vpp·q each, less the trims on stage 0 and the last stage."""
    q = -(-num_layers // (pp * vpp))
    out = [vpp * q] * pp
    out[0] -= first
    out[-1] -= last
    return out


def interleaved_trims(num_layers: int, pp: int, vpp: int, trims: bool, uniform_dense: int) -> list[tuple[int, int]]:
    """The (first, last) trims an interleaved choice may take: :func:`chunk_trims`, and with ``uniform_dense`` > 0 (a
    model with that many leading dense layers, whose per-stage counts trims may not vary) :func:`uniform_trims`."""
    pairs = chunk_trims(num_layers, pp, vpp, trims)
    return pairs + uniform_trims(num_layers, pp, vpp, uniform_dense) if uniform_dense else pairs


def trimmed_layout(c: "Choice", stage_layers: list[int]) -> list[list[int]] | None:
    """The per-chunk layout of an interleaved choice with trimmed end chunks (None without trims): every stage's
    chunks hold equal layers but stage 0's first and the last stage's last, which hold the trims fewer."""
    if not (c.first_chunk_trim or c.last_chunk_trim):
        return None
    v = c.vpp
    trims = [0] * len(stage_layers)
    trims[0] += c.first_chunk_trim
    trims[-1] += c.last_chunk_trim
    layout = [[(n + t) // v] * v for n, t in zip(stage_layers, trims)]
    layout[0][0] -= c.first_chunk_trim
    layout[-1][-1] -= c.last_chunk_trim
    return layout
