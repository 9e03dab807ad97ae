"""Every number in the seed articles that the cost model covers, reproduced through ``parplan.costmodel``.

Seeds (in ``shared/seeds/``): 000 "AI Infra 系列 · 第六章 并行策略", 001 "集合通信与模型并行",
003 "3D / 5D 并行的组合与选择". Each test names its seed and section; the numbers are the seeds' printed ones.
Seed 003's ``parallel_plan.py`` table is in ``test_seed_table.py``.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parplan.costmodel.schedules import bubble
from parplan.costmodel.communication import collectives, mesh
from parplan.costmodel.moe import ep_overlap
from parplan.costmodel.compute.architecture import Architecture
from parplan.costmodel.schedules.schedule import Schedule
from parplan.costmodel.spec.assumptions import resolve_assumptions
from parplan.costmodel.evaluation.choice import Choice, choice_costs
from parplan.costmodel.evaluation.evaluate import evaluate
from parplan.costmodel.spec.hardware import lookup_gpu
from parplan.costmodel.memory.memory import model_state_bytes
from parplan.costmodel.spec.spec import PlanSpec, Spec
from parplan.frameworks.loader import validate_spec

GiB = 2**30
MiB = 2**20
MB = 1e6

LLAMA3_70B = dict(name="llama3-70b", num_layers=80, hidden_size=8192, ffn_hidden_size=28672,
                  num_attention_heads=64, num_kv_heads=8, vocab_size=128256, gated_mlp=True,
                  tie_embeddings=False)


def textbook_spec(model: dict = LLAMA3_70B, seq: int = 8192, gbs: int = 512, gpus: int = 64) -> Spec:
    return validate_spec(dict(
        framework="any",  # the seeds' framework-neutral space and conventions
        model=model, training=dict(seq_len=seq, global_batch_size=gbs),
        cluster=dict(gpu="H100-SXM-80GB", num_gpus=gpus, gpus_per_node=8), assumptions=dict(preset="textbook")))


# ============================================================================ seed 000 §1 mem_ledger.py
MEM_LEDGER = [  # (params, GPUs, [DDP, ZeRO-1, ZeRO-2, ZeRO-3] GiB per GPU, 1 decimal)
    (7e9, 8, [104.3, 35.9, 24.4, 13.0]),
    (70e9, 64, [1043.1, 273.0, 144.6, 16.3]),
    (671e9, 2048, [9998.7, 2503.3, 1254.1, 4.9]),
]


@pytest.mark.parametrize("params,world,expected", MEM_LEDGER, ids=["7B-8gpu", "70B-64gpu", "671B-2048gpu"])
def test_seed000_s1_mem_ledger_table(params, world, expected):
    """Seed 000 §1 ``mem_ledger.py``: per-GPU model states under DDP / ZeRO-1 / ZeRO-2 / ZeRO-3 with
    2 + 2 + 12 bytes per parameter: 16P, P(12/N + 4), P(14/N + 2), 16P/N."""
    got = [model_state_bytes(params, zero, world, weight_bytes=2, grad_bytes=2, optimizer_bytes=12) / GiB
           for zero in (0, 1, 2, 3)]
    assert [round(g, 1) for g in got] == expected


def test_seed000_s1_mem_ledger_flags_over_80_gib():
    """Seed 000 §1: '← 装不下（> 80 GiB）' marks DDP at 7B; DDP, ZeRO-1 and ZeRO-2 at 70B and 671B."""
    flags = [[model_state_bytes(p, z, n, 2, 2, 12) / GiB > 80 for z in (0, 1, 2, 3)] for p, n, _ in MEM_LEDGER]
    assert flags == [[True, False, False, False], [True, True, True, False], [True, True, True, False]]


def test_seed000_s1_bf16_weights_of_671b():
    """Seed 000 §1: '671B 光 bf16 参数就 1342 GiB' — the unsharded 2-byte copy ZeRO-1/2 keep on every GPU.
    (1342 is in 1e9 bytes; the seed's 'GiB' label is loose: it is 1249.8 GiB.)"""
    weights = model_state_bytes(671e9, 0, 1, weight_bytes=2, grad_bytes=0, optimizer_bytes=0)
    assert weights / 1e9 == pytest.approx(1342)
    # ZeRO-1/2 never shard it: the per-GPU floor at any world size
    assert model_state_bytes(671e9, 2, 10**9, 2, 2, 12) >= weights


# ============================================================================ seed 000 §3 comm_ledger.py
COMM_LEDGER = [  # (name, b, s, h, top_k, tp, (TP, EP, PP) MB per layer)
    ("7B 小 batch", 8, 2048, 4096, 2, 8, (469.8, 536.9, 134.2)),
    ("70B 中 batch", 16, 4096, 8192, 2, 8, (3758.1, 4295.0, 1073.7)),
    ("671B MoE", 32, 4096, 7168, 8, 1, (0.0, 30064.8, 1879.0)),
]


@pytest.mark.parametrize("name,b,s,h,k,tp,expected", COMM_LEDGER, ids=["7B", "70B", "671B-MoE"])
def test_seed000_s3_comm_ledger_per_layer(name, b, s, h, k, tp, expected):
    """Seed 000 §3 ``comm_ledger.py``: TP / EP / PP bytes of one layer, bf16, in MB (1e6 B)."""
    got = collectives.per_layer_comm_bytes(b, s, h, k, tp, dtype_bytes=2)
    assert tuple(round(x / MB, 1) for x in got) == expected


def test_seed000_s3_ep_is_16x_pp_for_671b():
    """Seed 000 §3: '671B 那行 top_k=8，EP 流量直接干到 30 GB/层，是 PP 的 16 倍'."""
    _, ep, pp = collectives.per_layer_comm_bytes(32, 4096, 7168, 8, 1)
    assert round(ep / 1e9) == 30
    assert ep / pp == 16


# ============================================================================ seed 001 §2.2-2.3 alpha-beta
def test_seed001_s22_ring_vs_naive_allreduce_traffic():
    """Seed 001 §2.2: 8 cards, ring all-reduce moves 2(N-1)/N·S = 1.75 S per device vs 14 S naive (8x)."""
    S = 64 * MiB
    ring = collectives.ring_allreduce_bytes(S, 8)
    assert ring == 1.75 * S
    assert 2 * (8 - 1) * S / ring == 8
    assert collectives.ring_allreduce_bytes(S, 512) / S == pytest.approx(2, rel=0.005)  # ~2 at any N


def test_seed001_s23_alpha_beta_64mib_allreduce():
    """Seed 001 §2.3: 8 GPUs, 64 MiB ring all-reduce: intra-node alpha 5 us at 150 GB/s -> 70 us +
    0.78 ms ≈ 0.85 ms; inter-node alpha 30 us at 25 GB/s -> 420 us + 4.7 ms ≈ 5.1 ms; '差了六倍'."""
    S = 64 * MiB
    intra = collectives.ring_allreduce_time_s(S, 8, 5e-6, 150e9)
    inter = collectives.ring_allreduce_time_s(S, 8, 30e-6, 25e9)
    assert collectives.ring_allreduce_time_s(0, 8, 5e-6, 150e9) == pytest.approx(70e-6)
    assert collectives.ring_allreduce_time_s(0, 8, 30e-6, 25e9) == pytest.approx(420e-6)
    assert round((intra - 70e-6) * 1e3, 2) == 0.78
    assert round((inter - 420e-6) * 1e3, 1) == 4.7
    assert round(intra * 1e3, 2) == 0.85
    assert round(inter * 1e3, 1) == 5.1
    assert round(inter / intra) == 6


def test_seed001_s23_defaults_match_catalog_latencies():
    """Seed 001 §2.3's alphas (about 5 us in a node, 20-50 us across) are the catalog defaults."""
    gpu = lookup_gpu("H100")
    assert gpu.intra_node_latency_us == 5.0
    assert 20.0 <= gpu.inter_node_latency_us <= 50.0


# ============================================================================ seed 001 §3.3 / §7 estimate_tp_comm
def test_seed001_s33_estimate_tp_comm_43_75_gib():
    """Seed 001 §3.3 and §7 ``estimate_tp_comm(4, 2048, 4096, 2, 8, 100)``: S = 64 MiB, 112 MiB per
    all-reduce per GPU, 448 MiB per layer (4 all-reduces), 43.75 GiB for 100 layers (≈ 47 GB)."""
    assert 4 * 2048 * 4096 * 2 == 67_108_864 == 64 * MiB
    assert collectives.ring_allreduce_bytes(64 * MiB, 8) == 112 * MiB
    assert collectives.tp_comm_bytes_per_step(4, 2048, 4096, 2, 8, 1) == 448 * MiB
    total = collectives.tp_comm_bytes_per_step(4, 2048, 4096, 2, 8, 100)
    assert total / GiB == 43.75
    assert round(total / 1e9) == 47


def test_seed001_s33_tp_comm_time_per_step():
    """Seed 001 §3.3: at 150 GB/s the step's TP traffic takes ≈ 0.31 s; at 25 GB/s ≈ 1.9 s.
    And batch 4 -> 1 scales the traffic by exactly 1/4."""
    total = collectives.tp_comm_bytes_per_step(4, 2048, 4096, 2, 8, 100)
    assert round(total / 150e9, 2) == 0.31
    assert round(total / 25e9, 1) == 1.9
    assert collectives.tp_comm_bytes_per_step(1, 2048, 4096, 2, 8, 100) == total / 4
    assert collectives.tp_comm_bytes_per_step(4, 2048, 4096, 2, 8, 100, steps=3) == 3 * total


# ============================================================================ seed 000 §4 / seed 001 §4 bubbles
BUBBLE_TABLE = [  # (pp, m, 1F1B %, ZB1P %, DualPipe %), F=1, B=2, W=0.5, F&B=2.0
    (8, 16, 30.4, 22.6, 13.5),
    (8, 64, 9.9, 6.8, 3.8),
    (16, 64, 19.0, 13.5, 8.4),
    (16, 256, 5.5, 3.8, 2.2),
]


@pytest.mark.parametrize("pp,m,f1b,zb,dual", BUBBLE_TABLE, ids=[f"pp{r[0]}-m{r[1]}" for r in BUBBLE_TABLE])
def test_seed000_s4_bubble_table(pp, m, f1b, zb, dual):
    """Seed 000 §4 ``bubble.py`` (DeepSeek-V3 Table 2): 1F1B (PP-1)(F+B), ZB1P (PP-1)(F+B-2W),
    DualPipe (PP/2-1)(F&B+B-3W), as b / (m(F+B) + b), with F=1, B=2, W=0.5, F&B=2.0."""
    got = [round(100 * bubble.bubble_ratio(s, pp, m, F=1.0, B=2.0, W=0.5, FandB=2.0), 1)
           for s in (Schedule.ONE_F_ONE_B, Schedule.ZB_H1, Schedule.DUALPIPE)]
    assert got == [f1b, zb, dual]


def test_seed001_s41_1f1b_bubble_fraction():
    """Seed 001 §4.1: (p-1)/(m+p-1); p=8, m=16 -> 7/23 ≈ 30 %; m=64 -> 7/71 ≈ 10 %."""
    assert bubble.bubble_fraction(8, 16) == pytest.approx(7 / 23)
    assert round(100 * bubble.bubble_fraction(8, 16)) == 30
    assert bubble.bubble_fraction(8, 64) == pytest.approx(7 / 71)
    assert round(100 * bubble.bubble_fraction(8, 64)) == 10
    # the same as bubble_ratio for 1F1B at any F, B (the time-slot count does not depend on them)
    assert bubble.bubble_ratio(Schedule.ONE_F_ONE_B, 8, 16, F=1.3, B=2.9) == pytest.approx(7 / 23)


def test_seed001_s43_interleaved_bubble():
    """Seed 001 §4.3: interleaved (p-1)/(m·v+p-1); p=8, m=32, v=2 -> 7/71 ≈ 10 %, half of 1F1B's
    bubble time at the same m ('同样的 m 下气泡减半')."""
    assert bubble.bubble_fraction(8, 32, vpp=2) == pytest.approx(7 / 71)
    assert round(100 * bubble.bubble_fraction(8, 32, vpp=2)) == 10
    for v in (2, 3, 4):
        t_1f1b = bubble.bubble_time(Schedule.ONE_F_ONE_B, 8, 1.0, 2.0)
        assert bubble.bubble_time(Schedule.INTERLEAVED, 8, 1.0, 2.0, vpp=v) == pytest.approx(t_1f1b / v)
        assert bubble.bubble_ratio(Schedule.INTERLEAVED, 8, 32, vpp=v) == pytest.approx(bubble.bubble_fraction(8, 32, v))


def test_seed003_1f1b_bubble_at_128_microbatches():
    """Seed 003: 'DP=4 时每条流水线每步有 128 个 micro-batch，1F1B 的气泡 (p-1)/(m+p-1) 只有 1%' (p=2)."""
    assert round(100 * bubble.bubble_fraction(2, 128)) == 1


# ============================================================================ seed 000 §6 EP overlap
def test_seed000_s6_required_flops_per_byte():
    """Seed 000 §6 ``wave_ratio.py``: C/B <= 2d: 6144 (d=3072, V4-Pro), 4096 (d=2048), 22016 (d=11008,
    classic 7B FFN); i.e. 6.1, 4.1 and 22.0 TFLOP/s hidden per 1 GB/s of interconnect."""
    for d, need, per_gbps in ((3072, 6144, 6.1), (2048, 4096, 4.1), (11008, 22016, 22.0)):
        assert ep_overlap.required_flops_per_byte(d) == need
        assert round(ep_overlap.required_flops_per_byte(d) * 1e9 / 1e12, 1) == per_gbps


def test_seed000_s6_h100_50gbps_overlap_check():
    """Seed 000 §6: H100 989 TFLOPS over 50 GB/s IB against d=3072: MFU 100 % -> C/B 19780, cannot hide;
    40 % -> 7912, cannot; 30 % -> 5934, can fully overlap."""
    for mfu, cb, ok in ((1.0, 19780, False), (0.4, 7912, False), (0.3, 5934, True)):
        assert round(ep_overlap.achieved_flops_per_byte(989, 50, mfu)) == cb
        assert ep_overlap.can_fully_overlap(989, 50, mfu, 3072) is ok


# ============================================================================ seed 003 mesh.py
def test_seed003_mesh_groups_and_locality():
    """Seed 003 ``mesh.py``: TP=CP=DP=PP=2, 8 GPUs per node; first four groups per axis, 8 groups each;
    TP, CP, DP groups inside a node, PP groups across nodes."""
    m = mesh.build_mesh(tp=2, cp=2, dp=2, pp=2)
    expected = {
        "tp": ([[0, 1], [2, 3], [4, 5], [6, 7]], True),
        "cp": ([[0, 2], [1, 3], [4, 6], [5, 7]], True),
        "dp": ([[0, 4], [1, 5], [2, 6], [3, 7]], True),
        "pp": ([[0, 8], [1, 9], [2, 10], [3, 11]], False),
    }
    for axis, (first4, local) in expected.items():
        g = mesh.groups(m, axis)
        assert g.shape == (8, 2), axis
        assert g[:4].tolist() == first4, axis
        assert mesh.groups_within_domain(g, 8) is local, axis
        # every rank in exactly one group per axis
        assert sorted(g.ravel().tolist()) == list(range(16)), axis


def test_seed003_mesh_rank13_coordinates():
    """Seed 003 ``mesh.py``: 'rank 13 的坐标：PP=1 DP=1 CP=0 TP=1'."""
    m = mesh.build_mesh(2, 2, 2, 2)
    assert mesh.coordinates(m, 13) == {"pp": 1, "dp": 1, "cp": 0, "tp": 1}


def test_seed003_mesh_group_strides():
    """Seed 003 ``mesh.py`` order tp-cp-dp-pp: a group's stride is the product of the inner degrees."""
    for tp, cp, dp, pp in itertools.product((1, 2, 4), (1, 2, 3), (1, 2), (1, 2, 3)):
        m = mesh.build_mesh(tp, cp, dp, pp)
        strides = mesh.group_strides(tp, cp, dp)
        for axis, size in (("tp", tp), ("cp", cp), ("pp", pp)):
            stride = strides[axis][0]
            g = mesh.groups(m, axis)
            assert g.shape[1] == size
            if size > 1:
                assert set(np.diff(g, axis=1).ravel().tolist()) == {stride}, axis


AXIS_STRIDE = {"tp": lambda tp, cp, dp: 1, "cp": lambda tp, cp, dp: tp,
               "dp": lambda tp, cp, dp: tp * cp, "pp": lambda tp, cp, dp: tp * cp * dp}


@settings(derandomize=True, max_examples=300, deadline=None)
@given(tp=st.integers(1, 9), cp=st.integers(1, 9), dp=st.integers(1, 9), pp=st.integers(1, 9),
       domain=st.sampled_from([2, 3, 4, 6, 8, 16, 32, 64, 72]))
def test_seed003_span_within_domain_matches_groups(tp, cp, dp, pp, domain):
    """Seed 003 ``mesh.py`` locality (``len({r // GPUS_PER_NODE for r in g}) == 1``) equals the closed
    form ``span_within_domain`` for every axis, whenever the world is a whole number of domains (a real
    cluster: nodes × GPUs per node). The pp degree is adjusted so that tp·cp·dp·pp covers the nodes."""
    world = tp * cp * dp * pp
    if world % domain:
        pp = int(pp * domain // np.gcd(world, domain))  # smallest multiple that makes world a whole number of domains
    m = mesh.build_mesh(tp, cp, dp, pp)
    assert m.size % domain == 0
    for axis, size in (("tp", tp), ("cp", cp), ("dp", dp), ("pp", pp)):
        g = mesh.groups(m, axis)
        seed_local = all(len({int(r) // domain for r in row}) == 1 for row in g)  # the seed's own test
        assert mesh.groups_within_domain(g, domain) is seed_local
        assert mesh.span_within_domain(AXIS_STRIDE[axis](tp, cp, dp), size, domain) is seed_local, axis


@pytest.mark.parametrize("tp,cp,dp,pp,domain", [
    (2, 2, 2, 2, 8), (8, 1, 8, 1, 8), (4, 2, 2, 2, 8), (8, 2, 4, 2, 8), (1, 8, 1, 2, 8), (2, 4, 2, 1, 8),
    (8, 4, 2, 2, 72), (8, 9, 1, 2, 72), (4, 1, 18, 1, 72), (16, 1, 2, 1, 16), (4, 4, 4, 4, 16),
])
def test_seed003_span_within_domain_cases(tp, cp, dp, pp, domain):
    """Seed 003 ``mesh.py``: explicit layouts (8-GPU nodes, NVL72, 16-GPU domains) agree axis by axis."""
    m = mesh.build_mesh(tp, cp, dp, pp)
    for axis, size in (("tp", tp), ("cp", cp), ("dp", dp), ("pp", pp)):
        assert (mesh.span_within_domain(AXIS_STRIDE[axis](tp, cp, dp), size, domain)
                is mesh.groups_within_domain(mesh.groups(m, axis), domain)), axis


# ============================================================================ seed 003 exercise 1 / text
def _dense_layer_costs(tp: int):
    spec = textbook_spec()
    a = resolve_assumptions(spec.assumptions)
    c = Choice(tp=tp, cp=1, pp=1, dp=64 // tp, num_microbatches=512 // (64 // tp))
    return choice_costs(spec, c, lookup_gpu(spec.cluster.gpu), a).dense


def test_seed003_exercise1_tp_comm_to_compute_ratio():
    """Seed 003 练习 1: T_TP / T_compute = 16 (t-1) h P e / (B f_layer) ≈ 0.031 (t-1) for 70B at 8K
    (f_layer ≈ 5.5e9, B = 450 GB/s, Pe = 593 TFLOPS): t=4 -> ≈ 9 %, t=8 -> ≈ 22 %."""
    spec = textbook_spec()
    arch = Architecture(spec.model)
    f_layer = arch.dense_layer_linear_flops + arch.attention_core_flops(8192)
    assert round(f_layer / 1e9, 1) == 5.5
    ratios = {}
    for t in (2, 4, 8):
        layer = _dense_layer_costs(t)
        ratios[t] = layer.tp_s / layer.compute_s
        assert round(ratios[t] / (t - 1), 3) == 0.031
    assert round(100 * ratios[4]) == 9
    assert round(100 * ratios[8]) == 22
    assert ratios[8] / ratios[4] == pytest.approx(7 / 3)  # 't 从 4 到 8，比例约变成 7/3 倍'


def test_seed003_lm_head_is_about_1_1_layers():
    """Seed 003: '128K 词表的输出层约等于 1.1 个 Transformer 层的计算'; 'K、V 只有隐藏维度的 1/8' (GQA)."""
    arch = Architecture(textbook_spec().model)
    f_layer = arch.dense_layer_linear_flops + arch.attention_core_flops(8192)
    assert round(arch.head_flops / f_layer, 1) == 1.1
    assert arch.kv_dim / arch.hidden == 1 / 8


def test_seed003_last_stage_is_10_percent_slower_at_pp8():
    """Seed 003: 'PP=8 时每个 stage 只有 10 层，最后一个 stage 比平均慢约 10%' (the LM head's compute;
    the step-time shares of 不均衡 are checked in test_seed_table.py)."""
    ev = evaluate(textbook_spec(), PlanSpec(tp=4, cp=2, pp=8))
    times = [s.compute_s for s in ev.stages]
    assert [s.layers for s in ev.stages] == [10] * 8
    assert round(100 * (times[-1] / (sum(times) / len(times)) - 1)) == 10
