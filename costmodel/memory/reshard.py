"""The cost of moving a running job from one plan to another (issue 43): checkpoint bytes resharded, their
transfer time, a restart, and the replan objective that prices the move against the step.

Which bytes move. The checkpoint holds, per parameter, ``checkpoint_bytes_per_param`` bytes (bf16 weights 2 +
fp32 master weights, Adam m and v 12 = 14; ZeRO, Rajbhandari et al. SC'20 §3.1, "16Ψ" less the 2 bytes of
gradients, which are not checkpointed). Four state classes are partitioned by the plan's degrees:

* dense weights: by (TP, PP, VPP), and by the dense ZeRO shard (``Plan.dense_shard``, DP·CP / zero_replicas)
  under ZeRO-3;
* dense optimizer states (master weights, m, v): by (TP, PP, VPP), and by the dense shard under ZeRO ≥ 1;
* expert weights and expert optimizer states: the same with (EP, ETP, PP, VPP) and ``Plan.expert_shard``.

A class whose partition is unchanged stays where it is: nothing is read from storage when each of its shards
still has a copy on a surviving GPU (its replication ``N / partitions`` ≥ 2; else the lost GPUs' share is read
back), and each added GPU receives its shard from a peer over the network. A class whose partition changes is
resharded: all of its bytes are read from the checkpoint store, then each shard is sent to its other replicas.
The stage split (``stage_layers``) is not priced: with the same PP and VPP a split that changes moves layers,
and this model does not count them (a limit, docs/replan.md).

Time: ``restart_s + storage bytes / (nodes × storage_read_gbps_per_node) + peer bytes per GPU / the GPU's
network bandwidth`` (``GPU.inter_node_bandwidth_gbps``, per GPU per direction; costmodel/spec/hardware.py).

The objective (docs/replan.md): over the caller's expected time ``T`` to the next change, a plan of step time
``s`` and reconfiguration time ``R`` completes ``(T − R) / s`` steps; the replan maximises that, i.e. minimises
the effective step time ``J = s · T / (T − R)`` (infinite when ``R ≥ T``: no step before the next change).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from pydantic import BaseModel, ConfigDict, Field

GB = 1e9


class ReshardAssumptions(BaseModel):
    """The named, overridable assumptions of the reconfiguration cost, each with its source."""

    model_config = ConfigDict(extra="forbid")

    checkpoint_bytes_per_param: float = Field(
        14.0, gt=0, description="bf16 weights 2 + fp32 master, Adam m, v 12 (ZeRO, SC'20 §3.1: 16Ψ less gradients)")
    storage_read_gbps_per_node: float = Field(
        2000.0 / 2048, gt=0, description="GB/s of checkpoint reads per node: Llama 3's storage sustains 2 TB/s "
        "(Llama 3 paper, arXiv:2407.21783 §3.3.1) for 16,384 GPUs = 2,048 nodes of 8")
    peer_gbps_per_gpu: Optional[float] = Field(
        None, gt=0, description="GB/s per GPU for shard copies between GPUs; default: the GPU's inter-node network")
    restart_s: float = Field(
        600.0, ge=0, description="a restart: relaunch, NCCL init, data loader, first step. An assumption: Llama 3 "
        "§3.3.4 names job startup as an overhead but gives no figure; set it from your own restarts")


@dataclass(frozen=True)
class Reconfiguration:
    """What moving from one plan to another costs."""

    storage_bytes: float  # read back from the checkpoint store
    peer_bytes_per_gpu: float  # received by the busiest GPU from its peers
    moved_classes: tuple[str, ...]  # the state classes whose partition changed
    time_s: float  # restart + transfers

    @property
    def resharded_bytes(self) -> float:
        return self.storage_bytes


def _classes(arch, plan) -> dict[str, tuple[float, tuple, int]]:
    """State class -> (parameters, partition key, number of partitions)."""
    expert = arch.num_moe_layers * arch.expert_params_per_layer if arch.spec.moe is not None else 0
    dense = arch.total_params - expert
    dshard = plan.dense_shard if plan.zero_stage >= 1 else 1
    eshard = plan.expert_shard if plan.zero_stage >= 1 else 1
    base = (plan.tp, plan.pp, plan.vpp)
    ebase = (plan.ep, plan.etp, plan.pp, plan.vpp)
    w3 = plan.dense_shard if plan.zero_stage == 3 else 1
    e3 = plan.expert_shard if plan.zero_stage == 3 else 1
    out = {"dense_weights": (dense, base + (w3,), plan.tp * plan.pp * w3),
           "dense_optimizer": (dense, base + (dshard,), plan.tp * plan.pp * dshard)}
    if expert:
        out["expert_weights"] = (expert, ebase + (e3,), plan.ep * plan.etp * plan.pp * e3)
        out["expert_optimizer"] = (expert, ebase + (eshard,), plan.ep * plan.etp * plan.pp * eshard)
    return out


def reconfiguration(arch, old, new, *, lost_gpus: int, added_gpus: int, gpus_per_node: int,
                    network_gbps_per_gpu: float, a: ReshardAssumptions) -> Reconfiguration:
    """The reconfiguration from plan ``old`` (on its GPUs, ``lost_gpus`` of them gone) to plan ``new`` (``added_gpus``
    new GPUs join). ``old`` and ``new`` are anything with ParallelDims's degrees (a Plan or a Choice)."""
    split = [("weights", 2.0 / 14.0), ("optimizer", 12.0 / 14.0)]  # shares of checkpoint_bytes_per_param
    share = dict(split)
    old_c, new_c = _classes(arch, old), _classes(arch, new)
    storage = peer = 0.0
    moved = []
    for name, (params, key, parts) in new_c.items():
        nbytes = params * a.checkpoint_bytes_per_param * share[name.split("_")[1]]
        shard = nbytes / parts
        before = old_c.get(name)
        replicas_new = new.num_gpus // parts
        if before is not None and before[1] == key:
            if old.num_gpus // before[2] < 2 and lost_gpus:  # a shard without a copy: the lost share read back
                storage += nbytes * lost_gpus / old.num_gpus
            if added_gpus:
                peer += shard
            continue
        moved.append(name)
        storage += nbytes
        if replicas_new > 1:  # the shard read once, sent to its other replicas
            peer += shard
    nodes = max(1, math.ceil(new.num_gpus / gpus_per_node))
    bw = a.peer_gbps_per_gpu or network_gbps_per_gpu
    time_s = a.restart_s + storage / (nodes * a.storage_read_gbps_per_node * GB) + peer / (bw * GB)
    return Reconfiguration(storage, peer, tuple(moved), time_s)


def effective_step_time_s(step_time_s: float, reconfiguration_s: float, horizon_s: float) -> float:
    """J = s · T / (T − R): the wall time per completed step over the horizon T (infinite when R ≥ T)."""
    if reconfiguration_s >= horizon_s:
        return math.inf
    return step_time_s * horizon_s / (horizon_s - reconfiguration_s)


__all__ = ["ReshardAssumptions", "Reconfiguration", "reconfiguration", "effective_step_time_s"]
