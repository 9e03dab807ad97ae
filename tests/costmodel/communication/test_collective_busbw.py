"""NVLink collectives at the measured NCCL bus bandwidth of their kind (issue 19 item 6; costmodel/spec/hardware.py
NVLINK_BUSBW_GBPS holds each figure's source), by hand: one b·s·h activation of 8192 tokens x 8192 x 2 B =
134,217,728 B, TP 4 inside one node, latency off, no TP-comm overlap."""

from __future__ import annotations

import pytest

from parplan.costmodel.spec.assumptions import resolve_assumptions
from parplan.costmodel.evaluation.choice import Choice, choice_costs
from parplan.costmodel.spec.hardware import lookup_gpu, nvlink_busbw_gbps, resolve_gpu
from parplan.frameworks.loader import validate_spec

LLAMA70B = dict(name="llama3-70b", num_layers=80, hidden_size=8192, ffn_hidden_size=28672, num_attention_heads=64,
                num_kv_heads=8, vocab_size=128256)
ACT = 134_217_728


def _costs(gpu: str, sp: bool, **knobs):
    spec = validate_spec(dict(model=LLAMA70B, training=dict(seq_len=8192, global_batch_size=8),
                                    cluster=dict(gpu=gpu, num_gpus=8),
                                    assumptions=dict(include_latency=False, tp_comm_overlap=0.0, **knobs)))
    c = Choice(tp=4, cp=1, pp=1, dp=2, num_microbatches=4, sequence_parallel=sp)
    return choice_costs(spec, c, resolve_gpu(spec.cluster), resolve_assumptions(spec.assumptions))


def test_the_priors_by_gpu_and_kind():
    h100, h800 = lookup_gpu("H100"), lookup_gpu("H800")
    assert nvlink_busbw_gbps(h100, "all_gather") == 360 and nvlink_busbw_gbps(h100, "reduce_scatter") == 360
    assert nvlink_busbw_gbps(h100, "all_reduce") == 470 and nvlink_busbw_gbps(h100, "all_reduce", nvls=False) == 360
    assert nvlink_busbw_gbps(h800, "all_reduce") == 160 and nvlink_busbw_gbps(h800, "all_to_all") == 160
    assert nvlink_busbw_gbps(h100, "all_to_all") is None  # no measurement: line rate x efficiency
    assert nvlink_busbw_gbps(lookup_gpu("B200"), "all_gather") is None


def test_tp_with_sp_runs_at_the_all_gather_busbw_by_hand():
    """SP: 10 ring gathers per layer, each 3/4 x 134,217,728 B / 360e9 = 279.62 µs: 2796.2 µs (at the old
    450 x 0.592 = 266.4 GB/s: 3778.6 µs)."""
    one = 0.75 * ACT / 360e9
    assert one == pytest.approx(279.62e-6, rel=1e-4)
    assert _costs("H100-SXM-80GB", True).dense.tp_s == pytest.approx(10 * one)


def test_tp_without_sp_runs_at_the_nvls_all_reduce_busbw_by_hand():
    """No SP: 4 all-reduces per layer (8 ring halves), each half 3/4 x 134,217,728 / 470e9 = 214.18 µs: 1713.4 µs;
    NVLS off: at 360 GB/s, 2237.0 µs; priors off: 450 x intra_node_bandwidth_efficiency."""
    assert _costs("H100-SXM-80GB", False).dense.tp_s == pytest.approx(8 * 0.75 * ACT / 470e9)
    assert _costs("H100-SXM-80GB", False, nvlink_sharp_all_reduce=False).dense.tp_s == pytest.approx(8 * 0.75 * ACT / 360e9)
    a = resolve_assumptions({})
    off = _costs("H100-SXM-80GB", False, collective_busbw_priors=False).dense.tp_s
    assert off == pytest.approx(8 * 0.75 * ACT / (450e9 * a.intra_node_bandwidth_efficiency))


def test_h800_at_deepseeks_160_and_the_scale_knob_by_hand():
    """H800 (DeepSeek-V3 §3.2.2: NVLink 160 GB/s): 10 x 3/4 x 134,217,728 / 160e9 = 6291.5 µs with SP; the fit's
    handle nvlink_busbw_scale 0.9: / 0.9. A spec overriding the NVLink rate keeps its own rate x efficiency."""
    assert _costs("H800", True).dense.tp_s == pytest.approx(10 * 0.75 * ACT / 160e9)
    assert _costs("H800", True, nvlink_busbw_scale=0.9).dense.tp_s == pytest.approx(10 * 0.75 * ACT / 144e9)
    spec = validate_spec(dict(model=LLAMA70B, training=dict(seq_len=8192, global_batch_size=8),
                                    cluster=dict(gpu="H800", num_gpus=8, intra_node_bandwidth_gbps=300.0),
                                    assumptions=dict(include_latency=False, tp_comm_overlap=0.0)))
    a = resolve_assumptions(spec.assumptions)
    c = Choice(tp=4, cp=1, pp=1, dp=2, num_microbatches=4, sequence_parallel=True)
    assert choice_costs(spec, c, resolve_gpu(spec.cluster), a).dense.tp_s == pytest.approx(
        10 * 0.75 * ACT / (300e9 * a.intra_node_bandwidth_efficiency))
