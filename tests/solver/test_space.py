"""Search dimensions added by issue 10 (solver/space.py), each with its legality rule, and the Llama-3.1
405B acceptance check against Meta's published plan.

* micro-batch sizes: the divisors of the per-DP batch up to 16 (published runs use 3, 6, 14, 16);
* vpp: 10, 12, 16 and 20 as well, where the layer count allows whole chunks;
* expert-TP: every divisor of TP (was {1, TP}), priced by the ETP collectives (tests/costmodel/communication/test_collectives.py);
* the memory-side dimensions (HSDP replicas, optimizer dtypes, offload shares): unset options keep today's space,
  the optimizer states' dominance reduction and the sizes (tests/memory_dims_cases.py).
"""

from __future__ import annotations

from dataclasses import replace

from parplan.costmodel.spec.assumptions import resolve_assumptions
from parplan.costmodel.spec.hardware import resolve_gpu
from parplan.costmodel.evaluation.legality import choice_violations
from parplan.solver.planner import optimize
from parplan.solver.space import default_expert_tp, default_micro_batch_sizes, enumerate_choices
from parplan.frameworks.loader import validate_spec

from tests import memory_dims_cases as memory_dims


def _space(model: dict, gpus: int, gbs: int, search: dict | None = None):
    spec = validate_spec(dict(model=model, training=dict(seq_len=4096, global_batch_size=gbs),
                                    cluster=dict(gpu="H100-SXM-80GB", num_gpus=gpus), search=search or {}))
    a = resolve_assumptions(spec.assumptions)
    return spec, a, enumerate_choices(spec, resolve_gpu(spec.cluster), a).choices


DENSE = dict(name="m", num_layers=80, hidden_size=4096, ffn_hidden_size=14336, num_attention_heads=32,
             num_kv_heads=8, vocab_size=32000)
MOE = dict(DENSE, num_layers=8, moe=dict(num_experts=8, top_k=2, expert_ffn_hidden_size=4096))


def test_default_micro_batch_sizes_are_divisors_of_the_per_dp_batch_up_to_16():
    """Per-DP batch 48: 1, 2, 3, 4, 6, 8, 12, 16 (24 and 48 exceed 16); 14 divides 14·k batches only."""
    assert default_micro_batch_sizes(48) == [1, 2, 3, 4, 6, 8, 12, 16]
    assert default_micro_batch_sizes(56) == [1, 2, 4, 7, 8, 14]
    assert default_micro_batch_sizes(1) == [1]
    spec, a, choices = _space(DENSE, 8, 48, dict(tp=[8], pp=[1]))
    assert sorted({c.micro_batch_size for c in choices}) == [1, 2, 3, 4, 6, 8, 12, 16]
    for c in choices:  # the batch-split rule holds for every one
        assert c.dp * c.micro_batch_size * c.num_microbatches == 48
        assert not choice_violations(spec, c, a, 8)


def test_vpp_up_to_20_where_the_layers_allow():
    """80 layers on 4 stages: every vpp of the default list leaves at least one layer per chunk (20 is one layer
    per chunk); 2, 4, 5, 8, 10, 16 and 20 divide 80, so their chunks are whole; 3 misses by one layer, which
    stage 0's first chunk or the last stage's last one lacks (two ways); 6 and 12 miss by 4 (more than one layer
    at each end: none)."""
    _, _, choices = _space(DENSE, 32, 64, dict(tp=[8], pp=[4], schedules=["interleaved"], micro_batch_size=[1]))
    assert sorted({c.vpp for c in choices}) == [2, 3, 4, 5, 8, 10, 16, 20]
    for c in choices:
        trim = c.first_chunk_trim + c.last_chunk_trim
        assert trim == (-80) % c.vpp and 80 // (4 * c.vpp) >= 1
    assert sorted({(c.first_chunk_trim, c.last_chunk_trim) for c in choices if c.vpp == 3}) == [(0, 1), (1, 0)]


def test_expert_tp_over_the_divisors_of_tp():
    assert default_expert_tp(8) == [1, 2, 4, 8]
    spec, a, choices = _space(MOE, 8, 16, dict(tp=[4], pp=[1], micro_batch_size=[1]))
    etps = sorted({c.etp for c in choices})
    assert etps == [1, 2, 4]
    for c in choices:  # EP x ETP folds into TP x CP x DP
        assert (c.tp * c.cp * c.dp) % (c.ep * c.etp) == 0
        assert not choice_violations(spec, c, a, 8)


# --------------------------------------------------------------------------------------- Llama-3.1 405B
LLAMA405B = {
    "model": dict(name="llama3.1-405b", num_layers=126, hidden_size=16384, ffn_hidden_size=53248,
                  num_attention_heads=128, num_kv_heads=8, vocab_size=128256),
    "training": dict(seq_len=8192, global_batch_size=2048, precision="bf16"),
    "cluster": dict(gpu="H100-SXM-80GB", num_gpus=16384),
    "framework": "any",  # the research space's free optimum (omitted would be megatron-core)
}


def test_dense_405b_optimum_is_not_dualpipe():
    """The issue's symptom: with F&B = B the planner chose DualPipe at PP 64 (51 % MFU). A dense model has no
    all-to-all for DualPipe to hide, so it may win only by its third-of-a-stage bubble edge against ZB-H1
    and its doubled weights cost memory; the optimum is not DualPipe."""
    best = optimize(validate_spec(LLAMA405B), method="exhaustive").plans[0]
    assert best.plan.schedule != "dualpipe", best.plan


def test_llama405b_free_optimum_within_115_of_metas_plan():
    """Issue 10's acceptance: the free optimum is within 1.15 x Meta's plan (TP8 CP1 PP16, interleaved, micro-batch
    1) evaluated by the same model; Meta's 7 / 8 x 14 / 7 split needs the trimmed end chunks (test_chunk_trims)."""
    free = optimize(validate_spec(LLAMA405B), method="exhaustive").plans[0]
    meta = optimize(validate_spec({**LLAMA405B, "search": dict(tp=[8], cp=[1], pp=[16], schedules=["interleaved"],
                                                                     micro_batch_size=[1])}),
                    method="exhaustive").plans[0]
    assert meta.metrics.step_time_s / free.metrics.step_time_s <= 1.15


def test_unset_options_keep_todays_space():
    """Unset, and set to today's single values, the space is the same list of choices."""
    today = memory_dims.space(memory_dims.spec())
    assert memory_dims.space(memory_dims.spec(search=dict(zero_replicas=[1], optimizer_offload_fractions=[0.0]))) == today
    assert all(c.zero_replicas == 1 and c.optimizer_states is None and c.optimizer_offload_fraction == 0.0
               for c in today)


def test_space_sizes_and_the_states_reduction():
    """Replicas multiply the ZeRO ≥ 1 choices by the replica counts that divide DP·CP; offload shares multiply
    every choice; of several optimizer dtypes only the fewest bytes are searched (fp16/fp8/fp8: 4 B)."""
    today = memory_dims.space(memory_dims.spec())
    hsdp = memory_dims.space(memory_dims.spec(search=dict(zero_replicas=[1, 2, 4])))
    expected = sum(1 + sum(1 for r in (2, 4) if c.dense_dp % r == 0 and c.expert_dp % r == 0)
                   if c.zero_stage >= 1 else 1 for c in today)
    assert len(hsdp) == expected > len(today)
    off = memory_dims.space(memory_dims.spec(search=dict(optimizer_offload_fractions=[0.0, 0.5, 1.0])))
    shares = {f: [replace(c, optimizer_offload_fraction=0.0) for c in off if c.optimizer_offload_fraction == f]
              for f in (0.0, 0.5, 1.0)}
    for f, choices in shares.items():  # every share of every choice of today's space, and with no DP peers
        assert set(today) <= set(choices)  # (dp·cp = 1) every ZeRO stage, which a framework's offload may need
        assert all(c.dense_dp == 1 for c in set(choices) - set(today))
    assert len(off) > 3 * len(today)
    states = memory_dims.space(memory_dims.spec(search=dict(optimizer_states=["fp32/fp32/fp32", "fp16/fp8/fp8", "fp32/bf16/bf16"])))
    assert len(states) == len(today) and {c.optimizer_states for c in states} == {"fp16/fp8/fp8"}


def test_states_reduction_is_exact_for_min_memory():
    """min_memory: the fewest optimizer bytes win, whether or not the reduction removed the others."""
    spec = memory_dims.spec(search=dict(optimizer_states=["fp32/fp32/fp32", "fp16/fp8/fp8"], tp=[1], pp=[1]))
    spec = spec.model_copy(update={"objective": "min_memory"})
    best = optimize(spec, method="exhaustive").plans[0]
    assert best.plan.optimizer_states == "fp16/fp8/fp8"


def test_sequence_parallel_searched_both_ways_where_neither_dominates():
    """With the TP overlap bounded by the GEMMs beside it (costmodel/evaluation/layer_comm.py LayerComm.tp_block_s), SP's five
    collectives per block (the weight gradient's re-gather) can take longer than the all-reduces' four beside short
    GEMMs: a 512-wide model at TP 4 runs faster without SP, and the planner finds that plan (the space keeps both
    values). Without the re-gather (the textbook preset: four collectives either way, SP's hidden at least as much)
    SP is on alone. The layers run as captured CUDA graphs (no host launch floor): eager, this narrow model's layers
    wait for the host either way (costmodel/spec/host_floor.py) and SP's collectives would not show."""
    model = dict(name="narrow", num_layers=2, hidden_size=512, ffn_hidden_size=512, num_attention_heads=8,
                 num_kv_heads=4, vocab_size=3584)
    search = dict(tp=[4], pp=[1], micro_batch_size=[1], schedules=["1f1b"], zero_stages=[0], recompute=["none"])
    spec = validate_spec(dict(model=model, training=dict(seq_len=512, global_batch_size=4),
                              cluster=dict(gpu="H100-SXM-80GB", num_gpus=4, gpus_per_node=4), search=search,
                              framework="any", assumptions=dict(cuda_graphs=True)))
    from parplan.costmodel.evaluation.evaluate import evaluate
    from parplan.costmodel.spec.spec import PlanSpec
    on, off = (evaluate(spec, PlanSpec(tp=4, pp=1, micro_batch_size=1, sequence_parallel=sp)) for sp in (True, False))
    assert off.metrics.step_time_s < on.metrics.step_time_s
    assert off.metrics.breakdown_s["tp"] < on.metrics.breakdown_s["tp"]
    a = resolve_assumptions(spec.assumptions)
    assert {c.sequence_parallel for c in enumerate_choices(spec, resolve_gpu(spec.cluster), a).choices} == {True, False}
    best = optimize(spec).plans[0]
    assert best.plan.sequence_parallel is False
    assert best.metrics.step_time_s == off.metrics.step_time_s
    textbook = spec.model_copy(update={"assumptions": spec.assumptions.model_copy(update={"preset": "textbook"})})
    a = resolve_assumptions(textbook.assumptions)
    assert not a.tp_sp_weight_grad_regather
    assert {c.sequence_parallel for c in enumerate_choices(textbook, resolve_gpu(textbook.cluster), a).choices} == {True}
    # without the re-gather but with the overlap priced pair by pair, holding SMs for the GEMMs beside it, SP on can
    # cost more than tiny collectives save: both values again; with no SM held, SP on alone
    for sms, want in ((16, {True, False}), (0, {True})):
        knobs = spec.assumptions.model_copy(update={"tp_sp_weight_grad_regather": False, "tp_overlap_pairs": True,
                                                    "tp_overlap_comm_sms": sms})
        a = resolve_assumptions(knobs)
        assert {c.sequence_parallel for c in enumerate_choices(spec.model_copy(update={"assumptions": knobs}),
                                                               resolve_gpu(spec.cluster), a).choices} == want


def test_ep_communication_verdicts_kept_by_the_fields_their_rules_read(monkeypatch):
    """space._Expansion._comm_verdicts keeps the EP communication rules' verdicts by (ep, pp, schedule, recompute and
    the pair): every space (FP8 training and not, with 'full' pruned for 'none' and not) is the space the rules give
    when asked again for every candidate, choices and rejection tally alike."""
    from parplan.solver import space

    def fresh(self, c):
        self._comm.clear()  # no verdict kept: the rules asked for this candidate
        return real(self, c)

    real = space._Expansion._comm_verdicts
    for precision in ("bf16", "fp8"):
        for recompute in (["none", "full"], ["none", "selective"]):
            spec = validate_spec(dict(
                model=MOE, training=dict(seq_len=4096, global_batch_size=64, precision=precision),
                cluster=dict(gpu="H100-SXM-80GB", num_gpus=32), framework="any",
                search=dict(moe_fp8_dispatch=[False, True], moe_a2a_overlap=[False, True], recompute=recompute,
                            schedules=["1f1b", "interleaved", "zb-h1"])))
            a, gpu = resolve_assumptions(spec.assumptions), resolve_gpu(spec.cluster)
            kept = enumerate_choices(spec, gpu, a)
            with monkeypatch.context() as m:
                m.setattr(space._Expansion, "_comm_verdicts", fresh)
                asked = enumerate_choices(spec, gpu, a)
            assert kept.choices == asked.choices and list(kept.rejected.items()) == list(asked.rejected.items())
            assert any(c.moe_a2a_overlap for c in kept.choices)
            assert any("moe_a2a_overlap" in why for why in kept.rejected)
            if precision == "fp8":
                assert any(c.moe_fp8_dispatch for c in kept.choices)
