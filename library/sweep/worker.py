"""A local sweep worker: ``python -m parplan.library.sweep.worker`` (started by library/sweep/pool.py).

Reads pickles from stdin: first ``(base, calibration, memory_budget_mib)``, then ``(task_id, diff,
settings)`` per point, and writes ``(task_id, solve output)`` for each to its stdout; ends at the end of its
input. Anything else printed to stdout goes to stderr, so the answers channel carries only answers.
"""

from __future__ import annotations

import os
import pickle
import sys


def main() -> None:
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # fd 1 (print, the solver's C++ logging) now writes to stderr
    from parplan.library.sweep import engines

    source = sys.stdin.buffer
    engines._init_worker(*pickle.load(source))
    while True:
        try:
            task_id, diff, settings = pickle.load(source)
        except EOFError:
            return
        pickle.dump((task_id, engines._solve_shipped(diff, settings)), answers)
        answers.flush()


if __name__ == "__main__":
    main()
