"""Cost-model physics for MoE and modern schedules (issue 10), term by term, numbers worked by hand.

* DualPipe's paired chunk: F&B = F + B (the pairing hides communication, already netted out of the
  stage time), so its bubble is (p/2 - 1)(F + 2B - 3W), not (p/2 - 1)(2B - 3W) (DeepSeek-V3 §3.2.1, Table 2);
* the EP all-to-all over concurrent NVLink / network tiers, node-limited routing (DeepSeek-V3 §3.2.2),
  exposure bounded below by the all-to-all minus the compute it hides behind, SMs reserved for it;
* expert-TP collectives, sequence parallelism's 10 TP collectives per layer (Megatron-LM
  megatron/core/tensor_parallel/layers.py) and TP-comm overlap only with SP;
* MLA parameters and FLOPs (DeepSeek-V3 config.json), MTP on the last stage, FP8 memory terms.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from parplan.costmodel.architecture import Architecture
from parplan.costmodel.assumptions import resolve_assumptions
from parplan.costmodel.bubble import bubble_time
from parplan.costmodel.choice import Choice, bubble_factor, choice_costs, tier_links
from parplan.costmodel.collectives import all_to_all_time_s
from parplan.costmodel.evaluate import evaluate
from parplan.costmodel.hardware import resolve_gpu
from parplan.costmodel.memory import dense_layer_activation_items, mlp_activation_bytes
from parplan.costmodel.spec import ModelSpec, PlanSpec, Spec

LLAMA70B = dict(name="llama3-70b", num_layers=80, hidden_size=8192, ffn_hidden_size=28672, num_attention_heads=64,
                num_kv_heads=8, vocab_size=128256)
DSV3_MLA = dict(q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128)
DSV3 = dict(name="deepseek-v3", num_layers=61, hidden_size=7168, ffn_hidden_size=18432, num_attention_heads=128,
            vocab_size=129280, mla=DSV3_MLA,
            moe=dict(num_experts=256, top_k=8, expert_ffn_hidden_size=2048, num_shared_experts=1, first_dense_layers=3))


def _spec(model: dict, gpus: int, seq: int = 4096, gbs: int = 1024, precision: str = "bf16", **assumptions) -> Spec:
    return Spec.model_validate(dict(model=model, training=dict(seq_len=seq, global_batch_size=gbs, precision=precision),
                                    cluster=dict(gpu="H100-SXM-80GB" if precision == "bf16" else "H800", num_gpus=gpus),
                                    assumptions=assumptions))


def _costs(spec: Spec, choice: Choice):
    return choice_costs(spec, choice, resolve_gpu(spec.cluster), resolve_assumptions(spec.assumptions))


# ------------------------------------------------------------------------------------------- DualPipe
def test_dualpipe_bubble_p16_by_hand():
    """B = 2F, W = B/2: per stage time t = F + B = 1, F = 1/3, B = 2/3, W = 1/3 (DeepSeek-V3 Table 2).

    DualPipe: (16/2 - 1)(F&B + B - 3W) with F&B = F + B = 1: 7 · (1 + 2/3 - 1) = 14/3 ≈ 4.667 t.
    ZB-H1: (16 - 1)(F + B - 2W) = 15 · 1/3 = 5 t. 1F1B: 15 t. The old F&B = B (forward compute free)
    gave 7 · (2/3 + 2/3 - 1) = 7/3 t, half of ZB-H1's: the double credit the issue found.
    """
    a = resolve_assumptions({})
    dual = bubble_factor(Choice(tp=1, cp=1, pp=16, dp=1, num_microbatches=64, schedule="dualpipe"), a)
    zb = bubble_factor(Choice(tp=1, cp=1, pp=16, dp=1, num_microbatches=64, schedule="zb-h1"), a)
    assert dual == pytest.approx(14 / 3)
    assert zb == pytest.approx(5.0)
    assert zb - dual == pytest.approx(1 / 3)  # DualPipe's whole bubble advantage at p = 16: a third of a stage
    old = bubble_time("dualpipe", 16, 1 / 3, 2 / 3, 1 / 3, FandB=2 / 3)
    assert old == pytest.approx(7 / 3)
    x = resolve_assumptions({"dualpipe_chunk_overlap": 1.0})  # the old semantics, still expressible
    assert bubble_factor(Choice(tp=1, cp=1, pp=16, dp=1, num_microbatches=64, schedule="dualpipe"), x) == pytest.approx(7 / 3)


def test_dense_dualpipe_never_beats_zb_h1_by_more_than_its_bubble():
    """Llama-3 70B, TP8 PP16 DP1, 64 micro-batches, even stages: the same choice under DualPipe and ZB-H1.

    A dense model has no all-to-all to hide, so DualPipe's gains are exactly its bubble (14/3 stage times
    instead of 5, above) and pairing stage i with p-1-i (its per-micro-batch time is the mean of two stages',
    which spreads the embedding and head). The bubble's 15 idle slots are the other units' times
    (costmodel/bubble.py, Alpa §5.1 Eq. 2): ZB-H1 5/15·(Σ t - t_max), DualPipe 14/3/15·(Σ t - t_max) over its
    16 rank times; step_zb - step_dp = the bubble difference + m (t_zb - t_dp) + the DP difference, and nothing
    else. With the old F&B the DualPipe factor was 7/3; without ``uneven_stage_bubble``, 5 t_zb."""
    spec = _spec(LLAMA70B, 128, seq=8192, gbs=64)
    plan = dict(tp=8, pp=16, micro_batch_size=1, stage_layers=[5] * 16, recompute="full")
    zb = evaluate(spec, PlanSpec(schedule="zb-h1", **plan))
    dp = evaluate(spec, PlanSpec(schedule="dualpipe", **plan))
    m = 64
    times_zb = [s.time_per_microbatch_s for s in zb.stages]
    times_dp = [s.time_per_microbatch_s for s in dp.stages]
    t_zb, t_dp = max(times_zb), max(times_dp)
    others_zb, others_dp = (sum(times_zb) - t_zb) / 15, (sum(times_dp) - t_dp) / 15
    assert zb.metrics.breakdown_s["bubble"] == pytest.approx(5.0 * others_zb)
    assert dp.metrics.breakdown_s["bubble"] == pytest.approx(14 / 3 * others_dp)
    assert others_zb < t_zb  # the head makes the last stage the slowest: the others fill and drain faster
    gain = zb.metrics.step_time_s - dp.metrics.step_time_s
    dp_diff = zb.metrics.breakdown_s["dp"] - dp.metrics.breakdown_s["dp"]
    assert gain == pytest.approx(5.0 * others_zb - 14 / 3 * others_dp + m * (t_zb - t_dp) + dp_diff)
    # pairing only averages stage times; the mean stage time is the same under both schedules
    mean_zb = sum(times_zb) / 16
    assert t_dp <= t_zb and t_dp >= mean_zb - 1e-12
    assert (5.0 - 14 / 3) * t_zb < 0.01 * zb.metrics.step_time_s  # the bubble advantage: under 1 % here
    old = evaluate(spec.model_copy(update={"assumptions": {"dualpipe_chunk_overlap": 1.0}}),
                   PlanSpec(schedule="dualpipe", **plan))
    times_old = [s.time_per_microbatch_s for s in old.stages]
    assert old.metrics.breakdown_s["bubble"] == pytest.approx(7 / 3 * (sum(times_old) - max(times_old)) / 15)
    slowest = evaluate(spec.model_copy(update={"assumptions": {"uneven_stage_bubble": False}}),
                       PlanSpec(schedule="zb-h1", **plan))
    assert slowest.metrics.breakdown_s["bubble"] == pytest.approx(5.0 * t_zb)


# ------------------------------------------------------------------------------------- EP all-to-all
def test_all_to_all_tiers_and_node_limited_routing_by_hand():
    """DeepSeek-V3 dispatch of one micro-batch: 4096 tokens x 7168 x 1 B (FP8) = 29,360,128 B per copy
    set, 8 copies per token, EP 64 over 8 nodes of 8 GPUs; NVLink 160 GB/s, IB 45 GB/s, latencies 0.

    Unrestricted: network copies 8 · (1 - 8/64) = 7 -> 7 · 29,360,128 / 45e9 = 4.5671 ms; NVLink copies
    8 · 7/64 = 0.875 -> 0.1606 ms; the tiers run concurrently: 4.5671 ms.
    Node-limited (<= 4 nodes): network copies min(4, 8, 8) · (1 - 1/8) = 3.5 -> 2.2836 ms; NVLink copies
    8 · 7/8 = 7 (local and forwarded) -> 7 · 29,360,128 / 160e9 = 1.2845 ms; max: 2.2836 ms.
    Latency: one per tier (concurrent sends), not 63 in sequence: + 10 µs network -> 2.2936 ms."""
    b = 4096 * 7168 * 1
    assert b == 29_360_128
    free = all_to_all_time_s(b, 8, 64, 8, 160e9, 0.0, 45e9, 0.0)
    assert free == pytest.approx(7 * b / 45e9) and free == pytest.approx(4.5671e-3, rel=1e-4)
    limited = all_to_all_time_s(b, 8, 64, 8, 160e9, 0.0, 45e9, 0.0, max_nodes_per_token=4)
    assert limited == pytest.approx(3.5 * b / 45e9) and limited == pytest.approx(2.2836e-3, rel=1e-4)
    assert 7 * b / 160e9 == pytest.approx(1.2845e-3, rel=1e-4) and 7 * b / 160e9 < limited
    assert all_to_all_time_s(b, 8, 64, 8, 160e9, 3e-6, 45e9, 10e-6, 4) == pytest.approx(limited + 10e-6)
    # inside one node: NVLink only, (ep - 1)/ep of the copies
    assert all_to_all_time_s(b, 8, 8, 8, 160e9, 0.0, 45e9, 0.0) == pytest.approx(8 * 7 / 8 * b / 160e9)


def _dsv3(**assumptions):
    spec = _spec(DSV3, 2048, seq=4096, gbs=15360, precision="fp8", **assumptions)
    return spec, Choice(tp=1, cp=1, pp=16, dp=128, ep=64, micro_batch_size=1, num_microbatches=120,
                        schedule="dualpipe", recompute="selective", zero_stage=1, sequence_parallel=False)


def test_ep_exposure_bounded_by_the_compute_it_hides_behind():
    """Not paired (1F1B, ``ep_comm_overlap`` 0.9 set here): exposed = max(a2a·(1 - overlap), a2a - window),
    a2a = dispatch + combine forward and backward (2 x (dispatch + combine)), window = the layer's compute.
    BF16 dispatch without node limit over 400G IB at 0.5 of line rate makes the all-to-all longer than the
    compute, so the bound binds: the 90 % credit alone would hide more traffic than there is compute to hide it
    behind. (DualPipe prices its exposure per rank: tests/test_dualpipe_split.py.)"""
    spec, c = _dsv3(ep_dispatch_bytes=2.0, inter_node_bandwidth_efficiency=0.5, ep_comm_overlap=0.9)
    c = replace(c, schedule="1f1b")
    costs = _costs(spec, c)
    a = resolve_assumptions(spec.assumptions)
    nv, net = tier_links(resolve_gpu(spec.cluster), a)
    tok = 4096 * 7168
    one = sum(all_to_all_time_s(tok * bytes_, 8, 64, 8, nv.bandwidth_Bps, nv.latency_s, net.bandwidth_Bps,
                                net.latency_s) for bytes_ in (2.0, 2.0))
    raw = 2 * one
    window = costs.moe.compute_s - costs.moe.selective_s
    assert raw > window  # the all-to-all outlasts the compute
    assert costs.moe.ep_s == pytest.approx(max(raw * (1 - 0.9), raw - window))
    assert costs.moe.ep_s > raw * 0.1 * 1.5
    dual = _costs(spec, replace(c, schedule="dualpipe"))
    assert dual.moe.ep_s == 0.0 and dual.moe.a2a_s == pytest.approx(raw)


def test_sms_reserved_for_communication_slow_moe_compute():
    """20 of H800's 132 SMs reserved for the all-to-all (DeepSeek-V3 §3.2.2, the default for overlapped
    schedules): DualPipe's MoE layer computes 132/112 = 1.1786 x as long as with no reservation (fraction 0);
    dense layers are unchanged; 1F1B, which overlaps nothing, reserves none whatever the knob says."""
    spec, c = _dsv3()
    sm = _costs(spec, c)
    spec_none, _ = _dsv3(ep_comm_sm_fraction=0.0)
    base = _costs(spec_none, c)
    ratio = (sm.moe.compute_s - sm.moe.selective_s) / (base.moe.compute_s - base.moe.selective_s)
    assert ratio == pytest.approx(132 / 112)
    assert sm.dense.compute_s == pytest.approx(base.dense.compute_s)
    one = replace(c, schedule="1f1b")
    assert _costs(spec, one).moe.compute_s == pytest.approx(_costs(spec_none, one).moe.compute_s)


# ------------------------------------------------------------------------------------ TP, SP and ETP
def test_tp_collectives_with_and_without_sp_by_hand():
    """Llama-3 70B, TP 4, one 8192-token micro-batch: one b·s·h activation 8192 · 8192 · 2 = 134,217,728 B;
    a ring all-gather of it over 4 GPUs of NVLink (450 GB/s, efficiency 1, latency off) moves 3/4 of it:
    0.75 · 134,217,728 / 450e9 = 223.70 µs. With SP: 10 collectives per layer (4 forward, 4 backward, the
    2 re-gathers of QKV's and FC1's input for the weight gradient), half hidden with tp_comm_overlap 0.5:
    1118.48 µs. Without SP: 4 all-reduces = 8 gathers, and no overlap credit (Megatron asserts SP for
    --tp-comm-overlap): 1789.57 µs."""
    knobs = dict(intra_node_bandwidth_efficiency=1.0, include_latency=False, tp_comm_overlap=0.5)
    spec = _spec(LLAMA70B, 8, seq=8192, gbs=8, **knobs)
    one = 0.75 * 134_217_728 / 450e9
    assert one == pytest.approx(223.696e-6, rel=1e-5)
    sp = _costs(spec, Choice(tp=4, cp=1, pp=1, dp=2, num_microbatches=4, sequence_parallel=True))
    nosp = _costs(spec, Choice(tp=4, cp=1, pp=1, dp=2, num_microbatches=4, sequence_parallel=False))
    assert sp.dense.tp_s == pytest.approx(10 * one * 0.5)
    assert nosp.dense.tp_s == pytest.approx(8 * one)
    # full recompute repeats the forward's 4 collectives
    assert sp.dense.recompute_comm[0] == pytest.approx(4 * one * 0.5)


def test_expert_tp_collectives_by_hand():
    """A small MoE model (h 4096, 8 experts, top-2, no shared expert), TP 2 with SP, one 4096-token
    micro-batch, NVLink at efficiency 1 and latency off. The attention block: 5 collectives of one
    activation (4096 · 4096 · 2 = 33,554,432 B; a 2-GPU ring moves half: 37.28 µs each) = 186.41 µs,
    tp_comm_overlap 0. ETP = 1: nothing more (tokens are sequence-sharded, the experts see whole
    tokens). ETP = 2: the dispatched tokens of the ETP group, 2 GPUs x 2048 tokens x top-2 x 4096 x 2 B
    = 67,108,864 B, gathered before the experts and reduce-scattered after, forward and backward: 4 x
    half of it / 450e9 = 298.26 µs more."""
    model = dict(name="moe", num_layers=4, hidden_size=4096, ffn_hidden_size=14336, num_attention_heads=32,
                 num_kv_heads=8, vocab_size=32000,
                 moe=dict(num_experts=8, top_k=2, expert_ffn_hidden_size=14336))
    spec = _spec(model, 8, gbs=16, intra_node_bandwidth_efficiency=1.0, include_latency=False, tp_comm_overlap=0.0)
    act = 0.5 * 4096 * 4096 * 2 / 450e9
    assert 5 * act == pytest.approx(186.41e-6, rel=1e-4)
    etp1 = _costs(spec, Choice(tp=2, cp=1, pp=1, dp=4, ep=4, etp=1, num_microbatches=4))
    etp2 = _costs(spec, Choice(tp=2, cp=1, pp=1, dp=4, ep=4, etp=2, num_microbatches=4))
    assert etp1.moe.tp_s == pytest.approx(5 * act)
    dispatched = 2 * 2048 * 2 * 4096 * 2
    assert dispatched == 67_108_864
    assert etp2.moe.tp_s - etp1.moe.tp_s == pytest.approx(4 * 0.5 * dispatched / 450e9)
    assert 4 * 0.5 * dispatched / 450e9 == pytest.approx(298.26e-6, rel=1e-4)


# -------------------------------------------------------------------------------------------- MLA, MTP
def test_mla_parameters_and_attention_flops_by_hand():
    """DeepSeek-V3 MLA (config.json): q 7168 -> 1536 -> 128 x (128 + 64); kv 7168 -> 512 + 64, 512 ->
    128 x (128 + 128); output 128 x 128 -> 7168.
    Weights: 7168·1536 = 11,010,048; 1536·24,576 = 37,748,736; 7168·576 = 4,128,768; 512·32,768 =
    16,777,216; 16,384·7168 = 117,440,512; total 187,105,280 per layer (plus the two latent norms,
    1536 + 512). Attention core per token, fwd+bwd, causal, s = 4096: 6 · 4096 · (24,576 + 16,384) · 0.5
    = 503,316,480 FLOPs, 2.857 x the MHA approximation with head dim 7168/128 = 56 (12 · 4096 · 7168 ·
    0.5 = 176,160,768)."""
    arch = Architecture(ModelSpec.model_validate(DSV3))
    assert arch.attention_params == 11_010_048 + 37_748_736 + 4_128_768 + 16_777_216 + 117_440_512 == 187_105_280
    assert arch.norm_params_per_layer == 2 * 7168 + 1536 + 512
    assert arch.attention_core_flops(4096) == 503_316_480
    mha = Architecture(ModelSpec.model_validate({**DSV3, "mla": None}))
    assert mha.attention_core_flops(4096) == 176_160_768
    assert arch.attention_core_flops(4096) / mha.attention_core_flops(4096) == pytest.approx(2.857, abs=1e-3)
    # active parameters: the DeepSeek-V3 report's 37B
    assert arch.active_params == pytest.approx(37.5e9, rel=0.02)


def test_mla_cp_exchanges_the_up_projected_keys_and_values():
    """Ring CP moves K (128 heads x 192) and V (128 x 128) per token, 40,960 elements of 2 B: for 4096
    tokens per CP rank 335,544,320 B per ring step, three passes (forward, and K/V plus their gradients
    backward) of cp - 1 = 1 step each, here not overlapped; the MHA approximation (K and V 7168 wide)
    moved 2 · 4096 · 7168 · 2 = 117,440,512 B, 0.35 x as much."""
    spec = _spec(DSV3, 64, seq=8192, gbs=64, include_latency=False, cp_comm_overlaps_attention=False)
    c = Choice(tp=1, cp=2, pp=1, dp=32, ep=8, num_microbatches=1, zero_stage=1)
    costs = _costs(spec, c)
    kv = 4096 * (128 * 192 + 128 * 128) * 2
    assert kv == 335_544_320
    assert costs.dense.cp_s == pytest.approx(3 * kv / costs.links["cp"].bandwidth_Bps)
    mha = _costs(_spec({**DSV3, "mla": None}, 64, seq=8192, gbs=64, include_latency=False,
                       cp_comm_overlaps_attention=False), c)
    assert mha.dense.cp_s == pytest.approx(3 * 117_440_512 / costs.links["cp"].bandwidth_Bps)


def test_mla_activations_under_deepseek_selective_and_fp8_by_hand():
    """DeepSeek-V3 MoE layer, TP 1, FP8 (linear inputs 1 B), DeepSeek's selective recompute (RMSNorm
    outputs and MLA up-projections recomputed, experts' SwiGLU inputs cached in FP8, output recomputed).
    Per token: two norm inputs 2 · 2 · 7168 = 28,672; latents 2 · (1536 + 576) = 4,224; Q, K, V
    recomputed: 0; attention output 1 · 16,384; fp32 LSE 4 · 128 = 512; shared expert gate + up 2 · 2 ·
    2048 + product 1 · 2048 = 10,240; routed: 8 x (dispatched token 7168 + gate/up in FP8 2 · 2048) =
    90,112, x load imbalance 1.1 = 99,123.2. Total 159,155.2 B per token."""
    items = dense_layer_activation_items(7168, 24576, 24576, 2048, True, 128, 4096, v_dim=16384, o_dim=16384,
                                         mla_latents=(1536, 576), linear_input_bytes=1.0, recompute_norms=True,
                                         recompute_mla_up=True)
    attn_part = items.per_token(1, False) - mlp_activation_bytes(2048, True, 1.0)
    assert attn_part == 28_672 + 4_224 + 16_384 + 512
    spec, c = _dsv3(selective_recompute_policy="deepseek_v3")
    costs = _costs(spec, c)
    per_token = costs.moe.act_bytes / 4096
    assert per_token == pytest.approx(28_672 + 4_224 + 16_384 + 512 + 10_240 + 1.1 * 90_112)
    # BF16 with Megatron's default selective recompute stores Q, K, V and both norm outputs as well
    bf16 = _costs(_spec(DSV3, 2048, seq=4096, gbs=15360, precision="bf16"), replace(c, schedule="dualpipe"))
    assert bf16.moe.act_bytes / 4096 > 2 * per_token


def test_mtp_layer_on_the_last_stage():
    """One MTP module (DeepSeek-V3 §2.2): the last stage pays an extra MoE layer, the 2h x h projection
    and the shared head again, per micro-batch; the FLOPs per token add 6 · 2 · 7168² + the layer + the
    head (6 · 129,280 · 7168)."""
    spec, c = _dsv3()
    with_mtp = _spec({**DSV3, "num_mtp_layers": 1}, 2048, seq=4096, gbs=15360, precision="fp8")
    base, mtp = _costs(spec, c), _costs(with_mtp, c)
    assert mtp.first_extra_time_s == base.first_extra_time_s
    extra = mtp.last_extra_time_s - base.last_extra_time_s
    head = base.last_extra_compute_s
    assert extra > base.moe.time_s + head  # the layer, the projection and the head again
    assert extra < base.moe.time_s + 1.2 * head + 0.05 * base.moe.time_s
    arch = Architecture(with_mtp.model)
    per_token = 6 * 2 * 7168 ** 2 + arch.moe_layer_dense_linear_flops + arch.moe_layer_expert_flops \
        + arch.attention_core_flops(4096) + 6 * 129_280 * 7168
    assert arch.mtp_flops(4096) == pytest.approx(per_token)
    assert mtp.last_extra_flops - base.last_extra_flops == pytest.approx(4096 * per_token)
    assert mtp.last_extra_bytes > base.last_extra_bytes + base.moe.states_bytes


# ------------------------------------------------------------------------------------------------ FP8
def test_fp8_weight_cache_and_activations_by_hand():
    """Llama-3 70B, TP 4, ZeRO-1: a layer's GEMM weights 150,994,944 (attention) + 3 · 8192 · 28,672
    (MLP) = 855,638,016, 213,909,504 per GPU; Transformer Engine with BF16 primary weights keeps their FP8
    copy and transpose beside them (fp8_weight_cache_bytes 2): 427,819,008 B more per layer; with FP8
    primary weights (the default, 0) the FP8 copies take the BF16 copy's place. The saved linear inputs (QKV input 8192, attention output 8192,
    MLP input 8192, FC2 input 28,672 elements per token, of which TP shards the last three... here SP
    shards all of them) drop from 2 B to 1 B."""
    spec_bf16 = _spec(LLAMA70B, 8, seq=8192, gbs=8, fp8_weight_cache_bytes=2.0)
    spec_fp8 = Spec.model_validate({**spec_bf16.model_dump(), "training": dict(seq_len=8192, global_batch_size=8, precision="fp8")})
    spec_fp8_params = Spec.model_validate({**spec_fp8.model_dump(), "assumptions": {}})
    c = Choice(tp=4, cp=1, pp=1, dp=2, num_microbatches=4, zero_stage=1, sequence_parallel=True)
    bf, f8 = _costs(spec_bf16, c), _costs(spec_fp8, c)
    assert (150_994_944 + 3 * 8192 * 28672) // 4 == 213_909_504
    assert f8.dense.states_bytes - bf.dense.states_bytes == pytest.approx(2 * 213_909_504)
    assert _costs(spec_fp8_params, c).dense.states_bytes == pytest.approx(bf.dense.states_bytes)
    saved = (8192 + 8192) / 4 + (8192 + 28672) / 4  # QKV and MLP inputs (SP-sharded), o and FC2 inputs
    assert (bf.dense.act_bytes - f8.dense.act_bytes) / 8192 == pytest.approx(saved)
    assert f8.dense.time_s != bf.dense.time_s  # FP8 GEMMs; the elementwise traffic is unchanged
    z3 = _costs(spec_fp8, replace(c, zero_stage=3))
    z3_bf = _costs(spec_bf16, replace(c, zero_stage=3))
    assert z3.dense.states_bytes == pytest.approx(z3_bf.dense.states_bytes)  # ZeRO-3 caches no FP8 weights


# ------------------------------------------------------------------------------------------ acceptance
def test_deepseek_v3_as_published_fits_and_matches_the_reported_rate():
    """DeepSeek-V3 as run (TP1 PP16 EP64 DualPipe FP8 MLA MTP, 2048 H800, 15,360 x 4096 tokens per step):
    it fits in 80 GB and predicts between 0.95 x and 1.3 x the 1,543 tokens/s per GPU implied by 2.664M
    H800 GPU-hours for 14.8T tokens (14.8e12 / 2.664e6 / 3600 = 1,543.2)."""
    from benchmarks.runs import compare, load_runs

    assert 14.8e12 / 2.664e6 / 3600 == pytest.approx(1543.2, abs=0.1)
    row = next(r for r in load_runs() if r["id"] == "deepseek-v3-production-2048xh800")
    out = compare(row)
    assert out["plan_summary"].startswith("tp1 pp16 ep64 dp128")
    assert out["fits"], out["violations"]
    assert 0.95 <= out["ratio"] <= 1.3, out["ratio"]
