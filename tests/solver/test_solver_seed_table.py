"""Seed 003's table, reproduced by the solver (not just the evaluator).

Acceptance criterion: "with the textbook preset and the seed's space (TP ∈ {1,2,4,8}, CP ∈ {1,2,4,8,16,32},
PP ∈ {1,2,4,8,16}, mbs 1, even stages, 1F1B, ZeRO-1, none/full recompute with one count for every stage),
`solver-cli optimize --top 3` reproduces the three blocks of seed 003's table: the same top-3 plans in
order, MFU within 0.3 points, memory within 1 GiB, recompute counts equal. It must also agree with the seed
script on models and GPU counts it was not shown on."

1. The printed blocks (three in the chapter, two in exercise 2), hard-coded from the seed text: top 3 in
   order (exact ties in either order), and the "第 N 名" rows at their rank.
2. Models, sequence lengths and GPU counts the seed never showed: our top 3 against the ranking of the seed
   script's own ``search()`` (its accepted plans sorted by MFU), the script extracted from seed 003 and run.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parplan.costmodel.spec.spec import Spec
from parplan.solver.cpsat import SolverControls
from parplan.solver.planner import optimize
from parplan.frameworks.loader import validate_spec

from tests.solver_checks import check_integer_scaling, check_plan
from tests.costmodel.test_seed_table import GRID, LLAMA3_8B, LLAMA3_70B, seed_003_text, seed_model, seed_oracle, seed_row_text

MFU_TOL = 0.3  # percentage points
MEM_TOL = 1.0  # GiB
CONTROLS = SolverControls(workers=1, deterministic=True, time_limit_s=60)

SEED_SEARCH = dict(tp=[1, 2, 4, 8], cp=[1, 2, 4, 8, 16, 32], pp=[1, 2, 4, 8, 16], micro_batch_size=[1],
                   schedules=["1f1b"], uneven_stages=False, zero_stages=[1], recompute=["none", "full"],
                   uniform_recompute=True)


def seed_spec(model: dict, seq: int, gbs: int, gpus: int) -> Spec:
    """The form of shared/spec/seed-textbook-70b-8k.yaml: textbook preset, the seed's search space."""
    return validate_spec(dict(
        framework="any",  # the seeds' framework-neutral space and conventions
        model=model, training=dict(seq_len=seq, global_batch_size=gbs, precision="bf16"),
        cluster=dict(gpu="H100-SXM-80GB", num_gpus=gpus, gpus_per_node=8),
        search=SEED_SEARCH, assumptions=dict(preset="textbook"), objective="max_throughput"))


# (id, model, seq, gbs, gpus)
SCENARIOS = {
    "70b-64gpu-8k-gbs512": (LLAMA3_70B, 8192, 512, 64),
    "70b-64gpu-128k-gbs32": (LLAMA3_70B, 131072, 32, 64),
    "8b-8gpu-8k-gbs64": (LLAMA3_8B, 8192, 64, 8),
    "70b-1024gpu-8k-gbs512": (LLAMA3_70B, 8192, 512, 1024),  # exercise 2
    "70b-1024gpu-8k-gbs2048": (LLAMA3_70B, 8192, 2048, 1024),  # exercise 2
}

# As printed in seed 003 (输出 of parallel_plan.py, and exercise 2's answer):
# (scenario, rank, tp, cp, pp, dp, MFU %, GiB per GPU, recomputed layers per stage)
PRINTED = [
    ("70b-64gpu-8k-gbs512", 1, 4, 2, 2, 4, 53.7, 66, 0),
    ("70b-64gpu-8k-gbs512", 2, 4, 2, 4, 2, 52.2, 50, 0),
    ("70b-64gpu-8k-gbs512", 3, 4, 2, 8, 1, 49.6, 42, 0),
    ("70b-64gpu-8k-gbs512", 5, 8, 1, 1, 8, 49.3, 66, 0),  # 第 5 名
    ("70b-64gpu-8k-gbs512", 9, 8, 1, 4, 2, 47.1, 42, 0),  # 第 9 名
    ("70b-64gpu-128k-gbs32", 1, 8, 4, 2, 1, 44.4, 66, 24),
    ("70b-64gpu-128k-gbs32", 2, 4, 8, 2, 1, 44.2, 66, 32),
    ("70b-64gpu-128k-gbs32", 3, 8, 4, 1, 2, 43.8, 66, 64),
    ("70b-64gpu-128k-gbs32", 6, 8, 1, 1, 8, 41.8, 65, 80),  # 第 6 名
    ("8b-8gpu-8k-gbs64", 1, 1, 2, 1, 4, 59.9, 58, 0),
    ("8b-8gpu-8k-gbs64", 2, 2, 1, 1, 4, 56.9, 43, 0),  # exact tie with the next row
    ("8b-8gpu-8k-gbs64", 3, 2, 2, 1, 2, 56.9, 35, 0),
    ("8b-8gpu-8k-gbs64", 4, 1, 1, 1, 8, 55.0, 66, 9),  # 第 4 名
    ("70b-1024gpu-8k-gbs512", 1, 8, 1, 1, 128, 47.6, 55, 0),
    ("70b-1024gpu-8k-gbs512", 2, 4, 2, 2, 64, 46.5, 55, 0),
    ("70b-1024gpu-8k-gbs512", 3, 4, 2, 4, 32, 43.7, 38, 0),
    ("70b-1024gpu-8k-gbs2048", 1, 4, 2, 2, 64, 52.0, 55, 0),
    ("70b-1024gpu-8k-gbs2048", 2, 4, 2, 4, 32, 50.2, 38, 0),
    ("70b-1024gpu-8k-gbs2048", 3, 8, 1, 1, 128, 48.9, 55, 0),
]
TOP3 = {sid: [r for r in PRINTED if r[0] == sid and r[1] <= 3] for sid in SCENARIOS}
EXTRA = [r for r in PRINTED if r[1] > 3]


def _matches(ev, row) -> list[str]:
    """How plan ``ev`` differs from a printed row (empty: it matches)."""
    _, _, tp, cp, pp, dp, mfu, gib, rc = row
    p = ev.plan
    out = []
    if (p.tp, p.cp, p.pp, p.dp) != (tp, cp, pp, dp):
        out.append(f"plan TP={p.tp} CP={p.cp} PP={p.pp} DP={p.dp}, seed TP={tp} CP={cp} PP={pp} DP={dp}")
    if abs(100 * ev.metrics.mfu - mfu) > MFU_TOL:
        out.append(f"MFU {100 * ev.metrics.mfu:.2f} % vs seed {mfu} %")
    if abs(ev.metrics.peak_memory_gib - gib) > MEM_TOL:
        out.append(f"memory {ev.metrics.peak_memory_gib:.2f} GiB vs seed {gib} GiB")
    if p.recompute_layers != [rc] * p.pp or p.recompute != ("full" if rc else "none"):
        out.append(f"recompute {p.recompute} {p.recompute_layers} vs seed {rc} per stage")
    return out


@pytest.mark.parametrize("sid", list(SCENARIOS))
def test_top3_block(sid):
    """``--top 3`` by CP-SAT: the seed's three printed plans in order (rows whose printed MFU ties may come
    in either order, but all must be there), MFU within 0.3 points, memory within 1 GiB, recompute counts
    equal; every plan legal and inside the seed's search space."""
    spec = seed_spec(*SCENARIOS[sid])
    res = optimize(spec, method="cpsat", top_k=3, controls=CONTROLS)
    assert res.status == "OPTIMAL" and len(res.plans) == 3, res.status
    rows = TOP3[sid]
    for j, ev in enumerate(res.plans):
        check_plan(spec, ev)
        tied = [r for r in rows if r[6] == rows[j][6]]  # printed rows with the same MFU: order-free
        assert any(not _matches(ev, r) for r in tied), (sid, j + 1, _matches(ev, rows[j]))
    got = {(e.plan.tp, e.plan.cp, e.plan.pp) for e in res.plans}
    assert got == {(r[2], r[3], r[4]) for r in rows}, (sid, got)
    check_integer_scaling(spec, res)


@pytest.mark.parametrize("row", EXTRA, ids=[f"{r[0]}-rank{r[1]}" for r in EXTRA])
def test_ranked_row(row):
    """The "第 N 名" rows: solved with top_k = N, the plan at rank N is the printed one."""
    sid, rank = row[0], row[1]
    spec = seed_spec(*SCENARIOS[sid])
    res = optimize(spec, method="cpsat", top_k=rank, controls=CONTROLS)
    assert res.status == "OPTIMAL" and len(res.plans) == rank
    ev = res.plans[rank - 1]
    check_plan(spec, ev)
    assert not _matches(ev, row), (sid, rank, _matches(ev, row), [(e.plan.tp, e.plan.cp, e.plan.pp) for e in res.plans])


def test_printed_rows_are_in_the_seed_text():
    """Guard against typos in PRINTED: each row (with its rank for the "第 N 名" rows) is in seed 003."""
    text = seed_003_text()
    for sid, rank, tp, cp, pp, dp, mfu, gib, rc in PRINTED:
        layers = SCENARIOS[sid][0]["num_layers"] // pp
        line = seed_row_text(tp, cp, pp, dp, mfu, gib, rc, layers)
        prefix = f"  第 {rank} 名：" if rank > 3 else ""
        assert re.search("^" + re.escape(prefix + line + "｜"), text, re.M), prefix + line


# ---------------------------------------------------------------------------------------------- unseen
class Skipped:
    examples = 0
    skipped = 0
    compared = 0  # examples where the seed fits at least one plan
    reasons: list[str] = []


@st.composite
def unseen_scenarios(draw):
    """Dense Llama-like models where our extra legality rules cannot reject a plan the seed accepts for a
    reason other than the micro-batch count: heads and KV heads powers of two divisible by 8 (tp ≤ 8),
    sequences powers of two (seq % 2·cp), GPU counts powers of two."""
    heads = draw(st.sampled_from([8, 16, 32, 64, 128]))
    kv = draw(st.sampled_from([k for k in (8, 16, 32, 64, 128) if k <= heads]))
    head_dim = draw(st.sampled_from([64, 128]))
    hidden = heads * head_dim
    model = dict(name="unseen", num_layers=draw(st.sampled_from([8, 12, 16, 24, 32, 40, 48, 64, 96])),
                 hidden_size=hidden, ffn_hidden_size=256 * draw(st.integers(hidden // 256, 4 * hidden // 256)),
                 num_attention_heads=heads, num_kv_heads=kv, vocab_size=draw(st.integers(16000, 160000)),
                 gated_mlp=True, tie_embeddings=False)
    seq = draw(st.sampled_from([2048, 4096, 8192, 16384, 32768, 131072]))
    gpus = draw(st.sampled_from([8, 16, 32, 64, 128, 256]))
    gbs = max(8, gpus // 8) * 2 ** draw(st.integers(0, 5))
    return model, seq, gbs, gpus


def seed_ranking(spec: Spec) -> list[dict]:
    """The seed script's ``search()`` order: its accepted plans sorted by -MFU (a stable sort over its grid)."""
    o = seed_oracle()
    m = seed_model(o, spec)
    seq, gbs, gpus = spec.training.seq_len, spec.training.global_batch_size, spec.cluster.num_gpus
    plans = [p for tp, cp, pp in GRID if (p := o.plan(m, seq, gbs, gpus, tp, cp, pp))]
    plans.sort(key=lambda p: -p["mfu"])
    return plans


@settings(max_examples=60, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(scenario=unseen_scenarios())
def test_unseen_models_match_seed_search(scenario):
    """Our top 3 against the seed script's ranking on models, sequence lengths, batches and GPU counts it was
    never shown on: the same (tp, cp, pp) in order (exact MFU ties in either order), MFU within 0.3 points,
    the same recompute count. Examples whose seed top 3 holds a plan our rules reject (a 1F1B pipeline with
    fewer micro-batches than stages) are skipped and counted."""
    spec = seed_spec(*scenario)
    ranking = seed_ranking(spec)
    Skipped.examples += 1
    top = ranking[:3]
    rejected = [p for p in top if p["pp"] > 1 and spec.training.global_batch_size // p["dp"] < p["pp"]]
    if rejected:
        Skipped.skipped += 1
        Skipped.reasons.append(f"{scenario}: seed top 3 has m < pp: {[(p['tp'], p['cp'], p['pp']) for p in rejected]}")
        return
    res = optimize(spec, method="cpsat", top_k=3, controls=CONTROLS)
    if not top:
        assert res.status == "INFEASIBLE", (scenario, res.status)
        return
    assert len(res.plans) == len(top), (scenario, len(res.plans), len(top))
    Skipped.compared += 1
    for j, (ev, ref) in enumerate(zip(res.plans, top)):
        check_plan(spec, ev)
        key = (ev.plan.tp, ev.plan.cp, ev.plan.pp)
        tied = [p for p in ranking if abs(p["mfu"] - ref["mfu"]) <= 1e-12 * ref["mfu"]]
        match = next((p for p in tied if (p["tp"], p["cp"], p["pp"]) == key), None)
        assert match is not None, (scenario, j + 1, key, (ref["tp"], ref["cp"], ref["pp"]),
                                   [(p["tp"], p["cp"], p["pp"], round(100 * p["mfu"], 3)) for p in ranking[:5]],
                                   [(e.plan.tp, e.plan.cp, e.plan.pp, round(100 * e.metrics.mfu, 3)) for e in res.plans])
        assert abs(100 * ev.metrics.mfu - 100 * match["mfu"]) <= MFU_TOL, (scenario, key, ev.metrics.mfu, match["mfu"])
        assert ev.plan.recompute_layers == [match["rc"]] * ev.plan.pp, (scenario, key, ev.plan.recompute_layers,
                                                                         match["rc"])


def test_unseen_skips_are_a_minority():
    """Skipped examples of the test above (seed plans our rules reject) stay a small minority."""
    if Skipped.examples == 0:
        pytest.skip("run together with test_unseen_models_match_seed_search")
    print(f"\nunseen seed comparisons: {Skipped.compared} compared, {Skipped.skipped} of {Skipped.examples} skipped")
    for r in Skipped.reasons:
        print("  ", r)
    assert Skipped.skipped <= Skipped.examples // 5, Skipped.reasons
    assert Skipped.compared >= Skipped.examples // 2, (Skipped.compared, Skipped.examples)
