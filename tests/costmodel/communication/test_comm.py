"""The communication links of a choice (costmodel/communication/comm.py): TP groups wider than an NVLink domain ride the same
hierarchical NCCL rings as DP/ZeRO collectives (issue 25 item 3, "TP across nodes"), numbers worked by hand."""

from __future__ import annotations

import pytest

from parplan.costmodel.schedules.schedule import Schedule
from parplan.costmodel.spec.assumptions import resolve_assumptions
from parplan.costmodel.evaluation.choice import Choice, choice_costs
from parplan.costmodel.communication.comm import Comm, hierarchical_collective_link, tier_links
from parplan.costmodel.spec.hardware import lookup_gpu, resolve_gpu
from parplan.frameworks.loader import validate_spec

# A100-SXM-80GB (costmodel/spec/hardware.py): NVLink 300 GB/s, NIC 25 GB/s per GPU per direction, 8 GPUs per node
KNOBS = dict(inter_node_bandwidth_efficiency=0.8, intra_node_bandwidth_efficiency=1.0,
             hierarchical_collective_efficiency=0.5, collective_busbw_priors=False)


def _spec(tp: int) -> dict:
    return dict(model=dict(name="gpt-39b", num_layers=48, hidden_size=8192, ffn_hidden_size=32768,
                           num_attention_heads=64, vocab_size=51200),
                training=dict(seq_len=2048, global_batch_size=64),
                cluster=dict(gpu="A100-SXM-80GB", num_gpus=64),
                search=dict(tp=[tp], pp=[1], cp=[1]))


def _choice(tp: int) -> Choice:
    return Choice(tp=tp, cp=1, pp=1, dp=64 // tp, micro_batch_size=1, num_microbatches=1, schedule=Schedule.ONE_F_ONE_B)


def test_tp_across_nodes_gets_the_k_fold_nic_speed_up_by_hand():
    """TP 16 on 8-GPU nodes: 8 consecutive members per node share the node's 8 NICs, so each GPU moves 1/8 of its
    ring bytes over its NIC: 25 GB/s x 0.8 = 20 GB/s flat, x (1 + 7 x 0.5) = 4.5 -> 90 GB/s (below NVLink's 300)."""
    gpu = resolve_gpu(validate_spec(_spec(16)).cluster)
    a = resolve_assumptions(KNOBS)
    tp = Comm.of(_choice(16), gpu, a, 8).links["tp"]
    assert not tp.nvlink
    assert tp.bandwidth_Bps == pytest.approx(90e9)
    flat = Comm.of(_choice(16), gpu, a.model_copy(update={"hierarchical_collectives": False}), 8).links["tp"]
    assert flat.bandwidth_Bps == pytest.approx(20e9)
    assert tp.latency_s == flat.latency_s  # the alpha term is the network's either way


def test_tp_speed_up_is_capped_at_nvlink_by_hand():
    """Efficiency 1: 20 GB/s x 8 = 160 GB/s, still under NVLink's 300; on a 64-GPU NVLink domain TP 16 is NVLink."""
    gpu = resolve_gpu(validate_spec(_spec(16)).cluster)
    a = resolve_assumptions({**KNOBS, "hierarchical_collective_efficiency": 1.0})
    assert Comm.of(_choice(16), gpu, a, 8).links["tp"].bandwidth_Bps == pytest.approx(160e9)
    wide = Comm.of(_choice(16), gpu, a, 64).links["tp"]
    assert wide.nvlink and wide.bandwidth_Bps == pytest.approx(300e9)


def test_tp_inside_a_node_is_unchanged():
    """TP 8 on 8-GPU nodes never leaves NVLink: the hierarchical rule does not touch it."""
    gpu = resolve_gpu(validate_spec(_spec(8)).cluster)
    a = resolve_assumptions(KNOBS)
    on = Comm.of(_choice(8), gpu, a, 8).links["tp"]
    off = Comm.of(_choice(8), gpu, a.model_copy(update={"hierarchical_collectives": False}), 8).links["tp"]
    assert on == off and on.nvlink and on.bandwidth_Bps == pytest.approx(300e9)


def test_cross_node_tp_time_of_a_layer_falls_by_the_speed_up():
    """Without latency the TP ring time is bytes / bandwidth, so a dense layer's exposed TP time at TP 16 is the flat
    one / 4.5; its compute is the same."""
    spec = validate_spec(_spec(16))
    gpu = resolve_gpu(spec.cluster)
    a = resolve_assumptions({**KNOBS, "include_latency": False, "tp_comm_overlap": 0.0})
    hier = choice_costs(spec, _choice(16), gpu, a).dense
    flat = choice_costs(spec, _choice(16), gpu, a.model_copy(update={"hierarchical_collectives": False})).dense
    assert flat.tp_s > 0
    assert hier.tp_s == pytest.approx(flat.tp_s / 4.5)
    assert hier.compute_s == flat.compute_s


def test_kept_all_to_all_tiers_are_each_choices_own():
    """Comm.all_to_all_tiers_s keeps its answers for the copies of one Comm.of key (the EP degree, the world size and
    the dispatch's bytes are in it): on DeepSeek-V3's MoE layer (flex dispatch, 2,048 H800) every choice's kept tiers
    equal a fresh, unshared Comm's, through the memo of a whole space, and the three readers agree with them."""
    import random

    from benchmarks.solver_speed import SCENARIOS
    from parplan.costmodel.evaluation.choice import nvlink_domain_size
    from parplan.solver.problem import Problem

    p = Problem.build(validate_spec(dict(SCENARIOS)["DeepSeek-V3 671B / 2048 H800, 4K"]))
    moe, h, memo = p.spec.model.moe, p.spec.model.hidden_size, {}
    domain = nvlink_domain_size(p.spec, p.gpu)
    sample = random.Random(5).sample(p.choices, 400)
    kept = [Comm.of(c, p.gpu, p.assumptions, domain, memo) for c in sample]
    assert len({id(k.__dict__["_tiers"]) for k in kept}) < len(kept)  # copies share their answers
    for c, comm in zip(sample, kept):
        token_bytes = c.micro_batch_size * 4096 / c.cp / c.tp * h
        fresh = Comm.of(c, p.gpu, p.assumptions, domain)._all_to_all_tiers_s(token_bytes, moe)
        assert comm.all_to_all_tiers_s(token_bytes, moe) == fresh
        assert comm.all_to_all_tiers_s(token_bytes, moe) is comm.all_to_all_tiers_s(token_bytes, moe)
        assert comm.all_to_all_s(token_bytes, moe) == sum(max(t) for t in fresh)
    assert any(c.ep > 1 for c in sample)


# ------------------------------------------------------------------------------- ring latency by hop (NCCL)
@pytest.mark.parametrize("by_hop", [True, False])
def test_ring_latency_counts_nvlink_and_network_hops(by_hop):
    """NVIDIA/nccl@01afd20a src/graph/tuning.cc: a ring all-gather of n ranks on d nodes pays (n-1) - (d-1) intra-node
    steps and d - 1 inter-node steps. Worked by hand on 8-GPU H100 domains: TP 16 (stride 1, 2 domains) 14 NVLink
    hops + 1 network hop; DP 32 at stride 2 (4 members per domain, 8 domains) 24 + 7; DP 8 at stride 8 (one per
    domain) 7 network hops either way; a group inside one domain stays on NVLink."""
    a = resolve_assumptions({"ring_latency_by_hop": by_hop})
    gpu = lookup_gpu("H100-SXM-80GB")
    nv, net = tier_links(gpu, a)
    assert 0 < nv.latency_s < net.latency_s
    ring = lambda stride, size: (size - 1) * hierarchical_collective_link(  # noqa: E731
        net, stride, 8, nv.bandwidth_Bps, a, size, nv.latency_s).latency_s
    by = (lambda nvh, neth: nvh * nv.latency_s + neth * net.latency_s) if by_hop else (
        lambda nvh, neth: (nvh + neth) * net.latency_s)
    assert ring(1, 16) == pytest.approx(by(14, 1))
    assert ring(2, 32) == pytest.approx(by(24, 7))
    assert ring(8, 8) == pytest.approx(7 * net.latency_s)
    assert hierarchical_collective_link(nv, 1, 8, nv.bandwidth_Bps, a, 8, nv.latency_s) is nv


def test_textbook_prices_every_ring_step_at_the_network_latency():
    """The textbook preset turns the hop count off (it also has no latency at all: include_latency False)."""
    assert resolve_assumptions({}).ring_latency_by_hop is True
    assert resolve_assumptions({"preset": "textbook"}).ring_latency_by_hop is False
