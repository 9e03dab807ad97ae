"""MoE communication (costmodel/moe/moe_comm.py), term by term with numbers worked by hand:

* the EP all-to-all's exposure, bounded below by the all-to-all minus the compute it hides behind;
* FP8 dispatch (``moe_fp8_dispatch``): 1 + 4/128 bytes per dispatched element, the combine BF16
  (deepseek-ai/DeepEP@dd758ca tests/legacy/test_internode.py:239 ``fp8_factor = (1 + 4 / 128) / 2``);
* the EP all-to-all overlap (``moe_a2a_overlap``, Megatron-Core --overlap-moe-expert-parallel-comm): hidden
  behind the other micro-batch's compute, one more micro-batch in flight (Megatron-LM@d98e8a64
  pipeline_parallel/schedules.py:966-970, combined_1f1b.py), legal with pp 1 or interleaved only;
  its Megatron export and import.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from parplan.costmodel.schedules.schedule import Schedule
from parplan.costmodel.spec.assumptions import resolve_assumptions
from parplan.costmodel.evaluation.choice import Choice, tier_links
from parplan.costmodel.communication.collectives import all_to_all_time_s
from parplan.costmodel.evaluation.evaluate import evaluate
from parplan.costmodel.spec.hardware import resolve_gpu
from parplan.costmodel.moe.moe_comm import FP8_DISPATCH_BYTES_PER_ELEMENT
from parplan.costmodel.spec.spec import PlanSpec
from parplan.frameworks.profiles import profile
from parplan.solver.space import SpaceOptions, enumerate_choices

from tests import moe_schedule_cases as moe_dims
from tests import physics_cases as physics


def test_ep_exposure_bounded_by_the_compute_it_hides_behind():
    """Not paired (1F1B, ``ep_comm_overlap`` 0.9 set here): exposed = max(a2a·(1 - overlap), a2a - window),
    a2a = dispatch + combine forward and backward (2 x (dispatch + combine)) to the busiest of the 64 EP ranks,
    window = the layer's compute. BF16 dispatch by a plain all-to-all (per remote expert) over 400G IB at 0.5 of
    line rate makes the all-to-all longer than the compute, so the bound binds: the 90 % credit alone would hide
    more traffic than there is compute to hide it behind. (DualPipe prices its exposure per rank:
    tests/solver/test_dualpipe_split.py.)"""
    spec, c = physics.dsv3(ep_dispatch_bytes=2.0, inter_node_bandwidth_efficiency=0.5, ep_comm_overlap=0.9,
                           moe_dispatch_sync=False)  # compute_s the compute alone (test_host_floor prices the sync)
    c = replace(c, schedule=Schedule.ONE_F_ONE_B)
    costs = physics.costs(spec, c)
    a = resolve_assumptions(spec.assumptions)
    nv, net = tier_links(resolve_gpu(spec.cluster), a)
    busiest = 1 + 0.1 * 2 ** 0.5  # the busiest of 64 EP ranks: 1 + 0.1·√(ln 64 / ln 8) (moe_dispatch.py)
    tok = 4096 * 7168 * busiest
    one = sum(all_to_all_time_s(tok * bytes_, 8, 64, 8, nv.bandwidth_Bps, nv.latency_s, net.bandwidth_Bps,
                                net.latency_s) for bytes_ in (2.0, 2.0))
    raw = 2 * one
    # the window: the layer's compute on every SM (the same layer at ep_comm_overlap 0, which holds none beside it)
    alone = physics.costs(physics.dsv3(ep_dispatch_bytes=2.0, inter_node_bandwidth_efficiency=0.5,
                                       ep_comm_overlap=0.0, moe_dispatch_sync=False)[0], c).moe
    window = alone.compute_s - alone.selective_s
    assert raw > window  # the all-to-all outlasts the compute
    assert costs.moe.ep_s == pytest.approx(max(raw * (1 - 0.9), raw - window))
    assert costs.moe.ep_s > raw * 0.1 * 1.5
    dual = physics.costs(spec, replace(c, schedule=Schedule.DUALPIPE))
    assert dual.moe.ep_s == 0.0 and dual.moe.a2a_s == pytest.approx(raw)


def test_fp8_dispatch_bytes_by_hand():
    """Textbook all-to-all (a ring, bandwidth only, no overlap): time is linear in bytes, so FP8 dispatch
    (1 + 4/128 = 1.03125 B) with BF16 combine (2 B) against BF16 both ways (2 + 2 B): 3.03125/4 = 0.7578125 of
    the EP time (DeepEP's test: fp8_factor = (1 + 4/128)/2 for the dispatch alone)."""
    assert FP8_DISPATCH_BYTES_PER_ELEMENT == 1.03125
    spec = moe_dims.spec(moe_dims.MOE, precision="fp8", assumptions=dict(hierarchical_all_to_all=False, include_latency=False,
                                                        ep_comm_overlap=0.0, moe_dispatch_sync=False))
    c = Choice(tp=1, cp=1, pp=1, dp=8, ep=8, num_microbatches=4)
    off, on = physics.costs(spec, c).moe, physics.costs(spec, replace(c, moe_fp8_dispatch=True)).moe
    assert on.ep_s / off.ep_s == pytest.approx(3.03125 / 4)
    assert on.act_bytes == off.act_bytes and on.states_bytes == off.states_bytes
    assert on.compute_s == off.compute_s


def test_fp8_dispatch_legality_and_frameworks():
    from parplan.costmodel.evaluation.legality import moe_comm_violations
    c = Choice(tp=1, cp=1, pp=1, dp=8, ep=8, num_microbatches=4, moe_fp8_dispatch=True)
    assert moe_comm_violations(moe_dims.spec(moe_dims.MOE, precision="fp8"), c) == []
    assert any("precision fp8" in v for v in moe_comm_violations(moe_dims.spec(moe_dims.MOE), c))
    assert any("ep > 1" in v for v in moe_comm_violations(moe_dims.spec(moe_dims.MOE, precision="fp8"), replace(c, ep=1)))
    assert profile("megatron-core").fp8_dispatch  # main after core_v0.19.0: moe_dispatch_fwd_dtype mxfp8
    assert not profile("megatron-core", "0.19.0").fp8_dispatch
    assert not profile("torchtitan").fp8_dispatch and not profile("deepspeed").fp8_dispatch
    with pytest.raises(ValueError, match="moe_fp8_dispatch"):
        moe_dims.spec(moe_dims.MOE, precision="fp8", framework="torchtitan", search=dict(moe_fp8_dispatch=[True]))
    with pytest.raises(ValueError, match="MoE model"):
        moe_dims.spec(moe_dims.DENSE, search=dict(moe_fp8_dispatch=[True]))


def test_fp8_dispatch_dominates_bf16_exactly():
    """Same memory, fewer bytes: with both allowed, the space keeps BF16 dispatch only where FP8 is illegal (ep 1);
    with the knob's dispatch already narrower (ep_dispatch_bytes 1.0 < 1.03125) both stay."""
    spec = moe_dims.spec(moe_dims.MOE, precision="fp8", search=dict(moe_fp8_dispatch=[False, True], pp=[1]))
    a = resolve_assumptions(spec.assumptions)
    gpu = resolve_gpu(spec.cluster)
    space = enumerate_choices(spec, gpu, a, SpaceOptions.from_spec(spec)).choices
    assert space and all(c.moe_fp8_dispatch == (c.ep > 1) for c in space)
    narrow = moe_dims.spec(moe_dims.MOE, precision="fp8", search=dict(moe_fp8_dispatch=[False, True], pp=[1]),
                   assumptions=dict(ep_dispatch_bytes=1.0))
    a1 = resolve_assumptions(narrow.assumptions)
    both = enumerate_choices(narrow, gpu, a1, SpaceOptions.from_spec(narrow)).choices
    assert {c.moe_fp8_dispatch for c in both if c.ep > 1} == {False, True}
    default = enumerate_choices(moe_dims.spec(moe_dims.MOE, precision="fp8"), gpu, a).choices
    assert not any(c.moe_fp8_dispatch for c in default)  # FP8 dispatch: only where search lists it


@pytest.mark.parametrize("framework, searched", [("any", True), ("megatron-core", True), ("torchtitan", False),
                                                 ("deepspeed", False), ({"name": "megatron-core", "version": "0.14.0"},
                                                                        False)])
def test_a2a_overlap_in_the_default_space_where_the_framework_runs_it(framework, searched):
    """``search.moe_a2a_overlap`` unset: the combined 1F1B is searched wherever the framework runs it (Megatron-Core
    >= 0.15: --overlap-moe-expert-parallel-comm, NVIDIA/Megatron-LM@d98e8a64 transformer_config.py:3002-3046, with
    pp 1 or interleaved) and in the research space; torchtitan, DeepSpeed and Megatron-Core 0.14 have no such
    schedule (frameworks/profile_data.py), so none of their choices carries it; a dense model has nothing to overlap."""
    spec = moe_dims.spec(moe_dims.MOE, framework=framework)
    space = enumerate_choices(spec, resolve_gpu(spec.cluster), resolve_assumptions(spec.assumptions),
                              SpaceOptions.from_spec(spec)).choices
    overlapped = [c for c in space if c.moe_a2a_overlap]
    assert bool(overlapped) == searched
    assert all(c.ep > 1 and (c.pp == 1 or c.schedule == "interleaved") for c in overlapped)
    assert SpaceOptions.from_spec(moe_dims.spec(moe_dims.DENSE, framework=framework)).moe_a2a_overlap == (False,)


def test_ep_comm_overlap_pays_sms_by_hand():
    """1F1B with ``ep_comm_overlap`` 0.5: exposed E = max(0.5·A, A - C) of the layer's A = 2·a2a beside its compute
    C; the hidden H = A - E runs beside the compute and holds 20 of the 132 SMs while it runs, as the overlapped
    schedules' all-to-all does (DeepSeek-V3 §3.2.2; moe_comm.reserved_sm_time_s): C' = C + (20/132)·min(H, C·132/112).
    At ep_comm_overlap 0 nothing runs beside the compute and it keeps every SM."""
    c = Choice(tp=1, cp=1, pp=1, dp=8, ep=8, num_microbatches=4)
    no_sync = dict(moe_dispatch_sync=False)  # compute_s the compute alone (test_host_floor prices the sync)
    off = physics.costs(moe_dims.spec(moe_dims.MOE, gbs=32, assumptions=no_sync), c).moe
    on = physics.costs(moe_dims.spec(moe_dims.MOE, gbs=32, assumptions=dict(ep_comm_overlap=0.5, **no_sync)), c).moe
    A = off.ep_s
    C = off.compute_s - off.selective_s
    E = max(0.5 * A, A - C)
    assert on.ep_s == pytest.approx(E)
    assert on.compute_s - on.selective_s == pytest.approx(C + 20 / 132 * min(A - E, C * 132 / 112))
    assert on.compute_s > off.compute_s


def test_a2a_overlap_cost_by_hand():
    """Off: exposed = 2·a2a (ep_comm_overlap 0), MoE compute C at full speed. On (Megatron-Core's combined 1F1B,
    costmodel/schedules/paired_overlap.py): the compute beside the 2·a2a of dispatch/combine runs on 112 of 132 SMs
    (C' = C + (20/132)·min(2·a2a, C·132/112), DeepSeek-V3 §3.2.2, moe_comm.reserved_sm_time_s) and a
    layer's forward beside another micro-batch's backward of the same layer leaves
    P = max(0, a2a - (1-f)·C') + max(0, a2a - f·C') with f = 1/3 (each pass moves one a2a); of the 4 micro-batches
    the first forward and the last backward run alone (combined_1f1b.py:76, :119), exposing their a2a each:
    (3·P + 2·a2a) / 4 per micro-batch."""
    spec = moe_dims.spec(moe_dims.MOE, gbs=32, assumptions=dict(moe_dispatch_sync=False))  # test_host_floor prices it
    c = Choice(tp=1, cp=1, pp=1, dp=8, ep=8, num_microbatches=4)
    off, on = physics.costs(spec, c).moe, physics.costs(spec, replace(c, moe_a2a_overlap=True)).moe
    a2a = off.ep_s / 2
    compute_on = on.compute_s
    C = off.compute_s - off.selective_s
    assert compute_on - on.selective_s - C == pytest.approx(20 / 132 * min(2 * a2a, C * 132 / 112))
    f = 1 / 3
    paired = max(0.0, a2a - (1 - f) * compute_on) + max(0.0, a2a - f * compute_on)
    assert on.ep_s == pytest.approx((3 * paired + 2 * a2a) / 4)
    assert on.ep_s < off.ep_s


def test_combined_1f1b_lone_passes_by_hand():
    """Megatron-Core's combined 1F1B runs alone, without pipelining, 1 of m forwards and backwards; interleaved,
    rank r's 2(p-r-1) + (v-1)·p + 1 warm-up forwards and as many cool-down backwards of its m·v chunk passes
    (schedules.py:964-970), capped at m·v. p = 2, v = 2, m = 4: ranks 0 and 1 run 5 and 3 of 8, mean 4/8; p = 4,
    v = 2, m = 2: 11, 9, 7, 5 capped at 4 each: all alone."""
    from parplan.costmodel.schedules.paired_overlap import ChunkWork, combined_1f1b_exposed_s, combined_1f1b_lone_share
    assert combined_1f1b_lone_share(1, 1, 16) == pytest.approx(1 / 16)
    assert combined_1f1b_lone_share(2, 2, 4) == pytest.approx(0.5)
    assert combined_1f1b_lone_share(4, 2, 2) == 1.0
    layer = ChunkWork(3.0, 2.4)  # f = 1/3: P = max(0, 1.2 - 2) + max(0, 1.2 - 1) = 0.2
    assert combined_1f1b_exposed_s(layer, 1 / 3, 0.25) == pytest.approx(0.2 + 0.25 * (2.4 - 0.2))


def test_a2a_overlap_holds_one_more_layer_or_chunk():
    """pp 1: the combined schedule runs micro-batch i+1's layer j forward beside i's layer L-1-j backward
    (model_chunk_schedule_plan.py's overlapped_layers loop): one micro-batch in flight and one MoE layer's stored
    activations more in the working set. Interleaved (p = 2, v = 2, stage 0): Megatron's warm-up
    (2-0-1)·2 + (2-1)·2 = 4, +1 in flight, +1 for the overlap = 6 chunk micro-batches = 3 stages' worth instead of
    2.5 (schedules.py:966-970)."""
    from parplan.costmodel.evaluation.choice import inflight_microbatches
    c = Choice(tp=1, cp=1, pp=1, dp=8, ep=8, num_microbatches=4)
    assert inflight_microbatches(c, 0) == 1 and inflight_microbatches(replace(c, moe_a2a_overlap=True), 0) == 1
    il = Choice(tp=1, cp=1, pp=2, dp=4, ep=4, num_microbatches=8, vpp=2, schedule=Schedule.INTERLEAVED)
    assert inflight_microbatches(il, 0) == 2.5
    assert inflight_microbatches(replace(il, moe_a2a_overlap=True), 0) == 3.0
    spec = moe_dims.spec(moe_dims.MOE)
    plain = evaluate(spec, PlanSpec(tp=1, pp=1, ep=8))
    over = evaluate(spec, PlanSpec(tp=1, pp=1, ep=8, moe_a2a_overlap=True))
    assert over.stages[0].activations_gib == pytest.approx(plain.stages[0].activations_gib)
    from parplan.costmodel.evaluation.choice import choice_costs
    from parplan.costmodel.evaluation.evaluate import resolve_plan
    moe_layer = choice_costs(spec, resolve_plan(spec, PlanSpec(tp=1, pp=1, ep=8)).to_choice(), resolve_gpu(spec.cluster),
                             resolve_assumptions(spec.assumptions)).moe
    assert (over.stages[0].workspace_gib - plain.stages[0].workspace_gib) * 2**30 == pytest.approx(moe_layer.act_bytes)
    assert over.metrics.step_time_s < plain.metrics.step_time_s


def test_a2a_overlap_legality_and_frameworks():
    from parplan.costmodel.evaluation.legality import moe_comm_violations
    spec = moe_dims.spec(moe_dims.MOE)
    c = Choice(tp=1, cp=1, pp=2, dp=4, ep=4, num_microbatches=8, schedule=Schedule.ONE_F_ONE_B, moe_a2a_overlap=True)
    assert any("interleaved" in v for v in moe_comm_violations(spec, c))
    assert moe_comm_violations(spec, replace(c, schedule=Schedule.INTERLEAVED, vpp=2)) == []
    assert moe_comm_violations(spec, replace(c, pp=1, dp=8)) == []
    assert any("full" in v for v in moe_comm_violations(spec, replace(c, pp=1, dp=8, recompute="full")))
    assert any("ep > 1" in v for v in moe_comm_violations(spec, replace(c, pp=1, dp=8, ep=1)))
    mtp2 = moe_dims.spec(dict(moe_dims.MOE, num_mtp_layers=2))
    assert any("MTP" in v for v in moe_comm_violations(mtp2, replace(c, pp=1, dp=8)))
    assert profile("megatron-core", "0.15.0").moe_a2a_overlap and not profile("megatron-core", "0.13.0").moe_a2a_overlap
    assert not profile("torchtitan").moe_a2a_overlap
    ev = evaluate(spec, PlanSpec(tp=1, pp=1, ep=8, moe_a2a_overlap=True))
    # the newest megatron-core and Megatron-Bridge v0.6.0 (comm_overlap.overlap_moe_expert_parallel_comm); torchtitan
    # and DeepSpeed lack it
    assert ev.runs_on == ["megatron-core", "megatron-bridge"]


def test_megatron_export_of_a2a_overlap():
    from parplan.frameworks.export_megatron import export as mexport
    spec = moe_dims.spec(moe_dims.MOE, framework="megatron-core")
    plan = evaluate(spec, PlanSpec(tp=1, pp=1, ep=8, moe_a2a_overlap=True)).plan
    assert "--overlap-moe-expert-parallel-comm" in mexport(spec, plan).text
    plain = evaluate(spec, PlanSpec(tp=1, pp=1, ep=8)).plan
    assert "--overlap-moe-expert-parallel-comm" not in mexport(spec, plain).text


def test_megatron_a2a_overlap_round_trips():
    from parplan.frameworks.export_megatron import export as mexport
    from parplan.frameworks.import_plan import spec_from_megatron
    spec = moe_dims.spec(moe_dims.MOE, framework="megatron-core")
    ev = evaluate(spec, PlanSpec(tp=1, pp=1, ep=8, moe_a2a_overlap=True))
    back = spec_from_megatron(mexport(spec, ev.plan).text, spec.model_copy(update={"plan": None}))
    again = evaluate(back)
    assert again.plan.moe_a2a_overlap and again.metrics.step_time_s == pytest.approx(ev.metrics.step_time_s)


def test_dispatcher_sms_over_the_gpus_sms_by_hand():
    """The SMs an overlapped schedule's dispatch/combine kernels hold: model.moe.dispatcher_sms (default 20, DeepEP's
    and DeepSeek-V3 §3.2.2's) over the GPU's SMs (costmodel/spec/hardware.py SM_COUNT: 132 on H800/H100, 148 on B200;
    132 where the catalog has none); the ep_comm_sm_fraction knob, where set, wins. Megatron-Bridge's Qwen3-30B-A3B
    B200 recipe holds 64 (perf_recipes/qwen/b200/qwen3_moe.py:328-330 at 067f987d): 64/148 = 0.432 of the SMs, and
    the MoE layer's compute beside its all-to-all A runs x·min(A, C/(1-x)) longer."""
    from parplan.costmodel.spec.assumptions import resolve_assumptions
    from parplan.costmodel.moe.moe_comm import reserved_sm_time_s, sm_fraction
    from parplan.costmodel.spec.hardware import GPU
    from parplan.costmodel.spec.spec import ClusterSpec, MoESpec
    a = resolve_assumptions(None)
    moe = MoESpec(num_experts=128, top_k=8, expert_ffn_hidden_size=768)
    h800, b200 = resolve_gpu(ClusterSpec(gpu="H800", num_gpus=8)), resolve_gpu(ClusterSpec(gpu="B200", num_gpus=8))
    assert sm_fraction(a, h800, moe) == pytest.approx(20 / 132)
    assert sm_fraction(a, b200, moe) == pytest.approx(20 / 148)
    assert sm_fraction(a, b200, moe.model_copy(update={"dispatcher_sms": 64})) == pytest.approx(64 / 148)
    custom = GPU("custom", 80.0, 80, 1000.0, 2000.0, 8, 450.0, 50.0)
    assert sm_fraction(a, custom, moe) == pytest.approx(20 / 132)
    assert sm_fraction(a.model_copy(update={"ep_comm_sm_fraction": 0.3}), b200, moe) == 0.3
    # the layer's compute on B200 with 64 SMs held: C = 3 ms beside A = 2 ms -> 0.432·min(2, 3/0.568) = 0.865 ms
    assert reserved_sm_time_s(3.0, 2.0, 64 / 148) == pytest.approx(64 / 148 * 2.0)
