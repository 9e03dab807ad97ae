"""The host's launch floor (costmodel/spec/host_floor.py), worked by hand.

43 kernels (16 forward + 27 backward, DENSE_LAYER_OPS) x 10 us = 0.43 ms of host time per dense layer and
micro-batch. A layer whose GPU work takes 0.30 ms waits 0.13 ms for the host; one of 1 ms waits nothing; with
CUDA graphs the floor is 0. An MoE layer's forward waits for the host after its dispatcher's sync (below).
"""

from __future__ import annotations

import pytest

from parplan.costmodel.spec.assumptions import resolve_assumptions
from parplan.costmodel.spec.host_floor import (DENSE_LAYER_KERNELS, DENSE_LAYER_OPS, host_lag_s, host_layer_s, host_wait_s,
                                               moe_dispatch_syncs, moe_sync_exposed_s, moe_sync_kernels)


def test_kernel_count_is_the_op_list():
    assert sum(f for _, f, _ in DENSE_LAYER_OPS) == 16
    assert sum(b for _, _, b in DENSE_LAYER_OPS) == 27
    assert DENSE_LAYER_KERNELS == 43 == resolve_assumptions().host_kernels_per_dense_layer


def test_host_wait_by_hand():
    a = resolve_assumptions()
    assert host_layer_s(a, 43) == pytest.approx(0.43e-3)
    assert host_wait_s(a, 0.30e-3, 43) == pytest.approx(0.13e-3)
    assert host_wait_s(a, 1.0e-3, 43) == 0.0


def test_cuda_graphs_and_textbook_have_no_floor():
    assert host_wait_s(resolve_assumptions({"cuda_graphs": True}), 0.0, 43) == 0.0
    assert host_wait_s(resolve_assumptions({"preset": "textbook"}), 0.0, 43) == 0.0


TINY = {"name": "tiny", "num_layers": 8, "hidden_size": 1024, "ffn_hidden_size": 4096, "num_attention_heads": 8,
        "num_kv_heads": 8, "vocab_size": 32000, "gated_mlp": True, "tie_embeddings": False}


def _stage(model: dict, seq: int, tp: int, assumptions: dict):
    from parplan import evaluate
    spec = {"model": model, "training": {"seq_len": seq, "global_batch_size": 64, "precision": "bf16"},
            "cluster": {"gpu": "H100-SXM-80GB", "num_gpus": 8, "gpus_per_node": 8},
            "plan": {"tp": tp, "pp": 1, "micro_batch_size": 1, "recompute": "none", "zero_stage": 1,
                     "sequence_parallel": tp > 1},
            "assumptions": assumptions}
    return evaluate(spec).stages[0]


def test_a_small_layer_waits_for_the_host():
    """8 layers of hidden 1024 at 256 tokens on one GPU each (DP 8), a 1024-token vocabulary: a layer's fwd+bwd is
    about 6 x 12.6 M weights x 256 tokens = 19 GFLOP, at these shapes about 0.13 ms on an H100, below 0.43 ms, so eager launches make each layer take the
    host's 0.43 ms; CUDA graphs take it back to the GPU's time. (On TP 8 the TP collectives' latency alone keeps
    the GPU busier than the host: no floor there.)"""
    tiny = {**TINY, "vocab_size": 1024}
    eager, graphs = _stage(tiny, 256, 1, {}), _stage(tiny, 256, 1, {"cuda_graphs": True})
    layer_gpu_s = graphs.compute_s / 8  # an upper bound on one layer's GPU work (embedding and head included)
    assert layer_gpu_s < 0.43e-3
    assert eager.compute_s >= 8 * 0.43e-3
    assert eager.compute_s - graphs.compute_s >= 8 * (0.43e-3 - layer_gpu_s) - 1e-12


def test_a_large_layer_is_not_host_bound():
    big = {**TINY, "hidden_size": 8192, "ffn_hidden_size": 28672, "num_attention_heads": 64}
    assert _stage(big, 8192, 8, {}).compute_s == _stage(big, 8192, 8, {"cuda_graphs": True}).compute_s


# ---- the MoE dispatcher's sync (host_floor.moe_sync_exposed_s)


def test_host_lag_by_hand():
    """Kernels issued every 10 us from an empty queue. Six kernels, the first two with no GPU work and four of 5 us:
    they start at 10, 20, 30, 40, 50 and 60 us (the host is always later than the GPU), so the GPU has idled
    60 - 3 x 5 = 45 us when the last starts. Two kernels of 250 us each: only the first kernel's 10 us."""
    assert host_lag_s(10e-6, [(2, 0.0), (4, 20e-6)]) == pytest.approx(45e-6)
    assert host_lag_s(10e-6, [(2, 500e-6), (4, 20e-6)]) == pytest.approx(10e-6)
    assert host_lag_s(10e-6, [(0, 1.0), (3, 0.0)]) == pytest.approx(30e-6)  # no kernel issues no GPU work
    assert host_lag_s(0.0, [(5, 0.0)]) == 0.0


def test_moe_sync_kernels_by_hand():
    """4 local experts in BF16: after the sync 2 + 1 + 4 + 1 + 4 + 1 + 1 + 1 = 15 kernels to the unpermutation, then
    the residual add 1, the next attention block and norm 9 + 1, the router 8 and the preprocessing 14: 48; under
    FP8 a quantisation per expert and GEMM adds 8: 56."""
    assert sum(k for k, _ in moe_sync_kernels(4, False)) == 48
    assert sum(k for k, _ in moe_sync_kernels(4, True)) == 56
    assert [w for _, w in moe_sync_kernels(4, False)] == ["dispatch", "", "fc1", "", "fc2", "", "combine", "", "",
                                                          "rest", "", ""]


def test_moe_sync_exposed_by_hand():
    """No GPU work after the sync (one GPU, tiny experts): 48 kernels x 10 us + the 20 us round trip = 500 us. A
    dispatch all-to-all of 500 us: the GPU waits for the first kernel only, 10 + 20 = 30 us. A forward of 0.3 ms
    after the experts (the 'rest'), 2 x 50 us all-to-all halves and 0.1 ms of experts: the host takes 480 us, the
    GPU's work before the last kernel 0.5 ms: 30 us. The same with no all-to-all and the rest 0.1 ms: the host's
    last kernel comes 480 us after the sync, the GPU's work before it is 0.2 ms: 280 + 20 = 300 us."""
    a = resolve_assumptions()
    assert moe_sync_exposed_s(a, 4, False, {}) == pytest.approx(500e-6)
    assert moe_sync_exposed_s(a, 4, False, {"dispatch": 500e-6, "fc1": 100e-6}) == pytest.approx(30e-6)
    busy = {"dispatch": 50e-6, "combine": 50e-6, "fc1": 70e-6, "fc2": 30e-6, "rest": 300e-6}
    assert moe_sync_exposed_s(a, 4, False, busy) == pytest.approx(30e-6)
    host_bound = {"fc1": 70e-6, "fc2": 30e-6, "rest": 100e-6}
    assert moe_sync_exposed_s(a, 4, False, host_bound) == pytest.approx(300e-6)


def test_which_dispatchers_sync():
    a = resolve_assumptions()
    assert all(moe_dispatch_syncs(a, d, b) for d in ("alltoall", "allgather", "flex") for b in ("deepep", "hybridep"))
    padded = resolve_assumptions({"moe_pad_to_capacity": True})
    assert not moe_dispatch_syncs(padded, "alltoall", "deepep")
    assert not moe_dispatch_syncs(padded, "flex", "hybridep")
    assert moe_dispatch_syncs(padded, "flex", "deepep")  # DeepEP waits for the counts whatever the capacity
    for off in ({"cuda_graphs": True}, {"moe_dispatch_sync": False}, {"preset": "textbook"}):
        assert not moe_dispatch_syncs(resolve_assumptions(off), "alltoall", "deepep")


MOE = {**TINY, "moe": {"num_experts": 8, "top_k": 2, "expert_ffn_hidden_size": 512}}


def test_an_moe_layer_waits_after_its_sync():
    """8 MoE layers of 8 experts, all on one GPU (EP 1, so no all-to-all): each layer's forward waits at least the
    round trip and the first kernel, 30 us, and at most the round trip and all 23 + 33 = 56 kernels from one sync
    to the next (test_moe_sync_kernels_by_hand), 580 us; with the sync off or under CUDA graphs (the MoE layers have no other host floor) it waits 0."""
    eager, off = _stage(MOE, 256, 1, {}), _stage(MOE, 256, 1, {"moe_dispatch_sync": False})
    assert 8 * 30e-6 - 1e-12 <= eager.compute_s - off.compute_s <= 8 * 580e-6 + 1e-12
    assert _stage(MOE, 256, 1, {"cuda_graphs": True}).compute_s == off.compute_s
