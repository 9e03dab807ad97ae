"""All-to-all by dispatcher, expected distinct nodes, busiest receiver and capacity factor (issue 19 item 3),
term by term with numbers worked by hand (costmodel/moe/moe_dispatch.py has the derivations)."""

from __future__ import annotations

import math
from math import comb

import pytest

from parplan.costmodel.compute.architecture import Architecture
from parplan.costmodel.schedules.schedule import Schedule
from parplan.costmodel.spec.assumptions import resolve_assumptions
from parplan.costmodel.evaluation.choice import Choice, choice_costs
from parplan.costmodel.communication.comm import Comm
from parplan.costmodel.spec.hardware import resolve_gpu
from parplan.costmodel.moe.moe_dispatch import (busiest_rank_load, expected_nodes, expected_remote_nodes,
                                            imbalance_knob_for, node_hit_probability, random_routing_busiest_load)
from parplan.frameworks.loader import validate_spec

DSV3_MLA = dict(q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128)


def _dsv3(max_nodes=None, dispatcher="flex", capacity_factor=None) -> dict:
    return dict(name="deepseek-v3", num_layers=61, hidden_size=7168, ffn_hidden_size=18432, num_attention_heads=128,
                vocab_size=129280, mla=DSV3_MLA,
                moe=dict(num_experts=256, top_k=8, expert_ffn_hidden_size=2048, num_shared_experts=1,
                         first_dense_layers=3, max_nodes_per_token=max_nodes, dispatcher=dispatcher,
                         capacity_factor=capacity_factor))


def test_node_hit_probability_small_case_by_hand():
    """8 experts on 2 nodes (4 each), top-2: a node is missed when both picks are on the other node,
    C(4,2)/C(8,2) = 6/28 = 3/14; hit 11/14; expected nodes 2 · 11/14 = 22/14; remote (1 - 1/2) of them = 11/14."""
    assert node_hit_probability(8, 2, 2) == pytest.approx(11 / 14)
    assert expected_nodes(8, 2, 2) == pytest.approx(22 / 14)
    assert expected_remote_nodes(8, 2, 2) == pytest.approx(11 / 14)
    # one node: every token stays home; k = 1: exactly one node, remote with probability (N-1)/N
    assert expected_remote_nodes(8, 2, 1) == 0.0
    assert expected_remote_nodes(64, 1, 8) == pytest.approx(7 / 8)
    # k ≥ the experts outside a node: every node is hit
    assert node_hit_probability(8, 2, 5) == pytest.approx(1.0)


def test_deepseek_v3_node_limited_routing_by_hand():
    """DeepSeek-V3 (256 experts, top-8) on EP 64 over 8 nodes, at most 4 nodes per token (§3.2.2): the token's
    experts lie among the 128 experts of 4 nodes (32 each): a chosen node is missed with C(96,8)/C(128,8) =
    0.092747, so 4 · 0.907253 = 3.6290 nodes are reached, 7/8 of them remote: 3.1754 network crossings
    (the old flat min(4, 8, 8) · 7/8 = 3.5 assumed every chosen node receives an expert). Without the limit:
    C(224,8)/C(256,8) = 0.338168, 8 · 0.661832 = 5.2947 nodes, 4.6328 remote; a plain all-to-all: 8 · (1 - 8/64) = 7."""
    miss = comb(96, 8) / comb(128, 8)
    assert miss == pytest.approx(0.092747, abs=1e-6)
    assert expected_nodes(256, 8, 8, 4) == pytest.approx(4 * (1 - miss))
    assert expected_remote_nodes(256, 8, 8, 4) == pytest.approx(3.1754, abs=1e-4)
    assert expected_remote_nodes(256, 8, 8) == pytest.approx(8 * (1 - comb(224, 8) / comb(256, 8)) * 7 / 8)
    assert expected_remote_nodes(256, 8, 8) == pytest.approx(4.6328, abs=1e-4)


def test_an_unbinding_node_limit_changes_nothing_megatron_bridge_b200():
    """Megatron-Bridge DeepSeek-V3 on 256 B200 (issue 19): EP 32 over 4 nodes of 8. DeepEP: a node is missed with
    C(192,8)/C(256,8) = 0.096446, 4 · 0.903554 · 3/4 = 2.7107 remote nodes per token, with or without
    max_nodes_per_token 8 (more nodes than the group has: it cannot bind) or 4 (= the group's nodes). The issue's
    run charged 6 copies without the limit and 3 with it; a plain NCCL all-to-all sends 8 · (1 - 8/32) = 6."""
    assert expected_remote_nodes(256, 8, 4) == pytest.approx(2.7107, abs=1e-4)
    assert expected_remote_nodes(256, 8, 4, 8) == expected_remote_nodes(256, 8, 4)
    assert expected_remote_nodes(256, 8, 4, 4) == expected_remote_nodes(256, 8, 4)
    gpu = resolve_gpu(validate_spec(_spec(_dsv3())).cluster)
    a = resolve_assumptions({})
    c = Choice(tp=1, cp=1, pp=8, dp=32, ep=32, micro_batch_size=1, num_microbatches=64, schedule=Schedule.ONE_F_ONE_B)
    tokens_h = 4096 * 7168

    def a2a(model: dict) -> float:
        return Comm.of(c, gpu, a, 8).all_to_all_s(tokens_h, validate_spec(_spec(model)).model.moe)

    free, limited = a2a(_dsv3()), a2a(_dsv3(max_nodes=8))
    assert free == limited
    costs = [choice_costs(validate_spec(_spec(m)), c, gpu, a) for m in (_dsv3(), _dsv3(max_nodes=8))]
    assert costs[0].moe == costs[1].moe
    # by hand: dispatch BF16 (ep_dispatch_bytes 2) and combine BF16 over the network tier, at the busiest of 32 ranks
    net = Comm.of(c, gpu, a, 8).network
    busiest = 1 + 0.1 * (5 / 3) ** 0.5  # 1 + 0.1·√(ln 32 / ln 8)
    t_net = 2 * (net.latency_s + expected_remote_nodes(256, 8, 4) * tokens_h * 2 * busiest / net.bandwidth_Bps)
    assert free == pytest.approx(t_net)
    # a plain all-to-all: 6 network copies per token, 6 / 2.7107 = 2.21 x the bytes
    plain = a2a(_dsv3(dispatcher="alltoall"))
    assert plain == pytest.approx(2 * (net.latency_s + 6 * tokens_h * 2 * busiest / net.bandwidth_Bps))
    assert a2a(_dsv3(max_nodes=4, dispatcher="alltoall")) == plain  # node limits save nothing per expert


def _spec(model: dict) -> dict:
    return dict(model=model, training=dict(seq_len=4096, global_batch_size=2048),
                cluster=dict(gpu="B200", num_gpus=256))


def test_busiest_rank_load_by_ep_size_by_hand():
    """1 + 0.1·√(ln ep / ln 8): EP 1 → 1 (no other rank to wait for), EP 2 → 1.0577, EP 8 → 1.1 (the knob's
    reference), EP 64 → 1 + 0.1·√2 = 1.1414, EP 256 → 1.1633; a capacity factor 1.05 caps it; textbook (1.0) → 1."""
    assert busiest_rank_load(1, 1.1, 8) == 1.0
    assert busiest_rank_load(2, 1.1, 8) == pytest.approx(1.0577, abs=1e-4)
    assert busiest_rank_load(8, 1.1, 8) == pytest.approx(1.1)
    assert busiest_rank_load(64, 1.1, 8) == pytest.approx(1 + 0.1 * 2 ** 0.5)
    assert busiest_rank_load(256, 1.1, 8) == pytest.approx(1.1633, abs=1e-4)
    assert busiest_rank_load(64, 1.1, 8, capacity_factor=1.05) == 1.05
    assert busiest_rank_load(64, 1.0, 8) == 1.0


def test_expert_gemms_and_all_to_all_scale_with_the_busiest_rank():
    """EP 1 has no imbalance: the expert GEMMs of a capacity-factor-1.0 model take as long as without it; at EP 32
    a capacity factor 1.0 takes the expert GEMMs and the all-to-all from 1.1291 x to 1 x the mean."""
    gpu = resolve_gpu(validate_spec(_spec(_dsv3())).cluster)
    a = resolve_assumptions({})
    one = Choice(tp=1, cp=1, pp=8, dp=32, ep=1, micro_batch_size=1, num_microbatches=64, schedule=Schedule.ONE_F_ONE_B)
    base, capped = (choice_costs(validate_spec(_spec(m)), one, gpu, a) for m in (_dsv3(), _dsv3(capacity_factor=1.0)))
    assert base.moe.compute_s == capped.moe.compute_s
    c = Choice(tp=1, cp=1, pp=8, dp=32, ep=32, micro_batch_size=1, num_microbatches=64, schedule=Schedule.ONE_F_ONE_B)
    spec, spec_cf = (validate_spec(_spec(m)) for m in (_dsv3(), _dsv3(capacity_factor=1.0)))
    comm = Comm.of(c, gpu, a, 8)
    busiest = 1 + 0.1 * (5 / 3) ** 0.5
    net = comm.network
    t = comm.all_to_all_s(4096 * 7168, spec.model.moe) - 2 * net.latency_s
    t_cf = comm.all_to_all_s(4096 * 7168, spec_cf.model.moe) - 2 * net.latency_s
    assert t / t_cf == pytest.approx(busiest)
    full, cf = choice_costs(spec, c, gpu, a), choice_costs(spec_cf, c, gpu, a)
    assert full.moe.linear_s > cf.moe.linear_s


def test_capacity_factor_drops_the_dropped_tokens_flops_by_hand():
    """Capacity factor 1.0 at the default spread (busiest of 8 ranks 1.1: σ = 0.1/√(2 ln 8) = 0.04904): the expected
    excess of a N(1, σ²) load over C = 1 is σ·φ(0) = 0.04904 x 0.39894 = 0.019563, so 0.980437 of the routed copies
    are kept; C = 1.25 keeps σ(φ(z) - z(1 - Φ(z))) short of all, z = 5.098: 1 - 2.0e-8. The routed experts' model
    FLOPs count only those (MFU: DeepSeek-V3's 256 experts x 3 GEMMs of 7168 x 2048, 6 FLOPs per weight and copy, 8
    copies per token, on 58 MoE layers)."""
    from parplan.costmodel.moe.moe_dispatch import kept_share
    from parplan.costmodel.evaluation.evaluate import evaluate
    from parplan.costmodel.spec.spec import PlanSpec
    a = resolve_assumptions({})
    spec, spec_cf = (validate_spec(_spec(m)) for m in (_dsv3(), _dsv3(capacity_factor=1.0)))
    sigma = 0.1 / (2 * math.log(8)) ** 0.5
    assert kept_share(a, spec_cf.model.moe) == pytest.approx(1 - sigma * 0.3989423, rel=1e-6)
    assert kept_share(a, validate_spec(_spec(_dsv3(capacity_factor=1.25))).model.moe) == pytest.approx(1.0, abs=1e-7)
    assert kept_share(a, spec.model.moe) == 1.0
    plan = PlanSpec(tp=1, pp=8, dp=32, ep=32, micro_batch_size=1, schedule="1f1b")
    flops = [ev.metrics.model_tflops_per_gpu * 1e12 * ev.metrics.step_time_s * 256
             for ev in (evaluate(spec, plan), evaluate(spec_cf, plan))]
    expert = Architecture(spec.model).moe_layer_expert_flops  # per token, fwd+bwd, its 8 routed copies
    assert flops[0] - flops[1] == pytest.approx((1 - kept_share(a, spec_cf.model.moe)) * 58 * expert * 2048 * 4096,
                                                rel=1e-6)


def test_padded_to_capacity_every_rank_takes_the_capacity():
    """DeepSpeed-MoE dispatches into capacity-shaped buffers (assumptions.moe_pad_to_capacity, its profile's): at
    capacity factor 1.25 every EP rank computes and receives 1.25 x the mean, above the 1.1291 x the busiest of 32
    ranks takes unpadded (1 + 0.1·√(5/3)); below the busiest (C = 1.05) both take C."""
    from parplan.costmodel.moe.moe_dispatch import busiest_load
    moe = validate_spec(_spec(_dsv3(capacity_factor=1.25))).model.moe
    padded, unpadded = resolve_assumptions({"moe_pad_to_capacity": True}), resolve_assumptions({})
    assert busiest_load(32, padded, moe) == 1.25
    assert busiest_load(32, unpadded, moe) == pytest.approx(1 + 0.1 * (5 / 3) ** 0.5)
    low = validate_spec(_spec(_dsv3(capacity_factor=1.05))).model.moe
    assert busiest_load(32, padded, low) == busiest_load(32, unpadded, low) == 1.05
    from parplan.frameworks.profiles import profile
    assert profile("deepspeed").assumptions["moe_pad_to_capacity"] is True
    assert "moe_pad_to_capacity" not in profile("megatron-core").assumptions


def test_allgather_dispatcher_by_hand():
    """Megatron's all-gather dispatcher: each rank gathers the 32 ranks' tokens (32 · 4096 · 7168 · 2 B) and
    reduce-scatters the outputs: 2 ring passes of 31/32 of it over the EP link, k-independent, no imbalance."""
    gpu = resolve_gpu(validate_spec(_spec(_dsv3())).cluster)
    a = resolve_assumptions({})
    c = Choice(tp=1, cp=1, pp=8, dp=32, ep=32, micro_batch_size=1, num_microbatches=64, schedule=Schedule.ONE_F_ONE_B)
    comm = Comm.of(c, gpu, a, 8)
    L = comm.links["ep"]
    group_bytes = 32 * 4096 * 7168 * 2
    t = comm.all_to_all_s(4096 * 7168, validate_spec(_spec(_dsv3(dispatcher="allgather"))).model.moe)
    assert t == pytest.approx(2 * (31 * L.latency_s + 31 / 32 * group_bytes / L.bandwidth_Bps))


def test_random_routing_busiest_load_by_hand():
    """Megatron-Core --moe-router-force-load-balancing (uniformly random routing): Qwen3-30B-A3B's 4,096 tokens x
    top-8 = 32,768 copies per EP rank over 16 ranks: 2·ln 16 = 5.5452, x 15/16 = 5.1986, / 32,768 = 1.5865e-4,
    √ = 0.012596, so the busiest rank holds 1.012596 x the mean; at 1 rank, 1."""
    assert random_routing_busiest_load(32768, 16) == pytest.approx(1.012596, abs=1e-6)
    assert random_routing_busiest_load(32768, 1) == 1.0
    # fewer copies per rank: a larger spread (√(1/n)); more ranks: a larger maximum (√(ln G))
    assert random_routing_busiest_load(8192, 16) - 1 == pytest.approx(2 * 0.012596, abs=1e-5)
    assert random_routing_busiest_load(32768, 64) > random_routing_busiest_load(32768, 16)


def test_imbalance_knob_for_inverts_the_ep_scaling():
    """The knob stated at 8 ranks whose busiest_rank_load at 16 ranks is 1.012596: √(ln 16 / ln 8) = √(4/3) =
    1.154701, 0.012596 / 1.154701 = 0.010908, knob 1.010908; busiest_rank_load gives the load back."""
    knob = imbalance_knob_for(1.012596, 16, 8)
    assert knob == pytest.approx(1.010908, abs=1e-6)
    assert busiest_rank_load(16, knob, 8) == pytest.approx(1.012596, abs=1e-9)
    assert imbalance_knob_for(1.3, 1, 8) == 1.0
