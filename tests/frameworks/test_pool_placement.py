"""Where a plan on several pools runs (frameworks/pool_placement.py, issue 21): stage s on the global ranks
[s·tp·cp·dp, (s+1)·tp·cp·dp) (Megatron-Core's tp-cp-ep-dp-pp order), consecutive stages of one pool on whole nodes
of that pool, the host order written into the export and read back into ``stage_pools``."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parplan.costmodel.spec.spec import Plan
from parplan.frameworks.export_common import ExportError
from parplan.frameworks.loader import validate_spec
from parplan.frameworks.pool_placement import (host_order_array, rank_blocks, read_host_order,
                                               stage_pools_from_host_order)

MODEL = dict(name="small", num_layers=8, hidden_size=1024, ffn_hidden_size=4096, num_attention_heads=16,
             num_kv_heads=4, vocab_size=32000, gated_mlp=True, tie_embeddings=False)
GPUS = ("H100-SXM-80GB", "A100-SXM-80GB", "H200-SXM-141GB")


def pools_spec(per_node: list[int]):
    pools = [{"gpu": GPUS[k], "num_gpus": 64 * g, "gpus_per_node": g} for k, g in enumerate(per_node)]
    return validate_spec({"framework": "any", "model": MODEL, "cluster": {"pools": pools},
                          "training": {"seq_len": 2048, "global_batch_size": 64, "precision": "bf16"}})


def plan_of(tp: int, dp: int, stage_pools: list[int]) -> Plan:
    return Plan.model_construct(tp=tp, cp=1, dp=dp, pp=len(stage_pools), stage_pools=stage_pools)


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(per_node=st.lists(st.sampled_from([1, 2, 4, 8]), min_size=2, max_size=3), tp=st.sampled_from([1, 2, 4]),
       dp=st.sampled_from([1, 2, 3, 4]), data=st.data())
def test_each_stage_runs_on_its_pool_in_megatron_rank_order(per_node, tp, dp, data):
    stage_pools = data.draw(st.lists(st.integers(0, len(per_node) - 1), min_size=1, max_size=6))
    spec, plan, w = pools_spec(per_node), plan_of(tp, dp, stage_pools), tp * dp
    runs, start = [], 0  # maximal runs of one pool, as (pool, stages)
    for s in range(1, len(stage_pools) + 1):
        if s == len(stage_pools) or stage_pools[s] != stage_pools[start]:
            runs.append((stage_pools[start], s - start))
            start = s
    straddles = any(n * w > per_node[k] and (n * w) % per_node[k] for k, n in runs)
    if straddles:  # a node would hold two pools' ranks: refused, naming the field
        with pytest.raises(ExportError, match=r"^plan\.stage_pools: stages .* not whole"):
            rank_blocks(spec, plan)
    else:
        check_blocks(spec, plan, stage_pools, per_node, w)


def check_blocks(spec, plan, stage_pools, per_node, w):
    blocks = rank_blocks(spec, plan)
    for s, k in enumerate(stage_pools):
        holder = [b for b in blocks if b.stages[0] <= s <= b.stages[1]]
        assert len(holder) == 1 and holder[0].pool == k
        b = holder[0]
        assert b.ranks[0] <= s * w and (s + 1) * w - 1 <= b.ranks[1]  # stage s: ranks [s·w, (s+1)·w)
    assert [b.ranks[0] for b in blocks] == [0] + [b.ranks[1] + 1 for b in blocks[:-1]]
    for b in blocks:
        assert b.nodes * b.per_node == b.ranks[1] - b.ranks[0] + 1 and b.per_node <= per_node[b.pool]
    order = read_host_order(host_order_array(spec, plan))
    assert stage_pools_from_host_order(order, w, len(stage_pools)) == stage_pools


def test_a_block_sharing_a_node_with_another_pool_is_refused_naming_the_field():
    spec = pools_spec([8, 8])
    with pytest.raises(ExportError, match=r"^plan\.stage_pools: stages 1-3 on pool 1 \(A100-SXM-80GB\) use 12 GPUs, "
                                          r"not whole 8-GPU nodes"):
        rank_blocks(spec, plan_of(2, 2, [0, 1, 1, 1]))


def test_a_malformed_host_order_names_the_array():
    with pytest.raises(ExportError, match=r"^PARPLAN_HOST_ORDER: entry 'pool1:8' is not"):
        read_host_order("PARPLAN_HOST_ORDER=( pool0:1x8 pool1:8 )\n")
    with pytest.raises(ExportError, match=r"^PARPLAN_HOST_ORDER: pool0:1x6 holds 6 ranks, not whole stages"):
        stage_pools_from_host_order([(0, 1, 6)], 4, 2)
    with pytest.raises(ExportError, match=r"^PARPLAN_HOST_ORDER: 3 stages for --pipeline-model-parallel-size 2"):
        stage_pools_from_host_order([(0, 1, 8), (1, 1, 4)], 4, 2)
    assert read_host_order("MODEL_ARGS=(\n    --num-layers 8\n)\n") is None
