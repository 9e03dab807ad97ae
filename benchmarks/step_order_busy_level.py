#!/usr/bin/env python3
"""Prototype (issue 39 item 1, not used by the solver): one DualPipe choice of an answers digest solved exactly under
its step order by enumerating the plans whose every rank's busy time is at most a known plan's step order, then
evaluating their step orders at once.

    python benchmarks/step_order_busy_level.py DIGEST.json "DeepSeek-V3 671B / 2048 H800, 4K top1"

Why it is exact: a rank's busy time (its operations' sum) is a path of the step order's graph, so a plan with a rank
busier than a known plan's step order E cannot beat E; every other plan is enumerated. Decisions: per-stage layers
(stage 0 holds the leading dense layers, every stage a layer), no recompute, no memory rule, no DP term (the plan's
choice otherwise, as benchmarks/step_order_event_model.py). Rank busy time and the step order from the reference graph
(costmodel/schedules/step_order_compressed.py), the latter vectorised over all enumerated plans (NumPy, one pass over
the graph's operations). Measured (12:55-13:05 UTC, load ~2 on 2 shared cores): Mixtral's DualPipe choice (p = 8):
2,401 plans enumerated in 0.01 s, their step orders in 0.05 s, least 5.585040 s at [4 x 8] (5 tied within 1e-9);
DeepSeek-V3's (p = 32, m = 480): 4,060 plans in 0.13 s, step orders in 2.27 s, least 21.940127 s at
[3, 1, 1, 2 x 18, 1, 2 x 9, 1], 1.41 ms under the digest plan's 21.941537 s; 70B GB200's p = 2 choice: 7 plans, all
tied. 405B's (p = 64, dense): killed after 289 s (memory): every rank's busy time is the same at each of its splits
(no all-to-all), so the splits multiply (about 3 per rank over 32 ranks) and enumeration does not scale there."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


class Choice:
    """One digest plan's choice: its per-stage table and the reference graph's structure."""

    def __init__(self, path: str, key: str):
        from step_order_bound import paired_plans
        from step_order_event_model import stage_table
        from parplan.costmodel.evaluation.choice import choice_costs
        from parplan.costmodel.schedules.dualpipe_steps import step_structure, step_orders
        from parplan.costmodel.schedules.step_order_compressed import reference_microbatches
        from parplan.costmodel.spec.assumptions import resolve_assumptions
        from parplan.costmodel.spec.hardware import resolve_gpu

        self.key, _, spec, plan, _ = next(p for p in paired_plans(path) if p[0].startswith(key))
        a = resolve_assumptions(spec.assumptions)
        costs = choice_costs(spec, plan.to_choice(), resolve_gpu(spec.cluster), a)
        self.plan, self.f = plan, costs.fwd_share
        self.w = a.zb_weight_grad_fraction * min(1.0, max(0.0, costs.weight_grad_share))
        self.p, self.L, self.most = plan.pp, spec.model.num_layers, max(plan.stage_layers) + 3
        self.tab = stage_table(spec, plan, costs, self.most)
        m0, per = reference_microbatches(plan.schedule, plan.pp)
        self.st, self.delta = step_structure(plan.schedule, plan.pp, m0), (plan.num_microbatches - m0) // per
        at = {node: i for i, node in enumerate(self.st.node)}
        orders = step_orders(plan.schedule, plan.pp, m0)
        self.rank_ops = [np.array([at[(r, j)] for j in range(len(ops))]) for r, ops in enumerate(orders)]
        self.last = [[at[(r, j)] for j, op in enumerate(ops) if op.step == 4 and op.kind == "FB"][-2:]
                     for r, ops in enumerate(orders)]

    def durations(self, layers: np.ndarray) -> np.ndarray:
        """Every reference operation's duration for each plan of ``layers`` (plans x stages): (operations, plans)."""
        T, C, X = (np.array([[self.tab[s, n][q] for s, n in enumerate(row)] for row in layers]).T for q in range(3))
        st, f, w = self.st, self.f, self.w
        a, b = st.stage, st.stage_b
        lone_f = f * T[a] + X[a] / 2
        lone_b = np.where(st.zb[:, None], (1 - f) * T[a] * (1 - w), (1 - f) * T[a]) + X[a] / 2
        pair = (f * T[a] + (1 - f) * T[b] + np.maximum(0, X[a] / 2 - (1 - f) * C[b])
                + np.maximum(0, X[b] / 2 - f * C[a]))
        return np.choose(np.broadcast_to(st.kind[:, None], lone_f.shape), [lone_f, lone_b, pair, w * (1 - f) * T[a]])

    def busy(self, D: np.ndarray, r: int) -> np.ndarray:
        """Rank r's busy time at the plan's micro-batch count (its reference operations plus the extra iterations)."""
        return D[self.rank_ops[r]].sum(axis=0) + self.delta * (D[self.last[r][0]] + D[self.last[r][1]])

    def step(self, D: np.ndarray) -> np.ndarray:
        """The compressed step order of every plan (columns of ``D``)."""
        st, n = self.st, D.shape[0]
        end, succ = np.zeros_like(D), [[] for _ in range(n)]
        for i, (ins, prev) in enumerate(zip(st.inputs, st.prev)):
            preds = list(ins) + ([prev] if prev >= 0 else [])
            end[i] = D[i] + (end[preds].max(axis=0) if preds else 0.0)
            for x in preds:
                succ[x].append(i)
        rest = np.zeros_like(D)
        for i in reversed(range(n)):
            rest[i] = D[i] + (rest[succ[i]].max(axis=0) if succ[i] else 0.0)
        best = np.zeros(D.shape[1])
        for last in self.last:
            extra = self.delta * (D[last[0]] + D[last[1]])
            for o in last:
                best = np.maximum(best, end[o] + rest[o] - D[o] + extra)
        return best


def allowed_splits(ch: Choice, limit: float) -> list[list[tuple[int, int]]]:
    """Per DualPipe rank u (stages u and p-1-u), the splits whose busy time is at most ``limit``."""
    p, out = ch.p, []
    for u in range(p // 2):
        splits = [(la, lb) for la in range(1, ch.most + 1) for lb in range(1, ch.most + 1)
                  if ch.tab[u, la] is not None and ch.tab[p - 1 - u, lb] is not None]
        layers = np.tile(np.array(ch.plan.stage_layers), (len(splits), 1))
        layers[:, u], layers[:, p - 1 - u] = [s[0] for s in splits], [s[1] for s in splits]
        busy = ch.busy(ch.durations(layers), u)
        out.append([s for s, b in zip(splits, busy) if b <= limit * (1 + 1e-12)])
    return out


def enumerate_plans(ch: Choice, allowed: list) -> np.ndarray:
    """Every per-stage layer vector taking one allowed split per rank and the model's layers in all."""
    p, rows = ch.p, []
    totals = [sorted({la + lb for la, lb in splits}) for splits in allowed]
    low = [sum(t[0] for t in totals[u:]) if all(totals[u:]) else 1 << 30 for u in range(len(totals) + 1)]
    high = [sum(t[-1] for t in totals[u:]) if all(totals[u:]) else -1 for u in range(len(totals) + 1)]

    def walk(u: int, left: int, acc: list) -> None:
        if not low[u] <= left <= high[u]:  # the ranks left cannot take exactly what is left
            return
        if u == len(allowed):
            if left == 0:
                row = [0] * p
                for v, (la, lb) in enumerate(acc):
                    row[v], row[p - 1 - v] = la, lb
                rows.append(row)
            return
        for la, lb in allowed[u]:
            if la + lb <= left:
                walk(u + 1, left - la - lb, acc + [(la, lb)])

    walk(0, ch.L, [])
    return np.array(rows, np.int64)


def main(path: str, key: str) -> None:
    ch = Choice(path, key)
    known = float(ch.step(ch.durations(np.array([ch.plan.stage_layers])))[0])
    t0 = time.perf_counter()
    plans = enumerate_plans(ch, allowed_splits(ch, known))
    t1 = time.perf_counter()
    steps = ch.step(ch.durations(plans))
    i = int(np.argmin(steps))
    print(f"{ch.key}: {len(plans)} plans with every rank's busy time <= the digest plan's step order {known:.6f} s "
          f"(enumerated in {t1 - t0:.2f} s); their step orders in {time.perf_counter() - t1:.2f} s: least "
          f"{steps[i]:.6f} s at {plans[i].tolist()} ({int((steps <= steps[i] * (1 + 1e-9)).sum())} within 1e-9)")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
