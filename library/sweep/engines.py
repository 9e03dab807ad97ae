"""Where the points are solved: ``local`` (worker processes on this machine, the default) or ``ray``.

Both run the same function, :func:`solve_point`, on the same inputs: the resolved base spec and the
calibration, shipped once (to each local worker when it starts, library/sweep/pool.py; to Ray through the object store,
``ray.put``), and per point only the spec sections that differ from the base. So the records do not depend
on the engine, and in deterministic mode they are byte-identical.

Each solve uses ``solver.workers`` CP-SAT workers (default 1: one solve per core); a Ray task reserves that
many CPUs (``num_cpus``) and is retried when its worker dies (``max_retries``). Ray is imported only here,
only when the Ray engine runs.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any, Callable, Iterable, Optional

from parplan.library.sweep.points import merge_sections

RAY_EXTRA_HINT = "pip install 'parplan[ray]'"
RAY_MAX_RETRIES = 3

OnResult = Callable[[int, dict[str, Any]], None]  # (task id, solve output) as each point finishes


POLL_S = 0.2  # how often a running sweep looks at its cancel event


class Cancelled(Exception):
    """The sweep's cancel event was set (the service's Sweep call ended): the solves in flight were stopped."""


class EngineUnavailable(Exception):
    """The Ray engine without Ray installed (the CLI: exit 2 naming the extra)."""


def calibration() -> dict[str, Any]:
    """The fitted cost-model values the driver plans with (costmodel/spec/calibration.py)."""
    from parplan.costmodel.spec import calibration as cal

    return {"FITTED": dict(cal.FITTED), "FIXED": dict(getattr(cal, "FIXED", {}))}


def _trim_result(data: dict[str, Any]) -> dict[str, Any]:
    """What a record keeps of ``plan_result_to_dict``: the plans in the CONTRACT shape, the explanation
    without its relaxed plans, the solver stats (and timing outside deterministic mode)."""
    out = {"status": data["status"], "objective": data["objective"],
           "plans": [{"plan": p["plan"], "metrics": p["metrics"]} for p in data["plans"]]}
    ex = data.get("explanation")
    if ex is not None:
        ex = {k: v for k, v in ex.items() if k != "relaxations"}
        ex["relaxations"] = [{k: r[k] for k in ("requirement", "change", "patch")} for r in
                             data["explanation"]["relaxations"]]
    out["explanation"] = ex
    out["solver"] = data["solver"]
    if "timing" in data:
        out["timing"] = data["timing"]
    return out


def solve_point(base: dict[str, Any], diff: dict[str, Any], settings: dict[str, Any],
                shipped_calibration: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """Solve one point: ``{"result": trimmed CONTRACT result}`` or ``{"error": one line}``; never raises."""
    started = time.perf_counter()
    try:
        if shipped_calibration is not None and shipped_calibration != calibration():
            return {"error": "this worker's parplan has another calibration than the driver's (install the "
                             "same parplan version on every worker)"}
        from parplan.library.contract import plan_result_to_dict
        from parplan.library.spec_io import one_line, spec_from_data
        from parplan.solver.cpsat import SolverControls
        from parplan.solver.planner import optimize

        spec = spec_from_data(merge_sections(base, diff))
        controls = SolverControls(time_limit_s=settings["time_limit_s"], workers=settings["workers"],
                                  deterministic=settings["deterministic"], seed=settings["seed"])
        result = optimize(spec, method=settings["method"], top_k=settings["top_k"], controls=controls)
        out = {"result": _trim_result(plan_result_to_dict(result))}
    except Exception as err:  # a record, never a crash of the sweep
        from parplan.library.spec_io import one_line

        out = {"error": one_line(f"{type(err).__name__}: {err}")}
    if not settings["deterministic"]:
        out["solve_s"] = round(time.perf_counter() - started, 6)
    return out


# ------------------------------------------------------------------------------------------ local

_SHIPPED: dict[str, Any] = {}


def _init_worker(base: dict[str, Any], cal: dict[str, Any], memory_budget_mib: Optional[int] = None) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the driver's: it stops the pool
    _SHIPPED["base"], _SHIPPED["calibration"] = base, cal
    if memory_budget_mib is not None:  # the worker's share of its driver's budget (a server's Sweep)
        from parplan.solver.deadline import set_default_memory_budget

        set_default_memory_budget(memory_budget_mib)


def _solve_shipped(diff: dict[str, Any], settings: dict[str, Any]) -> dict[str, Any]:
    return solve_point(_SHIPPED["base"], diff, settings, _SHIPPED["calibration"])


def default_jobs(settings: dict[str, Any]) -> int:
    return max(1, (os.cpu_count() or 1) // max(1, settings["workers"]))


def run_local(tasks: Iterable[tuple[int, dict[str, Any]]], base: dict[str, Any], settings: dict[str, Any],
              on_result: OnResult, jobs: Optional[int] = None, cancel: Optional[threading.Event] = None,
              worker_memory_budget_mib: Optional[int] = None) -> None:
    """Solve ``tasks`` ((id, diff) pairs) on ``jobs`` worker processes of our own module (library/sweep/pool.py:
    nothing of the caller's ``__main__`` runs in them), each under ``worker_memory_budget_mib`` when given
    (else the process default); ``on_result`` runs in this process as each finishes; ``cancel`` set stops
    the workers (Cancelled). A point whose worker dies is run once more on a new worker."""
    from parplan.library.sweep.pool import run_pool

    def should_stop() -> None:
        if cancel is not None and cancel.is_set():
            raise Cancelled()

    tasks = list(tasks)
    run_pool(tasks, (base, calibration(), worker_memory_budget_mib), settings, jobs or default_jobs(settings),
             on_result, should_stop, POLL_S)


# -------------------------------------------------------------------------------------------- ray


def _import_ray():
    try:
        import ray  # noqa: F401
    except ImportError:
        raise EngineUnavailable(f"--engine ray: Ray is not installed ({RAY_EXTRA_HINT})") from None
    return ray


def run_ray(tasks: Iterable[tuple[int, dict[str, Any]]], base: dict[str, Any], settings: dict[str, Any],
            on_result: OnResult, *, address: Optional[str] = None, jobs: Optional[int] = None,
            cancel: Optional[threading.Event] = None) -> None:
    """One Ray task per point, reserving ``settings["workers"]`` CPUs, retried up to RAY_MAX_RETRIES times
    when its worker dies. Joins the Ray runtime already initialised in this process, else ``address`` (a
    running cluster, e.g. ``127.0.0.1:6379`` or ``ray://...``), else starts a local one with ``jobs`` CPUs;
    a runtime it started it also stops."""
    ray = _import_ray()
    started = False
    if not ray.is_initialized():
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # parplan sends nothing anywhere
        kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "configure_logging": False}
        if address:
            ray.init(address=address, **kwargs)
        else:  # a runtime on this machine only
            ray.init(address="local", num_cpus=jobs or default_jobs(settings) * settings["workers"],
                     _node_ip_address="127.0.0.1",
                     **kwargs)
        started = True
    try:
        base_ref = ray.put(base)  # shipped once; each task receives the object, not a copy in its arguments
        cal_ref = ray.put(calibration())
        remote = ray.remote(num_cpus=settings["workers"], max_retries=RAY_MAX_RETRIES,
                            retry_exceptions=False)(solve_point)
        refs = {remote.remote(base_ref, diff, settings, cal_ref): task_id for task_id, diff in tasks}
        pending = list(refs)
        try:
            while pending:
                done, pending = ray.wait(pending, num_returns=1, timeout=POLL_S)
                if cancel is not None and cancel.is_set():
                    raise Cancelled()
                for ref in done:
                    try:
                        out = ray.get(ref)
                    except Exception as err:  # retries exhausted (worker or node lost)
                        out = {"error": f"Ray task failed after {RAY_MAX_RETRIES} retries: {type(err).__name__}"}
                    on_result(refs[ref], out)
        except BaseException:
            for ref in pending:
                ray.cancel(ref, force=True)
            raise
    finally:
        if started:
            ray.shutdown()


ENGINES = ("local", "ray")


def run_engine(engine: str, tasks: list[tuple[int, dict[str, Any]]], base: dict[str, Any],
               settings: dict[str, Any], on_result: OnResult, *, jobs: Optional[int] = None,
               ray_address: Optional[str] = None, cancel: Optional[threading.Event] = None,
               worker_memory_budget_mib: Optional[int] = None) -> None:
    if engine == "local":
        run_local(tasks, base, settings, on_result, jobs=jobs, cancel=cancel,
                  worker_memory_budget_mib=worker_memory_budget_mib)
    elif engine == "ray":
        run_ray(tasks, base, settings, on_result, address=ray_address, jobs=jobs, cancel=cancel)
    else:  # pragma: no cover - the CLI and sweep() check the name
        raise ValueError(f"unknown engine {engine!r}")


__all__ = ["ENGINES", "Cancelled", "EngineUnavailable", "RAY_EXTRA_HINT", "solve_point", "run_local", "run_ray", "run_engine",
           "calibration", "default_jobs"]
