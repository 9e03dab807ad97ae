"""Reading measured runs for ``solver-cli calibrate``: training logs, nccl-tests output, the probe's output.

Each reader takes a file's text and returns what it measured; a line that starts like a metrics line but does not
parse is a :class:`RunLogError` naming ``file:line`` (the CLI's exit 2). The formats, from the code that prints them:

* Megatron-LM / Megatron-Core training (``megatron/training/training.py`` ``training_log``, Megatron-LM core_r0.15.3,
  line 1598: ``' elapsed time per iteration (ms): {:.1f} |'`` after ``' iteration {:8d}/{:8d} |'``; the memory report
  ``megatron/training/utils.py`` ``report_memory``, lines 266-275: ``"[Rank {}] {}"`` of ``'(after {iteration}
  iterations) memory (MB) | allocated: {} | max allocated: {} | reserved: {} | max reserved: {}'``, MB = 2**20 B);
* NeMo 2 (Megatron-Core under Lightning, ``MegatronProgressBar``): ``Training epoch 0, iteration 1/249 | ... |
  train_step_timing in s: 2.505 | ...`` (NeMo 1's progress bar writes ``train_step_timing in s=3.130``; both read);
* torchtitan 0.2.2 (``torchtitan/components/metrics.py`` ``MetricsProcessor.log``, lines 461-470):
  ``step: {step:2}  loss: {loss:8.5f}  grad_norm: {g:7.4f}  memory: {max_reserved_gib:5.2f}GiB({pct:.2f}%)  tps:
  {round(tps):,}  tflops: {tflops:,.2f}  mfu: {mfu:.2f}%``, with ANSI colour codes around the fields; ``tps`` counts
  ``labels.numel()`` per device before context-parallel sharding (``torchtitan/train.py`` line 404), i.e. the tokens of
  one data-parallel replica's batch per second; the memory is the caching allocator's *reserved* peak;
* nccl-tests (``src/common.cu``: the header ``#       size         count      type   redop    root     time   algbw
  busbw #wrong ...``, one row per size, ``# Avg bus bandwidth    : %g``, and ``#  Rank  N Group  0 Pid  P on HOST
  device  D [...] NAME`` per rank); the collective is not printed, so the file's name must hold the binary's
  (``all_reduce_perf``, ``all_gather``, ``reduce_scatter``, ``alltoall``).

The first logged interval of a training log includes start-up (compilation, allocator warm-up): the step time is the
median of the later ones (of all, when only one is logged).
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field
from typing import Optional

from parplan.costmodel.errors import ParplanError

MIB = 2**20
GIB = 2**30


class RunLogError(ParplanError):
    """A measured-run file that cannot be read; ``str(err)`` is ``file:line: what is wrong``."""

    def __init__(self, path: str, line: Optional[int], message: str):
        self.path, self.line = path, line
        super().__init__(f"{path}:{line}: {message}" if line else f"{path}: {message}")


@dataclass
class TrainingLog:
    """What a training log measured: step times (s, per logged interval), the peak memory (GiB) and its kind."""

    path: str
    framework: str  # megatron | nemo | torchtitan
    step_times_s: list[float] = field(default_factory=list)
    peak_memory_gib: Optional[float] = None
    memory_kind: str = "allocated"  # allocated (the ledger's peak) | reserved (the caching allocator's)
    tokens_per_s_per_device: list[float] = field(default_factory=list)  # torchtitan's tps

    def step_time_s(self, tokens_per_device: Optional[float] = None) -> Optional[float]:
        """The median step time past the first logged interval; torchtitan's from its tps and the tokens of one
        data-parallel replica's batch (``tokens_per_device``)."""
        times = list(self.step_times_s)
        if not times and self.tokens_per_s_per_device and tokens_per_device:
            times = [tokens_per_device / tps for tps in self.tokens_per_s_per_device if tps > 0]
        if not times:
            return None
        return statistics.median(times[1:] if len(times) > 1 else times)


_NUM = r"([0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?)"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
MEGATRON_ITER = re.compile(r"iteration\s+(\d+)/\s*(\d+) \|.*? elapsed time per iteration \(ms\): " + _NUM + r" \|")
MEGATRON_MEMORY = re.compile(r"\[Rank (\d+)\] \(after (\d+) iterations\) memory \(MB\) \| allocated: " + _NUM
                             + r" \| max allocated: " + _NUM + r" \| reserved: " + _NUM + r" \| max reserved: " + _NUM)
NEMO_STEP = re.compile(r"train_step_timing in s[:=] ?" + _NUM)
TORCHTITAN_STEP = re.compile(r"step:\s*(\d+)\s+loss:\s*\S+\s+(?:grad_norm:\s*\S+\s+)?memory:\s*" + _NUM
                             + r"GiB\(" + _NUM + r"%\)\s+tps:\s*([0-9,]+)\s+tflops:\s*([0-9,.]+)\s+mfu:\s*" + _NUM + "%")


def _lines(text: str):
    for number, raw in enumerate(text.splitlines(), start=1):
        yield number, _ANSI.sub("", raw)


def read_training_log(path: str, text: str) -> TrainingLog:
    """A Megatron-LM/Megatron-Core, NeMo or torchtitan training log (module docstring); RunLogError on a metrics line
    that does not parse, or on a file with no step time in any known format."""
    log = TrainingLog(path, "unknown")
    peaks: list[float] = []
    for number, line in _lines(text):
        if "elapsed time per iteration (ms)" in line:
            m = MEGATRON_ITER.search(line)
            if m is None:
                raise RunLogError(path, number, "a Megatron iteration line without 'iteration N/M | ... elapsed time "
                                                "per iteration (ms): T |' (megatron/training/training.py training_log)")
            log.framework = "megatron"
            log.step_times_s.append(float(m.group(3)) / 1000.0)
        elif "memory (MB)" in line:
            m = MEGATRON_MEMORY.search(line)
            if m is None:
                raise RunLogError(path, number, "a Megatron memory report without '[Rank N] (after N iterations) memory "
                                                "(MB) | allocated: A | max allocated: B | reserved: C | max reserved: D'")
            peaks.append(float(m.group(4)) * MIB / GIB)
        elif "train_step_timing in s" in line:
            m = NEMO_STEP.search(line)
            if m is None:
                raise RunLogError(path, number, "a NeMo line whose 'train_step_timing in s' has no number")
            log.framework = "nemo"
            log.step_times_s.append(float(m.group(1)))
        elif re.search(r"\bstep:\s*\d+\s+loss:", line) and " tps:" in line:
            m = TORCHTITAN_STEP.search(line)
            if m is None:
                raise RunLogError(path, number, "a torchtitan metrics line without 'step: N  loss: L  memory: "
                                                "XGiB(P%)  tps: T  tflops: F  mfu: M%' (torchtitan/components/metrics.py)")
            log.framework = "torchtitan"
            log.memory_kind = "reserved"
            peaks.append(float(m.group(2)))
            log.tokens_per_s_per_device.append(float(m.group(4).replace(",", "")))
    if log.framework == "unknown":
        raise RunLogError(path, None, "no step time in any known format (Megatron 'elapsed time per iteration (ms)', "
                                      "NeMo 'train_step_timing in s', torchtitan 'step: ... tps: ...')")
    log.peak_memory_gib = max(peaks) if peaks else None
    return log


@dataclass
class CollectiveRow:
    """One measured collective: ``op`` over ``ranks`` GPUs, ``ranks_per_node`` of them per host, ``size_bytes`` at
    ``busbw_gbps`` (nccl-tests' bus bandwidth, GB/s = 1e9 B/s) and ``time_us``."""

    op: str
    ranks: int
    ranks_per_node: int
    size_bytes: float
    time_us: float
    busbw_gbps: float
    where: str


NCCL_OPS = {"all_reduce": "all_reduce", "allreduce": "all_reduce", "all_gather": "all_gather",
            "allgather": "all_gather", "reduce_scatter": "reduce_scatter", "reducescatter": "reduce_scatter",
            "alltoall": "all_to_all", "all_to_all": "all_to_all"}
NCCL_RANK = re.compile(r"^#\s+Rank\s+(\d+)\s+Group\s+\d+\s+Pid\s+\d+\s+on\s+(\S+)\s+device")


def nccl_op_of(path: str) -> Optional[str]:
    name = path.replace("-", "_").lower().rsplit("/", 1)[-1]
    return next((op for key, op in NCCL_OPS.items() if key in name), None)


def read_nccl_tests(path: str, text: str) -> list[CollectiveRow]:
    """nccl-tests output (module docstring): one row per size, out-of-place columns."""
    op = nccl_op_of(path)
    if op is None:
        raise RunLogError(path, None, "nccl-tests output: name the file after the test binary (all_reduce_perf, "
                                      "all_gather_perf, reduce_scatter_perf, alltoall_perf); it is not printed")
    hosts: dict[int, str] = {}
    columns: Optional[list[str]] = None
    rows: list[CollectiveRow] = []
    for number, line in _lines(text):
        stripped = line.strip()
        m = NCCL_RANK.match(stripped)
        if m:
            hosts[int(m.group(1))] = m.group(2)
        elif stripped.startswith("#") and "size" in stripped and "busbw" in stripped:
            columns = stripped.lstrip("#").split()
        elif stripped and stripped[0].isdigit() and columns is not None:
            parts = stripped.split()
            try:
                values: dict[str, str] = {}
                for name, value in zip(columns, parts):
                    values.setdefault(name, value)  # the first time/algbw/busbw: out-of-place
                size, time_us, busbw = float(values["size"]), float(values["time"]), float(values["busbw"])
            except (KeyError, ValueError):
                raise RunLogError(path, number, f"an nccl-tests row that does not match its header ({' '.join(columns)})")
            rows.append(CollectiveRow(op, 0, 0, size, time_us, busbw, f"{path}:{number}"))
    if not rows:
        raise RunLogError(path, None, "nccl-tests output without a size/busbw table")
    ranks = len(hosts) or 1
    per_node = max(list(hosts.values()).count(h) for h in set(hosts.values())) if hosts else 1
    for row in rows:
        row.ranks, row.ranks_per_node = ranks, per_node
    return rows


__all__ = ["RunLogError", "TrainingLog", "CollectiveRow", "read_training_log", "read_nccl_tests", "nccl_op_of"]
