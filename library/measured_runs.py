"""The measured rows ``solver-cli calibrate`` fits on, gathered from the files it is given.

* a runs table, YAML (``runs: [{spec, plan, step_time_s | step_time_ms | log, peak_memory_gib, name}]``) or CSV
  (columns ``name, spec, log, step_time_s, step_time_ms, peak_memory_gib`` and any ``plan:`` key, e.g. ``tp``,
  ``pp``, ``micro_batch_size``): ``spec`` a path relative to the table (or, in YAML, a mapping; omitted: ``--spec``),
  ``log`` a training log the step time and peak memory are read from (library/run_logs.py); a row's ``plan``
  replaces the spec's ``plan:`` (omitted: the spec's);
* a training log given alone (Megatron-LM/Megatron-Core, NeMo, torchtitan): a run of ``--spec`` and its ``plan:``;
* nccl-tests output (library/run_logs.py): collective rows on ``--spec``'s GPU;
* the probe's output (``python -m parplan.probe``, src/parplan/probe.py): GEMM, attention, HBM and collective rows
  on the GPU the probe names.

Every failure is a :class:`~parplan.library.run_logs.RunLogError` naming the file and, where there is one, the line.
"""

from __future__ import annotations

import csv
import hashlib
import io
import os
from dataclasses import dataclass, field
from typing import Any, Optional

from parplan.library.run_logs import CollectiveRow, RunLogError, read_nccl_tests, read_training_log
from parplan.library.spec_io import SpecError, load_spec_file, parse_yaml, read_capped, spec_from_data

PROBE_KIND = "parplan-probe"
MAX_RUN_FILE_BYTES = 64 << 20
TABLE_FIELDS = ("name", "spec", "log", "step_time_s", "step_time_ms", "peak_memory_gib", "memory_kind")


@dataclass
class Run:
    """A measured training run: its spec (with the plan it ran as ``spec.plan``), step time and peak memory."""

    name: str
    spec: Any  # a validated Spec whose ``plan`` is the run's plan
    step_time_s: float
    peak_memory_gib: Optional[float]
    memory_kind: str  # allocated | reserved
    where: str


@dataclass
class KernelRow:
    """A probe measurement on ``gpu`` (a catalog name): ``kind`` gemm (m, k, n, dtype), attention (batch, heads,
    seq, head_dim, causal) or hbm (bytes); ``seconds`` per call; ``peak_tflops`` the rate the probe's efficiencies
    are shares of (the catalog's for a GPU; the probe's ``--peak-tflops`` on a CPU)."""

    kind: str
    gpu: str
    shape: dict[str, Any]
    seconds: float
    peak_tflops: Optional[float]
    where: str


@dataclass
class Measured:
    runs: list[Run] = field(default_factory=list)
    kernels: list[KernelRow] = field(default_factory=list)
    collectives: list[tuple[str, CollectiveRow]] = field(default_factory=list)  # (gpu, row)
    sources: list[dict[str, Any]] = field(default_factory=list)


def _read(path: str) -> str:
    try:
        raw = read_capped(path, MAX_RUN_FILE_BYTES)
    except ValueError as err:
        raise RunLogError(path, None, str(err)) from None
    return raw.decode("utf-8", errors="replace")


def _scalar(text: str) -> Any:
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


def _run_spec(entry: dict[str, Any], where: str, base_dir: str, default_spec: Optional[str]) -> Any:
    spec = entry.get("spec", default_spec)
    if spec is None:
        raise RunLogError(where, None, "spec: a run needs a spec (a path, a mapping, or --spec)")
    plan = {k: v for k, v in (entry.get("plan") or {}).items()}
    try:
        if isinstance(spec, dict):
            data = dict(spec)
        else:
            path = spec if os.path.isabs(spec) or spec is default_spec else os.path.join(base_dir, spec)
            data = parse_yaml(_read(path), path)
            base_dir = os.path.dirname(path) or "."
        if plan:  # the run's whole plan, in place of the spec's (a partial merge could mix two plans' stage lists)
            data = {**data, "plan": plan}
        out = spec_from_data(data, str(spec) if not isinstance(spec, dict) else "spec", base_dir=base_dir)
    except SpecError as err:
        raise RunLogError(where, None, f"spec: {err}") from None
    if out.plan is None:
        raise RunLogError(where, None, "plan: the run's plan is needed (plan: in the row or the spec)")
    return out


def _spec_gpu(where: str, default_spec: Optional[str]) -> str:
    """The GPU of ``--spec``'s cluster (nccl-tests output does not name a catalog part)."""
    if default_spec is None:
        raise RunLogError(where, None, "nccl-tests output: --spec names the cluster's GPU")
    try:
        return load_spec_file(default_spec).cluster.gpu
    except SpecError as err:
        raise RunLogError(where, None, f"--spec: {err}") from None


def _tokens_per_replica(spec: Any) -> float:
    """Tokens of one data-parallel replica's batch per step (what torchtitan's tps counts, library/run_logs.py)."""
    p = spec.plan
    model_parallel = (p.tp or 1) * (p.pp or 1) * (p.cp or 1)
    replicas = max(1, spec.cluster.num_gpus // model_parallel)
    return spec.training.global_batch_size * spec.training.seq_len / replicas


def _run_of(entry: dict[str, Any], where: str, base_dir: str, default_spec: Optional[str], m: Measured) -> Run:
    spec = _run_spec(entry, where, base_dir, default_spec)
    step, memory, kind = entry.get("step_time_s"), entry.get("peak_memory_gib"), entry.get("memory_kind", "allocated")
    if step is None and entry.get("step_time_ms") is not None:
        step = float(entry["step_time_ms"]) / 1000.0
    if entry.get("log"):
        log_path = entry["log"] if os.path.isabs(entry["log"]) else os.path.join(base_dir, entry["log"])
        log = read_training_log(log_path, _read(log_path))
        m.sources.append(_source(log_path, f"{log.framework}-log"))
        step = step if step is not None else log.step_time_s(_tokens_per_replica(spec))
        if memory is None and log.peak_memory_gib is not None:
            memory, kind = log.peak_memory_gib, log.memory_kind
    if not isinstance(step, (int, float)) or isinstance(step, bool) or not step > 0:
        raise RunLogError(where, None, f"step_time_s: a positive number of seconds is needed (got {step!r})")
    if memory is not None and (not isinstance(memory, (int, float)) or not memory > 0):
        raise RunLogError(where, None, f"peak_memory_gib: a positive number of GiB (got {memory!r})")
    if kind not in ("allocated", "reserved"):
        raise RunLogError(where, None, f"memory_kind: allocated or reserved (got {kind!r})")
    return Run(str(entry.get("name") or where), spec, float(step), memory, kind, where)


def _table_rows(path: str, text: str) -> list[tuple[dict[str, Any], str]]:
    if path.lower().endswith(".csv"):
        reader = csv.DictReader(io.StringIO(text))
        plan_keys = set(_plan_fields())
        rows = []
        for row in reader:
            where = f"{path}:{reader.line_num}"
            unknown = [k for k in row if k not in TABLE_FIELDS and k.removeprefix("plan.") not in plan_keys]
            if unknown:
                raise RunLogError(path, reader.line_num, f"unknown column {unknown[0]!r} (known: "
                                  f"{', '.join(TABLE_FIELDS)} and the plan: keys)")
            entry = {k: _scalar(v) for k, v in row.items() if k in TABLE_FIELDS and v not in (None, "")}
            entry["plan"] = {k.removeprefix("plan."): _scalar(v) for k, v in row.items()
                             if k not in TABLE_FIELDS and v not in (None, "")}
            rows.append((entry, where))
        return rows
    data = parse_yaml(text, path)
    runs = data.get("runs") if isinstance(data, dict) else None
    if not isinstance(runs, list) or not all(isinstance(r, dict) for r in runs):
        raise RunLogError(path, None, "runs: a list of mappings (spec, plan, step_time_s or log, peak_memory_gib)")
    return [(r, f"{path}: runs[{i}]") for i, r in enumerate(runs)]


def _plan_fields() -> list[str]:
    from parplan.costmodel.spec.spec import PlanSpec

    return list(PlanSpec.model_fields)


def _probe_rows(path: str, data: dict[str, Any], m: Measured) -> None:
    device = data.get("device") or {}
    gpu = device.get("gpu")
    if not isinstance(gpu, str):
        raise RunLogError(path, None, "device.gpu: the catalog GPU the probe ran on (probe --gpu NAME)")
    peak = data.get("peak_tflops")
    for kind in ("gemm", "attention"):
        for i, row in enumerate(data.get(kind) or []):
            if not isinstance(row, dict) or not isinstance(row.get("seconds"), (int, float)) or row["seconds"] <= 0:
                raise RunLogError(path, None, f"{kind}[{i}].seconds: a positive number is needed")
            shape = {k: v for k, v in row.items() if k not in ("seconds", "tflops")}
            m.kernels.append(KernelRow(kind, gpu, shape, float(row["seconds"]), peak, f"{path}: {kind}[{i}]"))
    hbm = data.get("hbm")
    if isinstance(hbm, dict) and hbm.get("seconds"):
        m.kernels.append(KernelRow("hbm", gpu, {"bytes": hbm["bytes"]}, float(hbm["seconds"]), peak, f"{path}: hbm"))
    for i, row in enumerate(data.get("collectives") or []):
        try:
            m.collectives.append((gpu, CollectiveRow(row["op"], int(row["ranks"]), int(row["ranks_per_node"]),
                                                     float(row["size_bytes"]), float(row["time_us"]),
                                                     float(row["busbw_gbps"]), f"{path}: collectives[{i}]")))
        except (KeyError, TypeError, ValueError):
            raise RunLogError(path, None, f"collectives[{i}]: op, ranks, ranks_per_node, size_bytes, time_us, "
                                          "busbw_gbps are needed") from None


def _source(path: str, kind: str) -> dict[str, Any]:
    digest = hashlib.sha256(open(path, "rb").read()).hexdigest()[:16]
    return {"file": os.path.basename(path), "kind": kind, "sha256": digest}


def gather(paths: list[str], default_spec: Optional[str] = None) -> Measured:
    """Every measured row of ``paths`` (module docstring); ``default_spec`` is ``--spec``."""
    m = Measured()
    for path in paths:
        text, base_dir = _read(path), os.path.dirname(path) or "."
        lower = path.lower()
        if lower.endswith((".yaml", ".yml", ".json", ".csv")):
            data = None if lower.endswith(".csv") else parse_yaml(text, path)
            if isinstance(data, dict) and data.get("kind") == PROBE_KIND:
                _probe_rows(path, data, m)
                m.sources.append(_source(path, "probe"))
                continue
            for entry, where in _table_rows(path, text):
                m.runs.append(_run_of(entry, where, base_dir, default_spec, m))
            m.sources.append(_source(path, "runs-table"))
        elif "busbw" in text and "# Avg bus bandwidth" in text:
            m.collectives += [(_spec_gpu(path, default_spec), row) for row in read_nccl_tests(path, text)]
            m.sources.append(_source(path, "nccl-tests"))
        else:
            m.runs.append(_run_of({"log": os.path.abspath(path), "name": os.path.basename(path)}, path, base_dir,
                                  default_spec, m))
    return m


__all__ = ["Run", "KernelRow", "Measured", "gather", "PROBE_KIND"]
