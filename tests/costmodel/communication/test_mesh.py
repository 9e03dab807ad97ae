"""The device mesh (costmodel/communication/mesh.py): the EP groups' split over NVLink domains, worked by hand on GB200 NVL72
(domains of 72 GPUs, costmodel/spec/hardware.py), where power-of-two groups straddle the domain boundaries."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from parplan.costmodel.schedules.schedule import Schedule
from parplan.costmodel.spec.assumptions import resolve_assumptions
from parplan.costmodel.evaluation.choice import Choice, tier_links
from parplan.costmodel.communication.comm import with_busbw
from parplan.costmodel.communication.collectives import all_to_all_time_s
from parplan.costmodel.spec.hardware import resolve_gpu
from parplan.costmodel.communication.mesh import (ep_domain_split, ep_members_per_domain, layer_groups, layer_world_key,
                                                span_within_domain, world_key)
from parplan.frameworks.loader import validate_spec

from tests import moe_schedule_cases as moe_dims
from tests.physics_cases import costs


def test_ep_groups_straddling_nvl72_domains_by_hand():
    """256 GPUs in NVL72 domains (ranks 0-71, 72-143, 144-215, 216-255). EP 64 blocks: 0-63 inside the first;
    64-127 has 8 ranks in the first and 56 in the second; 128-191 16 and 48; 192-255 24 and 40: the slowest rank
    shares its domain with 8 members, and a group spans 2 domains. EP 16 blocks: 64-79 splits 8 / 8. Stride 2 (expert
    TP 2), EP 32: the block 64-127 holds 64, 66, 68, 70 in the first domain: 4. EP 256: 40 in the last domain, 4
    domains. Aligned (8-GPU nodes): EP 256 of 2048, 8 per node, 32 nodes; a job inside one domain: all of it."""
    assert ep_domain_split(1, 64, 72, 256) == (8, 2)
    assert ep_domain_split(1, 16, 72, 256) == (8, 2)
    assert ep_domain_split(2, 32, 72, 256) == (4, 2)
    assert ep_domain_split(1, 256, 72, 256) == (40, 4)
    assert ep_domain_split(1, 256, 8, 2048) == (8, 32)
    assert ep_domain_split(1, 64, 72, 64) == (64, 1)


def test_ep_all_to_all_across_nvl72_domains_pays_the_network():
    """TP1 DP256 EP64 on 256 GB200 NVL72, a plain all-to-all (per expert): the slowest rank keeps 8 of its 64 EP
    members on NVLink, so (1 - 8/64) of its k = 2 copies cross the network (collectives.all_to_all_time_s with 8
    local members), not the single-domain all-NVLink all-to-all (64 local) it was priced as."""
    spec = validate_spec(dict(model=moe_dims.MOE, training=dict(seq_len=2048, global_batch_size=256, precision="bf16"),
                              cluster=dict(gpu="GB200-NVL72", num_gpus=256), framework="any",
                              assumptions=dict(ep_dispatch_bytes=2.0)))
    c = Choice(tp=1, cp=1, pp=1, dp=256, ep=64, num_microbatches=1)
    a = resolve_assumptions(spec.assumptions)
    gpu = resolve_gpu(spec.cluster)
    nv, net = tier_links(gpu, a)
    nv = with_busbw(nv, gpu, a, "all_to_all")
    busiest = 1 + 0.1 * math.sqrt(math.log(64) / math.log(8))
    tok = 2048 * 1024 * busiest * 2.0
    one = 2 * all_to_all_time_s(tok, 2, 64, 8, nv.bandwidth_Bps, nv.latency_s, net.bandwidth_Bps, net.latency_s)
    inside = 2 * all_to_all_time_s(tok, 2, 64, 64, nv.bandwidth_Bps, nv.latency_s, net.bandwidth_Bps, net.latency_s)
    ep_s = costs(spec, replace(c, schedule=Schedule.ONE_F_ONE_B)).moe.ep_s
    assert ep_s == pytest.approx(2 * one)
    assert ep_s > 2 * inside


def _mesh_answers(stride: int, size: int, domain: int, n: int) -> tuple:
    return (span_within_domain(stride, size, domain, n), ep_members_per_domain(stride, size, domain, n),
            ep_domain_split(stride, size, domain, n))


@pytest.mark.parametrize("domain", [4, 6, 8, 12, 72])
def test_the_world_key_holds_every_world_size_the_mesh_reads(domain):
    """world_key is a key of the mesh's answers: every job size (a multiple of the group's block, or small) whose key is None
    has the answers of the largest one tried, for each group; a size below the threshold is its own key. Domains that
    power-of-two blocks do not divide (6, 12, NVL72) make the answers move with the world size."""
    moved = 0
    for stride in (1, 2, 3, 4, 8):
        for size in (1, 2, 3, 4, 6, 8, 16, 64):
            span = stride * size
            top = 3 * span * (domain + 2)  # every multiple of the block to past any threshold, every size to 300
            sizes = sorted(set(range(span, top + 1, span)) | set(range(1, min(top, 300))))
            ref = _mesh_answers(stride, size, domain, sizes[-1])
            assert world_key(sizes[-1], domain, [(stride, size)]) is None
            for n in sizes:
                key = world_key(n, domain, [(stride, size)])
                if key is None:
                    assert _mesh_answers(stride, size, domain, n) == ref, (stride, size, domain, n)
                else:
                    assert key == n
                    moved += _mesh_answers(stride, size, domain, n) != ref
    assert moved or domain in (4, 8), "no world size moves an answer here: the test would check nothing"
    assert layer_world_key(96, domain, 4, 2, 8, 1) == world_key(96, domain, layer_groups(4, 2, 8, 1))
