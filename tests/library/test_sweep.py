"""Capacity sweeps (parplan.library.sweep, issue 22) on the local engine: the spec's errors, the records,
the Pareto set and knees, the store (resume after SIGINT, --report), the library call and the CLI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml

from parplan.library.sweep.points import SweepError, load_sweep
from parplan.library.sweep.records import finish, scaling_curves
from parplan.library.sweep.run import run_sweep
from tests.sweep_cases import TINY_BASE, sweep_24

CLI = [sys.executable, "-c", "from parplan.client.cli import main; main()"]


def _cli(*args, cwd=None, timeout=120):
    return subprocess.run([*CLI, *args], capture_output=True, text=True, cwd=cwd, timeout=timeout)


def _write(tmp_path, data, name="sweep.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)


# ------------------------------------------------------------------------------------ bad sweep specs


@pytest.mark.parametrize("change, words", [
    ({"axes": {"cluster.gpux": ["H100"]}}, ["axes.cluster.gpux", "gpux"]),
    ({"axes": {"cluster.num_gpus": []}}, ["axes.cluster.num_gpus", "empty"]),
    ({"axes": {"cluster.num_gpus": [8, 12]}}, ["axes.cluster.num_gpus", "value 12"]),
    ({"axes": {"cluster.gpu": ["H100-SXM-80GB", "X100"]}}, ["axes.cluster.gpu", "'X100'"]),
    ({"axes": {"model": ["llama3-8b", "no-such-model"]}}, ["axes.model", "'no-such-model'"]),
    ({"prices": {"Z900": 2.0}}, ["prices.Z900", "unknown GPU"]),
    ({"budget": {"tokens": 1.0, "steps": 3}}, ["budget", "exactly one"]),
    ({"axez": {}}, ["axez"]),
])
def test_bad_sweep_specs_exit_2_with_one_line(tmp_path, change, words):
    data = sweep_24(**{k: v for k, v in change.items()})
    if "axez" in change:
        data["axez"] = {}
    proc = _cli("sweep", _write(tmp_path, data), "--out", str(tmp_path / "out"))
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    for word in words:
        assert word in lines[0]
    assert "Traceback" not in proc.stderr


def test_missing_ray_names_the_extra(tmp_path):
    # a Python that cannot import ray: the engine says which extra to install
    code = ("import sys; sys.modules['ray'] = None\n"
            "from parplan.client.cli import main; main()")
    data = sweep_24(axes={"cluster.num_gpus": [8]})
    proc = subprocess.run([sys.executable, "-c", code, "sweep", _write(tmp_path, data), "--out",
                           str(tmp_path / "o"), "--engine", "ray"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: --engine ray: Ray is not installed (pip install 'parplan[ray]')"


def test_import_parplan_never_imports_ray():
    code = ("import sys, parplan, parplan.library.sweep, parplan.library.sweep.run; parplan.sweep;"
            "print('ray' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip() == "False"


# --------------------------------------------------------------------------------- records, figures


def test_records_and_derived_figures(tmp_path):
    sweep = load_sweep(sweep_24(axes={"cluster.gpu": ["H100-SXM-80GB", "A100-SXM-80GB"],
                                      "cluster.num_gpus": [8, 16, 32]}, energy={"utilisation": 0.5, "pue": 1.2},
                                deadline_h=100.0))
    records, summary, counts = run_sweep(sweep, str(tmp_path / "out"), jobs=2)
    assert counts == {"points": 6, "skipped": 0, "solved": 6, "failed": 0}
    assert [r["index"] for r in records] == list(range(6))
    for r in records:
        assert r["status"] == "OPTIMAL" and len(r["plans"]) == 1
        assert set(r["plans"][0]) == {"plan", "metrics"}
        m = r["plans"][0]["metrics"]
        assert r["tokens_per_step"] == r["seq_len"] * r["global_batch_size"]
        assert r["steps"] == -(-10**10 // r["tokens_per_step"])
        assert r["time_to_train_h"] == pytest.approx(r["steps"] * m["step_time_s"] / 3600)
        assert r["gpu_hours"] == pytest.approx(r["time_to_train_h"] * r["num_gpus"])
        price = 2.5 if r["gpu"] == "H100-SXM-80GB" else 1.5
        power = 700 if r["gpu"] == "H100-SXM-80GB" else 400
        assert r["cost_usd"] == pytest.approx(r["gpu_hours"] * price)
        assert r["energy_kwh"] == pytest.approx(r["gpu_hours"] * power / 1000 * 0.5 * 1.2)
        assert r["meets_deadline"] == (r["time_to_train_h"] <= 100.0)
    assert summary["pareto_axis"] == "cost_usd"
    import parplan

    assert summary["parplan_version"] == parplan.__version__  # summary.json names the version that solved it
    front = [r for r in records if r["pareto"]]
    assert front and all(not any(o["cost_usd"] <= r["cost_usd"] and o["time_to_train_h"] < r["time_to_train_h"]
                                 for o in records) for r in front)
    assert {(c["model"], c["gpu"]) for c in summary["curves"]} == {("tiny-1b", "H100-SXM-80GB"),
                                                                   ("tiny-1b", "A100-SXM-80GB")}
    out = tmp_path / "out"
    lines = (out / "points.jsonl").read_text().splitlines()
    assert [json.loads(line)["axes"] for line in lines] == [p.axes for p in sweep.points]
    assert (out / "points.csv").read_text().count("\n") == 7
    assert len(os.listdir(out / "store")) == 6


def test_knee_rule():
    def rec(n, tps):
        return {"index": n, "axes": {"cluster.num_gpus": n}, "model": "m", "gpu": "g", "num_gpus": n,
                "tokens_per_s": tps, "knee": False, "scaling_efficiency": None}

    # marginal efficiencies (per base GPU = 100): 8->16: 0.9, 16->32: 0.6, 32->64: 0.3 -> knee at 32
    records = [rec(8, 800), rec(16, 1520), rec(32, 2480), rec(64, 3440)]
    (curve,) = scaling_curves(records)
    assert curve["knee_gpus"] == 32 and curve["knee_reached"]
    assert [r["knee"] for r in records] == [False, False, True, False]
    assert records[3]["scaling_efficiency"] == pytest.approx(3440 / 64 / 100)
    records = [rec(8, 800), rec(16, 1600)]  # perfect scaling: no knee inside the range
    (curve,) = scaling_curves(records)
    assert curve["knee_gpus"] == 16 and not curve["knee_reached"]
    assert not any(r["knee"] for r in records)  # a lower bound, not a knee


def test_infeasible_point_is_a_record_with_its_explanation(tmp_path):
    data = sweep_24(axes={"cluster.gpu": ["H100-SXM-80GB", "A100-SXM-40GB"]},
                    base={**TINY_BASE, "model": {"preset": "llama3-70b"},
                          "cluster": {"gpu": "H100-SXM-80GB", "num_gpus": 2, "gpus_per_node": 2}},
                    solver={"time_limit_s": 10.0, "deterministic": True})
    records, summary, counts = run_sweep(load_sweep(data), None, jobs=2)
    assert [r["status"] for r in records] == ["INFEASIBLE", "INFEASIBLE"]
    assert "memory" in records[1]["explanation"]["summary"]
    assert records[1]["plans"] == [] and records[1]["time_to_train_h"] is None


def test_library_sweep_and_frame(tmp_path):
    import parplan

    records = parplan.sweep(TINY_BASE, {"cluster.num_gpus": [8, 16]}, budget={"steps": 100}, deterministic=True,
                            time_limit_s=20, jobs=1, top_k=2)
    assert [r["num_gpus"] for r in records] == [8, 16]
    assert all(len(r["plans"]) == 2 and r["steps"] == 100 for r in records)
    pytest.importorskip("pandas")
    frame = parplan.sweep(TINY_BASE, points=[{"cluster.num_gpus": 8}], jobs=1, frame=True, time_limit_s=20)
    assert list(frame["num_gpus"]) == [8]


def test_library_sweep_from_a_plain_script(tmp_path):
    """A script with no ``__main__`` guard (as docs/sweeps.md shows parplan.sweep) gets every point solved, and its
    top level runs once: the local workers never re-run the caller's main module (issue 42)."""
    script = tmp_path / "plain.py"
    runs = tmp_path / "runs.txt"
    script.write_text(
        "import json, parplan\n"
        f"open({str(runs)!r}, 'a').write('ran\\n')\n"
        f"records = parplan.sweep({TINY_BASE!r}, {{'cluster.num_gpus': [8, 16]}}, jobs=2, time_limit_s=20)\n"
        "print(json.dumps([[r['status'], r.get('error')] for r in records]))\n")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=180,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == [["OPTIMAL", None], ["OPTIMAL", None]]
    assert runs.read_text() == "ran\n"


def test_a_point_whose_worker_dies_twice_is_an_error_record(monkeypatch):
    """The retry is once: a point whose worker dies each time (here no worker can start) becomes an error
    record naming the death, and the sweep ends."""
    from parplan.library.sweep import engines, pool

    tasks = [(0, {}), (1, {"cluster": {**TINY_BASE["cluster"], "num_gpus": 16}})]
    settings = {"time_limit_s": 20.0, "workers": 1, "deterministic": True, "seed": 1, "method": "cpsat",
                "top_k": 1}
    outs = {}
    monkeypatch.setattr(pool, "WORKER_MODULE", "parplan.library.sweep.no_such_worker")
    engines.run_local(tasks, dict(TINY_BASE), settings, lambda i, out: outs.__setitem__(i, out), jobs=2)
    assert sorted(outs) == [0, 1]
    assert all(out["error"].startswith(pool.DIED) for out in outs.values())


# ------------------------------------------------------------------------------ store and resume


@pytest.fixture(scope="module")
def clean_24(tmp_path_factory) -> bytes:
    """points.jsonl of sweep_24() run once, uninterrupted, in-process on two workers: the records the interrupted
    and the killed sweeps below must reproduce byte for byte (one sweep for the module, not one per test)."""
    out = tmp_path_factory.mktemp("clean")
    run_sweep(load_sweep(sweep_24()), str(out), jobs=2)
    return (out / "points.jsonl").read_bytes()


def test_resume_after_sigint_redoes_nothing_finished(tmp_path, clean_24):
    path = _write(tmp_path, sweep_24())
    out = tmp_path / "out"
    proc = subprocess.Popen([*CLI, "sweep", path, "--out", str(out), "--jobs", "1", "--no-progress"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    store = out / "store"
    deadline = time.time() + 90
    while time.time() < deadline and (not store.exists() or len([n for n in os.listdir(store)
                                                                   if n.endswith(".json")]) < 3):
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1].startswith("error: interrupted: every finished point is in")
    done = {n: os.stat(store / n).st_mtime_ns for n in os.listdir(store) if n.endswith(".json")}
    assert 3 <= len(done) < 24
    proc = _cli("sweep", path, "--out", str(out), "--jobs", "2", "--resume", timeout=180)
    assert proc.returncode == 0, proc.stderr
    assert f"{24 - len(done)} solved (0 failed), {len(done)} already in the store" in proc.stderr
    after = {n: os.stat(store / n).st_mtime_ns for n in os.listdir(store)}
    assert len(after) == 24 and all(after[n] == t for n, t in done.items())
    # the whole sweep from scratch gives the same records
    assert (out / "points.jsonl").read_bytes() == clean_24
    # --report rebuilds the outputs from the folder alone
    os.remove(out / "points.jsonl")
    os.remove(out / "points.csv")
    proc = _cli("sweep", "--report", str(out))
    assert proc.returncode == 0, proc.stderr
    assert (out / "points.jsonl").read_bytes() == clean_24
    assert "tiny-1b" not in proc.stdout or "OPTIMAL" in proc.stdout
    assert "OPTIMAL" in proc.stdout


def test_progress_forced_when_piped_prints_a_line_per_point(tmp_path):
    path = _write(tmp_path, sweep_24(axes={"cluster.num_gpus": [8, 16]}))
    proc = _cli("sweep", path, "--out", str(tmp_path / "out"), "--jobs", "1", "--progress")
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("sweep ")]
    assert [line.split()[1] for line in lines] == ["1/2", "2/2"] and "failed 0" in lines[-1], proc.stderr


def test_report_of_a_folder_without_a_sweep(tmp_path):
    proc = _cli("sweep", "--report", str(tmp_path))
    assert proc.returncode == 2 and "no sweep.json" in proc.stderr


def test_kuberay_manifest_runs_the_pinned_ray():
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    pin = re.search(r'ray = \["ray==([0-9.]+)"\]', (root / "pyproject.toml").read_text()).group(1)
    cluster = yaml.safe_load((root / "deploy" / "kuberay" / "raycluster.yaml").read_text())
    assert cluster["kind"] == "RayCluster" and cluster["apiVersion"] == "ray.io/v1"
    assert cluster["spec"]["rayVersion"] == pin
    assert f"FROM rayproject/ray:{pin}-py311" in (root / "deploy" / "kuberay" / "Dockerfile").read_text()
    images = {c["image"] for g in [cluster["spec"]["headGroupSpec"], *cluster["spec"]["workerGroupSpecs"]]
              for c in g["template"]["spec"]["containers"]}
    assert images == {"parplan-ray:0.1.0"}


def test_local_worker_killed_mid_sweep_loses_no_point(tmp_path, clean_24):
    """A worker that dies is replaced and its point run again on another (library/sweep/pool.py). The kill happens
    when the first point lands (23 still to solve), so it does not depend on how fast the
    machine solves."""
    import psutil

    killed = []

    def kill_a_worker(record):
        if killed:
            return
        workers = [p for p in psutil.Process().children(recursive=True)
                   if "parplan.library.sweep.worker" in p.cmdline()]
        workers[0].kill()
        killed.append(workers[0].pid)

    records, _, counts = run_sweep(load_sweep(sweep_24()), str(tmp_path / "killed"), jobs=2,
                                   on_point=kill_a_worker)
    assert killed
    assert counts["failed"] == 0 and all(r["status"] == "OPTIMAL" for r in records)
    assert (tmp_path / "killed" / "points.jsonl").read_bytes() == clean_24


def test_table_of_a_large_sweep_shows_the_marked_points_first():
    from rich.console import Console

    from parplan.library.sweep.report import render_table

    def rec(i):
        return {"index": i, "axes": {"cluster.num_gpus": i}, "status": "OPTIMAL", "plans": [], "error": None,
                "explanation": None, "step_time_s": None, "tokens_per_s": None, "mfu": None, "time_to_train_h": None,
                "gpu_hours": None, "cost_usd": None, "energy_kwh": None, "scaling_efficiency": None,
                "pareto": i == 150, "knee": i == 99}

    console = Console(width=250, record=True)
    render_table([rec(i) for i in range(200)], {"pareto_axis": "gpu_hours"}, console, limit=5)
    text = console.export_text()
    assert "5 of 200 points shown" in text
    rows = [line.split()[0] for line in text.splitlines() if line.strip()[:1].isdigit() and "OPTIMAL" in line]
    assert rows == ["0", "1", "2", "99", "150"]
