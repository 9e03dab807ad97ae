"""The host's launch floor (costmodel/spec/host_floor.py), worked by hand.

43 kernels (16 forward + 27 backward, DENSE_LAYER_OPS) x 10 us = 0.43 ms of host time per dense layer and
micro-batch. A layer whose GPU work takes 0.30 ms waits 0.13 ms for the host; one of 1 ms waits nothing; with
CUDA graphs the floor is 0.
"""

from __future__ import annotations

import pytest

from parplan.costmodel.spec.assumptions import resolve_assumptions
from parplan.costmodel.spec.host_floor import DENSE_LAYER_KERNELS, DENSE_LAYER_OPS, host_layer_s, host_wait_s


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
