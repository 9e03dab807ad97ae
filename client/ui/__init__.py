"""The plan explorer (issue 42 item 1): ``solver-cli ui`` and ``solver-cli serve --ui`` serve a local web page.

* :mod:`.payloads` -- the JSON answers, built by the library (spec editing, top-K, frontiers, a plan's ledger,
  relaxations, sweeps, exports);
* :mod:`.timeline` -- a plan's pipeline schedule as chunks per rank;
* :mod:`.sweep_runs` -- a sweep started from the page, one at a time, in a background thread;
* :mod:`.app` -- the Starlette app (the endpoints and the page's assets in ``static/``);
* :mod:`.runner` -- uvicorn on 127.0.0.1, in the foreground or in a thread beside the gRPC service.

Starlette and uvicorn come with the optional ``ui`` extra; nothing imports them before a ``ui`` command runs.
"""
