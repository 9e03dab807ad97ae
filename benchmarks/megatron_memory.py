"""Print our default model's stage-0 memory next to Megatron-LM's theoretical memory formula.

    python benchmarks/megatron_memory.py

Cases, oracle and comparison live in ``tests/megatron_memory_cases.py`` and
``tests/megatron_theoretical_memory.py`` (shared with ``tests/costmodel/memory/test_megatron_memory.py``); the
differences are explained in ``docs/megatron-memory.md``. All figures are GiB per GPU on the first
pipeline stage; "ours" is the evaluator's per-stage ledger (no memory reserve, no usable fraction).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from megatron_memory_cases import CASES, activation_budget, compare, layer_table, table  # noqa: E402


def main() -> None:
    rows = [compare(c) for c in CASES]
    print("Stage-0 memory per GPU, GiB: Megatron-LM theoretical_memory_usage.py vs parplan default preset")
    print("(recompute selective, sequence parallel, distributed optimizer -> ZeRO-1 over DP, none -> ZeRO-0;")
    print(" Δ = ours / Megatron - 1; row 8 (MoE) compares weights only: Megatron's activation formula has no MoE term)")
    print()
    print(table(rows))
    print()
    print("Per transformer layer, one micro-batch, one GPU (Megatron: s·b·h·(18 + 4·ffn/h)/t; TP1: no-SP branch (10+24/t)·1.05):")
    print()
    print(layer_table(rows))
    print()
    print("Activation difference, ours - Megatron, split into the documented items (GiB):")
    print()
    dense = [c for c in CASES if c.activations_comparable]
    budgets = [activation_budget(c) for c in dense]
    keys: list[str] = []
    for b in budgets:
        keys += [k for k in b if k not in keys]
    print("| # | model | parallelism | " + " | ".join(keys) + " | sum | actual |")
    print("|" + "---|" * (len(keys) + 5))
    dense_rows = [r for r in rows if r.case.activations_comparable]
    for i, (c, b, r) in enumerate(zip(dense, budgets, dense_rows), 1):
        cells = " | ".join(f"{b[k]:+.3f}" if k in b else "" for k in keys)
        print(f"| {i} | {c.name} | {c.parallel} | {cells} | {sum(b.values()):+.3f} | "
              f"{r.our_act_total_gib - r.meg_act_gib:+.3f} |")
    print()
    print("Checks with dropout_masks: true (the model trains with hidden dropout, as GPT-3 does):")
    print()
    print(table([compare(c, dropout_masks=True) for c in CASES if not c.swiglu]))


if __name__ == "__main__":
    main()
