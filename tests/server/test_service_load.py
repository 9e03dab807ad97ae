"""Smoke of benchmarks/load.py: 2 clients x 2 requests of a tiny spec and a 2-call cancel storm (~15 s)."""

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TINY = """\
model: {name: llama3-8b, num_layers: 32, hidden_size: 4096, ffn_hidden_size: 14336, num_attention_heads: 32,
        num_kv_heads: 8, vocab_size: 128256}
training: {seq_len: 8192, global_batch_size: 64}
cluster: {gpu: H100-SXM-80GB, num_gpus: 8}
"""


def test_load_benchmark_smoke(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("load", ROOT / "benchmarks" / "load.py")
    load = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(load)
    (tmp_path / "tiny.yaml").write_text(TINY)
    out = tmp_path / "load.json"
    code = load.main(["--clients", "2", "--requests", "2", "--baseline", "1", "--storm", "2",
                      "--storm-wait-s", "3", "--spec", str(tmp_path / "tiny.yaml"), "--out", str(out)])
    result = json.loads(out.read_text())
    assert code == 0 and result["errors"] == 0 and result["codes"] == {"OK": 4}
    assert result["requests"] == 4 and result["throughput_rps"] > 0 and result["p99_s"] >= result["p50_s"] > 0
    assert 0 <= result["queue_wait_p50_s"] <= result["queue_wait_p99_s"] <= result["queue_wait_max_s"]
    assert result["server_max_concurrent"] == "default (4)"
    assert result["rss_peak_first_half_mib"] > 0 or result["rss_peak_second_half_mib"] > 0
    storm = result["cancel_storm"]
    assert sum(storm["codes"].values()) == 2 and set(storm["codes"]) <= {"CANCELLED", "OK"}
