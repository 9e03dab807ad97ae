"""Pipeline layouts beyond equal virtual chunks: decoder layers per (stage, virtual chunk).

Accepted forms (``plan.pipeline_layout``):

* Megatron's ``--pipeline-model-parallel-layout`` string: stages separated by ``|``, ``E`` embedding,
  ``t`` decoder layer, ``m`` MTP layer, ``L`` loss; ``x*n`` and ``(...)*n`` repeat; commas are cosmetic;
  empty stages are allowed. The list holds ``pp·vpp`` stages in virtual-stage-major order (entry
  ``k`` is virtual stage ``k // pp`` of rank ``k % pp``); the first entry must start with ``E`` and the last
  must end with ``L``, each exactly once. Semantics as ``PipelineParallelLayerLayout.parse_str_to_list``
  and ``validate_layer_layout`` in NVIDIA/Megatron-LM@d98e8a64ddf34856e74b24714e3bedb2f5a39553
  megatron/core/transformer/pipeline_parallel_layer_layout.py (the DeepSeek-V3 example
  ``Et*3|(tt|)*29,m|L`` is in docs/user-guide/features/pipeline_parallel_layout.md there);
* the same as a list of stages, each a list of those letters or of Megatron's ``LayerType`` names
  (``embedding``, ``decoder``, ``mtp``, ``loss``: Megatron accepts a list of lists too);
* decoder-layer counts per ``[stage][virtual chunk]`` (``pp`` lists of ``vpp`` integers): the embedding
  sits in stage 0's first chunk and the loss in the last stage's last chunk, as Megatron requires.

MTP layers (``m``) are placed and counted (:attr:`Layout.mtp_layers`) but not costed: the cost model has
no MTP block. Splits the frameworks compute themselves are reproduced in :mod:`parplan.frameworks.layout`
(``megatron_split``, ``torchtitan_split``), which also re-exports these names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Sequence, Union

if TYPE_CHECKING:  # pragma: no cover
    from parplan.costmodel.spec.plan import Plan

LayoutInput = Union[str, Sequence[Sequence[str]], Sequence[Sequence[int]]]
_LETTERS = {"E": "embedding", "t": "decoder", "m": "mtp", "L": "loss"}
_NAMES = {name: letter for letter, name in _LETTERS.items()}  # Megatron's LayerType names in the list form


class LayoutError(ValueError):
    """A layout that Megatron would reject (or that does not match the model); the message says why."""


@dataclass(frozen=True)
class Layout:
    decoder: list[list[int]]  # decoder layers per [stage][virtual chunk]
    mtp_layers: int = 0

    @property
    def pp(self) -> int:
        return len(self.decoder)

    @property
    def vpp(self) -> int:
        return len(self.decoder[0])

    @property
    def stage_layers(self) -> list[int]:
        return [sum(chunks) for chunks in self.decoder]


def expand_megatron_string(text: str) -> list[str]:
    """``'Et*3|(tt|)*2,L'`` -> ``['Ettt', 'tt', 'tt', 'L']``: the virtual stages, repetition unrolled.

    Like Megatron: commas are dropped, then every ``(group)*n`` (no nesting), then every ``x*n``, is
    replaced by n copies; the result is split at ``|``.
    """
    s = text.replace(",", "").replace(" ", "")
    s = re.sub(r"\(([^)]+)\)\*(\d+)", lambda g: g.group(1) * int(g.group(2)), s)
    s = re.sub(r"(.)\*(\d+)", lambda g: g.group(1) * int(g.group(2)), s)
    stages = s.split("|")
    for st in stages:
        bad = sorted(set(st) - set(_LETTERS))
        if bad:
            raise LayoutError(f"pipeline_layout {text!r}: unknown layer letter(s) {', '.join(map(repr, bad))} "
                              f"(known: E embedding, t decoder, m MTP, L loss, | stage break, x*n repeat)")
    return stages


def layout_from_stages(stages: Sequence[str], pp: int, num_layers: Optional[int] = None) -> Layout:
    """Virtual stages (letters, virtual-stage-major order) -> per-(rank, chunk) decoder counts, validated."""
    n = len(stages)
    if n % pp:
        raise LayoutError(f"pipeline_layout has {n} stages, not a multiple of pp = {pp}")
    vpp = n // pp
    flat = "".join(stages)
    if not flat.startswith("E") or flat.count("E") != 1:
        raise LayoutError("pipeline_layout must start with the embedding E, exactly once")
    if not flat.endswith("L") or flat.count("L") != 1:
        raise LayoutError("pipeline_layout must end with the loss L, exactly once")
    if "m" in flat and "t" in flat[flat.index("m"):]:
        raise LayoutError("pipeline_layout: decoder layers (t) must come before MTP layers (m)")
    decoder = [[stages[v * pp + r].count("t") for v in range(vpp)] for r in range(pp)]
    if num_layers is not None and sum(map(sum, decoder)) != num_layers:
        raise LayoutError(f"pipeline_layout holds {sum(map(sum, decoder))} decoder layers, "
                          f"model.num_layers is {num_layers}")
    return Layout(decoder, mtp_layers=flat.count("m"))


def resolve_layout(value: LayoutInput, pp: int, num_layers: Optional[int] = None) -> Layout:
    """Any accepted form -> :class:`Layout` (raises :class:`LayoutError` naming the rule)."""
    if isinstance(value, str):
        return layout_from_stages(expand_megatron_string(value), pp, num_layers)
    rows = [list(r) for r in value]
    if not rows:
        raise LayoutError("pipeline_layout must not be empty")
    if all(isinstance(x, str) for r in rows for x in r):  # Megatron's list form: letters or LayerType names
        return layout_from_stages(["".join(_NAMES.get(x.strip().lower(), x) for x in r) for r in rows], pp, num_layers)
    if not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for r in rows for x in r):
        raise LayoutError("pipeline_layout as a nested list holds layer letters or non-negative layer counts")
    if len(rows) != pp:
        raise LayoutError(f"pipeline_layout has {len(rows)} stages for pp = {pp}")
    if len({len(r) for r in rows}) != 1 or not rows[0]:
        raise LayoutError("pipeline_layout: every stage needs the same number (≥ 1) of virtual chunks")
    if num_layers is not None and sum(map(sum, rows)) != num_layers:
        raise LayoutError(f"pipeline_layout holds {sum(map(sum, rows))} decoder layers, model.num_layers is {num_layers}")
    return Layout(rows)


def to_megatron_string(layout: Layout) -> str:
    """The counts as a ``--pipeline-model-parallel-layout`` string (no repetition folding)."""
    p, v = layout.pp, layout.vpp
    parts = []
    for k in range(p * v):
        r, c = k % p, k // p
        s = "t" * layout.decoder[r][c]
        if k == 0:
            s = "E" + s
        if k == p * v - 1:
            s = s + "L"
        parts.append(s)
    return "|".join(parts)


def interleaved_inflight_chunks(pp: int, vpp: int, num_microbatches: int, rank: int,
                                group: Optional[int] = None) -> list[int]:
    """Forward passes per virtual chunk that rank ``rank`` holds at its activation peak (interleaved 1F1B).

    Megatron-Core's warm-up runs ``(pp - rank - 1)·2 + (vpp - 1)·group`` chunk forwards before the first
    backward, plus the steady state's first forward; the forwards go chunk by chunk in groups of
    ``group`` micro-batches (``microbatch_group_size_per_vp_stage``, default pp):
    NVIDIA/Megatron-LM@d98e8a64 megatron/core/pipeline_parallel/schedules.py:932-1012. The total equals
    the cost model's ``ChoiceCosts.inflight`` × vpp.
    """
    g = group or pp
    total = min((pp - rank - 1) * 2 + (vpp - 1) * g + 1, num_microbatches * vpp)
    counts = [0] * vpp
    k = 0
    for start in range(0, num_microbatches, g):
        size = min(g, num_microbatches - start)
        for chunk in range(vpp):
            take = min(size, total - k)
            counts[chunk] += take
            k += take
            if k >= total:
                return counts
    return counts


def stage_inflight(layout_decoder: list[list[int]], pp: int, vpp: int, num_microbatches: int, rank: int) -> float:
    """In-flight micro-batches of rank ``rank`` in whole-stage units, weighting each chunk by its layers."""
    chunks = layout_decoder[rank]
    layers = sum(chunks)
    counts = interleaved_inflight_chunks(pp, vpp, num_microbatches, rank)
    return sum(n * l for n, l in zip(counts, chunks)) / layers if layers else 0.0


def chunk_recomputed_layers(chunks: list[int], recomputed: float) -> list[float]:
    """Recomputed layers per virtual chunk of a stage that recomputes ``recomputed`` of its layers.

    Megatron-Core's block method recomputes the first N layers of every model chunk, N =
    ``--recompute-num-layers`` counted per chunk (megatron/core/transformer/transformer_block.py
    ``_checkpointed_forward``, ``recompute_method == 'block'``), so chunk c recomputes ``min(N, l_c)``; the
    stage's total fixes N (real, so totals not a multiple of vpp spread evenly). A chunk smaller than N is
    recomputed whole; full recompute (torchtitan's ``mode = 'full'``: every layer) recomputes every chunk whole.
    """
    out = [0.0] * len(chunks)
    left, k = float(recomputed), len(chunks)
    for idx in sorted(range(len(chunks)), key=lambda j: chunks[j]):
        share = left / k if k else 0.0
        out[idx] = min(float(chunks[idx]), share)
        left -= out[idx]
        k -= 1
    return out


def stage_activation_bytes(layout_decoder: list[list[int]], pp: int, vpp: int, num_microbatches: int, rank: int,
                           full_bytes_per_layer: float, saved_bytes_per_recomputed_layer: float,
                           recomputed: float) -> float:
    """Activation bytes rank ``rank`` holds at its peak (interleaved 1F1B): every in-flight forward of chunk c
    (:func:`interleaved_inflight_chunks`) keeps its own ``l_c`` layers' activations, less the saving of the
    chunk's recomputed layers (:func:`chunk_recomputed_layers`)."""
    chunks = layout_decoder[rank]
    counts = interleaved_inflight_chunks(pp, vpp, num_microbatches, rank)
    rec = chunk_recomputed_layers(chunks, recomputed)
    return sum(n * (l * full_bytes_per_layer - r * saved_bytes_per_recomputed_layer)
               for n, l, r in zip(counts, chunks, rec))


def model_chunk_layers(plan: "Plan") -> list[int]:
    """Layers of each model chunk in virtual-stage order ``v·pp + r`` (chunk v of pipeline rank r).

    Megatron-Core's layout numbers its stages this way (``PipelineParallelLayerLayout.__init__``,
    megatron/core/transformer/pipeline_parallel_layer_layout.py at core_v0.15.3), and so do looped
    schedules in ``torch.distributed.pipelining`` (stage ``r + v·pp`` on rank ``r``). A plan's
    ``pipeline_layout`` gives each chunk's layers; without one every stage's chunks are equal."""
    if plan.pipeline_layout is not None:
        return [plan.pipeline_layout[r][v] for v in range(plan.vpp) for r in range(plan.pp)]
    return [plan.stage_layers[r] // plan.vpp for v in range(plan.vpp) for r in range(plan.pp)]
