"""Serve the explorer with uvicorn: in the foreground (``solver-cli ui``) or in a daemon thread
(``solver-cli serve --ui``, the tests)."""

from __future__ import annotations

import threading
import time
from typing import Optional

UI_MODULES = ("starlette", "uvicorn")  # what the optional 'ui' extra installs (client/cli_errors.py EXTRA_MODULES)
STARTUP_TIMEOUT_S = 20.0


def make_server(host: str = "127.0.0.1", port: int = 8765):
    """A uvicorn server of the explorer's app (not started)."""
    import uvicorn

    from parplan.client.ui.app import create_app

    config = uvicorn.Config(create_app(), host=host, port=port, log_level="warning", access_log=False,
                            lifespan="off", timeout_graceful_shutdown=2)
    return uvicorn.Server(config)


def bound_url(server) -> str:
    """``http://HOST:PORT/`` of a started server (the port it bound when asked for port 0)."""
    sock = server.servers[0].sockets[0]
    host, port = sock.getsockname()[:2]
    return f"http://{host}:{port}/"


def start_in_thread(host: str = "127.0.0.1", port: int = 0):
    """(server, url): the explorer started in a daemon thread; ``server.should_exit = True`` stops it."""
    server = make_server(host, port)
    server.install_signal_handlers = lambda: None  # not the main thread: leave the signals to the caller
    thread = threading.Thread(target=server.run, name="parplan-ui", daemon=True)
    thread.start()
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise OSError(f"the explorer could not listen on {host}:{port}")
        time.sleep(0.02)
    return server, bound_url(server)


def serve_forever(host: str, port: int, open_browser: bool, announce: Optional[callable] = None) -> None:
    """Run the explorer until interrupted, printing its address (and opening it in a browser when asked)."""
    server, url = start_in_thread(host, port)
    if announce is not None:
        announce(f"plan explorer on {url} (Ctrl-C stops it)")
    if open_browser:
        import webbrowser

        webbrowser.open(url)
    try:
        while server.started and not server.should_exit:
            time.sleep(0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.should_exit = True


__all__ = ["make_server", "start_in_thread", "serve_forever", "UI_MODULES"]
