"""Where a plan on several ``cluster.pools`` runs: the global ranks of each pipeline stage, the nodes of each pool
that hold them, and the host order a launcher must start the nodes in (issue 21).

Megatron-Core numbers its ranks in the order ``tp-cp-ep-dp-pp``, pipeline rank the slowest-varying
(``RankGenerator`` and ``generate_masked_orthogonal_rank_groups``, megatron/core/parallel_state.py:242-300 and
413-470 at core_v0.15.3 = 309ffca6; the default ``order: str = "tp-cp-ep-dp-pp"`` at :527, passed by
megatron/training/initialize.py:372 unless ``--use-tp-pp-dp-mapping``; the expert generator at
parallel_state.py:752-760 keeps pp last too). So stage ``s`` holds the global ranks ``[s·w, (s+1)·w)`` with
``w = tp·cp·dp``, whatever the expert layout. Megatron-Bridge initializes with the same order
(src/megatron/bridge/training/initialize.py:820 at v0.6.0). torchrun gives node ``n`` (``--node-rank``) the
ranks after those of nodes ``0..n-1`` (``torch.distributed.elastic`` assigns global ranks by group rank), so
placing stages on pools is starting each pool's nodes at the right node rank.

Consecutive stages on one pool form a :class:`RankBlock`: whole nodes of that pool (or part of one node when
the block is smaller than a node). A block that would share a node with another pool's stages cannot be
placed; it is refused naming ``plan.stage_pools``.

The exported Megatron arguments carry the host order as a bash array, ``PARPLAN_HOST_ORDER=( pool1:1x8 pool0:1x8 )``
(one ``pool<k>:<nodes>x<processes per node>`` entry per block in rank order), which
``frameworks/import_plan.py`` reads back into ``plan.stage_pools``.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Optional

from parplan.costmodel.spec.spec import Plan, Spec
from parplan.frameworks.export_common import ExportError

HOST_ORDER_ARRAY = "PARPLAN_HOST_ORDER"
PLACED_TARGETS = ("megatron", "bridge")  # targets whose rank order (tp-cp-ep-dp-pp) is cited above
_ENTRY = re.compile(r"^pool(\d+):(\d+)x(\d+)$")


@dataclass(frozen=True)
class RankBlock:
    """Consecutive pipeline stages on one pool: ``stages`` (first, last), their global ranks ``ranks`` (first,
    last), and the pool's ``nodes`` that run them with ``per_node`` processes each."""

    pool: int
    gpu: str
    stages: tuple[int, int]
    ranks: tuple[int, int]
    nodes: int
    per_node: int

    @property
    def entry(self) -> str:
        """The block's ``PARPLAN_HOST_ORDER`` entry."""
        return f"pool{self.pool}:{self.nodes}x{self.per_node}"


def several_pools(spec: Spec) -> bool:
    """The spec's cluster has more than one pool (a plan on it needs ``stage_pools``)."""
    return spec.cluster.pools is not None and len(spec.cluster.pools) > 1


def ranks_per_stage(plan: Plan) -> int:
    """tp·cp·dp: the global ranks of one pipeline stage (pp is the slowest rank dimension)."""
    return plan.tp * plan.cp * plan.dp


def rank_blocks(spec: Spec, plan: Plan) -> list[RankBlock]:
    """The plan's stages grouped into runs on one pool, in rank order, each on whole nodes of its pool."""
    if plan.stage_pools is None:
        raise ExportError("plan.stage_pools: required on several cluster.pools (the pool of each pipeline stage)")
    pools, width, out = spec.cluster.pools, ranks_per_stage(plan), []
    first = 0
    for s in range(1, plan.pp + 1):
        if s < plan.pp and plan.stage_pools[s] == plan.stage_pools[first]:
            continue
        k = plan.stage_pools[first]
        pool, ranks = pools[k], (s - first) * width
        g = pool.gpus_per_node
        if ranks > g and ranks % g:
            raise ExportError(f"plan.stage_pools: stages {first}-{s - 1} on pool {k} ({pool.gpu}) use {ranks} GPUs, "
                              f"not whole {g}-GPU nodes (cluster.pools[{k}].gpus_per_node), so a node would hold "
                              f"ranks of two pools; no launcher can place them")
        nodes, per_node = (1, ranks) if ranks <= g else (ranks // g, g)
        out.append(RankBlock(k, pool.gpu, (first, s - 1), (first * width, s * width - 1), nodes, per_node))
        first = s
    return out


def host_order_lines(spec: Spec, plan: Plan) -> list[str]:
    """Comment lines: why the order matters, then one line per block (ranks, stages, pool, nodes)."""
    w = ranks_per_stage(plan)
    lines = [f"Host order (plan.stage_pools = {list(plan.stage_pools or [])}): Megatron-Core numbers ranks "
             f"tp-cp-ep-dp-pp (pipeline slowest, parallel_state.py:527 at core_v0.15.3), so stage s runs on global "
             f"ranks [s*{w}, (s+1)*{w}); start the nodes in this order (torchrun --node-rank), each pool's on its "
             f"own GPUs:"]
    node = 0
    for b in rank_blocks(spec, plan):
        stages = f"stage {b.stages[0]}" if b.stages[0] == b.stages[1] else f"stages {b.stages[0]}-{b.stages[1]}"
        nodes = f"node rank {node}" if b.nodes == 1 else f"node ranks {node}-{node + b.nodes - 1}"
        lines.append(f"  ranks {b.ranks[0]}-{b.ranks[1]}: {stages} on pool {b.pool} ({b.gpu}), {nodes}: "
                     f"{b.nodes} x {b.per_node} GPUs")
        node += b.nodes
    return lines


def host_order_array(spec: Spec, plan: Plan) -> str:
    """``PARPLAN_HOST_ORDER=( ... )``: the machine-readable host order (read back by :func:`read_host_order`)."""
    return f"{HOST_ORDER_ARRAY}=( " + " ".join(b.entry for b in rank_blocks(spec, plan)) + " )\n"


_ARRAY = re.compile(rf"^\s*{HOST_ORDER_ARRAY}=\((.*?)\)", re.S | re.M)


def read_host_order(text: str) -> Optional[list[tuple[int, int, int]]]:
    """``[(pool, nodes, processes per node)]`` from a ``PARPLAN_HOST_ORDER`` array in ``text``, or None."""
    match = _ARRAY.search(text)
    if match is None:
        return None
    out = []
    for token in shlex.split(match.group(1), comments=True):
        m = _ENTRY.match(token)
        if m is None:
            raise ExportError(f"{HOST_ORDER_ARRAY}: entry {token!r} is not pool<k>:<nodes>x<processes per node>")
        out.append((int(m.group(1)), int(m.group(2)), int(m.group(3))))
    if not out:
        raise ExportError(f"{HOST_ORDER_ARRAY}: empty")
    return out


def stage_pools_from_host_order(order: list[tuple[int, int, int]], width: int, pp: int) -> list[int]:
    """The pool of each stage: block ``(k, nodes, per_node)`` holds ``nodes·per_node / width`` stages on pool k."""
    pools: list[int] = []
    for k, nodes, per_node in order:
        ranks = nodes * per_node
        if ranks % width:
            raise ExportError(f"{HOST_ORDER_ARRAY}: pool{k}:{nodes}x{per_node} holds {ranks} ranks, not whole "
                              f"stages of tp·cp·dp = {width}")
        pools += [k] * (ranks // width)
    if len(pools) != pp:
        raise ExportError(f"{HOST_ORDER_ARRAY}: {len(pools)} stages for --pipeline-model-parallel-size {pp}")
    return pools


def refuse_unplaced_target(target: str) -> None:
    """Targets other than Megatron-Core's cannot place stages on pools here: one line naming the field."""
    if target not in PLACED_TARGETS:
        raise ExportError(f"plan.stage_pools: {target} cannot be given a per-stage placement on cluster.pools here "
                          f"(the host order is written for Megatron-Core's rank order tp-cp-ep-dp-pp only, "
                          f"parallel_state.py:527 at core_v0.15.3); export to megatron or bridge")


__all__ = ["RankBlock", "rank_blocks", "several_pools", "ranks_per_stage", "host_order_lines", "host_order_array",
           "read_host_order", "stage_pools_from_host_order", "refuse_unplaced_target", "HOST_ORDER_ARRAY",
           "PLACED_TARGETS"]
