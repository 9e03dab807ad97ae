"""Running a sweep: resolve the points, solve what the store lacks on an engine, write records as they land.

:func:`run_sweep` is what ``solver-cli sweep`` runs; :func:`sweep` is the library's entry point
(``parplan.sweep``); :func:`report` rebuilds the records from a sweep folder alone (``--report DIR``).
"""

from __future__ import annotations

import os
from typing import Any, Callable, Optional, Union

from parplan.library.sweep.engines import ENGINES, Cancelled, run_engine
from parplan.library.sweep.points import Sweep, SweepError, diff_sections, load_sweep
from parplan.library.sweep.records import finish, make_record
from parplan.library.sweep.store import Store, point_key

ProgressHook = Callable[[int, int, int], None]  # (done, failed, total) after each point


class Progress:
    """A rich progress bar on stderr: points done, failed, elapsed and ETA (off when not asked for). On a stderr
    that is not a terminal (a pipe, a log file: the bar cannot redraw) a plain line per finished point."""

    def __init__(self, total: int, enabled: bool):
        self.total, self.enabled, self.done, self.failed = total, enabled, 0, 0
        self._bar = None
        self._lines = None

    def __enter__(self) -> "Progress":
        if self.enabled:
            import sys

            from rich.console import Console
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress as Bar, TextColumn,
                                       TimeElapsedColumn, TimeRemainingColumn)

            console = Console(file=sys.stderr)
            if not console.is_terminal:
                import time

                self._lines, self._t0 = console, time.perf_counter()
                return self
            self._bar = Bar(TextColumn("sweep"), BarColumn(), MofNCompleteColumn(),
                            TextColumn("failed {task.fields[failed]}"), TimeElapsedColumn(), TextColumn("ETA"),
                            TimeRemainingColumn(), console=console, transient=False)
            self._bar.__enter__()
            self._task = self._bar.add_task("sweep", total=self.total, failed=0)
        return self

    def advance(self, failed: bool) -> None:
        self.done += 1
        self.failed += int(failed)
        if self._bar is not None:
            self._bar.update(self._task, advance=1, failed=self.failed)
        elif self._lines is not None:
            import time

            self._lines.print(f"sweep {self.done}/{self.total} failed {self.failed} "
                              f"{time.perf_counter() - self._t0:.1f} s", soft_wrap=True, highlight=False)

    def __exit__(self, *exc: Any) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)


def settings_of(sweep: Sweep) -> dict[str, Any]:
    return sweep.spec.solver.model_dump(mode="json")


def manifest_of(sweep: Sweep, keys: list[str]) -> dict[str, Any]:
    from parplan import __version__

    return {"parplan": __version__, "sweep": sweep.spec.model_dump(mode="json", exclude={"base"}),
            "points": [{"index": p.index, "key": k, "axes": p.axes, "spec": p.spec}
                       for p, k in zip(sweep.points, keys)]}


def records_from(manifest: dict[str, Any], store: Store) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    entries = store.entries({p["key"] for p in manifest["points"]})
    records = [make_record(p["index"], p["key"], p["axes"], p["spec"], entries.get(p["key"]), manifest["sweep"])
               for p in manifest["points"]]
    return records, summary_of(records, manifest)


def summary_of(records: list[dict[str, Any]], manifest: dict[str, Any]) -> dict[str, Any]:
    """``summary.json``: the cross-point figures (records.finish) and the parplan version that solved the points."""
    return {**finish(records), "parplan_version": manifest.get("parplan")}


def _keys_of(sweep: Sweep, settings: dict[str, Any], cancel: Optional[Any]) -> list[str]:
    """Each point's store key; thousands of points take a second to key, so the cancel is checked every 64."""
    keys = []
    for i, p in enumerate(sweep.points):
        if cancel is not None and i % 64 == 0 and cancel.is_set():
            raise Cancelled()
        keys.append(point_key(p.spec, settings))
    return keys


def _to_solve(sweep: Sweep, keys: list[str], entries: dict[str, Any]) -> tuple[dict[str, int], dict[str, list[int]]]:
    """The keys the store lacks, each with the first point that has it (equal keys are solved once), and the points
    of every key."""
    todo: dict[str, int] = {}
    by_key_points: dict[str, list[int]] = {}
    for p, key in zip(sweep.points, keys):
        by_key_points.setdefault(key, []).append(p.index)
        if key not in entries and key not in todo:
            todo[key] = p.index
    return todo, by_key_points


def run_sweep(sweep: Sweep, out_dir: Optional[str] = None, *, engine: str = "local", jobs: Optional[int] = None,
              ray_address: Optional[str] = None, resume: bool = False, progress: bool = False,
              on_point: Optional[Callable[[dict[str, Any]], None]] = None,
              plots: Optional[bool] = None, cancel: Optional[Any] = None,
              worker_memory_budget_mib: Optional[int] = None) -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, int]]:
    """Solve every point (those already in the store too, unless ``resume``); with ``out_dir`` the store and
    the outputs go there, each point stored as it completes. ``on_point`` gets each finished point's record
    (without the cross-point marks); ``cancel`` (a threading.Event) set stops the sweep with
    ``engines.Cancelled``; ``worker_memory_budget_mib``: each local worker process's memory budget. Returns
    (records in point order, summary, counts)."""
    if engine not in ENGINES:
        raise SweepError(f"--engine: {engine!r} is not one of {', '.join(ENGINES)}")
    if jobs is not None and not 1 <= jobs <= 4096:
        raise SweepError(f"--jobs: {jobs} is out of range (1-4096)")
    settings = settings_of(sweep)
    keys = _keys_of(sweep, settings, cancel)
    store = Store(out_dir) if out_dir else None
    manifest = manifest_of(sweep, keys)
    entries: dict[str, dict[str, Any]] = {}
    if store is not None:
        store.create()
        store.write_manifest(manifest)
        if resume:
            entries.update(store.entries(set(keys)))
    todo, by_key_points = _to_solve(sweep, keys, entries)
    task_keys = list(todo)
    tasks = [(i, diff_sections(sweep.base, sweep.points[todo[key]].spec)) for i, key in enumerate(task_keys)]
    counts = {"points": len(sweep.points), "skipped": len(sweep.points) - sum(len(by_key_points[k]) for k in todo),
              "solved": 0, "failed": 0}

    def on_result(task_id: int, out: dict[str, Any]) -> None:
        key = task_keys[task_id]
        entries[key] = out
        if store is not None:
            store.put(key, out)
        counts["solved"] += 1
        failed = "error" in out
        counts["failed"] += int(failed)
        bar.advance(failed)
        if on_point is not None:
            for index in by_key_points[key]:
                p = sweep.points[index]
                on_point(make_record(p.index, key, p.axes, p.spec, out, manifest["sweep"]))

    with Progress(len(tasks), progress) as bar:
        if tasks and cancel is not None and cancel.is_set():  # ended while the points were keyed: start no worker
            raise Cancelled()
        if tasks:
            run_engine(engine, tasks, sweep.base, settings, on_result, jobs=jobs, ray_address=ray_address,
                       cancel=cancel, worker_memory_budget_mib=worker_memory_budget_mib)
    records = [make_record(p.index, k, p.axes, p.spec, entries.get(k), manifest["sweep"])
               for p, k in zip(sweep.points, keys)]
    summary = summary_of(records, manifest)
    if out_dir:
        from parplan.library.sweep.report import write_outputs

        write_outputs(records, summary, out_dir, plots=plots)
    return records, summary, counts


def report(out_dir: str, plots: Optional[bool] = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Records and outputs rebuilt from a sweep folder's manifest and store alone (no solving)."""
    from parplan.library.sweep.report import write_outputs

    if not os.path.isdir(out_dir):
        raise SweepError(f"--report {out_dir}: not a folder")
    store = Store(out_dir)
    records, summary = records_from(store.read_manifest(), store)
    write_outputs(records, summary, out_dir, plots=plots)
    return records, summary


def sweep(spec_or_path: Any, axes: Optional[dict[str, list[Any]]] = None, *, points: Optional[list[dict]] = None,
          budget: Optional[dict[str, Any]] = None, prices: Optional[dict[str, float]] = None,
          deadline_h: Optional[float] = None, energy: Optional[dict[str, float]] = None, top_k: int = 1,
          time_limit_s: float = 60.0, method: str = "cpsat", workers: int = 1, deterministic: bool = False,
          seed: int = 1, engine: str = "local", jobs: Optional[int] = None, ray_address: Optional[str] = None,
          out: Optional[str] = None, resume: bool = False, frame: bool = False) -> Union[list[dict[str, Any]], Any]:
    """Plan every point of a grid: ``parplan.sweep("spec.yaml", {"cluster.num_gpus": [8, 16, 32]},
    budget={"tokens": 1e12})``. ``spec_or_path`` is the base spec (a Spec, a mapping, or a path).

    Returns the records (dicts, in point order, as ``points.jsonl`` holds them), or with ``frame=True`` a
    pandas DataFrame of the CSV columns (needs pandas). Bad input raises ``SweepError`` (a ParplanError)."""
    from parplan.costmodel.spec.spec import Spec

    if isinstance(spec_or_path, Spec):
        base: Any = spec_or_path.model_dump(mode="json")
    elif isinstance(spec_or_path, os.PathLike):
        base = os.path.abspath(os.fspath(spec_or_path))
    elif isinstance(spec_or_path, str):
        base = os.path.abspath(spec_or_path)
    else:
        base = dict(spec_or_path)
    data: dict[str, Any] = {"base": base, "axes": axes or {}, "points": points or [],
                            "solver": {"top_k": top_k, "time_limit_s": float(time_limit_s), "method": method,
                                       "workers": workers, "deterministic": deterministic, "seed": seed}}
    for name, value in (("budget", budget), ("prices", prices), ("deadline_h", deadline_h), ("energy", energy)):
        if value is not None:
            data[name] = value
    frame_ok = None
    if frame:
        try:
            import pandas as frame_ok  # noqa: F401
        except ImportError:
            raise SweepError("sweep(frame=True): needs pandas (pip install pandas)") from None
    records, _, _ = run_sweep(load_sweep(data, sweep_dir=os.getcwd()), out, engine=engine, jobs=jobs,
                              ray_address=ray_address, resume=resume)
    if frame:
        from parplan.library.sweep.report import flat_row

        return frame_ok.DataFrame([flat_row(r) for r in records])
    return records


__all__ = ["run_sweep", "report", "sweep", "records_from", "Progress"]
