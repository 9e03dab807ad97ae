"""CI smoke of the speed benchmark: three small scenarios, CP-SAT and the oracle must agree."""

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(name, mod)  # a module's dataclasses look themselves up there
    spec.loader.exec_module(mod)
    return mod


def test_solver_speed_quick_agrees_with_the_oracle(capsys):
    assert _load("solver_speed").main(["--quick", "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert "same K best step times (top 1 and top 10): 3/3" in out


def test_search_breakdown_times_every_stage_and_restores_the_classes(capsys):
    from parplan.solver import problem, search

    before = (problem.Problem.__dict__["mean_bound"], search.Searcher.__dict__["_cpsat"])
    assert _load("search_breakdown").main(["--only", "8B / 8 H100"]) == 0
    out = capsys.readouterr().out
    assert "top 1 OPTIMAL" in out and "CP-SAT solve" in out and " 0 calls" not in out.split("build")[1].splitlines()[0]
    assert "s CPU, this process's; load" in out and out.split("CP-SAT solve")[1].splitlines()[0].endswith(" s CPU")
    assert (problem.Problem.__dict__["mean_bound"], search.Searcher.__dict__["_cpsat"]) == before


def test_sweep_benchmark_quick(capsys):
    assert _load("sweep").main(["--quick", "--jobs", "2"]) == 0
    out = capsys.readouterr().out
    assert "plans identical (1 job vs 2 jobs): True" in out and "| 512 |" in out


def test_bridge_harness_maps_recipes_and_counts_recompute_as_megatron_does():
    """benchmarks/framework_parsers.py --megatron-bridge needs a Bridge checkout; its own logic does not: the perf
    recipe a spec maps to (or why none) and the layers Megatron-Core recomputes under Bridge's final config."""
    from parplan.library.spec_io import spec_from_data

    fp = _load("framework_parsers")
    base = {"training": {"seq_len": 8192, "global_batch_size": 64}, "cluster": {"gpu": "H100-SXM-80GB", "num_gpus": 8}}
    assert fp.bridge_recipe(spec_from_data({**base, "model": {"preset": "llama3-70b"}}))[0] == (
        "llama", "llama3_70b", "h100", "bf16")
    assert fp.bridge_recipe(spec_from_data({**base, "model": {"preset": "megatron-gpt-1.7b"}})) == (
        None, "no perf recipe for this model")
    a100 = {**base, "cluster": {"gpu": "A100-SXM-80GB", "num_gpus": 8}, "model": {"preset": "llama3-8b"}}
    assert fp.bridge_recipe(spec_from_data(a100))[1] == "no perf recipes for A100-SXM-80GB"
    got = {"pp": 2, "layers": [3, 4, 3, 4], "recompute_granularity": "full", "recompute_method": "block",
           "recompute_num_layers": 2}  # chunks v*pp + rank: rank 0 holds [3, 3], rank 1 [4, 4]
    assert fp.bridge_recomputed(got) == [4, 4]
    assert fp.bridge_recomputed({**got, "recompute_method": "uniform", "recompute_num_layers": 1}) == [6, 8]
    assert fp.bridge_recomputed({**got, "recompute_granularity": "selective"}) == [0, 0]
    # a model with no perf recipe gets its shape on a stand-in recipe's provider (Mixtral: 8 experts in every layer)
    mixtral = spec_from_data({**base, "model": {"preset": "mixtral-8x7b"}})
    shape = dict(o.split("=", 1) for o in fp.bridge_shape_overrides(mixtral))
    assert fp.bridge_recipe(mixtral)[0] is None and fp.STAND_INS[True] == ("qwen", "qwen3_30b_a3b")
    assert (shape["model.num_layers"], shape["model.num_moe_experts"], shape["model.moe_router_topk"]) == ("32", "8", "2")
    assert shape["model.moe_layer_freq"] == "[" + ",".join(["1"] * 32) + "]"
    assert shape["model.kv_channels"] == "128" and shape["model.moe_shared_expert_intermediate_size"] == "null"


def test_answers_digest_tells_a_changed_plan_from_a_changed_count(tmp_path, capsys):
    import json

    mod = _load("answers_digest")
    old = {"s top1": {"plans": [{"step": 1.0}], "stats": {"choices_searched": 9}}}
    fewer = {"s top1": {"plans": [{"step": 1.0}], "stats": {"choices_searched": 3}}}
    other = {"s top1": {"plans": [{"step": 1.5}], "stats": {"choices_searched": 9}}}
    for name, d in (("old", old), ("fewer", fewer), ("other", other)):
        (tmp_path / f"{name}.json").write_text(json.dumps(d))
    assert mod.main(["--compare", str(tmp_path / "old.json"), str(tmp_path / "fewer.json")]) == 0
    assert "plans same; stats {'choices_searched': (9, 3)}" in capsys.readouterr().out
    assert mod.main(["--compare", str(tmp_path / "old.json"), str(tmp_path / "other.json")]) == 1
    assert "PLANS DIFFER" in capsys.readouterr().out


def test_moe_layer_breakdown_adds_up_to_the_layer_and_prices_deepseek_v3_shapes_by_hand(capsys):
    """benchmarks/moe_layer_breakdown.py: its terms add up to LayerCost.compute_s (it asserts so), and DeepSeek-V3's
    routed up-projection is the shape worked by hand: EP64 gives 256/64 = 4 local experts of M_e = 64·4096·8/256 =
    8192 rows, K = 7168, N = 2·2048 (gate and up), 6·8·2·7168·2048·4096 = 5.773 TFLOP fwd+bwd at the mean load."""
    mod = _load("moe_layer_breakdown")
    lines, totals = mod.breakdown(mod.DSV3)
    row = next(x for x in lines if x.strip().startswith("expert_up"))
    assert "4 local" in row and "8192 x 7168 x 4096" in row
    busiest = float(row.split("busiest x")[1].split(")")[0])
    tflop = float(row.split("8192 x 7168 x 4096")[1].split()[0])
    assert abs(tflop / busiest - 6 * 8 * 2 * 7168 * 2048 * 4096 / 1e12) < 0.01 * busiest
    # the hand column for it is DeepGEMM@55ab91f's 1346 TFLOPS at the mean load: 5.773 TFLOP / 1346 TFLOP/s
    hand = float(row.split("8192 x 7168 x 4096")[1].split()[5])
    assert abs(hand - 1e3 * 5.773 / 1346) < 0.02
    assert totals["a2a_ms"] > 0 and totals["compute_ms"] > 0


def test_warm_service_quick_prints_its_table_and_the_same_answers(capsys):
    """benchmarks/warm_service.py --quick: S3 warm, cold, off and at a new GPU count through an in-process server,
    the warm answers byte-identical to the cache off (its exit status), and the RSS rows (no timing is checked)."""
    from parplan.solver.deadline import default_memory_budget_mib

    before = default_memory_budget_mib()
    assert _load("warm_service").main(["--quick", "--rss-specs", "4"]) == 0
    assert default_memory_budget_mib() == before  # its 512 MiB RSS run leaves the process's budget as it was
    out = capsys.readouterr().out
    assert "S3 8B / 8 H100" in out and "goal S3" in out and "RSS under distinct specs" in out
    assert "the cache's share 128 MiB" in out  # the share under the run's 512 MiB budget, not the default's


def test_warm_request_work_quick_counts_a_warm_requests_pieces(capsys):
    """benchmarks/warm_request_work.py --quick: a row of work counts per warm S3 request and the new-GPU-count line;
    the counted functions are solver/problem.py's own again afterwards."""
    from parplan.solver import problem

    before = problem.choice_costs
    assert _load("warm_request_work").main(["--quick", "--requests", "1"]) == 0
    assert problem.choice_costs is before
    out = capsys.readouterr().out
    row = out.split("S3 8B / 8 H100")[1].strip().splitlines()[1].split()
    assert int(row[0]) == 72 and all(int(v) >= 0 for v in row[1:5]) and float(row[5]) > 0
    assert "median CPU ms:" in out and "new GPU count 16:" in out
    # the repeat at the new GPU count builds fewer layer sums than the request there alone (layer_world_key)
    built = {line.split(":")[0].strip(): int(line.split("layer sums built ")[1].split(",")[0])
             for line in out.splitlines() if "layer sums built" in line}
    assert built["repeat at 16"] < built["cold at 16"], built


def test_speed_benchmark_quick_times_a_whole_process(capsys, tmp_path):
    out_file = tmp_path / "speed.txt"
    assert _load("speed").main(["--quick", "--out", str(out_file)]) == 0
    out = capsys.readouterr().out
    assert "8B / 8 H100, 8K" in out and "in-process proven optimum" in out and "OPTIMAL" in out
    assert out_file.read_text().splitlines()[2].startswith("8B / 8 H100, 8K")


def test_replan_simulation_quick_prints_goodput_per_policy(capsys):
    """benchmarks/replan.py --quick: the failure trace replayed under the three policies (issue 43 item 3); replanning
    with the cost never does worse than shrinking DP alone on the same trace."""
    mod = _load("replan")
    assert mod.main(["--quick"]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: float(line.split()[1]) for line in out.splitlines() if line.split()[:1] and
            line.split()[0] in mod.POLICIES}
    assert set(rows) == set(mod.POLICIES) and all(0 < g <= 1 for g in rows.values())
    assert rows["replan-with-cost"] >= rows["shrink-DP-only"] - 1e-9


def test_replan_simulation_spot_trace_interrupts_more_often(capsys):
    """--trace spot interrupts more often than Llama 3's trace on the same job (AWS's >20 % a month against 419 in
    54 days)."""
    mod = _load("replan")
    assert mod.main(["--quick", "--trace", "spot"]) == 0
    spot = capsys.readouterr().out
    assert mod.main(["--quick"]) == 0
    llama3 = capsys.readouterr().out
    count = [int(out.split(" interruptions")[0].split()[-1]) for out in (spot, llama3)]
    assert count[0] > count[1] and "trace spot" in spot


def test_replan_simulation_plots_goodput_over_the_trace(tmp_path):
    """--plot draws the goodput series into a PNG with the plot extra; without it the benchmark says which extra to
    install instead of a traceback."""
    mod = _load("replan")
    png = tmp_path / "goodput.png"
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        with pytest.raises(SystemExit) as err:
            mod.main(["--quick", "--plot", str(png)])
        assert ".[plot]" in str(err.value.code) and not png.exists()
        return
    assert mod.main(["--quick", "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_replan_latency_answers_each_lost_node_with_a_proof(capsys):
    """benchmarks/replan_latency.py --calls 2: a server on 127.0.0.1, the README example losing a node per call; the
    table's lines and each answer proven (no timing is checked: the figures live in benchmarks/results/)."""
    assert _load("replan_latency").main(["--calls", "2"]) == 0
    out = capsys.readouterr().out
    assert "warm (2 calls, another node each): median" in out and "proven (OPTIMAL, gap 0): 2/2" in out


def test_pressured_oracle_answers_the_same_through_the_oracle_and_via_cpsat(capsys, monkeypatch):
    """benchmarks/pressured_oracle.py on 300 layers, 4 stages, with the pooled limit at 0 so that the table takes
    the route the benchmark compares (too large to pool, Σ varies): the oracle's own walk and CP-SAT give the same
    plan and value."""
    import json

    from parplan.solver.oracle import grouped, per_stage, solve
    mod = _load("pressured_oracle")
    monkeypatch.setattr(per_stage, "POOLED_LIMIT", 0)
    monkeypatch.setattr(solve, "per_stage", solve.per_stage)  # --via-cpsat reroutes these two: restored after
    monkeypatch.setattr(grouped, "per_stage", grouped.per_stage)
    out = []
    for via in ([], ["--via-cpsat"]):
        monkeypatch.setattr(sys, "argv", ["pressured_oracle.py", "--layers", "300", "--pp", "4"] + via)
        mod.main()
        out.append(json.loads(capsys.readouterr().out.strip().splitlines()[-1]))
    assert [o["status"] for o in out] == ["OPTIMAL", "OPTIMAL"]
    assert out[0]["value"] == out[1]["value"]
    assert out[0]["stage_layers"] == out[1]["stage_layers"] and out[0]["recompute_layers"] == out[1]["recompute_layers"]


def test_per_framework_workers_benchmark_compares_the_same_reports(capsys, tmp_path):
    """benchmarks/per_framework_workers.py on a small spec: both variants print the same report."""
    import yaml

    spec = tmp_path / "small.yaml"
    spec.write_text(yaml.safe_dump({
        "model": {"name": "m", "num_layers": 8, "hidden_size": 1024, "ffn_hidden_size": 4096,
                  "num_attention_heads": 16, "num_kv_heads": 8, "vocab_size": 32000},
        "training": {"seq_len": 2048, "global_batch_size": 16}, "cluster": {"gpu": "H100-SXM-80GB", "num_gpus": 8}}))
    assert _load("per_framework_workers").main(["--runs", "1", str(spec)]) == 0
    out = capsys.readouterr().out
    assert "one process wall" in out and "workers wall" in out and "same report" in out


def test_band_search_cost_times_both_settings(capsys):
    assert _load("band_search_cost").main(["--batches", "1", "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    assert "memory_band false  median CPU" in out and "memory_band true   median CPU" in out


def test_calibrate_synthetic_recovers_the_held_out_run(capsys, tmp_path):
    out_file = tmp_path / "calibrate_synthetic.txt"
    assert _load("calibrate_synthetic").main(["--out", str(out_file)]) == 0
    held = next(line for line in out_file.read_text().splitlines() if line.startswith("run3 (held out)"))
    assert "with the profile" in held and "move kept: 1 " in out_file.read_text()


def test_plausibility_report_flags_a_case_over_its_ceiling():
    """benchmarks/plausibility.py: one real case (its optimum's MFU and plan) and the report's flags on rows put at
    the ceiling + 5 points +/- 0.5 (issue 38 item 1's rule) and on a case where nothing fits."""
    mod = _load("plausibility")
    ceiling, _ = mod.ceilings()[("H100-SXM-80GB", "bf16")]
    real = mod.case("llama3-8b", "H100-SXM-80GB", "bf16", 8192, 64)
    assert real["status"] == "OPTIMAL" and 20.0 < real["mfu"] < 80.0 and real["plan"].startswith("tp")
    rows = [dict(real, mfu=ceiling + mod.MARGIN_POINTS + 0.5), dict(real, gpu="A100-SXM-80GB", mfu=None, status="INFEASIBLE"),
            dict(real, gpu="H800", mfu=ceiling + mod.MARGIN_POINTS - 0.5)]
    lines = mod.report(rows)
    assert "+0.5" in lines[1] and "nothing fits (INFEASIBLE)" in lines[2] and "+" not in lines[3].split()[5]
    assert "3 cases, 2 with a plan that fits; over the ceiling + 5 points: 1" in lines[-2]
    assert lines[-1].split()[:3] == ["H100-SXM-80GB", "bf16", "1"]
