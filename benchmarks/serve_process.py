"""``solver-cli serve`` in a subprocess for the service benchmarks (load.py, fuzz_service.py, cli_startup.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Optional

REPO = Path(__file__).resolve().parents[1]


def start_serve(*args: str, on_line: Optional[Callable[[str], None]] = None,
                timeout_s: float = 60) -> tuple[subprocess.Popen, int]:
    """``solver-cli serve --port 0 ARGS`` and the port it reports in its JSON log (stderr). A thread keeps draining
    the log for the server's life (a full pipe would block it), handing every line to ``on_line``."""
    proc = subprocess.Popen([sys.executable, "-m", "parplan.client.cli", "serve", "--port", "0", *args], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    port: list[int] = []

    def read():
        for line in proc.stderr:
            if '"serving"' in line and not port:
                port.append(int(json.loads(line)["address"].rsplit(":", 1)[1]))
            elif on_line is not None:
                on_line(line)

    threading.Thread(target=read, daemon=True).start()
    deadline = time.monotonic() + timeout_s
    while not port:
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError("solver-cli serve did not start")
        time.sleep(0.05)
    return proc, port[0]


def stop_serve(proc: subprocess.Popen, grace_s: float = 30) -> None:
    """SIGTERM (the server drains), then SIGKILL past ``grace_s``."""
    proc.terminate()
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
