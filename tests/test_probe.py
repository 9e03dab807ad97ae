"""``python -m parplan.probe`` (src/parplan/probe.py): its CPU path end to end (tiny shapes, two gloo ranks), its
output read by ``solver-cli calibrate``; the GEMM shapes it measures worked by hand. Its GPU path (NCCL, CUDA
timing) is not run here: no GPU in CI."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

pytest.importorskip("torch")


def test_gemm_shapes_are_a_layers_linear_layers_split_by_tp():
    from parplan.probe import gemm_shapes

    config = {"layers": [(64, 128, 4, 2)], "tokens": [32], "tp": [1, 2]}
    # QKV: hidden + 2·hidden·kv/heads = 64 + 64 = 128 columns; MLP up+gate 2·128 = 256; column-parallel split N,
    # row-parallel (attention output, MLP down) split K
    # TP 1: (32, 64, 128) (32, 64, 64) (32, 64, 256) (32, 128, 64); TP 2: (32, 64, 64) (32, 32, 64) (32, 64, 128)
    # (32, 64, 64); each shape once
    assert gemm_shapes(config) == [(32, 32, 64), (32, 64, 64), (32, 64, 128), (32, 64, 256), (32, 128, 64)]


def test_the_probe_runs_on_cpu_and_calibrate_reads_its_output(tmp_path):
    out = tmp_path / "probe.yaml"
    run = subprocess.run([sys.executable, "-m", "parplan.probe", "--out", str(out), "--config", "tiny", "--gpu", "H100",
                          "--ranks", "2", "--iters", "1"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    doc = yaml.safe_load(out.read_text())
    assert doc["kind"] == "parplan-probe" and doc["device"] == {**doc["device"], "name": "cpu", "gpu": "H100-SXM-80GB"}
    assert doc["gemm"] and doc["attention"] and doc["hbm"]["gbps"] > 0 and doc["peak_tflops"] > 0
    assert {r["op"] for r in doc["collectives"]} == {"all_reduce", "all_gather"}
    assert all(r["ranks"] == 2 and r["busbw_gbps"] > 0 for r in doc["collectives"])
    profile = tmp_path / "profile.yaml"
    cal = subprocess.run([sys.executable, "-m", "parplan.client.cli", "calibrate", str(out), "--out", str(profile)],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert cal.returncode == 0, cal.stderr[-2000:]
    written = yaml.safe_load(profile.read_text())
    assert written["gpu"] == "H100-SXM-80GB" and written["sources"][0]["kind"] == "probe"
    assert {"gemm", "attention", "hbm", "all_reduce busbw"} <= {r["kind"] for r in written["fit"]["rows"]}


def test_a_cpu_run_must_name_its_gpu(tmp_path):
    run = subprocess.run([sys.executable, "-m", "parplan.probe", "--out", str(tmp_path / "p.yaml"), "--config", "tiny",
                          "--ranks", "1", "--iters", "1"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert run.returncode != 0 and "--gpu" in run.stderr
