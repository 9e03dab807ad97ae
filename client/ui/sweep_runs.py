"""Sweeps started from the explorer's page: one at a time, run by the library (:func:`run_sweep`, the local
engine) in a background thread into a folder, which the page follows as its points land (the store writes each
point when it completes, library/sweep/store.py; :func:`parplan.client.ui.payloads.sweep` reads it)."""

from __future__ import annotations

import os
import threading
from typing import Any, Optional

from parplan.costmodel.errors import ArgumentError

_LOCK = threading.Lock()
_STATE: dict[str, Any] = {"thread": None, "folder": None, "error": None}


def _run(sweep: Any, folder: str) -> None:
    from parplan.library.sweep.run import run_sweep

    try:
        run_sweep(sweep, folder, plots=False)
    except Exception as err:  # shown on the page by the next /api/sweep of this folder
        _STATE["error"] = f"{type(err).__name__}: {err}"


def start(body: Any) -> dict[str, Any]:
    """Start the sweep ``body["sweep_yaml"]`` (a sweep spec, library/sweep/spec.py) into ``body["folder"]``;
    a sweep already running is an error naming ``folder``."""
    from parplan.client.ui.payloads import field_of
    from parplan.library.spec_io import parse_yaml
    from parplan.library.sweep.points import load_sweep

    text = field_of(body, "sweep_yaml", str)
    folder = os.path.abspath(os.path.expanduser(field_of(body, "folder", str)))
    sweep = load_sweep(parse_yaml(text, "sweep") if text.strip() else None, sweep_dir=os.getcwd())
    with _LOCK:
        running: Optional[threading.Thread] = _STATE["thread"]
        if running is not None and running.is_alive():
            raise ArgumentError("folder", f"a sweep is already running into {_STATE['folder']}", folder)
        thread = threading.Thread(target=_run, args=(sweep, folder), name="parplan-ui-sweep", daemon=True)
        _STATE.update(thread=thread, folder=folder, error=None)
        thread.start()
    return {"started": True, "folder": folder, "total": len(sweep.points)}


def status_of(folder: str) -> dict[str, Any]:
    """``{"running", "error"}`` of the page's sweep when it writes into ``folder`` (else not running)."""
    mine = _STATE["folder"] == os.path.abspath(os.path.expanduser(folder))
    thread = _STATE["thread"]
    return {"running": bool(mine and thread is not None and thread.is_alive()),
            "error": _STATE["error"] if mine else None}


__all__ = ["start", "status_of"]
