"""Collectives (costmodel/communication/collectives.py and the TP/ETP terms of costmodel/evaluation/layer_costs.py), numbers worked by
hand: the EP all-to-all over concurrent NVLink / network tiers and node-limited routing (DeepSeek-V3 §3.2.2);
sequence parallelism's TP collectives per layer (Megatron-LM megatron/core/tensor_parallel/layers.py), TP-comm
overlap only with SP, and expert-TP collectives.
"""

from __future__ import annotations

import pytest

from parplan.costmodel.evaluation.choice import Choice
from parplan.costmodel.communication.collectives import all_to_all_time_s

from tests import physics_cases as physics


def test_all_to_all_tiers_and_node_limited_routing_by_hand():
    """DeepSeek-V3 dispatch of one micro-batch: 4096 tokens x 7168 x 1 B (FP8) = 29,360,128 B per copy
    set, 8 copies per token, EP 64 over 8 nodes of 8 GPUs; NVLink 160 GB/s, IB 45 GB/s, latencies 0.

    Unrestricted: network copies 8 · (1 - 8/64) = 7 -> 7 · 29,360,128 / 45e9 = 4.5671 ms; NVLink copies
    8 · 7/64 = 0.875 -> 0.1606 ms; the tiers run concurrently: 4.5671 ms.
    Per-node sends (DeepEP) with 3.5 remote nodes per token (the old flat min(4, 8, 8) · (1 - 1/8); the expected
    count under node-limited routing is now moe_dispatch.expected_remote_nodes, tests/costmodel/moe/test_moe_dispatch.py):
    network copies 3.5 -> 2.2836 ms; NVLink copies 8 · 7/8 = 7 (local and forwarded) -> 7 · 29,360,128 / 160e9 =
    1.2845 ms; max: 2.2836 ms.
    Latency: one per tier (concurrent sends), not 63 in sequence: + 10 µs network -> 2.2936 ms."""
    b = 4096 * 7168 * 1
    assert b == 29_360_128
    free = all_to_all_time_s(b, 8, 64, 8, 160e9, 0.0, 45e9, 0.0)
    assert free == pytest.approx(7 * b / 45e9) and free == pytest.approx(4.5671e-3, rel=1e-4)
    limited = all_to_all_time_s(b, 8, 64, 8, 160e9, 0.0, 45e9, 0.0, remote_nodes=3.5)
    assert limited == pytest.approx(3.5 * b / 45e9) and limited == pytest.approx(2.2836e-3, rel=1e-4)
    assert 7 * b / 160e9 == pytest.approx(1.2845e-3, rel=1e-4) and 7 * b / 160e9 < limited
    assert all_to_all_time_s(b, 8, 64, 8, 160e9, 3e-6, 45e9, 10e-6, 3.5) == pytest.approx(limited + 10e-6)
    # inside one node: NVLink only, (ep - 1)/ep of the copies
    assert all_to_all_time_s(b, 8, 8, 8, 160e9, 0.0, 45e9, 0.0) == pytest.approx(8 * 7 / 8 * b / 160e9)


def test_tp_collectives_with_and_without_sp_by_hand():
    """Llama-3 70B, TP 4, one 8192-token micro-batch: one b·s·h activation 8192 · 8192 · 2 = 134,217,728 B;
    a ring all-gather of it over 4 GPUs of NVLink (450 GB/s, efficiency 1, latency off) moves 3/4 of it:
    0.75 · 134,217,728 / 450e9 = 223.70 µs. With SP: 10 collectives per layer (4 forward, 4 backward, the
    2 re-gathers of QKV's and FC1's input for the weight gradient), half hidden with tp_comm_overlap 0.5:
    1118.48 µs. Without SP: 4 all-reduces = 8 gathers, and no overlap credit (Megatron asserts SP for
    --tp-comm-overlap): 1789.57 µs. The link is the line rate here (collective_busbw_priors off: this test counts
    collectives; the measured per-collective bandwidths are tests/costmodel/communication/test_collective_busbw.py's)."""
    knobs = dict(intra_node_bandwidth_efficiency=1.0, include_latency=False, tp_comm_overlap=0.5,
                 collective_busbw_priors=False)
    spec = physics.spec(physics.LLAMA70B, 8, seq=8192, gbs=8, **knobs)
    one = 0.75 * 134_217_728 / 450e9
    assert one == pytest.approx(223.696e-6, rel=1e-5)
    sp = physics.costs(spec, Choice(tp=4, cp=1, pp=1, dp=2, num_microbatches=4, sequence_parallel=True))
    nosp = physics.costs(spec, Choice(tp=4, cp=1, pp=1, dp=2, num_microbatches=4, sequence_parallel=False))
    assert sp.dense.tp_s == pytest.approx(10 * one * 0.5)
    assert nosp.dense.tp_s == pytest.approx(8 * one)
    # full recompute repeats the forward's 4 collectives
    assert sp.dense.recompute_comm[0] == pytest.approx(4 * one * 0.5)


def test_expert_tp_collectives_by_hand():
    """A small MoE model (h 4096, 8 experts, top-2, no shared expert), TP 2 with SP, one 4096-token
    micro-batch, NVLink at efficiency 1 and latency off. The attention block: 5 collectives of one
    activation (4096 · 4096 · 2 = 33,554,432 B; a 2-GPU ring moves half: 37.28 µs each) = 186.41 µs,
    tp_comm_overlap 0. ETP = 1: nothing more (tokens are sequence-sharded, the experts see whole
    tokens). ETP = 2: the dispatched tokens of the ETP group, 2 GPUs x 2048 tokens x top-2 x 4096 x 2 B
    = 67,108,864 B, gathered before the experts and reduce-scattered after, forward and backward: 4 x
    half of it / 450e9 = 298.26 µs more."""
    model = dict(name="moe", num_layers=4, hidden_size=4096, ffn_hidden_size=14336, num_attention_heads=32,
                 num_kv_heads=8, vocab_size=32000,
                 moe=dict(num_experts=8, top_k=2, expert_ffn_hidden_size=14336))
    spec = physics.spec(model, 8, gbs=16, intra_node_bandwidth_efficiency=1.0, include_latency=False, tp_comm_overlap=0.0,
                 collective_busbw_priors=False)  # line rate: the collectives are counted here
    act = 0.5 * 4096 * 4096 * 2 / 450e9
    assert 5 * act == pytest.approx(186.41e-6, rel=1e-4)
    etp1 = physics.costs(spec, Choice(tp=2, cp=1, pp=1, dp=4, ep=4, etp=1, num_microbatches=4))
    etp2 = physics.costs(spec, Choice(tp=2, cp=1, pp=1, dp=4, ep=4, etp=2, num_microbatches=4))
    assert etp1.moe.tp_s == pytest.approx(5 * act)
    dispatched = 2 * 2048 * 2 * 4096 * 2
    assert dispatched == 67_108_864
    assert etp2.moe.tp_s - etp1.moe.tp_s == pytest.approx(4 * 0.5 * dispatched / 450e9)
    assert 4 * 0.5 * dispatched / 450e9 == pytest.approx(298.26e-6, rel=1e-4)


def test_tp_overlap_bounded_by_the_blocks_gemms_by_hand():
    """Llama-3 8B (h 4096, FFN 14336, 32 heads, 8 KV heads), TP 8 with SP, one 8192-token micro-batch, H100 at a
    flat 0.5 of its 989 TFLOP/s BF16 peak (shape penalty 0), NVLink 450 GB/s at efficiency 1, latency off,
    tp_comm_overlap 1. One collective: 8192 · 4096 · 2 B over an 8-GPU ring, 7/8 of it: 130.49 µs; five per block
    652.45 µs. The attention block's GEMMs: 1024 tokens per GPU x 6 x 41,943,040 weights (QKV 4096 x 6144, output
    4096 x 4096) / 494.5 TFLOP/s = 521.13 µs, of which Transformer Engine's ring exchange hides behind 7/8:
    455.99 µs, so 196.46 µs stay exposed. The MLP block's (176,160,768 weights, 2188.74 µs) cover its five. A
    fixed share would hide all of it; a recomputed forward repeats the attention's two collectives (260.98 µs) beside
    1/3 of its GEMMs' window (152.00 µs): 108.98 µs."""
    llama8b = dict(name="llama3-8b", num_layers=32, hidden_size=4096, ffn_hidden_size=14336, num_attention_heads=32,
                   num_kv_heads=8, vocab_size=128256)
    spec = physics.spec(llama8b, 8, seq=8192, gbs=8, intra_node_bandwidth_efficiency=1.0, include_latency=False,
                        tp_comm_overlap=1.0, collective_busbw_priors=False, matmul_efficiency_hopper=0.5,
                        matmul_shape_penalty=0.0)
    one = 0.875 * 8192 * 4096 * 2 / 450e9
    assert 5 * one == pytest.approx(652.45e-6, rel=1e-5)
    rate = 0.5 * 989.0e12
    attn = 1024 * 6 * 41_943_040 / rate
    assert attn == pytest.approx(521.13e-6, rel=1e-5)
    mlp = 1024 * 6 * 176_160_768 / rate
    assert mlp * 7 / 8 > 5 * one
    costs = physics.costs(spec, Choice(tp=8, cp=1, pp=1, dp=1, num_microbatches=8, sequence_parallel=True))
    assert costs.dense.tp_s == pytest.approx(5 * one - attn * 7 / 8, rel=1e-6)
    assert costs.dense.tp_s == pytest.approx(196.46e-6, rel=1e-4)
    assert costs.dense.recompute_comm[0] == pytest.approx(2 * one - attn / 3 * 7 / 8, rel=1e-6)
    # the same block beside GEMMs long enough (TP 2: a quarter of the ring's steps, four times the GEMM per GPU)
    tp2 = physics.costs(spec, Choice(tp=2, cp=1, pp=1, dp=4, num_microbatches=2, sequence_parallel=True))
    assert tp2.dense.tp_s == 0.0


# the MoE layer with a shared expert that the two hand-worked MoE TP-block tests price (pooled, then pair by pair)
MOE_SHARED_MODEL = dict(name="moe-shared", num_layers=4, hidden_size=4096, ffn_hidden_size=14336, num_attention_heads=32,
                        num_kv_heads=8, vocab_size=32000,
                        moe=dict(num_experts=8, top_k=2, expert_ffn_hidden_size=14336, num_shared_experts=1,
                                 shared_expert_ffn_hidden_size=2048))


def test_moe_tp_blocks_each_beside_their_own_gemms_by_hand():
    """An MoE layer's TP collectives (costmodel/evaluation/moe_layer.py): the attention block's five beside the attention GEMMs,
    the shared expert's five beside its own, each hidden up to 7/8 of them at TP 8; the routed experts' GEMMs hide
    nothing (their tokens come by the dispatcher, ETP 1 has no collective). h 4096, 32 heads, 8 KV heads, one gated
    shared expert of width 2048, 4096-token micro-batch: 512 tokens per GPU, H100 at a flat 494.5 TFLOP/s, NVLink
    450 GB/s. One collective 7/8 · 4096 · 4096 · 2 B / 450e9 = 65.24 µs, five 326.21 µs. Attention: 512 · 6 ·
    41,943,040 / 494.5e12 = 260.56 µs, 7/8 of it 227.99 µs: 98.22 µs exposed. Shared expert: 512 · 6 · 25,165,824 /
    494.5e12 = 156.34 µs, 7/8 136.80 µs: 189.41 µs exposed. Together 287.63 µs."""
    spec = physics.spec(MOE_SHARED_MODEL, 8, gbs=16, intra_node_bandwidth_efficiency=1.0, include_latency=False,
                        tp_comm_overlap=1.0, collective_busbw_priors=False, matmul_efficiency_hopper=0.5,
                        matmul_shape_penalty=0.0)
    one = 0.875 * 4096 * 4096 * 2 / 450e9
    rate = 0.5 * 989.0e12
    attn, shared = 512 * 6 * 41_943_040 / rate, 512 * 6 * 25_165_824 / rate
    assert (attn, shared) == (pytest.approx(260.56e-6, rel=1e-4), pytest.approx(156.34e-6, rel=1e-4))
    want = (5 * one - attn * 7 / 8) + (5 * one - shared * 7 / 8)
    assert want == pytest.approx(287.63e-6, rel=1e-4)
    costs = physics.costs(spec, Choice(tp=8, cp=1, pp=1, dp=1, ep=1, etp=1, num_microbatches=16, sequence_parallel=True))
    assert costs.moe.tp_s == pytest.approx(want, rel=1e-6)


def test_tp_overlap_pair_by_pair_by_hand():
    """``tp_overlap_pairs`` (costmodel/evaluation/layer_comm.py LayerComm.paired_s): Llama-3 8B (h 4096, FFN 14336 gated,
    32 heads, 8 KV heads), TP 8 with SP, one 8192-token micro-batch, H100 (132
    SMs) at a flat 0.5 of its 989 TFLOP/s BF16 peak (shape penalty 0), NVLink 450 GB/s at efficiency 1, latency off,
    tp_comm_overlap 1, Transformer Engine's defaults (16 SMs held, 4 reduce-scatter chunks). One collective: 8192 ·
    4096 · 2 B over an 8-GPU ring, 7/8 of it: x = 130.49 µs. Each collective beside its own GEMM (F = 1/3 of the
    block's GEMMs, each backward GEMM 1/3):
    attention, 1024 tokens x 6 x 41,943,040 weights / 494.5 TFLOP/s = 521.13 µs, the output projection 0.4 of it
    (4096² of 41,943,040): QKV forward / input grad / weight grad 104.23 µs each, the projection's 69.48 µs each.
    Forward all-gather (ring exchange, 7/8 of QKV): 130.49 - 91.20 = 39.29; forward reduce-scatter (4 chunks, 3/4 of
    the projection, at least x/4): 130.49 - 52.11 = 78.38; the output gradient's all-gather (7/8 of the projection's
    input grad): 130.49 - 60.80 = 69.69; the re-gather and the input gradient's reduce-scatter (bulk, beside QKV's
    input and weight grads, whole): 26.26 each: 239.88 µs; the projection's forward and QKV's two backward GEMMs
    (277.94 µs) on 116 of 132 SMs: 277.94 · 16/116 = 38.34 µs more; 278.21 µs.
    MLP, 176,160,768 weights: 2188.74 µs, FC2 a third (gated): FC1 486.39 µs a pass, FC2 243.19: every window covers
    x but the chunked reduce-scatter's last quarter, 32.62 µs; FC2 forward and FC1's two backward GEMMs (1215.96 µs)
    held: 167.72 µs; 200.34 µs. Layer 478.55 µs.
    A recomputed forward repeats the two forward collectives and the projection's held SMs: attention 39.29 + 78.38 +
    69.48 · 16/116 = 127.26, MLP 32.62 + 243.19 · 16/116 = 66.17: 193.43 µs."""
    llama8b = dict(name="llama3-8b", num_layers=32, hidden_size=4096, ffn_hidden_size=14336, num_attention_heads=32,
                   num_kv_heads=8, vocab_size=128256)
    spec = physics.spec(llama8b, 8, seq=8192, gbs=8, intra_node_bandwidth_efficiency=1.0, include_latency=False,
                        tp_comm_overlap=1.0, collective_busbw_priors=False, matmul_efficiency_hopper=0.5,
                        matmul_shape_penalty=0.0, tp_overlap_pairs=True)
    x = 0.875 * 8192 * 4096 * 2 / 450e9
    assert x == pytest.approx(130.49e-6, rel=1e-4)
    rate, held = 0.5 * 989.0e12, 16 / 116
    attn, mlp = 1024 * 6 * 41_943_040 / rate, 1024 * 6 * 176_160_768 / rate
    assert (attn, mlp) == (pytest.approx(521.13e-6, rel=1e-5), pytest.approx(2188.74e-6, rel=1e-5))
    qkv, proj = attn * 0.6 / 3, attn * 0.4 / 3  # a pass each: forward, input gradient, weight gradient
    fc1, fc2 = mlp * 2 / 9, mlp / 9
    attn_exposed = (x - qkv * 7 / 8) + max(x - proj * 3 / 4, x / 4) + (x - proj * 7 / 8) + 2 * (x - qkv)
    assert attn_exposed == pytest.approx(239.88e-6, rel=1e-4)
    attn_s = attn_exposed + (proj + 2 * qkv) * held
    assert attn_s == pytest.approx(278.21e-6, rel=1e-4)
    assert min(fc1 * 7 / 8, fc2 * 7 / 8, fc1) > x and fc2 * 3 / 4 > x
    mlp_s = x / 4 + (fc2 + 2 * fc1) * held
    assert mlp_s == pytest.approx(200.34e-6, rel=1e-4)
    costs = physics.costs(spec, Choice(tp=8, cp=1, pp=1, dp=1, num_microbatches=8, sequence_parallel=True))
    assert costs.dense.tp_s == pytest.approx(attn_s + mlp_s, rel=1e-6)
    assert costs.dense.tp_s == pytest.approx(478.55e-6, rel=1e-4)
    recompute = (x - qkv * 7 / 8) + (x - proj * 3 / 4) + proj * held + x / 4 + fc2 * held
    assert recompute == pytest.approx(193.43e-6, rel=1e-4)
    assert costs.dense.recompute_comm[0] == pytest.approx(recompute, rel=1e-6)
    # the same blocks beside GEMMs long enough (TP 2: the ring moves half the activation, x2 = 74.57 µs, beside four
    # times the GEMM per GPU): only the two forward reduce-scatters' last chunks and the held SMs remain
    tp2 = physics.costs(spec, Choice(tp=2, cp=1, pp=1, dp=4, num_microbatches=2, sequence_parallel=True))
    x2 = 0.5 * 8192 * 4096 * 2 / 450e9
    assert tp2.dense.tp_s == pytest.approx(2 * x2 / 4 + 4 * ((proj + 2 * qkv) + (fc2 + 2 * fc1)) * held, rel=1e-6)
    # no SM held, no chunk left: only what the windows cannot cover (none at TP 2)
    free = physics.spec(llama8b, 8, seq=8192, gbs=8, intra_node_bandwidth_efficiency=1.0, include_latency=False,
                        tp_comm_overlap=1.0, collective_busbw_priors=False, matmul_efficiency_hopper=0.5,
                        matmul_shape_penalty=0.0, tp_overlap_pairs=True, tp_overlap_comm_sms=0,
                        tp_overlap_rs_splits=0)
    assert physics.costs(free, Choice(tp=2, cp=1, pp=1, dp=4, num_microbatches=2, sequence_parallel=True)).dense.tp_s == 0.0


def test_moe_tp_blocks_pair_by_pair_by_hand():
    """``tp_overlap_pairs``: an MoE layer's TP collectives (costmodel/evaluation/moe_layer.py): the attention block's five
    beside the attention GEMMs, the shared expert's five beside its own, each collective beside its own GEMM as in
    test_tp_overlap_pair_by_pair_by_hand (TP 8, 16 SMs held, 4 reduce-scatter chunks); the routed
    experts' GEMMs hide nothing (their tokens come by the dispatcher, ETP 1 has no collective). h 4096, 32 heads, 8 KV
    heads, one gated shared expert of width 2048, 4096-token micro-batch: 512 tokens per GPU, H100 at a flat 494.5
    TFLOP/s, NVLink 450 GB/s. One collective x = 7/8 · 4096 · 4096 · 2 B / 450e9 = 65.24 µs. Attention: 512 · 6 ·
    41,943,040 / 494.5e12 = 260.56 µs, QKV 52.11 µs a pass, the projection 34.74: exposed 19.64 + 39.18 + 34.84 + 2 ·
    13.13 = 119.94 µs, held (34.74 + 2 · 52.11) · 16/116 = 19.17: 139.11 µs. Shared expert: 512 · 6 · 25,165,824 /
    494.5e12 = 156.34 µs, FC1 34.74 a pass, FC2 17.37: exposed 34.84 + 52.21 + 50.04 + 2 · 30.50 = 198.11, held
    (17.37 + 2 · 34.74) · 16/116 = 11.98: 210.09 µs. Together 349.20 µs."""
    spec = physics.spec(MOE_SHARED_MODEL, 8, gbs=16, intra_node_bandwidth_efficiency=1.0, include_latency=False,
                        tp_comm_overlap=1.0, collective_busbw_priors=False, matmul_efficiency_hopper=0.5,
                        matmul_shape_penalty=0.0, tp_overlap_pairs=True)
    x = 0.875 * 4096 * 4096 * 2 / 450e9
    rate, held = 0.5 * 989.0e12, 16 / 116
    attn, shared = 512 * 6 * 41_943_040 / rate, 512 * 6 * 25_165_824 / rate
    assert (attn, shared) == (pytest.approx(260.56e-6, rel=1e-4), pytest.approx(156.34e-6, rel=1e-4))

    def block(col: float, row: float) -> float:  # one pass of the column- and row-parallel GEMMs
        return ((x - col * 7 / 8) + max(x - row * 3 / 4, x / 4) + (x - row * 7 / 8) + 2 * max(0.0, x - col)
                + (row + 2 * col) * held)
    want = block(attn * 0.6 / 3, attn * 0.4 / 3) + block(shared * 2 / 9, shared / 9)
    assert block(attn * 0.6 / 3, attn * 0.4 / 3) == pytest.approx(139.11e-6, rel=1e-4)
    assert want == pytest.approx(349.20e-6, rel=1e-4)
    costs = physics.costs(spec, Choice(tp=8, cp=1, pp=1, dp=1, ep=1, etp=1, num_microbatches=16, sequence_parallel=True))
    assert costs.moe.tp_s == pytest.approx(want, rel=1e-6)
