"""Device mesh: which ranks form each parallel group, and whether a group sits inside an NVLink domain.

Rank order follows Megatron's default ``tp-cp-dp-pp`` (innermost first) as in seed 003's ``mesh.py``:
``mesh = arange(PP·DP·CP·TP).reshape(PP, DP, CP, TP)``; adjacent ranks share a node, so the innermost
axes land on NVLink. MoE layers regroup the same ranks of a stage as expert-TP × EP × expert-DP
(Megatron's MoE parallel folding), expert-TP innermost.
"""

from __future__ import annotations

import functools
import math

import numpy as np

# the strided-group answers below read their integer arguments alone: memoized (the solver asks them for every choice
# whose costs or layer times it computes, each once a NumPy pass over one period of ranks)
RANK_PATTERN_CACHE = 1 << 14

MESH_AXES = ("pp", "dp", "cp", "tp")  # outermost first, as in the reshape


def build_mesh(tp: int, cp: int, dp: int, pp: int) -> np.ndarray:
    return np.arange(pp * dp * cp * tp).reshape(pp, dp, cp, tp)


def groups(mesh: np.ndarray, axis: str) -> np.ndarray:
    """Every group along ``axis``: one row per group (a 'line' of the mesh along that axis)."""
    a = MESH_AXES.index(axis)
    return np.moveaxis(mesh, a, -1).reshape(-1, mesh.shape[a])


def coordinates(mesh: np.ndarray, rank: int) -> dict[str, int]:
    idx = np.argwhere(mesh == rank)[0]
    return {name: int(i) for name, i in zip(MESH_AXES, idx)}


def groups_within_domain(group_rows: np.ndarray, domain_size: int) -> bool:
    """True when every group's ranks share one NVLink domain (rank // domain_size)."""
    nodes = group_rows // domain_size
    return bool((nodes == nodes[:, :1]).all())


@functools.lru_cache(maxsize=RANK_PATTERN_CACHE)
def span_within_domain(stride: int, size: int, domain_size: int, num_gpus: int | None = None) -> bool:
    """Closed form of :func:`groups_within_domain` for a strided group.

    A group of ``size`` ranks with stride ``stride`` (product of the inner axes) lies in the block of
    stride·size consecutive ranks that contains it; the group is local iff every such block of the
    ``num_gpus`` ranks stays inside one domain: always when the block divides the domain or the whole
    job fits in one domain (64 GPUs of an NVL72), otherwise block by block -- over one period of the
    pattern, lcm(block, domain) ranks, since block starts and domain boundaries both repeat with it.
    """
    if size <= 1:
        return True
    span = stride * size
    if span > domain_size:
        return False
    if domain_size % span == 0 or (num_gpus is not None and num_gpus <= domain_size):
        return True
    if num_gpus is None:
        return False
    starts = np.arange(0, min(num_gpus, math.lcm(span, domain_size)), span)
    return bool((starts // domain_size == (starts + span - 1) // domain_size).all())


@functools.lru_cache(maxsize=RANK_PATTERN_CACHE)
def ep_members_per_domain(stride: int, size: int, domain_size: int, num_gpus: int | None = None) -> int:
    """Members of a strided group (an EP group: stride expert-TP) that share one NVLink domain: all of
    them when the group fits in a domain, else domain_size // stride (at least 1)."""
    if size <= 1 or span_within_domain(stride, size, domain_size, num_gpus):
        return max(1, size)
    return max(1, min(size, domain_size // stride))


@functools.lru_cache(maxsize=RANK_PATTERN_CACHE)
def ep_domain_split(stride: int, size: int, domain_size: int, num_gpus: int | None = None) -> tuple[int, int]:
    """(fewest members of a strided group that share a rank's NVLink domain, most domains one group spans): what
    the EP all-to-all's slowest rank sees (costmodel/communication/comm.py). Aligned groups give (:func:`ep_members_per_domain`,
    ceil(size / it)); a group that straddles a boundary the domains do not divide (an EP 64 block of ranks 64-127
    on NVL72 domains of 72: 8 ranks in the first, 56 in the second) leaves its smaller part's ranks sending the rest
    of their copies over the network. Counted over one period lcm(stride·size, domain) of the job's ranks (or the
    whole job when shorter), as :func:`span_within_domain`."""
    local = ep_members_per_domain(stride, size, domain_size, num_gpus)
    aligned = (local, -(-size // max(1, min(local, size))))
    span = stride * size
    if num_gpus is None or size <= 1 or span_within_domain(stride, size, domain_size, num_gpus):
        return aligned
    period = min(math.lcm(span, domain_size), num_gpus - num_gpus % span)
    if period < span or period * size > 1 << 22:  # no full block, or a period too long to count: the aligned form
        return aligned
    # rows: one group each (block, expert-TP offset), its members' domains in rank order
    d = np.moveaxis(np.arange(period).reshape(-1, size, stride) // domain_size, 1, -1).reshape(-1, size)
    fewest = int((d[:, :, None] == d[:, None, :]).sum(-1).min())
    spans = int((1 + (d[:, 1:] != d[:, :-1]).sum(1)).max())
    return fewest, spans


def group_strides(tp: int, cp: int, dp: int, etp: int = 1) -> dict[str, tuple[int, int]]:
    """(stride, size) of each communication group in the mesh order tp-cp-dp-pp.

    ``dp_cp`` is the gradient/ZeRO group (DP × CP, as Megatron's distributed optimizer shards over it);
    ``ep`` groups are folded inside the tp·cp·dp ranks of a stage with expert-TP innermost.
    """
    return {
        "tp": (1, tp),
        "cp": (tp, cp),
        "dp_cp": (tp, cp * dp),
        "pp": (tp * cp * dp, 0),  # size filled by caller
        "ep": (etp, 0),
    }


def world_key(num_gpus: int, domain_size: int, groups) -> int | None:
    """The world size as :func:`span_within_domain`, :func:`ep_members_per_domain` and :func:`ep_domain_split` read
    it for the strided ``groups`` ((stride, size) pairs): None where their answers for every group are those of any
    larger job, else ``num_gpus``. A group of one rank, or whose block stride·size divides the domain, reads no world
    size; another's answers are the same for every ``num_gpus`` ≥ L = lcm(block, domain) (> the domain): both count
    over min(num_gpus, L) ranks, ``ep_domain_split`` over num_gpus less its remainder mod the block, ≥ L as L is a
    multiple of the block. Cost pieces keyed by it in place of the world size (costmodel/evaluation/layer_comm.py,
    layer_costs.py, moe_layer.py; solver/bounds.py ``layer_key``) are shared by requests at another GPU count
    (tests/costmodel/communication/test_mesh.py checks it against the answers at every size)."""
    threshold = 0
    for stride, size in groups:
        span = stride * size
        if size > 1 and not (span <= domain_size and domain_size % span == 0):
            threshold = max(threshold, math.lcm(span, domain_size))
    return None if num_gpus >= threshold else num_gpus


def layer_groups(tp: int, cp: int, ep: int, etp: int) -> tuple[tuple[int, int], ...]:
    """The strided groups a layer's times read the mesh for (:func:`world_key`): TP, CP, expert-TP, EP, and the two
    levels of every split of CP into an all-to-all level of ``a`` ranks (stride tp) and a ring of cp / a (stride
    tp·a; costmodel/communication/comm.py ``cp_attention_comm``), whichever ``a`` the CP comm type picks."""
    cp_levels = tuple(g for a in range(1, cp + 1) if cp % a == 0 for g in ((tp, a), (tp * a, cp // a)))
    return ((1, tp), (tp, cp), (1, etp), (etp, ep)) + cp_levels


@functools.lru_cache(maxsize=RANK_PATTERN_CACHE)
def layer_world_key(num_gpus: int, domain_size: int, tp: int, cp: int, ep: int = 1, etp: int = 1) -> int | None:
    """:func:`world_key` of :func:`layer_groups` (a dense layer's: ep = etp = 1), memoized (asked once per choice)."""
    return world_key(num_gpus, domain_size, layer_groups(tp, cp, ep, etp))
