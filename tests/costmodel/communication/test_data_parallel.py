"""Data-parallel time (costmodel/communication/data_parallel.py) with HSDP replicas and DualPipe's two copies, worked by hand on
memory_dims_cases.MODEL: the shard group's collectives plus the replicas' all-reduce, inside a node and across nodes.
"""

from __future__ import annotations

import pytest

from parplan.costmodel.schedules.schedule import Schedule

from tests import memory_dims_cases as memory_dims


def test_hsdp_dp_time_inside_a_node_by_hand():
    """8 GPUs of one node, ZeRO-1. Today: reduce-scatter 7/8·4 B and all-gather 7/8·2 B per parameter over
    NVLink: 5.25 B / 360 GB/s (the reduce-scatter/all-gather prior). Two replicas: reduce-scatter 3/4·4 and
    all-gather 3/4·2 in the shard of 4 (4.5 B / 360 GB/s), plus the all-reduce of the 1/4 gradient shard over the 2
    replicas, 2·(1/2)·4/4 = 1 B / 470 GB/s (the NVLS all-reduce prior)
    (Megatron-Core param_and_grad_buffer.py:815-830: reduce-scatter, then the inter-instance all-reduce)."""
    spec = memory_dims.spec()
    assert memory_dims.costs(spec).dense.dp_s == pytest.approx(memory_dims.P_LAYER * 5.25 / memory_dims.NV)
    assert memory_dims.costs(spec, zero_replicas=2).dense.dp_s == pytest.approx(memory_dims.P_LAYER * (4.5 / memory_dims.NV + 1.0 / memory_dims.NV_AR))
    # ZeRO-2 (pp = 1): the per-micro-batch reduce-scatter 3/4·4 plus the replicas' all-reduce 1 B, exposed
    z2 = memory_dims.costs(spec, zero_stage=2, zero_replicas=2, num_microbatches=1)
    assert z2.dense.zero_s == pytest.approx(memory_dims.P_LAYER * (3.0 / memory_dims.NV + 1.0 / memory_dims.NV_AR))


def test_hsdp_replicas_across_nodes_by_hand():
    """16 GPUs on 2 nodes, dp = 16, two replicas: the shard of 8 is one node (NVLink), the replicas pair GPU i
    of node 0 with GPU i of node 1 (stride 8: the network). Per parameter: 7/8·4 + 7/8·2 B over NVLink and
    2·(1/2)·4/8 = 0.5 B over the NIC. Today's one group of 16 spans both nodes: (15/16)·6 B over the NIC."""
    spec = memory_dims.spec(gpus=16, gbs=16)
    today = memory_dims.costs(spec, micro_batch_size=1)
    hsdp = memory_dims.costs(spec, micro_batch_size=1, zero_replicas=2)
    assert today.dense.dp_s == pytest.approx(memory_dims.P_LAYER * (15 / 16) * 6 / memory_dims.NET)
    assert hsdp.dense.dp_s == pytest.approx(memory_dims.P_LAYER * (5.25 / memory_dims.NV + 0.5 / memory_dims.NET))
    assert hsdp.links["dp_shard"].nvlink and not hsdp.links["dp_replica"].nvlink


def test_deepspeed_zero_0_1_hide_no_dp_traffic_by_hand():
    """DeepSpeed's ZeRO-0/1 reduce gradients after the backward (no gradient hooks: overlap_comm is ignored,
    microsoft/DeepSpeed#1246; its pipeline engine reduces after the flush), so its profile's
    dp_overlap_min_zero_stage 2 hides nothing below ZeRO-2. 8 H100s, dp_comm_overlap 0.5, the fixed share only:
    ZeRO-1 under DeepSpeed (BF16 gradient reduce, grad_reduce_bytes 2): reduce-scatter 7/8·2 + all-gather 7/8·2 =
    3.5 B / 360 GB/s per parameter, all of it exposed; the framework-neutral spec (FP32 reduce, 7/8·4 + 7/8·2 =
    5.25 B) hides half. ZeRO-2 under DeepSpeed hides half of its once-per-step all-gather, 7/8·2 = 1.75 B."""
    knobs = dict(dp_comm_overlap=0.5, overlap_limited_by_compute=False)
    ds = memory_dims.spec(assumptions=knobs, framework="deepspeed")
    neutral = memory_dims.spec(assumptions=knobs)
    assert memory_dims.costs(ds, zero_stage=1).dense.dp_s == pytest.approx(memory_dims.P_LAYER * 3.5 / memory_dims.NV)
    assert memory_dims.costs(neutral, zero_stage=1).dense.dp_s == pytest.approx(
        memory_dims.P_LAYER * 5.25 / memory_dims.NV * 0.5)
    assert memory_dims.costs(ds, zero_stage=2).dense.dp_s == pytest.approx(
        memory_dims.P_LAYER * 1.75 / memory_dims.NV * 0.5)
    # the user's own value wins over the profile's convention
    own = memory_dims.spec(assumptions={**knobs, "dp_overlap_min_zero_stage": 0}, framework="deepspeed")
    assert memory_dims.costs(own, zero_stage=1).dense.dp_s == pytest.approx(memory_dims.P_LAYER * 3.5 / memory_dims.NV * 0.5)


def test_dualpipe_copies_sum_their_gradients_by_hand():
    """DualPipe keeps two copies of every stage (rank r runs stages r and p-1-r; deepseek-ai/DualPipe@3da1bbe
    examples/example_dualpipe.py:167-174 adds each stage's gradient from the mirrored rank after the step): once per
    step each gradient shard is all-reduced between the two copies, 2·(1/2)·4/dp B per parameter over the pipeline
    group's link. 16 GPUs on 2 nodes, PP 2 × DP 8: the DP group is a node (5.25 B / 360 GB/s, as 1F1B) and the
    copies are a node apart, 4/8 = 0.5 B / 50 GB/s more. PP 2 × DP 1 on 2 GPUs of a node: 4 B over NVLink's
    450 GB/s, where 1F1B has no DP traffic at all. DualPipeV holds one copy: nothing more."""
    spec16 = memory_dims.spec(gpus=16, gbs=16)
    kw = dict(pp=2, dp=8, micro_batch_size=1, num_microbatches=4)
    one_f_one_b = memory_dims.costs(spec16, **kw)
    dualpipe = memory_dims.costs(spec16, schedule=Schedule.DUALPIPE, **kw)
    assert one_f_one_b.dense.dp_s == pytest.approx(memory_dims.P_LAYER * 5.25 / memory_dims.NV)
    assert dualpipe.dense.dp_s == pytest.approx(memory_dims.P_LAYER * (5.25 / memory_dims.NV + 0.5 / memory_dims.NET))
    assert memory_dims.costs(spec16, schedule=Schedule.DUALPIPEV, **kw).dense.dp_s == pytest.approx(one_f_one_b.dense.dp_s)
    spec2 = memory_dims.spec(gpus=2, gbs=16)
    kw = dict(pp=2, dp=1, micro_batch_size=1, num_microbatches=16)
    assert memory_dims.costs(spec2, **kw).dense.dp_s == 0.0
    assert memory_dims.costs(spec2, schedule=Schedule.DUALPIPE, **kw).dense.dp_s == pytest.approx(
        memory_dims.P_LAYER * 4 / 450e9)
