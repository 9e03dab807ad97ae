"""solver-cli export / import / schema / presets, optimize --export/--emit/--out/--plot and the progress line."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from tests.export_cases import CASES_DIR, load_case
from parplan.client.cli import app
from parplan.library.evaluation import evaluate_spec
from parplan.client.export_cli import SolveProgress
from parplan.costmodel.spec.spec import Spec

ROOT = Path(__file__).parents[2]
EXAMPLE = ROOT / "examples" / "llama3-70b-64xh100.yaml"
SMALL = CASES_DIR / "gpt-1.7b-ddp.yaml"  # 8 GPUs: a small space, solved in well under a second
runner = CliRunner()


def run(*args: str):
    return runner.invoke(app, list(args))


def test_export_from_optimize_json_and_from_a_plan_entry(tmp_path):
    case = CASES_DIR / "mixtral-8x7b-ep.yaml"
    evaluated = run("evaluate", str(case), "--format", "json")
    result_file = tmp_path / "result.json"
    result_file.write_text(evaluated.stdout)
    entry_file = tmp_path / "entry.json"
    entry_file.write_text(json.dumps(json.loads(evaluated.stdout)["plans"][0]))
    outs = []
    for plan_file in (result_file, entry_file):
        r = run("export", str(plan_file), "--spec", str(case), "--to", "torchtitan")
        assert r.exit_code == 0, r.output
        outs.append(r.stdout)
    assert outs[0] == outs[1] and "[parallelism]" in outs[0]
    assert "warning: " in r.stderr  # the mixtral case has torchtitan warnings, on stderr only
    assert "warning" not in r.stdout.split("\n[parallelism]")[1]


def test_export_writes_into_out_dir_and_prints_the_report(tmp_path):
    r = run("evaluate", str(CASES_DIR / "llama3-8b-fsdp.yaml"), "--emit", "slurm", "--out", str(tmp_path))
    assert r.exit_code == 0, r.output
    files = list(tmp_path.iterdir())
    assert len(files) == 1 and files[0].suffix == ".sbatch"
    assert "#SBATCH --nodes=2" in files[0].read_text()
    assert "Plan" in r.stdout or "plan" in r.stdout  # the usual report


@pytest.mark.parametrize("args,message", [
    (["export", "nope.json", "--spec", str(EXAMPLE), "--to", "megatron"], "nope.json: cannot read"),
    (["export", str(EXAMPLE), "--to", "megatron"], "has no 'plan:' section"),
    (["export", str(CASES_DIR / "gpt-1.7b-ddp.yaml")], "give --to"),
    (["export", str(CASES_DIR / "gpt-1.7b-ddp.yaml"), "--to", "nemo"], "Invalid value"),
])
def test_export_errors_are_one_line_exit_2(args, message):
    r = run(*args)
    assert r.exit_code == 2, r.output
    assert message in r.output


def test_export_of_a_plan_for_another_cluster_is_refused(tmp_path):
    plan_file = tmp_path / "plan.json"
    _, plan = load_case("llama3-8b-fsdp")
    plan_file.write_text(json.dumps({"plan": plan.model_dump()}))
    r = run("export", str(plan_file), "--spec", str(EXAMPLE), "--to", "megatron")
    assert r.exit_code == 2 and "cluster.num_gpus" in r.stderr


def test_import_prints_a_spec_that_evaluate_reads(tmp_path):
    case = CASES_DIR / "llama3-8b-fsdp.yaml"
    toml = tmp_path / "tt.toml"
    toml.write_text(run("export", str(case), "--to", "torchtitan").stdout)
    r = run("import", str(toml), "--from", "torchtitan", "--spec", str(case))
    assert r.exit_code == 0, r.output
    reread = tmp_path / "reread.yaml"
    reread.write_text(r.stdout)
    assert run("evaluate", str(reread)).exit_code == 0


def test_schema_is_the_spec_json_schema_with_model_sources():
    r = run("schema")
    assert r.exit_code == 0
    schema = json.loads(r.stdout)
    assert set(Spec.model_json_schema()["properties"]) == set(schema["properties"])
    titles = [alt.get("title") for alt in schema["properties"]["model"]["anyOf"]]
    assert "HFConfigModel" in titles and "PresetModel" in titles
    preset = next(a for a in schema["properties"]["model"]["anyOf"] if a.get("title") == "PresetModel")
    assert "llama3-70b" in preset["properties"]["preset"]["enum"]


def test_presets_lists_every_preset_with_its_source():
    r = run("presets")
    assert r.exit_code == 0 and "llama3.1-405b" in r.stdout and "Dubey" in r.stdout


def test_optimize_plot_needs_pareto():
    r = run("optimize", str(EXAMPLE), "--plot", "x.png")
    assert r.exit_code == 2 and "--pareto" in r.stderr


def test_optimize_pareto_plot_and_marked_table(tmp_path):
    pytest.importorskip("matplotlib", reason="--plot needs the optional 'plot' extra (matplotlib==3.10.7)")
    png = tmp_path / "frontier.png"
    r = run("optimize", str(SMALL), "--pareto", "memory", "--plot", str(png), "--deterministic",
            "--time-limit", "20")
    assert r.exit_code == 0, r.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
    assert "* the chosen plan" in r.stdout  # the chosen plan's row in the frontier table is starred
    assert any(line.lstrip().split(" ")[0].endswith("*") for line in r.stdout.splitlines())


def test_plot_without_matplotlib_is_a_clear_error(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    from parplan.client.export_cli import plot_frontier
    from parplan.library.spec_io import SpecError

    with pytest.raises(SpecError, match="pip install 'parplan\\[plot\\]'"):
        plot_frontier(None, "x.png", None)


def test_progress_line_shows_elapsed_best_bound_and_gap():
    spec, plan = load_case("gpt-1.7b-ddp")
    buffer = io.StringIO()
    status = SolveProgress(enabled=True, console=Console(file=buffer, force_terminal=True, width=120))
    with status:
        assert "no plan yet" in status.line().plain
        status.on_solution(evaluate_spec(spec, plan), 2.0, 1.5)
        status.on_solution(evaluate_spec(spec, plan), 1.6, 1.5)
        line = status.line().plain
    assert "best 1.600 s" in line and "bound 1.500 s" in line and "gap 6.25 %" in line and "solving" in line
    assert SolveProgress(console=Console(file=io.StringIO())).enabled is False  # not a terminal: silent


def test_progress_is_silent_when_piped():
    r = subprocess.run([sys.executable, "-m", "parplan.client.cli", "optimize", str(SMALL), "--deterministic",
                        "--time-limit", "20", "--format", "json"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "solving" not in r.stderr and json.loads(r.stdout)["status"] == "OPTIMAL"


def test_progress_forced_when_piped_prints_plain_lines():
    """--progress with stderr a pipe (as docs/cli.md says it forces it): a plain line per improving plan and a
    last one ending in 'done'; stdout stays the JSON answer."""
    r = subprocess.run([sys.executable, "-m", "parplan.client.cli", "optimize", str(SMALL), "--deterministic",
                        "--time-limit", "20", "--format", "json", "--progress", "--no-per-framework"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = [line for line in r.stderr.splitlines() if line.startswith("solving")]
    assert len(lines) >= 2 and "best" in lines[0] and lines[-1].endswith("done"), r.stderr
    assert json.loads(r.stdout)["status"] == "OPTIMAL"


def test_infeasible_optimize_with_export_writes_no_export(tmp_path):
    """Issue 24.7: `optimize INFEASIBLE.yaml --export megatron > a.sh` wrote the human report into a.sh with exit 0.
    Now stdout stays empty, the explanation goes to stderr, exit 2 (and --out writes no file)."""
    spec = ROOT / "examples" / "infeasible" / "405b-16xh100.yaml"
    r = run("optimize", str(spec), "--export", "megatron")
    assert r.exit_code == 2 and r.stdout == ""
    assert "nothing to export: status INFEASIBLE" in r.stderr and "would fit" in r.stderr
    r = run("optimize", str(spec), "--export", "deepspeed", "--out", str(tmp_path))
    assert r.exit_code == 2 and list(tmp_path.iterdir()) == []
