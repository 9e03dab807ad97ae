"""The explorer's web app: the page and its assets (client/ui/static/, shipped in the wheel) and the JSON
endpoints of :mod:`parplan.client.ui.payloads`, on Starlette served by uvicorn (the optional ``ui`` extra).

Every endpoint takes a JSON body and answers JSON: 200 with the payload, 400 ``{"error", "field"}`` for bad
input (a :class:`~parplan.costmodel.errors.ParplanError`, a body that is not a JSON object or larger than
:data:`MAX_BODY_BYTES`), 500 only for a bug. Solves run in a worker thread, one at a time
(:data:`SOLVE_SLOTS`), so the page stays responsive and two tabs do not overload the machine.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any, Callable

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from parplan.client.ui import payloads, sweep_runs
from parplan.costmodel.errors import ParplanError

STATIC_DIR = Path(__file__).with_name("static")
MAX_BODY_BYTES = 8 * 2**20  # a spec, a config.json or a plan: far below this
SOLVE_SLOTS = threading.BoundedSemaphore(1)


def _bad(message: str, field: str) -> JSONResponse:
    return JSONResponse({"error": f"{field}: {message}", "field": field}, status_code=400)


def _endpoint(build: Callable[[Any], dict[str, Any]], solves: bool = False) -> Callable:
    """A POST endpoint answering ``build(body)`` as JSON, bad input as 400 naming the field."""

    async def handler(request: Request) -> Response:
        raw = await request.body()
        if len(raw) > MAX_BODY_BYTES:
            return _bad(f"larger than {MAX_BODY_BYTES // 2**20} MiB", "body")
        try:
            body = json.loads(raw or b"{}")
        except ValueError as err:
            return _bad(f"not JSON ({err})", "body")
        if not isinstance(body, dict):
            return _bad("expected a JSON object", "body")

        def run() -> dict[str, Any]:
            if not solves:
                return build(body)
            with SOLVE_SLOTS:
                return build(body)

        try:
            data = await run_in_threadpool(run)
        except ParplanError as err:
            return JSONResponse(payloads.error_body(err), status_code=400)
        return JSONResponse(data)

    return handler


async def _index(request: Request) -> Response:
    return FileResponse(STATIC_DIR / "index.html")


async def _presets(request: Request) -> Response:
    return JSONResponse(await run_in_threadpool(payloads.presets))


def create_app() -> Starlette:
    """The explorer's ASGI app."""
    routes = [
        Route("/", _index),
        Route("/favicon.ico", lambda request: Response(status_code=204)),  # no icon: not a 404 in the console
        Route("/api/presets", _presets),
        Route("/api/validate", _endpoint(payloads.validate), methods=["POST"]),
        Route("/api/optimize", _endpoint(payloads.optimize, solves=True), methods=["POST"]),
        Route("/api/plan", _endpoint(payloads.plan_view), methods=["POST"]),
        Route("/api/patch", _endpoint(payloads.apply_patch), methods=["POST"]),
        Route("/api/hf_import", _endpoint(payloads.hf_import), methods=["POST"]),
        Route("/api/export", _endpoint(payloads.export), methods=["POST"]),
        Route("/api/sweep", _endpoint(payloads.sweep), methods=["POST"]),
        Route("/api/sweep_run", _endpoint(sweep_runs.start), methods=["POST"]),
        # follow_symlink: a strict editable install (.ci/run) places each asset as a link to the source tree, which
        # StaticFiles answers 404 by default; the request's path is still checked to stay inside STATIC_DIR
        Mount("/static", app=StaticFiles(directory=STATIC_DIR, follow_symlink=True), name="static"),
    ]
    return Starlette(routes=routes)


__all__ = ["create_app", "STATIC_DIR", "MAX_BODY_BYTES"]
