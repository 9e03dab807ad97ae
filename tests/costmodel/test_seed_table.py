"""Seed 003 ``parallel_plan.py``: its table, reproduced by the cost model under the ``textbook`` preset.

Three checks:

1. the seed script itself, extracted from ``shared/seeds/003_*.txt`` and executed, is the oracle: for
   every (tp, cp, pp) it accepts in the five scenarios it prints (three in the chapter, two in exercise 2),
   our evaluator gives the same MFU, memory per GPU and step-time breakdown;
2. the table rows as printed in the seed (hard-coded below, so this check runs without the seed file);
3. models, sequence lengths and GPU counts the seed was never shown on (hypothesis, derandomized).
"""

from __future__ import annotations

import itertools
import re
from functools import lru_cache
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parplan.costmodel.compute.architecture import Architecture
from parplan.costmodel.evaluation.evaluate import evaluate
from parplan.costmodel.spec.spec import PlanSpec, Spec
from parplan.frameworks.loader import validate_spec

SEEDS_DIR = Path(__file__).resolve().parents[2].parent / "shared" / "seeds"

MFU_TOL = 0.3  # percentage points
MEM_TOL = 1.0  # GiB
SHARE_TOL = 0.5  # percentage points of the step time

# the seed's Chinese breakdown keys -> ours (Metrics.breakdown_s)
PART_KEYS = {"计算": "compute", "重算": "recompute", "不均衡": "imbalance", "TP": "tp", "CP": "cp",
             "PP": "pp", "气泡": "bubble", "DP": "dp"}

# the seed's search grid (``search()`` in parallel_plan.py)
GRID = list(itertools.product((1, 2, 4, 8), (1, 2, 4, 8, 16, 32), (1, 2, 4, 8, 16)))

LLAMA3_70B = dict(name="llama3-70b", num_layers=80, hidden_size=8192, ffn_hidden_size=28672,
                  num_attention_heads=64, num_kv_heads=8, vocab_size=128256, gated_mlp=True,
                  tie_embeddings=False)
LLAMA3_8B = dict(name="llama3-8b", num_layers=32, hidden_size=4096, ffn_hidden_size=14336,
                 num_attention_heads=32, num_kv_heads=8, vocab_size=128256, gated_mlp=True,
                 tie_embeddings=False)

# (id, model, seq, gbs, gpus, number of configurations the seed prints as fitting)
SCENARIOS = [
    ("70b-64gpu-8k-gbs512", LLAMA3_70B, 8192, 512, 64, 24),
    ("70b-64gpu-128k-gbs32", LLAMA3_70B, 131072, 32, 64, 23),
    ("8b-8gpu-8k-gbs64", LLAMA3_8B, 8192, 64, 8, 16),
    ("70b-1024gpu-8k-gbs512", LLAMA3_70B, 8192, 512, 1024, 28),  # exercise 2
    ("70b-1024gpu-8k-gbs2048", LLAMA3_70B, 8192, 2048, 1024, 28),  # exercise 2
]


# ---------------------------------------------------------------------------------------------- oracle
def extract_parallel_plan_source(text: str) -> str:
    """The script between the line ``parallel_plan.py`` and the line ``输出`` after "一个配置搜索脚本"."""
    start = text.index("一个配置搜索脚本")
    lines = text[start:].splitlines()
    begin = lines.index("parallel_plan.py")
    end = lines.index("输出", begin)
    return "\n".join(lines[begin + 1:end]) + "\n"


def seed_003_text() -> str:
    """Seed 003's text; the test skips, saying why, where the seed documents are not beside the repository."""
    files = sorted(SEEDS_DIR.glob("003_*.txt"))
    if not files:
        pytest.skip(f"needs the seed documents beside the repository: seed 003 not found under {SEEDS_DIR}")
    return files[0].read_text(encoding="utf-8")


@lru_cache(maxsize=1)
def seed_oracle() -> SimpleNamespace:
    source = extract_parallel_plan_source(seed_003_text())
    namespace: dict = {"__name__": "seed_parallel_plan"}  # not __main__: the printing block does not run
    exec(compile(source, "parallel_plan.py", "exec", dont_inherit=True), namespace)  # no __future__ flags
    return SimpleNamespace(**{k: v for k, v in namespace.items() if not k.startswith("__")})


# ---------------------------------------------------------------------------------------------- helpers
def make_spec(model: dict, seq: int, gbs: int, gpus: int) -> Spec:
    return validate_spec(dict(
        framework="any",  # the seeds' framework-neutral space and conventions
        model=model,
        training=dict(seq_len=seq, global_batch_size=gbs, precision="bf16"),
        cluster=dict(gpu="H100-SXM-80GB", num_gpus=gpus, gpus_per_node=8),
        assumptions=dict(preset="textbook"),
    ))


def seed_model(oracle: SimpleNamespace, spec: Spec):
    """The seed's ``Model`` for our architecture, with our exact parameter count."""
    arch = Architecture(spec.model)
    m = spec.model
    return oracle.Model(N=arch.total_params, L=m.num_layers, H=m.hidden_size, KV=arch.kv_dim, V=m.vocab_size)


def our_plan(spec: Spec, tp: int, cp: int, pp: int, rc: int):
    ps = PlanSpec(tp=tp, cp=cp, pp=pp, micro_batch_size=1, schedule="1f1b", zero_stage=1,
                  recompute="full" if rc else "none", recompute_layers=[rc] * pp)
    return evaluate(spec, ps)


def shares(ev) -> dict[str, float]:
    step = ev.metrics.step_time_s
    return {k: 100 * v / step for k, v in ev.metrics.breakdown_s.items()}


class Deviation:
    """Largest deviations seen across the comparisons (printed with ``-s``; asserted per case)."""

    mfu = 0.0
    mem = 0.0
    share = 0.0

    @classmethod
    def record(cls, mfu: float, mem: float, share: float = 0.0) -> None:
        cls.mfu, cls.mem, cls.share = max(cls.mfu, mfu), max(cls.mem, mem), max(cls.share, share)


@pytest.fixture(scope="module", autouse=True)
def report_max_deviations():
    """After this module's comparisons, the largest deviations seen (the README quotes them; run with ``-s``).
    A report, not a check: each comparison asserts its own tolerances."""
    yield
    print(f"\nseed 003 max deviations: MFU {Deviation.mfu:.4f} points, memory {Deviation.mem:.4f} GiB, "
          f"share {Deviation.share:.4f} points")


def compare_with_oracle(spec: Spec, ref: dict) -> tuple[float, float, float]:
    """Evaluate the seed-accepted plan ``ref`` with our model; assert and return the deviations."""
    tp, cp, pp, rc = ref["tp"], ref["cp"], ref["pp"], ref["rc"]
    ev = our_plan(spec, tp, cp, pp, rc)
    label = f"tp={tp} cp={cp} pp={pp} dp={ref['dp']} rc={rc}"
    assert ev.plan.dp == ref["dp"], label
    d_mfu = abs(100 * ev.metrics.mfu - 100 * ref["mfu"])
    d_mem = abs(ev.metrics.peak_memory_gib - ref["mem"])
    assert d_mfu <= MFU_TOL, f"{label}: MFU {100 * ev.metrics.mfu:.3f} % vs seed {100 * ref['mfu']:.3f} %"
    assert d_mem <= MEM_TOL, f"{label}: memory {ev.metrics.peak_memory_gib:.3f} vs seed {ref['mem']:.3f} GiB"
    ours = shares(ev)
    d_share = 0.0
    for zh, key in PART_KEYS.items():
        seed_share = 100 * ref["parts"][zh] / ref["step"]
        d = abs(ours[key] - seed_share)
        d_share = max(d_share, d)
        assert d <= SHARE_TOL, f"{label}: {zh}/{key} share {ours[key]:.2f} % vs seed {seed_share:.2f} %"
    assert ours["ep"] == 0.0, label  # the one breakdown term the seed lacks (dense models: no EP)
    Deviation.record(d_mfu, d_mem, d_share)
    return d_mfu, d_mem, d_share


# ---------------------------------------------------------------------------------------------- 1. oracle
def test_seed_script_extracts_and_matches_its_own_counts():
    """Seed 003 §一个配置搜索脚本: the extracted script, with its own Llama constants, accepts exactly the
    number of configurations its printed output reports (24, 23, 16; exercise 2: 28, 28)."""
    o = seed_oracle()
    models = {"llama3-70b": o.llama70b, "llama3-8b": o.llama8b}
    for _, model, seq, gbs, gpus, count in SCENARIOS:
        accepted = [p for tp, cp, pp in GRID if (p := o.plan(models[model["name"]], seq, gbs, gpus, tp, cp, pp))]
        assert len(accepted) == count, (model["name"], seq, gbs, gpus)


@pytest.mark.parametrize("name,model,seq,gbs,gpus,count", SCENARIOS, ids=[s[0] for s in SCENARIOS])
def test_every_seed_accepted_plan_matches_oracle(name, model, seq, gbs, gpus, count):
    """Seed 003 ``parallel_plan.py`` scenarios (and exercise 2): for every (tp, cp, pp) the script accepts,
    MFU within 0.3 points, memory within 1 GiB and each breakdown share within 0.5 points."""
    o = seed_oracle()
    spec = make_spec(model, seq, gbs, gpus)
    m = seed_model(o, spec)
    refs = [p for tp, cp, pp in GRID if (p := o.plan(m, seq, gbs, gpus, tp, cp, pp))]
    assert len(refs) == count  # also with our exact N instead of the seed's rounded 70.6e9 / 8.03e9
    for ref in refs:
        compare_with_oracle(spec, ref)


@pytest.mark.parametrize("name,model,seq,gbs,gpus,count", SCENARIOS, ids=[s[0] for s in SCENARIOS])
def test_fitting_set_and_recompute_counts_match_oracle(name, model, seq, gbs, gpus, count):
    """Seed 003: the seed accepts a (tp, cp, pp) iff it fits with some number of fully recomputed layers,
    and picks the fewest. Our evaluator agrees on which grid points fit (with all layers recomputed) and
    on the minimal recompute count: ``rc`` fits, ``rc - 1`` does not."""
    o = seed_oracle()
    spec = make_spec(model, seq, gbs, gpus)
    m = seed_model(o, spec)
    L = spec.model.num_layers
    for tp, cp, pp in GRID:
        ref = o.plan(m, seq, gbs, gpus, tp, cp, pp)
        shape_ok = gpus % (tp * cp * pp) == 0 and L % pp == 0 and gbs % (gpus // (tp * cp * pp)) == 0
        if not shape_ok:
            assert ref is None
            continue
        ev = our_plan(spec, tp, cp, pp, L // pp)
        # memory is judged by ``fits``; the seed lets a pipeline run fewer micro-batches than stages
        # (our 1F1B rule 'num_microbatches ≥ pp' only adds a violation), so both are left out here
        structural = [v for v in ev.violations if "GiB" not in v and "num_microbatches" not in v]
        ours_ok = ev.metrics.fits and not structural
        assert ours_ok == (ref is not None), (tp, cp, pp, ev.violations)
        if ref is None:
            continue
        rc = ref["rc"]
        assert our_plan(spec, tp, cp, pp, rc).metrics.fits, (tp, cp, pp, rc)
        if rc:
            assert not our_plan(spec, tp, cp, pp, rc - 1).metrics.fits, (tp, cp, pp, rc)


# ---------------------------------------------------------------------------------------------- 2. printed
# (scenario id, tp, cp, pp, dp, MFU %, GiB per GPU, recomputed layers, printed shares %) as printed in seed 003.
PRINTED = [
    # == 70B，64 卡，8K 序列，每步 4M token：24 种配置放得下
    ("70b-64gpu-8k-gbs512", 4, 2, 2, 4, 53.7, 66, 0, {"计算": 89, "不均衡": 1, "TP": 8, "气泡": 1}),
    ("70b-64gpu-8k-gbs512", 4, 2, 4, 2, 52.2, 50, 0, {"计算": 87, "不均衡": 4, "TP": 8, "气泡": 1}),
    ("70b-64gpu-8k-gbs512", 4, 2, 8, 1, 49.6, 42, 0, {"计算": 83, "不均衡": 8, "TP": 8, "气泡": 1}),
    ("70b-64gpu-8k-gbs512", 8, 1, 1, 8, 49.3, 66, 0, {"计算": 82, "TP": 18}),  # 第 5 名
    ("70b-64gpu-8k-gbs512", 8, 1, 4, 2, 47.1, 42, 0, {"计算": 78, "不均衡": 3, "TP": 17, "气泡": 1}),  # 第 9 名
    # == 70B，64 卡，128K 序列，每步 4M token：23 种配置放得下
    ("70b-64gpu-128k-gbs32", 8, 4, 2, 1, 44.4, 66, 24,
     {"计算": 74, "重算": 15, "不均衡": 1, "TP": 8, "气泡": 3}),
    ("70b-64gpu-128k-gbs32", 4, 8, 2, 1, 44.2, 66, 32, {"计算": 74, "重算": 19, "TP": 3, "气泡": 3}),
    ("70b-64gpu-128k-gbs32", 8, 4, 1, 2, 43.8, 66, 64, {"计算": 73, "重算": 19, "TP": 8}),
    ("70b-64gpu-128k-gbs32", 8, 1, 1, 8, 41.8, 65, 80, {"计算": 70, "重算": 23, "TP": 7}),  # 第 6 名
    # == 8B，8 卡，8K 序列，每步 0.5M token：16 种配置放得下
    ("8b-8gpu-8k-gbs64", 1, 2, 1, 4, 59.9, 58, 0, {"计算": 100}),
    ("8b-8gpu-8k-gbs64", 2, 1, 1, 4, 56.9, 43, 0, {"计算": 95, "TP": 5}),
    ("8b-8gpu-8k-gbs64", 2, 2, 1, 2, 56.9, 35, 0, {"计算": 95, "TP": 5}),
    ("8b-8gpu-8k-gbs64", 1, 1, 1, 8, 55.0, 66, 9, {"计算": 92, "重算": 8}),  # 第 4 名
    # exercise 2 == 70B，1024 卡，8K 序列，每步 4M token：28 种配置放得下
    ("70b-1024gpu-8k-gbs512", 8, 1, 1, 128, 47.6, 55, 0, {"计算": 79, "TP": 17, "DP": 4}),
    ("70b-1024gpu-8k-gbs512", 4, 2, 2, 64, 46.5, 55, 0,
     {"计算": 77, "不均衡": 1, "TP": 7, "气泡": 11, "DP": 3}),
    ("70b-1024gpu-8k-gbs512", 4, 2, 4, 32, 43.7, 38, 0,
     {"计算": 73, "不均衡": 3, "TP": 7, "气泡": 16, "DP": 2}),
    # exercise 2 == 70B，1024 卡，8K 序列，每步 16M token：28 种配置放得下
    ("70b-1024gpu-8k-gbs2048", 4, 2, 2, 64, 52.0, 55, 0,
     {"计算": 87, "不均衡": 1, "TP": 8, "气泡": 3, "DP": 1}),
    ("70b-1024gpu-8k-gbs2048", 4, 2, 4, 32, 50.2, 38, 0, {"计算": 84, "不均衡": 4, "TP": 8, "气泡": 4}),
    ("70b-1024gpu-8k-gbs2048", 8, 1, 1, 128, 48.9, 55, 0, {"计算": 82, "TP": 18, "DP": 1}),
]
SCENARIO_BY_ID = {s[0]: s for s in SCENARIOS}


def _printed_id(row) -> str:
    return f"{row[0]}-tp{row[1]}cp{row[2]}pp{row[3]}"


@pytest.mark.parametrize("row", PRINTED, ids=[_printed_id(r) for r in PRINTED])
def test_printed_table_row(row):
    """Seed 003 输出 (and exercise 2's 输出): each printed row, evaluated as a plan: MFU within 0.3 points
    of the printed value, memory within 1 GiB of the printed (rounded) GiB, the printed recompute count is
    the fewest that fits, and each printed share (rounded to 1 %) within 1 point; shares the seed does not
    print (below 0.5 %) stay below 1 %."""
    sid, tp, cp, pp, dp, mfu, gib, rc, printed = row
    _, model, seq, gbs, gpus, _ = SCENARIO_BY_ID[sid]
    spec = make_spec(model, seq, gbs, gpus)
    ev = our_plan(spec, tp, cp, pp, rc)
    assert ev.plan.dp == dp
    assert abs(100 * ev.metrics.mfu - mfu) <= MFU_TOL, (100 * ev.metrics.mfu, mfu)
    assert abs(ev.metrics.peak_memory_gib - gib) <= MEM_TOL, (ev.metrics.peak_memory_gib, gib)
    assert ev.metrics.fits
    if rc:
        assert not our_plan(spec, tp, cp, pp, rc - 1).metrics.fits
    ours = shares(ev)
    for zh, key in PART_KEYS.items():
        if zh in printed:
            assert abs(ours[key] - printed[zh]) <= 1.0, (zh, ours[key], printed[zh])
        else:
            assert ours[key] < 1.0, (zh, ours[key])


def seed_row_text(tp, cp, pp, dp, mfu, gib, rc, layers) -> str:
    """One printed row of seed 003's table, as the script formats it (without the breakdown shares)."""
    text = f"TP={tp} CP={cp} PP={pp} DP={dp}：MFU {mfu:.1f}%，{gib} GiB/卡"
    return text + (f"，重算 {rc}/{layers} 层" if rc else "")


def test_printed_rows_are_in_the_seed_text():
    """Guard against typos in the hard-coded table: every row's line appears verbatim in seed 003."""
    text = seed_003_text()
    for sid, tp, cp, pp, dp, mfu, gib, rc, printed in PRINTED:
        layers = SCENARIO_BY_ID[sid][1]["num_layers"] // pp
        head = seed_row_text(tp, cp, pp, dp, mfu, gib, rc, layers)
        share = " ".join(f"{k} {v}%" for k, v in printed.items())
        assert re.search(re.escape(f"{head}｜{share}") + r"\s*$", text, re.M), f"{head}｜{share}"


# ---------------------------------------------------------------------------------------------- 3. unseen
POW2_SEQ = [2 ** k for k in range(11, 18)]  # 2048 .. 131072
POW2_GPUS = [2 ** k for k in range(3, 11)]  # 8 .. 1024


@st.composite
def dense_scenarios(draw):
    head_dim = draw(st.sampled_from([64, 128]))
    hidden = 128 * draw(st.integers(4, 64))  # 512 .. 8192
    heads = hidden // head_dim
    kv = draw(st.sampled_from([d for d in range(1, heads + 1) if heads % d == 0]))
    ffn = 256 * draw(st.integers(max(1, hidden // 256), 4 * hidden // 256))  # h .. 4h
    model = dict(name="random", num_layers=draw(st.integers(2, 96)), hidden_size=hidden, ffn_hidden_size=ffn,
                 num_attention_heads=heads, num_kv_heads=kv, vocab_size=draw(st.integers(8000, 256000)),
                 gated_mlp=draw(st.booleans()), tie_embeddings=False)
    seq = draw(st.sampled_from(POW2_SEQ))
    gpus = draw(st.sampled_from(POW2_GPUS))
    gbs = draw(st.sampled_from([1, 3])) * 2 ** draw(st.integers(0, 12))
    return model, seq, gbs, gpus


@settings(derandomize=True, max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(scenario=dense_scenarios(), data=st.data())
def test_unseen_models_match_oracle(scenario, data):
    """Seed 003 ``plan()`` on random dense Llama-like models, sequence lengths 2K-128K, 8-1024 GPUs and
    global batches it was never shown on: for a (tp, cp, pp) the seed accepts (with our exact parameter
    count), MFU within 0.3 points, memory within 1 GiB, every share within 0.5 points."""
    model, seq, gbs, gpus = scenario
    o = seed_oracle()
    spec = make_spec(model, seq, gbs, gpus)
    m = seed_model(o, spec)
    accepted = [p for tp, cp, pp in GRID if (p := o.plan(m, seq, gbs, gpus, tp, cp, pp))]
    if not accepted:
        return  # the seed fits nothing here (model too large for the GPUs); nothing to compare
    for ref in data.draw(st.lists(st.sampled_from(accepted), min_size=1, max_size=4, unique_by=id)):
        compare_with_oracle(spec, ref)

