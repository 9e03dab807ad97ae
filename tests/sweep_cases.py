"""Small sweeps for the sweep tests: a tiny dense model, 24 points, each solved in well under a second."""

from __future__ import annotations

import copy

TINY_BASE = {
    "model": {"name": "tiny-1b", "num_layers": 8, "hidden_size": 2048, "ffn_hidden_size": 5632,
              "num_attention_heads": 16, "num_kv_heads": 4, "vocab_size": 32000},
    "training": {"seq_len": 2048, "global_batch_size": 32},
    "cluster": {"gpu": "H100-SXM-80GB", "num_gpus": 8, "gpus_per_node": 8},
    "search": {"micro_batch_size": [1, 2]},
}

SWEEP_24 = {
    "base": TINY_BASE,
    "axes": {"cluster.gpu": ["H100-SXM-80GB", "A100-SXM-80GB"], "cluster.num_gpus": [8, 16, 32],
             "training.seq_len": [2048, 4096], "training.global_batch_size": [32, 64]},
    "budget": {"tokens": 1.0e10},
    "prices": {"H100-SXM-80GB": 2.5, "A100-SXM-80GB": 1.5},
    "solver": {"time_limit_s": 20.0, "deterministic": True},
}


def sweep_24(**changes):
    data = copy.deepcopy(SWEEP_24)
    data.update(changes)
    return data
