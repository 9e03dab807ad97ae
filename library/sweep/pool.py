"""The local engine's worker processes: each one ``python -m parplan.library.sweep.worker``, fed points over
its stdin and answering on its stdout.

Why not multiprocessing: its ``spawn`` and ``forkserver`` workers re-run the caller's ``__main__`` module
before they run anything (multiprocessing/spawn.py, ``prepare`` -> ``_fixup_main_from_path``; the docs' "Safe
importing of main module"), so a plain script that calls ``parplan.sweep`` with no ``if __name__ ==
"__main__"`` guard would start a sweep inside each worker, and every point came back "a pool worker died"
(issue 42). ``fork`` is not safe in a process with solver or gRPC threads. A worker started as our own
module imports parplan and nothing of the caller's; it gets the driver's ``sys.path`` (as spawn ships it).

Each worker solves one point at a time; a worker that dies is replaced and its point run once more on
another; a second death makes that point's record an error. Only the driver's cancel or interrupt stops
the workers early (killed, not waited for).
"""

from __future__ import annotations

import os
import pickle
import queue
import subprocess
import sys
import threading
from collections import deque
from typing import Any, Callable, Optional

WORKER_MODULE = "parplan.library.sweep.worker"
DIED = "a pool worker died while solving this point"


class _Worker:
    def __init__(self, init: tuple[Any, ...], answers: "queue.Queue[tuple[_Worker, Any]]"):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        self.proc = subprocess.Popen([sys.executable, "-m", WORKER_MODULE], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=env)
        self.task: Optional[int] = None
        self._send(init)
        threading.Thread(target=self._read, args=(answers,), daemon=True).start()

    def _read(self, answers: "queue.Queue[tuple[_Worker, Any]]") -> None:
        try:
            while True:
                answers.put((self, pickle.load(self.proc.stdout)))
        except Exception:  # EOF or a torn answer: the worker is gone
            answers.put((self, None))

    def _send(self, message: Any) -> None:
        try:
            pickle.dump(message, self.proc.stdin)
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):  # it died: the reader reports it
            pass

    def give(self, task_id: Optional[int], message: Any) -> None:
        self.task = task_id
        if task_id is None:
            self.close()
        else:
            self._send(message)

    def close(self) -> None:
        try:
            self.proc.stdin.close()  # the worker's end of input: it exits
        except OSError:
            pass

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.close()
        self.proc.wait()


def run_pool(tasks: list[tuple[int, dict[str, Any]]], init: tuple[Any, ...], settings: dict[str, Any], jobs: int,
             on_result: Callable[[int, dict[str, Any]], None], should_stop: Callable[[], bool],
             poll_s: float) -> None:
    """Solve ``tasks`` ((id, diff) pairs) on ``jobs`` workers, each first sent ``init`` (its arguments to
    ``engines._init_worker``); ``on_result(id, output)`` runs here as each lands; ``should_stop()``, called at least every ``poll_s``,
    raises to stop the sweep (the workers are killed, the exception goes on)."""
    diffs = dict(tasks)
    pending, died_once = deque(task_id for task_id, _ in tasks), set()
    answers: "queue.Queue[tuple[_Worker, Any]]" = queue.Queue()
    workers: list[_Worker] = []
    left = len(tasks)

    def feed(worker: _Worker) -> None:
        task_id = pending.popleft() if pending else None
        worker.give(task_id, None if task_id is None else (task_id, diffs[task_id], settings))

    try:
        for _ in range(max(1, min(jobs, len(tasks)))):
            workers.append(_Worker(init, answers))
            feed(workers[-1])
        while left:
            try:
                worker, answer = answers.get(timeout=poll_s)
            except queue.Empty:
                should_stop()
                continue
            should_stop()
            if answer is None:  # the worker died (or ended: then it held no point)
                workers.remove(worker)
                worker.stop()
                if worker.task is None:
                    continue
                if worker.task in died_once:
                    left -= 1
                    on_result(worker.task, {"error": f"{DIED} (exit code {worker.proc.returncode})"})
                else:
                    died_once.add(worker.task)
                    pending.appendleft(worker.task)
                if pending:
                    workers.append(_Worker(init, answers))
                    feed(workers[-1])
                continue
            task_id, out = answer
            worker.task = None
            left -= 1
            on_result(task_id, out)
            feed(worker)
    finally:
        for worker in workers:
            worker.stop()


__all__ = ["run_pool", "WORKER_MODULE", "DIED"]
