"""The stage splits frameworks compute themselves, as :class:`~parplan.costmodel.spec.layout.Layout` s.

:func:`megatron_split` (``--account-for-embedding/loss-in-pipeline-split``, ``--decoder-first/last-pipeline-num-
layers``), :func:`torchtitan_split` (``generate_llm_fqn_per_model_part``) and :func:`torchtitan_split_points`
(``generate_split_points``, torchtitan before v0.1.0); :func:`default_split` picks a profile's. The layout forms and their in-flight
rules are the cost model's (:mod:`parplan.costmodel.spec.layout`), re-exported here for the exporters and importers.
"""

from __future__ import annotations

from typing import Optional

from parplan.costmodel.spec.framework_rules import Profile
from parplan.costmodel.spec.layout import (Layout, LayoutError, LayoutInput, expand_megatron_string,  # noqa: F401
                                      interleaved_inflight_chunks, layout_from_stages, resolve_layout,
                                      stage_inflight, to_megatron_string)


def megatron_split(num_layers: int, pp: int, vpp: int = 1, account_for_embedding: bool = False,
                   account_for_loss: bool = False, first_stage_layers: Optional[int] = None,
                   last_stage_layers: Optional[int] = None) -> Layout:
    """The split Megatron-Core builds without a layout string (``get_num_layers_to_build``).

    NVIDIA/Megatron-LM@d98e8a64 megatron/core/transformer/transformer_block.py:103-205: with
    ``--decoder-first/last-pipeline-num-layers`` those stages take their count and the rest is divided
    evenly; otherwise the embedding and loss, when accounted for, count as one layer each, every rank
    gets ``(L + extras) / pp`` and every chunk ``/ vpp``, and the first (last) chunk of the first (last)
    rank builds one decoder layer fewer. Raises where Megatron asserts.
    """
    if first_stage_layers is not None or last_stage_layers is not None:
        if account_for_embedding or account_for_loss:
            raise LayoutError("uneven first/last stages and account-for-embedding/loss cannot be combined")
        rest = num_layers - (first_stage_layers or 0) - (last_stage_layers or 0)
        mids = pp - (first_stage_layers is not None) - (last_stage_layers is not None)
        if mids and rest % mids:
            raise LayoutError(f"the {rest} middle layers do not divide into {mids} stages")
        per = [rest // mids if mids else 0] * pp
        if first_stage_layers is not None:
            per[0] = first_stage_layers
        if last_stage_layers is not None:
            per[-1] = last_stage_layers
    else:
        total = num_layers + account_for_embedding + account_for_loss
        if total % pp:
            raise LayoutError(f"{total} layers (embedding/loss included) do not divide by pp = {pp}")
        per = [total // pp] * pp
    if any(n % vpp for n in per):
        raise LayoutError(f"layers per rank {per} are not divisible by vpp = {vpp}")
    decoder = [[n // vpp] * vpp for n in per]
    if account_for_embedding:
        decoder[0][0] -= 1
    if account_for_loss:
        decoder[-1][-1] -= 1
    if any(x < 0 for r in decoder for x in r):
        raise LayoutError("not enough layers in the first or last virtual stage")
    return Layout(decoder)


def torchtitan_split(num_layers: int, pp: int, stages_per_rank: int = 1, input_weight: int = 1,
                     output_weight: int = 1) -> Layout:
    """torchtitan's default split (``generate_llm_fqn_per_model_part``; ``pipeline_parallel_first/last_stage
    _less_layers`` = input/output weight, default 1): embedding and output count as layers, extra
    layers go to the first stages; looped schedules place stage ``s`` on rank ``s % pp``.

    pytorch/torchtitan@v0.2.2 torchtitan/distributed/pipeline_parallel.py:236-345 and 451-461.
    """
    n = pp * stages_per_rank
    if n == 1:
        return Layout([[num_layers]])
    eff = num_layers + input_weight + output_weight
    per, extra = divmod(eff, n)
    if per == 0 or input_weight > per or output_weight > per:
        raise LayoutError(f"{n} stages cannot hold {num_layers} layers with weights {input_weight}/{output_weight}")
    counts, left = [], num_layers
    for s in range(n):
        want = per + (1 if s < extra else 0) - (input_weight if s == 0 else output_weight if s == n - 1 else 0)
        take = min(want, left)
        counts.append(take)
        left -= take
    if left:
        raise LayoutError(f"{left} layers left over by torchtitan's split")
    return Layout([[counts[c * pp + r] for c in range(stages_per_rank)] for r in range(pp)])


def torchtitan_split_points(num_layers: int, pp: int, stages_per_rank: int = 1) -> Layout:
    """torchtitan's split when no ``pipeline_parallel_split_points`` are given, before v0.1.0
    (``generate_split_points``): ``pp · stages_per_rank`` stages (2 per rank for multi-stage schedules such as
    Interleaved1F1B, 1 otherwise) of ``num_layers // stages`` layers each; the remainder goes one layer each to
    the middle stages from stage 1 on, the last stage takes what is left; stage ``s`` runs on rank ``s % pp``.
    Llama 3.1 405B (126 layers) on 16 stages: 7, 8 x 14, 7, so rank 0 holds [7, 8] and rank 7 [8, 7].

    pytorch/torchtitan@9dec370ad26b5f8e9a7333a0e36165018262644b torchtitan/parallelisms/pipelining_utils.py:18-57
    (the split) and 102-111 (``stage_ids_this_rank``, style 'loop').
    """
    n = pp * stages_per_rank
    if n > num_layers:
        raise LayoutError(f"{n} stages cannot be more than the {num_layers} layers (torchtitan's split)")
    base, extra = divmod(num_layers, n)
    bounds, cur = [], 0
    for i in range(n - 1):
        step = base + (1 if i > 0 and extra > 0 else 0)
        if i > 0 and extra > 0:
            extra -= 1
        cur += step
        bounds.append(cur)
    counts = [b - a for a, b in zip([0] + bounds, bounds + [num_layers])]
    if any(c < 1 for c in counts):
        raise LayoutError(f"torchtitan's split of {num_layers} layers into {n} stages leaves an empty stage")
    return Layout([[counts[c * pp + r] for c in range(stages_per_rank)] for r in range(pp)])


def default_split(prof: Optional[Profile], num_layers: int, pp: int, stages_per_rank: int = 1) -> Optional[Layout]:
    """The split a framework builds itself when the plan states none (``Profile.default_split``); None where
    it is the evaluator's even split (or pp is 1)."""
    if prof is None or pp < 2 or prof.default_split == "even":
        return None
    if prof.default_split == "torchtitan_split_points":
        return torchtitan_split_points(num_layers, pp, stages_per_rank)
    if prof.default_split == "torchtitan_fqn_per_part":
        return torchtitan_split(num_layers, pp, stages_per_rank)
    raise ValueError(f"profile {prof.name}: unknown default_split {prof.default_split!r}")
