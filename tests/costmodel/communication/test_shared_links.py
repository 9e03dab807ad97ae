"""Links shared by concurrent collectives (costmodel/communication/shared_links.py), term by term with numbers worked by hand:

* the max-min fair share of one link between a collective and a stream that alone keeps u of it busy;
* the EP all-to-all's two tiers (collectives.all_to_all_tiers_s) and how busy each keeps its link;
* the TP collectives beside the all-to-all that Megatron-Core's combined 1F1B hides (and the all-to-all they
  displace), nothing shared when the all-to-all runs between computations;
* the DP collectives off NVLink beside the all-to-all's network sends.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from parplan.costmodel.communication import data_parallel
from parplan.costmodel.spec.assumptions import resolve_assumptions
from parplan.costmodel.evaluation.choice import Choice, tier_links
from parplan.costmodel.communication.collectives import all_to_all_tiers_s, all_to_all_time_s
from parplan.costmodel.spec.hardware import resolve_gpu
from parplan.costmodel.communication.shared_links import displaced_s, shared_rate, stretched_s

from tests import moe_schedule_cases as moe_dims
from tests import physics_cases as physics


def test_fair_share_by_hand():
    """u = 0.25 (an all-to-all paced by its IB sends): the collective gets 0.75 of the link, 3 s alone with half of
    it beside the stream: 1.5 + 1.5/0.75 = 3.5 s, the stream loses nothing (it needs only 0.25). u = 1 (an all-to-all
    inside one domain): half each, 1.5 + 1.5/0.5 = 4.5 s; the stream gets 0.5 instead of 1 for those 3 s: 1.5 s lost,
    so the link carries 1.5 + 1.5 = 3 s of both in the 3 s they share it. Nothing beside it: unchanged."""
    assert shared_rate(0.25) == 0.75 and shared_rate(1.0) == 0.5 and shared_rate(0.0) == 1.0
    assert stretched_s(3.0, 0.5, 0.25) == pytest.approx(3.5)
    assert displaced_s(3.0, 0.5, 0.25) == 0.0
    assert stretched_s(3.0, 0.5, 1.0) == pytest.approx(4.5)
    assert displaced_s(3.0, 0.5, 1.0) == pytest.approx(1.5)
    assert stretched_s(3.0, 0.0, 1.0) == 3.0 and stretched_s(3.0, 0.7, 0.0) == 3.0


def test_all_to_all_tiers_by_hand():
    """16 GPUs in two domains of 8, 8 copies of 1 MB per token, NVLink 100 GB/s, network 50 GB/s, no latency. Per
    expert (plain all-to-all): 8·7/16 = 3.5 copies over NVLink (35 µs), 8·(1 - 8/16) = 4 over the network (80 µs);
    the all-to-all takes 80 µs and keeps NVLink busy 35/80 of it. Per node (DeepEP, 0.9 remote nodes): every copy not
    for the receiver itself forwarded over NVLink, 8·7/8 = 7 copies (70 µs), 0.9 MB over the network (18 µs)."""
    plain = all_to_all_tiers_s(1e6, 8, 16, 8, 100e9, 0.0, 50e9, 0.0)
    assert plain == pytest.approx((35e-6, 80e-6))
    assert all_to_all_time_s(1e6, 8, 16, 8, 100e9, 0.0, 50e9, 0.0) == pytest.approx(80e-6)
    assert all_to_all_tiers_s(1e6, 8, 16, 8, 100e9, 0.0, 50e9, 0.0, remote_nodes=0.9) == pytest.approx((70e-6, 18e-6))
    assert all_to_all_tiers_s(1e6, 8, 8, 8, 100e9, 0.0, 50e9, 0.0) == pytest.approx((70e-6, 0.0))


def test_tp_beside_combined_1f1b_all_to_all_by_hand():
    """TP2 EP8 in one domain of 8 H100s, no TP-comm overlap, 4 micro-batches. 1F1B without overlap runs the
    all-to-all between computations: TP collectives T and one all-to-all a (exposed 2a) as alone. Combined 1F1B
    (moe_a2a_overlap) runs 3 of 4 passes beside the other micro-batch's compute: beside = 2a·3/4 of C + T (C the
    MoE compute on every SM), share s = min(1, beside/(C + T)). The all-to-all is all NVLink (u = 1): the TP
    collectives get half the link for their concurrent share, T' = T·(1 + s), and the all-to-all loses what they
    take, a' = a + s·T·(1 - 1/2)/(1/2)/2 = a + s·T/2; then the overlapped schedule's SMs,
    C' = C + (20/132)·min(2a', C·132/112) (moe_comm.reserved_sm_time_s)."""
    spec = moe_dims.spec(moe_dims.MOE, gbs=32, assumptions=dict(tp_comm_overlap=0.0, moe_dispatch_sync=False))  # the dispatcher's sync off: compute_s the compute alone (host_floor, test_host_floor)
    c = Choice(tp=2, cp=1, pp=1, dp=4, ep=8, num_microbatches=4, sequence_parallel=True)
    off = physics.costs(spec, c).moe
    on = physics.costs(spec, replace(c, moe_a2a_overlap=True)).moe
    T, a, C = off.tp_s, off.ep_s / 2, off.compute_s - off.selective_s
    s = min(1.0, 2 * a * 3 / 4 / (C + T))
    assert 0 < s < 1
    assert on.tp_s == pytest.approx(T * (1 + s))
    a_shared = a + s * T / 2
    assert on.compute_s - on.selective_s == pytest.approx(C + 20 / 132 * min(2 * a_shared, C * 132 / 112))


def test_dp_off_nvlink_beside_the_all_to_all_by_hand(monkeypatch):
    """16 H100s in two nodes, TP1 DP16 EP16 (a plain all-to-all across both), 1F1B with the all-to-all exposed
    (2a), no DP overlap credit: the gradient reduce-scatter and the parameter all-gather run through the passes and
    share the NIC with the all-to-all's network sends, a share s = 2a/(C + 2a) of the passes that keep the network
    busy u = t_net/max(t_nv, t_net) (the busiest receiver's 1 + 0.1·√(ln 16/ln 8) copies, BF16 both ways): the DP
    time is k = 1 + s·(1/(1 - min(u, 1/2)) - 1) times what it is alone (shared_rate)."""
    spec = moe_dims.spec(moe_dims.MOE, gpus=16, gbs=64, assumptions=dict(dp_comm_overlap=0.0, ep_dispatch_bytes=2.0,
                                                                  moe_dispatch_sync=False))  # the dispatcher's sync off: compute_s the compute alone (host_floor, test_host_floor)
    c = Choice(tp=1, cp=1, pp=1, dp=16, ep=16, num_microbatches=4, zero_stage=1)
    shared = physics.costs(spec, c).moe
    monkeypatch.setattr(data_parallel, "stretched_s", lambda t, s, u: t)
    alone = physics.costs(spec, c).moe
    a, C = shared.ep_s / 2, shared.compute_s - shared.selective_s
    A = resolve_assumptions(spec.assumptions)
    nv, net = tier_links(resolve_gpu(spec.cluster), A)
    busiest = 1 + 0.1 * (__import__("math").log(16) / __import__("math").log(8)) ** 0.5
    tiers = [all_to_all_tiers_s(2048 * 1024 * busiest * 2.0, 2, 16, 8, nv.bandwidth_Bps, nv.latency_s,
                                net.bandwidth_Bps, net.latency_s) for _ in range(2)]
    u = sum(t[1] for t in tiers) / sum(max(t) for t in tiers)
    assert 2 * sum(max(t) for t in tiers) == pytest.approx(2 * a)
    s = 2 * a / (C + 2 * a)
    assert shared.dp_s == pytest.approx(alone.dp_s * (1 + s * (1 / (1 - min(u, 0.5)) - 1)))
    assert shared.dp_s > alone.dp_s
