"""Discrete-event simulation of pipeline schedules, shared by the tests that check the cost model's bubble
(tests/costmodel/schedules/test_uneven_bubble.py: unequal stages; tests/costmodel/evaluation/test_pools.py: stages on pools of different GPUs)."""

from __future__ import annotations


def simulate_1f1b(F: list[float], B: list[float], m: int) -> float:
    """The step time of a 1F1B schedule (PipeDream-flush; Narayanan et al. SC'21 §2.2): stage i runs
    min(p-i-1, m) warm-up forwards, then one forward and one backward in turn, then the remaining backwards;
    each op waits for its input (the previous stage's forward, the next stage's backward) and the stage's
    previous op. Communication is free."""
    p = len(F)
    order = []
    for i in range(p):
        warm = min(p - i - 1, m)
        ops = [("F", j) for j in range(warm)]
        for j in range(warm, m):
            ops += [("F", j), ("B", j - warm)]
        ops += [("B", j) for j in range(m - warm, m)]
        order.append(ops)
    done: dict = {}
    ptr, free = [0] * p, [0.0] * p
    moved = True
    while moved:
        moved = False
        for i in range(p):
            while ptr[i] < len(order[i]):
                kind, j = order[i][ptr[i]]
                if kind == "F":
                    ready = done.get(("F", i - 1, j)) if i > 0 else 0.0
                else:
                    ready = done.get(("B", i + 1, j)) if i < p - 1 else done.get(("F", i, j))
                if ready is None:
                    break
                free[i] = max(ready, free[i]) + (F[i] if kind == "F" else B[i])
                done[(kind, i, j)] = free[i]
                ptr[i] += 1
                moved = True
    assert all(ptr[i] == 2 * m for i in range(p))
    return max(free)
