"""Golden check of :func:`parplan.costmodel.evaluation.choice.choice_costs`: every field of its ``ChoiceCosts`` (recursively,
floats bit for bit via ``float.hex``) for a few hundred (spec, choice) pairs, recorded before the function was split
by concern (issue 10 item 6) and asserted equal since, so that a refactor of the cost model changes no number.

The cases (``tests/data/choice_costs_golden.json.gz``) are drawn deterministically from ``SCENARIOS``: small dense
and MoE specs (MLA, MTP, shared experts, first dense layers, FP8), each with a ``search:`` that opens the dimensions
it exercises, and assumption variants; the legal choices come from :func:`parplan.solver.space.enumerate_choices`
(no dominance pruning) and a seeded sample of them is kept. The file stores each case's spec input and choice, so
the check does not depend on the space enumeration staying as it is; the costs' echo of the choice is compared
as a ``Choice`` (a field added to ``Choice`` since takes its default), a field added to ``ChoiceCosts`` or
``LayerCost`` is reported as not recorded. Regenerate (only when a cost term is meant to
change, and say so in the commit) with ``python -m tests.costmodel.evaluation.test_choice --regenerate``.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import random
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from parplan.costmodel.spec.assumptions import resolve_assumptions
from parplan.costmodel.evaluation.choice import Choice, choice_costs
from parplan.costmodel.schedules.schedule import Schedule
from parplan.costmodel.spec.hardware import resolve_gpu
from parplan.solver.space import SpaceOptions, enumerate_choices
from parplan.frameworks.loader import validate_spec

DATA = Path(__file__).parents[2] / "data" / "choice_costs_golden.json.gz"

DENSE = dict(name="dense", num_layers=8, hidden_size=1024, ffn_hidden_size=2816, num_attention_heads=16,
             num_kv_heads=4, vocab_size=32000)
DENSE_MHA = dict(name="dense-mha", num_layers=6, hidden_size=768, ffn_hidden_size=3072, num_attention_heads=12,
                 vocab_size=50257, gated_mlp=False, tie_embeddings=True)
MOE = dict(name="moe", num_layers=6, hidden_size=1024, ffn_hidden_size=2816, num_attention_heads=16, num_kv_heads=4,
           vocab_size=32000, moe=dict(num_experts=8, top_k=2, expert_ffn_hidden_size=512))
DSV3 = dict(name="dsv3-small", num_layers=6, hidden_size=1024, ffn_hidden_size=2816, num_attention_heads=16,
            vocab_size=32000, num_mtp_layers=1,
            moe=dict(num_experts=16, top_k=4, expert_ffn_hidden_size=256, num_shared_experts=1, first_dense_layers=1,
                     max_nodes_per_token=2, dispatcher="flex"),
            mla=dict(q_lora_rank=384, kv_lora_rank=128, qk_nope_head_dim=64, qk_rope_head_dim=32, v_head_dim=64))
MOE_SHARED_WIDE = dict(MOE, name="moe-shared", num_mtp_layers=2,
                       moe=dict(num_experts=8, top_k=2, expert_ffn_hidden_size=512, num_shared_experts=2,
                                shared_expert_ffn_hidden_size=1024, first_dense_layers=2))

ALL = dict(schedules=["1f1b", "interleaved", "zb-h1", "dualpipe", "dualpipev"], recompute=["none", "selective", "full"],
           zero_stages=[0, 1, 2, 3], sequence_parallel=[True, False])
CP_ALL = ["p2p", "a2a", "allgather", "a2a+p2p"]
MEMORY = dict(zero_replicas=[1, 2], optimizer_states=["fp32/bf16/bf16", "fp32/fp8/fp8"],
              optimizer_offload_fractions=[0.0, 0.5])
MOE_COMM = dict(moe_fp8_dispatch=[False, True], moe_a2a_overlap=[False, True])


def _spec(model, gpus, seq=2048, gbs=32, precision="bf16", gpu="H100-SXM-80GB", search=None, assumptions=None,
          **cluster):
    return dict(model=model, training=dict(seq_len=seq, global_batch_size=gbs, precision=precision),
                cluster=dict(gpu=gpu, num_gpus=gpus, **cluster), search=search or {},
                assumptions=assumptions or {}, framework="any")  # recorded in the research space


# (name, spec input, cases kept)
SCENARIOS: list[tuple[str, dict, int]] = [
    ("dense-schedules", _spec(DENSE, 16, search=ALL), 40),
    ("dense-2nodes-memory", _spec(DENSE, 16, gpus_per_node=8, search=dict(ALL, **MEMORY)), 30),
    ("dense-cp", _spec(DENSE, 16, seq=16384, gbs=8, search=dict(ALL, cp=[2, 4, 8], cp_comm_types=CP_ALL)), 40),
    ("dense-cp-aggregate", _spec(DENSE, 16, seq=16384, gbs=8, search=dict(ALL, cp=[2, 4], cp_comm_types=CP_ALL),
                                 assumptions=dict(cp_ring_model="aggregate", cp_kv_sharded_by_tp=False)), 12),
    ("dense-fp8", _spec(DENSE, 8, precision="fp8", search=ALL, assumptions=dict(fp8_weight_cache_bytes=2.0)), 16),
    ("dense-mha-unfused", _spec(DENSE_MHA, 8, gpu="A100-SXM-80GB", search=ALL,
                                assumptions=dict(flash_attention=False, dropout_masks=True)), 16),
    ("dense-textbook", _spec(DENSE, 16, search=ALL, assumptions=dict(preset="textbook")), 12),
    ("dense-sbh-spread", _spec(DENSE_MHA, 16, gpus_per_node=8, search=ALL,
                               assumptions=dict(activation_sbh_coefficient=34.0, spread_embedding_evenly=True,
                                                include_latency=False)), 12),
    ("dense-torch-dtensor", _spec(DENSE, 16, gpus_per_node=8, search=dict(ALL, **MEMORY),
                                  assumptions=dict(pipeline_runtime="torch", sequence_parallel_saves_gathered_inputs=True,
                                                   zero_unsharded_across_microbatches_with_pp=False,
                                                   memory_from_nominal_gb=True)), 20),
    ("dense-flat-comm", _spec(DENSE, 32, gpus_per_node=8, search=ALL,
                              assumptions=dict(hierarchical_collectives=False, overlap_limited_by_compute=False,
                                               recompute_repeats_comm=False, tp_sp_weight_grad_regather=False)), 12),
    ("dense-sac", _spec(DENSE, 8, search=ALL, assumptions=dict(selective_recompute_policy="alternate_matmuls")), 12),
    ("moe", _spec(MOE, 16, gpus_per_node=8, search=dict(ALL, etp=[1, 2], **MOE_COMM)), 40),
    ("moe-memory", _spec(MOE, 16, search=dict(ALL, **MEMORY)), 20),
    ("moe-flat-a2a", _spec(MOE, 32, gpus_per_node=8, search=dict(ALL, **MOE_COMM),
                           assumptions=dict(hierarchical_all_to_all=False, ep_comm_sm_fraction=0.2,
                                            hierarchical_collectives=False)), 16),
    ("dsv3", _spec(DSV3, 16, gpus_per_node=8, gpu="H800", search=dict(ALL, etp=[1, 2], **MOE_COMM),
                   assumptions=dict(selective_recompute_policy="deepseek_v3", ep_comm_sm_fraction=0.1)), 40),
    ("dsv3-fp8-cp", _spec(DSV3, 16, seq=8192, gbs=16, precision="fp8", gpu="H800",
                          search=dict(ALL, cp=[1, 2, 4], cp_comm_types=CP_ALL, **MOE_COMM),
                          assumptions=dict(fp8_weight_cache_bytes=2.0)), 30),
    ("moe-shared-mtp-gb200", _spec(MOE_SHARED_WIDE, 16, gpu="GB200", search=dict(ALL, **MEMORY, **MOE_COMM),
                                   assumptions=dict(pipeline_runtime="torch", spread_embedding_evenly=True)), 24),
]

FEATURES = ("schedule", "cp_comm_type", "recompute", "zero_stage", "sequence_parallel", "zero_replicas",
            "optimizer_states", "optimizer_offload_fraction", "moe_fp8_dispatch", "moe_a2a_overlap")


def _encode(value):
    """Every field, recursively; floats bit for bit (``float.hex``), the type kept (an int is not a float)."""
    if dataclasses.is_dataclass(value):
        return {f.name: _encode(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, float):
        return {"f": value.hex()}
    if isinstance(value, dict):
        return {str(k): _encode(v) for k, v in sorted(value.items())}
    if isinstance(value, (tuple, list)):
        return [_encode(v) for v in value]
    if value is None or isinstance(value, (bool, int, str)):
        return value
    raise TypeError(f"unrecorded type {type(value).__name__}")


# The fitted knobs' values when the cases were recorded (costmodel/spec/calibration.py at 4fd2b54, and the ceilings the
# default preset derives from them): pinned under every default-preset case, so that a refit (benchmarks/fit.py)
# moves no recorded number and the check keeps guarding the cost terms alone.
RECORDED_CALIBRATION: dict[str, float] = {
    "matmul_efficiency_ampere": 0.8053, "matmul_efficiency_hopper": 0.7277, "fp8_matmul_efficiency_hopper": 0.5913,
    "attention_efficiency_ampere": 0.5918, "attention_efficiency_hopper": 0.2749, "attention_efficiency_flash2": 0.2043,
    "matmul_shape_penalty": 0.6341, "attention_seq_penalty": 1079.5714, "intra_node_bandwidth_efficiency": 0.5883,
    "inter_node_bandwidth_efficiency": 0.8757, "hierarchical_collective_efficiency": 0.5736,
    "intra_node_latency_factor": 1.6501, "inter_node_latency_factor": 0.4526, "tp_comm_overlap": 0.9604,
    "dp_comm_overlap": 0.5674, "zero_microbatch_comm_overlap": 0.3795, "pp_comm_overlap": 0.016,
    "activation_traffic_passes": 7.3274, "matmul_efficiency_blackwell": 0.7277,
    "fp8_matmul_efficiency_blackwell": 0.5913, "attention_efficiency_blackwell": 0.2749,
    "matmul_efficiency": 0.8053, "fp8_matmul_efficiency": 0.5913, "attention_efficiency": 0.5918,
}


def _pinned(spec_input: dict) -> dict:
    """``spec_input`` with the recorded calibration under its own assumption overrides (default preset only)."""
    given = dict(spec_input.get("assumptions") or {})
    if given.get("preset", "default") != "default":
        return spec_input
    return {**spec_input, "assumptions": {**RECORDED_CALIBRATION, **given}}


def _costs(spec_input: dict, choice: Choice):
    spec = validate_spec(_pinned(spec_input))
    return choice_costs(spec, choice, resolve_gpu(spec.cluster), resolve_assumptions(spec.assumptions))


def _draw() -> dict:
    """The cases: per scenario a seeded sample of its legal choices (every value of the listed features that the
    space holds is kept at least once where the sample allows)."""
    scenarios = []
    for i, (name, spec_input, keep) in enumerate(SCENARIOS):
        spec = validate_spec(_pinned(spec_input))
        gpu, a = resolve_gpu(spec.cluster), resolve_assumptions(spec.assumptions)
        choices = enumerate_choices(spec, gpu, a, replace(SpaceOptions.from_spec(spec), prune_dominated=False)).choices
        rng = random.Random(1000 + i)
        picked: dict[int, Choice] = {}
        for feature in FEATURES:  # one choice per value of each feature first
            for value in sorted({repr(getattr(c, feature)) for c in choices}):
                idx = [j for j, c in enumerate(choices) if repr(getattr(c, feature)) == value]
                j = rng.choice(idx)
                picked.setdefault(j, choices[j])
        rest = [j for j in range(len(choices)) if j not in picked]
        for j in rng.sample(rest, max(0, min(len(rest), keep - len(picked)))):
            picked[j] = choices[j]
        cases = [dict(choice=dataclasses.asdict(picked[j]), costs=_encode(_costs(spec_input, picked[j])))
                 for j in sorted(picked)]
        scenarios.append(dict(name=name, spec=spec_input, cases=cases))
    return dict(scenarios=scenarios)


def _load() -> dict:
    with gzip.open(DATA, "rt", encoding="utf-8") as f:
        return json.load(f)


def _diff(path: str, want, got, out: list[str]) -> None:
    if isinstance(want, dict) and isinstance(got, dict) and "f" not in want and "f" not in got:
        if want.keys() != got.keys():  # a field added or removed: regenerate if the new term is meant
            out.append(f"{path}: fields recorded {sorted(want.keys() - got.keys())} gone, "
                       f"new {sorted(got.keys() - want.keys())} not recorded")
        for k in want.keys() & got.keys():
            _diff(f"{path}.{k}", want[k], got[k], out)
    elif isinstance(want, list) and isinstance(got, list) and len(want) == len(got):
        for k, (w, g) in enumerate(zip(want, got)):
            _diff(f"{path}[{k}]", w, g, out)
    elif want != got:
        out.append(f"{path}: recorded {want!r}, now {got!r}")


GOLDEN = _load() if DATA.exists() else None


@pytest.mark.skipif(GOLDEN is None, reason="no golden data: run this file with --regenerate")
@pytest.mark.parametrize("name", [s[0] for s in SCENARIOS])
def test_choice_costs_bit_identical(name):
    """Every recorded field of every case of the scenario equals what choice_costs gives now, bit for bit."""
    scenario = next(s for s in GOLDEN["scenarios"] if s["name"] == name)
    assert scenario["cases"], name
    failures: list[str] = []
    for k, case in enumerate(scenario["cases"]):
        # fields added to Choice since take their defaults; the JSON's schedule string parsed into its Schedule
        choice = Choice(**{**case["choice"], "schedule": Schedule(case["choice"]["schedule"])})
        costs = _costs(scenario["spec"], choice)
        assert costs.choice == choice, (name, k)  # the echoed input, compared as a Choice
        want, got = dict(case["costs"]), _encode(costs)
        want.pop("choice"), got.pop("choice")
        _diff(f"{name}[{k}]", want, got, failures)
    assert not failures, f"{len(failures)} differences, first: " + "; ".join(failures[:5])


@pytest.mark.skipif(GOLDEN is None, reason="no golden data: run this file with --regenerate")
def test_golden_cases_cover_the_dimensions():
    """The recorded cases hold every schedule, CP comm type, recompute, ZeRO stage and memory / MoE dimension value,
    MoE with and without MLA, MTP, shared experts and first dense layers, and cp, ep, etp > 1."""
    seen: dict[str, set] = {f: set() for f in FEATURES}
    degrees = {"cp": set(), "ep": set(), "etp": set(), "pp": set(), "tp": set()}
    models = set()
    for s in GOLDEN["scenarios"]:
        moe, mla = s["spec"]["model"].get("moe"), s["spec"]["model"].get("mla")
        for case in s["cases"]:
            c = case["choice"]
            for f in FEATURES:
                seen[f].add(c[f] if not isinstance(c[f], list) else tuple(c[f]))
            for d in degrees:
                degrees[d].add(c[d] > 1)
            if moe:
                models.add(("mla", mla is not None))
                models.add(("mtp", s["spec"]["model"].get("num_mtp_layers", 0) > 0))
                models.add(("shared", moe.get("num_shared_experts", 0) > 0))
                models.add(("first_dense", moe.get("first_dense_layers", 0) > 0))
    assert seen["schedule"] == {"1f1b", "interleaved", "zb-h1", "dualpipe", "dualpipev"}
    assert seen["cp_comm_type"] == set(CP_ALL)
    assert seen["recompute"] == {"none", "selective", "full"}
    assert seen["zero_stage"] == {0, 1, 2, 3}
    assert seen["sequence_parallel"] == {True, False}
    assert seen["zero_replicas"] == {1, 2} and seen["optimizer_offload_fraction"] == {0.0, 0.5}
    assert seen["optimizer_states"] == {None, "fp32/bf16/bf16", "fp32/fp8/fp8"}
    assert seen["moe_fp8_dispatch"] == seen["moe_a2a_overlap"] == {True, False}
    assert all(v == {True, False} for v in degrees.values()), degrees
    assert models == {(k, b) for k in ("mla", "mtp", "shared", "first_dense") for b in (True, False)}, models


if __name__ == "__main__":
    if sys.argv[1:] != ["--regenerate"]:
        sys.exit("usage: python -m tests.costmodel.evaluation.test_choice --regenerate")
    data = _draw()
    with gzip.GzipFile(DATA, "wb", mtime=0) as f:  # mtime 0: the same cases give the same bytes
        f.write(json.dumps(data, sort_keys=True, separators=(",", ":")).encode())
    print(f"{DATA}: {sum(len(s['cases']) for s in data['scenarios'])} cases, {DATA.stat().st_size} bytes")


def test_bubble_factor_cache_serves_the_uncached_bubble_and_stays_bounded(monkeypatch):
    """bubble_factor's cache (keyed by the weight-gradient share only where the schedule reads it) answers as
    PipelineUnits.bubble_beta does for every schedule and share, and never holds more than BUBBLE_CACHE_MAX entries."""
    from parplan.costmodel.evaluation import choice as choice_module
    from parplan.costmodel.schedules.schedule import PipelineUnits

    monkeypatch.setattr(choice_module, "_BUBBLE_CACHE", {})
    monkeypatch.setattr(choice_module, "BUBBLE_CACHE_MAX", 32)
    a = resolve_assumptions(None).model_copy(update={"zb_weight_grad_fraction": 1.0})
    rng = random.Random(41)
    for _ in range(400):
        schedule = rng.choice(list(Schedule))
        pp = rng.choice((2, 4, 8)) if schedule is not Schedule.DUALPIPEV else rng.choice((2, 4))
        vpp = rng.choice((2, 4)) if schedule is Schedule.INTERLEAVED else 1
        c = Choice(tp=1, cp=1, pp=pp, dp=1, num_microbatches=2 * pp, schedule=schedule, vpp=vpp)
        share = rng.choice((0.3, 0.6, 0.9, rng.random()))
        assert choice_module.bubble_factor(c, a, share) == PipelineUnits.of(c).bubble_beta(a, share)
        assert len(choice_module._BUBBLE_CACHE) <= 32
