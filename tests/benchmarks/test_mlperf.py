"""The MLPerf Training v5.1 reader (benchmarks/mlperf.py) on fixtures in the source's formats
(tests/data/mlperf/README.md says which files they mimic), its mapping rules, its row errors, and a smoke test of
the ranking benchmark (benchmarks/ranking.py) and of ``published_runs.py --extra``."""

from __future__ import annotations

import io
import math
import shutil
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import mlperf, published_runs, ranking, runs  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[1] / "data" / "mlperf"


def _rows(root: Path = FIXTURES):
    rows, skipped = mlperf.read_repo(mlperf.DirTree(root))
    return {r["id"]: r for r in rows}, {s["id"]: s["reason"] for s in skipped}


def test_reader_on_fixtures():
    rows, skipped = _rows()
    assert set(rows) == {"mlperf51-llama31-8b-acme-box-n1", "mlperf51-llama31-8b-acme-box-n2",
                         "mlperf51-llama31-8b-acme-mi-n1"}
    assert skipped == {"mlperf51-llama2-70b-lora-acme-box-n2": mlperf.LORA_REASON}
    r = rows["mlperf51-llama31-8b-acme-box-n2"]
    assert r["source_id"] == "mlperf-training-v5.1"
    assert (r["tp"], r["pp"], r["vpp"], r["cp"], r["dp"], r["micro_batch_size"]) == (2, 2, None, 1, 4, 1)
    assert (r["num_gpus"], r["gpus_per_node"], r["global_batch_size"], r["seq_len"]) == (16, 8, 32, 8192)
    assert r["gpu"] == "B200" and r["precision"] == "fp8" and r["sequence_parallel"] is True
    assert r["zero_or_sharding"] == "distributed optimizer"
    assert "ASYM_PP_EMBED" in r["first_stage_layers"] and "ASYM_PP_LOSS" in r["last_stage_layers"]
    assert r["step_time_s"] == pytest.approx(0.50)  # median of 0.50 0.52 0.51 0.49 0.50 over both logs
    assert r["tokens_per_sec_per_gpu"] == pytest.approx(32 * 8192 / (0.50 * 16))
    assert "named by Acme/benchmarks/llama31_8b/implementations/box_n2/README-box_n2.md" in r["source_location"]
    assert r["framework"].startswith("NeMo") and "not_expressible" not in r
    one = rows["mlperf51-llama31-8b-acme-box-n1"]  # no README: the one config with 1x8 GPUs and batch 16
    assert (one["tp"], one["pp"], one["vpp"], one["micro_batch_size"]) == (1, 1, None, 2)
    assert "the only config" in one["source_location"]
    assert "MI355X is not in the GPU catalog" in rows["mlperf51-llama31-8b-acme-mi-n1"]["not_expressible"]


def test_fixture_row_is_expressed_by_the_mapping():
    rows, _ = _rows()
    r = runs.compare(rows["mlperf51-llama31-8b-acme-box-n2"])
    assert r["expressed"], r.get("reason")
    assert r["plan"]["tp"] == 2 and r["plan"]["pp"] == 2 and r["plan"]["vpp"] == 1 and r["metric"] == "tokens"


@pytest.mark.parametrize("name, expected", [
    ("NVIDIA Blackwell GPU (B200-SXM-180GB)", "B200"), ("NVIDIA Blackwell GPU (GB200)", "GB200-NVL72"),
    ("NVIDIA H200-SXM5-141GB", "H200-SXM-141GB"), ("NVIDIA H100-SXM5-80GB", "H100-SXM-80GB"),
    ("AMD Instinct MI300X", "MI300X"), ("NVIDIA Blackwell Ultra GPU (GB300)", None),
    ("NVIDIA Blackwell GPU (B300-SXM-270GB)", None), ("AMD Instinct MI355X", None), ("AMD Instinct MI325X", None)])
def test_gpu_names(name, expected):
    assert mlperf.catalog_gpu_name(name)[0] == expected


def test_config_parser_follows_sources_and_keeps_the_last_value(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "config_common.sh").write_text('export FP8=True\n: "${NEXP:=3}"\nexport X=1\n')
    (tmp_path / "a" / "config_x.sh").write_text(
        "source $(dirname ${BASH_SOURCE[0]})/config_common.sh\nsource $(dirname ${BASH_SOURCE[0]})/absent.sh\n"
        "export X=2  # comment\nexport Y=\"${X}-${Z:-z}\"\nunset FP8\n")
    env = mlperf.parse_config("a/config_x.sh", mlperf.DirTree(tmp_path).read)
    assert env["X"] == "2" and env["Y"] == "2-z" and env["NEXP"] == "3" and "FP8" not in env
    assert env["__MISSING__"] == "a/absent.sh"


def test_bad_rows_name_the_row_and_the_field(tmp_path):
    root = tmp_path / "repo"
    shutil.copytree(FIXTURES, root)
    (root / "Acme/systems/box_n1.json").write_text('{"number_of_nodes": "one", "accelerators_per_node": "8"}')
    cfg = root / "Acme/benchmarks/llama31_8b/implementations/nemo/config_DGXB200_2x8x8xtp2pp2cp1_8b.sh"
    cfg.write_text(cfg.read_text().replace("TENSOR_MODEL_PARALLEL=2", "TENSOR_MODEL_PARALLEL=two"))
    _, skipped = _rows(root)
    assert "mlperf51-llama31-8b-acme-box-n1: field number_of_nodes" in skipped["mlperf51-llama31-8b-acme-box-n1"]
    assert skipped["mlperf51-llama31-8b-acme-box-n2"] == ("mlperf51-llama31-8b-acme-box-n2: field TENSOR_MODEL_PARALLEL "
                                                         "= 'two' is not an integer")
    with pytest.raises(mlperf.RowError, match="mi-n1: field train_step_time"):
        (root / "Acme/results/mi_n1/llama31_8b/result_0.txt").write_text(
            (root / "Acme/results/mi_n1/llama31_8b/result_0.txt").read_text().replace("train_step_time", "x"))
        mlperf.read_folder(mlperf.DirTree(root), mlperf.Folder("Acme", "mi_n1", "llama31_8b",
                                                               ["Acme/results/mi_n1/llama31_8b/result_0.txt"]))


def test_config_and_log_must_agree_on_the_batch(tmp_path):
    root = tmp_path / "repo"
    shutil.copytree(FIXTURES, root)
    cfg = root / "Acme/benchmarks/llama31_8b/implementations/nemo/config_DGXB200_2x8x8xtp2pp2cp1_8b.sh"
    cfg.write_text(cfg.read_text().replace("MINIBS=8", "MINIBS=4"))
    _, skipped = _rows(root)
    assert skipped["mlperf51-llama31-8b-acme-box-n2"].startswith(
        "mlperf51-llama31-8b-acme-box-n2: field MINIBS: config_DGXB200_2x8x8xtp2pp2cp1_8b.sh gives data-parallel 4 x "
        "MINIBS 4 = 16, the logs a global batch of 32")


def test_main_writes_the_data_file(tmp_path):
    out = tmp_path / "m.yaml"
    assert mlperf.main(["--repo", str(FIXTURES), "--out", str(out)]) == 0
    rows = yaml.safe_load(out.read_text())
    assert len(rows) == 3 and out.read_text().startswith("# MLPerf Training v5.1")


def test_spearman_and_regret():
    assert ranking.spearman([1, 2, 3], [10, 20, 30]) == pytest.approx(1.0)
    assert ranking.spearman([3, 2, 1], [10, 20, 30]) == pytest.approx(-1.0)
    assert ranking.spearman([1, 2, 2, 4], [1, 3, 2, 4]) == pytest.approx(0.9486832980505138)  # ties averaged
    assert math.isnan(ranking.spearman([1, 1], [1, 2]))
    assert ranking.regret([3, 2, 1], [90, 100, 80]) == pytest.approx(100 / 90)
    assert ranking.regret([3, 3, 1], [90, 100, 80]) == pytest.approx(100 / 90)  # tied picks: the worse one


def test_ranking_smoke(tmp_path):
    out = io.StringIO()
    assert ranking.main(["--out", str(tmp_path / "r.txt")], out=out) == 0
    text = out.getvalue()
    assert "jobs:" in text and "median Spearman" in text and (tmp_path / "r.txt").read_text() == text
    assert "torchtitan 2024-12" in text


def test_published_runs_extra(tmp_path):
    data = tmp_path / "m.yaml"
    mlperf.main(["--repo", str(FIXTURES), "--out", str(data)])
    out = io.StringIO()
    published_runs.main(["--no-heldout", "--extra", str(data)], out=out)
    text = out.getvalue().split("Extra rows", 1)[1]
    assert "mlperf51-llama31-8b-acme-box-n2" in text and "rows expressed:              2 / 3" in text
    assert "blackwell" in text and "MI355X is not in the GPU catalog" in text
