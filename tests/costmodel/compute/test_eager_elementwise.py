"""Unfused elementwise ops (costmodel/compute/eager_elementwise.py), worked by hand from torchtitan@9dec370's Llama."""

from __future__ import annotations

import pytest

from parplan import evaluate
from parplan.costmodel.compute.architecture import Architecture
from parplan.costmodel.compute.eager_elementwise import eager_extra_bytes_per_token, layer_widths
from parplan.costmodel.compute.efficiency import hbm_bandwidth_gbps
from parplan.costmodel.spec.hardware import CATALOG
from parplan.costmodel.spec.spec import ModelSpec

LLAMA3_8B = dict(name="llama3-8b", num_layers=32, hidden_size=4096, ffn_hidden_size=14336, num_attention_heads=32,
                 num_kv_heads=8, vocab_size=128256, gated_mlp=True, tie_embeddings=False)


def test_llama3_8b_layer_by_hand():
    """h 4096, queries 4096, keys 1024 (8 KV heads of 128), FFN 14336, one GPU. Forward: two norms 2·32·4096 =
    262,144; RoPE 16·(4096 + 1024) = 81,920; the KV repeat 4·(1024 + 4096) = 20,480; the output copy 4·4096 = 16,384;
    SwiGLU 4·14336 = 57,344; 438,272 bytes per token. Backward: 2·52·4096 = 425,984; 81,920; 20,480; 16,384;
    6·14336 = 86,016; 630,784."""
    widths = layer_widths(Architecture(ModelSpec(**LLAMA3_8B)), tp=1, sp=False, swiglu_width=14336)
    assert eager_extra_bytes_per_token(widths) == (438_272, 630_784)


def test_tensor_parallel_shares_and_sequence_parallel_norms():
    """Under TP 2 each GPU holds half the heads and half the FFN; the norms run over the whole hidden state on every
    rank without SP (2·2·32·4096·... stays), over half of it with SP: with SP everything halves."""
    arch = Architecture(ModelSpec(**LLAMA3_8B))
    one = sum(eager_extra_bytes_per_token(layer_widths(arch, 1, False, 14336)))
    with_sp = sum(eager_extra_bytes_per_token(layer_widths(arch, 2, True, 14336 / 2)))
    without_sp = sum(eager_extra_bytes_per_token(layer_widths(arch, 2, False, 14336 / 2)))
    assert with_sp == one / 2
    assert without_sp - with_sp == 2 * (32 + 52) * 4096 / 2


def test_no_kv_repeat_without_grouped_queries():
    """Multi-head attention (as many KV heads as query heads) repeats nothing: the repeat's 4·(1024 + 4096) bytes per
    token forward and backward are gone."""
    mha = Architecture(ModelSpec(**dict(LLAMA3_8B, num_kv_heads=32)))
    gqa = Architecture(ModelSpec(**LLAMA3_8B))
    fwd_mha, bwd_mha = eager_extra_bytes_per_token(layer_widths(mha, 1, False, 14336))
    fwd_gqa, bwd_gqa = eager_extra_bytes_per_token(layer_widths(gqa, 1, False, 14336))
    rope_more = 16 * (4096 - 1024)  # MHA rotates 4096-wide keys
    assert fwd_mha == fwd_gqa - 20_480 + rope_more and bwd_mha == bwd_gqa - 20_480 + rope_more


def test_eager_step_costs_the_traffic_at_hbm_bandwidth():
    """Llama-3 8B on 8 H100 (DP 8, micro-batch 2 of 8K, one micro-batch, no recompute, CUDA graphs so no host floor):
    eager adds 16,384 tokens x 32 layers x 1,069,056 bytes at 3.35 TB/s = 0.16731 s to the step, and nothing when
    fused (the default)."""
    spec = {"model": LLAMA3_8B, "training": {"seq_len": 8192, "global_batch_size": 16, "precision": "bf16"},
            "cluster": {"gpu": "H100-SXM-80GB", "num_gpus": 8, "gpus_per_node": 8},
            "plan": {"tp": 1, "pp": 1, "micro_batch_size": 2, "recompute": "none", "zero_stage": 1},
            "assumptions": {"cuda_graphs": True}}
    fused = evaluate(spec).metrics.step_time_s
    spec["assumptions"]["eager_elementwise"] = True
    eager = evaluate(spec).metrics.step_time_s
    hbm_Bps = hbm_bandwidth_gbps(CATALOG["H100-SXM-80GB"]) * 1e9
    assert hbm_Bps == 3.35e12
    assert eager - fused == pytest.approx(16_384 * 32 * 1_069_056 / hbm_Bps, rel=1e-9)
