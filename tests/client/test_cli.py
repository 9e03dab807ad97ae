"""solver-cli: evaluate (table and CONTRACT JSON), validate, knobs, gpus, and one-line errors with exit 2."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from parplan.client.cli import app
from parplan.client.report import PLAN_KEYS
from parplan.costmodel.evaluation.ledger import BREAKDOWN_KEYS

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
DEMO = EXAMPLES / "llama3-70b-64xh100-evaluate.yaml"
LLAMA = EXAMPLES / "llama3-70b-64xh100.yaml"
SEED = EXAMPLES / "seed-textbook-70b-8k.yaml"
DEEPSEEK = EXAMPLES / "deepseek-v3-2048xh800.yaml"
TORCHTITAN = EXAMPLES / "llama31-405b-512xh100-torchtitan-evaluate.yaml"

runner = CliRunner()


def run(*args: str, input: str | None = None):
    return runner.invoke(app, list(args), input=input)


def load(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text())


def write(tmp_path: Path, data: Any, name: str = "spec.yaml") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
    return path


def assert_bad_input(result, *fragments: str) -> str:
    """Exit 2, nothing on stdout, exactly one stderr line 'error: ...' containing every fragment."""
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr, result.exception)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    line = lines[0]
    assert line.startswith("error: "), line
    for fragment in fragments:
        assert fragment in line, (fragment, line)
    assert result.stdout == ""
    return line


# ------------------------------------------------------------------------------------- examples


def test_examples_match_shared_specs():
    shared = ROOT.parent / "shared" / "spec"  # the project's seed documents, beside the repository
    if not shared.is_dir():
        pytest.skip(f"needs the seed documents beside the repository ({shared}); a clone has none")
    # deepseek-v3-2048xh800.yaml departs from its seed copy on purpose (issue 19 item 7): the example has MLA, MTP,
    # node-limited routing, the flex dispatcher and FP8; the seed still approximates MLA as 128-head MHA in BF16
    for name in ("llama3-70b-64xh100.yaml", "seed-textbook-70b-8k.yaml"):
        assert (EXAMPLES / name).read_text() == (shared / name).read_text()
    seed = yaml.safe_load((shared / "deepseek-v3-2048xh800.yaml").read_text())
    ours = yaml.safe_load((EXAMPLES / "deepseek-v3-2048xh800.yaml").read_text())
    assert {k: v for k, v in ours["model"].items() if k not in ("mla", "num_mtp_layers", "moe")} == \
        {k: v for k, v in seed["model"].items() if k not in ("num_kv_heads", "moe")}
    assert {k: v for k, v in ours["model"]["moe"].items() if k not in ("max_nodes_per_token", "dispatcher")} == \
        seed["model"]["moe"]
    assert ours["cluster"] == seed["cluster"] and ours["training"] == {**seed["training"], "precision": "fp8"}


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_validate_examples(path: Path):
    result = run("validate", str(path))
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_evaluate_demo_table():
    result = run("evaluate", str(DEMO))
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    for fragment in ("llama3-70b on 64 × H100-SXM-80GB", "status: FEASIBLE", "Plan", "tp · cp · pp · dp",
                     "4 · 2 · 4 · 2", "interleaved · 2", "recompute_layers [2, 2, 2, 2]", "Metrics",
                     "step time (s)", "MFU (%)", "tokens/s", "peak memory (GiB)", "usable memory (GiB)",
                     "Step time breakdown", "share (%)", "Per-stage ledger", "in-flight", "total", "(GiB)"):
        assert fragment in out, fragment
    for key in BREAKDOWN_KEYS:
        assert f"\n {key} " in out, key
    assert "Violations" not in out
    assert result.stderr == ""


def test_evaluate_demo_json_contract():
    result = run("evaluate", str(DEMO), "--format", "json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert set(data) >= {"status", "plans", "pareto"}
    import parplan

    assert data["parplan_version"] == parplan.__version__  # every answer names the version that made it
    assert data["status"] == "FEASIBLE"
    assert data["pareto"] == []
    assert len(data["plans"]) == 1
    entry = data["plans"][0]
    plan, metrics = entry["plan"], entry["metrics"]
    assert list(plan) == list(PLAN_KEYS)
    assert plan == {"tp": 4, "cp": 2, "pp": 4, "dp": 2, "num_gpus": 64, "ep": 1, "etp": 1, "micro_batch_size": 1,
                    "num_microbatches": 256, "vpp": 2, "schedule": "interleaved", "stage_layers": [20, 20, 20, 20],
                    "recompute": "full", "recompute_layers": [2, 2, 2, 2], "zero_stage": 1,
                    "sequence_parallel": True}
    for key in ("step_time_s", "mfu", "tokens_per_s", "peak_memory_gib", "stage_memory_gib", "breakdown_s"):
        assert key in metrics, key
    assert 0 < metrics["mfu"] < 1
    assert len(metrics["stage_memory_gib"]) == plan["pp"]
    assert metrics["peak_memory_gib"] == max(metrics["stage_memory_gib"])
    assert list(metrics["breakdown_s"]) == list(BREAKDOWN_KEYS)
    assert sum(metrics["breakdown_s"].values()) == pytest.approx(metrics["step_time_s"], rel=1e-9)
    assert metrics["tokens_per_s"] == pytest.approx(512 * 8192 / metrics["step_time_s"])
    assert metrics["fits"] is True and metrics["peak_memory_gib"] <= metrics["usable_memory_gib"]
    assert len(entry["stages"]) == plan["pp"]
    assert [s["layers"] for s in entry["stages"]] == plan["stage_layers"]
    assert entry["violations"] == []


def test_evaluate_torchtitan_example():
    """PyTorch runtime knobs in a spec: every stage holds pipeline buffers, the ledger still fits 80 columns
    (multi-second micro-batches), and the peak is the one the example's comment cites (72.7 GiB published)."""
    table = run("evaluate", str(TORCHTITAN))
    assert table.exit_code == 0, table.stderr
    ledger = table.stdout[table.stdout.index("Per-stage ledger"):]
    assert "total" in ledger and "…" not in ledger
    data = json.loads(run("evaluate", str(TORCHTITAN), "-f", "json").stdout)
    entry = data["plans"][0]
    assert data["status"] == "FEASIBLE"
    assert all(s["pipeline_buffers_gib"] > 0 for s in entry["stages"])
    assert entry["stages"][-1]["pipeline_buffers_gib"] > entry["stages"][0]["pipeline_buffers_gib"]  # kept outputs
    assert entry["metrics"]["peak_memory_gib"] == pytest.approx(72.7, rel=0.10)


@pytest.mark.parametrize("source", [LLAMA, SEED], ids=lambda p: p.name)
def test_evaluate_examples_default_plan(tmp_path: Path, source: Path):
    """`plan: {}` evaluates all defaults (tp=cp=pp=1): infeasible on memory, but a valid report."""
    path = write(tmp_path, mutated(source, ("plan", {})))
    table = run("evaluate", str(path))
    assert table.exit_code == 0, table.stderr
    assert "INFEASIBLE" in table.stdout and "Violations" in table.stdout
    result = run("evaluate", str(path), "-f", "json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["status"] == "INFEASIBLE"
    entry = data["plans"][0]
    assert entry["plan"]["tp"] == entry["plan"]["pp"] == 1 and entry["plan"]["dp"] == 64
    assert 0 < entry["metrics"]["mfu"] < 1
    assert len(entry["metrics"]["stage_memory_gib"]) == 1
    assert any("GiB" in v for v in entry["violations"])


def test_evaluate_deepseek_default_plan_is_a_plan_error(tmp_path: Path):
    # dp = 2048 does not divide the global batch of 15360 sequences
    path = write(tmp_path, mutated(DEEPSEEK, ("plan", {})))
    assert_bad_input(run("evaluate", str(path)), "training.global_batch_size", "dp")


def test_seed_textbook_plan_tp4_cp2_pp2(tmp_path: Path):
    """Seed 003's table: TP=4 CP=2 PP=2 DP=4 at 53.7 % MFU and about 66 GiB per GPU."""
    spec = load(SEED)
    spec["plan"] = {"tp": 4, "cp": 2, "pp": 2}
    result = run("evaluate", str(write(tmp_path, spec)), "--format", "json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    metrics = data["plans"][0]["metrics"]
    assert data["plans"][0]["plan"]["dp"] == 4
    assert metrics["mfu"] == pytest.approx(0.537, abs=0.003)
    assert metrics["peak_memory_gib"] == pytest.approx(66, abs=1.0)
    assert len(metrics["stage_memory_gib"]) == 2
    assert data["status"] == "FEASIBLE"


def test_evaluate_reads_stdin():
    result = run("evaluate", "-", "-f", "json", input=DEMO.read_text())
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["plans"][0]["plan"]["pp"] == 4


def test_knobs_and_gpus():
    knobs = run("knobs")
    assert knobs.exit_code == 0, knobs.stderr
    for fragment in ("matmul_efficiency", "textbook", "activation_sbh_coefficient", "34"):
        assert fragment in knobs.stdout
    gpus = run("gpus")
    assert gpus.exit_code == 0, gpus.stderr
    for fragment in ("H100-SXM-80GB", "MI300X", "GB200-NVL72", "Sources", "datasheet", "79.65", "989"):
        assert fragment in gpus.stdout


def test_version():
    import parplan

    result = run("--version")
    assert result.exit_code == 0 and result.stdout.strip() == f"solver-cli (parplan) {parplan.__version__}"


def test_shell_completion():
    """typer's completion: --show-completion prints the script, and the script's protocol completes commands
    and options (the console script's name, solver-cli, names the variable: _SOLVER_CLI_COMPLETE)."""
    main = [sys.executable, "-c", "from parplan.client.cli import main; main()"]
    # run from bash, as a user does: typer names the shell by the process's parents (shellingham), and a test
    # process started outside a shell (a detached job) has none above it
    script = subprocess.run(["bash", "-c", '"$@"; exit $?', "bash", *main, "--show-completion"], capture_output=True,
                            text=True, timeout=60)
    assert script.returncode == 0 and "_SOLVER_CLI_COMPLETE=complete_bash" in script.stdout, script.stderr

    def complete(words: str) -> list[str]:
        env = {**os.environ, "_SOLVER_CLI_COMPLETE": "complete_bash", "COMP_WORDS": words,
               "COMP_CWORD": str(len(words.split()) - 1)}
        proc = subprocess.run(main, capture_output=True, text=True, timeout=60, env=env)
        return proc.stdout.split()

    assert complete("solver-cli opt") == ["optimize"]
    assert complete("solver-cli optimize --for") == ["--format"]


def test_usage_errors_exit_2():
    assert runner.invoke(app, []).exit_code == 2
    assert run("evaluate").exit_code == 2
    assert run("evaluate", str(DEMO), "--format", "xml").exit_code == 2
    assert run("no-such-command").exit_code == 2


def test_rank_by_option(tmp_path: Path):
    """``--rank-by upper`` sets search.rank_by (the answer's band_source says it); another value is exit 2."""
    spec = tmp_path / "small.yaml"
    spec.write_text(yaml.safe_dump({"model": {"preset": "llama3-8b"}, "cluster": {"gpu": "H100-SXM-80GB", "num_gpus": 8},
                                    "training": {"seq_len": 8192, "global_batch_size": 64, "precision": "bf16"}}))
    res = run("optimize", str(spec), "--top", "3", "--deterministic", "--no-per-framework", "--format", "json",
              "--rank-by", "upper")
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["band_source"]["rank_by"] == "upper" and all("band" in e for e in data["plans"])
    bad = run("optimize", str(spec), "--rank-by", "best")
    assert bad.exit_code == 2 and "--rank-by" in bad.output


def test_console_script_one_line_error(tmp_path: Path):
    """The installed entry point (main()) exits 2 with one stderr line and no traceback."""
    proc = subprocess.run([sys.executable, "-c", "from parplan.client.cli import main; main()", "evaluate",
                           str(tmp_path / "missing.yaml")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.splitlines() == [f"error: {tmp_path / 'missing.yaml'}: file not found"]


# -------------------------------------------------------------------------------- bad input


def mutated(path: Path, *edits: tuple[str, Any]) -> dict[str, Any]:
    """Apply ('a.b.c', value) edits; value DELETE removes the key."""
    data = copy.deepcopy(load(path))
    for dotted, value in edits:
        *parents, last = dotted.split(".")
        node = data
        for key in parents:
            node = node.setdefault(key, {})
        if value is DELETE:
            del node[last]
        else:
            node[last] = value
    return data


DELETE = object()

BAD_SPECS = {
    "missing-field": ([("training.seq_len", DELETE)], ("training", "missing required field", "seq_len")),
    "missing-section": ([("cluster", DELETE)], ("missing required field", "cluster")),
    "negative-layers": ([("model.num_layers", -80)], ("model.num_layers", "greater than 0")),
    "zero-layers": ([("model.num_layers", 0)], ("model.num_layers", "greater than 0")),
    "zero-gpus": ([("cluster.num_gpus", 0)], ("cluster.num_gpus", "greater than 0")),
    "negative-gpus": ([("cluster.num_gpus", -64)], ("cluster.num_gpus",)),
    "zero-batch": ([("training.global_batch_size", 0)], ("training.global_batch_size",)),
    "negative-seq": ([("training.seq_len", -1)], ("training.seq_len",)),
    "zero-hidden": ([("model.hidden_size", 0)], ("model.hidden_size",)),
    "string-size": ([("model.hidden_size", "8192")], ("model.hidden_size", "valid integer")),
    "float-size": ([("model.num_layers", 80.5)], ("model.num_layers", "valid integer")),
    "heads-not-divisible": ([("model.num_kv_heads", 7)], ("model", "num_attention_heads (64)",
                                                          "divisible by num_kv_heads (7)")),
    "hidden-not-divisible": ([("model.hidden_size", 8193)], ("model", "hidden_size (8193)")),
    "unknown-gpu": ([("cluster.gpu", "H900")], ("cluster.gpu", "unknown GPU 'H900'", "known:", "H100-SXM-80GB")),
    "unknown-top-key": ([("modle", {"x": 1})], ("modle", "unknown key")),
    "unknown-nested-key": ([("model.num_layer", 80)], ("model.num_layer", "unknown key", "num_layers")),
    "unknown-assumption": ([("assumptions.matmul_eficiency", 0.5)], ("assumptions.matmul_eficiency",
                                                                     "unknown key", "matmul_efficiency")),
    "unknown-preset": ([("assumptions.preset", "fancy")], ("assumptions.preset",)),
    "bad-knob-value": ([("assumptions.matmul_efficiency", 2.0)], ("assumptions.matmul_efficiency",)),
    "unknown-plan-key": ([("plan.tensor_parallel", 4)], ("plan.tensor_parallel", "unknown key")),
    "bad-schedule": ([("plan.schedule", "gpipe")], ("plan.schedule", "1f1b")),
    "bad-precision": ([("training.precision", "fp16")], ("training.precision",)),
    "fp8-on-a100": ([("cluster.gpu", "A100"), ("training.precision", "fp8")], ("training.precision", "FP8")),
    "infinite-memory": ([("cluster.memory_gib", float("inf"))], ("cluster.memory_gib", "finite")),
    "huge-gpus": ([("cluster.num_gpus", 10**18)], ("cluster.num_gpus", "maximum")),
    "huge-int": ([("model.hidden_size", 10**40)], ("model.hidden_size", "out of range")),
    "plan-not-dividing": ([("plan", {"tp": 8, "cp": 2, "pp": 3})], ("tp·cp·pp = 48", "cluster.num_gpus = 64")),
    "plan-dp-mismatch": ([("plan", {"tp": 8, "pp": 2, "dp": 8})], ("tp·cp·pp·dp = 128", "cluster.num_gpus = 64")),
    "plan-too-many-stages": ([("cluster.num_gpus", 128), ("plan", {"pp": 128})], ("plan.pp", "model.num_layers")),
    "plan-stage-layers": ([("plan", {"pp": 2, "stage_layers": [40, 41]})], ("stage_layers", "num_layers")),
    "plan-recompute-layers": ([("plan", {"pp": 2, "recompute": "full", "recompute_layers": [50, 0]})],
                              ("recompute_layers[0]",)),
    "plan-negative-tp": ([("plan", {"tp": -4})], ("plan.tp", "greater than 0")),
    "plan-not-a-mapping": ([("plan", [4, 2, 2])], ("plan",)),
    "section-not-a-mapping": ([("training", "8k")], ("training",)),
    "min-gpus-without-target": ([("objective", "min_gpus")], ("min_gpus", "target")),
}


@pytest.mark.parametrize("name", list(BAD_SPECS))
@pytest.mark.parametrize("command", ["evaluate", "validate"])
def test_bad_specs_exit_2_with_one_line(tmp_path: Path, name: str, command: str):
    edits, fragments = BAD_SPECS[name]
    path = write(tmp_path, mutated(LLAMA, *edits))
    assert_bad_input(run(command, str(path)), *fragments)


BAD_TEXTS = {
    "malformed-yaml": ("model:\n  name: x\n    num_layers: 3\n", ("spec.yaml", "malformed YAML", "line 3 column")),
    "unclosed-flow": ("model: [1, 2\n", ("spec.yaml", "malformed YAML", "line")),
    "tab-indent": ("model:\n\tname: x\n", ("spec.yaml", "malformed YAML", "line 2")),
    "duplicate-key": ("model:\n  num_layers: 1\n  num_layers: 2\n", ("duplicate key 'num_layers'", "line 3")),
    "empty-file": ("", ("spec.yaml", "empty")),
    "only-comments": ("# nothing here\n", ("spec.yaml", "empty")),
    "whitespace": ("  \n\n\t\n", ("spec.yaml", "empty")),
    "top-level-list": ("- model\n- training\n", ("spec.yaml", "mapping", "list")),
    "top-level-scalar": ("42\n", ("spec.yaml", "mapping", "int")),
    "nul-byte": ("model: x\x00\n", ("spec.yaml", "malformed YAML", "unacceptable character")),
    "python-tag": ("model: !!python/object:os.system ls\n", ("spec.yaml", "malformed YAML")),
    "undefined-alias": ("model: *nope\n", ("spec.yaml", "undefined alias")),
}


@pytest.mark.parametrize("name", list(BAD_TEXTS))
def test_bad_texts_exit_2_with_one_line(tmp_path: Path, name: str):
    text, fragments = BAD_TEXTS[name]
    path = write(tmp_path, text)
    for command in ("evaluate", "validate"):
        assert_bad_input(run(command, str(path)), *fragments)


def test_non_string_key(tmp_path: Path):
    text = LLAMA.read_text() + "1: 2\n"
    assert_bad_input(run("validate", str(write(tmp_path, text))), "key 1 must be a string")


def test_not_utf8(tmp_path: Path):
    path = tmp_path / "spec.yaml"
    path.write_bytes(b"model:\n  name: \xff\xfe\n")
    assert_bad_input(run("validate", str(path)), "spec.yaml", "UTF-8")


def test_nonexistent_file_and_directory(tmp_path: Path):
    assert_bad_input(run("evaluate", str(tmp_path / "nope.yaml")), "nope.yaml", "file not found")
    assert_bad_input(run("validate", str(tmp_path / "nope.yaml")), "nope.yaml", "file not found")
    assert_bad_input(run("evaluate", str(tmp_path)), "directory")


def test_several_errors_stay_on_one_line(tmp_path: Path):
    spec = mutated(LLAMA, ("model.num_layers", -1), ("model.hidden_size", "x"), ("cluster.num_gpus", 0),
                   ("training.seq_len", []), ("foo", 1))
    line = assert_bad_input(run("validate", str(write(tmp_path, spec))), "model.num_layers", "; ", "more")
    assert "\n" not in line


def test_multiline_key_stays_on_one_line(tmp_path: Path):
    text = LLAMA.read_text() + '"bad\\nkey\\u2028here": 1\n'
    assert_bad_input(run("validate", str(write(tmp_path, text))), "unknown key")


@pytest.mark.parametrize("command", [["presets"], ["validate", str(ROOT / "examples" / "llama3-70b-64xh100.yaml")]])
def test_a_closed_stdout_is_a_quiet_exit(command):
    """``solver-cli presets | head -1``: the reader closes the pipe; the CLI exits 141 (128 + SIGPIPE) without a
    message, not "internal error (BrokenPipeError)". The pipe's read end is closed before the command starts, so
    its first write fails (deterministic, unlike a real ``head``)."""
    import os

    read, write = os.pipe()
    os.close(read)
    try:
        run = subprocess.run([sys.executable, "-m", "parplan.client.cli", *command], stdout=write,
                             stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write)
    assert run.returncode == 141, run.stderr
    assert run.stderr == ""
