"""Capacity sweeps: one planner call per point of a grid of what-ifs, on a local process pool or on Ray.

A thin adapter over the library (``parplan.optimize``), one concept per module:

* :mod:`.spec` -- the sweep spec (``base``, ``axes``/``points``, ``budget``, ``deadline_h``, ``prices``, ``energy``);
* :mod:`.points` -- the grid: dotted spec keys applied to the base spec, each point validated;
* :mod:`.engines` -- where points are solved: ``local`` (a process pool) or ``ray``;
* :mod:`.store` -- the result store: one file per point, keyed by a content hash, written as it completes;
* :mod:`.records` -- per-point derived figures (time to train, GPU-hours, cost, energy), the cost x time
  Pareto set and the scaling curves with their knee;
* :mod:`.report` -- the table, CSV, JSON Lines, Parquet and plots;
* :mod:`.run` -- the sweep itself (``run_sweep``, and the library's :func:`sweep`).

Nothing here imports Ray until the Ray engine is asked for.
"""

from parplan.library.sweep.run import sweep  # noqa: F401

__all__ = ["sweep"]
