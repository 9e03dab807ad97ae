"""Memory terms added by the calibration against torchtitan's published peaks, term by term.

* the per-stage working set (``ChoiceCosts.workspace_bytes``): a fully recomputed layer's activations
  regenerated for its backward, ZeRO-3's gathered layers; held once per stage, once per DualPipe rank;
* ZeRO-2/3 under pipeline parallelism costing ZeRO-1 (PyTorch pipelining keeps FSDP2 stages unsharded
  across micro-batches);
* torchtitan's per-op selective checkpointing (``selective_recompute_policy = alternate_matmuls``);
* ZeRO-3's collective count per layer (DeepSpeed 2021 gathered every parameter tensor on its own);
* DTensor sequence parallelism saving the all-gathered inputs of the column-parallel matmuls;
* ``torch.distributed.pipelining``'s stage-boundary buffers (``pipeline_runtime = torch``).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from parplan.costmodel.schedules.schedule import Schedule
from parplan.costmodel.spec.assumptions import resolve_assumptions
from parplan.costmodel.evaluation.choice import Choice, choice_costs, effective_zero_stage
from parplan.costmodel.evaluation.evaluate import evaluate
from parplan.costmodel.spec.hardware import resolve_gpu
from parplan.costmodel.memory.memory import (alternate_matmul_activation_items, dense_layer_activation_items, mlp_activation_bytes,
                                      model_state_bytes)
from parplan.costmodel.spec.spec import PlanSpec, Spec
from parplan.frameworks.loader import validate_spec

from tests import memory_dims_cases as memory_dims
from tests import physics_cases as physics

H, Q, KV, F, HEADS = 4096, 4096, 1024, 14336, 32  # Llama-3 8B


def _spec(num_gpus: int = 16, **model) -> Spec:
    m = dict(name="llama3-8b", num_layers=8, hidden_size=H, ffn_hidden_size=F, num_attention_heads=HEADS,
             num_kv_heads=8, vocab_size=128256, gated_mlp=True, tie_embeddings=False)
    m.update(model)
    return validate_spec(dict(
        model=m, training=dict(seq_len=4096, global_batch_size=64, precision="bf16"),
        cluster=dict(gpu="H100-SXM-80GB", num_gpus=num_gpus, gpus_per_node=8)))


def _costs(spec: Spec, choice: Choice, **knobs):
    return choice_costs(spec, choice, resolve_gpu(spec.cluster), resolve_assumptions(knobs))


# ------------------------------------------------------------------------------- per-op selective (SAC)
def test_alternate_matmul_items_by_hand_gated():
    """Seven matmuls per layer (q, k, v, o, gate, up, down): the parity alternates, so the mean of the two
    saved sets {q, v, gate, down} and {k, o, up}, plus the block input, attention output and fp32 LSE."""
    items, mlp, share = alternate_matmul_activation_items(H, Q, KV, F, True, HEADS)
    sharded = 2 * Q + 4 * HEADS + 0.5 * (2 * Q + 2 * KV + 2 * F) + 0.5 * (2 * KV + 2 * F)
    replicated = 2 * H + 0.5 * 2 * H + 0.5 * 2 * H  # block input; down / o outputs (row-parallel)
    assert items.sharded == pytest.approx(sharded)
    assert items.replicated == pytest.approx(replicated)
    assert mlp.sharded == pytest.approx(0.5 * 2 * F + 0.5 * 2 * F)
    assert mlp.replicated == pytest.approx(0.5 * 2 * H)
    assert share == pytest.approx(0.5)  # complementary sets: half the matmul FLOPs on average
    assert items.per_token(1, False) == 59520  # bytes per token, Llama-3 8B, TP 1
    full = dense_layer_activation_items(H, Q, KV, F, True, HEADS, 4096).per_token(1, False)
    assert items.per_token(1, False) < 0.45 * full  # 43 % of what Megatron stores with FlashAttention


def test_alternate_matmul_items_by_hand_plain_mlp():
    """Six matmuls (q, k, v, o, fc1, fc2): always the 1st, 3rd and 5th (q, v, fc1) are kept."""
    h = 1024
    items, mlp, share = alternate_matmul_activation_items(h, h, h, 4 * h, False, 16)
    assert items.sharded == 2 * h + 4 * 16 + 2 * h + 2 * h + 2 * 4 * h
    assert items.replicated == 2 * h
    assert (mlp.sharded, mlp.replicated) == (2 * 4 * h, 0)
    flops = {"q": h * h, "k": h * h, "v": h * h, "o": h * h, "fc1": 4 * h * h, "fc2": 4 * h * h}
    assert share == pytest.approx((flops["k"] + flops["o"] + flops["fc2"]) / sum(flops.values()))


def test_per_op_sac_stores_less_and_recomputes_half_the_matmuls():
    spec = _spec()
    c = Choice(tp=2, cp=1, pp=1, dp=8, micro_batch_size=2, num_microbatches=4, recompute="selective")
    none = _costs(spec, Choice(**{**c.__dict__, "recompute": "none"}))
    megatron = _costs(spec, c)
    sac = _costs(spec, c, selective_recompute_policy="alternate_matmuls")
    tokens = 2 * 4096
    items, _, _ = alternate_matmul_activation_items(H, Q, KV, F, True, HEADS)
    assert sac.dense.act_bytes == pytest.approx(tokens * items.per_token(2, True))
    assert megatron.dense.act_bytes == none.dense.act_bytes  # FlashAttention: Megatron's selective is free
    assert megatron.dense.selective_s == 0
    assert sac.dense.act_bytes < 0.5 * none.dense.act_bytes
    assert sac.dense.selective_s > 0
    assert sac.dense.compute_s == pytest.approx(none.dense.compute_s + sac.dense.selective_s)
    # the recomputed layer is held in full during its backward, once per stage
    assert sac.workspace_bytes == pytest.approx(none.dense.act_bytes)
    assert none.workspace_bytes == 0 and megatron.workspace_bytes == 0


# ------------------------------------------------------------------------------- the per-stage working set
def test_full_recompute_workspace_is_one_full_layer_once_per_stage():
    spec = _spec()
    plan = PlanSpec(tp=2, pp=2, dp=4, micro_batch_size=1, schedule="1f1b", recompute="full", zero_stage=1)
    ev = evaluate(spec, plan)
    c = Choice(tp=2, cp=1, pp=2, dp=4, micro_batch_size=1, num_microbatches=16, recompute="none")
    layer_full = _costs(spec, c).dense.act_bytes
    for s in ev.stages:
        assert s.workspace_gib * 2**30 == pytest.approx(layer_full)
        parts = s.model_states_gib + s.activations_gib + s.logits_gib + s.workspace_gib + s.runtime_buffers_gib
        assert s.memory_gib == pytest.approx(parts)
    off = evaluate(spec.model_copy(update={"assumptions": {"recompute_workspace_layers": 0.0}}), plan)
    for s, t in zip(ev.stages, off.stages):
        assert s.memory_gib - t.memory_gib == pytest.approx(layer_full / 2**30)


def test_dualpipe_rank_holds_the_workspace_once():
    spec = _spec()
    plan = PlanSpec(tp=1, pp=4, dp=4, micro_batch_size=1, schedule="dualpipe", recompute="full", zero_stage=1)
    ev = evaluate(spec, plan)
    per_stage = _costs(spec, Choice(tp=1, cp=1, pp=4, dp=4, num_microbatches=16, schedule=Schedule.DUALPIPE,
                                    recompute="full")).recompute_workspace_bytes
    assert per_stage > 0
    for s in ev.stages:
        assert s.workspace_gib * 2**30 == pytest.approx(per_stage)


def test_a_stage_that_recomputes_nothing_holds_no_regenerated_layer():
    """Megatron's block recompute with recompute_num_layers 0 checkpoints nothing on that stage: full recompute of
    zero layers costs what no recompute costs, to the byte (the solver's 'none' ⊂ 'full' reduction relies on it);
    a stage recomputing one layer holds one full layer of one micro-batch on top."""
    spec = _spec()
    full = evaluate(spec, PlanSpec(tp=2, pp=2, dp=4, schedule="1f1b", recompute="full", recompute_layers=[0, 1],
                                   zero_stage=1))
    none = evaluate(spec, PlanSpec(tp=2, pp=2, dp=4, schedule="1f1b", recompute="none", zero_stage=1))
    layer_full = _costs(spec, Choice(tp=2, cp=1, pp=2, dp=4, num_microbatches=16, recompute="none")).dense.act_bytes
    assert full.stages[0].memory_gib == none.stages[0].memory_gib
    assert full.stages[0].workspace_gib == 0
    assert full.stages[1].workspace_gib * 2**30 == pytest.approx(layer_full)


def test_zero3_workspace_is_the_gathered_layers():
    spec = _spec()
    c = Choice(tp=2, cp=1, pp=1, dp=8, num_microbatches=4, zero_stage=3)
    costs = _costs(spec, c)
    layer_params_gpu = (2 * H * Q + 2 * H * KV + 3 * H * F + 2 * H) / 2  # attention, gated MLP, 2 norms; /TP
    assert costs.workspace_bytes == pytest.approx(2 * layer_params_gpu * (2 + 4), rel=1e-3)
    assert _costs(spec, c, zero3_unsharded_layers=0.5).workspace_bytes == pytest.approx(costs.workspace_bytes / 4)
    assert _costs(spec, Choice(**{**c.__dict__, "zero_stage": 2})).workspace_bytes == 0


# ------------------------------------------------------------------------------- ZeRO-2/3 under PP
@pytest.mark.parametrize("zero", [2, 3])
def test_zero_2_3_under_pp_cost_zero_1(zero):
    spec = _spec()
    base = dict(tp=2, pp=2, dp=4, micro_batch_size=1, schedule=Schedule.ONE_F_ONE_B, recompute="none")
    one = evaluate(spec, PlanSpec(**base, zero_stage=1))
    z = evaluate(spec, PlanSpec(**base, zero_stage=zero))
    assert z.metrics.step_time_s == pytest.approx(one.metrics.step_time_s)
    assert z.metrics.peak_memory_gib == pytest.approx(one.metrics.peak_memory_gib)
    regather = spec.model_copy(update={"assumptions": {"zero_unsharded_across_microbatches_with_pp": False}})
    zr = evaluate(regather, PlanSpec(**base, zero_stage=zero))
    assert zr.metrics.peak_memory_gib < one.metrics.peak_memory_gib  # sharded weights/gradients
    assert zr.metrics.breakdown_s["dp"] != pytest.approx(one.metrics.breakdown_s["dp"])
    a = resolve_assumptions(None)
    assert effective_zero_stage(zero, 2, a) == 1
    assert effective_zero_stage(zero, 1, a) == zero


def test_textbook_keeps_the_old_ledger():
    a = resolve_assumptions({"preset": "textbook"})
    assert a.recompute_workspace_layers == 0 and a.zero3_unsharded_layers == 0
    assert not a.zero_unsharded_across_microbatches_with_pp


# ------------------------------------------------------------------------------- ZeRO-3 collectives per layer
@pytest.mark.parametrize("by_hop", [True, False])
def test_zero3_collective_count_scales_the_ring_latency(by_hop):
    """Each of the 33 extra collectives per layer pays one ring's latency: over 64 GPUs in 8 NVLink domains of 8,
    56 NVLink hops and 7 network hops (NCCL's ring latency, ``ring_latency_by_hop``), or 63 network hops."""
    spec = _spec(num_gpus=64)
    c = Choice(tp=1, cp=1, pp=1, dp=64, num_microbatches=1, zero_stage=3)
    knobs = dict(zero_microbatch_comm_overlap=0.0, ring_latency_by_hop=by_hop)
    fsdp = _costs(spec, c, **knobs)
    per_tensor = _costs(spec, c, zero3_collectives_per_layer=36.0, **knobs)
    a = resolve_assumptions(knobs)
    gpu = resolve_gpu(spec.cluster)
    alpha_nv = gpu.intra_node_latency_us * 1e-6 * a.intra_node_latency_factor
    alpha_net = gpu.inter_node_latency_us * 1e-6 * a.inter_node_latency_factor
    assert gpu.nvlink_domain_size == 8 and 0 < alpha_nv != alpha_net
    ring = 56 * alpha_nv + 7 * alpha_net if by_hop else 63 * alpha_net
    assert per_tensor.dense.zero_s - fsdp.dense.zero_s == pytest.approx(33 * ring)


# ------------------------------------------------------------------------------- DTensor SP gathered inputs
def test_dtensor_sp_saves_two_gathered_inputs_per_layer():
    """QKV and the MLP's first linear each keep 2·h bytes per token unsharded instead of 2·h/TP."""
    spec = _spec()
    c = Choice(tp=4, cp=1, pp=1, dp=4, micro_batch_size=2, num_microbatches=4, recompute="none")
    megatron = _costs(spec, c)
    dtensor = _costs(spec, c, sequence_parallel_saves_gathered_inputs=True)
    tokens = 2 * 4096
    assert dtensor.dense.act_bytes - megatron.dense.act_bytes == pytest.approx(tokens * 2 * 2 * H * (1 - 1 / 4))
    assert dtensor.dense.compute_s == megatron.dense.compute_s  # memory only
    no_sp = Choice(**{**c.__dict__, "sequence_parallel": False})  # without SP nothing is sharded anyway
    assert _costs(spec, no_sp, sequence_parallel_saves_gathered_inputs=True).dense.act_bytes == \
        _costs(spec, no_sp).dense.act_bytes


@pytest.mark.parametrize("recompute", ["full", "selective"])
def test_dtensor_sp_gathered_inputs_in_the_recomputed_layer_only(recompute):
    """A fully recomputed layer stores its input only (a layer full recompute leaves alone stores everything,
    gathered inputs included); per-op SAC recomputes the all-gathers. Either way the gathered inputs exist
    again in the working set of the layer being recomputed."""
    spec = _spec()
    c = Choice(tp=4, cp=1, pp=1, dp=4, micro_batch_size=2, num_microbatches=4, recompute=recompute)
    knobs = dict(selective_recompute_policy="alternate_matmuls")
    megatron = _costs(spec, c, **knobs)
    dtensor = _costs(spec, c, sequence_parallel_saves_gathered_inputs=True, **knobs)
    stored_extra = 2 * 4096 * 2 * 2 * H * 3 / 4 if recompute == "full" else 0.0
    assert dtensor.dense.act_bytes - megatron.dense.act_bytes == pytest.approx(stored_extra)
    assert dtensor.dense.act_recomputed_bytes == megatron.dense.act_recomputed_bytes
    held = lambda costs: costs.stage_workspace_bytes(recomputed_layers=1)  # noqa: E731  (a stage recomputing)
    assert held(dtensor) - held(megatron) == pytest.approx(2 * 4096 * 2 * 2 * H * 3 / 4)


# ------------------------------------------------------------------------------- torch.distributed.pipelining
def test_torch_pipelining_buffers_by_hand():
    """1F1B, p = 4, m = 8: gradient receive buffers for every micro-batch on stages 0-2, activation receive
    buffers on stages 1-3 beyond the in-flight ones (those are the first layer's saved input), one output
    per in-flight micro-batch (the last stage's is the logits), the last stage's 7 earlier outputs, and on
    stages 1-3 the input gradient each backward done leaves on its receive buffer until the next step: at
    the peak (in-flight 4 - s held through the steady state, all 8 forwards run) 8 - (4 - s) of them."""
    spec = _spec(num_gpus=16)
    c = Choice(tp=2, cp=1, pp=4, dp=2, micro_batch_size=1, num_microbatches=8, recompute="full")
    torch_rt = _costs(spec, c, pipeline_runtime="torch")
    boundary = 4096 * H * 2 / 2  # one micro-batch's stage output, sequence-sharded by TP 2
    retained = 4096 * 128256 / 2 * 2  # one micro-batch's bf16 logits, vocabulary-sharded
    assert torch_rt.stage_io_bytes == pytest.approx(boundary)
    assert torch_rt.retained_output_bytes == pytest.approx(retained)
    # grad receive + act receive beyond in-flight + in-flight outputs + held input gradients
    expected = {0: 8 + 0 + 4 + 0, 1: 8 + (8 - 3) + 3 + 5, 2: 8 + (8 - 2) + 2 + 6, 3: 0 + (8 - 1) + 0 + 7}
    for stage, count in expected.items():
        extra = 7 * retained if stage == 3 else 0.0
        assert torch_rt.pipeline_buffer_bytes(stage) == pytest.approx(count * boundary + extra)
    megatron = _costs(spec, c)
    assert all(megatron.pipeline_buffer_bytes(i) == 0 for i in range(4))
    one_stage = _costs(spec, Choice(**{**c.__dict__, "pp": 1, "dp": 8}), pipeline_runtime="torch")
    assert one_stage.pipeline_buffer_bytes(0) == 0


def test_torch_pipelining_interleaved_buffers_by_hand():
    """Interleaved 1F1B, p = 4, v = 2, m = 8: rank r holds min((4 - r - 1)·2 + 4 + 1, 16) chunk micro-batches
    in flight (11, 9, 7, 5). Per rank, in boundary tensors: grad receive 16 (8 on rank 3, whose second chunk
    is the last stage), act receive 16 - in-flight (less 8 on rank 0, whose first chunk is stage 0), in-flight
    outputs (less the last stage's one, the logits), and held input gradients 16 - in-flight (less stage 0's
    8, which receive nothing): 16 + 0 + 11 + 0, 16 + 7 + 9 + 7, 16 + 9 + 7 + 9, 8 + 11 + 4 + 11."""
    spec = _spec(num_gpus=16)
    c = Choice(tp=2, cp=1, pp=4, dp=2, micro_batch_size=1, num_microbatches=8, vpp=2, schedule=Schedule.INTERLEAVED,
               recompute="full")
    torch_rt = _costs(spec, c, pipeline_runtime="torch")
    boundary = 4096 * H * 2 / 2
    expected = {0: 16 + 0 + 11 + 0, 1: 16 + 7 + 9 + 7, 2: 16 + 9 + 7 + 9, 3: 8 + 11 + 4 + 11}
    for stage, count in expected.items():
        extra = 7 * torch_rt.retained_output_bytes if stage == 3 else 0.0
        assert torch_rt.pipeline_buffer_bytes(stage) == pytest.approx(count * boundary + extra)


def test_torch_pipelining_buffers_in_the_evaluation():
    spec = _spec(num_gpus=16)
    plan = PlanSpec(tp=2, pp=4, dp=2, micro_batch_size=1, schedule="1f1b", recompute="full", zero_stage=1)
    megatron = evaluate(spec, plan)
    rt = spec.model_copy(update={"assumptions": {"pipeline_runtime": "torch"}})
    torch_rt = evaluate(rt, plan)
    costs = _costs(rt, Choice(tp=2, cp=1, pp=4, dp=2, micro_batch_size=1, num_microbatches=32,
                              recompute="full"), pipeline_runtime="torch")
    for a, b in zip(megatron.stages, torch_rt.stages):
        assert b.pipeline_buffers_gib * 2**30 == pytest.approx(costs.pipeline_buffer_bytes(a.index))
        assert b.memory_gib - a.memory_gib == pytest.approx(b.pipeline_buffers_gib)
    assert torch_rt.metrics.step_time_s == megatron.metrics.step_time_s


def test_dualpipe_rank_holds_both_stages_buffers():
    spec = _spec().model_copy(update={"assumptions": {"pipeline_runtime": "torch"}})
    plan = PlanSpec(tp=1, pp=4, dp=4, micro_batch_size=1, schedule="dualpipe", recompute="full", zero_stage=1)
    ev = evaluate(spec, plan)
    costs = _costs(spec, Choice(tp=1, cp=1, pp=4, dp=4, num_microbatches=16, schedule=Schedule.DUALPIPE,
                                recompute="full"), pipeline_runtime="torch")
    for s in ev.stages:
        both = costs.pipeline_buffer_bytes(s.index) + costs.pipeline_buffer_bytes(3 - s.index)
        assert s.pipeline_buffers_gib * 2**30 == pytest.approx(both)


def test_mla_activations_under_deepseek_selective_and_fp8_by_hand():
    """DeepSeek-V3 MoE layer, TP 1, FP8 (linear inputs 1 B), DeepSeek's selective recompute (RMSNorm
    outputs and MLA up-projections recomputed, experts' SwiGLU inputs cached in FP8, output recomputed).
    Per token: two norm inputs 2 · 2 · 7168 = 28,672; latents 2 · (1536 + 576) = 4,224; Q, K, V
    recomputed: 0; attention output 1 · 16,384; fp32 LSE 4 · 128 = 512; shared expert gate + up 2 · 2 ·
    2048 + product 1 · 2048 = 10,240; routed: 8 x (dispatched token 7168 + gate/up in FP8 2 · 2048) =
    90,112, x the busiest of EP 64's load 1 + 0.1·√(ln 64 / ln 8) = 1.14142 (1.1 before the imbalance depended on
    the EP size, moe_dispatch.busiest_rank_load) = 102,855.8. Total 162,887.8 B per token."""
    items = dense_layer_activation_items(7168, 24576, 24576, 2048, True, 128, 4096, v_dim=16384, o_dim=16384,
                                         mla_latents=(1536, 576), linear_input_bytes=1.0, recompute_norms=True,
                                         recompute_mla_up=True)
    attn_part = items.per_token(1, False) - mlp_activation_bytes(2048, True, 1.0)
    assert attn_part == 28_672 + 4_224 + 16_384 + 512
    spec, c = physics.dsv3(selective_recompute_policy="deepseek_v3")
    costs = physics.costs(spec, c)
    per_token = costs.moe.act_bytes / 4096
    assert per_token == pytest.approx(28_672 + 4_224 + 16_384 + 512 + 10_240 + (1 + 0.1 * 2 ** 0.5) * 90_112)
    assert per_token == pytest.approx(162_887.8, abs=0.1)
    # the default policy ('model') is DeepSeek's for an MLA model (issue 19 item 7)
    spec_default, _ = physics.dsv3()
    assert physics.costs(spec_default, c).moe.act_bytes == costs.moe.act_bytes
    # BF16 with Megatron-Core's core_attn selective recompute (policy 'attention') stores Q, K, V and both norm
    # outputs as well
    bf16 = physics.costs(physics.spec(physics.DSV3, 2048, seq=4096, gbs=15360, precision="bf16", selective_recompute_policy="attention"),
                  replace(c, schedule=Schedule.DUALPIPE))
    assert bf16.moe.act_bytes / 4096 > 2 * per_token


def test_fp8_weight_cache_and_activations_by_hand():
    """Llama-3 70B, TP 4, ZeRO-1: a layer's GEMM weights 150,994,944 (attention) + 3 · 8192 · 28,672
    (MLP) = 855,638,016, 213,909,504 per GPU; Transformer Engine with BF16 primary weights keeps their FP8
    copy and transpose beside them (fp8_weight_cache_bytes 2): 427,819,008 B more per layer; with FP8
    primary weights (the default, 0) the FP8 copies take the BF16 copy's place. The saved linear inputs (QKV input 8192, attention output 8192,
    MLP input 8192, FC2 input 28,672 elements per token, of which TP shards the last three... here SP
    shards all of them) drop from 2 B to 1 B."""
    spec_bf16 = physics.spec(physics.LLAMA70B, 8, seq=8192, gbs=8, fp8_weight_cache_bytes=2.0)
    spec_fp8 = validate_spec({**spec_bf16.model_dump(), "training": dict(seq_len=8192, global_batch_size=8, precision="fp8")})
    spec_fp8_params = validate_spec({**spec_fp8.model_dump(), "assumptions": {}})
    c = Choice(tp=4, cp=1, pp=1, dp=2, num_microbatches=4, zero_stage=1, sequence_parallel=True)
    bf, f8 = physics.costs(spec_bf16, c), physics.costs(spec_fp8, c)
    assert (150_994_944 + 3 * 8192 * 28672) // 4 == 213_909_504
    assert f8.dense.states_bytes - bf.dense.states_bytes == pytest.approx(2 * 213_909_504)
    assert physics.costs(spec_fp8_params, c).dense.states_bytes == pytest.approx(bf.dense.states_bytes)
    saved = (8192 + 8192) / 4 + (8192 + 28672) / 4  # QKV and MLP inputs (SP-sharded), o and FC2 inputs
    assert (bf.dense.act_bytes - f8.dense.act_bytes) / 8192 == pytest.approx(saved)
    assert f8.dense.time_s != bf.dense.time_s  # FP8 GEMMs; the elementwise traffic is unchanged
    z3 = physics.costs(spec_fp8, replace(c, zero_stage=3))
    z3_bf = physics.costs(spec_bf16, replace(c, zero_stage=3))
    assert z3.dense.states_bytes == pytest.approx(z3_bf.dense.states_bytes)  # ZeRO-3 caches no FP8 weights


def test_model_states_with_dtypes_and_offload_by_hand():
    """ZeRO-1 over 8 ranks, w = 2, g = 4: o/8 + 6 bytes per parameter; fp32/bf16/bf16 (o = 6) with half the
    optimizer states on the host: 6·0.5/8 + 6 = 6.375 bytes per parameter."""
    assert model_state_bytes(1e9, 1, 8, 2.0, 4.0, 6.0, 0.5) == pytest.approx(6.375e9)
    assert model_state_bytes(1e9, 1, 8, 2.0, 4.0, 12.0, 0.0) == 7.5e9  # today: 12/8 + 6
    assert model_state_bytes(1e9, 0, 8, 2.0, 4.0, 12.0, 1.0) == 6e9  # ZeRO-0, all offloaded: w + g
    assert model_state_bytes(1e9, 3, 8, 2.0, 4.0, 8.0, 1.0) == pytest.approx(0.75e9)  # (2 + 4 + 0)/8
    spec = memory_dims.spec()
    base = memory_dims.costs(spec)
    low = memory_dims.costs(spec, optimizer_states="fp32/bf16/bf16", optimizer_offload_fraction=0.5)
    # per layer on one GPU: P·(12/8 + 6) today, P·(6·0.5/8 + 6) with the options
    assert base.dense.states_bytes == pytest.approx(memory_dims.P_LAYER * 7.5)
    assert low.dense.states_bytes == pytest.approx(memory_dims.P_LAYER * 6.375)


def test_hsdp_states_over_the_shard_group_by_hand():
    """dp = 8, ZeRO-1, two replicas: the optimizer states are sharded over 4 ranks: P·(12/4 + 6) = 9 P bytes
    (ZeRO-3: 18/4 = 4.5 P); the shard is half the group, twice the optimizer bytes of today's 12/8."""
    spec = memory_dims.spec()
    assert memory_dims.costs(spec, zero_replicas=2).dense.states_bytes == pytest.approx(memory_dims.P_LAYER * 9.0)
    assert memory_dims.costs(spec, zero_stage=3, zero_replicas=2).dense.states_bytes == pytest.approx(memory_dims.P_LAYER * 4.5)


def test_fsdp_keeps_no_resident_bf16_shard_under_zero3_by_hand():
    """PyTorch FSDP shards the fp32 parameters (the optimizer's master) and casts to bf16 per all-gather
    (zero3_resident_weight_bytes 0): ZeRO-3 over 8 ranks holds (0 + 4 + 12)/8 = 2 bytes per parameter instead of
    (2 + 4 + 12)/8 = 2.25; ZeRO-1/2 keep the full bf16 copy (2 + 4 + 12/8 = 7.5 with or without the knob).
    MPT-30B on 8 A100s (LLM Foundry FULL_SHARD): 29.98e9 · 2/8 B = 6.98 GiB less than the DeepSpeed layout."""
    assert model_state_bytes(1e9, 3, 8, 2.0, 4.0, 12.0, 0.0, 0.0) == 2e9
    assert model_state_bytes(1e9, 3, 8, 2.0, 4.0, 12.0, 0.0, None) == 2.25e9
    assert model_state_bytes(1e9, 1, 8, 2.0, 4.0, 12.0, 0.0, 0.0) == 7.5e9
    assert (model_state_bytes(29.98e9, 3, 8, 2.0, 4.0, 12.0) - model_state_bytes(29.98e9, 3, 8, 2.0, 4.0, 12.0, 0.0, 0.0)) \
        / 2**30 == pytest.approx(6.98, abs=0.01)
    spec = memory_dims.spec(assumptions={"zero3_resident_weight_bytes": 0.0})
    assert memory_dims.costs(spec, zero_stage=3).dense.states_bytes == pytest.approx(memory_dims.P_LAYER * 2.0)
    assert memory_dims.costs(memory_dims.spec(), zero_stage=3).dense.states_bytes == pytest.approx(
        memory_dims.P_LAYER * 2.25)
