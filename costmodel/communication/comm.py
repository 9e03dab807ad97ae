"""Communication of one choice: its groups' links, the DP/ZeRO groups, and the collectives its layers run.

:class:`Comm` owns the tier link of every communication group (NVLink or network, :func:`link` over the mesh
order tp-cp-dp-pp of :mod:`mesh`), the hierarchical DP/ZeRO collective, the :class:`ZeroGroup` of the dense and
the expert parameters (HSDP included), the EP all-to-all, the TP/ETP rings and the overlap rule
(:meth:`Comm.exposed`); :func:`cp_attention_comm` prices a layer's CP attention communication by comm type
(derivations in :mod:`context_parallel`). Alpha-beta model: seed 001 §2.3; collectives: :mod:`collectives`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from parplan.costmodel.moe import moe_comm, moe_dispatch
from parplan.costmodel.spec.assumptions import Assumptions
from parplan.costmodel.communication.collectives import all_to_all_tiers_s, ring_gather_time_s
from parplan.costmodel.communication.context_parallel import (CpComm, a2a_group_size, allgather_comm, ring_aggregate_s,
                                                ring_exposed_s, ulysses_all_to_all_s, ulysses_comm)
from parplan.costmodel.spec.hardware import GPU, nvlink_busbw_gbps
from parplan.costmodel.memo import memoized
from parplan.costmodel.communication.mesh import ep_domain_split, ep_members_per_domain, span_within_domain

if TYPE_CHECKING:  # pragma: no cover  (the costs read a choice by attribute; no import cycle with costmodel.evaluation.choice)
    from parplan.costmodel.compute.architecture import Architecture
    from parplan.costmodel.spec.degrees import Choice
    from parplan.costmodel.spec.spec import MoESpec


@dataclass(frozen=True)
class Link:
    """One communication group's tier: bandwidth in B/s and latency in s."""

    nvlink: bool
    bandwidth_Bps: float
    latency_s: float


@dataclass(frozen=True)
class ZeroGroup:
    """The group a ZeRO/DP collective runs in: ``shards`` ranks over ``link`` (the whole DP·CP or expert-DP
    group, or under HSDP one shard group), and ``replicas`` copies of it over ``replica_link`` (HSDP)."""

    link: Link
    shards: int
    replica_link: Link | None = None
    replicas: int = 1


def tier_links(gpu: GPU, a: Assumptions) -> tuple[Link, Link]:
    """(NVLink, network) tiers as achieved: line rate x efficiency, catalog latency x factor."""
    on = a.include_latency
    nv = Link(True, gpu.intra_node_bandwidth_gbps * 1e9 * a.intra_node_bandwidth_efficiency,
              gpu.intra_node_latency_us * 1e-6 * a.intra_node_latency_factor if on else 0.0)
    net = Link(False, gpu.inter_node_bandwidth_gbps * 1e9 * a.inter_node_bandwidth_efficiency,
               gpu.inter_node_latency_us * 1e-6 * a.inter_node_latency_factor if on else 0.0)
    return nv, net


def with_busbw(L_: Link, gpu: GPU, a: Assumptions, kind: str) -> Link:
    """``L_`` at the measured NCCL bus bandwidth of collective ``kind`` when it is the NVLink tier and the GPU has
    a measurement (hardware.py NVLINK_BUSBW_GBPS, assumptions.collective_busbw_priors, x nvlink_busbw_scale)."""
    if not (L_.nvlink and a.collective_busbw_priors):
        return L_
    gbps = nvlink_busbw_gbps(gpu, kind, a.nvlink_sharp_all_reduce)
    return L_ if gbps is None else Link(True, gbps * 1e9 * a.nvlink_busbw_scale, L_.latency_s)


def link(stride: int, size: int, domain: int, gpu: GPU, a: Assumptions, num_gpus: int | None = None) -> Link:
    nv, net = tier_links(gpu, a)
    return nv if span_within_domain(stride, size, domain, num_gpus) else net


@dataclass(frozen=True)
class Comm:
    """The communication of one choice on ``gpu`` with NVLink domains of ``domain`` GPUs: ``links`` by group
    (tp, cp, dp_cp, pp, ep, edp, HSDP's dp/edp shard and replica groups, etp), the ZeRO groups of the dense and
    the expert parameters, the CP a2a level's size and the EP dispatch's bytes per element."""

    c: Choice
    gpu: GPU
    a: Assumptions
    domain: int
    nvlink: Link  # the NVLink tier, as achieved (tier_links)
    network: Link  # the network tier, as achieved
    links: dict[str, Link]
    dense_group: ZeroGroup
    expert_group: ZeroGroup
    cp_a2a: int  # CP comm type: the a2a level's size (context_parallel.py; 1 at cp = 1)
    dispatch_bytes: float  # per dispatched element (moe_comm.py; the combine is BF16)

    @staticmethod
    def of(c: Choice, gpu: GPU, a: Assumptions, domain: int, memo: dict | None = None) -> "Comm":
        """The communication of ``c``; with ``memo`` (one per GPU and assumptions: the solver's Problem, as
        gemm_rates.GemmRates.of's) shared by the choices of equal degrees, ZeRO replicas, SP, CP comm type and FP8
        dispatch, all of the choice it reads, each copy holding its own choice (DataParallel.of reads its
        optimizer fields)."""
        if memo is None:
            return Comm._of(c, gpu, a, domain)
        key = ("Comm", c.tp, c.cp, c.pp, c.dp, c.ep, c.etp, c.zero_replicas, c.sequence_parallel_on, c.cp_comm_type,
               c.moe_fp8_dispatch, domain)
        hit = memoized(memo, key, lambda: Comm._of(c, gpu, a, domain))
        if hit.c is c:
            return hit
        out = object.__new__(Comm)  # a copy holding ``c`` (dataclasses.replace without re-running __init__)
        out.__dict__.update(hit.__dict__)
        out.__dict__["c"] = c
        return out

    @staticmethod
    def _of(c: Choice, gpu: GPU, a: Assumptions, domain: int) -> "Comm":
        n = c.num_gpus
        nv, net = tier_links(gpu, a)

        def at(stride: int, size: int) -> Link:  # link(stride, size, ...) with the tiers computed once
            return nv if span_within_domain(stride, size, domain, n) else net

        ring = "reduce_scatter"  # DP/ZeRO and ETP rings; TP without SP runs all-reduces
        links = {
            "tp": with_busbw(at(1, c.tp), gpu, a, ring if c.sequence_parallel_on else "all_reduce"),
            "cp": at(c.tp, c.cp),
            "dp_cp": with_busbw(at(c.tp, c.cp * c.dp), gpu, a, ring),
            "pp": at(c.stage_ranks, c.pp),
            "ep": at(c.etp, c.ep),
            "edp": with_busbw(at(c.etp * c.ep, c.expert_dp), gpu, a, ring),
        }

        def collective(name: str, stride: int, size: int) -> Link:
            return hierarchical_collective_link(links[name], stride, domain, nv.bandwidth_Bps, a, size, nv.latency_s)

        # TP across NVLink domains (tp > domain): the same NCCL ring argument as DP/ZeRO, each domain's k = domain
        # consecutive members share its NICs (hierarchical_collective_link); on NVLink the link is unchanged
        links["tp"] = collective("tp", 1, c.tp)
        R = c.zero_replicas
        if R > 1:  # HSDP: shard groups of consecutive ranks, their replicas strided by a shard group's span
            links["dp_shard"] = with_busbw(at(c.tp, c.dense_shard), gpu, a, ring)
            links["dp_replica"] = with_busbw(at(c.tp * c.dense_shard, R), gpu, a, "all_reduce")
            links["edp_shard"] = with_busbw(at(c.etp * c.ep, c.expert_shard), gpu, a, ring)
            links["edp_replica"] = with_busbw(at(c.etp * c.ep * c.expert_shard, R), gpu, a, "all_reduce")
            dense_grp = ZeroGroup(collective("dp_shard", c.tp, c.dense_shard), c.dense_shard,
                                  collective("dp_replica", c.tp * c.dense_shard, R), R)
            expert_grp = ZeroGroup(collective("edp_shard", c.etp * c.ep, c.expert_shard), c.expert_shard,
                                   collective("edp_replica", c.etp * c.ep * c.expert_shard, R), R)
        else:
            dense_grp = ZeroGroup(collective("dp_cp", c.tp, c.cp * c.dp), c.dense_dp)
            expert_grp = ZeroGroup(collective("edp", c.etp * c.ep, c.expert_dp), c.expert_dp)
        links["etp"] = with_busbw(at(1, c.etp), gpu, a, "all_gather")
        cp_a2a = a2a_group_size(c.cp_comm_type, c.cp, ep_members_per_domain(c.tp, c.cp, domain, n)) if c.cp > 1 else 1
        out = Comm(c, gpu, a, domain, nv, net, links, dense_grp, expert_grp, cp_a2a,
                   moe_comm.dispatch_bytes_per_element(c.moe_fp8_dispatch, a.ep_dispatch_bytes))
        object.__setattr__(out, "_tiers", {})  # all_to_all_tiers_s's answers, shared by the copies of :meth:`of`
        return out

    def ring_gather_s(self, group: str, size: int, group_bytes: float) -> float:
        """One ring all-gather (or reduce-scatter) of ``group_bytes`` over ``size`` ranks of ``group``'s link."""
        L = self.links[group]
        return ring_gather_time_s(group_bytes, size, L.latency_s, L.bandwidth_Bps)

    def all_to_all_s(self, token_bytes: float, moe: MoESpec) -> float:
        """One dispatch plus one combine of ``token_bytes`` per routed token copy and element byte, by the
        dispatcher (costmodel/moe/moe_dispatch.py), its busiest receiver's share (``busiest_rank_load``) included."""
        return sum(max(tiers) for tiers in self.all_to_all_tiers_s(token_bytes, moe))

    def all_to_all_busy(self, token_bytes: float, moe: MoESpec) -> tuple[float, float]:
        """(NVLink, network): the share of :meth:`all_to_all_s` during which the all-to-all keeps each tier busy, its
        time on the tier over its time (NVLink 1 inside one domain; DeepEP's NVLink forwarding beside its IB sends
        below 1; costmodel/communication/shared_links.py)."""
        tiers = self.all_to_all_tiers_s(token_bytes, moe)
        total = sum(max(t) for t in tiers)
        if total <= 0:
            return 0.0, 0.0
        return sum(nv for nv, _ in tiers) / total, sum(net for _, net in tiers) / total

    def dispatch_share(self, token_bytes: float, moe: MoESpec) -> float:
        """The dispatch's share of :meth:`all_to_all_s` (its first tier pair's larger time over the sum; FP8
        dispatch makes it the smaller part); 0.5 where the all-to-all is one collective or takes no time."""
        times = [max(t) for t in self.all_to_all_tiers_s(token_bytes, moe)]
        return times[0] / sum(times) if len(times) == 2 and sum(times) > 0 else 0.5

    def all_to_all_shares(self, token_bytes: float, moe: MoESpec) -> tuple[tuple[float, float], float]:
        """(:meth:`all_to_all_busy`, :meth:`dispatch_share`) from one read of the tiers, the same floats."""
        tiers = self.all_to_all_tiers_s(token_bytes, moe)
        times = [max(t) for t in tiers]
        total = sum(times)
        busy = (0.0, 0.0) if total <= 0 else (sum(nv for nv, _ in tiers) / total, sum(net for _, net in tiers) / total)
        return busy, (times[0] / total if len(times) == 2 and total > 0 else 0.5)

    def all_to_all_tiers_s(self, token_bytes: float, moe: MoESpec) -> list[tuple[float, float]]:
        """(NVLink, network) time of the dispatch and of the combine of :meth:`all_to_all_s` (each takes the larger).
        Kept by (token bytes, the MoE section) for the copies of one :meth:`of` (they read no field of the choice
        outside its key: the degrees, the FP8 dispatch): an MoE layer asks it thrice, for :meth:`all_to_all_s`,
        :meth:`all_to_all_busy` and :meth:`dispatch_share`. Read it, never change it."""
        kept = self.__dict__.get("_tiers")
        if kept is None:
            return self._all_to_all_tiers_s(token_bytes, moe)
        hit = kept.get((token_bytes, id(moe)))
        if hit is None or hit[0] is not moe:
            hit = kept[(token_bytes, id(moe))] = (moe, self._all_to_all_tiers_s(token_bytes, moe))
        return hit[1]

    def _all_to_all_tiers_s(self, token_bytes: float, moe: MoESpec) -> list[tuple[float, float]]:
        c, a = self.c, self.a
        if c.ep <= 1:
            return [(0.0, 0.0)]
        busiest = moe_dispatch.busiest_load(c.ep, a, moe)
        Le = self.links["ep"]
        on_link = lambda t: (t, 0.0) if Le.nvlink else (0.0, t)  # noqa: E731  (one tier: the EP group's link)
        if moe.dispatcher == "allgather":  # all-gather of the group's tokens, reduce-scatter of the outputs: BF16
            return [on_link(2 * ring_gather_time_s(moe_dispatch.allgather_bytes_per_rank(token_bytes * 2.0, c.ep),
                                                   c.ep, Le.latency_s, Le.bandwidth_Bps))]
        if not a.hierarchical_all_to_all:  # textbook: a ring over the EP link, (ep-1)·alpha in sequence
            return [on_link(ring_gather_time_s(token_bytes * moe.top_k * b * busiest, c.ep, Le.latency_s,
                                               Le.bandwidth_Bps)) for b in (self.dispatch_bytes, 2.0)]
        local, domains = ep_domain_split(c.etp, c.ep, self.domain, c.num_gpus)  # the slowest rank's (mesh.py)
        remote = (moe_dispatch.expected_remote_nodes(moe.num_experts, moe.top_k, domains, moe.max_nodes_per_token)
                  if moe.dispatcher == "flex" else None)
        nv, net = with_busbw(self.nvlink, self.gpu, a, "all_to_all"), self.network
        return [all_to_all_tiers_s(token_bytes * b * busiest, moe.top_k, c.ep, local, nv.bandwidth_Bps,
                                   nv.latency_s, net.bandwidth_Bps, net.latency_s, remote)
                for b in (self.dispatch_bytes, 2.0)]

    def exposed(self, comm_s: float, overlap: float, window_s: float) -> float:
        """Traffic left on the critical path: the fixed fraction, or more when the compute it can hide
        behind (``window_s``) is shorter than the traffic."""
        hidden_share = comm_s * (1 - overlap)
        if self.a.overlap_limited_by_compute:
            return max(hidden_share, comm_s - window_s)
        return hidden_share


def hierarchical_collective_link(L_: Link, stride: int, domain: int, nv_bw: float, a: Assumptions,
                                 size: int | None = None, nv_latency_s: float | None = None) -> Link:
    """The achieved link of a DP/ZeRO collective over ``L_`` whose ``size`` members sit ``stride`` ranks apart, in
    NVLink domains of ``domain`` GPUs whose NVLink tier achieves ``nv_bw`` B/s and ``nv_latency_s`` per step
    (:func:`tier_links`).

    Bandwidth: DP/ZeRO collectives (ring reduce-scatter / all-gather) of a group with k members in each NVLink
    domain: the ring crosses the network once per domain and the k members share the domain's NICs, so
    each GPU moves 1/k of its ring bytes over its NIC (NVLink carries the rest): k x the NIC bandwidth
    ideally, 1 + (k-1)·hierarchical_collective_efficiency as achieved, at most NVLink's
    (hierarchical_collectives; textbook: every GPU's bytes over its own NIC). The TP group's rings across
    domains (tp > domain, stride 1: k = domain members per domain) are the same NCCL rings (NCCL builds one
    ring per channel through a node's GPUs over NVLink, each channel leaving the node through its own NIC:
    NCCL src/graph/rings.cc, search.cc), so they get the same speed-up.

    Latency (``ring_latency_by_hop``): the same ring's n - 1 steps cross the network only between domains, so
    of a ring over d = ceil(n / k) domains n - d steps are NVLink hops and d - 1 network hops; NCCL's own cost
    model prices a ring all-gather / reduce-scatter as ``(nsteps - nInterSteps)·intraLat + nInterSteps·interLat``
    with nsteps = n - 1, nInterSteps = nNodes - 1 (twice both for an all-reduce; NVIDIA/nccl@01afd20a
    src/graph/tuning.cc, ``ncclTopoTuneModel``). The link carries their mean per step, so every (n-1)·alpha
    (and 2(n-1)·alpha) priced over it is that sum; off (and textbook): every step at the network's latency.
    """
    if L_.nvlink:
        return L_
    k = max(1, domain // stride) if stride < domain else 1
    latency = L_.latency_s
    if a.ring_latency_by_hop and size is not None and size > 1 and nv_latency_s is not None and k > 1:
        domains = -(-size // min(k, size))
        latency = ((size - domains) * nv_latency_s + (domains - 1) * L_.latency_s) / (size - 1)
    if not a.hierarchical_collectives:
        return Link(False, L_.bandwidth_Bps, latency)
    speedup = 1 + (k - 1) * a.hierarchical_collective_efficiency
    return Link(False, min(L_.bandwidth_Bps * speedup, max(nv_bw, L_.bandwidth_Bps)), latency)


def cp_attention_comm(c: Choice, a: Assumptions, gpu: GPU, links: dict[str, Link], domain: int, n: int,
                      kv_bytes: float, tokens_tp_group: float, arch: Architecture, attn_core_s: float,
                      fwd_share: float, cp_a2a: int):
    """Exposed CP communication of one layer and micro-batch for the choice's CP comm type
    (costmodel/communication/context_parallel.py holds the derivations and sources)."""
    if c.cp <= 1:
        return CpComm(0.0, 0.0)
    attn_fwd, attn_bwd = attn_core_s * fwd_share, attn_core_s * (1 - fwd_share)
    kind = c.cp_comm_type
    if kind == "allgather":
        Lc = links["cp"]
        return allgather_comm(c.cp, kv_bytes, Lc.latency_s, Lc.bandwidth_Bps)
    ring_cp, ring_link = c.cp, links["cp"]
    comm = CpComm(0.0, 0.0)
    if kind in ("a2a", "a2a+p2p"):
        # the a2a level: cp_a2a members with stride tp (innermost after TP in the mesh order tp-cp-dp-pp)
        nv, net = tier_links(gpu, a)
        local = ep_members_per_domain(c.tp, cp_a2a, domain, n)
        La = link(c.tp, cp_a2a, domain, gpu, a, n)

        def a2a(tensor_bytes: float) -> float:
            return ulysses_all_to_all_s(tensor_bytes, cp_a2a, local, (nv.bandwidth_Bps, nv.latency_s),
                                        (net.bandwidth_Bps, net.latency_s), a.hierarchical_all_to_all,
                                        (La.bandwidth_Bps, La.latency_s))

        # this GPU's Q, K, V and output before the re-shard: its tokens, its TP rank's heads, BF16
        qkv_bytes = tokens_tp_group * (arch.q_dim + arch.k_dim + arch.v_dim) * 2 / c.tp
        out_bytes = tokens_tp_group * arch.o_dim * 2 / c.tp
        comm = ulysses_comm(qkv_bytes, out_bytes, a2a)
        if kind == "a2a":
            return comm
        ring_cp = c.cp // cp_a2a  # the p2p level: stride tp·cp_a2a
        ring_link = link(c.tp * cp_a2a, ring_cp, domain, gpu, a, n)
    if a.cp_ring_model == "aggregate":
        ring = ring_aggregate_s(ring_cp, kv_bytes, ring_link.latency_s, ring_link.bandwidth_Bps, attn_core_s,
                                a.cp_comm_overlap, a.cp_comm_overlaps_attention)
    else:
        ring = ring_exposed_s(ring_cp, kv_bytes, ring_link.latency_s, ring_link.bandwidth_Bps,
                              attn_fwd if a.cp_comm_overlaps_attention else 0.0,
                              attn_bwd if a.cp_comm_overlaps_attention else 0.0)
    return CpComm(comm.fwd_s + ring.fwd_s, comm.bwd_s + ring.bwd_s, comm.workspace_bytes + ring.workspace_bytes)
